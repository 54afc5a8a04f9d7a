package store

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Apply applies entries in one Pebble batch together with the new applied
// index and epoch (those of the last entry), committed under the store's
// SyncPolicy. entries[0].Index must be AppliedIndex()+1 and the indexes
// contiguous, else ErrIndexGap and nothing is applied. responses[i] is the
// response to entries[i]: the Applier's, or for a deduplicated request the
// original's (ApplyOutcomes tells them apart).
//
// An Applier error (or panic) aborts the call: nothing of it is written, and
// the error wraps ErrApply and the Applier's error. An empty entries is a
// no-op.
func (s *Store) Apply(entries []Entry) (responses [][]byte, err error) {
	outs, err := s.ApplyOutcomes(entries)
	if err != nil || outs == nil {
		return nil, err
	}
	responses = make([][]byte, len(outs))
	for i, o := range outs {
		responses[i] = o.Response
	}
	return responses, nil
}

// ApplyOutcomes is Apply, reporting for each entry whether it was applied
// or deduplicated through the request table (see doc.go, "Request table").
func (s *Store) ApplyOutcomes(entries []Entry) (outcomes []Outcome, err error) {
	if !s.gate.enter() {
		return nil, ErrClosed
	}
	defer s.gate.leave()
	if s.opts.ReadOnly {
		return nil, ErrReadOnly
	}
	if err := s.stall.stalled(); err != nil {
		return nil, err
	}
	if len(entries) == 0 {
		return nil, nil
	}
	s.applyMu.Lock()
	defer s.applyMu.Unlock()

	applied := s.applied.Load()
	for i, e := range entries {
		if want := applied + 1 + uint64(i); e.Index != want {
			return nil, fmt.Errorf("%w: entry %d of %d has index %d, want %d (applied %d)",
				ErrIndexGap, i, len(entries), e.Index, want, applied)
		}
	}

	if s.hasher == nil {
		s.hasher = newEntryHasher()
	}
	eh := s.hasher
	rh := s.run.get()
	hashes := make([]RunHash, 0, len(entries))
	pb := s.db.NewIndexedBatch()
	defer pb.Close()
	ub := &batch{b: pb, eh: eh}
	ra := &reqApplier{s: s, pb: pb}
	committed := false
	defer func() {
		if !committed {
			s.reqQ.valid = false // the queue may hold this batch's changes
		}
	}()
	outcomes = make([]Outcome, len(entries))
	for i, e := range entries {
		eh.begin(rh.Sum, e.Index)
		out, err := s.applyEntry(ub, ra, e)
		if err != nil {
			return nil, fmt.Errorf("%w: index %d: %w", ErrApply, e.Index, err)
		}
		eh.outcome(out)
		rh.Index, rh.Sum = e.Index, eh.sum()
		hashes = append(hashes, rh)
		outcomes[i] = out
	}
	ub.done = true
	last := entries[len(entries)-1]
	// The running hash goes in the same batch, before the applied key
	// (which every Apply writes last: see walpos.go).
	if err := pb.Set(keyRunHash, encodeRunHash(rh), nil); err != nil {
		return nil, fmt.Errorf("store: apply: %w", err)
	}
	if err := writeHistory(pb, entries, hashes, applied); err != nil {
		return nil, fmt.Errorf("store: apply: history: %w", err)
	}
	if err := pb.Set(keyApplied, encodeApplied(position{last.Index, last.Epoch, last.Batch}), nil); err != nil {
		return nil, fmt.Errorf("store: apply: %w", err)
	}
	if err := pb.Commit(s.writeOpts); err != nil {
		return nil, fmt.Errorf("store: apply: commit indexes %d..%d: %w", entries[0].Index, last.Index, err)
	}
	committed = true
	s.run.add(hashes)
	s.pos.Store(&position{index: last.Index, epoch: last.Epoch, batch: last.Batch})
	s.applied.Store(last.Index)
	s.epoch.Store(last.Epoch)
	return outcomes, nil
}

// applyEntry applies one entry: a plain one through the Applier; a request
// through the request table (expire, then deduplicate or apply and record).
func (s *Store) applyEntry(ub *batch, ra *reqApplier, e Entry) (Outcome, error) {
	req, payload, ok := DecodeRequest(e.Data)
	e.Data, e.RequestID = payload, req.ID
	if !ok || req.ID.IsZero() {
		resp, err := s.applyOne(ub, e)
		return Outcome{Response: resp, Index: e.Index}, err
	}
	if err := ra.expire(e.Index, req); err != nil {
		return Outcome{}, err
	}
	rec, found, err := ra.lookup(req.ID)
	if err != nil {
		return Outcome{}, err
	}
	ph := PayloadHash(payload)
	if found {
		if rec.PayloadHash != ph {
			return Outcome{Index: rec.Index, Conflict: true}, nil
		}
		return Outcome{Response: rec.Response, Index: rec.Index, Duplicate: true}, nil
	}
	resp, err := s.applyOne(ub, e)
	if err != nil {
		return Outcome{}, err
	}
	err = ra.record(req.ID, RequestRecord{Index: e.Index, Stamp: req.Stamp, Response: resp, PayloadHash: ph})
	return Outcome{Response: resp, Index: e.Index}, err
}

// applyOne runs the Applier on one entry, turning a panic into an error.
func (s *Store) applyOne(b *batch, e Entry) (resp []byte, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("applier panicked: %v", r)
		}
	}()
	return s.opts.Applier.Apply(b, e)
}

// batch is the Batch handed to an Applier: an indexed Pebble batch over the
// user keyspace.
type batch struct {
	b    *pebble.Batch
	done bool   // set once the Applier returned: further use is ErrClosed
	key  []byte // scratch for mapped keys (Pebble copies what it is given)
	// eh folds every write into the running hash (nil: not hashed).
	eh *entryHasher
}

var _ Batch = (*batch)(nil)

func (b *batch) check(key []byte, what string) error {
	if b.done {
		return fmt.Errorf("%w: batch used after its Apply call", ErrClosed)
	}
	if len(key) == 0 {
		return fmt.Errorf("%w: %s with an empty key", ErrInvalid, what)
	}
	return nil
}

func (b *batch) Get(key []byte) ([]byte, error) {
	if err := b.check(key, "get"); err != nil {
		return nil, err
	}
	b.key = appendUserKey(b.key[:0], key)
	v, closer, err := b.b.Get(b.key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: get: %w", err)
	}
	out := bytes.Clone(v)
	if out == nil {
		out = []byte{}
	}
	closer.Close()
	return out, nil
}

func (b *batch) Set(key, value []byte) error {
	if err := b.check(key, "set"); err != nil {
		return err
	}
	if b.eh != nil {
		b.eh.op('s', key, value, true)
	}
	b.key = appendUserKey(b.key[:0], key)
	return b.b.Set(b.key, value, nil)
}

func (b *batch) Delete(key []byte) error {
	if err := b.check(key, "delete"); err != nil {
		return err
	}
	if b.eh != nil {
		b.eh.op('d', key, nil, false)
	}
	b.key = appendUserKey(b.key[:0], key)
	return b.b.Delete(b.key, nil)
}

func (b *batch) DeleteRange(start, end []byte) error {
	if err := b.check(start, "delete-range"); err != nil {
		return err
	}
	if bytes.Compare(start, end) >= 0 {
		return fmt.Errorf("%w: delete-range start %q >= end %q", ErrInvalid, start, end)
	}
	if b.eh != nil {
		b.eh.op('r', start, end, true)
	}
	return b.b.DeleteRange(appendUserKey(nil, start), appendUserKey(nil, end), nil)
}

func (b *batch) Scan(lower, upper []byte, fn func(key, value []byte) error) error {
	if b.done {
		return fmt.Errorf("%w: batch used after its Apply call", ErrClosed)
	}
	if lower != nil && upper != nil && bytes.Compare(lower, upper) > 0 {
		return fmt.Errorf("%w: scan lower %q > upper %q", ErrInvalid, lower, upper)
	}
	lo, hi := userBounds(lower, upper)
	it, err := b.b.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("store: scan: %w", err)
	}
	return iterate(it, fn)
}

// iterate calls fn for every key of it (storage keys, prefix stripped) and
// closes it. fn's arguments are valid only until fn returns.
func iterate(it *pebble.Iterator, fn func(k, v []byte) error) (err error) {
	defer func() {
		if cerr := it.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("store: iterator: %w", cerr)
		}
	}()
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			return fmt.Errorf("store: read value: %w", err)
		}
		if err := fn(it.Key()[1:], v); err != nil {
			return err
		}
	}
	if err := it.Error(); err != nil {
		return fmt.Errorf("store: iterate: %w", err)
	}
	return nil
}

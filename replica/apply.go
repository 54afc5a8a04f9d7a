package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
	"github.com/roomlog/roomlog/zkx"
)

// proposalOutcome is what the applier hands a waiting Propose.
type proposalOutcome struct {
	resp []byte
	err  error
	// index is the index that produced resp: the entry's own, or the
	// original's for a deduplicated request (dup).
	index uint64
	dup   bool
}

// outcomeOf turns the store's outcome for the entry at index into what a
// waiting Propose gets.
func outcomeOf(index uint64, o store.Outcome) proposalOutcome {
	if o.Conflict {
		return proposalOutcome{index: o.Index, err: fmt.Errorf("%w: entry %d repeats the request applied at %d",
			ErrRequestConflict, index, o.Index)}
	}
	return proposalOutcome{resp: o.Response, index: o.Index, dup: o.Duplicate}
}

// result is the Result of the entry at index with outcome o.
func (o proposalOutcome) result(index uint64) (Result, error) {
	res := Result{Index: index, Response: o.resp, Duplicate: o.dup}
	if o.index != 0 {
		res.Index = o.index
	}
	return res, o.err
}

// respRing keeps the outcomes of the last n applied entries by index, so a
// Propose whose entry was applied before it registered still gets its
// response. Guarded by Replica.propMu.
type respRing struct {
	idx []uint64
	out []proposalOutcome
}

func newRespRing(n int) *respRing {
	return &respRing{idx: make([]uint64, n), out: make([]proposalOutcome, n)}
}

func (g *respRing) put(index uint64, o proposalOutcome) {
	i := index % uint64(len(g.idx))
	g.idx[i], g.out[i] = index, o
}

func (g *respRing) get(index uint64) (proposalOutcome, bool) {
	i := index % uint64(len(g.idx))
	if g.idx[i] != index {
		return proposalOutcome{}, false
	}
	return g.out[i], true
}

// applyEntries applies one contiguous run to the store and publishes the
// progress: responses to waiting proposals, the applied index, the
// checkpoint policy. Only the apply goroutine of the moment calls it.
func (r *Replica) applyEntries(es []logroom.Entry) error {
	if len(es) == 0 {
		return nil
	}
	ses := make([]store.Entry, len(es))
	var n int64
	for i, e := range es {
		ses[i] = store.Entry{Index: e.Index, Epoch: e.Epoch, Data: e.Data, Batch: store.BatchRef{
			First: e.Batch.First, Count: uint32(e.Batch.Count), CRC: e.Batch.CRC}}
		n += int64(len(e.Data))
	}
	r.storeMu.RLock()
	outs, err := r.st.ApplyOutcomes(ses)
	r.storeMu.RUnlock()
	if err != nil {
		return fmt.Errorf("apply entries %d..%d: %w", es[0].Index, es[len(es)-1].Index, err)
	}
	last := es[len(es)-1].Index
	r.appliedEpoch.Store(es[len(es)-1].Epoch)
	r.propMu.Lock()
	// applied first: a woken Propose must see applied >= its index.
	r.applied.Store(last)
	for i, e := range es {
		o := outcomeOf(e.Index, outs[i])
		r.resps.put(e.Index, o)
		if ch, ok := r.waiters[e.Index]; ok {
			ch <- o
			delete(r.waiters, e.Index)
		}
	}
	r.propMu.Unlock()
	r.noteCommitted(last)
	r.signalApplied()
	r.countForCheckpoint(int64(len(es)), n)
	r.holdAdvance(last)
	if r.m != nil && r.currentTerm() == nil {
		// Standby: how long after its proposer stamped it the newest
		// request of the run is applied here.
		for i := len(es) - 1; i >= 0; i-- {
			if req, _, ok := store.DecodeRequest(es[i].Data); ok && !req.ID.IsZero() {
				r.m.applied(req.Stamp, time.Now())
				break
			}
		}
	}
	return nil
}

// jumpApplied publishes a new applied index reached by restoring a
// checkpoint: waiters at or below it get ErrNoResponse (their entries are
// in the restored state, their responses are not).
func (r *Replica) jumpApplied(index uint64) {
	r.propMu.Lock()
	r.applied.Store(index)
	for i, ch := range r.waiters {
		if i <= index {
			ch <- proposalOutcome{err: fmt.Errorf("%w: entry %d applied through a checkpoint", ErrNoResponse, i)}
			delete(r.waiters, i)
		}
	}
	r.propMu.Unlock()
	r.noteCommitted(index)
	r.signalApplied()
}

// failWaiters fails every waiting proposal with err (Close).
func (r *Replica) failWaiters(err error) {
	r.propMu.Lock()
	defer r.propMu.Unlock()
	for i, ch := range r.waiters {
		ch <- proposalOutcome{err: err}
		delete(r.waiters, i)
	}
}

func (r *Replica) noteCommitted(index uint64) {
	for {
		cur := r.committedHi.Load()
		if index <= cur || r.committedHi.CompareAndSwap(cur, index) {
			return
		}
	}
}

// signalApplied wakes every waiter of appliedChanged: the channel is
// replaced, and the old one (each swap returns a distinct one) closed.
func (r *Replica) signalApplied() {
	ch := make(chan struct{})
	close(*r.appliedCh.Swap(&ch))
}

// appliedChanged returns a channel closed at the next signalApplied; a
// waiter takes it before it reads applied, so no advance is missed.
func (r *Replica) appliedChanged() <-chan struct{} { return *r.appliedCh.Load() }

// countForCheckpoint advances the checkpoint policy counters and pokes the
// checkpointer when a threshold is crossed.
func (r *Replica) countForCheckpoint(entries, bytes int64) {
	e := r.sinceEntries.Add(entries)
	b := r.sinceBytes.Add(bytes)
	if (r.cfg.CheckpointEveryEntries > 0 && e >= int64(r.cfg.CheckpointEveryEntries)) ||
		(r.cfg.CheckpointEveryBytes > 0 && b >= r.cfg.CheckpointEveryBytes) {
		r.ckptTrig.Notify()
	}
}

// WaitApplied returns once the local applied index is at least index (the
// state of a read after it includes that entry), or ctx ends, or the
// replica closes or fails. On a member cut off from ZooKeeper that has not
// reached index it returns ErrUnavailable at once, and a wait under way
// ends with ErrUnavailable the moment the member sees the connection lost.
func (r *Replica) WaitApplied(ctx context.Context, index uint64) error {
	return r.waitApplied(ctx, index, nil, true)
}

// waitApplied waits until index is applied. refuseCutOff: a member cut off
// from ZooKeeper refuses instead of waiting (readers); the replica's own
// waits (a takeover's catch-up, a primary's drain) pass false.
func (r *Replica) waitApplied(ctx context.Context, index uint64, abort <-chan struct{}, refuseCutOff bool) error {
	for {
		ch := r.appliedChanged()
		if r.applied.Load() >= index {
			return nil
		}
		if err := r.usable(); err != nil {
			return err
		}
		var snapChanged <-chan struct{}
		if refuseCutOff {
			s := r.snap.Load()
			if !s.connected || s.linkCut {
				if r.applied.Load() >= index {
					return nil // applied meanwhile: it can be served
				}
				return r.cutOff(s, index)
			}
			snapChanged = s.changed
		}
		select {
		case <-ch:
		case <-snapChanged:
		case <-ctx.Done():
			return ctx.Err()
		case <-abort:
			return errTermEnded
		case <-r.stopc:
			return ErrClosed
		}
	}
}

// cutOff is the ErrUnavailable of a read for index (0: a barrier) on a
// member cut off from ZooKeeper.
func (r *Replica) cutOff(s *statusSnap, index uint64) error {
	applied := r.applied.Load()
	since := "connection lost"
	switch {
	case s.connected && s.linkCut:
		since = fmt.Sprintf("a read on its session unanswered for %v: the link looks cut", r.cfg.LinkProbeBound)
	case !s.suspended.IsZero():
		since = fmt.Sprintf("disconnected %v ago, at %s", time.Since(s.suspended).Round(time.Millisecond), s.suspended.UTC().Format(time.RFC3339Nano))
	}
	if index == 0 {
		return fmt.Errorf("%w: member %s cut off from ZooKeeper (%s); applied %d; the log's committed end cannot be read; try another member",
			ErrUnavailable, r.cfg.ID, since, applied)
	}
	behind := uint64(0)
	if index > applied {
		behind = index - applied
	}
	return fmt.Errorf("%w: member %s cut off from ZooKeeper (%s); applied %d, asked for %d (%d behind); try another member",
		ErrUnavailable, r.cfg.ID, since, applied, index, behind)
}

// Barrier returns a linearizable read point: once it returns idx, every
// proposal acknowledged (by any primary) before Barrier was called is
// applied locally, so reads from Store see it. It works on standbys (a zk
// sync, then the log's committed end) and on the primary. A member cut off
// from ZooKeeper cannot read the log's end: ErrUnavailable at once (and a
// Barrier waiting for its index when the loss is seen is released with it).
func (r *Replica) Barrier(ctx context.Context) (uint64, error) {
	if err := r.usable(); err != nil {
		return 0, err
	}
	if s := r.snap.Load(); !s.connected || s.linkCut {
		// The log's committed end cannot be read: refuse at once.
		return 0, fmt.Errorf("replica: barrier: %w", r.cutOff(s, 0))
	}
	hint := r.applied.Load()
	idx, err := r.committedIndexUnlessCut(ctx, hint)
	if err != nil {
		return 0, fmt.Errorf("replica: barrier: %w", err)
	}
	if idx < hint {
		// The log ends below what this member applied (only committed
		// entries are applied, and the log loses none at its end): ZooKeeper
		// was restored from an older copy, and what was acknowledged after
		// it is gone. Serving a read now would be stale; the member fails.
		lost := logLost("a barrier found", fmt.Errorf("%w: room %q: the log's committed end is %d, below index %d this member applied",
			logroom.ErrDiverged, r.cfg.Room, idx, hint))
		select {
		case r.failc <- lost:
		default: // an earlier unrecoverable error is queued: it fails the replica
		}
		return 0, fmt.Errorf("replica: barrier: %w", lost)
	}
	r.noteCommitted(idx)
	if err := r.WaitApplied(ctx, idx); err != nil {
		return 0, fmt.Errorf("replica: barrier at %d: %w", idx, err)
	}
	return idx, nil
}

// committedIndexUnlessCut reads the log's committed end (CommittedIndex
// from hint), and gives up with the cut-off error the moment the member
// publishes that it is disconnected or that its link looks cut: on a
// silently cut link the read itself would wait for go-zookeeper's read
// timeout (its calls take no context). The read left behind ends then.
func (r *Replica) committedIndexUnlessCut(ctx context.Context, hint uint64) (uint64, error) {
	type result struct {
		idx uint64
		err error
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan result, 1)
	go func() {
		idx, err := r.room.CommittedIndex(rctx, hint)
		done <- result{idx, err}
	}()
	for {
		s := r.snap.Load()
		if !s.connected || s.linkCut {
			return 0, r.cutOff(s, 0)
		}
		select {
		case res := <-done:
			return res.idx, res.err
		case <-s.changed:
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-r.stopc:
			return 0, ErrClosed
		}
	}
}

// applierRun is one apply goroutine: a standby tail or a primary's commit
// feed. At most one runs at a time; the loop starts and stops them.
type applierRun struct {
	primary bool
	cancel  context.CancelFunc
	drain   chan struct{} // primary: apply what is queued, then return
	done    chan struct{}
	err     error // set before done is closed: non-nil = unrecoverable
}

// stop stops the run (a primary's applies what it was given first if
// drain) and waits for it with wait (Replica.unlessStalled: not for a run
// stuck on a stalled disk, and not without bound). It reports whether the
// run ended; a.err may be read only if it did.
func (a *applierRun) stop(drain bool, wait func(what string, done <-chan struct{}) bool) bool {
	if drain && a.drain != nil {
		close(a.drain)
	} else {
		a.cancel()
	}
	ended := wait("the apply goroutine", a.done)
	a.cancel()
	return ended
}

// startStandbyApplier tails the room from applied+1 and applies.
func (r *Replica) startStandbyApplier() *applierRun {
	ctx, cancel := context.WithCancel(r.bgCtx)
	a := &applierRun{cancel: cancel, done: make(chan struct{})}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(a.done)
		a.err = r.runStandby(ctx)
	}()
	return a
}

// errFatal marks errors that stop the replica.
type errFatal struct{ err error }

func (e errFatal) Error() string { return e.err.Error() }
func (e errFatal) Unwrap() error { return e.err }

func fatal(err error) error { return errFatal{err} }

// errNotCompacted: a bootstrap found the member's applied index already
// reaching the log's oldest channel (the ErrCompacted that sent it there
// was a channel it had applied in full).
var errNotCompacted = errors.New("replica: not compacted")

func isFatal(err error) bool {
	var f errFatal
	return errors.As(err, &f)
}

// runStandby is the standby apply goroutine: Tail → Next → Apply, and a
// bootstrap from a peer's checkpoint when the log it needs was deleted.
// It returns nil when ctx ends, or an unrecoverable error.
//
// A corruption error is confirmed before it stops the replica: the tail is
// re-opened a few times with a pause, and only corruption that repeats at
// the same position is fatal. (Older logroom readers reported a channel
// being deleted under them as corruption; a re-opened tail then fails with
// ErrCompacted and the replica bootstraps instead of stopping.)
func (r *Replica) runStandby(ctx context.Context) error {
	const confirmCorrupt = 3
	backoff := zkx.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	corrupt := 0
	for ctx.Err() == nil {
		before := r.applied.Load()
		err := r.follow(ctx)
		if ctx.Err() != nil {
			return nil
		}
		r.setTailErr(err)
		if errors.Is(err, logroom.ErrUnsupportedVersion) {
			// A newer writer's format: waiting will not make it readable.
			return fatal(err)
		}
		if r.applied.Load() != before {
			corrupt = 0
		}
		if errors.Is(err, logroom.ErrCorrupt) {
			corrupt++
			if corrupt >= confirmCorrupt {
				return fatal(err)
			}
			r.log.Warn("standby: log reported corrupt; re-reading to tell corruption from concurrent deletion",
				"attempt", corrupt, "applied", r.applied.Load(), "err", err)
			backoff.AtLeast(500 * time.Millisecond)
			if backoff.Wait(ctx) != nil {
				return nil
			}
			continue
		}
		if isFatal(err) {
			return err
		}
		if errors.Is(err, logroom.ErrCompacted) {
			if r.isOutrun(err) {
				// Our bootstrap's catch-up lost the log it held (outrun.go).
				if oerr := r.outrun(err); isFatal(oerr) {
					return oerr
				}
			}
			r.log.Info("standby: log position compacted; bootstrapping from a checkpoint", "applied", r.applied.Load())
			err = r.bootstrap(ctx)
			if errors.Is(err, errNotCompacted) {
				// The reader's channel was deleted after we had applied
				// all of it (a seal we had not read yet): nothing is
				// missing, the tail is not in trouble. Tail again.
				r.log.Debug("standby: the compacted channel was applied already; tailing on", "err", err)
				r.tailErr.Store(nil)
				backoff.Reset()
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(10 * time.Millisecond):
				}
				continue
			}
			r.setTailErr(err)
			if err == nil {
				r.tailErr.Store(nil)
				backoff.Reset()
				corrupt = 0
				continue
			}
			if isFatal(err) {
				return err
			}
		}
		r.log.Warn("standby: tail interrupted; retrying", "applied", r.applied.Load(), "err", err)
		if backoff.Wait(ctx) != nil {
			return nil
		}
	}
	return nil
}

// setTailErr publishes the tail's last error for Status (a copy: the
// caller's variable changes afterwards).
func (r *Replica) setTailErr(err error) {
	if err == nil {
		r.tailErr.Store(nil)
		return
	}
	r.tailErr.Store(&err)
}

// follow tails from applied+1 until an error. A reader goroutine fetches
// batches ahead while this goroutine applies: everything fetched meanwhile
// goes into one store.Apply (one fsync), so a standby keeps up with a
// primary that pipelines its writes.
func (r *Replica) follow(ctx context.Context) error {
	// Log matching: the log must still hold the batch we last applied.
	if err := r.matchLog(ctx); err != nil {
		return err
	}
	from := r.applied.Load() + 1
	rd, err := r.room.Tail(ctx, from)
	if err != nil {
		return err
	}
	defer rd.Close()
	// The log matches and still holds what we need next: the tail is
	// healthy again (an idle room applies nothing that would say so; the
	// demo's health check answers 503 behind while an error is set).
	r.tailErr.Store(nil)
	rctx, cancel := context.WithCancel(ctx)
	type fetched struct {
		es  []logroom.Entry
		err error
	}
	feed := make(chan fetched, 64)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			es, err := rd.Next(rctx)
			select {
			case feed <- fetched{es, err}:
			case <-rctx.Done():
				return
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		cancel()
		<-done
	}()
	const maxRun = 4 << 20 // bytes per Apply call
	for {
		var f fetched
		select {
		case f = <-feed:
		case <-ctx.Done():
			return ctx.Err()
		}
		if f.err != nil {
			return f.err
		}
		run, size := f.es, entriesBytes(f.es)
		var pending error
	more:
		for size < maxRun {
			select {
			case g := <-feed:
				if g.err != nil {
					pending = g.err
					break more
				}
				run = append(run, g.es...)
				size += entriesBytes(g.es)
			default:
				break more
			}
		}
		if err := r.applyEntries(run); err != nil {
			return fatal(err)
		}
		r.tailErr.Store(nil)
		if pending != nil {
			return pending
		}
	}
}

// appliedBatch returns the identity of the last batch the store applied
// from (zero for an empty store or one written before identities were
// recorded).
//
// It reads the position without storeMu (AppliedPosition reads one atomic
// pointer, also on a closed store), so the loop's ZooKeeper worker, which
// audits the log with it, never waits for a bootstrap's store swap.
func (r *Replica) appliedBatch() (logroom.BatchID, uint64) {
	st := r.stRun.Load()
	if st == nil {
		return logroom.BatchID{}, 0
	}
	applied, epoch, ref := st.AppliedPosition() // one Apply's, never mixed
	if ref == (store.BatchRef{}) {
		return logroom.BatchID{}, applied
	}
	return logroom.BatchID{Epoch: epoch, First: ref.First, Count: int(ref.Count), CRC: ref.CRC}, applied
}

// matchLog checks that the log still holds the last batch this replica
// applied and reaches its applied index (logroom.Room.MatchLog). Divergence
// is fatal: the replica stops applying and writing and reports it.
func (r *Replica) matchLog(ctx context.Context) error {
	_, err := r.auditLog(ctx)
	return err
}

// auditLog is matchLog returning the channels it checked (logroom's
// Room.Audit): the running member's periodic check of the log.
func (r *Replica) auditLog(ctx context.Context) ([]logroom.ChannelInfo, error) {
	id, applied := r.appliedBatch()
	infos, err := r.room.Audit(ctx, id, applied)
	if err == nil {
		if lost := r.checkCommittedHi(ctx, "the log audit found"); lost != nil {
			return nil, lost
		}
	}
	if errors.Is(err, logroom.ErrDiverged) {
		return nil, fatal(logLost("the log audit found", fmt.Errorf("%w (this member's local state at index %d does not match the room's log; "+
			"do not start a fresh member or re-create channels to \"fix\" it)", err, applied)))
	}
	return infos, err
}

func entriesBytes(es []logroom.Entry) int {
	n := 0
	for _, e := range es {
		n += len(e.Data) + 16
	}
	return n
}

// commitQueue carries the primary's committed entries from the writer's
// OnCommit hook to the apply goroutine without blocking the writer. Its
// size is bounded by the proposals in flight (MaxPendingProposals).
type commitQueue struct {
	mu      *sync.Mutex // Replica.propMu; guards entries
	entries []logroom.Entry
	notify  zkx.Signal
}

func newCommitQueue(mu *sync.Mutex) *commitQueue {
	return &commitQueue{mu: mu, notify: zkx.NewSignal()}
}

func (q *commitQueue) push(es []logroom.Entry) {
	q.mu.Lock()
	q.entries = append(q.entries, es...)
	q.mu.Unlock()
	q.notify.Notify()
}

func (q *commitQueue) take() []logroom.Entry {
	q.mu.Lock()
	defer q.mu.Unlock()
	es := q.entries
	q.entries = nil
	return es
}

// startPrimaryApplier applies the term's committed entries.
func (r *Replica) startPrimaryApplier(q *commitQueue) *applierRun {
	ctx, cancel := context.WithCancel(r.bgCtx)
	a := &applierRun{primary: true, cancel: cancel, drain: make(chan struct{}), done: make(chan struct{})}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(a.done)
		for {
			select {
			case <-q.notify.C():
			case <-a.drain:
				a.err = r.applyQueued(q)
				return
			case <-ctx.Done():
				return
			}
			if err := r.applyQueued(q); err != nil {
				a.err = err
				return
			}
		}
	}()
	return a
}

func (r *Replica) applyQueued(q *commitQueue) error {
	es := q.take()
	if len(es) == 0 {
		return nil
	}
	// Entries at or below applied were applied already (cannot happen
	// with one writer per term, but never apply twice).
	a := r.applied.Load()
	i := 0
	for i < len(es) && es[i].Index <= a {
		i++
	}
	if err := r.applyEntries(es[i:]); err != nil {
		return fatal(err)
	}
	return nil
}

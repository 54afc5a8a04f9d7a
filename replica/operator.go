package replica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/zkx"
)

// Operator requests (package doc, "Operator requests").
//
// An operator's tool reaches a room's primary through ZooKeeper, the one
// place every member and the tool already share and whose ACL already
// says who may act on the room: it writes the persistent znode
// /<room>/operator (operatorRecord) naming what to do and the epoch of the
// primary it addresses; the primary of that epoch claims it (a Set
// checked against the version it read), carries it out through its own
// public calls (TransferLeadership, Checkpoint) and records the outcome in
// the same znode; the tool reads the outcome and deletes the znode.
//
// Only the primary of the named epoch acts, and its claim is fenced: the
// claim (and every later write of the record) is a Multi that begins with
// its writer's fence (logroom.Writer.FenceOps) and checks the record's
// version, so a deposed primary that does not know it yet claims nothing,
// and of two members only one claim lands. A request for an older epoch
// (a failover since it was written) is answered "stale" by the primary in
// office. The claim records the claimer's epoch (ClaimEpoch): a request
// left "running" by a claimer that is no live member (its term ended
// before it answered, or a forgery) is answered failed, outcome unknown,
// instead of stalling (a live one answers itself: a transfer ends its
// term before it records the outcome, checked against its claim's
// version); one this primary claimed in this term but did not carry
// out (the claim's reply was lost) is carried out then. Each term
// remembers what it carried out (term.opsDone): at most once per term,
// and a lost answer is written again. A member never trusts the record
// beyond that: one that decodes as a pending request but is malformed,
// was created in the future (more than requestClockSkew ahead) or
// abandoned (older than requestStaleAfter) is answered failed and not
// carried out; a record in no known state, or bytes that do not decode,
// is an error naming the znode for every reader (ReadRequest,
// SubmitRequest) and is left alone by members (logged once).

// Operator request kinds (OperatorRequest.Kind).
const (
	// RequestTransfer: the primary hands leadership to OperatorRequest.To
	// (TransferLeadership), or, with To empty, to the live standby that
	// applied the most (ties: the lowest id).
	RequestTransfer = "transfer"
	// RequestCheckpoint: the primary checkpoints now (Checkpoint).
	RequestCheckpoint = "checkpoint"
)

// Operator request states (OperatorRequest.State).
const (
	RequestPending = ""        // written, not claimed yet
	RequestRunning = "running" // claimed by the primary OperatorRequest.By
	RequestDone    = "done"
	RequestFailed  = "failed" // OperatorRequest.Error says why
)

// operatorZ is the operator request znode under the room.
const operatorZ = "operator"

// requestStaleAfter: a request still pending or running this long after it
// was written is abandoned (its tool gave up, its primary died): a new
// request may replace it.
const requestStaleAfter = 10 * time.Minute

// requestClockSkew: a request created more than this far ahead of the
// primary's clock is refused (it would never count as abandoned).
const requestClockSkew = time.Minute

// checkpointRequestBound bounds a checkpoint made on request.
const checkpointRequestBound = 10 * time.Minute

// ErrRequestPending: SubmitRequest found another operator request still
// pending or running (the error names it).
var ErrRequestPending = errors.New("replica: another operator request is in progress")

// operatorRecord is the data of the persistent /<room>/operator.
type operatorRecord struct {
	V       int    `msgpack:"v"`
	ID      string `msgpack:"id"`
	Kind    string `msgpack:"kind"`
	To      string `msgpack:"to,omitempty"`
	Epoch   uint64 `msgpack:"epoch"`   // the epoch of the primary addressed
	Created int64  `msgpack:"created"` // unix ms
	// Written by the primary that claims it:
	State      string `msgpack:"state,omitempty"`
	By         string `msgpack:"by,omitempty"`
	ClaimEpoch uint64 `msgpack:"claim_epoch,omitempty"` // the claimer's epoch (the term it claimed in)
	Error      string `msgpack:"err,omitempty"`
	Index      uint64 `msgpack:"index,omitempty"`
	NewPrimary string `msgpack:"new_primary,omitempty"`
	TookMS     int64  `msgpack:"took_ms,omitempty"`
}

// OperatorRequest is an operator's request to a room's primary and, once
// the primary answered, its outcome.
type OperatorRequest struct {
	ID    string // chosen by SubmitRequest
	Kind  string // RequestTransfer or RequestCheckpoint
	To    string // RequestTransfer: the target member ("": the primary picks)
	Epoch uint64 // the epoch of the primary addressed (0: the room's current)
	// Created is when it was submitted.
	Created time.Time
	// State, By, Error, Index, NewPrimary and Took are the primary's answer.
	State string
	By    string // the primary that claimed it
	Error string // RequestFailed: why
	// Index: RequestCheckpoint, the checkpoint's index; RequestTransfer,
	// the last index committed before the hand-over.
	Index      uint64
	NewPrimary string        // RequestTransfer: the member that took over
	Took       time.Duration // from the claim to the answer
	version    int32         // the znode version read (ClearRequest)
}

func (o operatorRecord) request(version int32) OperatorRequest {
	return OperatorRequest{ID: o.ID, Kind: o.Kind, To: o.To, Epoch: o.Epoch, Created: time.UnixMilli(o.Created),
		State: o.State, By: o.By, Error: o.Error, Index: o.Index, NewPrimary: o.NewPrimary,
		Took: time.Duration(o.TookMS) * time.Millisecond, version: version}
}

// Finished reports whether the request got its answer, or was abandoned
// (still unanswered 10 minutes after it was submitted).
// A request created more than a minute in the future counts as finished
// (garbled or forged: it would never be abandoned otherwise).
func (q OperatorRequest) Finished(now time.Time) bool {
	return q.State == RequestDone || q.State == RequestFailed || now.Sub(q.Created) > requestStaleAfter ||
		q.Created.Sub(now) > requestClockSkew
}

// SubmitRequest writes req for the room's primary (Kind and To from req;
// Epoch 0: the room's current epoch) and returns it as written, with its
// ID. The znode carries the room znode's own ACL, so every member can
// answer it; the client needs CREATE on the room. An earlier request that
// is finished (answered, or abandoned for 10 minutes) is replaced;
// one still in progress is ErrRequestPending, naming it.
func SubmitRequest(ctx context.Context, c *logroom.Client, base, room string, req OperatorRequest) (OperatorRequest, error) {
	if base == "" {
		base = DefaultBase
	}
	switch req.Kind {
	case RequestTransfer, RequestCheckpoint:
	default:
		return req, fmt.Errorf("replica: operator request kind %q: want %q or %q", req.Kind, RequestTransfer, RequestCheckpoint)
	}
	if req.Kind != RequestTransfer && req.To != "" {
		return req, fmt.Errorf("replica: operator request %q names a target (%q): only %q does", req.Kind, req.To, RequestTransfer)
	}
	if _, err := logroom.ReadRoomInfo(ctx, c, base, room); err != nil {
		return req, err
	}
	if req.Epoch == 0 {
		e, err := logroom.ReadEpoch(ctx, c, base, room)
		if err != nil {
			return req, err
		}
		req.Epoch = e.Epoch
	}
	root := logroom.RoomPath(base, room)
	var acl []zk.ACL
	if err := c.Retry(ctx, func() (err error) { acl, _, err = c.Conn().GetACL(root); return err }); err != nil {
		return req, fmt.Errorf("replica: read the ACL of %s: %w", root, err)
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	req.ID, req.Created, req.State = hex.EncodeToString(id[:]), time.Now().Truncate(time.Millisecond), RequestPending
	rec := operatorRecord{V: formatVersion1, ID: req.ID, Kind: req.Kind, To: req.To, Epoch: req.Epoch, Created: req.Created.UnixMilli()}
	p := root + "/" + operatorZ
	data := encode(rec)
	for range 3 {
		err := c.Retry(ctx, func() error {
			_, err := c.Conn().Create(p, data, 0, acl)
			if errors.Is(err, zk.ErrNodeExists) {
				// A lost reply of our own create: ours if it holds our id.
				if b, _, gerr := c.Conn().Get(p); gerr == nil {
					var o operatorRecord
					if decode(b, &o) == nil && o.ID == req.ID {
						return nil
					}
				}
			}
			return err
		})
		if err == nil {
			return req, nil
		}
		if !errors.Is(err, zk.ErrNodeExists) {
			return req, fmt.Errorf("replica: write %s: %w", p, err)
		}
		old, ok, err := ReadRequest(ctx, c, base, room)
		if err != nil {
			return req, err
		}
		if ok && !old.Finished(time.Now()) {
			return req, fmt.Errorf("%w: %s %s (id %s) submitted %s, state %q: wait for it, or delete %s",
				ErrRequestPending, old.Kind, old.To, old.ID, old.Created.UTC().Format(time.RFC3339), old.State, p)
		}
		if ok {
			err = c.Retry(ctx, func() error { return c.Conn().Delete(p, old.version) })
		}
		if err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
			return req, fmt.Errorf("replica: delete the finished request %s: %w", p, err)
		}
	}
	return req, fmt.Errorf("%w: %s kept reappearing", ErrRequestPending, p)
}

// ReadRequest reads the room's operator request (ok false: none). A znode
// that does not decode is an error naming it.
func ReadRequest(ctx context.Context, c *logroom.Client, base, room string) (OperatorRequest, bool, error) {
	if base == "" {
		base = DefaultBase
	}
	p := logroom.RoomPath(base, room, operatorZ)
	data, st, err := zkx.Get(ctx, c, p)
	if errors.Is(err, zk.ErrNoNode) {
		return OperatorRequest{}, false, nil
	}
	if err != nil {
		return OperatorRequest{}, false, fmt.Errorf("replica: read %s: %w", p, err)
	}
	o, err := decodeOperator(data)
	if err != nil {
		return OperatorRequest{}, false, fmt.Errorf("replica: operator request %s: %w (no roomlog tool or member wrote it: delete it)", p, err)
	}
	return o.request(st.Version), true, nil
}

// ClearRequest deletes the room's operator request id (nothing when
// another one replaced it, or none is left).
func ClearRequest(ctx context.Context, c *logroom.Client, base, room, id string) error {
	cur, ok, err := ReadRequest(ctx, c, base, room)
	if err != nil || !ok || cur.ID != id {
		return err
	}
	if base == "" {
		base = DefaultBase
	}
	p := logroom.RoomPath(base, room, operatorZ)
	err = c.Retry(ctx, func() error { return c.Conn().Delete(p, cur.version) })
	if err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
		return fmt.Errorf("replica: delete %s: %w", p, err)
	}
	return nil
}

func decodeOperator(data []byte) (operatorRecord, error) {
	var o operatorRecord
	if err := decode(data, &o); err != nil {
		return o, err
	}
	if o.V != formatVersion1 {
		return o, fmt.Errorf("unknown format version %d: %w", o.V, errBadZnodeData)
	}
	if o.ID == "" || (o.Kind != RequestTransfer && o.Kind != RequestCheckpoint) {
		return o, fmt.Errorf("id %q, kind %q: %w", o.ID, o.Kind, errBadZnodeData)
	}
	switch o.State {
	case RequestPending, RequestRunning, RequestDone, RequestFailed:
	default:
		return o, fmt.Errorf("id %q: state %q: %w", o.ID, o.State, errBadZnodeData)
	}
	return o, nil
}

// sessionIdentities are the ZooKeeper identities c's session is
// authenticated as (Client.Self without world:anyone), as
// "scheme:id" (MemberStatus.Identities).
func sessionIdentities(c *logroom.Client) []string {
	if c == nil {
		return nil
	}
	var ids []string
	for _, e := range c.Self() {
		if e.Scheme == "world" {
			continue
		}
		ids = append(ids, zkx.PublicIdentity(e)) // never a digest's hash
	}
	return ids
}

// runOperatorRequests answers operator requests while this replica is
// primary: it reads the request znode, arming one watch, and reads it
// again when that watch fires (a change, or the end of the session's
// watches) or when a new term begins (a request may wait for the epoch it
// names); a read that failed is retried at the next 2 s tick. It carries
// out one request at a time and returns when ctx ends (Close). One watch
// at most is armed at a time: go-zookeeper keeps every watch channel until
// it fires, so arming one per tick would grow without bound.
func (r *Replica) runOperatorRequests(ctx context.Context) {
	p := r.room.Path(operatorZ)
	tick := time.NewTicker(2 * time.Second)
	defer tick.Stop()
	var (
		watch   <-chan zk.Event
		readFor uint64 // the epoch of the term the last read was made in
	)
	for {
		if t := r.currentTerm(); t != nil && (watch == nil || readFor != t.epoch) {
			if w := r.operatorStep(ctx, p, t); w != nil {
				watch, readFor = w, t.epoch // else: retried at the next tick
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-r.stopc:
			return
		case <-watch:
			watch = nil
		case <-tick.C:
		}
	}
}

// operatorStep reads the request znode (arming a watch) and, when it holds
// a pending request for epoch, claims it, carries it out and records the
// outcome. It returns the watch (nil: none armed).
func (r *Replica) operatorStep(ctx context.Context, p string, t *term) <-chan zk.Event {
	epoch := t.epoch
	// What the read found travels back through read (sent before the
	// request returns): bounded gives up on its ctx while the request may
	// still run, and nothing the request writes may be read after that.
	type found struct {
		data  []byte
		st    *zk.Stat
		watch <-chan zk.Event
	}
	read := make(chan found, 1)
	err := r.bounded(ctx, func() error {
		var f found
		defer func() { read <- f }()
		for range 3 {
			var err error
			f.data, f.st, f.watch, err = r.conn.GetW(p)
			if !errors.Is(err, zk.ErrNoNode) {
				return err
			}
			// None: watch for its creation. Created since the read
			// (ExistsW finds it): read it, or it would wait for a change
			// that may never come.
			var ok bool
			ok, _, f.watch, err = r.conn.ExistsW(p)
			f.data, f.st = nil, nil
			if err != nil || !ok {
				return err
			}
		}
		f.watch = nil // created and deleted again and again: the next tick reads it
		return nil
	})
	var f found
	select {
	case f = <-read: // the request returned (err is its own)
	default: // bounded gave up on ctx: nothing read, no watch armed for us
	}
	data, st, watch := f.data, f.st, f.watch
	if err != nil || st == nil {
		return watch
	}
	version := st.Version
	o, derr := decodeOperator(data)
	if derr != nil {
		var raw operatorRecord
		if decode(data, &raw) != nil || raw.State != RequestPending || raw.ID == "" {
			// Not a request to answer: every reader reports it by name.
			if t.opWarned.Swap(int64(version)+1) != int64(version)+1 {
				r.log.Warn("operator request znode is not a request; left alone (roomlog reports it; delete it)", "path", p, "err", derr)
			}
			return watch
		}
		o = raw
		o.State, o.By, o.ClaimEpoch, o.Error = RequestFailed, r.cfg.ID, epoch, "malformed request: "+derr.Error()
		r.setOperator(ctx, p, t, o, &version)
		return watch
	}
	if o.State == RequestDone || o.State == RequestFailed {
		return watch // answered
	}
	if o.Epoch > epoch {
		// For a later primary than us, if we were deposed: then our fenced
		// write does not land and that primary answers it. If it lands,
		// our epoch is the room's and no primary will ever reach o.Epoch.
		o.State, o.By, o.ClaimEpoch, o.Error = RequestFailed, r.cfg.ID, epoch,
			fmt.Sprintf("names epoch %d, above the room's epoch %d: no primary will answer it (not written by a roomlog tool?)", o.Epoch, epoch)
		r.setOperator(ctx, p, t, o, &version)
		return watch
	}
	now := time.Now()
	if o.State == RequestRunning {
		if o.By != r.cfg.ID || o.ClaimEpoch != epoch {
			if o.By != r.cfg.ID && r.memberLive(o.By) {
				// A primary of an earlier epoch that is still a member (a
				// transfer it carried out ended its term) records its own
				// answer: leave it that.
				return watch
			}
			o.State, o.Error = RequestFailed, fmt.Sprintf("outcome unknown: claimed by %q at epoch %d, which is not the primary of epoch %d (%s): its term ended before it answered, or the claim was not a member's; submit it again if it is still wanted",
				o.By, o.ClaimEpoch, epoch, r.cfg.ID)
			o.By, o.ClaimEpoch = r.cfg.ID, epoch
			r.setOperator(ctx, p, t, o, &version)
			return watch
		}
		if v, ok := t.opsDone.Load(o.ID); ok {
			if fin := v.(operatorRecord); fin.State != RequestRunning && !r.recordOutcome(ctx, p, t, fin, &version) {
				return nil // the answer is still not recorded: read again at the next tick
			}
			return watch // carried out (or being carried out) in this term
		}
		// Claimed by us in this term, never carried out: our claim's
		// reply was lost. Carry it out now.
	} else {
		o.State, o.By, o.ClaimEpoch = RequestRunning, r.cfg.ID, epoch
		switch {
		case o.Created > now.Add(requestClockSkew).UnixMilli():
			o.State, o.Error = RequestFailed, fmt.Sprintf("created in the future (%s, %v ahead of %s's clock): a clock no member shares, or not written by a roomlog tool; not carried out",
				time.UnixMilli(o.Created).UTC().Format(time.RFC3339), time.UnixMilli(o.Created).Sub(now).Round(time.Second), r.cfg.ID)
		case now.Sub(time.UnixMilli(o.Created)) > requestStaleAfter:
			o.State, o.Error = RequestFailed, fmt.Sprintf("expired: submitted %s, more than %v ago; not carried out now", time.UnixMilli(o.Created).UTC().Format(time.RFC3339), requestStaleAfter)
		case o.Epoch < epoch:
			o.State, o.Error = RequestFailed, fmt.Sprintf("stale: the request is for the primary of epoch %d; %s is primary at epoch %d now (a failover happened): submit it again", o.Epoch, r.cfg.ID, epoch)
		}
		if !r.setOperator(ctx, p, t, o, &version) || o.State == RequestFailed {
			return watch
		}
	}
	if _, loaded := t.opsDone.LoadOrStore(o.ID, o); loaded {
		return watch // carried out by a concurrent step of this term
	}
	r.log.Info("operator request", "kind", o.Kind, "id", o.ID, "to", o.To)
	start := time.Now()
	switch o.Kind {
	case RequestCheckpoint:
		cctx, cancel := context.WithTimeout(ctx, checkpointRequestBound)
		err = r.Checkpoint(cctx)
		cancel()
		o.Index = r.localCkpt.Load()
	case RequestTransfer:
		to := o.To
		if to == "" {
			to = r.transferTarget()
		}
		if to == "" {
			err = fmt.Errorf("%w: no live standby to hand over to", ErrTransfer)
			break
		}
		o.Index = t.w.LastCommitted()
		tctx, cancel := context.WithTimeout(ctx, 2*r.cfg.TransferTimeout+2*r.cfg.SessionTimeout)
		err = r.TransferLeadership(tctx, to)
		cancel()
		o.NewPrimary = to
	}
	o.TookMS = max(time.Since(start).Milliseconds(), 1)
	o.State = RequestDone
	if err != nil {
		o.State, o.Error = RequestFailed, err.Error()
		r.log.Warn("operator request failed", "kind", o.Kind, "id", o.ID, "err", err)
	}
	t.opsDone.Store(o.ID, o)
	if !r.recordOutcome(ctx, p, t, o, &version) {
		return nil // read again at the next tick: the answer is written again
	}
	return watch
}

// recordOutcome writes the outcome o of a request this term claimed (its
// claim was fenced) to p if p is still at *version: behind t's fence
// while the term lasts, else without it (a transfer ends our epoch before
// its outcome is written; the version check still keeps anything written
// since our claim).
func (r *Replica) recordOutcome(ctx context.Context, p string, t *term, o operatorRecord, version *int32) bool {
	if r.setOperator(ctx, p, t, o, version) {
		return true
	}
	wctx, cancel := context.WithTimeout(ctx, r.cfg.SessionTimeout)
	defer cancel()
	var st *zk.Stat
	err := r.bounded(wctx, func() error {
		var err error
		st, err = r.conn.Set(p, encode(o), *version)
		return err
	})
	if err != nil {
		if !errors.Is(err, zk.ErrBadVersion) && !errors.Is(err, zk.ErrNoNode) {
			r.log.Warn("operator request: cannot record its outcome", "path", p, "state", o.State, "err", err)
		}
		return false
	}
	*version = st.Version
	return true
}

// memberLive reports whether id is a live member in this replica's view.
func (r *Replica) memberLive(id string) bool {
	for _, m := range r.snap.Load().members {
		if m.ID == id {
			return true
		}
	}
	return false
}

// setOperator writes o to p behind t's fence (a deposed primary writes
// nothing) if p is still at *version (a request replaced or deleted
// meanwhile is left alone) and advances *version.
func (r *Replica) setOperator(ctx context.Context, p string, t *term, o operatorRecord, version *int32) bool {
	wctx, cancel := context.WithTimeout(ctx, r.cfg.SessionTimeout)
	defer cancel()
	fence := t.w.FenceOps()
	// The responses travel back through a channel: bounded may give up on
	// wctx while the request still runs (see operatorStep).
	resc := make(chan []zk.MultiResponse, 1)
	err := r.bounded(wctx, func() error {
		rs, err := r.conn.Multi(append(fence, &zk.SetDataRequest{Path: p, Data: encode(o), Version: *version})...)
		resc <- rs
		return err
	})
	var res []zk.MultiResponse
	select {
	case res = <-resc:
	default:
	}
	if err != nil {
		switch {
		case logroom.FenceRefused(res, err):
			r.log.Warn("operator request: fenced (a newer epoch took the room); left to the primary in office", "path", p, "id", o.ID, "state", o.State)
		case len(res) == len(fence)+1 && (errors.Is(res[len(fence)].Error, zk.ErrBadVersion) || errors.Is(res[len(fence)].Error, zk.ErrNoNode)):
			// Replaced or deleted meanwhile: not ours to write.
		default:
			r.log.Warn("operator request: cannot record its state", "path", p, "state", o.State, "err", err)
		}
		return false
	}
	if n := len(res); n > 0 && res[n-1].Stat != nil {
		*version = res[n-1].Stat.Version
	} else {
		*version++
	}
	return true
}

// transferTarget picks the live standby that applied the most (ties: the
// lowest id), observers excluded; "" when there is none.
func (r *Replica) transferTarget() string {
	ms := slices.Clone(r.snap.Load().members)
	slices.SortFunc(ms, func(a, b MemberStatus) int {
		if a.Applied != b.Applied {
			if a.Applied > b.Applied {
				return -1
			}
			return 1
		}
		return strings.Compare(a.ID, b.ID)
	})
	for _, m := range ms {
		if m.ID != r.cfg.ID && !m.Observer && m.Role == RoleStandby {
			return m.ID
		}
	}
	return ""
}

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
// Only the primary of the named epoch acts: a deposed primary that does
// not know it yet reads an epoch above its own and leaves the request
// alone, and a request for an older epoch (a failover since it was
// written) is answered "stale" by the primary in office. A member never
// trusts the record beyond that: a malformed one is answered as failed
// (so the tool does not wait out its timeout) and nothing else is done.

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
func (q OperatorRequest) Finished(now time.Time) bool {
	return q.State == RequestDone || q.State == RequestFailed || now.Sub(q.Created) > requestStaleAfter
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
		return OperatorRequest{}, false, fmt.Errorf("replica: operator request %s: %w", p, err)
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
			if w := r.operatorStep(ctx, p, t.epoch); w != nil {
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
func (r *Replica) operatorStep(ctx context.Context, p string, epoch uint64) <-chan zk.Event {
	var (
		data  []byte
		st    *zk.Stat
		watch <-chan zk.Event
	)
	err := r.bounded(ctx, func() error {
		var err error
		data, st, watch, err = r.conn.GetW(p)
		if errors.Is(err, zk.ErrNoNode) {
			_, _, watch, err = r.conn.ExistsW(p)
			data, st = nil, nil
		}
		return err
	})
	if err != nil || st == nil {
		return watch
	}
	o, derr := decodeOperator(data)
	switch {
	case derr == nil && (o.State != RequestPending || o.Epoch > epoch):
		return watch // answered, claimed, or for a later primary than us
	case derr != nil:
		var raw operatorRecord
		if decode(data, &raw) != nil || raw.State != RequestPending {
			return watch // not a request to answer (foreign data): leave it
		}
		o = raw
	}
	o.State, o.By = RequestRunning, r.cfg.ID
	switch {
	case derr != nil:
		o.State, o.Error = RequestFailed, "malformed request: "+derr.Error()
	case o.Epoch < epoch:
		o.State, o.Error = RequestFailed, fmt.Sprintf("stale: the request is for the primary of epoch %d; %s is primary at epoch %d now (a failover happened): submit it again", o.Epoch, r.cfg.ID, epoch)
	}
	version := st.Version
	if !r.setOperator(ctx, p, o, &version) || o.State == RequestFailed {
		return watch
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
		if t := r.currentTerm(); t != nil {
			o.Index = t.w.LastCommitted()
		}
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
	r.setOperator(ctx, p, o, &version)
	return watch
}

// setOperator writes o to p if p is still at *version (a request replaced
// or deleted meanwhile is left alone) and advances *version.
func (r *Replica) setOperator(ctx context.Context, p string, o operatorRecord, version *int32) bool {
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
			r.log.Warn("operator request: cannot record its state", "path", p, "state", o.State, "err", err)
		}
		return false
	}
	*version = st.Version
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

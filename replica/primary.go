package replica

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

// term is one primary term: a writer of one epoch. Created by the loop when
// a takeover completes; ended by the loop (endTerm).
type term struct {
	w     *logroom.Writer
	epoch uint64
	start uint64 // first index of the term
	q     *commitQueue
	done  chan struct{} // closed when the term has ended (writer closed)

	// mu is Replica.propMu, the one lock of the proposal bookkeeping: it
	// guards accepting, inflight, idle and handoff.
	mu *sync.Mutex
	// accepting: new proposals may enter. ending: the loop is ending the
	// term. Invariant: once ending, accepting is never true again (a
	// hand-over that failed reopens the door only before that).
	accepting bool
	ending    bool
	inflight  int           // proposals inside Writer.Append
	idle      chan struct{} // closed when inflight drops to 0 (nil when nobody waits)
	handoff   string        // the member a transfer in progress hands over to

	// opsDone: the operator requests this term claimed and carried out
	// (or is carrying out), id → their record (operator.go): a request
	// is carried out at most once per term, and a lost answer is written
	// again.
	opsDone sync.Map
	// opWarned: 1 + the version of the operator znode last reported as
	// not a request (it is logged once per version and term).
	opWarned atomic.Int64
}

func (t *term) enter() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.accepting {
		return false
	}
	t.inflight++
	return true
}

func (t *term) leave() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.inflight--
	if t.inflight == 0 && t.idle != nil {
		close(t.idle)
		t.idle = nil
	}
}

// stopAccepting closes the door; the returned channel is closed when no
// proposal is inside Append any more.
func (t *term) stopAccepting() <-chan struct{} {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.accepting = false
	if t.inflight == 0 {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	if t.idle == nil {
		t.idle = make(chan struct{})
	}
	return t.idle
}

// resume reopens the door after an aborted hand-over, unless the term is
// ending (the loop called finish).
func (t *term) resume() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.handoff = ""
	if !t.ending {
		t.accepting = true
	}
}

// finish closes the door for good: the loop is ending the term.
func (t *term) finish() <-chan struct{} {
	t.mu.Lock()
	t.ending = true
	t.mu.Unlock()
	return t.stopAccepting()
}

func (t *term) handingTo() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.handoff
}

func (r *Replica) currentTerm() *term { return r.term.Load() }

// setTerm publishes the loop's term (loop only).
func (r *Replica) setTerm(t *term) { r.term.Store(t) }

// notPrimary builds the NotPrimaryError from the current view (during a
// leadership transfer: the target).
func (r *Replica) notPrimary() error {
	if t := r.currentTerm(); t != nil {
		if to := t.handingTo(); to != "" {
			m, _ := r.member(to)
			return &NotPrimaryError{PrimaryID: to, PrimaryAddr: m.Addr}
		}
	}
	s := r.snap.Load()
	id, addr := s.primaryID, s.primaryAddr
	self := id == r.cfg.ID
	if self {
		// We won the election but are still taking over (or handing over):
		// tell the caller we are the one to retry with.
		addr = r.cfg.AdvertiseAddr
	}
	return &NotPrimaryError{PrimaryID: id, PrimaryAddr: addr, Self: self}
}

// Propose appends entry to the log and waits until it is committed in
// ZooKeeper and applied to the local store; a read of Store right after
// sees it. Only the primary accepts proposals; elsewhere it returns a
// *NotPrimaryError (errors.Is ErrNotPrimary) naming the primary.
//
// Errors: ErrNotPrimary (nothing sent); ErrQueueFull (nothing sent);
// ErrFenced (not committed; this replica was deposed); ErrOutcomeUnknown
// (may or may not be committed); ErrNoResponse (committed at Result.Index,
// response unavailable); logroom.ErrEntryTooLarge / logroom.ErrRoomFull
// (nothing sent); ErrClosed; ctx's error while waiting to send (nothing
// sent). While the ZooKeeper connection is down, Propose neither sends nor
// acknowledges: it waits for the reconnect, bounded by ctx (an entry the
// writer already confirmed is acknowledged when the term ends instead: it
// is committed whatever happens next).
//
// A proposal whose outcome is unknown may have been applied; retrying it
// with Propose may apply it twice. ProposeRequest makes retries safe.
func (r *Replica) Propose(ctx context.Context, entry []byte) (Result, error) {
	start := r.m.now()
	res, err := r.propose(ctx, store.WrapPlain(entry))
	r.m.proposal(start, res, err)
	return res, err
}

// NewRequestID returns a random request id (crypto/rand) for
// ProposeRequest: one per logical request, reused by all its retries.
func NewRequestID() store.RequestID {
	var id store.RequestID
	for id.IsZero() {
		_, _ = rand.Read(id[:]) // never fails (crypto/rand's contract since Go 1.24)
	}
	return id
}

// ProposeRequest is Propose for an entry that carries a request id, so
// that retrying it after ErrOutcomeUnknown, ErrNoResponse, a timeout, a
// failover or a lost connection applies it at most once:
//
//   - On a member that is not the primary, if the id is in its replicated
//     request table (applied, not expired: see Config.RequestTTL and
//     RequestWindow), the original Result comes back with Duplicate set
//     and nothing is appended; else ErrNotPrimary as for Propose.
//   - If a ProposeRequest of the same id is in flight on this replica, the
//     call waits for it (bounded by ctx) and returns its outcome.
//   - Otherwise the entry is appended in a request envelope. If the id
//     was already applied (a retry of a request that succeeded, or one
//     that raced the original through another primary), every replica
//     skips this copy at apply time and the original Result comes back,
//     Duplicate set. (The primary does not read the table first: that
//     lookup misses for every fresh id and halved the throughput of
//     ProposeRequest; a retry costs one inert log entry instead.)
//
// The same id with a different entry is ErrRequestConflict. Errors are
// otherwise Propose's; on any of them the caller may retry with the same
// id. A retry that arrives after the id expired from the table is applied
// again.
func (r *Replica) ProposeRequest(ctx context.Context, id store.RequestID, entry []byte) (Result, error) {
	start := r.m.now()
	res, err := r.proposeRequest(ctx, id, entry)
	r.m.proposal(start, res, err)
	return res, err
}

func (r *Replica) proposeRequest(ctx context.Context, id store.RequestID, entry []byte) (Result, error) {
	if id.IsZero() {
		return Result{}, fmt.Errorf("replica: propose request: %w: zero request id", store.ErrInvalid)
	}
	if err := r.usable(); err != nil {
		return Result{}, err
	}
	hash := store.PayloadHash(entry)
	// Not primary: answer from the table if the original is applied here
	// (else NotPrimary follows). The primary skips this read, a Pebble
	// lookup that misses for every fresh id (it halved ProposeRequest's
	// throughput in the bench): a retry of an applied request is appended
	// and skipped at apply time instead, with the same answer.
	if r.currentTerm() == nil {
		if res, done, err := r.appliedRequest(id, hash); done {
			return res, err
		}
	}
	r.propMu.Lock()
	if f := r.inflight[id]; f != nil {
		r.propMu.Unlock()
		if f.hash != hash {
			return Result{}, fmt.Errorf("%w: request %v is in flight with another entry", ErrRequestConflict, id)
		}
		select {
		case <-f.done:
			res := f.res
			if f.err == nil {
				res.Duplicate = true
			}
			return res, f.err
		case <-ctx.Done():
			return Result{}, fmt.Errorf("%w: request %v: waiting for the same request in flight: %w", ErrOutcomeUnknown, id, ctx.Err())
		case <-r.stopc:
			return Result{}, ErrClosed
		}
	}
	f := &inflightReq{hash: hash, done: make(chan struct{})}
	r.inflight[id] = f
	r.propMu.Unlock()
	defer func() {
		r.propMu.Lock()
		delete(r.inflight, id)
		r.propMu.Unlock()
		close(f.done)
	}()
	data, err := store.EncodeRequest(store.Request{ID: id, Stamp: time.Now().UnixMilli(),
		TTL: r.cfg.RequestTTL, Window: uint64(r.cfg.RequestWindow)}, entry)
	if err != nil {
		f.err = fmt.Errorf("replica: propose request: %w", err)
		return Result{}, f.err
	}
	f.res, f.err = r.propose(ctx, data)
	return f.res, f.err
}

// inflightReq is a ProposeRequest in progress; its result is set before
// done closes.
type inflightReq struct {
	hash [8]byte
	done chan struct{}
	res  Result
	err  error
}

// appliedRequest answers a request from the local request table: done is
// false when the table does not hold id.
func (r *Replica) appliedRequest(id store.RequestID, hash [8]byte) (Result, bool, error) {
	r.storeMu.RLock()
	rec, ok, err := r.st.LookupRequest(id)
	r.storeMu.RUnlock()
	switch {
	case err != nil:
		return Result{}, true, fmt.Errorf("replica: request table: %w", err)
	case !ok:
		return Result{}, false, nil
	case rec.PayloadHash != hash:
		return Result{}, true, fmt.Errorf("%w: request %v was applied at %d with another entry", ErrRequestConflict, id, rec.Index)
	}
	return Result{Index: rec.Index, Response: rec.Response, Duplicate: true}, true, nil
}

// propose appends data (an entry in its log form) and waits for its outcome.
func (r *Replica) propose(ctx context.Context, data []byte) (Result, error) {
	if err := r.usable(); err != nil {
		return Result{}, err
	}
	select {
	case r.sem <- struct{}{}:
	default:
		return Result{}, ErrQueueFull
	}
	defer func() { <-r.sem }()
	t := r.currentTerm()
	if t == nil || !t.enter() {
		return Result{}, r.notPrimary()
	}
	if err := r.waitConnected(ctx, t.done); err != nil {
		t.leave()
		if errors.Is(err, errTermEnded) {
			return Result{}, r.notPrimary()
		}
		return Result{}, err
	}
	idx, err := t.w.Append(ctx, data)
	t.leave()
	if err != nil {
		return Result{}, r.appendError(ctx, t, err)
	}
	r.noteCommitted(idx)
	res, err := r.awaitResponse(ctx, idx)
	if err != nil {
		return res, err
	}
	// Acknowledge only while connected (a primary that is cut off does not
	// know whether it still leads): wait for the reconnect — or for the
	// term to end, since the entry is committed whatever happens next.
	if err := r.waitConnected(ctx, t.done); err != nil && !errors.Is(err, errTermEnded) {
		return res, fmt.Errorf("%w: committed at %d; not acknowledged while the connection is down: %w", ErrNoResponse, idx, err)
	}
	return res, nil
}

// appendError maps a Writer.Append error (classifyAppend decides); a
// writer that is fenced or died (an outcome it could not resolve) ends the
// term.
func (r *Replica) appendError(ctx context.Context, t *term, err error) error {
	switch classifyAppend(err, ctx.Err() != nil) {
	case appendFenced:
		r.writerFailed(t, err)
		return fmt.Errorf("%w: %w", ErrFenced, err)
	case appendRefused:
		return fmt.Errorf("replica: propose: %w", err)
	case appendStopped:
		r.writerFailed(t, err)
		return r.notPrimary()
	case appendUnknownWriterDead:
		r.writerFailed(t, err)
		if r.cfg.bugs.unknownNotSent {
			return r.notPrimary()
		}
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	case appendNotSentClosed:
		if r.closing.Load() {
			return fmt.Errorf("%w: %w", ErrClosed, err)
		}
		return r.notPrimary()
	case appendNotSent:
		return err
	default:
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, err)
	}
}

// writerFailure tells the loop that term's writer cannot go on.
type writerFailure struct {
	t   *term
	err error
}

func (r *Replica) writerFailed(t *term, err error) {
	select {
	case r.writerFailc <- writerFailure{t, err}:
	default: // one report at a time is enough; the loop re-checks the term
	}
}

// awaitResponse waits until index is applied and returns its outcome.
func (r *Replica) awaitResponse(ctx context.Context, index uint64) (Result, error) {
	r.propMu.Lock()
	if r.applied.Load() >= index {
		o, ok := r.resps.get(index)
		r.propMu.Unlock()
		if !ok {
			return Result{Index: index}, fmt.Errorf("%w: entry %d applied long ago", ErrNoResponse, index)
		}
		return o.result(index)
	}
	ch := make(chan proposalOutcome, 1)
	r.waiters[index] = ch
	r.propMu.Unlock()
	select {
	case o := <-ch:
		return o.result(index)
	case <-ctx.Done():
	case <-r.stopc:
	}
	r.propMu.Lock()
	delete(r.waiters, index)
	r.propMu.Unlock()
	select {
	case o := <-ch: // delivered meanwhile
		return o.result(index)
	default:
	}
	if ctx.Err() != nil {
		return Result{Index: index}, fmt.Errorf("%w: entry %d: %w", ErrNoResponse, index, ctx.Err())
	}
	return Result{Index: index}, fmt.Errorf("%w: entry %d: %w", ErrNoResponse, index, ErrClosed)
}

// StepDown gives up the primary role: it stops accepting proposals, waits
// for those in flight to finish (bounded by ctx), closes the writer and
// re-enters the election at the back of the line. Returns ErrNotPrimary on
// a standby.
func (r *Replica) StepDown(ctx context.Context) error {
	if err := r.usable(); err != nil {
		return err
	}
	t := r.currentTerm()
	if t == nil {
		return r.notPrimary()
	}
	if err := r.drain(ctx, t); err != nil {
		t.resume()
		return fmt.Errorf("replica: step down: %w", err)
	}
	return r.request(ctx, loopRequest{kind: reqStepDown, term: t})
}

// drain stops accepting and waits until every proposal of t that entered
// Append has its outcome and everything t committed is applied.
func (r *Replica) drain(ctx context.Context, t *term) error {
	select {
	case <-t.stopAccepting():
	case <-ctx.Done():
		return ctx.Err()
	case <-t.done:
		return r.notPrimary()
	}
	return r.waitApplied(ctx, t.w.LastCommitted(), t.done, false)
}

// TransferLeadership hands the primary role to the live standby toID: it
// stops accepting proposals, drains those in flight, waits until toID has
// applied everything committed, records the transfer in the room, steps
// down, and waits until toID is primary (all bounded by ctx). Proposals
// that arrive meanwhile get ErrNotPrimary naming the old primary; retry
// them with the new one. An observer (MemberStatus.Observer) is refused
// as a target with ErrTransfer, before anything stops.
func (r *Replica) TransferLeadership(ctx context.Context, toID string) error {
	if err := r.usable(); err != nil {
		return err
	}
	if toID == r.cfg.ID {
		return fmt.Errorf("%w: %q is this replica", ErrTransfer, toID)
	}
	t := r.currentTerm()
	if t == nil {
		return r.notPrimary()
	}
	m, ok := r.member(toID)
	if !ok {
		return fmt.Errorf("%w: %q is not a live member", ErrTransfer, toID)
	}
	if m.Observer {
		return fmt.Errorf("%w: %q is an observer (it never leads)", ErrTransfer, toID)
	}
	t.mu.Lock()
	t.handoff = toID
	t.mu.Unlock()
	start := time.Now()
	if err := r.drain(ctx, t); err != nil {
		t.resume()
		return fmt.Errorf("%w: drain: %w", ErrTransfer, err)
	}
	drained := time.Now()
	last := t.w.LastCommitted()
	// Wait for the target to catch up — at most TransferTimeout, since no
	// proposal is accepted meanwhile, and no longer than it stays live.
	// Our member data asks for last (CatchUp): members publish as soon as
	// they reach it instead of at their own pace.
	r.catchUp.Store(last)
	r.ckptReady.Notify() // publish the CatchUp now, not at the loop's next tick
	cctx, ccancel := context.WithTimeout(ctx, r.cfg.TransferTimeout)
	err := r.waitMember(cctx, toID, func(m MemberStatus) bool { return m.Applied >= last && m.Role == RoleStandby })
	ccancel()
	r.catchUp.CompareAndSwap(last, 0) // a concurrent transfer may ask for another index
	if err != nil {
		t.resume()
		return fmt.Errorf("%w: %q did not catch up to %d: %w", ErrTransfer, toID, last, err)
	}
	caught := time.Now()
	if err := r.request(ctx, loopRequest{kind: reqTransfer, term: t, to: toID}); err != nil {
		t.resume()
		return err
	}
	stepped := time.Now()
	// We stepped down. Wait until the target leads.
	if err := r.waitMember(ctx, toID, func(m MemberStatus) bool { return m.Role == RolePrimary && m.Epoch > t.epoch }); err != nil {
		return fmt.Errorf("%w: %q did not take over: %w", ErrTransfer, toID, err)
	}
	r.log.Info("leadership transferred", "to", toID, "last", last, "took", time.Since(start),
		"drain", drained.Sub(start), "catch_up", caught.Sub(drained), "step_down", stepped.Sub(caught), "takeover", time.Since(stepped))
	return nil
}

// member returns the cached membership data of id.
func (r *Replica) member(id string) (MemberStatus, bool) {
	for _, m := range r.snap.Load().members {
		if m.ID == id {
			return m, true
		}
	}
	return MemberStatus{}, false
}

// waitMember waits until member id's cached data satisfies ok.
// It fails as soon as the member is no longer live (its member node is
// gone, e.g. its session expired).
func (r *Replica) waitMember(ctx context.Context, id string, ok func(MemberStatus) bool) error {
	for {
		ch := r.snap.Load().changed
		m, live := r.member(id)
		if !live {
			return fmt.Errorf("%q is no longer a live member", id)
		}
		if ok(m) {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-r.stopc:
			return ErrClosed
		}
	}
}

// takeoverRun is the asynchronous part of becoming primary: NewWriter
// (fences older epochs, seals the log end, opens a channel) and catching
// up to the log end. The loop owns it.
type takeoverRun struct {
	cancel context.CancelFunc
	done   chan struct{}
	// Set before done is closed:
	w   *logroom.Writer
	q   *commitQueue
	err error
	at  time.Time
}

func (r *Replica) startTakeover() *takeoverRun {
	ctx, cancel := context.WithCancel(r.bgCtx)
	tr := &takeoverRun{cancel: cancel, done: make(chan struct{}), q: newCommitQueue(&r.propMu), at: time.Now()}
	wcfg := r.cfg.Writer
	wcfg.Owner = r.cfg.ID
	wcfg.OnCommit = tr.q.push
	if _, hi := r.roomVersions(); wcfg.MaxRoomVersion == 0 || wcfg.MaxRoomVersion > hi {
		wcfg.MaxRoomVersion = hi
	}
	if wcfg.Logger == nil {
		wcfg.Logger = r.cfg.Logger
	}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(tr.done)
		// Before anything is written: the log must hold what we applied,
		// and the writer refuses a log that ends below our applied index.
		if err := r.matchLog(ctx); err != nil {
			tr.err = err
			return
		}
		// Nor below what we know was committed (lost.go).
		if err := r.checkCommittedHi(ctx, "the takeover found"); err != nil {
			tr.err = err
			return
		}
		wcfg.Applied = r.applied.Load()
		w, err := r.room.NewWriter(ctx, wcfg)
		if errors.Is(err, logroom.ErrDiverged) {
			// The log ends below what we applied: lost (marked as the
			// audit's finding is).
			err = fatal(logLost("the takeover found", err))
		}
		if err != nil {
			tr.err = err
			return
		}
		tr.w = w
		// Apply everything before our first index (the standby applier
		// keeps running until then).
		if need := w.StartIndex() - 1; need > 0 {
			tr.err = r.waitApplied(ctx, need, nil, false)
		}
	}()
	return tr
}

// RequestID names one logical request for ProposeRequest (see
// store.RequestID): 16 bytes, the zero value meaning none.
type RequestID = store.RequestID

// RequestIDFromKey derives a RequestID from a client's key (for example an
// HTTP Idempotency-Key): equal keys, equal ids.
func RequestIDFromKey(key string) RequestID { return store.RequestIDFromKey(key) }

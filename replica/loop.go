package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

// loopState is the run loop's private state. Only the loop goroutine (and
// Open, before the loop starts) touches it.
type loopState struct {
	el  *election
	mem *membership

	// sessionID is the session our ephemeral nodes belong to.
	sessionID int64
	// watchGen numbers the watches armed since the last (re)connect: every
	// reconnect re-reads and re-arms everything (go-zookeeper's SetWatches
	// after a reconnect can fail silently), and events of older watches are
	// ignored, so watches never pile up.
	watchGen  uint64
	connected bool
	discSince time.Time // zero while connected

	// Invariant: role == RolePrimary  <=> term != nil;
	//            role == RoleTakingOver <=> takeover != nil.
	role     Role
	term     *term
	takeover *takeoverRun
	applier  *applierRun // the one apply goroutine (standby tail or primary feed), nil while none

	// Dirty flags: work to (re)do when connected.
	electionDirty bool
	// membersDirty: the membership watcher's view moved since the last
	// reload.
	membersDirty bool
	lastPublish  time.Time
	lastChannels time.Time
	// pubSettled: publishDue chose the settled branch for the publish in
	// progress; settleSpent: the last publish was such a one (the next may
	// not be: at most one between two interval publishes).
	pubSettled, settleSpent bool
	// seenApplied is the applied index at the previous reconcile and
	// seenMoved when it last changed: an index that stopped moving is
	// published at once (see publishDue).
	seenApplied uint64
	seenMoved   time.Time
	notBefore   time.Time // takeover attempts wait until then (after a failure)
	// corruptTakeovers counts consecutive takeovers that failed with
	// ErrCorrupt; at confirmCorruptTakeovers the replica fails.
	corruptTakeovers int
	// resigned: a failed replica deleted its candidate and member nodes.
	resigned bool
	// staleSince: when publishing first found our member node held by
	// another session (zero: not now).
	staleSince  time.Time
	oldestFirst uint64 // first index of the oldest channel at the last refresh (0: unknown)
	view        electionView
	primaryID   string
	primaryAddr string
}

func newLoopState(r *Replica) (*loopState, error) {
	el, err := newElection(r.client, r.room.Path(electionDir), r.cfg.ID, r.cfg.AdvertiseAddr, r.log)
	if err != nil {
		return nil, err
	}
	return &loopState{
		el:            el,
		mem:           newMembership(r.client, r.room.Path(membersDir), r.cfg.ID, r.log),
		connected:     true,
		role:          RoleStandby,
		electionDirty: true,
	}, nil
}

// loopZKWait bounds the logroom calls the loop makes (they retry and wait
// for a session on connection loss): the loop must stay free to notice a
// lost session and end a term, so it never waits longer than this for
// ZooKeeper; what failed is retried on a later tick.
const loopZKWait = 300 * time.Millisecond

// electionZKWait bounds one evaluation of the election (a create, a Sync
// after a new session, a listing, reads of new candidates, a watch).
const electionZKWait = time.Second

// confirmCorruptTakeovers is how many consecutive takeovers must fail with
// ErrCorrupt before the replica calls the room damaged and fails.
const confirmCorruptTakeovers = 3

// Requests from API calls to the loop.
type reqKind int

const (
	reqStepDown reqKind = iota
	reqTransfer
)

type loopRequest struct {
	kind  reqKind
	term  *term
	to    string
	reply chan error
}

// request hands req to the loop and waits for its answer.
func (r *Replica) request(ctx context.Context, req loopRequest) error {
	req.reply = make(chan error, 1)
	select {
	case r.reqc <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.stopc:
		return ErrClosed
	}
	select {
	case err := <-req.reply:
		return err
	case <-r.loopDone:
		return ErrClosed
	}
}

// Watch plumbing: every ZooKeeper watch channel is handed to a forwarder
// goroutine that delivers its one event to the loop.
type watchKind int

const (
	watchElection watchKind = iota
)

type watchEvent struct {
	kind watchKind
	name string
	gen  uint64 // loopState.watchGen when the watch was armed
	ev   zk.Event
}

// forward delivers ch's one event to the loop (called by the loop only).
func (r *Replica) forward(kind watchKind, name string, ch <-chan zk.Event) {
	if ch == nil {
		return
	}
	gen := r.lp.watchGen
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		select {
		case ev := <-ch:
			select {
			case r.watchc <- watchEvent{kind: kind, name: name, gen: gen, ev: ev}:
			case <-r.bgCtx.Done():
			}
		case <-r.bgCtx.Done():
		}
	}()
}

// run is the loop: the one goroutine that owns role state.
func (r *Replica) run() {
	defer close(r.loopDone)
	lp := r.lp
	// The tick retries failed ZooKeeper work and publishes the applied index
	// (every MemberUpdateInterval while it moves, soon after it settles).
	tick := time.NewTicker(max(min(r.cfg.MemberUpdateInterval/4, appliedQuiet), 5*time.Millisecond))
	defer tick.Stop()
	lp.applier = r.startStandbyApplier()
	r.publishStatus()
	r.onSession()
	r.reconcile()
	events := r.events
	for {
		var applierDone, takeoverDone <-chan struct{}
		if lp.applier != nil {
			applierDone = lp.applier.done
		}
		if lp.takeover != nil {
			takeoverDone = lp.takeover.done
		}
		select {
		case <-r.stopc:
			r.shutdown()
			return
		case _, ok := <-events:
			if !ok {
				events = nil
			}
			r.onSession()
		case we := <-r.watchc:
			r.onWatch(we)
		case <-lp.mem.changed.C():
			lp.membersDirty = true
		case <-applierDone:
			r.onApplierExit()
		case <-takeoverDone:
			r.onTakeoverDone()
		case req := <-r.reqc:
			req.reply <- r.onRequest(req)
		case f := <-r.writerFailc:
			if f.t == lp.term {
				if errors.Is(f.err, logroom.ErrFenced) {
					r.log.Warn("primary fenced by a newer epoch; stepping down to standby", "epoch", f.t.epoch, "err", f.err)
					r.endTerm("fenced")
					r.requeue()
				} else {
					// The writer stopped (an outcome it could not learn): end
					// the term; if we are still the lowest candidate a new
					// takeover (epoch+1) finds the true log end.
					r.log.Warn("primary's writer stopped; ending the term", "epoch", f.t.epoch, "err", f.err)
					r.endTerm("writer stopped")
					lp.electionDirty = true
				}
			}
		case err := <-r.failc:
			r.fail(err)
		case <-r.ckptReady.C():
		case <-tick.C:
			r.onTick()
		}
		r.reconcile()
	}
}

// onSession reconciles with the client's current session state (events may
// have been coalesced; the state and session id are the truth).
func (r *Replica) onSession() {
	lp := r.lp
	state := r.client.State()
	sid := r.client.SessionID()
	ok := state == zk.StateHasSession
	wasConnected := lp.connected
	lp.connected = ok
	if state == zk.StateExpired && (lp.role == RolePrimary || lp.role == RoleTakingOver) {
		r.sessionLost("session expired")
	}
	if ok && sid != lp.sessionID {
		r.m.sessionExpired()
		r.log.Warn("zookeeper session replaced (expired); rebuilding membership and election",
			"old", fmt.Sprintf("0x%x", lp.sessionID), "new", fmt.Sprintf("0x%x", sid))
		r.sessionLost("session expired")
		lp.sessionID = sid
	}
	if ok != wasConnected {
		if ok {
			lp.watchGen++
			r.rearmAll()
			lp.discSince = time.Time{}
			r.log.Info("zookeeper connected", "session", fmt.Sprintf("0x%x", sid))
		} else {
			lp.discSince = time.Now()
			r.log.Warn("zookeeper connection lost; suspended", "state", state.String())
		}
	}
	r.setConnected(ok)
	r.publishStatus()
}

// sessionLost: our ephemerals and watches are gone. Leave any primary role
// and rebuild membership and election from scratch.
func (r *Replica) sessionLost(reason string) {
	lp := r.lp
	if lp.term != nil {
		r.endTerm(reason)
	}
	if lp.takeover != nil {
		r.abortTakeover(reason)
	}
	lp.staleSince = time.Time{}
	lp.watchGen++
	r.rearmAll()
}

// rearmAll marks every watched thing for a re-read (which re-arms it).
func (r *Replica) rearmAll() {
	lp := r.lp
	lp.electionDirty = true
}

func (r *Replica) onWatch(we watchEvent) {
	lp := r.lp
	if we.gen != lp.watchGen {
		// Armed before the last (re)connect: everything was re-read and
		// re-armed since, and the flags describe the new watches.
		return
	}
	switch we.kind {
	case watchElection:
		lp.electionDirty = true
	}
}

func (r *Replica) onTick() {
	lp := r.lp
	if !lp.connected && !lp.discSince.IsZero() && time.Since(lp.discSince) >= r.cfg.SessionTimeout {
		// Cut off for a whole session timeout: our session has expired on
		// the servers' side, so another member may lead. Stop leading now
		// rather than when we reconnect (Curator's LOST after SUSPENDED).
		if lp.term != nil {
			r.endTerm("disconnected past the session timeout")
		}
		if lp.takeover != nil {
			r.abortTakeover("disconnected past the session timeout")
		}
	}
}

// reconcile does the pending ZooKeeper work. Failures leave the dirty flags
// set; the tick retries.
func (r *Replica) reconcile() {
	lp := r.lp
	if r.fatalErr.Load() != nil {
		r.resignFailed()
		return
	}
	if !r.sessionLive() {
		return
	}
	// Our member node (role changes at once, applied at most every
	// MemberUpdateInterval).
	// The registration re-creates our node after an expiry; while another
	// session holds our id it cannot. Our previous session's node lingers
	// until that session expires on every server (or a stale server still
	// shows it): only a node held past the session timeout belongs to
	// another live process.
	if persistent, err := lp.mem.heldElsewhere(); err != nil {
		if lp.staleSince.IsZero() {
			lp.staleSince = time.Now()
			r.log.Warn("membership: our member node is held by another session; waiting for it to expire", "err", err)
		}
		// A persistent node never expires: at once.
		if persistent || time.Since(lp.staleSince) > r.cfg.SessionTimeout*3/2+time.Second {
			r.fail(fmt.Errorf("%w: %q (%v)", ErrDuplicateID, r.cfg.ID, err))
			return
		}
	} else {
		lp.staleSince = time.Time{}
	}
	if r.publishDue() {
		ctx, cancel := context.WithTimeout(r.bgCtx, loopZKWait)
		err := lp.mem.publish(ctx, r.ownMemberData())
		cancel()
		if err != nil {
			r.log.Debug("membership publish not confirmed yet; will retry", "err", err)
		} else {
			lp.lastPublish = time.Now()
			lp.settleSpent = lp.pubSettled
		}
	}
	if r.sessionLive() {
		r.refreshMembers()
	}
	if lp.electionDirty && r.sessionLive() {
		r.evaluateElection()
	}
	if time.Since(lp.lastChannels) >= time.Second && r.sessionLive() {
		r.refreshChannels()
	}
	r.publishStatus()
}

// sessionLive reports whether the loop may do ZooKeeper work now: it
// believes it is connected and the session is live right now (the loop may
// not have handled a disconnect event yet). A request made while
// go-zookeeper reconnects waits until it has tried every server (seconds),
// and the loop must stay free to notice a lost session and end a term, so
// each step of reconcile checks again.
func (r *Replica) sessionLive() bool {
	return r.lp.connected && r.client.State() == zk.StateHasSession
}

// appliedQuiet is how long the applied index must stay put to count as
// settled (published without waiting for MemberUpdateInterval).
const appliedQuiet = 20 * time.Millisecond

// publishDue says whether our member data should be rewritten now: no node
// yet; role or checkpoint changed; the applied index changed and either
// MemberUpdateInterval passed since the last publish or the index has
// settled (not moved for appliedQuiet, a tenth of the interval passed, and
// the previous publish was not itself a settled one). Under any load that
// is at most two writes per MemberUpdateInterval, one under a steady load;
// when the log goes quiet (the end of a burst) the final index is
// published within a tick or two if the settled publish is unspent, else
// at the next interval. A primary that waits for an index (TransferLeadership)
// asks for it through CatchUp and gets it at once. (Ten settled writes per interval, as before,
// let 300 members of 100 lightly loaded rooms write 3,000 times a second
// and starve the rooms' appends: bench scenario rooms.)
func (r *Replica) publishDue() bool {
	lp := r.lp
	now := time.Now()
	applied := r.applied.Load()
	if applied != lp.seenApplied {
		lp.seenApplied, lp.seenMoved = applied, now
	}
	f := publishFacts{Own: r.ownMemberData(), Asked: r.askedCatchUp(), Now: now, LastPublish: lp.lastPublish,
		SeenMoved: lp.seenMoved, SettleSpent: lp.settleSpent, Interval: r.cfg.MemberUpdateInterval}
	f.Published, f.Last = lp.mem.published != nil, lp.mem.last
	due, settled := decidePublish(f)
	lp.pubSettled = settled
	return due
}

// ownCatchUp is the CatchUp our member data carries: the index a handing
// over primary waits for, 0 otherwise.
func (r *Replica) ownCatchUp() uint64 {
	if r.lp == nil || r.lp.role != RolePrimary {
		return 0
	}
	return r.catchUp.Load()
}

// askedCatchUp is the CatchUp the primary's member data asks for (0: none).
func (r *Replica) askedCatchUp() uint64 {
	for _, d := range r.lp.mem.known {
		if d.Role == roleStrPrimary && d.ID != r.cfg.ID {
			return d.CatchUp
		}
	}
	return 0
}

func (r *Replica) ownMemberData() memberData {
	d := memberData{ID: r.cfg.ID, Addr: r.cfg.AdvertiseAddr, Role: roleStrStandby,
		Applied: r.applied.Load(), Checkpoint: r.localCkpt.Load(), CatchUp: r.ownCatchUp()}
	if r.lp != nil {
		d.Role = r.lp.role.String()
		if r.lp.term != nil {
			d.Epoch = r.lp.term.epoch
		}
	}
	if d.Epoch == 0 {
		d.Epoch = r.appliedEpoch.Load()
	}
	return d
}

func (r *Replica) refreshMembers() {
	lp := r.lp
	if !lp.membersDirty {
		return
	}
	lp.membersDirty = false
	lp.mem.reload()
	// The primary's published applied index is the best "committed" hint a
	// standby has.
	for _, d := range lp.mem.known {
		if d.Role == roleStrPrimary {
			r.noteCommitted(d.Applied)
		}
	}
}

// evaluateElection re-reads the election and acts on our position.
func (r *Replica) evaluateElection() {
	lp := r.lp
	ctx, cancel := context.WithTimeout(r.bgCtx, electionZKWait)
	v, err := lp.el.evaluate(ctx)
	cancel()
	if err != nil {
		r.log.Debug("election evaluation failed; will retry", "err", err)
		return
	}
	lp.electionDirty = false
	lp.view = v
	r.forward(watchElection, "", v.watch)
	if low, ok := v.lowest(); ok {
		lp.primaryID, lp.primaryAddr = low.ID, string(low.Data)
	}
	f, err := r.electionFacts()
	if err != nil {
		lp.electionDirty = true // a read failed: the tick retries
		return
	}
	switch act := decideElection(f); act {
	case elEndTerm:
		// Our node is no longer the lowest (it was deleted and re-created).
		r.endTerm("lost the lowest election position")
	case elAbortTakeover:
		r.abortTakeover("lost the lowest election position")
	case elRetryLater:
		lp.electionDirty = true
	case elRequeueTransfer:
		r.log.Info("election: lowest, but leadership is being transferred; re-queueing", "to", f.Transfer.To)
		r.requeue()
	case elRequeueBehind:
		r.log.Info("election: lowest, but our state is behind the deleted log and another candidate is not; re-queueing")
		r.requeue()
	case elTakeOver:
		r.log.Info("election: lowest candidate; taking over")
		lp.takeover = r.startTakeover()
		r.setRole(RoleTakingOver, "elected")
	}
}

// electionFacts gathers what decideElection needs. The transfer record,
// the room's epoch and the other candidates' applied indexes are read only
// when the takeover branch can be reached; a failed read is an error (the
// tick retries).
func (r *Replica) electionFacts() (electionFacts, error) {
	lp := r.lp
	f := electionFacts{
		Self: r.cfg.ID, Leader: lp.view.leader, Role: lp.role, Failed: r.fatalErr.Load() != nil,
		ApplierReady: lp.applier != nil && !lp.applier.primary,
		Now:          time.Now(), NotBefore: lp.notBefore,
		OldestFirst: lp.oldestFirst, Applied: r.applied.Load(),
	}
	if !f.needsTakeoverFacts() {
		return f, nil
	}
	rec, ok, err := r.readTransfer()
	if err != nil {
		return f, err
	}
	if ok {
		f.Transfer = &rec
		if rec.To != r.cfg.ID && f.Now.UnixMilli() < rec.Deadline {
			f.TransferToLive = r.isLiveCandidate(rec.To)
			ectx, cancel := context.WithTimeout(r.bgCtx, loopZKWait)
			f.RoomEpoch, err = r.room.Epoch(ectx)
			cancel()
			if err != nil {
				return f, err
			}
		}
	}
	if f.OldestFirst == 0 || f.Applied >= f.OldestFirst-1 {
		return f, nil // not behind: the others' positions cannot matter
	}
	for _, c := range lp.view.cands {
		if c.ID == r.cfg.ID {
			continue
		}
		if m, live := lp.mem.known[c.ID]; live {
			f.OthersApplied = append(f.OthersApplied, m.Applied)
		}
	}
	return f, nil
}

// isLiveCandidate reports whether id is in the line (an accepted candidate
// of the last election view).
func (r *Replica) isLiveCandidate(id string) bool {
	for _, c := range r.lp.view.cands {
		if c.ID == id {
			return true
		}
	}
	return false
}

func (r *Replica) readTransfer() (transferRecord, bool, error) {
	b, _, err := r.conn.Get(r.room.Path(transferZ))
	if errors.Is(err, zk.ErrNoNode) {
		return transferRecord{}, false, nil
	}
	if err != nil {
		return transferRecord{}, false, err
	}
	var rec transferRecord
	if err := decode(b, &rec); err != nil {
		r.log.Warn("ignoring malformed transfer record", "err", err)
		return transferRecord{}, false, nil
	}
	return rec, true, nil
}

// requeue moves our candidate to the back of the line.
func (r *Replica) requeue() {
	ctx, cancel := context.WithTimeout(r.bgCtx, electionZKWait)
	defer cancel()
	if err := r.lp.el.requeue(ctx); err != nil {
		r.log.Debug("election re-queue incomplete; will retry", "err", err)
	}
	r.lp.electionDirty = true
}

// onTakeoverDone finishes (or abandons) a takeover.
func (r *Replica) onTakeoverDone() {
	lp := r.lp
	tr := lp.takeover
	lp.takeover = nil
	act, corrupt := decideTakeover(tr.err, lp.corruptTakeovers)
	lp.corruptTakeovers = corrupt
	if act != toLead {
		if tr.w != nil {
			tr.w.Close()
		}
		if act == toFail {
			r.fail(tr.err)
			return
		}
		r.setRole(RoleStandby, "takeover failed")
		switch act {
		case toRequeue:
			r.log.Warn("takeover fenced by a concurrent writer; re-queueing", "err", tr.err)
			r.requeue()
		case toRetry:
			r.log.Warn("takeover failed; will retry", "err", tr.err, "corrupt_in_a_row", corrupt)
			lp.notBefore = time.Now().Add(200 * time.Millisecond)
			lp.electionDirty = true
		}
		return
	}
	w := tr.w
	// Stop the standby tail: it applied exactly up to StartIndex-1 and
	// nothing beyond exists yet (we have not appended).
	if lp.applier != nil {
		if err := r.stopApplier(false); err != nil {
			w.Close()
			r.fail(err)
			return
		}
	}
	if a := r.applied.Load(); a != w.StartIndex()-1 {
		// NewWriter checked that the log reached our applied index, so our
		// tail applied entries past its start: a newer primary wrote them
		// (our session expired while we caught up). Step back.
		w.Close()
		r.log.Warn("takeover overtaken: the standby tail applied entries past the writer's start; re-queueing",
			"applied", a, "start", w.StartIndex(), "epoch", w.Epoch())
		r.setRole(RoleStandby, "takeover overtaken by a newer primary")
		lp.applier = r.startStandbyApplier()
		r.requeue()
		return
	}
	t := &term{w: w, epoch: w.Epoch(), start: w.StartIndex(), q: tr.q, done: make(chan struct{}), accepting: true}
	lp.applier = r.startPrimaryApplier(tr.q)
	lp.term = t
	r.setTerm(t)
	r.noteCommitted(w.StartIndex() - 1)
	r.setRole(RolePrimary, "elected")
	r.log.Info("primary", "epoch", t.epoch, "start", t.start, "takeover", time.Since(tr.at))
	r.m.tookOver(time.Since(tr.at))
	// Clear a transfer record that named us (best effort).
	if rec, ok, err := r.readTransfer(); err == nil && ok && rec.To == r.cfg.ID {
		_ = r.conn.Delete(r.room.Path(transferZ), -1)
	}
}

// closeTerm ends the current term: no new proposals, its writer closed
// (pending appends get their outcome), waiters released. It returns the
// ended term. The caller checked lp.term != nil.
func (r *Replica) closeTerm() *term {
	lp := r.lp
	t := lp.term
	lp.term = nil
	r.setTerm(nil)
	t.stopAccepting()
	if err := t.w.Close(); err != nil {
		r.log.Debug("writer close", "err", err)
	}
	close(t.done)
	return t
}

// cancelTakeover cancels the takeover in progress, waits for it and closes
// the writer it may have opened. The caller checked lp.takeover != nil.
func (r *Replica) cancelTakeover() {
	lp := r.lp
	tr := lp.takeover
	lp.takeover = nil
	tr.cancel()
	if !r.unlessStalled("the takeover goroutine", tr.done) {
		// Stuck behind the disk (matchLog reads the store's position):
		// its writer, if it opened one, is closed when it ends.
		go func() {
			<-tr.done
			if tr.w != nil {
				tr.w.Close()
			}
		}()
		return
	}
	if tr.w != nil {
		tr.w.Close()
	}
}

// abortTakeover cancels a takeover in progress and waits for it.
func (r *Replica) abortTakeover(reason string) {
	r.cancelTakeover()
	r.log.Info("takeover aborted", "reason", reason)
	r.setRole(RoleStandby, reason)
}

// endTerm leaves the primary role: no new proposals, writer closed (its
// pending appends get their outcome), committed entries drained into the
// store, then the standby tail resumes from applied+1.
func (r *Replica) endTerm(reason string) {
	lp := r.lp
	// Visible at once: no new proposals and role standby in Status, before
	// the writer's close, which waits for its in-flight requests (queued
	// in go-zookeeper until it gives up on every server when the session
	// is lost).
	lp.term.stopAccepting()
	r.setTerm(nil)
	r.setRole(RoleStandby, reason)
	t := r.closeTerm()
	if lp.applier != nil {
		if err := r.stopApplier(true); err != nil {
			r.fail(err)
			return
		}
	}
	r.log.Info("no longer primary", "epoch", t.epoch, "reason", reason, "applied", r.applied.Load())
	lp.applier = r.startStandbyApplier()
}

// stopApplier stops lp.applier (a primary's drains first if drain) and
// returns its error; a run stuck on a stalled disk is left behind and
// reported as the stall.
func (r *Replica) stopApplier(drain bool) error {
	a := r.lp.applier
	r.lp.applier = nil
	if !a.stop(drain, r.unlessStalled) {
		return fmt.Errorf("replica: apply stuck on the local disk: %w", store.ErrDiskStalled)
	}
	return a.err
}

// onApplierExit: the apply goroutine returned on its own (error).
func (r *Replica) onApplierExit() {
	lp := r.lp
	a := lp.applier
	lp.applier = nil
	a.cancel()
	if a.err != nil {
		r.fail(a.err)
		return
	}
	if lp.role == RoleStandby || lp.role == RoleTakingOver {
		lp.applier = r.startStandbyApplier()
	}
}

func (r *Replica) onRequest(req loopRequest) error {
	lp := r.lp
	if lp.term == nil || lp.term != req.term {
		return r.notPrimary()
	}
	switch req.kind {
	case reqStepDown:
		r.endTerm("step down")
		r.requeue()
		return nil
	case reqTransfer:
		rec := transferRecord{V: formatVersion1, From: r.cfg.ID, To: req.to, Epoch: req.term.epoch,
			Deadline: time.Now().Add(r.cfg.TransferTimeout).UnixMilli()}
		if err := r.writeTransfer(rec); err != nil {
			return fmt.Errorf("%w: write transfer record: %w", ErrTransfer, err)
		}
		r.endTerm("leadership transfer to " + req.to)
		r.requeue()
		return nil
	}
	return fmt.Errorf("replica: unknown request %d", req.kind)
}

// writeTransfer (re)creates the ephemeral transfer record.
func (r *Replica) writeTransfer(rec transferRecord) error {
	p := r.room.Path(transferZ)
	data := encode(rec)
	for i := 0; i < 3; i++ {
		_, err := r.conn.Create(p, data, zk.FlagEphemeral, r.acl)
		if err == nil {
			return nil
		}
		if !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
		if err := r.conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
	}
	return errors.New("transfer record kept reappearing")
}

// fail stops the replica's participation after an unrecoverable error:
// leave any primary role, stop applying, resign election and membership.
func (r *Replica) fail(err error) {
	if err == nil || r.fatalErr.Load() != nil {
		return
	}
	r.log.Error("replica failed; it no longer participates (Close it)", "err", err)
	r.fatalErr.Store(&err)
	lp := r.lp
	if lp.term != nil {
		r.closeTerm()
	}
	if lp.takeover != nil {
		r.cancelTakeover()
	}
	if lp.applier != nil {
		_ = r.stopApplier(false)
	}
	r.setRole(RoleFailed, err.Error())
	r.resignFailed()
	// Proposals waiting for their entry's apply (it is committed) and
	// WaitApplied/Barrier callers return now instead of at their deadline.
	r.failWaiters(fmt.Errorf("%w: %w", ErrNoResponse, ErrFailed))
	r.signalApplied()
}

// resignFailed deletes a failed replica's candidate and member nodes so
// that failover proceeds without it. The loop's reconcile retries it while
// it has not succeeded (the nodes would otherwise stay as long as the
// session lives, and a lowest candidate that never takes over blocks every
// other one).
func (r *Replica) resignFailed() {
	lp := r.lp
	if lp.resigned || !lp.connected {
		return
	}
	wait := min(r.cfg.SessionTimeout, 2*time.Second)
	ctx, cancel := context.WithTimeout(r.bgCtx, wait)
	errE := lp.el.resign(ctx)
	cancel()
	ctx, cancel = context.WithTimeout(r.bgCtx, wait)
	errM := lp.mem.resign(ctx)
	cancel()
	if errE != nil || errM != nil {
		r.log.Warn("failed replica: resigning election and membership incomplete; will retry", "election", errE, "membership", errM)
		return
	}
	lp.resigned = true
	r.log.Info("failed replica resigned its election candidate and member node")
}

// shutdown is the loop's part of Close.
func (r *Replica) shutdown() {
	lp := r.lp
	if lp.term != nil {
		r.closeTerm()
	}
	if lp.takeover != nil {
		r.cancelTakeover()
	}
	if lp.applier != nil {
		_ = r.stopApplier(lp.applier.primary)
	}
	// Our nodes are deleted if the session lets us within the bound (they
	// go with the session otherwise); the membership registration's keeper
	// and watcher stop in any case.
	wait := min(r.cfg.SessionTimeout, 2*time.Second)
	if !lp.connected {
		wait = 0
	}
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	if err := lp.el.resign(ctx); err != nil {
		r.log.Debug("resign election", "err", err)
	}
	cancel()
	lp.el.close()
	ctx, cancel = context.WithTimeout(context.Background(), wait)
	if err := lp.mem.close(ctx); err != nil {
		r.log.Debug("resign membership", "err", err)
	}
	cancel()
	r.setRole(RoleClosed, "closed")
}

// setRole records a role change, publishes it and notifies RoleChanges.
func (r *Replica) setRole(role Role, reason string) {
	lp := r.lp
	if lp.role == role {
		return
	}
	lp.role = role
	var epoch uint64
	if lp.term != nil {
		epoch = lp.term.epoch
	} else {
		epoch = r.appliedEpoch.Load()
	}
	// The role in the status snapshot and the RoleChanges event change
	// together, under statusMu: whoever sees the new role in Status finds
	// the change already queued, and whoever receives the change and then
	// asks Status sees the new role. (The member publish below is a
	// ZooKeeper round trip.)
	rc := RoleChange{Role: role, Epoch: epoch, Reason: reason, At: time.Now()}
	r.statusMu.Lock()
	r.snap.role, r.snap.epoch = role, epoch
	for sent := false; !sent; {
		select {
		case r.roleCh <- rc:
			sent = true
		default:
			select {
			case <-r.roleCh: // drop the oldest
			default:
			}
		}
	}
	r.statusMu.Unlock()
	r.publishStatus()
	if lp.connected && role != RoleClosed && role != RoleFailed {
		ctx, cancel := context.WithTimeout(r.bgCtx, loopZKWait)
		if err := lp.mem.publish(ctx, r.ownMemberData()); err == nil {
			lp.lastPublish, lp.settleSpent = time.Now(), false
		}
		cancel()
	}
}

// refreshChannels updates the channel figures in Status.
func (r *Replica) refreshChannels() {
	lp := r.lp
	lp.lastChannels = time.Now()
	ctx, cancel := context.WithTimeout(r.bgCtx, loopZKWait)
	defer cancel()
	chans, err := r.room.Channels(ctx)
	if err != nil {
		return
	}
	var open uint64
	var bytes int64
	if len(chans) > 0 {
		lp.oldestFirst = chans[0].FirstIndex
	}
	for _, c := range chans {
		bytes += c.Bytes
		if !c.Sealed {
			open = c.Num
		}
	}
	r.statusMu.Lock()
	r.snap.openChannel, r.snap.channels, r.snap.roomBytes = open, len(chans), bytes
	r.statusMu.Unlock()
}

// publishStatus copies the loop's view into the Status snapshot.
func (r *Replica) publishStatus() {
	lp := r.lp
	var epoch uint64
	if lp.term != nil {
		epoch = lp.term.epoch
	} else {
		epoch = r.appliedEpoch.Load()
	}
	members := lp.mem.snapshot()
	pid, paddr := lp.primaryID, lp.primaryAddr
	var best uint64
	for _, m := range members {
		if m.Role == RolePrimary && m.Epoch >= best {
			best, pid, paddr = m.Epoch, m.ID, m.Addr
		}
	}
	if lp.role == RolePrimary {
		pid, paddr = r.cfg.ID, r.cfg.AdvertiseAddr
	}
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	if pid != r.snap.primaryID && pid != "" {
		r.m.leaderChanged()
	}
	r.snap.role = lp.role
	r.snap.epoch = epoch
	r.snap.primaryID, r.snap.primaryAddr = pid, paddr
	r.snap.members = members
	r.snap.connState = r.client.State()
	r.snap.sessionID = r.client.SessionID()
	r.snap.suspended = lp.discSince
	if r.statusCh != nil {
		close(r.statusCh)
	}
	r.statusCh = make(chan struct{})
}

// statusChanged returns a channel closed at the next publishStatus.
func (r *Replica) statusChanged() <-chan struct{} {
	r.statusMu.Lock()
	defer r.statusMu.Unlock()
	if r.statusCh == nil {
		r.statusCh = make(chan struct{})
	}
	return r.statusCh
}

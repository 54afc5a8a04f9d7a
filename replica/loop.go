package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
	"github.com/roomlog/roomlog/zkx"
)

// loopState is the run loop's private state. Only the loop goroutine (and
// Open, before the loop starts) touches its fields; the ZooKeeper
// workers' jobs use el and mem (their I/O; only lane 0's jobs, one at a
// time), and hand their results back to the loop. The role decisions and the
// state they need are the core's (core.go); loopState holds the resources
// the core's actions act on and the bookkeeping of the loop's own
// ZooKeeper work.
type loopState struct {
	c   *core
	el  *election
	mem *membership
	// probeDone: the cut-off probe's result (lost.go; one at a time);
	// linkDone: the link probe's (one at a time, see linkProbe).
	probeDone chan probeResult
	linkDone  chan evLinkProbed
	// movedDone: the room-version move's result (one at a time).
	movedDone chan evRoomVersionMoved

	// The resources of the core's role (see core's invariants): the term is
	// published in Replica.term (Propose reads it); the takeover goroutine;
	// the one apply goroutine (standby tail or primary feed), nil while none.
	takeover *takeoverRun
	applier  *applierRun
	// stopped is the term that stopped accepting and is about to end
	// (aStopAccepting .. aEndTerm), nil otherwise; ending is a term being
	// ended off the loop (endTerm), nil otherwise.
	stopped *term
	ending  *termEnding
	// reply is where the answer of the request being handled goes.
	reply chan error

	// The loop's ZooKeeper work runs in worker goroutines, one job at a
	// time per lane, each bounded by its own context; the loop applies
	// each job's result when it arrives (jobDone) and never waits for
	// ZooKeeper itself. jobs are the lanes' queues, running says a lane's
	// job is out, pending counts the queued and running jobs by name.
	// Lane 0 keeps the order of everything the election, the term, the
	// transfer and our member data write and read; lane 1 runs the long
	// reads that need no order with them (laneOf), so an election read or
	// a hand-off's catch-up publish never queues behind a listing of the
	// channels or an audit of the log.
	jobs    [2][]zkJob
	running [2]bool
	pending map[string]int
	// elGen counts the re-queues and resignations asked for: an election
	// read that started before one is stale.
	elGen uint64
	// settling: the publish queued is a settled one (see publishDue).
	settling bool
	// evq: events waiting for the core while the actions of an earlier one
	// are carried out (step); stepping: step is running.
	evq      []any
	stepping bool
	// offeredFor: the oldest first index for which a checkpoint was last
	// offered (offerCheckpoint), so it is asked for once.
	offeredFor uint64
	// termWatched: the epoch of the term whose candidate node and fence
	// were last checked and are watched (watchTerm); 0: none, check again.
	termWatched uint64

	// membersDirty: the membership watcher's view moved since the last
	// reload.
	membersDirty bool
	lastPublish  time.Time
	lastChannels time.Time
	lastAudit    time.Time // when the last log audit was queued
	auditSoon    bool      // a channel read found a lost batch: audit at once
	auditFails   int       // consecutive audits that did not complete
	// pubSettled: publishDue chose the settled branch for the publish in
	// progress; settleSpent: the last publish was such a one (the next may
	// not be: at most one between two interval publishes).
	pubSettled, settleSpent bool
	// seenApplied is the applied index at the previous reconcile and
	// seenMoved when it last changed: an index that stopped moving is
	// published at once (see publishDue).
	seenApplied uint64
	seenMoved   time.Time
	oldestFirst uint64 // first index of the oldest channel at the last refresh (0: unknown)
	hash        *hashCheck
	hashStore   *store.Store             // the store hash's comparisons were made against
	hashAgree   map[string]hashAgreement // peers whose latest hash equals ours (published)
	view        electionView
	primaryID   string
	primaryAddr string
}

func newLoopState(r *Replica) (*loopState, error) {
	el, err := newElection(r.client, r.room.Path(electionDir), r.cfg.ID, r.cfg.AdvertiseAddr, r.log)
	if err != nil {
		return nil, err
	}
	el.observer = r.cfg.Observer
	c := newCore(r.cfg.ID, r.cfg.SessionTimeout, r.client.SessionID())
	c.room, c.linkBound, c.rv = r.cfg.Room, r.cfg.LinkProbeBound, r.rvIdentity()
	c.bugs = r.cfg.bugs.core
	return &loopState{
		c:         c,
		el:        el,
		mem:       newMembership(r.client, r.room.Path(membersDir), r.cfg.ID, r.log),
		pending:   map[string]int{},
		hash:      newHashCheck(),
		probeDone: make(chan probeResult, 1),
		linkDone:  make(chan evLinkProbed, 8),
		movedDone: make(chan evRoomVersionMoved, 1),
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

// A request from an API call to the loop (its kind is the core's).
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
	// watchTerm: the primary's candidate node or its epoch znode changed.
	watchTerm
)

type watchEvent struct {
	kind watchKind
	name string
	gen  uint64 // core.watchGen when the watch was armed
	ev   zk.Event
}

// forward delivers ch's one event to the loop (called by the loop only).
func (r *Replica) forward(kind watchKind, name string, ch <-chan zk.Event) {
	if ch == nil {
		return
	}
	gen := r.lp.c.watchGen
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

// run is the loop: the one goroutine that owns the core and the resources
// its actions act on.
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
		reqc := r.reqc
		if lp.reply != nil {
			reqc = nil // one request at a time: its answer is pending
		}
		if lp.takeover != nil {
			takeoverDone = lp.takeover.done
		}
		var endingDone <-chan struct{}
		if lp.ending != nil {
			endingDone = lp.ending.done
		}
		// A primary handing over waits for our applied index to reach its
		// CatchUp: publish the moment it does, not at the next tick (an
		// observer is never the target: it waits for no one).
		var caughtUp <-chan struct{}
		if asked := r.askedCatchUp(); asked > lp.mem.last.Applied && !r.cfg.Observer {
			if ch := r.appliedChanged(); r.applied.Load() < asked { // the channel first: no advance missed
				caughtUp = ch
			}
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
			switch we.kind {
			case watchElection:
				r.step(evWatch{Gen: we.gen})
			case watchTerm:
				lp.termWatched = 0 // check again (reconcile), and re-arm
			}
		case <-lp.mem.changed.C():
			lp.membersDirty = true
		case <-applierDone:
			a := lp.applier
			lp.applier = nil
			a.cancel()
			r.step(evApplierExit{Err: a.err})
		case <-endingDone:
			r.onTermEnded()
		case <-takeoverDone:
			tr := lp.takeover
			r.step(evTakeoverDone{Now: time.Now(), Err: tr.err})
			if lp.takeover == tr { // not consumed by the core's actions: cannot happen
				r.do(action{Kind: aDropTakeover})
			}
		case req := <-reqc:
			r.onRequest(req)
		case res := <-r.jobDone:
			r.onJobDone(res)
		case f := <-r.writerFailc:
			if f.t == r.currentTerm() {
				r.step(evWriterFailed{Epoch: f.t.epoch, Fenced: errors.Is(f.err, logroom.ErrFenced), Err: f.err})
			}
		case err := <-r.failc:
			r.step(evFail{Err: err})
		case res := <-lp.probeDone:
			r.step(evProbed{Now: time.Now(), Reached: res.reached, Verdict: res.verdict})
		case ev := <-lp.movedDone:
			r.step(ev)
		case ev := <-lp.linkDone:
			ev.Now = time.Now()
			r.step(ev)
		case <-r.ckptReady.C():
		case <-caughtUp:
		case <-tick.C:
			// A link probe's answer that waited behind a busy loop is taken
			// first: the tick must not find it out past its bound.
			select {
			case ev := <-lp.linkDone:
				ev.Now = time.Now()
				r.step(ev)
			default:
			}
			r.step(evTick{Now: time.Now()})
		}
		r.reconcile()
	}
}

// step feeds ev to the core and carries out its actions, in order. An
// action that answers with an event (aStopTail: evTailStopped) queues it:
// it is stepped once the actions of the current event are all carried
// out, never from inside one (no nested steps: the core sees one event at
// a time, and the order of actions is the order it returned them).
func (r *Replica) step(ev any) {
	lp := r.lp
	lp.evq = append(lp.evq, ev)
	if lp.stepping {
		return
	}
	lp.stepping = true
	defer func() { lp.stepping = false }()
	for len(lp.evq) > 0 {
		ev := lp.evq[0]
		lp.evq = lp.evq[1:]
		for _, a := range lp.c.Step(ev) {
			r.do(a)
		}
	}
}

// do carries out one action of the core.
func (r *Replica) do(a action) {
	lp := r.lp
	switch a.Kind {
	case aRole:
		r.announceRole(a.Role, a.Epoch, a.Reason)
	case aSessionNew:
		r.m.sessionExpired()
		r.log.Warn("zookeeper session replaced (expired); rebuilding membership and election",
			"old", fmt.Sprintf("0x%x", a.Old), "new", fmt.Sprintf("0x%x", a.New))
	case aConnected:
		r.log.Info("zookeeper connected", "session", fmt.Sprintf("0x%x", lp.c.sessionID))
		// What the ensemble holds may have changed while we were away
		// (restored from an older copy: lost.go): audit at once.
		lp.auditSoon = true
	case aDisconnected:
		r.log.Warn("zookeeper connection lost; suspended", "state", a.Reason)
	case aStopAccepting:
		if t := r.currentTerm(); t != nil {
			t.finish()
			r.setTerm(nil)
			lp.stopped = t
		}
	case aEndTerm:
		r.endTerm(a.Reason)
	case aAbortTakeover:
		r.cancelTakeover()
		r.log.Info("takeover aborted", "reason", a.Reason)
	case aDropTakeover:
		tr := lp.takeover
		lp.takeover = nil
		if tr != nil && tr.w != nil {
			tr.w.Close()
		}
	case aRequeue:
		if a.Err != nil {
			r.log.Warn("election: re-queueing", "reason", a.Reason, "err", a.Err)
		} else {
			r.log.Info("election: re-queueing", "reason", a.Reason)
		}
		r.requeue()
	case aStartTakeover:
		r.log.Info("election: lowest candidate; taking over")
		lp.takeover = r.startTakeover()
	case aStopTail:
		tr := lp.takeover
		var err error
		if lp.applier != nil {
			err = r.stopApplier(false)
		}
		r.step(evTailStopped{Err: err, Applied: r.applied.Load(), Start: tr.w.StartIndex(), Epoch: tr.w.Epoch()})
	case aLead:
		r.lead()
	case aStartTail:
		if lp.applier == nil {
			lp.applier = r.startStandbyApplier()
		}
	case aClearTransfer:
		r.clearTransfer()
	case aWriteTransfer:
		t := r.currentTerm()
		rec := transferRecord{V: formatVersion1, From: r.cfg.ID, To: a.To, Epoch: t.epoch,
			Deadline: time.Now().Add(r.cfg.TransferTimeout).UnixMilli()}
		r.enqueue(zkJob{name: "write-transfer", bound: electionZKWait, run: func(ctx context.Context) func() {
			err := r.writeTransfer(ctx, rec)
			return func() { r.step(evTransferWritten{Epoch: a.Epoch, To: a.To, Err: err}) }
		}})
	case aReply:
		err := a.Err
		if a.NotPrimary {
			err = r.notPrimary()
		}
		if lp.reply != nil {
			lp.reply <- err
			lp.reply = nil
		}
	case aFail:
		r.fail(a.Err)
	case aMarkLost:
		r.markLostJob(a.Err)
	case aResign:
		r.resignFailed()
	case aLog:
		r.log.Warn(a.Reason, "err", a.Err)
	case aLinkProbe:
		r.linkProbe(a.Gen)
	case aReads:
		if a.Serve {
			r.log.Info(a.Reason)
		} else {
			r.log.Warn(a.Reason)
		}
		r.publishSnap(func(s *statusSnap) { s.linkCut = !a.Serve })
	case aProbe:
		r.startProbe()
	case aRoomVersion:
		r.recordRoomVersion(a.RV.Record)
		r.publishSnap(func(s *statusSnap) {
			s.roomVersion, s.roomVersionSince, s.roomVersionTarget = a.RV.Version, a.RV.Since, a.RV.Target
		})
	case aVersionBlocked:
		if a.Warn {
			r.log.Warn("room version", "why", a.Reason)
		}
		r.publishSnap(func(s *statusSnap) { s.roomVersionBlocked = a.Reason })
	case aMoveRoomVersion:
		r.moveRoomVersion(a.RV.Version, a.RV.To)
	default:
		panic(fmt.Sprintf("replica: unknown action %v", a))
	}
}

// onSession feeds the client's current session state to the core (events
// may have been coalesced; the state and session id are the truth).
func (r *Replica) onSession() {
	state := r.client.State()
	r.step(evSession{Now: time.Now(), State: state, SessionID: r.client.SessionID()})
	r.setConnected(state == zk.StateHasSession)
	r.publishStatus()
}

// zkJob is one piece of the loop's ZooKeeper work: run does the I/O in
// the worker goroutine, bounded by ctx (which ends after bound), and
// returns what the loop then applies (nil: nothing).
type zkJob struct {
	name  string
	bound time.Duration
	run   func(ctx context.Context) func()
}

type jobResult struct {
	name  string
	lane  int
	apply func()
}

// laneOf is the lane a job runs in: 1 for the long reads whose order
// with the other jobs does not matter (the channel listing for Status,
// the log audit), 0 for the rest.
func laneOf(name string) int {
	if name == "channels" || name == "audit" {
		return 1
	}
	return 0
}

// enqueue queues j behind the jobs already queued in its lane (their
// order is the order of their effects in ZooKeeper) and starts it when
// the lane's worker is free. The one exception: an election read goes
// ahead of member-data writes still queued (a publish's effect does not
// depend on the election's, nor the election read on our member data),
// so a takeover's first read does not wait behind the publishes a role
// change sets off among the members.
func (r *Replica) enqueue(j zkJob) {
	lp := r.lp
	l := laneOf(j.name)
	q := lp.jobs[l]
	at := len(q)
	if j.name == "election" {
		for at > 0 && q[at-1].name == "publish" {
			at--
		}
	}
	lp.jobs[l] = append(q[:at], append([]zkJob{j}, q[at:]...)...)
	lp.pending[j.name]++
	r.startJob(l)
}

// startJob hands lane l's next queued job to a worker goroutine. One job
// per lane runs at a time, so its send on jobDone (capacity 2, one per
// lane) never blocks, even after the loop has returned.
func (r *Replica) startJob(l int) {
	lp := r.lp
	if lp.running[l] || len(lp.jobs[l]) == 0 {
		return
	}
	j := lp.jobs[l][0]
	lp.jobs[l] = lp.jobs[l][1:]
	lp.running[l] = true
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.bgCtx, j.bound)
		apply := j.run(ctx)
		cancel()
		r.jobDone <- jobResult{name: j.name, lane: l, apply: apply}
	}()
}

func (r *Replica) onJobDone(res jobResult) {
	lp := r.lp
	lp.running[res.lane] = false
	lp.pending[res.name]--
	if res.apply != nil {
		res.apply()
	}
	r.startJob(res.lane)
}

// reconcile queues the ZooKeeper work that is due (at most one job of
// each kind is queued; what failed is queued again on a later tick).
func (r *Replica) reconcile() {
	lp := r.lp
	if lp.c.failed {
		for _, a := range lp.c.resignDue(time.Now()) {
			r.do(a)
		}
		return
	}
	if !r.sessionLive() {
		return
	}
	// Our member node: the registration re-creates it after an expiry;
	// while another session holds our id it cannot (the core decides when
	// that is a duplicate).
	persistent, held := lp.mem.heldElsewhere()
	r.step(evHeld{Now: time.Now(), Persistent: persistent, Err: held})
	if lp.c.failed {
		return
	}
	if lp.pending["publish"] == 0 && r.publishDue() {
		r.publishMember(lp.pubSettled)
	}
	r.refreshMembers()
	r.checkHashes()
	if lp.c.failed {
		return
	}
	if t := r.currentTerm(); t != nil && lp.termWatched != t.epoch && lp.pending["term-watch"] == 0 {
		r.watchTerm(t)
	}
	// An observer never reads the election: it holds no candidate, and
	// the core's election stays due (dirty) without anything polling it.
	if !r.cfg.Observer && lp.c.electionDue() && lp.pending["election"] == 0 {
		r.evaluateElection()
	}
	if time.Since(lp.lastChannels) >= time.Second && lp.pending["channels"] == 0 {
		r.refreshChannels()
	}
	if r.auditLogDue() {
		r.auditRoom()
	}
	r.publishStatus()
}

// watchTerm checks that the primary's term still holds its candidate node
// and its fence (the epoch znode at its writer's version) and watches both:
// a term deposed without writing (its candidate deleted by a liveness
// deposition that was wrong, or by an operator; a newer epoch; the room
// replaced) ends within a round trip of the change instead of at its next
// write. A failed check is retried by a later reconcile.
func (r *Replica) watchTerm(t *term) {
	lp := r.lp
	r.enqueue(zkJob{name: "term-watch", bound: electionZKWait, run: func(ctx context.Context) func() {
		fenced, fch, err := t.w.WatchFence(ctx)
		var held bool
		var cch <-chan zk.Event
		node := lp.el.line.Node()
		if err == nil && !fenced && node != "" {
			held, _, cch, err = zkx.ExistsW(ctx, r.client, r.room.Path(electionDir, node))
		}
		return func() {
			if r.currentTerm() != t {
				return // the term ended meanwhile
			}
			switch {
			case err != nil:
				r.log.Debug("term watch failed; will retry", "err", err)
			case fenced:
				r.step(evDeposed{Epoch: t.epoch, Reason: "a newer epoch took the room, or the room was replaced"})
			case !held:
				r.step(evDeposed{Epoch: t.epoch, Reason: fmt.Sprintf("our candidate node %s was deleted", node)})
			default:
				lp.termWatched = t.epoch
				r.forward(watchTerm, "epoch", fch)
				r.forward(watchTerm, "candidate", cch)
			}
		}
	}})
}

// publishMember queues a write of our member data as it is now.
func (r *Replica) publishMember(settled bool) {
	lp := r.lp
	d := r.ownMemberData()
	r.enqueue(zkJob{name: "publish", bound: loopZKWait, run: func(ctx context.Context) func() {
		data, err := lp.mem.update(ctx, d)
		return func() {
			if err != nil {
				r.log.Debug("membership publish not confirmed yet; will retry", "err", err)
				return
			}
			lp.mem.record(data, d)
			r.holdPublished.Store(d.Hold)
			lp.lastPublish = time.Now()
			lp.settleSpent = settled
		}
	}})
}

// sessionLive reports whether the loop may do ZooKeeper work now: the core
// believes it is connected and the session is live right now (the loop may
// not have handled a disconnect event yet). A request made while
// go-zookeeper reconnects waits until it has tried every server (seconds),
// and the loop must stay free to notice a lost session and end a term, so
// each step of reconcile checks again.
func (r *Replica) sessionLive() bool {
	return r.lp.c.connected && r.client.State() == zk.StateHasSession
}

// publishDue says whether our member data should be rewritten now
// (decidePublish): no node yet; role or checkpoint changed; the applied
// index changed and either MemberUpdateInterval passed since the last
// publish or the index has settled (not moved for appliedQuiet, a tenth of
// the interval passed, and the previous publish was not itself a settled
// one). Under any load that is at most two writes per
// MemberUpdateInterval, one under a steady load; when the log goes quiet
// the final index is published within a tick or two if the settled
// publish is unspent, else at the next interval. A primary that waits for
// an index (TransferLeadership) asks for it through CatchUp and gets it at
// once. Many rooms' members share the ensemble, so member writes stay
// few.
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
	if r.lp == nil || r.lp.c.role != RolePrimary {
		return 0
	}
	return r.catchUp.Load()
}

// askedCatchUp is the CatchUp the primary's member data asks for (0: none).
func (r *Replica) askedCatchUp() uint64 {
	if p, ok := primaryOf(r.lp.mem.known); ok && p.ID != r.cfg.ID {
		return p.CatchUp
	}
	return 0
}

func (r *Replica) ownMemberData() memberData {
	rh := r.RunHash()
	d := memberData{ID: r.cfg.ID, Addr: r.cfg.AdvertiseAddr, Role: roleStrStandby,
		Applied: r.applied.Load(), Checkpoint: r.localCkpt.Load(), CatchUp: r.ownCatchUp(),
		Hash: rh.String(), HashAt: rh.Index, HashBase: rh.Base, Observer: r.cfg.Observer,
		Hold: r.hold.Load(), Identities: sessionIdentities(r.client)}
	if d.Hold != 0 {
		d.HoldProgress = r.holdProgress.Load()
	}
	d.RVMin, d.RVMax = r.roomVersions()
	if rh.Index == 0 {
		d.Hash = "" // nothing applied: nothing to compare
	}
	if r.lp != nil && r.lp.hashStore == r.stRun.Load() {
		// The agreements of the store the hash comes from: after a
		// bootstrap swapped it, none until checkHashes compared the new
		// chain (the old store's would vouch for a chain they never saw).
		d.HashAgree = r.lp.hashAgree
	}
	if r.lp != nil {
		d.Role = r.lp.c.role.String()
		d.Epoch = r.lp.c.epoch
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
	r.updateLiveTarget()
	if r.cfg.Observer {
		// An observer reads no election: the primary is the member that
		// leads the newest epoch by its data.
		lp.primaryID, lp.primaryAddr = "", ""
		if p, ok := primaryOf(lp.mem.known); ok {
			lp.primaryID, lp.primaryAddr = p.ID, p.Addr
		}
	}
	// The primary's published applied index is the best "committed" hint a
	// standby has.
	if p, ok := primaryOf(lp.mem.known); ok {
		r.noteCommitted(p.Applied)
	}
}

// evaluateElection queues a read of the election (our position; when we
// are the lowest, the transfer record and, for a fresh record naming
// another member, the room's epoch) and hands what it read to the core. A
// read that started before a reconnect, a new session, a re-queue or a
// resignation is dropped (the core has marked the election due again).
func (r *Replica) evaluateElection() {
	lp := r.lp
	gen, eg := lp.c.watchGen, lp.elGen
	// The transfer record and the room's epoch matter only where the
	// takeover branch can be reached (needsTakeoverFacts): read them only
	// if it may be, as of now (onElectionRead retries if that changed).
	may := electionFacts{Leader: true, ApplierReady: lp.applier != nil && !lp.applier.primary, Now: time.Now()}
	lp.c.fillFacts(&may)
	mayTakeOver := may.needsTakeoverFacts()
	r.enqueue(zkJob{name: "election", bound: electionZKWait, run: func(ctx context.Context) func() {
		var rd electionRead
		rd.view, rd.err = lp.el.evaluate(ctx)
		rd.viewOK = rd.err == nil
		if rd.err == nil && rd.view.leader && mayTakeOver {
			rd.transferRead = true
			rd.transfer, rd.hasTransfer, rd.err = r.readTransfer(ctx)
			if rd.err == nil && rd.hasTransfer && rd.transfer.To != r.cfg.ID && time.Now().UnixMilli() < rd.transfer.Deadline {
				rd.roomEpoch, rd.err = r.room.Epoch(ctx)
			}
		}
		return func() {
			if gen != lp.c.watchGen || eg != lp.elGen {
				return // stale
			}
			r.onElectionRead(rd)
		}
	}})
}

// electionRead is what one election read found.
type electionRead struct {
	view         electionView
	viewOK       bool // view was read (err may still be a later read's)
	transfer     transferRecord
	transferRead bool // the transfer record (and the epoch it needs) were read
	hasTransfer  bool
	roomEpoch    uint64
	err          error
}

func (r *Replica) onElectionRead(rd electionRead) {
	lp := r.lp
	if rd.viewOK {
		lp.view = rd.view
		r.forward(watchElection, "", rd.view.watch)
		r.updateLiveTarget() // the next in line watches the primary's process
		if low, ok := rd.view.lowest(); ok {
			lp.primaryID, lp.primaryAddr = low.ID, string(low.Data)
		}
	}
	if rd.err != nil {
		r.log.Debug("election evaluation failed; will retry", "err", rd.err)
		r.step(evElection{Err: rd.err})
		return
	}
	f := r.electionFacts(rd)
	if f.needsTakeoverFacts() && !rd.transferRead {
		// Became able to take over since the read was queued: read again,
		// with the transfer record.
		r.step(evElection{Err: errors.New("election: takeover facts not read")})
		return
	}
	r.step(evElection{Facts: f})
}

// electionFacts gathers what decideElection needs besides the core's own
// state, from the loop's state and the election read.
func (r *Replica) electionFacts(rd electionRead) electionFacts {
	lp := r.lp
	f := electionFacts{
		Leader:       lp.view.leader,
		ApplierReady: lp.applier != nil && !lp.applier.primary,
		Now:          time.Now(),
		OldestFirst:  lp.oldestFirst, Applied: r.applied.Load(),
		LagBound: r.cfg.takeoverLagBound(),
	}
	lp.c.fillFacts(&f)
	if rd.hasTransfer {
		rec := rd.transfer
		f.Transfer = &rec
		if rec.To != r.cfg.ID && f.Now.UnixMilli() < rec.Deadline {
			f.TransferToLive = r.isLiveCandidate(rec.To)
			f.RoomEpoch = rd.roomEpoch
		}
	}
	if f.LagBound == 0 && (f.OldestFirst == 0 || f.Applied >= f.OldestFirst-1) {
		return f // neither rule can apply: the others' positions cannot matter
	}
	for _, c := range lp.view.cands {
		if c.ID == r.cfg.ID {
			continue
		}
		if m, live := lp.mem.known[c.ID]; live {
			f.OthersApplied = append(f.OthersApplied, m.Applied)
		}
	}
	return f
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

// bounded runs op, a ZooKeeper request, and waits for it at most until
// ctx ends (go-zookeeper's own wait can last until it has tried every
// server). A request still running then is left to finish on its own; its
// result is dropped.
func (r *Replica) bounded(ctx context.Context, op func() error) error {
	done := make(chan error, 1)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		done <- op()
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		return fmt.Errorf("replica: zookeeper request: %w", ctx.Err())
	}
}

func (r *Replica) readTransfer(ctx context.Context) (transferRecord, bool, error) {
	var b []byte
	err := r.bounded(ctx, func() (err error) {
		b, _, err = r.conn.Get(r.room.Path(transferZ))
		return err
	})
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

// clearTransfer queues the deletion of a transfer record that names us
// (best effort).
func (r *Replica) clearTransfer() {
	r.enqueue(zkJob{name: "clear-transfer", bound: loopZKWait, run: func(ctx context.Context) func() {
		if rec, ok, err := r.readTransfer(ctx); err == nil && ok && rec.To == r.cfg.ID {
			_ = r.bounded(ctx, func() error { return r.conn.Delete(r.room.Path(transferZ), -1) })
		}
		return nil
	}})
}

// requeue queues the move of our candidate to the back of the line; an
// election read already under way is stale.
func (r *Replica) requeue() {
	lp := r.lp
	lp.elGen++
	r.enqueue(zkJob{name: "requeue", bound: electionZKWait, run: func(ctx context.Context) func() {
		err := lp.el.requeue(ctx)
		return func() {
			if err != nil {
				r.log.Debug("election re-queue incomplete; will retry", "err", err)
			}
		}
	}})
}

// lead installs the finished takeover's writer as the primary term.
func (r *Replica) lead() {
	lp := r.lp
	tr := lp.takeover
	lp.takeover = nil
	w := tr.w
	t := &term{w: w, epoch: w.Epoch(), start: w.StartIndex(), q: tr.q, done: make(chan struct{}), mu: &r.propMu, accepting: true}
	lp.applier = r.startPrimaryApplier(tr.q)
	r.setTerm(t)
	r.noteCommitted(w.StartIndex() - 1)
	r.log.Info("primary", "epoch", t.epoch, "start", t.start, "takeover", time.Since(tr.at))
	r.m.tookOver(time.Since(tr.at))
}

// closeTerm ends the current term, if any: no new proposals, its writer
// closed (pending appends get their outcome), waiters released. It returns
// the ended term (nil when none).
func (r *Replica) closeTerm() *term {
	t := r.currentTerm()
	if t == nil {
		t = r.lp.stopped
	}
	r.lp.stopped = nil
	if t == nil {
		return nil
	}
	r.setTerm(nil)
	t.finish()
	if err := t.w.Close(); err != nil {
		r.log.Debug("writer close", "err", err)
	}
	close(t.done)
	return t
}

// cancelTakeover cancels the takeover in progress, if any, waits for it and
// closes the writer it may have opened.
func (r *Replica) cancelTakeover() {
	lp := r.lp
	tr := lp.takeover
	if tr == nil {
		return
	}
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

// termEnding is a term being ended off the loop: its writer closing
// (which waits for its in-flight Multis: when the connection is lost,
// until go-zookeeper gives up on every server), then its committed entries
// drained into the store by the primary applier.
type termEnding struct {
	t      *term
	reason string
	done   chan struct{}
	err    error // set before done is closed
}

// endTerm leaves the primary role (the term already stopped accepting):
// the writer is closed (its pending appends get their outcome) and the
// committed entries drained into the store in a goroutine, so the loop
// stays free; onTermEnded then resumes the standby tail from applied+1.
// Until then no apply goroutine runs and the election waits (not ready).
func (r *Replica) endTerm(reason string) {
	lp := r.lp
	t := r.currentTerm()
	if t == nil {
		t = lp.stopped
	}
	lp.stopped = nil
	r.setTerm(nil)
	a := lp.applier
	lp.applier = nil
	e := &termEnding{t: t, reason: reason, done: make(chan struct{})}
	lp.ending = e
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer close(e.done)
		if t != nil {
			t.finish()
			if err := t.w.Close(); err != nil {
				r.log.Debug("writer close", "err", err)
			}
			close(t.done)
		}
		if a != nil {
			if !a.stop(true, r.unlessStalled) {
				e.err = fmt.Errorf("replica: apply stuck on the local disk: %w", store.ErrDiskStalled)
				return
			}
			e.err = a.err
		}
	}()
}

// onTermEnded: the ended term's writer is closed and its entries applied;
// the standby tail resumes (unless the replica failed meanwhile).
func (r *Replica) onTermEnded() {
	lp := r.lp
	e := lp.ending
	lp.ending = nil
	if e.err != nil {
		r.step(evFail{Err: e.err})
		return
	}
	if e.t != nil {
		r.log.Info("no longer primary", "epoch", e.t.epoch, "reason", e.reason, "applied", r.applied.Load())
	}
	if !lp.c.failed && lp.applier == nil {
		lp.applier = r.startStandbyApplier()
	}
}

// waitTermEnded waits for a term being ended (fail, shutdown). The wait is
// bounded: the writer's close waits for its in-flight Multis (go-zookeeper
// answers them within its own bounds, at most a session or two), then the
// drain is bounded by the disk. A term still ending after that is left
// behind (its goroutine ends on its own); it is not a disk stall.
func (r *Replica) waitTermEnded() {
	e := r.lp.ending
	if e == nil {
		return
	}
	r.lp.ending = nil
	d := store.DefaultDiskStallTimeout
	if o := r.cfg.StoreOptions; o != nil && o.DiskStallTimeout != 0 {
		d = o.DiskStallTimeout
	}
	limit := time.NewTimer(2*r.cfg.SessionTimeout + d + stopSlack)
	defer limit.Stop()
	select {
	case <-e.done:
	case <-r.stalled:
		r.log.Warn("the ending term may be stuck on the stalled disk; left behind")
	case <-limit.C:
		r.log.Warn("the ending term did not end in time; left behind")
	}
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

func (r *Replica) onRequest(req loopRequest) {
	var epoch uint64
	if req.term != nil && req.term == r.currentTerm() {
		epoch = req.term.epoch
	}
	r.lp.reply = req.reply
	r.step(evRequest{Kind: req.kind, Epoch: epoch, To: req.to})
	if r.lp.reply != nil && r.lp.pending["write-transfer"] == 0 { // the core did not answer and awaits nothing: cannot happen
		r.lp.reply <- fmt.Errorf("replica: request %d not answered", req.kind)
		r.lp.reply = nil
	}
}

// writeTransfer (re)creates the ephemeral transfer record, each request
// bounded by ctx.
func (r *Replica) writeTransfer(ctx context.Context, rec transferRecord) error {
	p := r.room.Path(transferZ)
	data := encode(rec)
	for i := 0; i < 3; i++ {
		err := r.bounded(ctx, func() error {
			_, err := r.conn.Create(p, data, zk.FlagEphemeral, r.acl)
			return err
		})
		if err == nil {
			return nil
		}
		if !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
		err = r.bounded(ctx, func() error { return r.conn.Delete(p, -1) })
		if err != nil && !errors.Is(err, zk.ErrNoNode) {
			return err
		}
	}
	return errors.New("transfer record kept reappearing")
}

// fail carries out the core's aFail: leave any primary role, stop
// applying; the core then announces RoleFailed and resigns.
func (r *Replica) fail(err error) {
	r.log.Error("replica failed; it no longer participates (Close it)", "err", err)
	r.fatalErr.Store(&err)
	lp := r.lp
	r.closeTerm()
	r.waitTermEnded()
	r.cancelTakeover()
	if lp.applier != nil {
		_ = r.stopApplier(false)
	}
	// Proposals waiting for their entry's apply (it is committed) and
	// WaitApplied/Barrier callers return now instead of at their deadline.
	r.failWaiters(fmt.Errorf("%w: %w", ErrNoResponse, ErrFailed))
	r.signalApplied()
}

// markLostJob carries out the core's aMarkLost: the room is marked lost
// in ZooKeeper with found (markLost, through our session, within its own
// bound, markLostWait), and the core hears how it went (evMarked; an
// error means the mark may not be in place, and the core keeps our
// candidate until a later mark lands).
func (r *Replica) markLostJob(found error) {
	r.enqueue(zkJob{name: "mark-lost", bound: markLostWait, run: func(ctx context.Context) func() {
		err := r.markLost(ctx, r.client, found)
		return func() {
			if err != nil {
				err = fmt.Errorf("marking the room lost first: %w", err)
			}
			r.step(evMarked{Now: time.Now(), Err: err})
		}
	}})
}

// resignFailed queues the deletion of a failed replica's candidate and
// member nodes so that failover proceeds without it; the core asks again
// while it has not succeeded.
func (r *Replica) resignFailed() {
	lp := r.lp
	lp.elGen++
	wait := min(r.cfg.SessionTimeout, 2*time.Second)
	r.enqueue(zkJob{name: "resign", bound: 2 * wait, run: func(ctx context.Context) func() {
		ectx, cancel := context.WithTimeout(ctx, wait)
		errE := lp.el.resign(ectx)
		cancel()
		mctx, cancel := context.WithTimeout(ctx, wait)
		errM := lp.mem.resign(mctx)
		cancel()
		return func() {
			if errE != nil || errM != nil {
				r.log.Warn("failed replica: resigning election and membership incomplete; will retry", "election", errE, "membership", errM)
				r.step(evResigned{Err: errors.Join(errE, errM)})
				return
			}
			r.step(evResigned{})
			r.log.Info("failed replica resigned its election candidate and member node")
		}
	}})
}

// shutdown is the loop's part of Close.
func (r *Replica) shutdown() {
	lp := r.lp
	r.closeTerm()
	r.waitTermEnded()
	r.cancelTakeover()
	if lp.applier != nil {
		_ = r.stopApplier(lp.applier.primary)
	}
	// The worker's job in progress ends within its bound; the queued ones
	// are dropped.
	lp.jobs = [2][]zkJob{}
	for lp.running[0] || lp.running[1] {
		res := <-r.jobDone
		lp.running[res.lane] = false
	}
	// Our nodes are deleted if the session lets us within the bound (they
	// go with the session otherwise); the membership registration's keeper
	// and watcher stop in any case.
	wait := min(r.cfg.SessionTimeout, 2*time.Second)
	if !lp.c.connected {
		wait = 0
	}
	if lp.c.lostFound != nil && !lp.c.marked && !lp.c.resigned && wait > 0 {
		// Failed on a lost log, and Close came before the mark-lost job
		// (dropped above) could run: mark now, before our candidate goes.
		_ = r.markLost(context.Background(), r.client, lp.c.lostFound)
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
	r.step(evClosed{})
}

// announceRole publishes a role change the core made: Status, RoleChanges
// and (connected) our member data.
func (r *Replica) announceRole(role Role, epoch uint64, reason string) {
	lp := r.lp
	if epoch == 0 {
		epoch = r.appliedEpoch.Load()
	}
	// The snapshot with the new role is published before the RoleChanges
	// event is queued: whoever receives the change and then asks Status
	// sees the new role (or a newer one). (The member publish below is a
	// ZooKeeper round trip.)
	r.publishStatus()
	rc := RoleChange{Role: role, Epoch: epoch, Reason: reason, At: time.Now()}
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
	if lp.c.connected && role != RoleClosed && role != RoleFailed {
		r.publishMember(false)
	}
}

// linkProbe carries out the core's aLinkProbe: one read on our own
// session (the room znode's Exists), whose answer comes back as
// evLinkProbed. It is not bounded here on purpose: how long it stays out
// is what the core measures. The goroutine is not counted in r.wg: on a
// silently cut link the read returns only when go-zookeeper's read timeout
// fires or the client is closed (Close closes it after the loop), and
// Close must not wait for that; its result is dropped once the loop is
// gone. linkDone is buffered: the core sends one probe per connection at
// a time, and abandons one at a reconnect (go-zookeeper fails it then).
func (r *Replica) linkProbe(gen uint64) {
	conn, path, done := r.conn, r.room.Path(), r.lp.linkDone
	go func() {
		_, _, err := conn.Exists(path)
		select {
		case done <- evLinkProbed{Gen: gen, Err: err}:
		default:
		}
	}()
}

// refreshChannels queues a read of the channels for the figures in Status
// and the oldest first index the election uses. A channel it finds that
// lost a batch although it is not being deleted (an acknowledged entry
// gone, which no reader would read again) brings the next audit forward.
func (r *Replica) refreshChannels() {
	lp := r.lp
	lp.lastChannels = time.Now()
	r.enqueue(zkJob{name: "channels", bound: loopZKWait, run: func(ctx context.Context) func() {
		chans, err := r.room.Channels(ctx)
		if errors.Is(err, ErrUnsupportedVersion) {
			// A channel beyond this binary: the log holds what it cannot read.
			return func() { r.step(evFail{Err: fmt.Errorf("replica: %w", err)}) }
		}
		if err != nil {
			return nil
		}
		// What the room holds, the open channel's batches included (the
		// sealed channels' figures come with the listing; the open
		// channel's batches are listed and each new one stat'ed once).
		usage, uerr := r.room.UsageOf(ctx, chans)
		measured := uerr == nil
		// The room version and the operator's target (package doc, "Room
		// version"): read with the channels, once a second.
		rd := roomVersionRead{maxChannel: maxChannelVersion(chans)}
		rd.rv, rd.err = r.room.RoomVersion(ctx)
		if rd.err != nil && !errors.Is(rd.err, ErrUnsupportedVersion) && !errors.Is(rd.err, logroom.ErrCorrupt) {
			rd.err = nil // connection trouble: no verdict this time
			return func() {
				if lostBatch(chans) {
					lp.auditSoon = true
				}
				r.channelFigures(chans, usage, measured)
			}
		}
		decide := true
		if rd.err == nil {
			rd.target, rd.targetErr = readVersionTarget(ctx, r.client, r.room.Path(versionZ))
			if rd.targetErr != nil && !errors.Is(rd.targetErr, errBadZnodeData) {
				decide = false // connection trouble: no verdict this time
			}
		}
		return func() {
			if lostBatch(chans) {
				lp.auditSoon = true
			}
			r.channelFigures(chans, usage, measured)
			if decide {
				r.step(r.roomVersionEvent(rd.rv, rd.err, rd.target, rd.targetErr, rd.maxChannel))
			}
			// served: the newest checkpoint another member could serve a
			// bootstrap (ckptSources' rule: it advertises an address).
			var served uint64
			for _, m := range r.snap.Load().members {
				if m.ID != r.cfg.ID && m.Addr != "" {
					served = max(served, m.Checkpoint)
				}
			}
			if offerCheckpoint(r.currentTerm() != nil, r.cfg.AdvertiseAddr != "", lp.oldestFirst, r.localCkpt.Load(), r.applied.Load(), served) && lp.offeredFor != lp.oldestFirst {
				lp.offeredFor = lp.oldestFirst
				r.log.Info("the log starts past our last checkpoint: taking one now, so members started empty have a source", "oldest_first", lp.oldestFirst)
				r.ckptTrig.Notify()
			}
		}
	}})
}

// channelFigures records what a read of the channels found and, when
// measured, what the room holds (logroom's Usage: the open channel's
// batches included). Without a measurement the last one stays.
func (r *Replica) channelFigures(chans []logroom.ChannelInfo, u logroom.Usage, measured bool) {
	lp := r.lp
	var open uint64
	if len(chans) > 0 {
		lp.oldestFirst = chans[0].FirstIndex
	}
	for _, c := range chans {
		if !c.Sealed {
			open = c.Num
		}
	}
	r.publishSnap(func(s *statusSnap) {
		s.openChannel, s.channels = open, len(chans)
		if measured {
			s.roomBytes, s.roomCharged = u.Bytes, u.Charged()
		}
	})
}

// auditLogDue: the running member's audit of the log it has seen is due
// every auditInterval, and at once when a channel read found a lost batch.
func (r *Replica) auditLogDue() bool {
	lp := r.lp
	return lp.pending["audit"] == 0 && (lp.auditSoon || time.Since(lp.lastAudit) >= auditInterval)
}

// auditRoom queues the audit (logroom's Room.Audit): the log must still
// hold the last batch we applied (divergence is reported first, naming our
// batch), the channel chain must hold, and no channel that is not being
// deleted may have lost a batch. Any of those fails the member within a
// few seconds of the change, primary or standby, instead of at the next
// takeover or restart. The audit syncs first (a follower behind what we
// applied must not look like a log that ends below it), so it has its own
// bound and runs less often than the plain read; Status().Audited says
// when one last completed.
func (r *Replica) auditRoom() {
	lp := r.lp
	lp.lastAudit, lp.auditSoon = time.Now(), false
	r.enqueue(zkJob{name: "audit", bound: auditZKWait, run: func(ctx context.Context) func() {
		chans, err := r.auditLog(ctx)
		if lost := r.checkRoomIdentity(ctx); lost != nil {
			return func() { r.step(evFail{Err: lost}) }
		}
		if errors.Is(err, logroom.ErrEntriesRemoved) {
			err = fatal(logLost("the log audit found", err))
		}
		if errors.Is(err, logroom.ErrCorrupt) || isFatal(err) {
			return func() {
				r.step(evFail{Err: fmt.Errorf("replica: the room's log changed under a running member: %w", err)})
			}
		}
		if err != nil {
			return func() {
				lp.auditFails++
				if lp.auditFails%auditWarnAfter == 0 {
					r.log.Warn("log audit has not completed for a while (a deleted batch would go unnoticed meanwhile); retrying",
						"attempts", lp.auditFails, "err", err)
				}
			}
		}
		at := time.Now()
		return func() {
			lp.auditFails = 0
			r.channelFigures(chans, logroom.Usage{}, false)
			r.publishSnap(func(s *statusSnap) { s.audited = at })
		}
	}})
}

// auditInterval is how often a running member audits the log; auditZKWait
// bounds one audit (a sync, the channel listing and metas, one batch).
const (
	auditInterval  = 3 * time.Second
	auditZKWait    = time.Second
	auditWarnAfter = 5 // consecutive audits that did not complete before a Warn
)

// checkHashes compares the running state hashes the peers published with
// ours (hashCheck decides); a member that lost the vote fails.
func (r *Replica) checkHashes() {
	lp := r.lp
	if st := r.stRun.Load(); st != lp.hashStore {
		// A new store (Open, or a bootstrap replaced our chain): what we
		// compared was against the old one.
		n := newHashCheck()
		if lp.hash != nil { // the counts only grow (they are counters)
			n.compared, n.mismatches = lp.hash.compared, lp.hash.mismatches
		}
		lp.hash, lp.hashStore, lp.hashAgree = n, st, nil
	}
	own := r.RunHash()
	peers := make(map[string]hashObs, len(lp.mem.known))
	prim, _ := primaryOf(lp.mem.known)
	for id, d := range lp.mem.known {
		if id != r.cfg.ID {
			peers[id] = hashObs{At: d.HashAt, Base: d.HashBase, Hash: d.Hash, Agree: d.HashAgree, Primary: id == prim.ID}
		}
	}
	before := lp.hash.compared
	v := lp.hash.evaluate(hashInput{
		Self: r.cfg.ID, Primary: lp.c.role == RolePrimary,
		Own: hashObs{At: own.Index, Base: own.Base, Hash: own.String()},
		OwnAt: func(i uint64) (string, bool) {
			h, ok := r.runHashAt(i)
			return h.String(), ok && h.Base == own.Base
		},
		Peers: peers,
	})
	lp.hashAgree = v.Agree
	if v.Fail != nil {
		r.log.Error("integrity check: this member diverged", "err", v.Fail)
		if !v.TwoVerdict {
			r.markDiverged(v.Fail)
		}
		r.step(evFail{Err: v.Fail})
	}
	if v.Report != "" && v.Report != r.snap.Load().hashReport {
		r.log.Warn("integrity check: a peer disagrees", "report", v.Report)
	}
	if lp.hash.compared != before || v.Report != r.snap.Load().hashReport {
		r.publishSnap(func(s *statusSnap) {
			s.hashCompared, s.hashMismatches, s.hashReport = lp.hash.compared, lp.hash.mismatches, v.Report
		})
	}
}

// lostBatch reports whether a channel that is not being deleted lost a
// batch (logroom.ChannelInfo.Removed), or the open channel carries a
// deletion mark (only a foreign write puts one there).
func lostBatch(chans []logroom.ChannelInfo) bool {
	return slices.ContainsFunc(chans, logroom.ChannelInfo.Tampered)
}

// publishStatus copies the loop's view into the Status snapshot.
func (r *Replica) publishStatus() {
	lp := r.lp
	epoch := lp.c.epoch
	if epoch == 0 {
		epoch = r.appliedEpoch.Load()
	}
	members := lp.mem.snapshot()
	pid, paddr := lp.primaryID, lp.primaryAddr
	if p, ok := primaryOf(lp.mem.known); ok { // the one rule (decide.go)
		pid, paddr = p.ID, p.Addr
	}
	if lp.c.role == RolePrimary {
		pid, paddr = r.cfg.ID, r.cfg.AdvertiseAddr
	}
	foreign := r.foreignZnodes()
	if pid != r.snap.Load().primaryID && pid != "" {
		r.m.leaderChanged()
	}
	r.publishSnap(func(s *statusSnap) {
		s.role = lp.c.role
		s.epoch = epoch
		s.primaryID, s.primaryAddr = pid, paddr
		s.members = members
		s.foreign = foreign
		s.connState = r.client.State()
		s.sessionID = r.client.SessionID()
		s.suspended = lp.c.discSince
	})
}

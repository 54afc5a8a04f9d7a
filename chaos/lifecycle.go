package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
)

// The lifecycle operations (-lifecycle; doc.go, "Lifecycle"): what an
// operator does to a running room, interleaved with the faults. Each runs
// to its end inside exec, so heal finds the room as after any fault: every
// member started, one primary expected.

// lifeStep is one lifecycle operation that ran: from its start to the end
// of its last action (members restarted, room version reached). The gap
// of a step is computed from the history at the end of the run.
type lifeStep struct {
	f      Fault
	what   string
	t0, t1 time.Time
	// faulted: the step killed a member (kill -9) instead of stopping
	// it (a primary's then costs a session timeout by design), or the
	// ZooKeeper leader was killed as it began: its gap counts in
	// MaxFaultedStepGap, not MaxLifecycleGap.
	faulted bool
}

// lossStep is one ZooKeeper loss: the servers' data went at t0, the
// re-seeded members were started by t1.
type lossStep struct {
	f      Fault
	t0, t1 time.Time
}

// roomLostText is what a member's status error holds when it refuses a
// room ZooKeeper lost (logroom.ErrRoomLost).
var roomLostText = logroom.ErrRoomLost.Error()

// lifecycle runs one lifecycle operation; p is the primary when it
// started.
func (r *runner) lifecycle(ctx context.Context, f Fault, p *testnode.Node) {
	if f.Mid && !f.Kind.isZKLoss() {
		r.killZKMid(ctx, f)
		defer func() {
			r.zkHold = 0
			r.startZK(ctx)
		}()
	}
	step := lifeStep{f: f, t0: time.Now(), faulted: f.Mid ||
		f.Primary && (f.Kind == ReplaceMember || f.Kind == Upgrade || f.Kind == Downgrade || f.Kind == RotateCert)}
	switch f.Kind {
	case ReplaceMember:
		step.what = r.replaceMember(ctx, f, p)
	case ObserverJoin:
		step.what = r.observerJoin(ctx, f)
	case ObserverLeave:
		step.what = r.observerLeave(ctx, f)
	case RoomVersionRaise:
		step.what = r.roomVersion(ctx, f, 2)
	case RoomVersionLower:
		step.what = r.roomVersion(ctx, f, 1)
	case Upgrade, Downgrade:
		step.what = r.rollStep(ctx, &step.f, p)
	case RotateCert:
		step.what = r.rotateCert(ctx, f, p)
	case RotateCA:
		step.what = r.rotateCA(ctx, f)
	case ZKWipeReseed, ZKRollbackReseed:
		r.zkLoss(ctx, f)
		return
	case RestoreCheck:
		// It changes nothing in the room: no gap to measure.
		r.restoreCheck(ctx, f)
		return
	}
	step.t1 = time.Now()
	if step.what != "" {
		r.steps = append(r.steps, step)
	}
}

// killZKMid kills the ZooKeeper leader as a lifecycle step begins (the
// step's caller restarts it when the step ends); nothing when a server
// is down already.
func (r *runner) killZKMid(ctx context.Context, f Fault) {
	if r.zkDown >= 0 {
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	leader, err := r.ens.Leader(lctx)
	cancel()
	if err != nil {
		r.out.f("%s: no ZooKeeper leader to kill mid-step: %v", f, firstLine(err))
		return
	}
	r.out.f("%s: kill -9 ZooKeeper server %d (leader) as the step begins", f, leader)
	if err := r.ens.Kill(leader); err != nil {
		r.out.f("    kill: %v", err)
	}
	r.zkDown, r.zkHold = leader, 0
}

// replaceMember stops a member (any, the primary included; kill -9 when
// f.Primary), deletes its data dir and starts it again: it bootstraps from
// a peer while the proposers go on.
func (r *runner) replaceMember(ctx context.Context, f Fault, p *testnode.Node) string {
	live := r.c.Live()
	slices.SortFunc(live, func(a, b *testnode.Node) int { return strings.Compare(a.ID(), b.ID()) })
	if len(live) == 0 {
		r.res.Kinds[f.Kind]--
		r.out.f("%s: skipped, no live member", f)
		return ""
	}
	n := live[f.Pick%len(live)]
	role := "standby"
	if n == p {
		role = "primary"
	} else if r.observers[n.ID()] {
		role = "observer"
	}
	how := "stop"
	if f.Primary {
		how = "kill -9"
	}
	r.out.f("%s: %s %s %s, wipe its data dir, start it", f, how, role, n.ID())
	t0 := time.Now()
	var err error
	if f.Primary {
		err = n.Kill()
	} else {
		err = n.Stop()
	}
	if err != nil {
		r.out.f("    %s: %v", how, err)
	}
	if err := n.WipeData(); err != nil {
		r.out.f("    wipe: %v", err)
	}
	r.bootstrapped[n.ID()] = true
	if r.restart(ctx, n) != nil {
		return fmt.Sprintf("%s %s (not restarted)", role, n.ID())
	}
	// The step lasts until it applied what the primary had when it
	// started again (bounded: a slow bootstrap is heal's to judge).
	what := fmt.Sprintf("%s %s replaced", role, n.ID())
	if err := r.caughtUp(ctx, n, 60*time.Second); err != nil {
		what += " (" + firstLine(err) + ")"
	}
	r.out.f("    %s, caught up %v after the %s", what, time.Since(t0).Round(time.Millisecond), how)
	return fmt.Sprintf("%s %s", role, n.ID())
}

// caughtUp waits until n has applied what the primary had applied when
// the wait began.
func (r *runner) caughtUp(ctx context.Context, n *testnode.Node, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	p, err := r.c.WaitPrimary(wctx)
	if err != nil {
		return err
	}
	ps, err := p.Status(wctx)
	if err != nil {
		return err
	}
	for {
		s, err := n.Status(wctx)
		if err == nil && s.Applied >= ps.Applied {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("%s not at index %d after %v (%v)", n.ID(), ps.Applied, d, errText(err))
		case <-time.After(50 * time.Millisecond): // polling the node's status: no event to wait on
		}
	}
}

// observerJoin starts a new observer process (a new id, an empty disk):
// it bootstraps from a peer's checkpoint when the log it needs is gone.
func (r *runner) observerJoin(ctx context.Context, f Fault) string {
	if len(r.observers) >= maxObservers {
		r.res.Kinds[f.Kind]--
		r.out.f("%s: skipped, %d observers run", f, len(r.observers))
		return ""
	}
	id := fmt.Sprintf("o%d", r.nextObserver)
	r.nextObserver++
	r.out.f("%s: observer %s joins", f, id)
	t0 := time.Now()
	actx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	n, err := r.c.Add(actx, id, func(o *testnode.NodeOptions) { o.Observer = true })
	cancel()
	if err != nil {
		r.res.Stalls++
		msg := fmt.Sprintf("observer-join: %s did not start: %v", id, firstLine(err))
		r.res.Anomalies = append(r.res.Anomalies, msg)
		r.out.f("    %s", msg)
		return ""
	}
	r.observers[id] = true
	r.bootstrapped[id] = true // it starts wherever the room's log begins
	r.restartObserverWatch(ctx)
	what := "joined"
	if err := r.caughtUp(ctx, n, 60*time.Second); err != nil {
		what += " (" + firstLine(err) + ")"
	}
	r.out.f("    %s %s, caught up after %v", id, what, time.Since(t0).Round(time.Millisecond))
	return "observer " + id
}

// observerLeave stops an observer gracefully (it leaves the room) and
// removes it from the run: the final checks no longer include it.
func (r *runner) observerLeave(ctx context.Context, f Fault) string {
	ids := slices.Sorted(maps.Keys(r.observers))
	if len(ids) == 0 {
		r.res.Kinds[f.Kind]--
		r.out.f("%s: skipped, no observer", f)
		return ""
	}
	id := ids[f.Pick%len(ids)]
	r.out.f("%s: observer %s leaves", f, id)
	t0 := time.Now()
	delete(r.observers, id)
	r.restartObserverWatch(ctx)
	if err := r.c.Remove(id); err != nil {
		r.out.f("    remove: %v", err)
	}
	delete(r.needRestart, id)
	r.out.f("    %s left after %v", id, time.Since(t0).Round(time.Millisecond))
	return "observer " + id
}

// roomVersion sets the room's target to v (as `roomlog room-version
// --set` does) when every live member supports it, and waits until the
// room is there and the move complete (ReadRoomVersion).
func (r *runner) roomVersion(ctx context.Context, f Fault, v int) string {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cl, err := logroom.Dial(cctx, r.zkDial())
	if err != nil {
		r.out.f("%s: skipped, dial: %v", f, firstLine(err))
		r.res.Kinds[f.Kind]--
		return ""
	}
	defer cl.Close()
	st, err := replica.ReadRoomVersion(cctx, cl, "", r.c.Room())
	if err != nil {
		r.out.f("%s: skipped, read room version: %v", f, firstLine(err))
		r.res.Kinds[f.Kind]--
		return ""
	}
	var cannot []string
	for _, m := range st.Members {
		if m.RoomVersionMax < v || m.RoomVersionMin > v {
			cannot = append(cannot, fmt.Sprintf("%s (%d..%d)", m.ID, m.RoomVersionMin, m.RoomVersionMax))
		}
	}
	if len(cannot) > 0 {
		r.res.RoomVersionRefused++
		r.blockedTarget(cctx, cl, f, st.Version, v, cannot)
		return ""
	}
	r.out.f("%s: room at version %d (target %d); set target %d", f, st.Version, st.Target, v)
	t0 := time.Now()
	if err := replica.SetRoomVersionTarget(cctx, cl, "", r.c.Room(), v); err != nil {
		r.out.f("    set: %v", err)
		return ""
	}
	r.roomVersionTarget = v
	// Lowering completes when no channel of version 2 is left: ask the
	// primary for a checkpoint now and then, so it need not wait for the
	// next one the load brings.
	nudge := time.Now().Add(5 * time.Second)
	for {
		st, err = replica.ReadRoomVersion(cctx, cl, "", r.c.Room())
		if err == nil && st.Version == v && st.Complete {
			r.out.f("    room at version %d, complete, after %v", v, time.Since(t0).Round(time.Millisecond))
			return fmt.Sprintf("to %d", v)
		}
		if time.Now().After(nudge) {
			nudge = time.Now().Add(5 * time.Second)
			if p, _ := r.c.PrimaryNow(cctx); p != nil {
				kctx, kcancel := context.WithTimeout(cctx, 30*time.Second)
				_ = p.Checkpoint(kctx)
				kcancel()
			}
		}
		select {
		case <-cctx.Done():
			r.res.Stalls++
			msg := fmt.Sprintf("room version %d: not complete after %v: version %d, complete %v, lowering %v, blocked %q, channels %d..%d (%v)",
				v, time.Since(t0).Round(time.Millisecond), st.Version, st.Complete, st.Lowering, st.Blocked,
				st.OldestChannelVersion, st.MaxChannelVersion, errText(err))
			r.res.Anomalies = append(r.res.Anomalies, msg)
			r.out.f("    %s", msg)
			return fmt.Sprintf("to %d (incomplete)", v)
		case <-time.After(100 * time.Millisecond): // polling ZooKeeper: no event to wait on
		}
	}
}

// blockedTarget sets target v that live members (cannot) do not support:
// for 3 s the room must stay at version cur, saying why it is blocked,
// and no member may fail; then the target is set back to cur.
func (r *runner) blockedTarget(ctx context.Context, cl *logroom.Client, f Fault, cur, v int, cannot []string) {
	r.out.f("%s: room at version %d; set target %d although %s do not support it", f, cur, v, strings.Join(cannot, ", "))
	if err := replica.SetRoomVersionTarget(ctx, cl, "", r.c.Room(), v); err != nil {
		r.out.f("    set: %v", err)
		return
	}
	var blocked string
	end := time.Now().Add(3 * time.Second)
	for time.Now().Before(end) && ctx.Err() == nil {
		st, err := replica.ReadRoomVersion(ctx, cl, "", r.c.Room())
		if err == nil && st.Version != cur {
			r.res.RoomVersionViolations++
			msg := fmt.Sprintf("room version: the room moved to %d while %s do not support it", st.Version, strings.Join(cannot, ", "))
			r.res.Anomalies = append(r.res.Anomalies, msg)
			r.out.f("    %s", msg)
			break
		}
		if err == nil && st.Blocked != "" {
			blocked = st.Blocked
		}
		sleep(ctx, 100*time.Millisecond) // polling ZooKeeper: no event to wait on
	}
	if blocked == "" {
		blocked = "(no reason given)"
	}
	r.out.f("    blocked: %s", clip(blocked, 240))
	if err := replica.SetRoomVersionTarget(ctx, cl, "", r.c.Room(), cur); err != nil {
		r.out.f("    set back: %v", err)
		return
	}
	r.roomVersionTarget = cur
	r.out.f("    target set back to %d", cur)
}

// restartObserverWatch ends the observer watch (keeping what it saw) and
// starts a new one on the current observers and ZooKeeper.
func (r *runner) restartObserverWatch(ctx context.Context) {
	r.obsPast = mergeObserverReports(r.obsPast, r.obsWatch.stop())
	r.obsWatch = startObserverWatch(ctx, r)
}

// mergeObserverReports adds b to a.
func mergeObserverReports(a, b ObserverReport) ObserverReport {
	out := ObserverReport{Owners: map[uint64]string{}}
	ids := map[string]bool{}
	for _, id := range append(slices.Clone(a.IDs), b.IDs...) {
		ids[id] = true
	}
	out.IDs = slices.Sorted(maps.Keys(ids))
	out.Samples = a.Samples + b.Samples
	out.NotObserver = a.NotObserver + b.NotObserver
	out.Led = append(slices.Clone(a.Led), b.Led...)
	maps.Copy(out.Owners, a.Owners)
	maps.Copy(out.Owners, b.Owners)
	out.Reads = a.Reads + b.Reads
	out.ReadErrors = a.ReadErrors + b.ReadErrors
	return out
}

// zkLoss takes every ZooKeeper server's data (wiped, or rolled back to
// the copy taken earlier), checks that every member refuses by name and
// that nothing is acknowledged meanwhile, then does what docs/disaster-recovery.md tells
// an operator: stop every member, re-seed from their data dirs, start the
// seed's member, then the others. The run goes on in the new incarnation.
func (r *runner) zkLoss(ctx context.Context, f Fault) {
	rollback := f.Kind == ZKRollbackReseed
	if rollback && r.zkCopy == nil {
		r.res.Kinds[f.Kind]--
		r.out.f("%s: skipped, no copy of ZooKeeper's data", f)
		return
	}
	// An operator's room: nothing held down.
	r.zkHold = 0
	r.startZK(ctx)
	r.releaseNode(ctx)
	r.reviveNodes(ctx)

	what := "wipe every ZooKeeper server's data"
	if rollback {
		what = fmt.Sprintf("restore every ZooKeeper server's data from the copy taken at %.3fs", r.zkCopyAt.Sub(r.out.start).Seconds())
	}
	r.out.f("%s: %s", f, what)
	r.saveRecorder(ctx)
	r.obsPast = mergeObserverReports(r.obsPast, r.obsWatch.stop())
	r.obsWatch = nil

	loss := lossStep{f: f, t0: time.Now()}
	zctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	var err error
	if rollback {
		err = r.ens.RestoreData(zctx, r.zkCopy)
	} else {
		err = r.ens.WipeData(zctx)
	}
	cancel()
	back := time.Now()
	if err != nil {
		r.out.f("    ZooKeeper: %v", err)
	} else {
		r.out.f("    ZooKeeper serves again after %v", back.Sub(loss.t0).Round(time.Millisecond))
	}

	// Every member must refuse by name.
	r.awaitRefusals(ctx, back)

	// The operator stops every member: none may have acknowledged
	// anything since the loss.
	nodes := r.c.Nodes()
	for _, n := range nodes {
		if err := n.Stop(); err != nil {
			r.out.f("    stop %s: %v", n.ID(), err)
		}
	}
	stopped := time.Now()
	r.ackedWhileLost(loss.t0, back, stopped)

	dirs := make([]string, len(nodes))
	for i, n := range nodes {
		dirs[i] = n.DataDir()
	}
	rcfg := replica.ReseedConfig{
		Servers: r.zkAddrs(), SessionTimeout: r.cfg.Session, Room: r.c.Room(), DataDirs: dirs, Logger: r.log,
		ZooKeeperTLS: r.tlsOp(), ACLIdentities: r.tlsACL(),
	}
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	res, err := replica.Reseed(rctx, rcfg)
	cancel()
	if trust := r.trustAfterOld(err, nodes); trust != nil {
		// What docs/disaster-recovery.md tells an operator: name the
		// survivor to trust (the one Reseed would pick, the highest
		// epoch and index); those that cannot be compared with it are
		// left out, and wiped below.
		r.res.ReseedsTrusted++
		rcfg.Trust = trust.DataDir()
		rctx, cancel := context.WithTimeout(ctx, time.Minute)
		res, err = replica.Reseed(rctx, rcfg)
		cancel()
	}
	if err != nil {
		r.res.ReseedFailures++
		msg := fmt.Sprintf("%s: reseed failed: %v", f.Kind, err)
		r.res.Anomalies = append(r.res.Anomalies, msg)
		r.out.f("    %s", msg)
		r.broken = true
		for _, n := range nodes {
			r.needRestart[n.ID()] = true // stopped on purpose: no crash
		}
		return
	}
	seed := r.c.Nodes()[0]
	for _, n := range nodes {
		if n.DataDir() == res.From {
			seed = n
		}
	}
	var behind []string
	for _, s := range res.Survivors {
		if s.Role == "left out" {
			// Refused by name if started on this data dir: an operator
			// wipes it, and it bootstraps from the seed's checkpoint.
			for _, n := range nodes {
				if n.DataDir() == s.Dir {
					if err := n.WipeData(); err != nil {
						r.out.f("    wipe %s: %v", n.ID(), err)
					}
					r.bootstrapped[n.ID()] = true
					r.out.f("    %s left out (%s): its data dir wiped", n.ID(), clip(s.Reason, 200))
				}
			}
			continue
		}
		if s.Position.Index < res.Seed.Index {
			for _, n := range nodes {
				if n.DataDir() == s.Dir {
					r.bootstrapped[n.ID()] = true
					behind = append(behind, fmt.Sprintf("%s@%d", n.ID(), s.Position.Index))
				}
			}
		}
	}
	r.out.f("    re-seeded in %v from %s at index %d (epoch %d, room version %d; behind: %s; previous: %s)",
		res.Took.Round(time.Millisecond), seed.ID(), res.Seed.Index, res.Epoch, res.RoomVersion,
		strings.Join(behind, " "), clip(res.Previous, 240))
	r.roomVersionTarget = 0
	r.trimRecorded(res.Seed.Index)
	r.incSeed, r.incStart = res.Seed.Index, time.Now()

	// The re-seeded room needs this release (CHANGELOG: the previous one
	// cannot open it).
	r.reseeded = true
	clear(r.ranOld)
	for _, n := range nodes {
		if r.onOld(n) {
			r.setBinary(n, r.newBin)
			r.out.f("    %s goes back to this tree: %s cannot open a re-seeded room", n.ID(), r.oldRelease)
		}
	}
	// The seed's member first, then the others.
	order := append([]*testnode.Node{seed}, slices.DeleteFunc(slices.Clone(nodes), func(n *testnode.Node) bool { return n == seed })...)
	for _, n := range order {
		if r.restart(ctx, n) != nil {
			continue
		}
	}
	loss.t1 = time.Now()
	r.losses = append(r.losses, loss)
	r.out.f("    members started %v after the loss", loss.t1.Sub(loss.t0).Round(time.Millisecond))

	r.startRecorder(ctx, res.Seed.Index+1)
	r.obsWatch = startObserverWatch(ctx, r)
	if !f.Primary {
		// A copy of the new incarnation is taken at the next heal.
		_ = r.zkCopy.Remove()
		r.zkCopy, r.zkCopyAt = nil, time.Time{}
	} else if r.zkCopy != nil {
		r.out.f("    the copy of ZooKeeper's data taken at %.3fs is kept: a later rollback restores an earlier incarnation", r.zkCopyAt.Sub(r.out.start).Seconds())
	}
}

// awaitRefusals waits until every running member reports role failed
// with ErrRoomLost (bounded: two sessions plus 20 s after ZooKeeper is
// back); a member that does not is a violation.
func (r *runner) awaitRefusals(ctx context.Context, back time.Time) {
	bound := 2*r.cfg.Session + 20*time.Second
	wctx, cancel := context.WithTimeout(ctx, bound)
	defer cancel()
	refused := map[string]time.Duration{}
	last := map[string]string{}
	for {
		pending := 0
		for _, n := range r.c.Nodes() {
			if _, ok := refused[n.ID()]; ok {
				continue
			}
			if r.onOld(n) {
				// The previous release predates ErrRoomLost (CHANGELOG):
				// it cannot refuse by name. It must acknowledge nothing
				// (ackedWhileLost), like every member.
				refused[n.ID()] = -1
				continue
			}
			if !n.Running() {
				// Exited: its log must say why.
				if strings.Contains(n.LogTail(20), roomLostText) {
					refused[n.ID()] = time.Since(back)
					continue
				}
				last[n.ID()] = "exited: " + firstLine(errors.New(n.LogTail(1)+" "))
				pending++
				continue
			}
			sctx, scancel := context.WithTimeout(wctx, time.Second)
			s, err := n.Status(sctx)
			scancel()
			switch {
			case err == nil && s.Role == testnode.RoleFailed && strings.Contains(s.Err, roomLostText):
				refused[n.ID()] = time.Since(back)
			case err == nil:
				last[n.ID()] = fmt.Sprintf("role %s, err %q", s.Role, s.Err)
				pending++
			default:
				last[n.ID()] = errText(err)
				pending++
			}
		}
		if pending == 0 {
			var parts []string
			for _, id := range slices.Sorted(maps.Keys(refused)) {
				if refused[id] < 0 {
					parts = append(parts, fmt.Sprintf("%s (%s: not checked)", id, r.oldRelease))
					continue
				}
				parts = append(parts, fmt.Sprintf("%s %v", id, refused[id].Round(time.Millisecond)))
			}
			r.out.f("    every member refuses with ErrRoomLost: %s", strings.Join(parts, ", "))
			return
		}
		select {
		case <-wctx.Done():
			for _, n := range r.c.Nodes() {
				if _, ok := refused[n.ID()]; !ok {
					r.res.NotRefused++
					msg := fmt.Sprintf("not refused: %s does not report ErrRoomLost %v after ZooKeeper lost the room: %s",
						n.ID(), time.Since(back).Round(time.Millisecond), last[n.ID()])
					r.res.Anomalies = append(r.res.Anomalies, msg)
					r.out.f("    %s", msg)
				}
			}
			return
		case <-time.After(100 * time.Millisecond): // polling the nodes' status: no event to wait on
		}
	}
}

// ackedWhileLost counts the proposals acknowledged while the room was
// lost: answered after ZooKeeper served again without the room's data and
// before the members were stopped for the re-seed. (An answer between
// the start of the loss and then may carry an entry committed before the
// quorum went: the servers stop one after another.)
func (r *runner) ackedWhileLost(loss, back, stopped time.Time) {
	for _, p := range r.h.Proposals() {
		if p.Outcome != testnode.OutcomeAcked {
			continue
		}
		if p.End.After(back) && !p.End.After(stopped) {
			r.res.AckedWhileLost++
			msg := fmt.Sprintf("acknowledged while the room was lost: %s at index %d by %s, sent %.3fs, answered %.3fs (loss %.3fs, ZooKeeper back %.3fs, members stopped %.3fs)",
				p.Key, p.Index, p.Node, p.Start.Sub(r.out.start).Seconds(), p.End.Sub(r.out.start).Seconds(),
				loss.Sub(r.out.start).Seconds(), back.Sub(r.out.start).Seconds(), stopped.Sub(r.out.start).Seconds())
			if r.res.AckedWhileLost <= 10 {
				r.res.Anomalies = append(r.res.Anomalies, msg)
				r.out.f("    %s", msg)
			}
		}
	}
}

// copyZK takes the copy of ZooKeeper's data a later zk-rollback-reseed
// restores (lifecycle runs only; the copy is kept under the work dir).
func (r *runner) copyZK() {
	c, err := r.ens.CopyData(r.work)
	if err != nil {
		r.out.f("    copy of ZooKeeper's data failed: %v", err)
		return
	}
	r.zkCopy, r.zkCopyAt = c, time.Now()
	r.out.f("    copy of ZooKeeper's data taken (for a later zk-rollback-reseed)")
}

// saveRecorder stops the log recorder and keeps what it read.
func (r *runner) saveRecorder(ctx context.Context) {
	if r.rec == nil {
		return
	}
	r.rec.Stop()
	r.recPast = append(r.recPast, r.rec.Entries()...)
	r.recSkipped = append(r.recSkipped, r.rec.Skipped()...)
	r.rec = nil
}

// trimRecorded drops the recorded entries of the lost incarnation past
// the seed: they were committed there but no member applied them (the
// re-seeded log reuses those indexes).
func (r *runner) trimRecorded(seed uint64) {
	n := len(r.recPast)
	r.recPast = slices.DeleteFunc(r.recPast, func(e LogEntry) bool { return e.Index > seed })
	if d := n - len(r.recPast); d > 0 {
		r.out.f("    %d entries the log recorder read past the seed's index %d are gone with the lost incarnation", d, seed)
	}
}

// startRecorder starts the log recorder at index from.
func (r *runner) startRecorder(ctx context.Context, from uint64) {
	rec, err := testnode.StartLogRecorderWith(ctx, r.zkDial(), r.c.Room(), from)
	if err != nil {
		r.out.f("log recorder not started (the checker sees only what ZooKeeper holds at the end): %v", firstLine(err))
		return
	}
	r.rec = rec
}

// lifecycleGaps computes, from the history, each lifecycle step's
// longest stretch without an acknowledged proposal (from its start to
// the first acknowledgement after its end) and each ZooKeeper loss's
// time from the loss to the first acknowledgement after the re-seed.
func (r *runner) lifecycleGaps(end time.Time) {
	var acks []time.Time
	for _, p := range r.h.Proposals() {
		if p.Outcome == testnode.OutcomeAcked {
			acks = append(acks, p.End)
		}
	}
	slices.SortFunc(acks, func(a, b time.Time) int { return a.Compare(b) })
	for _, s := range r.steps {
		g := gapIn(acks, s.t0, s.t1, end)
		how := ""
		if s.faulted {
			how = ", faulted"
			r.res.MaxFaultedStepGap = max(r.res.MaxFaultedStepGap, g)
		} else {
			r.res.LifecycleGaps[s.f.Kind] = max(r.res.LifecycleGaps[s.f.Kind], g)
			r.res.MaxLifecycleGap = max(r.res.MaxLifecycleGap, g)
		}
		r.out.f("lifecycle #%d %s %s: longest stretch without an acknowledgement %v (step took %v%s)",
			s.f.Seq, s.f.Kind, s.what, g.Round(time.Millisecond), s.t1.Sub(s.t0).Round(time.Millisecond), how)
	}
	for _, l := range r.losses {
		i := sort.Search(len(acks), func(i int) bool { return acks[i].After(l.t1) })
		g := end.Sub(l.t0)
		if i < len(acks) {
			g = acks[i].Sub(l.t0)
		}
		r.res.MaxReseedGap = max(r.res.MaxReseedGap, g)
		r.out.f("lifecycle #%d %s: %v from the loss to the first acknowledgement after the re-seed (members started after %v)",
			l.f.Seq, l.f.Kind, g.Round(time.Millisecond), l.t1.Sub(l.t0).Round(time.Millisecond))
	}
}

// gapIn is the longest stretch without an acknowledgement (acks sorted)
// from t0 to the first acknowledgement after t1 (or end, if none came).
func gapIn(acks []time.Time, t0, t1, end time.Time) time.Duration {
	prev, g := t0, time.Duration(0)
	for i := sort.Search(len(acks), func(i int) bool { return acks[i].After(t0) }); i < len(acks); i++ {
		g = max(g, acks[i].Sub(prev))
		prev = acks[i]
		if acks[i].After(t1) {
			return g
		}
	}
	return max(g, end.Sub(prev))
}

// clip shortens s to n bytes, marking the cut.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// trustAfterOld decides whether a refused re-seed is the one
// docs/disaster-recovery.md answers with --trust: survivors that cannot
// be compared because a member ran the previous release since the room
// was created or last re-seeded (it writes no history records, so no
// store can vouch for the others' positions in the stretch it applied).
// It returns the survivor to trust, the highest (epoch, index) as
// Reseed picks it, or nil (no error, another refusal, or no previous
// release involved: a finding, not an operator's call).
func (r *runner) trustAfterOld(err error, nodes []*testnode.Node) *testnode.Node {
	if err == nil || !errors.Is(err, replica.ErrReseedRefused) || !strings.Contains(err.Error(), "cannot be compared") || len(r.ranOld) == 0 {
		return nil
	}
	var best *testnode.Node
	var bestAt store.Point
	var pos []string
	for _, n := range nodes {
		st, oerr := store.Open(filepath.Join(n.DataDir(), "store"), &store.Options{ReadOnly: true})
		if oerr != nil {
			pos = append(pos, fmt.Sprintf("%s: %v", n.ID(), firstLine(oerr)))
			continue
		}
		at := st.Position()
		_ = st.Close()
		pos = append(pos, fmt.Sprintf("%s@%d/e%d", n.ID(), at.Index, at.Epoch))
		if best == nil || at.Epoch > bestAt.Epoch || at.Epoch == bestAt.Epoch && at.Index > bestAt.Index {
			best, bestAt = n, at
		}
	}
	old := slices.Sorted(maps.Keys(r.ranOld))
	r.out.f("    reseed refused: %s", clip(firstLine(err), 300))
	if best != nil {
		r.out.f("    %s ran %s since the last re-seed (no history records): re-seed trusting %s, the highest of %s",
			strings.Join(old, ","), r.oldRelease, best.ID(), strings.Join(pos, " "))
	}
	return best
}

package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/replica"
)

// The failover scenario needs replicas in separate processes (kill -9 of a
// primary process): internal/harness/testnode's. testnode.Build compiles the
// roomlog-testnode binary (one replica, store.OpsApplier wrapped in
// testnode.RecordingApplier, and the testnode HTTP API); a testnode.Cluster
// starts three of them in one room, and each testnode.Node is killed,
// restarted (same id, data dir and, if free, port), asked to transfer and
// sent proposals through its testnode.Client.

// startFailoverCluster builds the node binary and starts three replica
// processes of a fresh room, with the bench's session timeout.
func (b *bench) startFailoverCluster(ctx context.Context, room string) (*testnode.Cluster, error) {
	bin, err := testnode.Build(ctx)
	if err != nil {
		return nil, fmt.Errorf("build %s: %w", testnode.CmdPackage, err)
	}
	return testnode.StartCluster(ctx, testnode.ClusterOptions{
		Nodes: 3,
		ZK:    b.addrs,
		Room:  room,
		Dir:   filepath.Join(b.tmp, room),
		Node: testnode.NodeOptions{
			Binary:         bin,
			SessionTimeout: b.cfg.sessionTimeout,
			StartTimeout:   60 * time.Second,
		},
		Logger: b.log,
	})
}

// stopCluster stops every node gracefully (SIGTERM: it closes its replica
// and leaves the room), concurrently, then releases the harness.
func stopCluster(c *testnode.Cluster) {
	var wg sync.WaitGroup
	for _, n := range c.Nodes() {
		wg.Add(1)
		go func() { defer wg.Done(); _ = n.Stop() }()
	}
	wg.Wait()
	c.Close()
}

// settled waits until one live node is primary and every other node is a
// live standby that has applied everything the primary had applied when
// the check began. It returns the primary.
func settled(ctx context.Context, c *testnode.Cluster, timeout time.Duration) (*testnode.Node, error) {
	var primary string
	err := waitFor(ctx, timeout, "one primary and caught-up standbys", func() bool {
		sts, _ := c.Statuses(ctx) // a node that does not answer is missing from sts
		primary = ""
		for id, st := range sts {
			if st.Role == testnode.RolePrimary {
				if primary != "" {
					return false
				}
				primary = id
			}
		}
		if primary == "" || len(sts) < len(c.Nodes()) {
			return false
		}
		for id, st := range sts {
			if id != primary && (st.Role != testnode.RoleStandby || st.Applied < sts[primary].Applied) {
				return false
			}
		}
		return true
	})
	if err != nil {
		return nil, fmt.Errorf("%w\n%s", err, c.LogTails(20))
	}
	return c.Node(primary), nil
}

// proposeWait proposes entry on n, retrying not_primary every millisecond
// until ctx ends: it returns when n, once primary, acknowledges it.
func proposeWait(ctx context.Context, n *testnode.Node, entry []byte) error {
	for {
		_, err := n.Propose(ctx, entry)
		if err == nil || !errors.Is(err, replica.ErrNotPrimary) || ctx.Err() != nil {
			return err
		}
		sleepCtx(ctx, time.Millisecond)
	}
}

// firstAck sends a waiting proposal to every candidate at once and returns
// when the first is acknowledged: which node, and when.
func firstAck(ctx context.Context, cands []*testnode.Node, entry []byte) (*testnode.Node, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	type ack struct {
		n   *testnode.Node
		at  time.Time
		err error
	}
	acks := make(chan ack, len(cands))
	for _, n := range cands {
		go func() {
			err := proposeWait(ctx, n, entry)
			acks <- ack{n, time.Now(), err}
		}()
	}
	var errs []error
	for range cands {
		a := <-acks
		if a.err == nil {
			cancel() // the others stop retrying
			return a.n, a.at, nil
		}
		errs = append(errs, a.err)
	}
	return nil, time.Time{}, fmt.Errorf("no node acknowledged: %w", errors.Join(errs...))
}

// runFailover measures, on three replica processes: kill -9 of the primary
// process until the first acknowledged proposal on the new primary, and a
// graceful TransferLeadership until the first acknowledged proposal on the
// target; and a SIGSTOP of the primary for 2 s under load, which must not
// cause a takeover (a pause proves nothing; the session outlives it). 20
// kills and 20 pauses (issue 28: a distribution, not one figure), 5
// transfers; 1 of each with -quick.
func runFailover(ctx context.Context, b *bench) ([]Result, error) {
	var out []Result
	if b.cfg.failoverRow("kill") || b.cfg.failoverRow("pause") || b.cfg.failoverRow("transfer") {
		rs, err := b.processFailover(ctx)
		out = append(out, rs...)
		if err != nil {
			return out, err
		}
	}
	if !b.cfg.failoverRow("handoff") {
		return out, nil
	}
	// Graceful stop (replica.Shutdown), in-process.
	em, err := newEntryMaker(replicaEntryBytes, 10_000)
	if err != nil {
		return out, err
	}
	handoffIters := 10
	if b.cfg.quick {
		handoffIters = 1
	}
	b.prog.Logf("failover-handoff: 3 in-process replicas, %d Shutdowns of the primary", handoffIters)
	hr, err := b.runHandoff(ctx, em, handoffIters)
	if err != nil {
		return out, fmt.Errorf("failover-handoff: %w", err)
	}
	b.emit(hr)
	return append(out, hr), nil
}

// processFailover runs the failover rows of three replica processes
// (-failover-rows kill, pause, transfer).
func (b *bench) processFailover(ctx context.Context) ([]Result, error) {
	iters, killIters, pauseIters := 5, 20, 20
	if b.cfg.quick {
		iters, killIters, pauseIters = 1, 1, 1
	}
	room := fmt.Sprintf("bench-failover-%d", time.Now().UnixNano())
	defer testnode.RemoveBuilds()
	defer b.dropRoom(room)
	b.prog.Logf("failover: building %s and starting 3 replica processes", testnode.CmdPackage)
	c, err := b.startFailoverCluster(ctx, room)
	if err != nil {
		return nil, err
	}
	defer stopCluster(c)
	em, err := newEntryMaker(replicaEntryBytes, 10_000)
	if err != nil {
		return nil, err
	}
	var out []Result

	// kill -9.
	var kills []time.Duration
	var killErr error
	var deposed, deposedWrong uint64 // over the survivors of each kill
	survivorCounts := func(victim *testnode.Node) (d, w uint64) {
		sts, _ := c.Statuses(ctx)
		for id, st := range sts {
			if id != victim.ID() {
				d += st.Depositions
				w += st.DepositionsWrong
			}
		}
		return d, w
	}
	if !b.cfg.failoverRow("kill") {
		killIters = 0
	}
	for it := range killIters {
		victim, err := settled(ctx, c, 60*time.Second)
		if err != nil {
			killErr = err
			break
		}
		// A light load on the primary up to the kill.
		stopLoad := lightLoad(ctx, victim, em)
		sleepCtx(ctx, 300*time.Millisecond)
		var survivors []*testnode.Node
		for _, n := range c.Nodes() {
			if n != victim {
				survivors = append(survivors, n)
			}
		}
		d0, w0 := survivorCounts(victim)
		t0 := time.Now()
		if err := victim.Kill(); err != nil {
			stopLoad()
			killErr = err
			break
		}
		stopLoad()
		winner, at, err := firstAck(ctx, survivors, em.make(it))
		if err != nil {
			killErr = err
			break
		}
		d := at.Sub(t0)
		kills = append(kills, d)
		d1, w1 := survivorCounts(victim)
		deposed, deposedWrong = deposed+(d1-d0), deposedWrong+(w1-w0)
		b.prog.Logf("  kill -9 %s: %s acknowledged after %v (depositions by the survivors: %d)", victim.ID(), winner.ID(), d.Round(time.Millisecond), d1-d0)
		// Restart the victim (same id and data dir) as a standby.
		if err := victim.Restart(ctx); err != nil {
			killErr = err
			break
		}
	}
	if len(kills) > 0 {
		r := b.samplesRow("failover-kill", kills)
		r.setExtra("session_timeout_ms", ms(b.cfg.sessionTimeout))
		// Depositions: takeovers on the liveness proof (the rest waited for
		// the session). A deposition is found wrong only up to twice the
		// session later, so a kill's own wrong count shows only when a
		// later kill's reading comes that late: a lower bound.
		r.setExtra("depositions", deposed)
		r.setExtra("depositions_wrong", deposedWrong)
		r.Note = "kill -9 of the primary process -> first acknowledged proposal on the new primary (p50 = median, p99 = max)"
		b.emit(r)
		out = append(out, r)
	}
	if killErr != nil {
		return out, fmt.Errorf("failover-kill: %w", killErr)
	}

	// SIGSTOP for 2 s, shorter than the session: no takeover.
	if b.cfg.failoverRow("pause") {
		pr, err := b.pauses(ctx, c, em, pauseIters, 2*time.Second)
		if err != nil {
			return out, fmt.Errorf("failover-pause: %w", err)
		}
		b.emit(pr)
		out = append(out, pr)
	}
	if !b.cfg.failoverRow("transfer") {
		return out, nil
	}

	// Graceful transfer.
	var transfers, calls []time.Duration
	for range iters {
		from, err := settled(ctx, c, 60*time.Second)
		if err != nil {
			return out, fmt.Errorf("failover-transfer: %w", err)
		}
		nodes := c.Nodes()
		var to *testnode.Node
		for i, n := range nodes {
			if n == from {
				to = nodes[(i+1)%len(nodes)]
			}
		}
		t0 := time.Now()
		type ackRes struct {
			at  time.Time
			err error
		}
		ackc := make(chan ackRes, 1)
		actx, cancel := context.WithTimeout(ctx, 60*time.Second)
		go func() {
			err := proposeWait(actx, to, em.make(0))
			ackc <- ackRes{time.Now(), err}
		}()
		terr := from.Transfer(actx, to.ID())
		callDone := time.Since(t0)
		if terr != nil {
			cancel()
			<-ackc
			return out, fmt.Errorf("failover-transfer: %s -> %s: %w", from.ID(), to.ID(), terr)
		}
		a := <-ackc
		cancel()
		if a.err != nil {
			return out, fmt.Errorf("failover-transfer: propose on %s: %w", to.ID(), a.err)
		}
		d := a.at.Sub(t0)
		transfers = append(transfers, d)
		calls = append(calls, callDone)
		b.prog.Logf("  transfer %s -> %s: acknowledged after %v (TransferLeadership returned after %v)",
			from.ID(), to.ID(), d.Round(time.Millisecond), callDone.Round(time.Millisecond))
	}
	r := b.samplesRow("failover-transfer", transfers)
	var callMs []float64
	for _, d := range calls {
		callMs = append(callMs, round3(ms(d)))
	}
	r.setExtra("transfer_call_ms", callMs)
	r.Note = "TransferLeadership call -> first acknowledged proposal on the target (p50 = median, p99 = max)"
	b.emit(r)
	return append(out, r), nil
}

// lightLoad runs 4 closed-loop proposers on n until the returned stop is
// called (it waits for them).
func lightLoad(ctx context.Context, n *testnode.Node, em *entryMaker) (stop func()) {
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; lctx.Err() == nil; i++ {
				_, _ = n.Propose(lctx, em.make(w*1_000_000+i))
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

// pauses SIGSTOPs the primary for pause, iters times, under a light load
// on it, and counts the takeovers that followed (another primary, or a new
// epoch). The row's samples are the time from SIGCONT to the paused
// primary's next acknowledged proposal.
func (b *bench) pauses(ctx context.Context, c *testnode.Cluster, em *entryMaker, iters int, pause time.Duration) (Result, error) {
	var resumed []time.Duration
	takeovers := 0
	for it := range iters {
		p, err := settled(ctx, c, 60*time.Second)
		if err != nil {
			return Result{}, err
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		before, err := p.Status(sctx)
		cancel()
		if err != nil {
			return Result{}, err
		}
		stopLoad := lightLoad(ctx, p, em)
		sleepCtx(ctx, 200*time.Millisecond)
		if err := p.Pause(); err != nil {
			stopLoad()
			return Result{}, err
		}
		sleepCtx(ctx, pause)
		if err := p.Resume(); err != nil {
			stopLoad()
			return Result{}, err
		}
		t0 := time.Now()
		stopLoad()
		actx, acancel := context.WithTimeout(ctx, 60*time.Second)
		winner, at, err := firstAck(actx, c.Nodes(), em.make(it))
		acancel()
		if err != nil {
			return Result{}, err
		}
		sctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		after, err := winner.Status(sctx)
		cancel()
		if err != nil {
			return Result{}, err
		}
		took := winner != p || after.Epoch != before.Epoch
		if took {
			takeovers++
		}
		resumed = append(resumed, at.Sub(t0))
		b.prog.Logf("  SIGSTOP %s for %v: %s acknowledged %v after SIGCONT, epoch %d -> %d, takeover: %v",
			p.ID(), pause, winner.ID(), at.Sub(t0).Round(time.Millisecond), before.Epoch, after.Epoch, took)
	}
	r := b.samplesRow("failover-pause", resumed)
	r.setExtra("takeovers", takeovers)
	r.setExtra("pauses", iters)
	r.setExtra("pause_ms", ms(pause))
	r.setExtra("session_timeout_ms", ms(b.cfg.sessionTimeout))
	r.Note = fmt.Sprintf("SIGSTOP of the primary for %v under load, %d times: takeovers that followed (a pause is not a crash); p50/p99 = SIGCONT -> its next acknowledged proposal", pause, iters)
	return r, nil
}

// samplesRow reports a handful of durations: median as p50, max as p99 and
// p99.9, every sample in extras.
func (b *bench) samplesRow(scenario string, ds []time.Duration) Result {
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	var med time.Duration
	if n := len(s); n%2 == 1 {
		med = s[n/2]
	} else {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	var list []float64
	for _, d := range ds {
		list = append(list, round3(ms(d)))
	}
	r := Result{
		System:     "roomlog",
		Servers:    b.cfg.servers,
		Scenario:   scenario,
		EntryBytes: replicaEntryBytes,
		P50ms:      round3(ms(med)),
		P99ms:      round3(ms(s[len(s)-1])),
		P999ms:     round3(ms(s[len(s)-1])),
	}
	r.setExtra("samples_ms", list)
	r.setExtra("samples", len(ds))
	return r
}

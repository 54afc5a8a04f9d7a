package main

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"
)

// cluster is three replica processes in one room.
type cluster struct {
	b     *bench
	room  string
	nodes []*node
}

func (c *cluster) stop() {
	var wg sync.WaitGroup
	for _, n := range c.nodes {
		if n != nil && n.alive() {
			wg.Add(1)
			go func() { defer wg.Done(); n.stop() }()
		}
	}
	wg.Wait()
}

// statuses polls every live node (a node that does not answer is skipped).
func (c *cluster) statuses(ctx context.Context) map[int]nodeStatus {
	out := map[int]nodeStatus{}
	for i, n := range c.nodes {
		if !n.alive() {
			continue
		}
		sctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := n.status(sctx)
		cancel()
		if err == nil {
			out[i] = st
		}
	}
	return out
}

// settled waits until one live node is primary and every other live node is
// a standby that has applied everything the primary had applied when the
// check began. It returns the primary's index.
func (c *cluster) settled(ctx context.Context, timeout time.Duration) (int, error) {
	primary := -1
	err := waitFor(ctx, timeout, "one primary and caught-up standbys", func() bool {
		sts := c.statuses(ctx)
		primary = -1
		for i, st := range sts {
			if st.Role == "primary" {
				if primary >= 0 {
					return false
				}
				primary = i
			}
		}
		if primary < 0 || len(sts) < len(c.nodes) {
			return false
		}
		for i, st := range sts {
			if i != primary && (st.Role != "standby" || st.Applied < sts[primary].Applied) {
				return false
			}
		}
		return true
	})
	return primary, err
}

// firstAck sends a waiting proposal to every candidate at once and returns
// when the first is acknowledged: which node, and when.
func firstAck(ctx context.Context, cands []*node, entry []byte) (*node, time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	type ack struct {
		n   *node
		at  time.Time
		err error
	}
	acks := make(chan ack, len(cands))
	for _, n := range cands {
		go func() {
			_, err := n.propose(ctx, entry, true)
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
	return nil, time.Time{}, fmt.Errorf("no node acknowledged: %v", errs)
}

// runFailover measures, on three replica processes: kill -9 of the primary
// process until the first acknowledged proposal on the new primary, and a
// graceful TransferLeadership until the first acknowledged proposal on the
// target. Median of 5 each (1 with -quick).
func runFailover(ctx context.Context, b *bench) ([]Result, error) {
	iters := 5
	if b.cfg.quick {
		iters = 1
	}
	c := &cluster{b: b, room: fmt.Sprintf("bench-failover-%d", time.Now().UnixNano())}
	defer b.dropRoom(c.room)
	defer c.stop()
	b.prog.Logf("failover: starting 3 replica processes")
	for i := range 3 {
		n, err := b.startNode(ctx, c.room, fmt.Sprintf("n%d", i+1))
		if err != nil {
			return nil, err
		}
		c.nodes = append(c.nodes, n)
	}
	em, err := newEntryMaker(replicaEntryBytes, 10_000)
	if err != nil {
		return nil, err
	}
	var out []Result

	// kill -9.
	var kills []time.Duration
	var killErr error
	for it := range iters {
		p, err := c.settled(ctx, 60*time.Second)
		if err != nil {
			killErr = err
			break
		}
		victim := c.nodes[p]
		// A light load on the primary up to the kill.
		lctx, stopLoad := context.WithCancel(ctx)
		var wg sync.WaitGroup
		for w := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := 0; lctx.Err() == nil; i++ {
					_, _ = victim.propose(lctx, em.make(w*1_000_000+i), false)
				}
			}()
		}
		sleepCtx(ctx, 300*time.Millisecond)
		var survivors []*node
		for i, n := range c.nodes {
			if i != p {
				survivors = append(survivors, n)
			}
		}
		t0 := time.Now()
		victim.kill()
		stopLoad()
		wg.Wait()
		winner, at, err := firstAck(ctx, survivors, em.make(it))
		if err != nil {
			killErr = err
			break
		}
		d := at.Sub(t0)
		kills = append(kills, d)
		b.prog.Logf("  kill -9 %s: %s acknowledged after %v", victim.id, winner.id, d.Round(time.Millisecond))
		// Restart the victim (same id and data dir) as a standby.
		n, err := b.startNode(ctx, c.room, victim.id)
		if err != nil {
			killErr = err
			break
		}
		c.nodes[p] = n
	}
	if len(kills) > 0 {
		r := b.samplesRow("failover-kill", kills)
		r.setExtra("session_timeout_ms", ms(b.cfg.sessionTimeout))
		r.Note = "kill -9 of the primary process -> first acknowledged proposal on the new primary (p50 = median, p99 = max)"
		b.emit(r)
		out = append(out, r)
	}
	if killErr != nil {
		return out, fmt.Errorf("failover-kill: %w", killErr)
	}

	// Graceful transfer.
	var transfers, calls []time.Duration
	for range iters {
		p, err := c.settled(ctx, 60*time.Second)
		if err != nil {
			return out, fmt.Errorf("failover-transfer: %w", err)
		}
		from := c.nodes[p]
		to := c.nodes[(p+1)%len(c.nodes)]
		t0 := time.Now()
		type ackRes struct {
			at  time.Time
			err error
		}
		ackc := make(chan ackRes, 1)
		actx, cancel := context.WithTimeout(ctx, 60*time.Second)
		go func() {
			_, err := to.propose(actx, em.make(0), true)
			ackc <- ackRes{time.Now(), err}
		}()
		_, terr := from.post(actx, "/transfer?to="+to.id, nil)
		callDone := time.Since(t0)
		var a ackRes
		if terr != nil {
			cancel()
			a = <-ackc
			return out, fmt.Errorf("failover-transfer: %w", terr)
		}
		a = <-ackc
		cancel()
		if a.err != nil {
			return out, fmt.Errorf("failover-transfer: propose on %s: %w", to.id, a.err)
		}
		d := a.at.Sub(t0)
		transfers = append(transfers, d)
		calls = append(calls, callDone)
		b.prog.Logf("  transfer %s -> %s: acknowledged after %v (TransferLeadership returned after %v)",
			from.id, to.id, d.Round(time.Millisecond), callDone.Round(time.Millisecond))
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

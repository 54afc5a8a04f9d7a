package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/roomlog/roomlog/replica"
)

// handoffTimeout bounds each replica.Shutdown's hand-off (the demo's
// --handoff-timeout default).
const handoffTimeout = 2 * time.Second

// runHandoff measures the primary's upgrade step (issue 44): three
// in-process replicas in a fresh room; iters times, under a light load on
// the primary (4 closed-loop proposers), replica.Shutdown of the primary
// (hand-off to the most caught-up standby, then Close) at t0 while every
// other member proposes, retrying ErrNotPrimary every millisecond; the
// sample is t0 → the first acknowledged proposal. The stopped member is
// reopened on its data dir (a standby) before the next round.
func (b *bench) runHandoff(ctx context.Context, em *entryMaker, iters int) (Result, error) {
	room := fmt.Sprintf("bench-handoff-%d", time.Now().UnixNano())
	defer b.dropRoom(room)
	ids := []string{"m0", "m1", "m2"}
	members := map[string]*member{}
	defer func() {
		for _, m := range members {
			m.Close()
		}
	}()
	for _, id := range ids {
		m, err := b.openMember(ctx, room, id, noCheckpoints)
		if err != nil {
			return Result{}, err
		}
		members[id] = m
	}
	var samples, calls []time.Duration
	var handedOff int
	c0 := b.cpuNow()
	for it := range iters {
		p, err := handoffSettled(ctx, members)
		if err != nil {
			return Result{}, err
		}
		stop := inProcessLoad(ctx, p.r, em, 4)
		sleepCtx(ctx, 300*time.Millisecond)
		var others []*member
		for _, m := range members {
			if m != p {
				others = append(others, m)
			}
		}
		epoch := p.r.Status().Epoch
		actx, cancel := context.WithTimeout(ctx, 30*time.Second)
		ackc := make(chan time.Time, len(others))
		var wg sync.WaitGroup
		for _, o := range others {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for actx.Err() == nil {
					_, err := o.r.Propose(actx, em.make(it))
					if err == nil {
						ackc <- time.Now()
						cancel()
						return
					}
					sleepCtx(actx, time.Millisecond) // ErrNotPrimary until the new primary leads
				}
			}()
		}
		t0 := time.Now()
		sctx, scancel := context.WithTimeout(ctx, handoffTimeout)
		serr := p.r.Shutdown(sctx)
		scancel()
		call := time.Since(t0)
		stop()
		wg.Wait()
		cancel()
		var at time.Time
		select {
		case at = <-ackc:
		default:
			return Result{}, fmt.Errorf("round %d: no member acknowledged within 30s after Shutdown of %s (%v)", it, p.r.ID(), serr)
		}
		if serr == nil {
			handedOff++
		} else {
			b.prog.Logf("  handoff round %d: Shutdown: %v", it, serr)
		}
		d := at.Sub(t0)
		samples = append(samples, d)
		calls = append(calls, call)
		var leader string
		for _, o := range others {
			if st := o.r.Status(); st.Role == replica.RolePrimary && st.Epoch > epoch {
				leader = o.r.ID()
			}
		}
		b.prog.Logf("  shutdown %s: %s acknowledged after %v (Shutdown returned after %v)", p.r.ID(), leader,
			d.Round(time.Millisecond), call.Round(time.Millisecond))
		// Reopen the stopped member on its data dir.
		_ = p.srv.Close()
		id := p.r.ID()
		delete(members, id)
		m, err := b.openMember(ctx, room, id, noCheckpoints)
		if err != nil {
			return Result{}, err
		}
		members[id] = m
	}
	r := b.samplesRow("failover-handoff", samples)
	r.setCPU(b.cpuSince(c0))
	var callMs []float64
	for _, d := range calls {
		callMs = append(callMs, round3(ms(d)))
	}
	r.setExtra("shutdown_call_ms", callMs)
	r.setExtra("handed_off", handedOff)
	r.Note = "replica.Shutdown of the primary (hand-off, then Close) -> first acknowledged proposal on another member, in-process (p50 = median, p99 = max)"
	return r, nil
}

// handoffSettled waits until one member leads and every other is a
// standby that applied what the primary had.
func handoffSettled(ctx context.Context, members map[string]*member) (*member, error) {
	var p *member
	err := waitFor(ctx, 60*time.Second, "a settled room", func() bool {
		p = nil
		for _, m := range members {
			if m.r.Status().Role == replica.RolePrimary {
				p = m
			}
		}
		if p == nil {
			return false
		}
		applied := p.r.Status().Applied
		for _, m := range members {
			if st := m.r.Status(); m != p && (st.Role != replica.RoleStandby || st.Applied < applied) {
				return false
			}
		}
		return true
	})
	return p, err
}

// inProcessLoad runs workers closed-loop proposers on r until the
// returned stop is called (it waits for them). Errors are ignored.
func inProcessLoad(ctx context.Context, r *replica.Replica, em *entryMaker, workers int) (stop func()) {
	lctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; lctx.Err() == nil; i++ {
				if _, err := r.Propose(lctx, em.make(w*1_000_000+i)); err != nil {
					sleepCtx(lctx, time.Millisecond)
				}
			}
		}()
	}
	return func() { cancel(); wg.Wait() }
}

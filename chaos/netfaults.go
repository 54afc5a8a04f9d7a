package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/internal/infra/faultnet"
)

// Network faults: made on the faultnet proxies every replica's links go
// through (internal/harness/testnode ClusterOptions.Net), while every process keeps
// running — a deposed primary cut off from ZooKeeper still serves, holds
// its connections and may still try to write.

// zkLinks are the links from node id to every ZooKeeper server.
func (r *runner) zkLinks(id string) []string { return r.net.Names(faultnet.From(id)) }

// netFault runs one network fault and undoes it.
func (r *runner) netFault(ctx context.Context, f Fault, p, s *testnode.Node) {
	switch f.Kind {
	case PartitionPrimaryLong:
		links := r.zkLinks(p.ID())
		r.out.f("%s: partition primary %s from every ZooKeeper server (process running) past its session", f, p.ID())
		t0 := time.Now()
		_ = r.net.Partition(links...)
		what := r.newPrimary(ctx, p, t0)
		// Held for two session timeouts (plus the draw): by then the cut-off
		// primary has noticed (a read timeout, 2/3 of a session) and ended
		// its term (a whole session disconnected), though it never heard
		// from ZooKeeper.
		sleep(ctx, time.Until(t0.Add(2*r.cfg.Session+f.Down)))
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st, err := p.Status(sctx)
		cancel()
		if err == nil && st.Role == testnode.RolePrimary {
			// Not a safety violation (a disconnected primary acknowledges
			// nothing: proposals wait for the connection, and its writes
			// are fenced), but its Status lies: counted and printed.
			r.res.SlowStepDowns++
			r.out.f("    SLOW STEP-DOWN: %s, cut off from ZooKeeper for %v, still claims to be primary (epoch %d)",
				p.ID(), time.Since(t0).Round(time.Millisecond), st.Epoch)
		}
		_ = r.net.Heal(links...)
		r.out.f("    %s; %s was %s when healed after %v", what, p.ID(), st.Role, time.Since(t0).Round(time.Millisecond))
	case PartitionPrimaryShort:
		links := r.zkLinks(p.ID())
		r.out.f("%s: partition primary %s from every ZooKeeper server for %v", f, p.ID(), f.Down)
		_ = r.net.Partition(links...)
		sleep(ctx, f.Down)
		_ = r.net.Heal(links...)
	case PartitionLink:
		nodes := r.c.Live()
		n := nodes[f.Pick%len(nodes)]
		links := r.zkLinks(n.ID())
		link := links[(f.Pick/len(nodes))%len(links)]
		r.out.f("%s: partition link %s for %v", f, link, f.Down)
		_ = r.net.Partition(link)
		sleep(ctx, f.Down)
		_ = r.net.Heal(link)
	case DropRepliesPrimary:
		links := r.zkLinks(p.ID())
		r.out.f("%s: drop every reply to primary %s for %v (its requests still land)", f, p.ID(), f.Down)
		_ = r.net.Apply((*faultnet.Proxy).DropReplies, links...)
		sleep(ctx, f.Down)
		// Reset before the replies flow again: the client must never read
		// a stream with a hole in it.
		_ = r.net.Cut(links...)
		_ = r.net.Heal(links...)
	case StallCheckpoint:
		r.stallCheckpoint(ctx, f, p, s)
	}
}

// newPrimary waits until the replicas other than old follow one primary
// that is not old (old, cut off, cannot take part) and says who and when.
func (r *runner) newPrimary(ctx context.Context, old *testnode.Node, t0 time.Time) string {
	wctx, cancel := context.WithTimeout(ctx, r.cfg.HealTimeout)
	defer cancel()
	for {
		if np, _ := r.c.PrimaryAmong(wctx, old.ID()); np != nil && np.ID() != old.ID() {
			took := time.Since(t0)
			r.res.MaxFailover = max(r.res.MaxFailover, took)
			return fmt.Sprintf("%s primary after %v", np.ID(), took.Round(time.Millisecond))
		}
		select {
		case <-wctx.Done():
			return fmt.Sprintf("no new primary after %v: %s", time.Since(t0).Round(time.Millisecond), r.roles(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// stallCheckpoint makes standby s bootstrap (killed, wiped, the primary
// checkpoints meanwhile) while its peers' checkpoint links are slowed, and
// silences the source it streams from in the middle of the stream for
// longer than the fetch idle timeout: the fetch must give up and the next
// source be tried; s must catch up.
func (r *runner) stallCheckpoint(ctx context.Context, f Fault, p, s *testnode.Node) {
	r.out.f("%s: stall the checkpoint source in the middle of %s's bootstrap", f, s.ID())
	r.wipe(ctx, s, p)
	var peers []string
	for _, n := range r.c.Live() {
		if n.ID() != s.ID() {
			peers = append(peers, "peers->"+n.ID())
		}
	}
	// A small room's checkpoint is a few KiB (Pebble's OPTIONS file alone
	// is 2.8 KiB): at 8 KiB/s its stream lasts long enough to be caught
	// mid-way by a 20 ms poll, and stays above the fetch's MinRate
	// (16 KiB/s, enforced only after the 2 s idle grace).
	const rate = 8 << 10     // bytes/s
	const manifest = 2 << 10 // bytes: more than a /manifest probe, less than any stream
	_ = r.net.Apply(func(l *faultnet.Proxy) { l.Bandwidth(rate) }, peers...)
	defer r.net.Apply(func(l *faultnet.Proxy) { l.Bandwidth(0) }, peers...)
	before := r.net.Stats()
	if r.restart(ctx, s) != nil {
		r.res.Kinds[f.Kind]--
		return
	}
	// Wait for a stream (more than a manifest) on one of the links.
	deadline := time.Now().Add(15 * time.Second)
	var src string
	var most int64
	for src == "" && time.Now().Before(deadline) && ctx.Err() == nil {
		now := r.net.Stats()
		for _, l := range peers {
			n := now[l].BytesDown - before[l].BytesDown
			most = max(most, n)
			if n >= manifest {
				src = l
			}
		}
		sleep(ctx, 20*time.Millisecond)
	}
	if src == "" {
		r.out.f("    no checkpoint stream seen within 15s (at most %d bytes on a peer link; the log may not have been compacted): nothing stalled", most)
		r.res.Kinds[f.Kind]--
		return
	}
	_ = r.net.Partition(src)
	r.out.f("    %s stalled mid-stream (%d bytes in) for %v", src, r.net.Stats()[src].BytesDown-before[src].BytesDown, r.cfg.FetchIdle+time.Second)
	sleep(ctx, r.cfg.FetchIdle+time.Second)
	_ = r.net.Heal(src)
	r.out.f("    %s healed; %s restarted with an empty disk", strings.TrimPrefix(src, "peers->"), s.ID())
}

// partitionZKLeader cuts the ZooKeeper leader off from its followers (its
// quorum and election links blackholed) while clients still reach it: its
// clients' sessions must move to the servers that form the new quorum.
func (r *runner) partitionZKLeader(ctx context.Context, f Fault) {
	if r.ens.Net() == nil {
		r.out.f("%s: skipped, the ensemble has no fault network (zkensemble.Options.FaultNet)", f)
		r.res.Kinds[f.Kind]--
		return
	}
	if r.zkDown >= 0 {
		r.out.f("%s: skipped, server %d is down", f, r.zkDown)
		r.res.Kinds[f.Kind]--
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	leader, err := r.ens.Leader(lctx)
	cancel()
	if err != nil {
		r.out.f("%s: skipped, no ZooKeeper leader: %v", f, firstLine(err))
		r.res.Kinds[f.Kind]--
		return
	}
	r.out.f("%s: partition ZooKeeper leader %d from its followers (clients still reach it)", f, leader)
	t0 := time.Now()
	if err := r.ens.Isolate(leader); err != nil {
		r.out.f("    isolate: %v", err)
		return
	}
	sleep(ctx, f.Down)
	if err := r.ens.HealNet(); err != nil {
		r.out.f("    heal: %v", err)
	}
	lctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	now, err := r.ens.Leader(lctx)
	cancel()
	r.out.f("    healed after %v; leader now %d (%v)", time.Since(t0).Round(time.Millisecond), now, errText(err))
}

package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/roomlog/roomlog/internal/harness/testnode"
)

// finish heals every fault, lets proposals flow once more, stops them,
// waits for convergence and checks the history against every replica and
// ZooKeeper.
func (r *runner) finish(ctx context.Context) error {
	r.out.f("schedule done after %d faults; healing everything", r.res.Faults)
	if r.broken {
		// A re-seed failed: no member can run; nothing to converge or
		// check (the failure is counted in ReseedFailures).
		r.reads.stop()
		r.load.stop()
		r.res.Anomalies = append(r.res.Anomalies, "final: not checked: the room could not be re-seeded")
		return nil
	}
	r.zkHold = 0
	r.startZK(ctx)
	r.releaseNode(ctx)
	r.reviveNodes(ctx)
	if _, err := r.primary(ctx, 2*time.Minute); err != nil {
		r.res.Stalls++
		r.res.Anomalies = append(r.res.Anomalies, "final: no primary: "+firstLine(err))
		r.out.f("final: no primary: %v\n%s", firstLine(err), indent(r.describe(ctx)))
	} else if err := r.progress(ctx, 50, 2*time.Minute); err != nil {
		r.res.Stalls++
		r.res.Anomalies = append(r.res.Anomalies, "final: no progress: "+firstLine(err))
		r.out.f("final: no progress: %v", firstLine(err))
	}
	r.reads.stop()
	r.load.stop()
	if r.cfg.Lifecycle {
		r.lifecycleGaps(time.Now())
	}
	r.out.f("proposers stopped: %d acknowledged; failed attempts by code: %v", r.load.acked(), r.load.errorCounts())

	cctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	conv, err := r.c.WaitConverged(cctx)
	cancel()
	if err != nil {
		r.res.Anomalies = append(r.res.Anomalies, "final: not converged: "+firstLine(err))
		r.out.f("final: not converged: %v\n%s", firstLine(err), indent(r.describe(ctx)))
	} else {
		r.res.Converged = true
		r.out.f("converged: every replica at index %d, state hash %.16s", conv.Index, conv.Hash)
	}
	r.sample(ctx)

	dctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	nodes, err := r.dumps(dctx)
	if err != nil {
		return err
	}
	zk, err := r.readZK(dctx, nodes)
	if err != nil {
		r.out.f("ZooKeeper read-back skipped: %v", err)
	}
	end := zk.End
	for _, n := range nodes {
		end = max(end, n.Applied)
	}
	r.stopRecorder(dctx, &zk, end)
	r.res.Report = Check(r.h.Proposals(), nodes, zk)
	r.res.Observer = mergeObserverReports(r.obsPast, r.obsWatch.stop())
	r.res.Report.AddObservers(r.res.Observer, nodes, zk)
	r.out.f("%s", observerLine(r.res.Observer, r.res.Report))
	rp := r.res.Report
	r.out.f("requests: %d proposals met an unknown outcome, %d resolved by a resend (%d answered duplicate), %d left unknown; %d proposals resent; %d deduplicated copies in the log",
		rp.MetUnknown, rp.ResolvedByRetry, rp.Dedup, rp.Unknown, rp.Retried, rp.DedupCopies)
	r.checkReads(nodes)
	if zk.Read {
		r.res.ChannelsDeleted = int(zk.OldestChannel) - 1
		r.out.f("ZooKeeper still holds indexes %d..%d (channels from %d on: %d deleted)",
			zk.First, zk.End, zk.OldestChannel, r.res.ChannelsDeleted)
	}
	return nil
}

// dumps reads every replica's records, applied index and state hash.
func (r *runner) dumps(ctx context.Context) ([]NodeDump, error) {
	var out []NodeDump
	var top uint64
	for _, n := range r.c.Nodes() {
		d, err := n.Dump(ctx, 1, ^uint64(0))
		if err != nil {
			return nil, fmt.Errorf("chaos: dump %s: %w", n.ID(), err)
		}
		top = max(top, d.Applied)
		out = append(out, NodeDump{ID: n.ID(), Applied: d.Applied, Records: d.Records, Bootstrapped: r.bootstrapped[n.ID()]})
	}
	for i, n := range r.c.Nodes() {
		hctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		h, err := n.Hash(hctx, top)
		cancel()
		if err != nil {
			r.out.f("hash of %s at %d: %v", n.ID(), top, firstLine(err))
			continue // an empty hash is a state mismatch
		}
		out[i].Hash, out[i].HashIndex = h.Hash, h.Index
	}
	return out, nil
}

// readZK reads back the part of the log ZooKeeper still holds, up to the
// committed end, through a client of its own (testnode.ReadLog).
func (r *runner) readZK(ctx context.Context, nodes []NodeDump) (ZKLog, error) {
	var hint uint64
	for _, n := range nodes {
		hint = max(hint, n.Applied)
	}
	l, err := testnode.ReadLogWith(ctx, r.zkDial(), r.c.Room(), hint)
	if err != nil {
		return ZKLog{}, err
	}
	return ZKLog{Read: true, First: l.First, End: l.End, OldestChannel: l.OldestChannel, Entries: l.Entries}, nil
}

// stopRecorder lets the log recorder reach end (bounded), stops it and
// hands what it read to zk.
func (r *runner) stopRecorder(ctx context.Context, zk *ZKLog, end uint64) {
	if r.rec == nil {
		zk.Recorded, zk.Skipped = r.recPast, r.recSkipped
		return
	}
	deadline := time.Now().Add(30 * time.Second)
	for r.rec.Position() <= end && time.Now().Before(deadline) && ctx.Err() == nil {
		sleep(ctx, 20*time.Millisecond)
	}
	r.rec.Stop()
	zk.Recorded = append(slices.Clone(r.recPast), r.rec.Entries()...)
	zk.Skipped = append(slices.Clone(r.recSkipped), r.rec.Skipped()...)
	errs, last := r.rec.Errors()
	what := fmt.Sprintf("log recorder: read %d entries during the run (up to index %d)", len(zk.Recorded), r.rec.Position()-1)
	if len(zk.Skipped) > 0 {
		what += fmt.Sprintf("; missed %v (channels deleted before it read them)", zk.Skipped)
	}
	if errs > 0 {
		what += fmt.Sprintf("; %d read errors retried, the last: %v", errs, firstLine(last))
	}
	r.out.f("%s", what)
}

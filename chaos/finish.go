package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/roomlog/roomlog/internal/testnode"
	"github.com/roomlog/roomlog/logroom"
)

// finish heals every fault, lets proposals flow once more, stops them,
// waits for convergence and checks the history against every replica and
// ZooKeeper.
func (r *runner) finish(ctx context.Context) error {
	r.out.f("schedule done after %d faults; healing everything", r.res.Faults)
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
	r.res.Report = Check(r.h.Proposals(), nodes, zk)
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
// committed end, through a client of its own.
func (r *runner) readZK(ctx context.Context, nodes []NodeDump) (ZKLog, error) {
	cl, err := logroom.Dial(ctx, logroom.DialConfig{Servers: r.ens.Addrs(), SessionTimeout: 10 * time.Second})
	if err != nil {
		return ZKLog{}, err
	}
	defer cl.Close()
	room, err := logroom.OpenRoom(ctx, cl, r.c.Room(), logroom.RoomOptions{})
	if err != nil {
		return ZKLog{}, err
	}
	var hint uint64
	for _, n := range nodes {
		hint = max(hint, n.Applied)
	}
	// A channel may be deleted under the reader (checkpoints go on): start
	// again from the new oldest channel.
	var last error
	for range 5 {
		zk, err := readRoom(ctx, room, hint)
		if err == nil {
			return zk, nil
		}
		last = err
		if !errors.Is(err, logroom.ErrCompacted) {
			break
		}
	}
	return ZKLog{}, last
}

func readRoom(ctx context.Context, room *logroom.Room, hint uint64) (ZKLog, error) {
	chs, err := room.Channels(ctx)
	if err != nil {
		return ZKLog{}, err
	}
	if len(chs) == 0 {
		return ZKLog{}, errors.New("no channel")
	}
	end, err := room.CommittedIndex(ctx, hint)
	if err != nil {
		return ZKLog{}, err
	}
	zk := ZKLog{Read: true, First: chs[0].FirstIndex, End: end, OldestChannel: chs[0].Num}
	if zk.First > end {
		return zk, nil
	}
	rd, err := room.Tail(ctx, zk.First)
	if err != nil {
		return ZKLog{}, err
	}
	defer rd.Close()
	for rd.Position() <= end {
		es, err := rd.Next(ctx)
		if err != nil {
			return ZKLog{}, err
		}
		for _, e := range es {
			if e.Index <= end {
				zk.Entries = append(zk.Entries, LogEntry{Index: e.Index, Epoch: e.Epoch, SHA256: testnode.EntrySHA(e.Data)})
			}
		}
	}
	return zk, nil
}

package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/roomlog/roomlog/zkx"
)

// rawBase is the znode under which the raw ceiling creates its znodes.
const rawBase = "/bench-raw"

// runRaw measures what ZooKeeper itself allows with a plain go-zookeeper
// client: persistent-sequential creates, one at a time and 64 in flight
// (concurrent calls pipeline on one connection), of 256 B znodes and of
// roomlog's default batch size. That last row is the "raw batched ceiling"
// the append rows are compared with.
func runRaw(ctx context.Context, b *bench) ([]Result, error) {
	// The raw client connects where roomlog's clients do: to the leader
	// (their default), or anywhere with -any-server.
	addrs := b.ens.Addrs()
	if !b.cfg.anyServer {
		leader, err := b.ens.Leader(ctx)
		if err != nil {
			return nil, fmt.Errorf("raw: %w", err)
		}
		addrs = addrs[leader : leader+1]
	}
	conn, err := dialRaw(ctx, addrs, 10*time.Second)
	if err != nil {
		return nil, fmt.Errorf("raw: dial: %w", err)
	}
	defer conn.Close()
	// Paths are made by zkx.EnsurePath on the bare connection (world ACL:
	// the raw client has no credentials).
	plain := zkx.Plain(conn, zk.WorldACL(zk.PermAll))
	if err := deleteTree(conn, rawBase); err != nil {
		return nil, err
	}
	if err := zkx.EnsurePath(ctx, plain, rawBase); err != nil {
		return nil, err
	}
	defer func() { _ = deleteTree(conn, rawBase) }()

	rows := []struct {
		scenario       string
		size, inflight int
	}{
		{"raw-seq", 256, 1},
		{"raw-pipelined", 256, 64},
		{"raw-pipelined", logroom.DefaultMaxBatchBytes, 8},
		{"raw-pipelined", logroom.DefaultMaxBatchBytes, 64},
	}
	var out []Result
	ceiling := -1 // index in out of the raw batched ceiling row
	for i, row := range rows {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		parent := fmt.Sprintf("%s/r%d", rawBase, i)
		if err := zkx.EnsurePath(ctx, plain, parent); err != nil {
			return out, err
		}
		label := fmt.Sprintf("raw %s %s, %d in flight", row.scenario, fmtBytes(row.size), row.inflight)
		b.prog.Logf("%s: %v", label, b.cfg.duration)
		r, err := measureRaw(ctx, b, conn, parent, label, row.size, row.inflight)
		if err != nil {
			return out, fmt.Errorf("%s: %w", label, err)
		}
		r.Scenario = row.scenario
		if row.size == logroom.DefaultMaxBatchBytes {
			r.setExtra("equiv_256B_entries_per_s", round3(r.EntriesPerS*float64(row.size)/256))
			if r.MBPerS > b.rawCeilingMBps {
				b.rawCeilingMBps = r.MBPerS
				ceiling = len(out)
			}
		}
		if err := deleteTree(conn, parent); err != nil {
			return out, err
		}
		b.emit(r)
		out = append(out, r)
	}
	if ceiling >= 0 {
		out[ceiling].Note = "raw batched ceiling (best MB/s of the batch-sized rows): append rows' ratio_to_raw divides by it"
	}
	return out, nil
}

// measureRaw runs creates for b.cfg.duration of timed work. To keep
// ZooKeeper's memory bounded the run is split into segments of at most
// 128 MiB or 25,000 znodes; between segments the workers stop and the
// znodes are deleted in bulk, off the clock.
func measureRaw(ctx context.Context, b *bench, conn *zk.Conn, parent, label string, size, inflight int) (Result, error) {
	const segBytes, segCount = 128 << 20, 25000
	segLimit := int64(min(segCount, segBytes/size))
	data := make([]byte, size)
	_, _ = rand.Read(data)
	acl := zk.WorldACL(zk.PermAll)
	hists := make([]histogram, inflight)

	var timed time.Duration
	var cpu cpuUse // summed over segments, weighted by their time
	var ops, errCount atomic.Int64
	var firstErr atomic.Value
	segments := 0
	stopLive := b.prog.Live(label, func() string {
		return fmt.Sprintf("%d znodes", ops.Load())
	})
	defer stopLive()
	for timed < b.cfg.duration && ctx.Err() == nil && firstErr.Load() == nil {
		segments++
		var reserved atomic.Int64
		var stop atomic.Bool
		timer := time.AfterFunc(b.cfg.duration-timed, func() { stop.Store(true) })
		start := time.Now()
		c0 := b.cpuNow()
		var wg sync.WaitGroup
		for w := range inflight {
			wg.Add(1)
			go func(h *histogram) {
				defer wg.Done()
				for !stop.Load() && ctx.Err() == nil {
					if reserved.Add(1) > segLimit {
						stop.Store(true)
						return
					}
					t0 := time.Now()
					_, err := conn.Create(parent+"/n-", data, zk.FlagSequence, acl)
					if err != nil {
						if errCount.Add(1) == 1 {
							firstErr.Store(err)
						}
						stop.Store(true)
						return
					}
					h.Record(time.Since(t0))
					ops.Add(1)
				}
			}(&hists[w])
		}
		wg.Wait()
		timer.Stop()
		seg := time.Since(start)
		u := b.cpuSince(c0)
		w := seg.Seconds()
		cpu.ZooKeeper += u.ZooKeeper * w
		cpu.Bench += u.Bench * w
		cpu.Machine += u.Machine * w
		cpu.Others += u.Others * w
		timed += seg
		if timed < b.cfg.duration && ctx.Err() == nil {
			kids, _, err := conn.Children(parent)
			if err != nil {
				return Result{}, fmt.Errorf("children %s: %w", parent, err)
			}
			if _, err := deleteChildren(conn, parent, kids); err != nil {
				return Result{}, err
			}
		}
	}
	if err, ok := firstErr.Load().(error); ok {
		return Result{}, fmt.Errorf("create: %w (%d errors)", err, errCount.Load())
	}
	var h histogram
	for i := range hists {
		h.Merge(&hists[i])
	}
	n := float64(ops.Load())
	secs := timed.Seconds()
	r := Result{
		System:      "zookeeper",
		Servers:     b.cfg.servers,
		EntryBytes:  size,
		Concurrency: inflight,
		EntriesPerS: round3(n / secs),
		MBPerS:      round3(n * float64(size) / secs / 1e6),
	}
	r.setLatency(&h)
	r.setCPU(cpuUse{cpu.ZooKeeper / secs, cpu.Bench / secs, cpu.Machine / secs, cpu.Others / secs})
	r.setExtra("segments", segments)
	r.setExtra("timed_s", round3(secs))
	return r, nil
}

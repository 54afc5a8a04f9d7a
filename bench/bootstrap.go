package main

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/replica"
)

// runBootstrap fills a lone primary's state, checkpoints it (which deletes
// the channels it covers), then opens a new standby on an empty disk while a
// light load continues: the standby finds its log position deleted and
// restores the primary's checkpoint over HTTP. Reported: checkpoint bytes
// over the time from Open to the restored store, and the time until a
// Barrier on the new standby returns (caught up).
func runBootstrap(ctx context.Context, b *bench) ([]Result, error) {
	stateBytes := 128 << 20
	if b.cfg.quick {
		stateBytes = 24 << 20
	}
	const valueSize = 4096
	fill, err := newEntryMaker(valueSize, stateBytes/valueSize)
	if err != nil {
		return nil, err
	}
	p, room, err := b.lonePrimary(ctx, "boot", nil)
	if err != nil {
		return nil, err
	}
	defer b.dropRoom(room)
	defer p.Close()

	want := uint64(stateBytes / valueSize)
	b.prog.Logf("bootstrap: writing %d MiB of state (%d x 4 KiB entries)", stateBytes>>20, want)
	fctx, stopFill := context.WithCancel(ctx)
	var acked atomic.Uint64
	stopLive := b.prog.Live("bootstrap fill", func() string { return fmt.Sprintf("%d/%d entries", acked.Load(), want) })
	t0 := time.Now()
	st := runLoad(fctx, p.r, fill, 32, 0, func(uint64, time.Time) {
		if acked.Add(1) >= want {
			stopFill()
		}
	})
	<-fctx.Done()
	st.wait()
	stopLive()
	fillTime := time.Since(t0)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if acked.Load() < want {
		return nil, fmt.Errorf("bootstrap: fill stopped at %d of %d entries", acked.Load(), want)
	}
	b.prog.Logf("  filled in %v; checkpoint on the primary", fillTime.Round(time.Millisecond))
	if err := p.r.Checkpoint(ctx); err != nil {
		return nil, fmt.Errorf("bootstrap: checkpoint: %w", err)
	}
	if err := waitFor(ctx, 30*time.Second, "channel 1 deleted", func() bool {
		chs, err := p.r.Room().Channels(ctx)
		return err == nil && len(chs) > 0 && chs[0].FirstIndex > 1
	}); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	info, err := checkpoint.Newest(filepath.Join(p.dir, "checkpoints"))
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}

	// A light load keeps the log moving while the standby bootstraps.
	small, err := newEntryMaker(replicaEntryBytes, 10_000)
	if err != nil {
		return nil, err
	}
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	load := runLoad(lctx, p.r, small, 16, 500, nil)
	defer load.wait()
	defer stopLoad()

	b.prog.Logf("bootstrap: new standby from a %.1f MB checkpoint", float64(info.Bytes)/1e6)
	// The phases, from the fetch's progress stages: first streamed byte,
	// last streamed byte (CRCs checked on the way), verified (opened as a
	// store at the manifest's index, renamed into place), then restored
	// (hard-linked into the store and opened) when Bootstraps counts it.
	var phaseMu sync.Mutex
	var firstByte, streamedAt, verifiedAt time.Time
	t1 := time.Now()
	s, err := b.openMember(ctx, room, "s", func(c *replica.Config) {
		c.CheckpointFetch.Progress = func(p checkpoint.Progress) {
			phaseMu.Lock()
			defer phaseMu.Unlock()
			now := time.Now()
			if firstByte.IsZero() {
				firstByte = now.Add(-p.Elapsed) // the request went out then
			}
			switch p.Stage {
			case checkpoint.StageStreamed:
				streamedAt = now
			case checkpoint.StageVerified:
				verifiedAt = now
			}
		}
	})
	if err != nil {
		return nil, err
	}
	defer s.Close()
	if err := waitFor(ctx, 120*time.Second, "the standby's bootstrap", func() bool { return s.r.Status().Bootstraps >= 1 }); err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	restored := time.Since(t1)
	bctx, cancel := context.WithTimeout(ctx, 120*time.Second)
	_, err = s.r.Barrier(bctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("bootstrap: barrier on the new standby: %w", err)
	}
	caught := time.Since(t1)
	r := Result{
		System:     "roomlog",
		Servers:    b.cfg.servers,
		Scenario:   "bootstrap",
		EntryBytes: valueSize,
		MBPerS:     round3(float64(info.Bytes) / restored.Seconds() / 1e6),
	}
	r.setExtra("checkpoint_bytes", info.Bytes)
	r.setExtra("checkpoint_index", info.Manifest.Index)
	r.setExtra("restored_ms", round3(ms(restored)))
	phaseMu.Lock()
	if !firstByte.IsZero() && !streamedAt.IsZero() && !verifiedAt.IsZero() {
		restoredAt := t1.Add(restored)
		mbps := func(d time.Duration) float64 { return round3(float64(info.Bytes) / d.Seconds() / 1e6) }
		r.setExtra("setup_ms", round3(ms(firstByte.Sub(t1))))            // Open, join, find a source, probe manifests
		r.setExtra("fetch_ms", round3(ms(streamedAt.Sub(firstByte))))    // stream + per-file CRC, one pass
		r.setExtra("verify_ms", round3(ms(verifiedAt.Sub(streamedAt))))  // open as a store at the manifest's index
		r.setExtra("restore_ms", round3(ms(restoredAt.Sub(verifiedAt)))) // link into the store, open, swap
		r.setExtra("fetch_mb_per_s", mbps(streamedAt.Sub(firstByte)))
		r.setExtra("fetch_verify_restore_mb_per_s", mbps(restoredAt.Sub(firstByte)))
	}
	phaseMu.Unlock()
	r.setExtra("caught_up_ms", round3(ms(caught)))
	r.setExtra("fill_ms", round3(ms(fillTime)))
	r.Note = fmt.Sprintf("%.1f MB checkpoint: restored %v after Open, caught up (Barrier) after %v",
		float64(info.Bytes)/1e6, restored.Round(time.Millisecond), caught.Round(time.Millisecond))
	b.emit(r)
	return []Result{r}, nil
}

// runFootprint runs a primary and a standby at half the maximum rate with
// a small checkpoint policy (every 16 MiB) and samples, every few seconds,
// the room's bytes in ZooKeeper and each ZooKeeper server's used heap.
func runFootprint(ctx context.Context, b *bench) ([]Result, error) {
	dur, every := time.Minute, 3*time.Second
	if b.cfg.quick {
		dur, every = 10*time.Second, 2*time.Second
	}
	em, err := newEntryMaker(replicaEntryBytes, 100_000)
	if err != nil {
		return nil, err
	}
	maxRate, out, err := b.maxProposeRate(ctx, em)
	if err != nil {
		return out, err
	}
	p, s, room, err := b.pair(ctx, "foot", func(c *replica.Config) {
		c.CheckpointEveryBytes = 16 << 20
		c.CheckpointEveryEntries = -1
	})
	if err != nil {
		return out, err
	}
	defer b.dropRoom(room)
	defer s.Close()
	defer p.Close()
	rate := maxRate / 2
	b.prog.Logf("footprint: %v at %s entries/s, checkpoint every 16 MiB, a sample every %v", dur, fmtRate(rate), every)
	var heaps []*heapWatch
	for i := range b.ens.Size() {
		h, err := watchHeap(b.ens.PID(i), min(every, time.Second))
		if err != nil {
			b.log.Warn("jstat", "server", i, "err", err)
		}
		heaps = append(heaps, h)
	}
	defer func() {
		for _, h := range heaps {
			h.stop()
		}
	}()
	_ = waitFor(ctx, 5*time.Second, "a first jstat line", func() bool {
		for _, h := range heaps {
			if h != nil && h.MB() == 0 {
				return false
			}
		}
		return true
	})
	lctx, stopLoad := context.WithCancel(ctx)
	start := time.Now()
	load := runLoad(lctx, p.r, em, 256, rate, nil)
	type sample struct {
		T       float64   `json:"t_s"`
		RoomMB  float64   `json:"room_mb"`
		HeapMB  []float64 `json:"zk_heap_used_mb"`
		Applied uint64    `json:"primary_applied"`
		Standby uint64    `json:"standby_applied"`
	}
	var samples []sample
	var roomMax, heapMax float64
	take := func() {
		var sm sample
		sm.T = round3(time.Since(start).Seconds())
		if n, err := p.r.Room().Bytes(ctx); err == nil {
			sm.RoomMB = round3(float64(n) / 1e6)
		}
		for _, h := range heaps {
			sm.HeapMB = append(sm.HeapMB, round3(h.MB()))
			heapMax = max(heapMax, h.MB())
		}
		sm.Applied = p.r.Status().Applied
		sm.Standby = s.r.Status().Applied
		roomMax = max(roomMax, sm.RoomMB)
		samples = append(samples, sm)
		b.prog.Logf("  t=%5.1fs room %6.1f MB, ZooKeeper heap used %v MB, applied %d (standby %d)",
			sm.T, sm.RoomMB, sm.HeapMB, sm.Applied, sm.Standby)
	}
	take()
	t := time.NewTicker(every)
	for time.Since(start) < dur && ctx.Err() == nil {
		select {
		case <-t.C:
			take()
		case <-ctx.Done():
		}
	}
	t.Stop()
	stopLoad()
	load.wait()
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	// Live data: one full GC per server, then the heap in use.
	var live []float64
	for i, h := range heaps {
		_ = exec.CommandContext(ctx, "jcmd", strconv.Itoa(b.ens.PID(i)), "GC.run").Run()
		gcDone := time.Now()
		// The next jstat line shows the heap after the GC.
		_ = waitFor(ctx, 3*time.Second, "a jstat line after GC", func() bool { return h.at().After(gcDone) })
		live = append(live, round3(h.MB()))
	}
	r := b.proposeRow("footprint", 256, load, elapsed)
	r.setExtra("room_mb_max", roomMax)
	r.setExtra("room_mb_end", samples[len(samples)-1].RoomMB)
	r.setExtra("zk_heap_used_mb_max", round3(heapMax))
	r.setExtra("zk_heap_live_mb_end", live)
	r.setExtra("samples_every_s", every.Seconds())
	r.setExtra("samples_series", samples)
	r.setExtra("primary_checkpoint_index", p.r.Status().CheckpointIndex)
	r.Note = fmt.Sprintf("room max %.1f MB, ZooKeeper heap used max %.0f MB (live after GC at end %v MB) over %v with checkpoints every 16 MiB",
		roomMax, heapMax, live, elapsed.Round(time.Second))
	b.emit(r)
	return append(out, r), nil
}

// heapWatch follows one JVM's heap with a single long-running
// `jstat -gc <pid> <interval>` (starting a jstat JVM per sample would cost
// more CPU than the sample is worth on a small machine).
type heapWatch struct {
	cmd    *exec.Cmd
	done   chan struct{}
	lastMB atomic.Value // heapLine: the latest line
}

type heapLine struct {
	mb float64
	at time.Time // when it was read
}

func watchHeap(pid int, every time.Duration) (*heapWatch, error) {
	if pid == 0 {
		return nil, fmt.Errorf("no pid")
	}
	cmd := exec.Command("jstat", "-gc", strconv.Itoa(pid), strconv.Itoa(int(every.Milliseconds())))
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h := &heapWatch{cmd: cmd, done: make(chan struct{})}
	go func() {
		defer close(h.done)
		sc := bufio.NewScanner(out)
		var header string
		for sc.Scan() {
			line := sc.Text()
			if strings.Contains(line, "S0U") {
				header = line
				continue
			}
			if header == "" {
				continue
			}
			if mb, err := parseJstatUsed(header + "\n" + line); err == nil {
				h.lastMB.Store(heapLine{mb, time.Now()})
			}
		}
		_ = cmd.Wait()
	}()
	return h, nil
}

// MB is the used heap at the latest jstat line (0 before the first).
func (h *heapWatch) MB() float64 {
	if h == nil {
		return 0
	}
	v, _ := h.lastMB.Load().(heapLine)
	return v.mb
}

// at is when the latest line was read (zero before the first).
func (h *heapWatch) at() time.Time {
	if h == nil {
		return time.Time{}
	}
	v, _ := h.lastMB.Load().(heapLine)
	return v.at
}

func (h *heapWatch) stop() {
	if h == nil {
		return
	}
	_ = h.cmd.Process.Kill()
	<-h.done
}

// parseJstatUsed sums S0U, S1U, EU and OU (KiB) of `jstat -gc` output (a
// header line and a value line) and returns MB.
func parseJstatUsed(out string) (float64, error) {
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) < 2 {
		return 0, fmt.Errorf("jstat: unexpected output %q", out)
	}
	head, vals := strings.Fields(lines[0]), strings.Fields(lines[len(lines)-1])
	var kib float64
	found := 0
	for i, h := range head {
		switch h {
		case "S0U", "S1U", "EU", "OU":
			if i >= len(vals) {
				return 0, fmt.Errorf("jstat: short line %q", lines[len(lines)-1])
			}
			v, err := strconv.ParseFloat(strings.Replace(vals[i], ",", ".", 1), 64)
			if err != nil {
				return 0, fmt.Errorf("jstat: %s=%q: %w", h, vals[i], err)
			}
			kib += v
			found++
		}
	}
	if found != 4 {
		return 0, fmt.Errorf("jstat: columns missing in %q", lines[0])
	}
	return kib * 1024 / 1e6, nil
}

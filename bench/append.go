package main

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/logroom"
)

// appendSpec is one append row: proposers goroutines call Append in a loop
// with perCall entries of size bytes each.
type appendSpec struct {
	scenario  string
	size      int
	proposers int
	perCall   int
}

// runAppend measures Writer.Append for each entry size and proposer count.
func runAppend(ctx context.Context, b *bench) ([]Result, error) {
	var specs []appendSpec
	for _, size := range b.cfg.sizes {
		for _, p := range b.cfg.proposers {
			specs = append(specs, appendSpec{"append", size, p, 1})
		}
	}
	return b.appendRows(ctx, specs)
}

// runBulk measures the two ways of handing the writer lots of entries at
// once: many entries per Append call, and thousands of proposers.
func runBulk(ctx context.Context, b *bench) ([]Result, error) {
	specs := []appendSpec{{"append-bulk", 256, 16, 1000}}
	if !b.cfg.quick {
		specs = append(specs, appendSpec{"append-many", 256, 4096, 1})
	}
	return b.appendRows(ctx, specs)
}

func (b *bench) dial(ctx context.Context) (*logroom.Client, error) {
	return logroom.Dial(ctx, logroom.DialConfig{
		Servers:        b.ens.Addrs(),
		SessionTimeout: b.cfg.sessionTimeout,
		Logger:         b.log,
	})
}

func (b *bench) appendRows(ctx context.Context, specs []appendSpec) ([]Result, error) {
	cl, err := b.dial(ctx)
	if err != nil {
		return nil, fmt.Errorf("dial: %w", err)
	}
	defer cl.Close()
	var out []Result
	for _, s := range specs {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		r, err := b.appendRow(ctx, cl, s)
		if err != nil {
			return out, fmt.Errorf("%s %s x%d: %w", s.scenario, fmtBytes(s.size), s.proposers, err)
		}
		b.emit(r)
		out = append(out, r)
	}
	return out, nil
}

// janitor deletes every sealed channel of a room as the run goes, so the
// room stays far below its byte bound (the writer rotates on its own at
// MaxChannelBytes). It counts what it deleted.
type janitor struct {
	room    *logroom.Room
	cancel  context.CancelFunc
	done    chan struct{}
	deleted atomic.Int64
	entries atomic.Int64 // entries in the channels it deleted
	batches atomic.Int64 // batch znodes in the channels it deleted
	errs    atomic.Int64
}

func startJanitor(ctx context.Context, room *logroom.Room, every time.Duration) *janitor {
	ctx, cancel := context.WithCancel(ctx)
	j := &janitor{room: room, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(j.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				j.sweep(ctx)
			}
		}
	}()
	return j
}

func (j *janitor) sweep(ctx context.Context) {
	chs, err := j.room.Channels(ctx)
	if err != nil {
		if ctx.Err() == nil {
			j.errs.Add(1)
		}
		return
	}
	for _, ch := range chs {
		if !ch.Sealed {
			continue
		}
		if err := j.room.DeleteChannel(ctx, ch.Num); err != nil {
			if ctx.Err() == nil {
				j.errs.Add(1)
			}
			return
		}
		j.count(ch)
	}
}

func (j *janitor) count(ch logroom.ChannelInfo) {
	j.deleted.Add(1)
	if ch.LastIndex >= ch.FirstIndex {
		j.entries.Add(int64(ch.LastIndex - ch.FirstIndex + 1))
	}
	j.batches.Add(int64(ch.Batches))
}

// stop ends the janitor and waits for it.
func (j *janitor) stop() {
	j.cancel()
	<-j.done
}

// appendRow runs one row on a fresh room, deleted afterwards: a warm-up of
// a quarter of the duration (at most 1 s), then the measured window. A call
// counts (throughput and latency) when it completes inside the window.
func (b *bench) appendRow(ctx context.Context, cl *logroom.Client, s appendSpec) (Result, error) {
	label := fmt.Sprintf("%s %s x%d", s.scenario, fmtBytes(s.size), s.proposers)
	if s.perCall > 1 {
		label += fmt.Sprintf(", %d entries/call", s.perCall)
	}
	b.prog.Logf("%s: %v", label, b.cfg.duration)
	name := fmt.Sprintf("bench-%s-%d-%d-%d", s.scenario, s.size, s.proposers, time.Now().UnixNano())
	room, err := logroom.OpenRoom(ctx, cl, name, logroom.RoomOptions{Logger: b.log})
	if err != nil {
		return Result{}, fmt.Errorf("open room: %w", err)
	}
	defer func() { _ = deleteTree(cl.Conn(), room.Path()) }()
	wc := b.writerConfig()
	wc.Owner = "bench"
	w, err := room.NewWriter(ctx, wc)
	if err != nil {
		return Result{}, fmt.Errorf("new writer: %w", err)
	}
	writerOpen := true
	defer func() {
		if writerOpen {
			_ = w.Close()
		}
	}()
	jan := startJanitor(ctx, room, 200*time.Millisecond)
	defer jan.stop()

	const (
		warmup = iota
		measure
		done
	)
	var phase atomic.Int32
	var entries, calls, roomFull, otherErrs atomic.Int64
	var firstErr atomic.Value
	hists := make([]histogram, s.proposers)
	var wg sync.WaitGroup
	for p := range s.proposers {
		batch := make([][]byte, s.perCall)
		for i := range batch {
			batch[i] = make([]byte, s.size)
			_, _ = rand.Read(batch[i])
		}
		wg.Add(1)
		go func(h *histogram) {
			defer wg.Done()
			for phase.Load() != done && ctx.Err() == nil {
				t0 := time.Now()
				_, err := w.Append(ctx, batch...)
				d := time.Since(t0)
				if err != nil {
					if errors.Is(err, logroom.ErrRoomFull) {
						roomFull.Add(1)
						select { // back off: the janitor frees space
						case <-time.After(5 * time.Millisecond):
						case <-ctx.Done():
						}
						continue
					}
					if otherErrs.Add(1) == 1 {
						firstErr.Store(err)
					}
					return
				}
				if phase.Load() == measure {
					h.Record(d)
					entries.Add(int64(len(batch)))
					calls.Add(1)
				}
			}
		}(&hists[p])
	}
	stopLive := b.prog.Live(label, func() string {
		return fmt.Sprintf("%d entries, last index %d", entries.Load(), w.LastCommitted())
	})
	warm := min(time.Second, b.cfg.duration/4)
	sleepCtx(ctx, warm)
	phase.Store(measure)
	start := time.Now()
	sleepCtx(ctx, b.cfg.duration)
	phase.Store(done)
	window := time.Since(start)
	wg.Wait()
	stopLive()
	if err, ok := firstErr.Load().(error); ok {
		return Result{}, fmt.Errorf("append: %w (%d errors)", err, otherErrs.Load())
	}
	if ctx.Err() != nil {
		return Result{}, ctx.Err()
	}

	// Account for the channels still in the room: seal the open one.
	jan.stop()
	if _, err := w.Rotate(ctx); err != nil {
		b.log.Warn("rotate", "err", err)
	}
	if chs, err := room.Channels(ctx); err == nil {
		for _, ch := range chs {
			if ch.Sealed {
				jan.count(ch)
			}
		}
	}
	writerOpen = false
	if err := w.Close(); err != nil {
		b.log.Warn("close writer", "err", err)
	}

	var h histogram
	for i := range hists {
		h.Merge(&hists[i])
	}
	n := float64(entries.Load())
	secs := window.Seconds()
	r := Result{
		System:      "roomlog",
		Servers:     b.cfg.servers,
		Scenario:    s.scenario,
		EntryBytes:  s.size,
		Concurrency: s.proposers,
		EntriesPerS: round3(n / secs),
		MBPerS:      round3(n * float64(s.size) / secs / 1e6),
	}
	r.setLatency(&h)
	if b.rawCeilingMBps > 0 {
		ratio := round3(r.MBPerS / b.rawCeilingMBps)
		r.RatioToRaw = &ratio
	}
	r.setExtra("entries_per_call", s.perCall)
	r.setExtra("calls_per_s", round3(float64(calls.Load())/secs))
	if bt := jan.batches.Load(); bt > 0 {
		r.setExtra("avg_entries_per_batch", round3(float64(jan.entries.Load())/float64(bt)))
		r.setExtra("batches", bt)
	}
	r.setExtra("channels_deleted", jan.deleted.Load())
	if v := roomFull.Load(); v > 0 {
		r.setExtra("room_full_errors", v)
		r.Note = fmt.Sprintf("%d ErrRoomFull (janitor behind)", v)
	}
	if v := jan.errs.Load(); v > 0 {
		r.setExtra("janitor_errors", v)
	}
	return r, nil
}

// sleepCtx waits d or until ctx ends. It paces a measurement; it is never
// used to wait for a condition.
func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

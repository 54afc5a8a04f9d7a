package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roomlog/roomlog/logroom"
)

// appendSpec is one append row: proposers goroutines call Append in a loop
// with perCall entries of size bytes each.
type appendSpec struct {
	scenario  string
	size      int
	proposers int
	perCall   int
	room      string // room name ("": a fresh name)
	// data is what the entries hold: "" or "random" (incompressible
	// random bytes), "demo" (the dfsmaster demo's enveloped namespace
	// commands, demoentries.go).
	data string
	// compression is the writer's WriterConfig.Compression ("": the
	// bench's writer config, i.e. logroom's default).
	compression string
}

// compressions maps the -compression names of a row to logroom's values.
var compressions = map[string]logroom.Compression{
	"default": logroom.CompressionDefault,
	"none":    logroom.CompressionNone,
	"s2":      logroom.CompressionS2,
}

// runCompress measures batch compression: 256 B entries appended in bulk
// (16 callers x 1000 entries per call, where ZooKeeper is byte-bound) of
// realistic, compressible content (the demo's commands) and of random
// bytes, each with compression off and with S2.
func runCompress(ctx context.Context, b *bench) ([]Result, error) {
	var specs []appendSpec
	for _, data := range []string{"demo", "random"} {
		for _, comp := range []string{"none", "s2"} {
			name := "compress-" + data + "-" + map[string]string{"none": "off", "s2": "s2"}[comp]
			specs = append(specs, appendSpec{scenario: name, size: 256, proposers: 16, perCall: 1000, data: data, compression: comp})
		}
	}
	return b.appendRows(ctx, specs)
}

// runAppend measures Writer.Append for each entry size and proposer count.
func runAppend(ctx context.Context, b *bench) ([]Result, error) {
	var specs []appendSpec
	for _, size := range b.cfg.sizes {
		for _, p := range b.cfg.proposers {
			specs = append(specs, appendSpec{scenario: "append", size: size, proposers: p, perCall: 1})
		}
	}
	return b.appendRows(ctx, specs)
}

// runBulk measures the two ways of handing the writer lots of entries at
// once: many entries per Append call, and thousands of proposers.
func runBulk(ctx context.Context, b *bench) ([]Result, error) {
	specs := []appendSpec{{scenario: "append-bulk", size: 256, proposers: 16, perCall: 1000}}
	if !b.cfg.quick {
		specs = append(specs, appendSpec{scenario: "append-many", size: 256, proposers: 4096, perCall: 1})
	}
	return b.appendRows(ctx, specs)
}

func (b *bench) dial(ctx context.Context) (*logroom.Client, error) {
	return logroom.Dial(ctx, logroom.DialConfig{
		Servers:        b.addrs,
		SessionTimeout: b.cfg.sessionTimeout,
		Logger:         b.log,
		AnyServer:      b.cfg.anyServer,
	})
}

func (b *bench) appendRows(ctx context.Context, specs []appendSpec) ([]Result, error) {
	var out []Result
	for _, s := range specs {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		r, err := b.appendRowIsolated(ctx, s)
		if err != nil {
			// One failed row (a panic in the writer, say) does not end the run.
			msg := fmt.Sprintf("%s %s x%d: %v", s.scenario, fmtBytes(s.size), s.proposers, err)
			b.prog.Logf("!! %s", msg)
			b.rowErrors = append(b.rowErrors, msg)
			continue
		}
		b.emit(r)
		out = append(out, r)
	}
	return out, nil
}

// appendRowIsolated runs one append row in a child process (the bench
// binary with the hidden first argument -append-row): a panic or a stuck
// writer in the library fails that row, not the whole run, and every row
// starts with a fresh Go heap. The child prints its Result as JSON.
func (b *bench) appendRowIsolated(ctx context.Context, s appendSpec) (Result, error) {
	exe, err := os.Executable()
	if err != nil {
		return Result{}, err
	}
	room := fmt.Sprintf("bench-%s-%d-%d-%d", s.scenario, s.size, s.proposers, time.Now().UnixNano())
	defer b.dropRoom(room) // the child deletes it too, unless it died
	args := []string{"-append-row",
		"-room", room,
		"-zk", strings.Join(b.addrs, ","),
		"-servers", strconv.Itoa(b.cfg.servers),
		"-session-timeout", b.cfg.sessionTimeout.String(),
		"-duration", b.cfg.duration.String(),
		"-scenario", s.scenario,
		"-size", strconv.Itoa(s.size),
		"-proposers", strconv.Itoa(s.proposers),
		"-per-call", strconv.Itoa(s.perCall),
		"-data", s.data,
		"-compression", s.compression,
		"-any-server=" + strconv.FormatBool(b.cfg.anyServer),
		"-raw-mbps", strconv.FormatFloat(b.rawCeilingMBps, 'f', -1, 64),
		"-writer-inflight", strconv.Itoa(b.cfg.maxInFlight),
		"-writer-eager", strconv.Itoa(b.cfg.eagerInFlight),
		"-writer-linger", b.cfg.linger.String(),
		"-since", strconv.FormatInt(b.prog.start.UnixNano(), 10),
	}
	var pids []string
	for _, p := range b.pids {
		pids = append(pids, strconv.Itoa(p))
	}
	if len(pids) > 0 {
		args = append(args, "-zk-pids", strings.Join(pids, ","))
	}
	if b.cfg.cpuProfile != "" {
		args = append(args, "-cpuprofile", fmt.Sprintf("%s.%s-%d-%d", b.cfg.cpuProfile, s.scenario, s.size, s.proposers))
	}
	if b.cfg.verbose {
		args = append(args, "-v")
	}
	cmd := newNodeCmd(exe, args...)
	var stdout bytes.Buffer
	errTail := &tailBuffer{max: 64 << 10}
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(b.prog.w, errTail)
	runErr := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return Result{}, err
	}
	go func() { runErr <- cmd.Wait() }()
	select {
	case err = <-runErr:
	case <-ctx.Done():
		_ = cmd.Process.Signal(syscall.SIGTERM)
		<-runErr
		return Result{}, ctx.Err()
	}
	if err != nil {
		return Result{}, fmt.Errorf("row process failed (%v): %s", err, errTail.cause())
	}
	var r Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		return Result{}, fmt.Errorf("row process output: %w", err)
	}
	return r, nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex // guards buf
	max int
	buf []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > t.max {
		t.buf = t.buf[len(t.buf)-t.max:]
	}
	return len(p), nil
}

// cause returns the most telling line: a panic, else the last line.
func (t *tailBuffer) cause() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(t.buf)), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "panic:") || strings.HasPrefix(l, "fatal error:") {
			at := ""
			// The first frame: a function line, then "\tfile:line +0x..".
			for j := i + 2; j < len(lines); j++ {
				if strings.HasPrefix(lines[j], "\t") {
					file, _, _ := strings.Cut(strings.TrimSpace(lines[j]), " ")
					at = fmt.Sprintf("%s (%s)", lines[j-1], filepath.Base(file))
					break
				}
			}
			if at != "" {
				return l + " at " + at
			}
			return l
		}
	}
	if len(lines) == 0 {
		return "no output"
	}
	return lines[len(lines)-1]
}

// runAppendRow is the child side of appendRowIsolated.
func runAppendRow(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("bench -append-row", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var s appendSpec
	var zkAddrs, zkPIDs string
	var since int64
	var rawMBps float64
	fs.StringVar(&zkAddrs, "zk", "", "ZooKeeper addresses")
	fs.StringVar(&zkPIDs, "zk-pids", "", "ZooKeeper server pids (CPU accounting)")
	fs.IntVar(&cfg.servers, "servers", 3, "servers in the ensemble (reported)")
	fs.DurationVar(&cfg.sessionTimeout, "session-timeout", 4*time.Second, "")
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "")
	fs.StringVar(&s.scenario, "scenario", "append", "")
	fs.StringVar(&s.room, "room", "", "")
	fs.IntVar(&s.size, "size", 256, "")
	fs.IntVar(&s.proposers, "proposers", 1, "")
	fs.IntVar(&s.perCall, "per-call", 1, "")
	fs.StringVar(&s.data, "data", "", "")
	fs.StringVar(&s.compression, "compression", "", "")
	fs.Float64Var(&rawMBps, "raw-mbps", 0, "")
	fs.IntVar(&cfg.maxInFlight, "writer-inflight", 0, "")
	fs.IntVar(&cfg.eagerInFlight, "writer-eager", 0, "")
	fs.DurationVar(&cfg.linger, "writer-linger", 0, "")
	fs.Int64Var(&since, "since", 0, "")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "")
	fs.BoolVar(&cfg.verbose, "v", false, "")
	fs.BoolVar(&cfg.anyServer, "any-server", false, "")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err == nil && pprof.StartCPUProfile(f) == nil {
			defer f.Close()
			defer pprof.StopCPUProfile()
		}
	}
	level := slog.LevelWarn
	if cfg.verbose {
		level = slog.LevelDebug
	}
	b := &bench{
		cfg:            cfg,
		addrs:          strings.Split(zkAddrs, ","),
		prog:           newProgress(stderr),
		log:            slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
		rawCeilingMBps: rawMBps,
	}
	if since > 0 {
		b.prog.start = time.Unix(0, since)
	}
	if zkPIDs != "" {
		b.pids, _ = parseInts(zkPIDs, 1, 1<<30)
	}
	cl, err := b.dial(ctx)
	if err != nil {
		fmt.Fprintf(stderr, "dial: %v\n", err)
		return 1
	}
	defer cl.Close()
	r, err := b.appendRow(ctx, cl, s)
	if err != nil {
		fmt.Fprintf(stderr, "%v\n", err)
		return 1
	}
	if err := json.NewEncoder(stdout).Encode(r); err != nil {
		return 1
	}
	return 0
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
	name := s.room
	if name == "" {
		name = fmt.Sprintf("bench-%s-%d-%d-%d", s.scenario, s.size, s.proposers, time.Now().UnixNano())
	}
	room, err := logroom.OpenRoom(ctx, cl, name, logroom.RoomOptions{Logger: b.log})
	if err != nil {
		return Result{}, fmt.Errorf("open room: %w", err)
	}
	defer func() { _ = deleteTree(cl.Conn(), room.Path()) }()
	wc := b.writerConfig()
	wc.Owner = "bench"
	if s.compression != "" {
		c, ok := compressions[s.compression]
		if !ok {
			return Result{}, fmt.Errorf("unknown compression %q", s.compression)
		}
		wc.Compression = c
	}
	// The writer's metrics give the bytes stored in ZooKeeper (batch
	// bytes as stored, per acknowledged batch).
	reg := prometheus.NewRegistry()
	if wc.Metrics, err = logroom.NewMetrics(reg); err != nil {
		return Result{}, err
	}
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
		// A pool of calls, used in turn: consecutive calls of a proposer
		// carry different entries (they may share a batch with others).
		const poolCalls = 4
		pool, err := rowEntries(s, uint64(p), poolCalls*s.perCall)
		if err != nil {
			return Result{}, err
		}
		wg.Add(1)
		go func(h *histogram) {
			defer wg.Done()
			for call := 0; phase.Load() != done && ctx.Err() == nil; call++ {
				off := (call % poolCalls) * s.perCall
				batch := pool[off : off+s.perCall]
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
	c0 := b.cpuNow()
	stored0, batches0 := storedBytes(reg)
	sleepCtx(ctx, b.cfg.duration)
	phase.Store(done)
	window := time.Since(start)
	cpu := b.cpuSince(c0)
	stored1, batches1 := storedBytes(reg)
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
	r.setCPU(cpu)
	if b.rawCeilingMBps > 0 {
		ratio := round3(r.MBPerS / b.rawCeilingMBps)
		r.RatioToRaw = &ratio
	}
	r.setExtra("entries_per_call", s.perCall)
	if s.data != "" {
		r.setExtra("data", s.data)
	}
	if s.compression != "" {
		r.setExtra("compression", s.compression)
	}
	// Bytes acknowledged into ZooKeeper in the window (batch znodes as
	// stored), against the logical entry bytes of the calls completed in
	// it.
	storedMBps := (stored1 - stored0) / secs / 1e6
	r.setExtra("stored_mb_per_s", round3(storedMBps))
	r.setExtra("window_batches", int64(batches1-batches0))
	if storedMBps > 0 && strings.HasPrefix(s.scenario, "compress-") {
		r.setExtra("logical_per_stored", round3(r.MBPerS/storedMBps))
		r.Note = fmt.Sprintf("%s data, compression %s: logical %.1f MB/s, stored %.1f MB/s (%.2fx), %.0f KB per batch znode",
			s.data, s.compression, r.MBPerS, storedMBps, r.MBPerS/storedMBps, (stored1-stored0)/max(batches1-batches0, 1)/1e3)
	}
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

// rowEntries returns n entries of a row's kind for proposer p.
func rowEntries(s appendSpec, p uint64, n int) ([][]byte, error) {
	switch s.data {
	case "", "random":
		out := make([][]byte, n)
		for i := range out {
			out[i] = make([]byte, s.size)
			_, _ = rand.Read(out[i])
		}
		return out, nil
	case "demo":
		d := newDemoEntries(p+1, s.size)
		out := make([][]byte, n)
		for i := range out {
			out[i] = d.next()
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown row data %q", s.data)
}

// storedBytes returns the sum and count of roomlog_writer_batch_bytes:
// the stored bytes and number of the batches acknowledged so far.
func storedBytes(reg *prometheus.Registry) (sum, count float64) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0
	}
	for _, mf := range mfs {
		if mf.GetName() != "roomlog_writer_batch_bytes" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				sum += h.GetSampleSum()
				count += float64(h.GetSampleCount())
			}
		}
	}
	return sum, count
}

package main

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roomlog/roomlog/replica"
)

// replicaEntryBytes is the entry size of the replica scenarios (one OpSet).
const replicaEntryBytes = 256

// timedLoad runs runLoad for d and returns its stats and the real elapsed time.
func (b *bench) timedLoad(ctx context.Context, r *replica.Replica, em *entryMaker, workers int, rate float64, d time.Duration,
	onAck func(uint64, time.Time)) (*loadStats, time.Duration) {
	lctx, cancel := context.WithCancel(ctx)
	start := time.Now()
	c0 := b.cpuNow()
	st := runLoad(lctx, r, em, workers, rate, onAck)
	sleepCtx(ctx, d)
	cancel()
	elapsed := time.Since(start)
	st.cpu = b.cpuSince(c0)
	st.wait()
	return st, elapsed
}

// proposeRow turns a load run into a row.
func (b *bench) proposeRow(scenario string, conc int, st *loadStats, elapsed time.Duration) Result {
	n := float64(st.ok.Load())
	r := Result{
		System:      "roomlog",
		Servers:     b.cfg.servers,
		Scenario:    scenario,
		EntryBytes:  replicaEntryBytes,
		Concurrency: conc,
		EntriesPerS: round3(n / elapsed.Seconds()),
		MBPerS:      round3(n * replicaEntryBytes / elapsed.Seconds() / 1e6),
	}
	r.setLatency(&st.lat)
	r.setCPU(st.cpu)
	if e := st.errs.Load(); e > 0 {
		r.setExtra("errors", e)
		if err, ok := st.firstErr.Load().(error); ok {
			r.Note = fmt.Sprintf("%d errors, first: %v", e, err)
		}
	}
	if m := st.missed.Load(); m > 0 {
		r.setExtra("paced_slots_missed", m)
	}
	return r
}

// maxProposeRate measures Propose throughput of a lone primary (its own
// room, deleted afterwards) with 256 closed-loop proposers. It runs once per
// bench run; later callers reuse the figure.
func (b *bench) maxProposeRate(ctx context.Context, em *entryMaker) (float64, []Result, error) {
	if b.proposeMax > 0 {
		return b.proposeMax, nil, nil
	}
	m, room, err := b.lonePrimary(ctx, "max", noCheckpoints)
	if err != nil {
		return 0, nil, err
	}
	defer b.dropRoom(room)
	defer m.Close()
	d := max(b.cfg.duration/2, time.Second)
	b.prog.Logf("propose 256B x256 on a lone primary (closed loop, for the maximum rate): %v", d)
	b.timedLoad(ctx, m.r, em, 256, 0, d/4, nil) // warm-up
	st, el := b.timedLoad(ctx, m.r, em, 256, 0, d, nil)
	row := b.proposeRow("propose", 256, st, el)
	row.Note = "replica.Propose on a lone primary: committed in ZooKeeper and applied to Pebble"
	b.emit(row)
	if row.EntriesPerS <= 0 {
		return 0, []Result{row}, fmt.Errorf("no proposal succeeded while measuring the maximum rate")
	}
	b.proposeMax = row.EntriesPerS
	return b.proposeMax, []Result{row}, nil
}

// runLag measures how long after the primary acknowledges an entry a
// standby (another in-process replica, its own ZooKeeper session) has
// applied it, at half of the maximum Propose rate.
func runLag(ctx context.Context, b *bench) ([]Result, error) {
	em, err := newEntryMaker(replicaEntryBytes, 100_000)
	if err != nil {
		return nil, err
	}
	maxRate, out, err := b.maxProposeRate(ctx, em)
	if err != nil {
		return out, err
	}
	// Each member registers its metrics in a registry of its own: the row
	// reports how the standby's reader got its batches (listings, reads
	// ahead) against how many the primary wrote.
	var regs []*prometheus.Registry
	p, s, room, err := b.pair(ctx, "lag", func(c *replica.Config) {
		noCheckpoints(c)
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		c.Registerer = reg
	})
	if err != nil {
		return out, err
	}
	counters := func() map[string]float64 {
		got := map[string]float64{}
		for i, reg := range regs {
			who := [2]string{"primary", "standby"}[min(i, 1)]
			mfs, err := reg.Gather()
			if err != nil {
				continue
			}
			for _, mf := range mfs {
				switch mf.GetName() {
				case "roomlog_writer_batches_total", "roomlog_reader_batches_total",
					"roomlog_reader_listings_total", "roomlog_reader_catchup_reads_total":
					for _, m := range mf.GetMetric() {
						got[who+"_"+mf.GetName()] += m.GetCounter().GetValue()
					}
				}
			}
		}
		return got
	}
	defer b.dropRoom(room)
	defer s.Close()
	defer p.Close()
	rate := maxRate / 2
	label := fmt.Sprintf("lag at %s entries/s (half of max)", fmtRate(rate))
	b.prog.Logf("%s: %v", label, b.cfg.duration)

	// Sample at most ~2000 entries/s: each sample waits on the standby.
	every := max(1, int64(rate/2000))
	var mu sync.Mutex // guards lag
	var lag histogram
	var waiters sync.WaitGroup
	var n, censored atomic.Int64
	wctx, cancelWaiters := context.WithCancel(ctx)
	defer cancelWaiters()
	onAck := func(idx uint64, at time.Time) {
		if n.Add(1)%every != 0 {
			return
		}
		waiters.Add(1)
		go func() {
			defer waiters.Done()
			err := s.r.WaitApplied(wctx, idx)
			d := time.Since(at) // ~0 when the standby applied it before the ack
			if err != nil {
				// Not applied when the wait was cut: d is a lower bound.
				censored.Add(1)
			}
			mu.Lock()
			lag.Record(d)
			mu.Unlock()
		}()
	}
	stopLive := b.prog.Live(label, func() string {
		st := s.r.Status()
		return fmt.Sprintf("standby applied %d, lag %d entries", st.Applied, st.Lag)
	})
	appliedBefore := s.r.Status().Applied
	before := counters()
	st, el := b.timedLoad(ctx, p.r, em, 256, rate, b.cfg.duration, onAck)
	appliedDuring := s.r.Status().Applied - appliedBefore
	after := counters()
	stopLive()
	// Let the last samples land (bounded), then stop the rest.
	done := make(chan struct{})
	go func() { waiters.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		cancelWaiters()
		<-done
	}
	if ctx.Err() != nil {
		return out, ctx.Err()
	}
	row := b.proposeRow("lag", 256, st, el)
	proposeP99 := row.P99ms
	mu.Lock()
	row.setLatency(&lag)
	mu.Unlock()
	row.setExtra("max_rate", maxRate)
	row.setExtra("target_rate", round3(rate))
	row.setExtra("propose_p99_ms", proposeP99)
	row.setExtra("sample_every", every)
	row.setExtra("standby_lag_entries_at_end", s.r.Status().Lag)
	row.setExtra("standby_applied_per_s", round3(float64(appliedDuring)/el.Seconds()))
	for _, k := range []struct{ name, metric string }{
		{"primary_batches", "primary_roomlog_writer_batches_total"},
		{"standby_batches_read", "standby_roomlog_reader_batches_total"},
		{"standby_listings", "standby_roomlog_reader_listings_total"},
		{"standby_reads_ahead", "standby_roomlog_reader_catchup_reads_total"},
	} {
		row.setExtra(k.name, after[k.metric]-before[k.metric])
	}
	row.Note = "p50/p99/p999 = standby applied time - primary ack time; entries/s = achieved paced rate"
	if c := censored.Load(); c > 0 {
		row.setExtra("censored_samples", c)
		row.Note += fmt.Sprintf("; %d samples not applied 5 s after the run ended (counted at that time: the standby falls behind)", c)
	}
	b.emit(row)
	return append(out, row), nil
}

// checkpointRounds is how many (baseline, loaded) window pairs the
// checkpoint scenario alternates. One pair of 5 s windows put the p99
// ratio anywhere in 0.85-2.7x for the same code: the baseline's own p99
// moves 6-19 ms between windows (ZooKeeper's GC and fsyncs, the JIT), so
// a single baseline window decides the ratio. Alternating lets drift hit
// both alike, and each row pools its windows.
const checkpointRounds = 3

// runCheckpoint compares Propose latency at half the maximum rate without
// and with back-to-back checkpoints on the primary (each: rotate the
// channel, Pebble checkpoint, record it, delete the covered channels), in
// checkpointRounds alternated pairs of windows; each row pools its
// windows (latency histograms merged, entries/s over their summed time)
// and lists every window's p99 in extra.
func runCheckpoint(ctx context.Context, b *bench) ([]Result, error) {
	em, err := newEntryMaker(replicaEntryBytes, 100_000)
	if err != nil {
		return nil, err
	}
	maxRate, out, err := b.maxProposeRate(ctx, em)
	if err != nil {
		return out, err
	}
	p, s, room, err := b.pair(ctx, "ckpt", noCheckpoints)
	if err != nil {
		return out, err
	}
	defer b.dropRoom(room)
	defer s.Close()
	defer p.Close()
	rate := maxRate / 2

	var ckpts, ckptErrs atomic.Int64
	var ckptTime atomic.Int64
	// loaded runs one window with checkpoints taken back to back beside it.
	loaded := func() (*loadStats, time.Duration) {
		cctx, cancel := context.WithCancel(ctx)
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			for cctx.Err() == nil {
				t0 := time.Now()
				if err := p.r.Checkpoint(cctx); err != nil {
					if cctx.Err() == nil {
						ckptErrs.Add(1)
						b.log.Warn("checkpoint", "err", err)
						sleepCtx(cctx, 50*time.Millisecond)
					}
					continue
				}
				ckpts.Add(1)
				ckptTime.Add(int64(time.Since(t0)))
			}
		}()
		st, el := b.timedLoad(ctx, p.r, em, 256, rate, b.cfg.duration, nil)
		cancel()
		wg.Wait()
		return st, el
	}
	var pool [2]pooledLoad // 0: baseline, 1: with checkpoints
	chBefore := p.r.Status().OpenChannel
	for round := 1; round <= checkpointRounds; round++ {
		b.prog.Logf("checkpoint round %d/%d: baseline at %s entries/s, no checkpoints: %v", round, checkpointRounds, fmtRate(rate), b.cfg.duration)
		pool[0].add(b.timedLoad(ctx, p.r, em, 256, rate, b.cfg.duration, nil))
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		b.prog.Logf("checkpoint round %d/%d: same rate, checkpoints back to back: %v", round, checkpointRounds, b.cfg.duration)
		pool[1].add(loaded())
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		b.prog.Logf("  p99 %.2f ms without, %.2f ms with checkpoints", pool[0].p99s[round-1], pool[1].p99s[round-1])
	}
	base := pool[0].row(b, "checkpoint-base")
	base.Note = fmt.Sprintf("Propose at half max rate, no checkpoint (baseline of checkpoint-load; %d windows alternated with its)", checkpointRounds)
	b.emit(base)
	out = append(out, base)

	load := pool[1].row(b, "checkpoint-load")
	load.setExtra("checkpoints", ckpts.Load())
	if c := ckpts.Load(); c > 0 {
		load.setExtra("checkpoint_avg_ms", round3(ms(time.Duration(ckptTime.Load()/c))))
	}
	if e := ckptErrs.Load(); e > 0 {
		load.setExtra("checkpoint_errors", e)
	}
	load.setExtra("channels_opened", p.r.Status().OpenChannel-chBefore)
	load.setExtra("base_p99_ms", base.P99ms)
	if base.P99ms > 0 {
		load.setExtra("p99_ratio", round3(load.P99ms/base.P99ms))
	}
	load.Note = fmt.Sprintf("%d checkpoints (rotate + Pebble checkpoint + channel deletion) in %d windows alternated with the baseline's",
		ckpts.Load(), checkpointRounds)
	b.emit(load)
	return append(out, load), nil
}

// pooledLoad sums timed load windows into one row.
type pooledLoad struct {
	st      loadStats
	elapsed time.Duration
	cpu     cpuUse
	p99s    []float64 // each window's p99, ms
}

func (pl *pooledLoad) add(st *loadStats, el time.Duration) {
	pl.st.lat.Merge(&st.lat)
	pl.st.ok.Add(st.ok.Load())
	pl.st.missed.Add(st.missed.Load())
	if e := st.errs.Load(); e > 0 {
		if v := st.firstErr.Load(); pl.st.errs.Add(e) == e && v != nil {
			pl.st.firstErr.Store(v)
		}
	}
	// CPU shares weighted by each window's time.
	w := el.Seconds()
	tot := pl.elapsed.Seconds() + w
	mix := func(a, b float64) float64 { return (a*pl.elapsed.Seconds() + b*w) / tot }
	pl.cpu = cpuUse{ZooKeeper: mix(pl.cpu.ZooKeeper, st.cpu.ZooKeeper), Bench: mix(pl.cpu.Bench, st.cpu.Bench),
		Machine: mix(pl.cpu.Machine, st.cpu.Machine), Others: mix(pl.cpu.Others, st.cpu.Others)}
	pl.elapsed += el
	pl.p99s = append(pl.p99s, round3(ms(st.lat.Quantile(0.99))))
}

func (pl *pooledLoad) row(b *bench, scenario string) Result {
	pl.st.cpu = pl.cpu
	r := b.proposeRow(scenario, 256, &pl.st, pl.elapsed)
	r.setExtra("window_p99_ms", pl.p99s)
	return r
}

// runRequests measures what request ids cost: closed-loop Propose and
// ProposeRequest (a fresh id per call: envelope, table lookup, record and
// expiry in the apply batch) at 256 proposers on one lone primary,
// alternated plain/ids/plain/ids so drift hits both alike.
func runRequests(ctx context.Context, b *bench) ([]Result, error) {
	em, err := newEntryMaker(replicaEntryBytes, 100_000)
	if err != nil {
		return nil, err
	}
	m, room, err := b.lonePrimary(ctx, "req", noCheckpoints)
	if err != nil {
		return nil, err
	}
	defer b.dropRoom(room)
	defer m.Close()
	d := max(b.cfg.duration/2, time.Second)
	b.timedLoad(ctx, m.r, em, 256, 0, d/4, nil) // warm-up
	var out []Result
	var sum [2]float64
	for round := 0; round < 2; round++ {
		for _, ids := range []bool{false, true} {
			em.ids = ids
			name := "requests-plain"
			if ids {
				name = "requests-ids"
			}
			b.prog.Logf("%s 256B x256 (round %d): %v", name, round+1, d)
			st, el := b.timedLoad(ctx, m.r, em, 256, 0, d, nil)
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			row := b.proposeRow(name, 256, st, el)
			row.Note = "replica.Propose on a lone primary"
			if ids {
				row.Note = "replica.ProposeRequest, a fresh request id per call, same primary"
				sum[1] += row.EntriesPerS
			} else {
				sum[0] += row.EntriesPerS
			}
			if round == 1 && ids && sum[0] > 0 {
				row.setExtra("ids_vs_plain", round3(sum[1]/sum[0]))
			}
			b.emit(row)
			out = append(out, row)
		}
	}
	em.ids = false
	n, err := m.r.Store().RequestTableLen()
	if err == nil {
		b.prog.Logf("requests: %d records in the table at the end", n)
	}
	return out, nil
}

// runMetrics measures what Prometheus metrics cost: closed-loop Propose at
// 256 proposers on a lone primary without a Registerer and on one with
// (replica, writer, reader and room collectors registered, scraped every
// second as a Prometheus server would), alternated off/on/off/on.
func runMetrics(ctx context.Context, b *bench) ([]Result, error) {
	em, err := newEntryMaker(replicaEntryBytes, 100_000)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	off, roomOff, err := b.lonePrimary(ctx, "metrics-off", noCheckpoints)
	if err != nil {
		return nil, err
	}
	defer b.dropRoom(roomOff)
	defer off.Close()
	on, roomOn, err := b.lonePrimary(ctx, "metrics-on", func(c *replica.Config) {
		noCheckpoints(c)
		c.Registerer = reg
	})
	if err != nil {
		return nil, err
	}
	defer b.dropRoom(roomOn)
	defer on.Close()
	sctx, stopScrape := context.WithCancel(ctx)
	defer stopScrape()
	var scrapes atomic.Int64
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-sctx.Done():
				return
			case <-t.C:
				if _, err := reg.Gather(); err == nil {
					scrapes.Add(1)
				}
			}
		}
	}()
	d := max(b.cfg.duration/2, time.Second)
	b.timedLoad(ctx, off.r, em, 256, 0, d/4, nil) // warm-up
	b.timedLoad(ctx, on.r, em, 256, 0, d/4, nil)
	var out []Result
	var sum [2]float64
	for round := 0; round < 2; round++ {
		for i, m := range []*member{off, on} {
			name := []string{"metrics-off", "metrics-on"}[i]
			b.prog.Logf("%s 256B x256 (round %d): %v", name, round+1, d)
			st, el := b.timedLoad(ctx, m.r, em, 256, 0, d, nil)
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			row := b.proposeRow(name, 256, st, el)
			row.Note = "replica.Propose on a lone primary without a Registerer"
			if i == 1 {
				row.Note = "replica.Propose on a lone primary with Config.Registerer, gathered every second"
			}
			sum[i] += row.EntriesPerS
			if round == 1 && i == 1 && sum[0] > 0 {
				row.setExtra("on_vs_off", round3(sum[1]/sum[0]))
				row.setExtra("scrapes", scrapes.Load())
			}
			b.emit(row)
			out = append(out, row)
		}
	}
	return out, nil
}

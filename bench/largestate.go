package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"math"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
)

// Large-state row (issue 31): sizes and shares.
const (
	defaultLargeBytes = 10 << 30
	minLargeBytes     = 64 << 20
	// largeProbeBytes is the disk probe's file (smaller with a small state).
	largeProbeBytes = 2 << 30
	// largeChangeShare is the part of the state the primary writes anew
	// while the standby is down (new keys, a range of their own).
	largeChangeShare = 0.01
	// largeBacklogShare is the part of the state written as log entries
	// while the standby bootstraps (its catch-up backlog), within
	// [largeBacklogMin, largeBacklogMax] entries.
	largeBacklogShare = 0.0025
	largeBacklogMin   = 20_000
	largeBacklogMax   = 200_000
	// largeIngestFileBytes is the size of the ingested sstables.
	largeIngestFileBytes = 64 << 20
	// largeChangeEntryBytes: each change entry packs new files' records up
	// to about this size.
	largeChangeEntryBytes = 4096
)

// optInScenario reports whether a scenario runs only when named in
// -scenarios ("all" leaves it out): large-state needs tens of GB of disk
// and several minutes.
func optInScenario(name string) bool { return name == "large-state" }

// byteSize is a flag value in bytes with an optional KiB/MiB/GiB/TiB
// (or K/M/G/T, powers of 1024) suffix.
type byteSize int64

func (b *byteSize) String() string { return fmtSize(int64(*b)) }

func (b *byteSize) Set(s string) error {
	v, err := parseSize(s)
	if err != nil {
		return err
	}
	*b = byteSize(v)
	return nil
}

func parseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"TiB", 1 << 40}, {"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"T", 1 << 40}, {"G", 1 << 30}, {"M", 1 << 20}, {"K", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSuffix(t, u.suffix), u.mult
			break
		}
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(t), 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("size %q: want a number with an optional KiB, MiB, GiB or TiB suffix", s)
	}
	return int64(f * float64(mult)), nil
}

func fmtSize(n int64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%dGiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	default:
		return strconv.FormatInt(n, 10)
	}
}

// runLargeState is the large-state row (issue 31, item 5). In the run's
// temp dir: a disk probe (sequential writes with one fsync at the end, by
// one writer and by four, then a sequential read of the first file with
// its pages dropped from the page cache); a primary whose store is filled to -large-bytes by
// store.IngestSorted with namespace records (HDFS-like paths, msgpack
// inodes with random block ids), reopened (open time, memory) and
// checkpointed; a standby on an empty disk that bootstraps from it while
// the primary writes a backlog, then catches up; the standby closed, ~1 %
// of the state written anew (new files in new directories: a key range of
// their own), a checkpoint that lets the primary delete the channels the
// standby would need, and the standby reopened on its old data dir: its
// incremental re-bootstrap (bytes fetched over the checkpoint's bytes).
func runLargeState(ctx context.Context, b *bench) ([]Result, error) {
	large := b.cfg.largeBytes
	if large < minLargeBytes {
		return nil, fmt.Errorf("large-state: -large-bytes %s: must be >= %s", fmtSize(large), fmtSize(minLargeBytes))
	}
	probe := min(int64(largeProbeBytes), large)
	// Primary store + standby's fetched checkpoint (its restored store
	// and the primary's checkpoints are hard links), the probe files,
	// WAL and compaction headroom.
	need := large*22/10 + 2*probe + 2<<30
	free, err := freeBytes(b.tmp)
	if err != nil {
		return nil, fmt.Errorf("large-state: %w", err)
	}
	if free < need {
		return nil, fmt.Errorf("large-state: refusing to start: %s holds %.1f GB free, a %s state needs about %.1f GB (primary store, standby checkpoint, a %s disk probe, headroom); pass a smaller -large-bytes",
			b.tmp, float64(free)/1e9, fmtSize(large), float64(need)/1e9, fmtSize(probe))
	}
	b.prog.Logf("large-state: %s of state; %.1f GB free in %s (need about %.1f GB)", fmtSize(large), float64(free)/1e9, b.tmp, float64(need)/1e9)
	r := Result{System: "roomlog", Servers: b.cfg.servers, Scenario: "large-state"}
	c0 := b.cpuNow()

	// a. Disk probe.
	pr, err := diskProbe(ctx, b, probe)
	if err != nil {
		return nil, fmt.Errorf("large-state: disk probe: %w", err)
	}
	wMBps := pr.write
	r.setExtra("disk_probe_bytes", probe)
	r.setExtra("disk_write_mb_per_s", round3(pr.write))
	r.setExtra("disk_write_1_writer_mb_per_s", round3(pr.writeSingle))
	r.setExtra("disk_write_4_writers_mb_per_s", round3(pr.writeParallel))
	r.setExtra("disk_read_mb_per_s", round3(pr.read))
	r.setExtra("disk_read_cold", pr.cold)

	// b. A primary with the state.
	room := fmt.Sprintf("bench-large-%d", time.Now().UnixNano())
	defer b.dropRoom(room)
	defer func() { _ = os.RemoveAll(filepath.Join(b.tmp, room)) }()
	p, err := b.openMember(ctx, room, "p", nil)
	if err != nil {
		return nil, err
	}
	pOpen := true
	defer func() {
		if pOpen {
			p.Close()
		}
	}()
	if err := waitFor(ctx, 30*time.Second, "a primary", func() bool { return p.r.Status().Role == replica.RolePrimary }); err != nil {
		return nil, fmt.Errorf("large-state: %w", err)
	}
	for i := range 10 {
		e, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: fmt.Appendf(nil, "/.bench/seed-%02d", i), Value: []byte("seed")}})
		if err != nil {
			return nil, err
		}
		if _, err := p.r.Propose(ctx, e); err != nil {
			return nil, fmt.Errorf("large-state: seed entries: %w", err)
		}
	}
	p.Close()
	pOpen = false
	ist, ingestTime, err := fillLarge(ctx, b, filepath.Join(p.dir, "store"), large)
	if err != nil {
		return nil, fmt.Errorf("large-state: ingest: %w", err)
	}
	// Checkpoints taken before the ingest hold the same index without
	// the ingested keys (store package doc, "Bulk ingest").
	if err := os.RemoveAll(filepath.Join(p.dir, "checkpoints")); err != nil {
		return nil, err
	}
	r.setExtra("ingest_s", round3(ingestTime.Seconds()))
	r.setExtra("ingest_keys", ist.Keys)
	r.setExtra("ingest_logical_bytes", ist.KeyBytes+ist.ValueBytes)
	r.setExtra("ingest_file_bytes", ist.FileBytes)
	r.setExtra("ingest_files", ist.Files)

	runtime.GC()
	rss0 := rssBytes()
	t0 := time.Now()
	p, err = b.openMember(ctx, room, "p", nil)
	if err != nil {
		return nil, fmt.Errorf("large-state: reopen the primary: %w", err)
	}
	pOpen = true
	if err := waitFor(ctx, 5*time.Minute, "the reopened primary leads", func() bool { return p.r.Status().Role == replica.RolePrimary }); err != nil {
		return nil, fmt.Errorf("large-state: %w", err)
	}
	openTime := time.Since(t0)
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	rss1 := rssBytes()
	r.setExtra("open_s", round3(openTime.Seconds()))
	r.setExtra("open_rss_mb", round3(float64(rss1)/1e6))
	r.setExtra("open_rss_delta_mb", round3(float64(rss1-rss0)/1e6))
	r.setExtra("open_go_heap_mb", round3(float64(ms.HeapAlloc)/1e6))
	stateBytes := dirBytes(filepath.Join(p.dir, "store"))
	r.setExtra("state_bytes", stateBytes)
	b.prog.Logf("  reopened in %v (store %.2f GB, process RSS %.0f MB, +%.0f MB; Go heap %.0f MB); checkpoint",
		openTime.Round(time.Millisecond), float64(stateBytes)/1e9, float64(rss1)/1e6, float64(rss1-rss0)/1e6, float64(ms.HeapAlloc)/1e6)

	t0 = time.Now()
	if err := p.r.Checkpoint(ctx); err != nil {
		return nil, fmt.Errorf("large-state: checkpoint: %w", err)
	}
	ckptTime := time.Since(t0)
	r.setExtra("checkpoint_create_s", round3(ckptTime.Seconds()))
	if err := waitFor(ctx, 60*time.Second, "channel 1 deleted", func() bool {
		chs, err := p.r.Room().Channels(ctx)
		return err == nil && len(chs) > 0 && chs[0].FirstIndex > 1
	}); err != nil {
		return nil, fmt.Errorf("large-state: %w", err)
	}
	info, err := checkpoint.Newest(filepath.Join(p.dir, "checkpoints"))
	if err != nil {
		return nil, fmt.Errorf("large-state: %w", err)
	}
	r.setExtra("checkpoint_bytes", info.Bytes)
	r.setExtra("checkpoint_files", len(info.Manifest.Files))
	b.prog.Logf("  checkpoint of %.2f GB (%d files) in %v", float64(info.Bytes)/1e9, len(info.Manifest.Files), ckptTime.Round(time.Millisecond))

	// c. A standby on an empty disk bootstraps while the primary writes
	// its backlog; then it catches up.
	zoe := newNSGen([]string{"zoe"}, 0, 0xb0c)
	backlog := int64(float64(large) * largeBacklogShare / 300)
	backlog = min(max(backlog, largeBacklogMin), largeBacklogMax)
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	var backlogDone atomic.Int64 // unix nanos when the backlog was written
	var backlogErr error
	var backlogN atomic.Int64
	var loadWG sync.WaitGroup
	loadWG.Add(1)
	go func() {
		defer loadWG.Done()
		_, _, backlogErr = proposeAll(lctx, p.r, 256, &backlogN, func() ([]byte, bool) {
			if backlogN.Load() >= backlog {
				return nil, false
			}
			return zoe.entry(1), true
		})
		backlogDone.Store(time.Now().UnixNano())
	}()
	b.prog.Logf("large-state: a standby on an empty disk bootstraps %.2f GB; the primary writes a backlog of %d entries meanwhile", float64(info.Bytes)/1e9, backlog)
	tOpen := time.Now()
	s, err := b.openMember(ctx, room, "s", nil)
	if err != nil {
		return nil, err
	}
	sOpen := true
	defer func() {
		if sOpen {
			s.Close()
		}
	}()
	stopLive := b.prog.Live("bootstrap", func() string {
		st := s.r.Status()
		return fmt.Sprintf("bootstraps %d, applied %d, backlog written %d/%d", st.Bootstraps, st.Applied, backlogN.Load(), backlog)
	})
	err = waitFor(ctx, 30*time.Minute, "the standby's bootstrap", func() bool { return s.r.Status().Bootstraps >= 1 })
	stopLive()
	if err != nil {
		return nil, fmt.Errorf("large-state: %w (standby: %v)", err, s.r.Status().TailErr)
	}
	booted := time.Now()
	bootE2E := booted.Sub(tOpen)
	lb := s.r.Status().LastBootstrap
	if lb == nil {
		return nil, errors.New("large-state: the standby bootstrapped but reports no LastBootstrap")
	}
	// The backlog: wait until it is written (it usually is by now).
	loadWG.Wait()
	if backlogErr != nil {
		return nil, fmt.Errorf("large-state: backlog: %w", backlogErr)
	}
	catchFrom := booted
	if d := time.Unix(0, backlogDone.Load()); d.After(catchFrom) {
		catchFrom = d
	}
	from := s.r.Status().Applied
	if catchFrom == booted {
		from = lb.Index
	}
	target := p.r.Status().Applied
	if err := waitFor(ctx, 10*time.Minute, "the standby catches up", func() bool { return s.r.Status().Applied >= target }); err != nil {
		return nil, fmt.Errorf("large-state: %w", err)
	}
	catchTime := time.Since(catchFrom)
	caughtUp := time.Since(tOpen)
	fs := lb.Fetch
	bootMBps := float64(lb.Bytes) / lb.Took.Seconds() / 1e6
	r.MBPerS = round3(bootMBps)
	r.setExtra("bootstrap_mb_per_s", round3(bootMBps))
	r.setExtra("bootstrap_s", round3(lb.Took.Seconds()))
	r.setExtra("bootstrap_open_to_restored_s", round3(bootE2E.Seconds()))
	r.setExtra("bootstrap_end_to_end_mb_per_s", round3(float64(lb.Bytes)/bootE2E.Seconds()/1e6))
	r.setExtra("bootstrap_bytes", lb.Bytes)
	r.setExtra("bootstrap_fetched_bytes", fs.FetchedBytes)
	r.setExtra("bootstrap_manifest_s", round3(fs.Manifest.Seconds()))
	r.setExtra("bootstrap_local_match_s", round3(fs.LocalMatch.Seconds()))
	r.setExtra("bootstrap_transfer_s", round3(fs.Transfer.Seconds()))
	r.setExtra("bootstrap_final_s", round3(fs.Final.Seconds()))
	r.setExtra("bootstrap_install_s", round3((lb.Took - fs.Manifest - fs.LocalMatch - fs.Transfer - fs.Final).Seconds()))
	if fs.Transfer > 0 {
		r.setExtra("bootstrap_transfer_mb_per_s", round3(float64(fs.FetchedBytes)/fs.Transfer.Seconds()/1e6))
	}
	catchRate := float64(target-from) / catchTime.Seconds()
	r.EntriesPerS = round3(catchRate)
	r.setExtra("catchup_entries_per_s", round3(catchRate))
	r.setExtra("catchup_entries", target-from)
	r.setExtra("catchup_s", round3(catchTime.Seconds()))
	r.setExtra("backlog_entries", backlogN.Load())
	r.setExtra("backlog_entry_bytes", zoe.lastEntryBytes)
	r.setExtra("open_to_caught_up_s", round3(caughtUp.Seconds()))
	b.prog.Logf("  bootstrapped %.2f GB in %v (%.1f MB/s; transfer %v, final %v); caught up %d entries in %v (%s entries/s)",
		float64(lb.Bytes)/1e9, lb.Took.Round(time.Millisecond), bootMBps, fs.Transfer.Round(time.Millisecond), fs.Final.Round(time.Millisecond),
		target-from, catchTime.Round(time.Millisecond), fmtRate(catchRate))
	if err := sameHash(ctx, p.r, s.r); err != nil {
		return nil, fmt.Errorf("large-state: after the bootstrap: %w", err)
	}

	// d. The standby goes away; 1 % of the state changes; re-bootstrap.
	sApplied := s.r.Status().Applied
	s.Close()
	sOpen = false
	changeBytes := int64(float64(stateBytes) * largeChangeShare)
	b.prog.Logf("large-state: standby closed at %d; the primary writes %.1f MB of new files (new directories: keys after every existing one)", sApplied, float64(changeBytes)/1e6)
	var written, changeN atomic.Int64
	t0 = time.Now()
	stopLive = b.prog.Live("change", func() string {
		return fmt.Sprintf("%.1f/%.1f MB", float64(written.Load())/1e6, float64(changeBytes)/1e6)
	})
	_, _, err = proposeAll(ctx, p.r, 32, &changeN, func() ([]byte, bool) {
		if written.Load() >= changeBytes {
			return nil, false
		}
		e := zoe.entry(largeChangeEntryBytes)
		written.Add(int64(len(e)))
		return e, true
	})
	stopLive()
	if err != nil {
		return nil, fmt.Errorf("large-state: change: %w", err)
	}
	changeTime := time.Since(t0)
	r.setExtra("change_bytes", written.Load())
	r.setExtra("change_entries", changeN.Load())
	r.setExtra("change_s", round3(changeTime.Seconds()))
	if err := p.r.Checkpoint(ctx); err != nil {
		return nil, fmt.Errorf("large-state: second checkpoint: %w", err)
	}
	if err := waitFor(ctx, 60*time.Second, "the standby's channels deleted", func() bool {
		chs, err := p.r.Room().Channels(ctx)
		return err == nil && len(chs) > 0 && chs[0].FirstIndex > sApplied+1
	}); err != nil {
		return nil, fmt.Errorf("large-state: %w", err)
	}
	info2, err := checkpoint.Newest(filepath.Join(p.dir, "checkpoints"))
	if err != nil {
		return nil, fmt.Errorf("large-state: %w", err)
	}
	b.prog.Logf("  %d entries in %v; checkpoint at %d (%.2f GB); the standby reopens on its old data dir", changeN.Load(), changeTime.Round(time.Millisecond), info2.Manifest.Index, float64(info2.Bytes)/1e9)
	tOpen = time.Now()
	s, err = b.openMember(ctx, room, "s", nil)
	if err != nil {
		return nil, fmt.Errorf("large-state: reopen the standby: %w", err)
	}
	sOpen = true
	if err := waitFor(ctx, 30*time.Minute, "the standby's re-bootstrap", func() bool { return s.r.Status().Bootstraps >= 1 }); err != nil {
		return nil, fmt.Errorf("large-state: %w (standby: %v)", err, s.r.Status().TailErr)
	}
	reE2E := time.Since(tOpen)
	lb2 := s.r.Status().LastBootstrap
	if lb2 == nil {
		return nil, errors.New("large-state: the standby re-bootstrapped but reports no LastBootstrap")
	}
	fs2 := lb2.Fetch
	sent := float64(fs2.FetchedBytes) / float64(lb2.Bytes)
	r.setExtra("rebootstrap_sent_fraction", math.Round(sent*1e5)/1e5)
	r.setExtra("rebootstrap_s", round3(lb2.Took.Seconds()))
	r.setExtra("rebootstrap_open_to_restored_s", round3(reE2E.Seconds()))
	r.setExtra("rebootstrap_bytes", lb2.Bytes)
	r.setExtra("rebootstrap_fetched_bytes", fs2.FetchedBytes)
	r.setExtra("rebootstrap_fetched_files", fs2.FetchedFiles)
	r.setExtra("rebootstrap_linked_local_bytes", fs2.LinkedLocalBytes)
	r.setExtra("rebootstrap_linked_known_bytes", fs2.LinkedKnownBytes)
	r.setExtra("rebootstrap_resumed_bytes", fs2.ResumedBytes)
	r.setExtra("rebootstrap_rejected", fs2.Rejected)
	r.setExtra("rebootstrap_local_match_s", round3(fs2.LocalMatch.Seconds()))
	r.setExtra("rebootstrap_transfer_s", round3(fs2.Transfer.Seconds()))
	r.setExtra("rebootstrap_final_s", round3(fs2.Final.Seconds()))
	b.prog.Logf("  re-bootstrapped in %v: fetched %.1f MB of %.2f GB (%.2f %%), linked %.2f GB from its store and %.2f GB from its checkpoints",
		lb2.Took.Round(time.Millisecond), float64(fs2.FetchedBytes)/1e6, float64(lb2.Bytes)/1e9, sent*100,
		float64(fs2.LinkedLocalBytes)/1e9, float64(fs2.LinkedKnownBytes)/1e9)
	target = p.r.Status().Applied
	if err := waitFor(ctx, 10*time.Minute, "the standby catches up again", func() bool { return s.r.Status().Applied >= target }); err != nil {
		return nil, fmt.Errorf("large-state: %w", err)
	}
	if err := sameHash(ctx, p.r, s.r); err != nil {
		return nil, fmt.Errorf("large-state: after the re-bootstrap: %w", err)
	}

	// e. Targets.
	r.setCPU(b.cpuSince(c0))
	bootShare := bootMBps / wMBps
	r.setExtra("bootstrap_vs_disk_write", round3(bootShare))
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		return "MISSED"
	}
	r.Note = fmt.Sprintf("%.2f GB state (%.2f GB checkpoint): full bootstrap %.0f MB/s = %.0f %% of the disk's %.0f MB/s sequential write (target >= 70 %%: %s); "+
		"re-bootstrap after %.1f MB of new files in new directories (a key range of their own) sent %.2f %% of the checkpoint (target <= 3 %%: %s) in %v; "+
		"open %v, checkpoint %v, catch-up %s entries/s",
		float64(stateBytes)/1e9, float64(lb.Bytes)/1e9, bootMBps, bootShare*100, wMBps, verdict(bootShare >= 0.7),
		float64(written.Load())/1e6, sent*100, verdict(sent <= 0.03), lb2.Took.Round(time.Millisecond),
		openTime.Round(time.Millisecond), ckptTime.Round(time.Millisecond), fmtRate(catchRate))
	b.emit(r)
	return []Result{r}, nil
}

// sameHash waits until both members publish a running hash at one index
// (the primary is idle) and checks they are equal.
func sameHash(ctx context.Context, a, c *replica.Replica) error {
	var sa, sc replica.Status
	err := waitFor(ctx, 30*time.Second, "both members' running hash at one index", func() bool {
		sa, sc = a.Status(), c.Status()
		return sa.HashIndex > 0 && sa.HashIndex == sc.HashIndex
	})
	if err != nil {
		return err
	}
	if sa.Hash != sc.Hash || sa.HashBase != sc.HashBase {
		return fmt.Errorf("running hashes differ at %d: %s (base %d) vs %s (base %d)", sa.HashIndex, sa.Hash, sa.HashBase, sc.Hash, sc.HashBase)
	}
	return nil
}

// diskProbe measures the disk in the run's temp dir: size bytes written
// sequentially by one writer (4 MiB writes, one fsync at the end, timed
// together), then by 4 writers at once into files of size/4 (each with
// one fsync at the end: the checkpoint fetch's default parallelism), the
// better of the two being the write figure; then the single file read
// back sequentially after its pages were dropped from the page cache.
// The files are removed.
func diskProbe(ctx context.Context, b *bench, size int64) (pr diskProbeResult, err error) {
	b.prog.Logf("large-state: disk probe, %s sequential write + fsync by 1 writer, then by 4, then a read", fmtSize(size))
	dir, err := os.MkdirTemp(b.tmp, "disk-probe-")
	if err != nil {
		return pr, err
	}
	defer os.RemoveAll(dir)
	single := filepath.Join(dir, "single")
	t0 := time.Now()
	if err := probeWrite(ctx, single, size); err != nil {
		return pr, err
	}
	pr.writeSingle = float64(size) / time.Since(t0).Seconds() / 1e6
	const writers = 4
	errs := make([]error, writers)
	var wg sync.WaitGroup
	t0 = time.Now()
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = probeWrite(ctx, filepath.Join(dir, fmt.Sprintf("par-%d", i)), size/writers)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return pr, err
	}
	pr.writeParallel = float64(size/writers*writers) / time.Since(t0).Seconds() / 1e6
	pr.write = max(pr.writeSingle, pr.writeParallel)

	f, err := os.Open(single)
	if err != nil {
		return pr, err
	}
	defer f.Close()
	pr.cold = dropFileCache(f)
	buf := make([]byte, 4<<20)
	t1 := time.Now()
	n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
	if err != nil {
		return pr, err
	}
	pr.read = float64(n) / time.Since(t1).Seconds() / 1e6
	b.prog.Logf("  write %.0f MB/s by 1 writer, %.0f MB/s by %d; read %.0f MB/s (page cache dropped for the file: %v)",
		pr.writeSingle, pr.writeParallel, writers, pr.read, pr.cold)
	return pr, nil
}

// diskProbeResult is what diskProbe measured, in MB/s.
type diskProbeResult struct {
	write, writeSingle, writeParallel, read float64
	cold                                    bool // the read's file was dropped from the page cache first
}

// probeWrite writes size bytes into a new file at path in 4 MiB writes
// of random data, fsyncs and closes it.
func probeWrite(ctx context.Context, path string, size int64) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	buf := make([]byte, 4<<20)
	_, _ = rand.Read(buf)
	for n := int64(0); n < size; n += int64(len(buf)) {
		if err := ctx.Err(); err != nil {
			f.Close()
			return err
		}
		buf[0]++ // every block differs
		if _, err := f.Write(buf[:min(int64(len(buf)), size-n)]); err != nil {
			f.Close()
			return err
		}
	}
	return errors.Join(f.Sync(), f.Close())
}

// fillLarge ingests namespace records into the (closed) store at dir
// until its sstables hold about target bytes on disk, in rounds of at most
// 2 GiB of records (each round its own IngestSorted call, keys continuing).
// Records are generated on one goroutine and written on another.
func fillLarge(ctx context.Context, b *bench, dir string, target int64) (store.IngestStats, time.Duration, error) {
	var total store.IngestStats
	st, err := store.Open(dir, &store.Options{Logger: b.log})
	if err != nil {
		return total, 0, err
	}
	defer st.Close()
	// About 200 logical bytes a record: spread over 8 users x 6 projects.
	estPairs := target / 120 // compression and headroom: never run short
	gen := newNSGen(demoUsers, estPairs, 0x1a2e)
	gctx, stop := context.WithCancel(ctx)
	defer stop()
	chunks := make(chan *pairChunk, 4)
	go func() {
		defer close(chunks)
		for {
			c := gen.chunk()
			select {
			case chunks <- c:
			case <-gctx.Done():
				return
			}
			if len(c.pairs) == 0 {
				return
			}
		}
	}()
	var cur *pairChunk
	pos := 0
	ratio := 1.0 // file bytes per logical byte, learnt from the rounds
	t0 := time.Now()
	stopLive := b.prog.Live("ingest", func() string {
		return fmt.Sprintf("%.2f/%.2f GB on disk", float64(total.FileBytes)/1e9, float64(target)/1e9)
	})
	defer stopLive()
	for total.FileBytes < target*99/100 {
		budget := min(int64(float64(target-total.FileBytes)/ratio), 2<<30)
		var used int64
		next := func() ([]byte, []byte, bool) {
			if used >= budget {
				return nil, nil, false
			}
			if cur == nil || pos == len(cur.pairs) {
				c, ok := <-chunks
				if !ok || len(c.pairs) == 0 {
					return nil, nil, false
				}
				cur, pos = c, 0
			}
			kv := cur.pairs[pos]
			pos++
			used += int64(len(kv[0]) + len(kv[1]))
			return kv[0], kv[1], true
		}
		rs, err := store.IngestSorted(ctx, st, next, largeIngestFileBytes)
		if err != nil {
			return total, time.Since(t0), err
		}
		if rs.Keys == 0 {
			return total, time.Since(t0), fmt.Errorf("the record generator ran out at %.2f GB", float64(total.FileBytes)/1e9)
		}
		total.Keys += rs.Keys
		total.KeyBytes += rs.KeyBytes
		total.ValueBytes += rs.ValueBytes
		total.Files += rs.Files
		total.FileBytes += rs.FileBytes
		total.Write += rs.Write
		total.Ingest += rs.Ingest
		ratio = float64(total.FileBytes) / float64(total.KeyBytes+total.ValueBytes)
	}
	took := time.Since(t0)
	stopLive()
	b.prog.Logf("  ingested %d records (%.2f GB of keys and values, %.2f GB in %d sstables) in %v",
		total.Keys, float64(total.KeyBytes+total.ValueBytes)/1e9, float64(total.FileBytes)/1e9, total.Files, took.Round(time.Millisecond))
	return total, took, st.Close()
}

// proposeAll proposes next's entries on r from workers goroutines until
// next says no more; ErrQueueFull and ErrRoomFull are retried. n counts
// acknowledged entries.
func proposeAll(ctx context.Context, r *replica.Replica, workers int, n *atomic.Int64, next func() ([]byte, bool)) (int64, int64, error) {
	var mu sync.Mutex // guards next
	var bytesOK atomic.Int64
	var firstErr error
	var errOnce sync.Once
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				mu.Lock()
				e, ok := next()
				mu.Unlock()
				if !ok {
					return
				}
				for {
					_, err := r.Propose(ctx, e)
					if err == nil {
						n.Add(1)
						bytesOK.Add(int64(len(e)))
						break
					}
					if ctx.Err() != nil {
						return
					}
					if errors.Is(err, replica.ErrQueueFull) || errors.Is(err, logroom.ErrRoomFull) {
						sleepCtx(ctx, 5*time.Millisecond)
						continue
					}
					errOnce.Do(func() { firstErr = err; cancel() })
					return
				}
			}
		}()
	}
	wg.Wait()
	if firstErr == nil && ctx.Err() != nil {
		firstErr = ctx.Err()
	}
	return n.Load(), bytesOK.Load(), firstErr
}

// nsGen generates a DFS namespace in key order: for each user and project
// (sorted), job output directories by day,
// /user/<user>/<project>/output/dt=<day>/job-<n>, each followed by its
// part files, .../job-<n>/part-<k>. Values are msgpack inode records: a
// directory's owner, group, mode and time; a file's replication, block
// size, length, times and blocks (1 to 16: random 64-bit block ids, lengths,
// generation stamps), so they compress only in part.
type nsGen struct {
	rng            *mrand.Rand
	users, projs   []string
	perUP          int64 // records per user and project (0: unbounded, one project)
	jobsPerDay     int
	u, p           int
	inUP           int64
	job, jobInUP   int
	parts, part    int // parts of the current job; the next part (-1: the directory)
	day            string
	stamp          int64
	buf            bytes.Buffer
	enc            *msgpack.Encoder
	done           bool
	lastEntryBytes int
}

func newNSGen(users []string, pairs int64, seed uint64) *nsGen {
	projs := append([]string(nil), demoProjects...)
	slices.Sort(projs)
	g := &nsGen{rng: mrand.New(mrand.NewPCG(seed, 0x5eed)), users: append([]string(nil), users...), projs: projs,
		stamp: time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli(), part: 0, jobsPerDay: 40}
	slices.Sort(g.users)
	if pairs > 0 {
		g.perUP = pairs/int64(len(g.users)*len(projs)) + 1
		g.jobsPerDay = int(max(1, g.perUP/(35*365)))
	}
	g.enc = msgpack.NewEncoder(&g.buf)
	return g
}

// next appends the next record's key and value to dst and returns the
// key's and value's bounds in it; ok false once the namespace is full.
func (g *nsGen) next(dst []byte) (out []byte, kEnd int, ok bool) {
	if g.done {
		return dst, 0, false
	}
	if g.part >= g.parts { // a new job
		if g.perUP > 0 && g.inUP >= g.perUP {
			g.inUP, g.jobInUP = 0, 0
			if g.p++; g.p == len(g.projs) {
				g.p = 0
				if g.u++; g.u == len(g.users) {
					g.done = true
					return dst, 0, false
				}
			}
		}
		g.job++
		g.jobInUP++
		g.day = time.UnixMilli(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).UnixMilli() + int64(g.jobInUP/g.jobsPerDay)*86_400_000).UTC().Format("2006-01-02")
		g.parts = 4 + g.rng.IntN(60)
		g.part = -1
	}
	user, proj := g.users[g.u], g.projs[g.p]
	start := len(dst)
	dst = append(dst, "/user/"...)
	dst = append(dst, user...)
	dst = append(dst, '/')
	dst = append(dst, proj...)
	dst = append(dst, "/output/dt="...)
	dst = append(dst, g.day...)
	dst = append(dst, "/job-"...)
	dst = appendPadded(dst, g.job, 7)
	g.stamp += int64(g.rng.IntN(2000))
	g.buf.Reset()
	e := g.enc
	if g.part < 0 {
		_ = e.EncodeMapLen(5)
		_ = e.EncodeString("t")
		_ = e.EncodeString("d")
		_ = e.EncodeString("own")
		_ = e.EncodeString(user)
		_ = e.EncodeString("grp")
		_ = e.EncodeString(proj)
		_ = e.EncodeString("perm")
		_ = e.EncodeUint(0o755)
		_ = e.EncodeString("mt")
		_ = e.EncodeInt(g.stamp)
	} else {
		dst = append(dst, "/part-"...)
		dst = appendPadded(dst, g.part, 5)
		blocks := 1 + g.rng.IntN(16)
		last := 1 + g.rng.Int64N(128<<20)
		_ = e.EncodeMapLen(10)
		_ = e.EncodeString("t")
		_ = e.EncodeString("f")
		_ = e.EncodeString("own")
		_ = e.EncodeString(user)
		_ = e.EncodeString("grp")
		_ = e.EncodeString(proj)
		_ = e.EncodeString("perm")
		_ = e.EncodeUint(0o644)
		_ = e.EncodeString("mt")
		_ = e.EncodeInt(g.stamp)
		_ = e.EncodeString("at")
		_ = e.EncodeInt(g.stamp + int64(g.rng.IntN(86_400_000)))
		_ = e.EncodeString("rep")
		_ = e.EncodeUint(3)
		_ = e.EncodeString("bs")
		_ = e.EncodeUint(128 << 20)
		_ = e.EncodeString("len")
		_ = e.EncodeInt(int64(blocks-1)*(128<<20) + last)
		_ = e.EncodeString("blocks")
		_ = e.EncodeArrayLen(blocks)
		for i := range blocks {
			size := int64(128 << 20)
			if i == blocks-1 {
				size = last
			}
			_ = e.EncodeArrayLen(3)
			_ = e.EncodeUint(g.rng.Uint64()) // block id
			_ = e.EncodeInt(size)
			_ = e.EncodeUint(1000 + uint64(g.rng.IntN(1_000_000))) // generation stamp
		}
	}
	g.part++
	g.inUP++
	kEnd = len(dst) - start
	dst = append(dst, g.buf.Bytes()...)
	return dst, kEnd, true
}

// appendPadded appends n in decimal, zero-padded to width digits.
func appendPadded(dst []byte, n, width int) []byte {
	var d [20]byte
	b := strconv.AppendInt(d[:0], int64(n), 10)
	for range width - len(b) {
		dst = append(dst, '0')
	}
	return append(dst, b...)
}

// pairChunk is a run of records in one buffer (empty: the end).
type pairChunk struct{ pairs [][2][]byte }

// chunk returns the next records, about 1 MiB of them.
func (g *nsGen) chunk() *pairChunk {
	buf := make([]byte, 0, 1<<20+4096)
	c := &pairChunk{}
	type span struct{ start, kEnd, end int }
	var spans []span
	for len(buf) < 1<<20 {
		start := len(buf)
		var kEnd int
		var ok bool
		buf, kEnd, ok = g.next(buf)
		if !ok {
			break
		}
		spans = append(spans, span{start, start + kEnd, len(buf)})
	}
	for _, s := range spans {
		c.pairs = append(c.pairs, [2][]byte{buf[s.start:s.kEnd:s.kEnd], buf[s.kEnd:s.end:s.end]})
	}
	return c
}

// entry returns a log entry (EncodeOps, OpSets) of the next records: one
// record when size <= 0, else records until the entry holds about size
// bytes.
func (g *nsGen) entry(size int) []byte {
	var ops []store.Op
	total := 0
	for {
		buf, kEnd, ok := g.next(nil)
		if !ok {
			break
		}
		ops = append(ops, store.Op{Kind: store.OpSet, Key: buf[:kEnd], Value: buf[kEnd:]})
		total += len(buf) + 8
		if size <= 1 || total >= size {
			break
		}
	}
	e, err := store.EncodeOps(ops)
	if err != nil {
		panic(fmt.Sprintf("large-state entry: %v", err)) // the generator's own records: a bug
	}
	g.lastEntryBytes = len(e)
	return e
}

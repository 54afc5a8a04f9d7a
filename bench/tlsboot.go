package main

import (
	"context"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/tlsfiles"
)

// tlsBootRounds is how many bootstraps of each mode runTLSBootstrap
// measures, alternating plaintext and TLS (one bootstrap takes well under
// a second: single rows would be noise).
const tlsBootRounds = 3

// runTLSBootstrap measures bootstrap MB/s over HTTPS with mutual TLS
// (replica.Config.PeerTLS) against plain HTTP in the same run, alternating
// plaintext, TLS, plaintext, ... For each bootstrap a lone primary in a
// fresh room writes the state (128 MiB of 4 KiB values; 24 MiB with
// -quick), checkpoints (deleting the channels it covers), and a new
// standby on an empty disk restores its checkpoint while a light load
// runs, as in the bootstrap scenario. With TLS both replicas serve their
// checkpoint endpoint themselves over HTTPS (ListenAddr; client
// certificates required) and the standby presents its certificate; the
// bearer token is set in both modes. MB/s = checkpoint bytes / (Open →
// Status().Bootstraps = 1). One row per mode: the median round's figures
// (all rounds in extra), TLS rows with tls_over_plain (median over
// median) and the CPU of the bootstraps (ZooKeeper, the bench, others).
func runTLSBootstrap(ctx context.Context, b *bench) ([]Result, error) {
	stateBytes := 128 << 20
	if b.cfg.quick {
		stateBytes = 24 << 20
	}
	ca, err := testpki.NewCA("bench-peers")
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(b.tmp, "peer-tls")
	peer := func(id string) (*tlsfiles.Source, error) {
		f, err := ca.Issue(dir, id, testpki.Options{})
		if err != nil {
			return nil, err
		}
		return tlsfiles.Load(f)
	}
	type round = tlsBootRound
	rounds := map[bool][]round{}
	for i := 0; i < 2*tlsBootRounds && ctx.Err() == nil; i++ {
		withTLS := i%2 == 1
		var pSrc, sSrc *tlsfiles.Source
		if withTLS {
			if pSrc, err = peer(fmt.Sprintf("p%d", i)); err != nil {
				return nil, err
			}
			if sSrc, err = peer(fmt.Sprintf("s%d", i)); err != nil {
				return nil, err
			}
		}
		tune := func(src *tlsfiles.Source) func(*replica.Config) {
			return func(c *replica.Config) {
				c.CheckpointToken = "bench-token"
				if src != nil {
					// The replica serves HTTPS itself and advertises it.
					c.PeerTLS, c.ListenAddr, c.AdvertiseAddr = src, "127.0.0.1:0", ""
				}
			}
		}
		r, err := tlsBootOnce(ctx, b, stateBytes, withTLS, tune(pSrc), tune(sSrc))
		if err != nil {
			return nil, fmt.Errorf("tlsboot round %d (tls %v): %w", i+1, withTLS, err)
		}
		rounds[withTLS] = append(rounds[withTLS], r)
		b.prog.Logf("  round %d %s: %.1f MB in %v = %.0f MB/s (fetch %.0f MB/s)", i+1, map[bool]string{false: "plain", true: "TLS"}[withTLS],
			float64(r.bytes)/1e6, r.restored.Round(time.Millisecond), r.mbps, r.fetchMBps)
	}
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	median := func(rs []round) round {
		s := append([]round(nil), rs...)
		for i := range s { // insertion sort by MB/s (3 rows)
			for j := i; j > 0 && s[j].mbps < s[j-1].mbps; j-- {
				s[j], s[j-1] = s[j-1], s[j]
			}
		}
		return s[len(s)/2]
	}
	var out []Result
	plain := median(rounds[false])
	for _, withTLS := range []bool{false, true} {
		m := median(rounds[withTLS])
		r := Result{System: "roomlog", Servers: b.cfg.servers, Scenario: "bootstrap-plain", EntryBytes: 4096, MBPerS: round3(m.mbps)}
		if withTLS {
			r.Scenario = "bootstrap-tls"
			r.setExtra("tls_over_plain", round3(m.mbps/plain.mbps))
		}
		var all, fetch []float64
		for _, x := range rounds[withTLS] {
			all = append(all, round3(x.mbps))
			fetch = append(fetch, round3(x.fetchMBps))
		}
		r.setExtra("rounds_mb_per_s", all)
		r.setExtra("rounds_fetch_mb_per_s", fetch)
		r.setExtra("checkpoint_bytes", m.bytes)
		r.setExtra("restored_ms", round3(ms(m.restored)))
		r.setCPU(m.cpu)
		r.Note = fmt.Sprintf("%s: median of %d bootstraps of a %.1f MB checkpoint, alternated with the other mode: %v",
			map[bool]string{false: "plain HTTP", true: "HTTPS, mutual TLS"}[withTLS], len(all), float64(m.bytes)/1e6, all)
		b.emit(r)
		out = append(out, r)
	}
	return out, nil
}

// tlsBootRound is one bootstrap's figures.
type tlsBootRound struct {
	mbps, fetchMBps float64       // checkpoint bytes / Open→restored, and / first→last streamed byte
	restored        time.Duration // Open → Status().Bootstraps = 1
	bytes           int64         // checkpoint bytes
	cpu             cpuUse        // during the bootstrap
}

// tlsBootOnce is one bootstrap in a fresh room (see runTLSBootstrap).
func tlsBootOnce(ctx context.Context, b *bench, stateBytes int, withTLS bool, tuneP, tuneS func(*replica.Config)) (res tlsBootRound, err error) {
	const valueSize = 4096
	fill, err := newEntryMaker(valueSize, stateBytes/valueSize)
	if err != nil {
		return res, err
	}
	p, room, err := b.lonePrimary(ctx, "tlsboot", tuneP)
	if err != nil {
		return res, err
	}
	defer b.dropRoom(room)
	defer p.Close()
	want := uint64(stateBytes / valueSize)
	fctx, stopFill := context.WithCancel(ctx)
	var acked atomic.Uint64
	st := runLoad(fctx, p.r, fill, 32, 0, func(uint64, time.Time) {
		if acked.Add(1) >= want {
			stopFill()
		}
	})
	<-fctx.Done()
	st.wait()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	if err := p.r.Checkpoint(ctx); err != nil {
		return res, fmt.Errorf("checkpoint: %w", err)
	}
	if err := waitFor(ctx, 30*time.Second, "channel 1 deleted", func() bool {
		chs, err := p.r.Room().Channels(ctx)
		return err == nil && len(chs) > 0 && chs[0].FirstIndex > 1
	}); err != nil {
		return res, err
	}
	info, err := checkpoint.Newest(filepath.Join(p.dir, "checkpoints"))
	if err != nil {
		return res, err
	}
	small, err := newEntryMaker(replicaEntryBytes, 10_000)
	if err != nil {
		return res, err
	}
	lctx, stopLoad := context.WithCancel(ctx)
	defer stopLoad()
	load := runLoad(lctx, p.r, small, 16, 500, nil)
	defer load.wait()
	defer stopLoad()

	var mu sync.Mutex
	var firstByte, streamedAt time.Time
	c0 := b.cpuNow()
	t1 := time.Now()
	s, err := b.openMember(ctx, room, "s", func(c *replica.Config) {
		tuneS(c)
		c.CheckpointFetch.Progress = func(pr checkpoint.Progress) {
			mu.Lock()
			defer mu.Unlock()
			if firstByte.IsZero() {
				firstByte = time.Now().Add(-pr.Elapsed)
			}
			if pr.Stage == checkpoint.StageStreamed {
				streamedAt = time.Now()
			}
		}
	})
	if err != nil {
		return res, err
	}
	defer s.Close()
	if err := waitFor(ctx, 120*time.Second, "the standby's bootstrap", func() bool { return s.r.Status().Bootstraps >= 1 }); err != nil {
		return res, err
	}
	res.restored = time.Since(t1)
	res.cpu = b.cpuSince(c0)
	if withTLS && (p.r.ListenAddr() == "" || s.r.ListenAddr() == "") {
		return res, fmt.Errorf("the TLS round's replicas do not serve HTTPS themselves")
	}
	res.bytes = info.Bytes
	res.mbps = float64(info.Bytes) / res.restored.Seconds() / 1e6
	mu.Lock()
	if !firstByte.IsZero() && streamedAt.After(firstByte) {
		res.fetchMBps = float64(info.Bytes) / streamedAt.Sub(firstByte).Seconds() / 1e6
	}
	mu.Unlock()
	return res, nil
}

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
)

// runReseed measures the recovery of a room ZooKeeper lost (issue 27): a
// primary and a standby fill 1 GiB of state (the standby stops at 90 %,
// a survivor that must bootstrap), a foreign client deletes the room, and
// the primary's member fails with ErrRoomLost (detect). Then, from the
// two stopped members' data dirs: replica.Reseed (reseed), the seed's
// member reopened until its first acknowledged Propose (serving), and the
// member that was behind reopened until it bootstrapped the seed's
// checkpoint and reached the same state hash (all).
func runReseed(ctx context.Context, b *bench) ([]Result, error) {
	stateBytes := 1 << 30
	if b.cfg.quick {
		stateBytes = 64 << 20
	}
	const valueSize = 4096
	want := uint64(stateBytes / valueSize)
	fill, err := newEntryMaker(valueSize, int(want))
	if err != nil {
		return nil, err
	}
	p, s, room, err := b.pair(ctx, "reseed", nil)
	if err != nil {
		return nil, err
	}
	defer b.dropRoom(room)
	closed := map[*member]bool{}
	closeOnce := func(m *member) {
		if !closed[m] {
			closed[m] = true
			m.Close()
		}
	}
	defer func() {
		closeOnce(p)
		closeOnce(s)
	}()

	b.prog.Logf("reseed: writing %d MiB of state (%d x 4 KiB entries); the standby stops at 90 %%", stateBytes>>20, want)
	var acked atomic.Uint64
	stopLive := b.prog.Live("reseed fill", func() string { return fmt.Sprintf("%d/%d entries", acked.Load(), want) })
	t0 := time.Now()
	fillTo := func(n uint64) error {
		fctx, stop := context.WithCancel(ctx)
		st := runLoad(fctx, p.r, fill, 32, 0, func(uint64, time.Time) {
			if acked.Add(1) >= n {
				stop()
			}
		})
		<-fctx.Done()
		st.wait()
		stop()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if acked.Load() < n {
			return fmt.Errorf("reseed: fill stopped at %d of %d entries", acked.Load(), n)
		}
		return nil
	}
	if err := fillTo(want * 9 / 10); err != nil {
		stopLive()
		return nil, err
	}
	pi := p.r.Status().Applied
	if err := waitFor(ctx, 60*time.Second, "the standby at 90 %", func() bool { return s.r.Status().Applied >= pi }); err != nil {
		stopLive()
		return nil, fmt.Errorf("reseed: %w", err)
	}
	closeOnce(s)
	if err := fillTo(want); err != nil {
		stopLive()
		return nil, err
	}
	stopLive()
	fillTime := time.Since(t0)
	seedHash, seedIndex, err := p.r.StateHash()
	if err != nil {
		return nil, fmt.Errorf("reseed: %w", err)
	}
	storeBytes := dirBytes(filepath.Join(p.dir, "store"))
	b.prog.Logf("  filled in %v (store %.1f MB, index %d); deleting the room with a foreign client", fillTime.Round(time.Millisecond), float64(storeBytes)/1e6, seedIndex)

	c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: b.addrs, SessionTimeout: b.cfg.sessionTimeout})
	if err != nil {
		return nil, fmt.Errorf("reseed: %w", err)
	}
	defer c.Close()
	lost := time.Now()
	if err := logroom.DeleteRoom(ctx, c, "", room); err != nil {
		return nil, fmt.Errorf("reseed: delete the room: %w", err)
	}
	if err := waitFor(ctx, 30*time.Second, "the primary's member fails with ErrRoomLost", func() bool {
		st := p.r.Status()
		return st.Role == replica.RoleFailed && errors.Is(st.Err, replica.ErrRoomLost)
	}); err != nil {
		return nil, fmt.Errorf("reseed: %w (status: %v)", err, p.r.Status().Err)
	}
	detect := time.Since(lost)
	closeOnce(p)

	b.prog.Logf("reseed: detected in %v; re-seeding from both data dirs", detect.Round(time.Millisecond))
	t1 := time.Now()
	res, err := replica.Reseed(ctx, replica.ReseedConfig{Servers: b.addrs, SessionTimeout: b.cfg.sessionTimeout, Room: room,
		DataDirs: []string{p.dir, s.dir}, Logger: b.log})
	if err != nil {
		return nil, fmt.Errorf("reseed: %w", err)
	}
	reseedTime := time.Since(t1)
	p2, err := b.openMember(ctx, room, "p", nil)
	if err != nil {
		return nil, fmt.Errorf("reseed: reopen the seed: %w", err)
	}
	defer p2.Close()
	if err := waitFor(ctx, 60*time.Second, "the seed's member leads", func() bool { return p2.r.Status().Role == replica.RolePrimary }); err != nil {
		return nil, fmt.Errorf("reseed: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	first, err := p2.r.Propose(pctx, fill.make(0))
	cancel()
	if err != nil {
		return nil, fmt.Errorf("reseed: first Propose after the re-seed: %w", err)
	}
	serving := time.Since(t1)
	t2 := time.Now()
	s2, err := b.openMember(ctx, room, "s", nil)
	if err != nil {
		return nil, fmt.Errorf("reseed: reopen the member behind: %w", err)
	}
	defer s2.Close()
	if err := waitFor(ctx, 10*time.Minute, "the member behind bootstraps and catches up", func() bool {
		return s2.r.Status().Bootstraps >= 1 && s2.r.Status().Applied >= first.Index
	}); err != nil {
		return nil, fmt.Errorf("reseed: %w", err)
	}
	h1, i1, err1 := p2.r.StateHash()
	h2, i2, err2 := s2.r.StateHash()
	if err := errors.Join(err1, err2); err != nil {
		return nil, fmt.Errorf("reseed: %w", err)
	}
	if h1 != h2 || i1 != i2 {
		return nil, fmt.Errorf("reseed: the members differ after the re-seed: %s@%d vs %s@%d", h1, i1, h2, i2)
	}
	all := time.Since(t1)
	bootstrap := time.Since(t2)

	r := Result{System: "roomlog", Servers: b.cfg.servers, Scenario: "reseed", EntryBytes: valueSize,
		MBPerS: round3(float64(storeBytes) / bootstrap.Seconds() / 1e6)}
	r.setExtra("state_bytes", storeBytes)
	r.setExtra("seed_index", seedIndex)
	r.setExtra("seed_hash", seedHash)
	r.setExtra("detect_ms", round3(ms(detect)))
	r.setExtra("reseed_ms", round3(ms(reseedTime)))
	r.setExtra("reseed_call_ms", round3(ms(res.Took)))
	r.setExtra("serving_ms", round3(ms(serving)))
	r.setExtra("all_members_ms", round3(ms(all)))
	r.setExtra("bootstrap_ms", round3(ms(bootstrap)))
	r.setExtra("fill_ms", round3(ms(fillTime)))
	r.Note = fmt.Sprintf("%.0f MB state: room deleted -> ErrRoomLost %v; Reseed %v; seed member serving %v after; member behind bootstrapped to one hash %v after",
		float64(storeBytes)/1e6, detect.Round(time.Millisecond), reseedTime.Round(time.Millisecond), serving.Round(time.Millisecond), all.Round(time.Millisecond))
	b.emit(r)
	return []Result{r}, nil
}

// dirBytes sums the sizes of the regular files under dir.
func dirBytes(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
		return nil
	})
	return n
}

package compat

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
)

// newReleaseFlags are the flags members of this tree's release run with:
// zstd compression, which the room version gates (S2 at room version 1,
// zstd from 2), so the raise changes what is written and the rollback
// proves those batches were gone before the previous release came back.
var newReleaseFlags = []string{"--compression", "zstd"}

// roomVersionWait bounds a room version change, from setting the target
// to the change being complete.
const roomVersionWait = 60 * time.Second

// raiseRoomVersion raises the room version to v: it sets the room's
// target and waits until the room is at v and the change is complete,
// then until the primary has written zstd batches (allowed from room
// version 2 on, which the members of this release are told to use).
func raiseRoomVersion(ctx context.Context, r *room, v int) error {
	if err := setRoomVersion(ctx, r, v); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, roomVersionWait)
	defer cancel()
	for round := 0; ; round++ {
		// The load's single mutations make batches too small to compress
		// (under 256 bytes): a burst of concurrent ones fills a batch.
		if err := burst(ctx, r, round); err != nil {
			return err
		}
		n, err := zstdBatches(ctx, r)
		if err == nil && n > 0 {
			r.t.Logf("compat: room version %d: %d zstd batches in the room", v, n)
			return nil
		}
		if !sleep(ctx, poll) {
			return fmt.Errorf("compat: no zstd batch in the room at room version %d (%v)", v, err)
		}
	}
}

// burst sends 64 concurrent mkdirs of long, similar paths to the primary
// (outside the load's directories), so that the primary forms batches
// big enough to compress.
func burst(ctx context.Context, r *room, round int) error {
	primary, err := r.waitSettled(ctx)
	if err != nil {
		return err
	}
	c := r.member(primary).c
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for i := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			mctx, cancel := context.WithTimeout(ctx, mutationTimeout)
			defer cancel()
			p := fmt.Sprintf("/burst-%03d-%03d-warehouse-events-dt-2026-11-28-part-00000-of-00064", round, i)
			if _, err := c.Mkdir(mctx, p, false); err != nil {
				errs <- fmt.Errorf("compat: burst mkdir %s: %w", p, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs // nil when none failed
}

// zstdBatches counts the zstd batches in the room's channels.
func zstdBatches(ctx context.Context, r *room) (int, error) {
	c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: strings.Split(r.zk, ","), SessionTimeout: r.session, AnyServer: true})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	ls, err := logroom.ListChannels(ctx, c, logroom.DefaultBase, r.name)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, num := range ls.Nums {
		p := logroom.RoomPath(logroom.DefaultBase, r.name, "channels", logroom.ChannelName(num))
		names, _, err := c.Conn().Children(p)
		if err != nil {
			continue // deleted meanwhile
		}
		for _, name := range names {
			data, _, err := c.Conn().Get(p + "/" + name)
			if err != nil {
				continue
			}
			if b, err := logroom.DecodeBatch(data); err == nil && b.Codec == logroom.CodecZstd {
				n++
			}
		}
	}
	return n, nil
}

// lowerRoomVersion lowers the room version to v and waits until the
// downgrade is complete: from then on nothing in the room (log or
// checkpoint) needs a format above v, so binaries that support only v
// may join again. No zstd batch may remain.
func lowerRoomVersion(ctx context.Context, r *room, v int) error {
	if err := setRoomVersion(ctx, r, v); err != nil {
		return err
	}
	n, err := zstdBatches(ctx, r)
	if err != nil {
		return err
	}
	if n > 0 {
		return fmt.Errorf("compat: room version %d complete, yet %d zstd batches remain in the room", v, n)
	}
	return nil
}

func setRoomVersion(ctx context.Context, r *room, v int) error {
	ctx, cancel := context.WithTimeout(ctx, roomVersionWait)
	defer cancel()
	c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: strings.Split(r.zk, ","), SessionTimeout: r.session, AnyServer: true})
	if err != nil {
		return fmt.Errorf("compat: dial ZooKeeper: %w", err)
	}
	defer c.Close()
	if err := replica.SetRoomVersionTarget(ctx, c, replica.DefaultBase, r.name, v); err != nil {
		return fmt.Errorf("compat: set room version target %d: %w", v, err)
	}
	var (
		st      replica.RoomVersionStatus
		blocked string
	)
	for {
		st, err = replica.ReadRoomVersion(ctx, c, replica.DefaultBase, r.name)
		if err == nil && st.Version == v && st.Target == v && st.Complete {
			return nil
		}
		if err == nil && st.Blocked != blocked {
			blocked = st.Blocked
			r.t.Logf("compat: room version %d, target %d: blocked: %q", st.Version, st.Target, st.Blocked)
		}
		if !sleep(ctx, poll) {
			return fmt.Errorf("compat: room version not %d and complete within %v (last: %+v, %v)", v, roomVersionWait, st, err)
		}
	}
}

// checkRefuses starts bin (release rel, with extra flags) as a new member
// of a room at version 2 (its own id and empty data directory, so the
// room's members are untouched) with --exit-on-failure, and requires it
// to exit non-zero saying want: a previous-release binary says "unknown
// format version 2" (the room meta record it cannot read); this release
// capped at room version 1 says "unsupported room version".
func checkRefuses(ctx context.Context, r *room, bin, rel, id, want string, extra ...string) error {
	addr, err := freeAddr()
	if err != nil {
		return err
	}
	p, logPath, err := r.launch(bin, rel, id, filepath.Join(r.dir, "data-"+id), addr, append([]string{"--exit-on-failure"}, extra...)...)
	if err != nil {
		return err
	}
	r.extra = append(r.extra, p)
	if err := p.WaitExit(30 * time.Second); err != nil {
		p.SignalGroup(syscall.SIGKILL)
		return fmt.Errorf("compat: %s binary against a room at version 2 did not exit: %w; last lines of %s:\n%s",
			rel, err, logPath, tail(logPath, tailLines))
	}
	var ee *exec.ExitError
	if !errors.As(p.Err(), &ee) || ee.ExitCode() <= 0 {
		return fmt.Errorf("compat: %s binary against a room at version 2 exited with %v, want a non-zero status; last lines of %s:\n%s",
			rel, p.Err(), logPath, tail(logPath, tailLines))
	}
	out, err := os.ReadFile(logPath)
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, want) {
			r.t.Logf("compat: %s binary against a room at version 2: %v: %s", rel, p.Err(), line)
			return nil
		}
	}
	return fmt.Errorf("compat: %s binary against a room at version 2 exited (%v) without saying %q; last lines of %s:\n%s",
		rel, p.Err(), want, logPath, tail(logPath, tailLines))
}

// roomVersionSteps are the steps between the rolling upgrade and the
// rolling rollback.
func roomVersionSteps(oldBin, oldRel, newBin, newRel string) []step {
	return []step{
		{name: "raise room version to 2", action: func(ctx context.Context, r *room) error { return raiseRoomVersion(ctx, r, 2) }},
		{name: "old binary refuses version 2", action: func(ctx context.Context, r *room) error {
			return checkRefuses(ctx, r, oldBin, oldRel, "refused-old", "unknown format version 2")
		}},
		{name: "capped binary refuses 2", action: func(ctx context.Context, r *room) error {
			return checkRefuses(ctx, r, newBin, newRel, "refused-capped", "unsupported room version", "--max-room-version", "1")
		}},
		{name: "lower room version to 1", action: func(ctx context.Context, r *room) error { return lowerRoomVersion(ctx, r, 1) }},
	}
}

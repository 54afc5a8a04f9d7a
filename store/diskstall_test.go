package store

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/faultfs"
)

// stallDetect is how long a stall may take to be declared: the timeout
// plus Pebble's 2 s check interval, with slack for a loaded machine.
func stallDetect(timeout time.Duration) time.Duration { return timeout + 2*time.Second + 5*time.Second }

// A disk that stops answering fails the store within DiskStallTimeout (plus
// Pebble's check interval): the Apply stuck on it stays stuck, but every
// later Apply, Sync and Checkpoint returns ErrDiskStalled at once, the
// callback hears of it, and Close returns instead of waiting for the disk.
// Once the disk recovers, the stuck Apply returns and the close completes:
// the store reopens with everything that was acknowledged.
func TestDiskStallFailsStore(t *testing.T) {
	dir := t.TempDir()
	ffs := faultfs.New(nil)
	stalled := make(chan error, 2)
	const timeout = 300 * time.Millisecond
	s, err := Open(dir, &Options{FS: ffs, DiskStallTimeout: timeout, OnDiskStall: func(err error) { stalled <- err }})
	require.NoError(t, err)
	applyGen(t, s, 1, 10)

	ffs.Stall()
	stuck := make(chan error, 1)
	go func() {
		_, err := s.Apply(genEntries(t, 11, 11))
		stuck <- err
	}()
	var stallErr error
	select {
	case stallErr = <-stalled:
	case err := <-stuck:
		t.Fatalf("Apply returned %v on a stalled disk", err)
	case <-time.After(stallDetect(timeout)):
		t.Fatalf("no disk stall reported %v after the disk stalled (%d operations blocked)", stallDetect(timeout), ffs.Blocked())
	}
	require.ErrorIs(t, stallErr, ErrDiskStalled)
	require.Contains(t, stallErr.Error(), "has not completed after")
	require.Positive(t, ffs.Blocked())

	// Fails fast from now on, while the first Apply is still stuck.
	fast := make(chan struct{})
	go func() {
		defer close(fast)
		_, err := s.Apply(genEntries(t, 11, 11))
		assert.ErrorIs(t, err, ErrDiskStalled)
		assert.ErrorIs(t, s.Sync(), ErrDiskStalled)
		_, _, err = s.Checkpoint(t.TempDir() + "/ckpt")
		assert.ErrorIs(t, err, ErrDiskStalled)
		// Reads still run; Pebble shows a batch before its WAL sync ends,
		// so 11 may be visible.
		_, idx, err := s.StateHash()
		assert.NoError(t, err, "read on a stalled disk")
		assert.GreaterOrEqual(t, idx, uint64(10))
		assert.ErrorIs(t, s.Close(), ErrDiskStalled)
	}()
	select {
	case <-fast:
	case <-time.After(closeGrace + 4*time.Second):
		t.Fatal("calls on a failed store waited for the disk")
	}
	select {
	case err := <-stuck:
		t.Fatalf("the Apply stuck on the disk returned %v before the disk recovered", err)
	default:
	}
	require.Len(t, stalled, 0, "OnDiskStall is called once")

	// The disk recovers: the stuck Apply and the background close finish.
	ffs.Resume()
	var stuckErr error
	select {
	case stuckErr = <-stuck:
	case <-time.After(30 * time.Second):
		t.Fatal("the stuck Apply did not return after the disk recovered")
	}
	select {
	case <-s.closeDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the close did not complete after the disk recovered")
	}
	require.NoError(t, s.closeErr)
	s2 := openTest(t, dir, nil)
	want := uint64(10)
	if stuckErr == nil {
		want = 11
	}
	require.Equal(t, want, s2.AppliedIndex(), "stuck Apply returned %v", stuckErr)
}

// A disk that is slow but completes every operation within the timeout is
// not a stall, however long the work takes in total.
func TestSlowDiskIsNotAStall(t *testing.T) {
	ffs := faultfs.New(nil)
	// Generous against a loaded 2-core machine under -race: each
	// operation takes 300 ms of delay plus its own time, far below 2 s.
	const timeout = 2 * time.Second
	stalls := make(chan error, 1)
	s := openTest(t, t.TempDir(), &Options{FS: ffs, DiskStallTimeout: timeout, OnDiskStall: func(err error) { stalls <- err }})
	ffs.SetDelay(300 * time.Millisecond)
	t0 := time.Now()
	for i := uint64(1); i <= 8; i++ {
		_, err := s.Apply(genEntries(t, i, i))
		require.NoError(t, err)
	}
	require.NoError(t, s.Sync())
	require.Greater(t, time.Since(t0), timeout, "the delay must make the whole run longer than the timeout")
	// Give the monitor a check interval to (wrongly) declare a stall.
	time.Sleep(2500 * time.Millisecond)
	ffs.SetDelay(0)
	require.NoError(t, s.Close())
	select {
	case err := <-stalls:
		t.Fatalf("a slow disk was declared stalled: %v", err)
	default:
	}
}

// Open is bounded too: on a disk that stalls it returns ErrDiskStalled, and
// the store it opens late, once the disk recovers, is closed again (the
// directory can be opened afterwards).
func TestOpenOnStalledDisk(t *testing.T) {
	dir := t.TempDir()
	ffs := faultfs.New(nil)
	const timeout = 300 * time.Millisecond
	ffs.Stall()
	t0 := time.Now()
	_, err := Open(dir, &Options{FS: ffs, DiskStallTimeout: timeout})
	require.ErrorIs(t, err, ErrDiskStalled)
	require.Less(t, time.Since(t0), stallDetect(timeout))
	ffs.Resume()
	var s *Store
	require.Eventually(t, func() bool {
		s, err = Open(dir, nil)
		return err == nil
	}, 30*time.Second, 50*time.Millisecond, "reopen after the disk recovered: %v", err)
	require.NoError(t, s.Close())
	require.False(t, errors.Is(err, ErrDiskStalled))
}

package checkpoint

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/store"
)

// TestFetchStalledFsyncIsBounded: a disk whose fsync never returns fails
// the fetch within IdleTimeout, with an error that names the fsync; no
// checkpoint is listed under root. (The stalled fsync is simulated: every
// fsync of a received sstable blocks until the test ends.)
func TestFetchStalledFsyncIsBounded(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 3000, 1000)
	src := t.TempDir()
	_, err := Create(ctx, s, src, Origin{Room: "r", RoomCzxid: 3})
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(src))
	defer srv.Close()

	release := make(chan struct{})
	defer close(release)
	syncFile = func(f *os.File) error {
		if strings.Contains(filepath.Base(f.Name()), ".sst") { // (000001.sst.part while received)
			<-release
		}
		return f.Sync()
	}
	defer func() { syncFile = (*os.File).Sync }()

	root := filepath.Join(t.TempDir(), "ckpts")
	start := time.Now()
	_, ferr := Fetch(ctx, srv.URL, root, FetchOptions{IdleTimeout: time.Second})
	took := time.Since(start)
	require.Error(t, ferr)
	t.Logf("failed after %v: %v", took.Round(time.Millisecond), ferr)
	require.ErrorIs(t, ferr, errStalledSync)
	require.Contains(t, ferr.Error(), "fsync")
	require.ErrorIs(t, ferr, ErrTimeout)
	require.Less(t, took, 20*time.Second, "the fetch waited for the disk without bound")
	infos, err := List(root)
	require.NoError(t, err)
	require.Empty(t, infos)
}

// TestFetchSlowFsyncSucceeds: a slow disk whose fsyncs do complete is not
// a stalled one: each completed fsync counts as progress, so a fetch whose
// queued fsyncs take longer together than IdleTimeout after the last byte
// (but each less) succeeds.
func TestFetchSlowFsyncSucceeds(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 6000, 1000)
	src := t.TempDir()
	info, err := Create(ctx, s, src, Origin{Room: "r", RoomCzxid: 3})
	require.NoError(t, err)
	var ssts int
	for _, f := range info.Manifest.Files {
		if filepath.Ext(f.Name) == ".sst" {
			ssts++
		}
	}
	require.GreaterOrEqual(t, ssts, 2, "the test needs a checkpoint of several sstables")
	srv := httptest.NewServer(Handler(src))
	defer srv.Close()

	const perFsync = 700 * time.Millisecond
	syncFile = func(f *os.File) error {
		if strings.Contains(filepath.Base(f.Name()), ".sst") { // (000001.sst.part while received)
			time.Sleep(perFsync)
		}
		return f.Sync()
	}
	defer func() { syncFile = (*os.File).Sync }()

	start := time.Now()
	got, err := Fetch(ctx, srv.URL, filepath.Join(t.TempDir(), "ckpts"), FetchOptions{IdleTimeout: time.Second})
	require.NoError(t, err)
	took := time.Since(start)
	// Files are fetched (and fsynced) DefaultParallel at a time: some
	// worker synced at least its share of the sstables, one after another.
	share := (ssts + DefaultParallel - 1) / DefaultParallel
	require.Greater(t, took, time.Duration(share)*perFsync, "the fsyncs were not waited for")
	_, err = Verify(got.Path)
	require.NoError(t, err)
	t.Logf("%d sstables, fetched in %v", ssts, took.Round(time.Millisecond))
}

// TestCreateStalledReadFailsStore: Create's own reads of the store's disk
// (the checksums of new files, outside Pebble) are bounded by the store's
// DiskStallTimeout like the store's own operations: a read stuck on the
// disk fails the store with ErrDiskStalled, naming the read and the file,
// and the store refuses writes from then on. (The stuck read is simulated:
// the first checksum read blocks until the test releases it.)
func TestCreateStalledReadFailsStore(t *testing.T) {
	ctx := context.Background()
	stalled := make(chan error, 1)
	const timeout = 300 * time.Millisecond
	s, err := store.Open(filepath.Join(t.TempDir(), "store"), &store.Options{
		MemTableSize: 1 << 20, DiskStallTimeout: timeout, OnDiskStall: func(err error) { stalled <- err }})
	require.NoError(t, err)
	fill(t, s, 2000, 1000)

	release := make(chan struct{})
	var once sync.Once
	testHookRead = func(string) { once.Do(func() { <-release }) }
	defer func() { testHookRead = nil }()
	created := make(chan error, 1)
	go func() {
		_, err := Create(ctx, s, t.TempDir(), Origin{Room: "r", RoomCzxid: 3})
		created <- err
	}()
	select {
	case err := <-stalled:
		require.ErrorIs(t, err, store.ErrDiskStalled)
		require.Contains(t, err.Error(), "read on ")
	case err := <-created:
		t.Fatalf("Create returned %v with a read stuck on the disk", err)
	case <-time.After(timeout + 10*time.Second):
		t.Fatal("a read stuck on the disk during Create did not fail the store")
	}
	_, err = s.Apply([]store.Entry{{Index: s.AppliedIndex() + 1, Epoch: 1, Data: nil}})
	require.ErrorIs(t, err, store.ErrDiskStalled)
	close(release)
	select {
	case <-created:
	case <-time.After(30 * time.Second):
		t.Fatal("Create did not return once the read was released")
	}
	// The close may complete (nothing is stuck now) or report the stall.
	if err := s.Close(); err != nil {
		require.ErrorIs(t, err, store.ErrDiskStalled)
	}
}

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
)

// countReads counts checksumFile's reads of files outside skip while
// the test runs.
func countReads(t *testing.T, skip string) func() int {
	var mu sync.Mutex
	n := 0
	testHookRead = func(p string) {
		if !strings.HasPrefix(p, skip) {
			mu.Lock()
			n++
			mu.Unlock()
		}
	}
	t.Cleanup(func() { testHookRead = nil })
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
}

// TestVerifiedMemo: the files a Fetch received and checked are not read
// again by the Restore that links them, nor by a later Fetch into the same
// root that links them as known files; a file changed on disk since (same
// size, new mtime) misses the memo and is refused by its CRC.
func TestVerifiedMemo(t *testing.T) {
	forgetVerified()
	t.Cleanup(forgetVerified)
	old := racyMargin
	racyMargin = 0 // the test's files are written milliseconds before they are used
	t.Cleanup(func() { racyMargin = old })

	ctx := context.Background()
	s := newStore(t, 3000, 500)
	src := t.TempDir()
	origin := Origin{Room: "r", RoomCzxid: 3}
	_, err := Create(ctx, s, src, origin)
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(src))
	defer srv.Close()

	root := t.TempDir()
	info, err := Fetch(ctx, srv.URL, root, FetchOptions{Origin: origin})
	require.NoError(t, err)
	require.Positive(t, info.Fetch.FetchedFiles)

	// Restore: every sstable linked from the memo, none read.
	reads := countReads(t, src) // (Create reads the source's files)
	storeDir := filepath.Join(t.TempDir(), "store")
	require.NoError(t, Restore(ctx, info.Path, storeDir, origin))
	var ssts int
	for _, f := range info.Manifest.Files {
		if strings.HasSuffix(f.Name, ".sst") {
			ssts++
		}
	}
	require.Positive(t, ssts)
	require.Zero(t, reads(), "Restore read files Fetch had just checked")

	// A newer checkpoint at the source: the re-fetch links what root
	// already holds without reading it.
	fill(t, s, 50, 500)
	_, err = Create(ctx, s, src, origin)
	require.NoError(t, err)
	info2, err := Fetch(ctx, srv.URL, root, FetchOptions{Origin: origin})
	require.NoError(t, err)
	require.Positive(t, info2.Fetch.LinkedKnownFiles)
	require.Zero(t, reads(), "the re-fetch read files it had checked")

	// A file damaged in place (same size, a later mtime) is read, and
	// refused, by the next Restore.
	before := reads()
	var big File // the largest sstable (linked, not copied)
	for _, f := range info2.Manifest.Files {
		if strings.HasSuffix(f.Name, ".sst") && f.Size > big.Size {
			big = f
		}
	}
	p := filepath.Join(info2.Path, DBDir, big.Name)
	time.Sleep(20 * time.Millisecond) // past the filesystem's mtime granularity
	flipByte(t, p, big.Size/2)
	err = Restore(ctx, info2.Path, filepath.Join(t.TempDir(), "store"), origin)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), big.Name)
	require.Greater(t, reads(), before)

	// Truncated and grown back to its size: refused as well.
	require.NoError(t, os.Truncate(p, 0))
	require.NoError(t, os.Truncate(p, big.Size))
	err = Restore(ctx, info2.Path, filepath.Join(t.TempDir(), "store"), origin)
	require.ErrorIs(t, err, ErrCorrupt)
}

// TestVerifiedMemoPersists: a new process (the memo emptied) reads
// root/verified-files, so a Restore of a checkpoint it did not fetch
// itself reads none of the files listed; a file changed since is read.
func TestVerifiedMemoPersists(t *testing.T) {
	forgetVerified()
	t.Cleanup(forgetVerified)
	old := racyMargin
	racyMargin = 0
	t.Cleanup(func() { racyMargin = old })

	ctx := context.Background()
	s := newStore(t, 3000, 500)
	src := t.TempDir()
	origin := Origin{Room: "r", RoomCzxid: 4}
	_, err := Create(ctx, s, src, origin)
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(src))
	defer srv.Close()
	root := t.TempDir()
	info, err := Fetch(ctx, srv.URL, root, FetchOptions{Origin: origin})
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(root, verifiedFile))
	require.NoError(t, err)
	require.NotEmpty(t, b)

	forgetVerified() // a new process
	reads := countReads(t, src)
	require.NoError(t, Restore(ctx, info.Path, filepath.Join(t.TempDir(), "store"), origin))
	require.Zero(t, reads(), "Restore in a new process read files verified-files lists")

	// A damaged file, in yet another process: read and refused.
	forgetVerified()
	var big File
	for _, f := range info.Manifest.Files {
		if strings.HasSuffix(f.Name, ".sst") && f.Size > big.Size {
			big = f
		}
	}
	time.Sleep(20 * time.Millisecond)
	flipByte(t, filepath.Join(info.Path, DBDir, big.Name), big.Size/3)
	err = Restore(ctx, info.Path, filepath.Join(t.TempDir(), "store"), origin)
	require.ErrorIs(t, err, ErrCorrupt)
}

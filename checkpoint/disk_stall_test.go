package checkpoint

import (
	"context"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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
		if filepath.Ext(f.Name()) == ".sst" {
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

package checkpoint

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/store"
)

// TestRestoreLinksSSTables: Restore hard-links the checkpoint's sstables
// into the store instead of copying them (one write pass less), copies the
// files Pebble appends to, and the checkpoint stays valid after the
// restored store is written to and compacted.
func TestRestoreLinksSSTables(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 3000, 500)
	root := t.TempDir()
	origin := Origin{Room: "r", RoomCzxid: 9}
	info, err := Create(ctx, s, root, origin)
	require.NoError(t, err)
	storeDir := filepath.Join(t.TempDir(), "store")
	require.NoError(t, Restore(ctx, info.Path, storeDir, origin))

	ssts, others := 0, 0
	for _, f := range info.Manifest.Files {
		a, err := os.Stat(filepath.Join(info.Path, DBDir, f.Name))
		require.NoError(t, err)
		b, err := os.Stat(filepath.Join(storeDir, f.Name))
		require.NoError(t, err)
		if strings.HasSuffix(f.Name, ".sst") {
			ssts++
			require.True(t, os.SameFile(a, b), "%s was copied, not linked", f.Name)
		} else {
			others++
			require.False(t, os.SameFile(a, b), "%s is shared with the checkpoint but Pebble appends to it", f.Name)
		}
	}
	require.Greater(t, ssts, 0)
	require.Greater(t, others, 0)

	// Write to the restored store and compact it: the checkpoint's files
	// must not change.
	rs, err := store.Open(storeDir, &store.Options{MemTableSize: 1 << 20})
	require.NoError(t, err)
	fill(t, rs, 20000, 500) // ~10 MB through 1 MiB memtables: flushes and compactions
	require.NoError(t, rs.Close())
	_, err = Verify(info.Path)
	require.NoError(t, err, "writing to the restored store changed the checkpoint")
}

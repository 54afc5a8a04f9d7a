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

// TestCreateReusesCRCOfLinkedTables: a checkpoint's sstables are hard
// links to the store's immutable files, so the next checkpoint takes the
// CRC of a file it shares with the previous one from that manifest instead
// of reading the file again. Both stay verifiable, and a shared sstable
// that changed on disk in between is caught by the new checkpoint's
// Verify (recomputing its CRC would have blessed the damage).
func TestCreateReusesCRCOfLinkedTables(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 3000, 1000)
	root := t.TempDir()
	origin := Origin{Room: "r", RoomCzxid: 7}
	// Two consecutive checkpoints that share an sstable (a compaction in
	// between may rewrite them all: try again).
	var first, second Info
	var shared []File
	for try := 0; try < 10 && len(shared) == 0; try++ {
		var err error
		first, err = Create(ctx, s, root, origin)
		require.NoError(t, err)
		fill(t, s, 20, 1000)
		second, err = Create(ctx, s, root, origin)
		require.NoError(t, err)
		require.Greater(t, second.Manifest.Index, first.Manifest.Index)
		_, err = Verify(second.Path)
		require.NoError(t, err)
		old := map[string]File{}
		for _, f := range first.Manifest.Files {
			old[f.Name] = f
		}
		for _, f := range second.Manifest.Files {
			if o, ok := old[f.Name]; ok && strings.HasSuffix(f.Name, ".sst") {
				a, err := os.Stat(filepath.Join(first.Path, DBDir, f.Name))
				require.NoError(t, err)
				b, err := os.Stat(filepath.Join(second.Path, DBDir, f.Name))
				require.NoError(t, err)
				require.True(t, os.SameFile(a, b), "%s is not a hard link", f.Name)
				require.Equal(t, o, f)
				shared = append(shared, f)
			}
		}
		fill(t, s, 20, 1000)
	}
	require.NotEmpty(t, shared, "no sstable shared between the two checkpoints")
	// Create read only what it did not share.
	var sharedBytes int64
	for _, f := range shared {
		sharedBytes += f.Size
	}
	require.Positive(t, sharedBytes)
	require.LessOrEqual(t, second.ReadBytes, second.Bytes-sharedBytes, "Create read shared sstables again")
	t.Logf("second checkpoint: %d bytes, %d shared, %d read", second.Bytes, sharedBytes, second.ReadBytes)

	// Damage one shared sstable (one file under three names). A new
	// checkpoint linking it takes the first CRC (knownTables), so its
	// Verify catches the damage. (Done on links made here: a live store
	// may compact the file away before another Create.)
	victim := shared[0]
	img := filepath.Join(t.TempDir(), DBDir)
	require.NoError(t, os.Mkdir(img, 0o755))
	for _, f := range shared {
		require.NoError(t, os.Link(filepath.Join(second.Path, DBDir, f.Name), filepath.Join(img, f.Name)))
	}
	flipByte(t, filepath.Join(img, victim.Name), victim.Size/2)
	known := knownTables(root, origin)
	for _, f := range shared {
		got, ok := known.same(filepath.Join(img, f.Name), f.Name)
		require.True(t, ok, "%s: a hard link to a known sstable was not recognised", f.Name)
		require.Equal(t, f, got)
	}
	_, _, crc, err := func() (string, int64, uint32, error) {
		size, crc, err := checksumFile(filepath.Join(img, victim.Name), make([]byte, 4096), false, nil)
		return "", size, crc, err
	}()
	require.NoError(t, err)
	require.NotEqual(t, victim.CRC32C, crc, "the damage did not change the CRC")
	require.Error(t, victim.check(victim.Name, victim.Size, crc))
	_, ok := known.same(filepath.Join(img, "000001.sst"), "000001.sst")
	require.False(t, ok, "a name no checkpoint holds was reused")
	// Another origin's checkpoints are not used.
	require.Empty(t, knownTables(root, Origin{Room: "other", RoomCzxid: 7}).files)
}

// TestCreateRecomputesCRCOfCopies: a file of the same name that is not
// the same file (a copy, as on a filesystem without hard links) gets its
// CRC computed.
func TestCreateRecomputesCRCOfCopies(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 3000, 1000)
	root := t.TempDir()
	origin := Origin{Room: "r", RoomCzxid: 7}
	first, err := Create(ctx, s, root, origin)
	require.NoError(t, err)
	// Replace every sstable of the first checkpoint by a damaged copy: no
	// longer the same file as the store's.
	for _, f := range first.Manifest.Files {
		if !strings.HasSuffix(f.Name, ".sst") {
			continue
		}
		p := filepath.Join(first.Path, DBDir, f.Name)
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		b[len(b)/2] ^= 1
		require.NoError(t, os.Remove(p))
		require.NoError(t, os.WriteFile(p, b, 0o644))
	}
	fill(t, s, 500, 1000)
	second, err := Create(ctx, s, root, origin)
	require.NoError(t, err)
	_, err = Verify(second.Path)
	require.NoError(t, err, "a CRC was taken from a file that is not the same")
}

package checkpoint

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/roomlog/roomlog/store"
	"github.com/stretchr/testify/require"
)

// fill applies n generated entries (about valueLen bytes each) to s.
func fill(t testing.TB, s *store.Store, n int, valueLen int) {
	t.Helper()
	const perBatch = 50
	var batch []store.Entry
	for i := 0; i < n; i++ {
		idx := s.AppliedIndex() + uint64(len(batch)) + 1
		v := incompressible(idx, valueLen)
		ops := []store.Op{{Kind: store.OpSet, Key: []byte(fmt.Sprintf("key/%08d", idx%7919)), Value: v}}
		if idx%97 == 0 {
			ops = append(ops, store.Op{Kind: store.OpDeleteRange, Key: []byte("key/00000100"), End: []byte("key/00000110")})
		}
		data, err := store.EncodeOps(ops)
		require.NoError(t, err)
		batch = append(batch, store.Entry{Index: idx, Epoch: 1 + idx/1000, Data: data})
		if len(batch) == perBatch || i == n-1 {
			_, err := s.Apply(batch)
			require.NoError(t, err)
			batch = batch[:0]
		}
	}
}

// incompressible returns n deterministic pseudo-random bytes for seed.
func incompressible(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, 42))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// newStore opens a store with a small memtable (so that it flushes
// sstables) and fills it.
func newStore(t testing.TB, entries, valueLen int) *store.Store {
	t.Helper()
	s, err := store.Open(filepath.Join(t.TempDir(), "store"), &store.Options{MemTableSize: 1 << 20})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	fill(t, s, entries, valueLen)
	return s
}

// dirNames lists the names in dir (nil if it does not exist).
func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	require.NoError(t, err)
	var names []string
	for _, e := range ents {
		if e.Name() != verifiedFile { // (the verified-file memo's, verified.go)
			names = append(names, e.Name())
		}
	}
	return names
}

// requireSameState checks that the store at dir opens with s's position and hash.
func requireSameState(t testing.TB, s *store.Store, index uint64, dir string) {
	t.Helper()
	want, widx, err := s.StateHash()
	require.NoError(t, err)
	require.Equal(t, index, widx)
	r, err := store.Open(dir, nil)
	require.NoError(t, err)
	defer r.Close()
	got, gidx, err := r.StateHash()
	require.NoError(t, err)
	require.Equal(t, index, gidx)
	require.Equal(t, s.AppliedEpoch(), r.AppliedEpoch())
	require.Equal(t, want, got)
}

// largestFile returns the name of the largest file of m.
func largestFile(m Manifest) File {
	var best File
	for _, f := range m.Files {
		if f.Size > best.Size {
			best = f
		}
	}
	return best
}

func flipByte(t testing.TB, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	require.NoError(t, err)
	defer f.Close()
	b := make([]byte, 1)
	_, err = f.ReadAt(b, off)
	require.NoError(t, err)
	b[0] ^= 0x01
	_, err = f.WriteAt(b, off)
	require.NoError(t, err)
}

// copyTree copies a checkpoint directory (manifest + flat db/) to dst, so
// that tests can damage the copy without touching the hard-linked sstables
// of the live store.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Join(dst, DBDir), 0o755))
	for _, rel := range []string{ManifestName, DBDir} {
		p := filepath.Join(src, rel)
		if rel == DBDir {
			for _, name := range dirNames(t, p) {
				b, err := os.ReadFile(filepath.Join(p, name))
				require.NoError(t, err)
				require.NoError(t, os.WriteFile(filepath.Join(dst, DBDir, name), b, 0o644))
			}
			continue
		}
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(dst, rel), b, 0o644))
	}
}

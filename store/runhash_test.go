package store

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"
)

// TestRunHashChain: stores fed the same entries (in any batch sizes) hold
// the same running hash at every index; one different write makes that
// index's hash and every later one differ, although the full StateHash
// can agree again (the chain remembers); the hash survives a reopen and
// travels in a checkpoint; it is at the applied index.
func TestRunHashChain(t *testing.T) {
	a := openTest(t, t.TempDir(), nil)
	b := openTest(t, t.TempDir(), &Options{Sync: SyncGroup})
	applyGen(t, a, 1, 300)
	for first := uint64(1); first <= 300; first += 7 {
		_, err := b.Apply(genEntries(t, first, min(first+6, 300)))
		require.NoError(t, err)
	}
	ha, hb := a.RunHash(), b.RunHash()
	require.EqualValues(t, 300, ha.Index)
	require.Zero(t, ha.Base)
	require.Equal(t, ha, hb)
	require.NotEqual(t, [32]byte{}, ha.Sum)
	for i := uint64(1); i <= 300; i++ {
		x, ok := a.RunHashAt(i)
		require.True(t, ok, "index %d in the history", i)
		y, ok := b.RunHashAt(i)
		require.True(t, ok)
		require.Equal(t, x, y, "index %d", i)
	}
	_, ok := a.RunHashAt(301)
	require.False(t, ok)

	// A nondeterministic write at 150: different from 150 on, even when a
	// later entry makes the states equal again.
	c := openTest(t, t.TempDir(), nil)
	applyGen(t, c, 1, 149)
	_, err := c.Apply([]Entry{{Index: 150, Epoch: genEpoch(150), Data: mustOps(t, set("zz-extra", "1"))}})
	require.NoError(t, err)
	x, _ := a.RunHashAt(149)
	y, _ := c.RunHashAt(149)
	require.Equal(t, x, y)
	x, _ = a.RunHashAt(150)
	y, _ = c.RunHashAt(150)
	require.NotEqual(t, x.Sum, y.Sum)

	// Same writes, other boundaries: {"ab":"c"} vs {"a":"bc"}.
	d1 := openTest(t, t.TempDir(), nil)
	d2 := openTest(t, t.TempDir(), nil)
	_, err = d1.Apply([]Entry{{Index: 1, Data: mustOps(t, set("ab", "c"))}})
	require.NoError(t, err)
	_, err = d2.Apply([]Entry{{Index: 1, Data: mustOps(t, set("a", "bc"))}})
	require.NoError(t, err)
	require.NotEqual(t, d1.RunHash().Sum, d2.RunHash().Sum)

	// Reopen and checkpoint.
	dir := t.TempDir()
	e := openTest(t, filepath.Join(dir, "db"), nil)
	applyGen(t, e, 1, 300)
	ckpt := filepath.Join(dir, "ckpt")
	_, _, err = e.Checkpoint(ckpt)
	require.NoError(t, err)
	require.NoError(t, e.Close())
	e2 := openTest(t, filepath.Join(dir, "db"), nil)
	require.Equal(t, ha, e2.RunHash())
	e3 := openTest(t, ckpt, nil)
	require.Equal(t, ha, e3.RunHash())
	applyGen(t, e3, 301, 310)
	applyGen(t, a, 301, 310)
	require.Equal(t, a.RunHash(), e3.RunHash())
}

// TestRunHashRestartsWithoutRecord: a store written without the running
// hash (or that applied entries without it since) starts a new chain at
// its applied index (Base), which only chains of the same Base compare
// with; a malformed record is corruption.
func TestRunHashRestartsWithoutRecord(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	applyGen(t, s, 1, 20)
	require.NoError(t, s.Close())
	db, err := pebble.Open(dir, &pebble.Options{})
	require.NoError(t, err)
	require.NoError(t, db.Delete(keyRunHash, pebble.Sync))
	require.NoError(t, db.Close())
	s = openTest(t, dir, nil)
	h := s.RunHash()
	require.Equal(t, RunHash{Index: 20, Base: 20}, h)
	applyGen(t, s, 21, 25)
	require.EqualValues(t, 20, s.RunHash().Base)
	require.EqualValues(t, 25, s.RunHash().Index)
	require.NoError(t, s.Close())

	db, err = pebble.Open(dir, &pebble.Options{})
	require.NoError(t, err)
	require.NoError(t, db.Set(keyRunHash, []byte("junk"), pebble.Sync))
	require.NoError(t, db.Close())
	_, err = Open(dir, &Options{})
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "running hash")

	// A newer release's record (version 2, another length): derived data,
	// so the store opens and starts a new chain instead of refusing.
	db, err = pebble.Open(dir, &pebble.Options{})
	require.NoError(t, err)
	require.NoError(t, db.Set(keyRunHash, append([]byte{2}, make([]byte, 60)...), pebble.Sync))
	require.NoError(t, db.Close())
	s = openTest(t, dir, nil)
	require.Equal(t, RunHash{Index: 25, Base: 25}, s.RunHash())
	require.NoError(t, s.Close())

	// A store of a newer format is refused by name, not as corruption.
	db, err = pebble.Open(dir, &pebble.Options{})
	require.NoError(t, err)
	require.NoError(t, db.Set(keyFormat, binary.AppendUvarint(nil, formatVersion+1), pebble.Sync))
	require.NoError(t, db.Close())
	_, err = Open(dir, &Options{})
	require.ErrorIs(t, err, ErrUnsupportedVersion)
	require.NotErrorIs(t, err, ErrCorrupt)
	_ = os.RemoveAll(dir)
}

// BenchmarkApplyRunHash: what the running hash adds to Apply, per entry of
// one 256-byte set (the bench's entry size), against the whole Apply of
// such entries in batches of 64 (no sync: the CPU side only). Run both and
// divide: fold/op over apply/op is the hash's share of the apply path.
func BenchmarkApplyRunHash(b *testing.B) {
	key := []byte("/dir/file-000123")
	val := bytes.Repeat([]byte("v"), 256)
	b.Run("fold", func(b *testing.B) {
		eh := newEntryHasher()
		var sum [32]byte
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			eh.begin(sum, uint64(i+1))
			eh.op('s', key, val, true)
			eh.outcome(Outcome{})
			sum = eh.sum()
		}
	})
	b.Run("apply", func(b *testing.B) {
		s := openTest(b, b.TempDir(), &Options{Sync: SyncGroup})
		data := mustOps(b, Op{Kind: OpSet, Key: key, Value: val})
		b.ReportAllocs()
		b.ResetTimer()
		next := uint64(1)
		for i := 0; i < b.N; i += 64 {
			es := make([]Entry, 0, 64)
			for k := 0; k < 64; k++ {
				es = append(es, Entry{Index: next, Epoch: 1, Data: data})
				next++
			}
			if _, err := s.Apply(es); err != nil {
				b.Fatal(err)
			}
		}
	})
}

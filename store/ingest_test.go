package store_test

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/store"
)

// ingestPairs yields n sorted pairs ("ns/%08d", a pseudo-random 200-byte
// value) and remembers them.
type ingestPairs struct {
	n, i int
	keys []string
	vals [][]byte
}

func (p *ingestPairs) next() ([]byte, []byte, bool) {
	if p.i >= p.n {
		return nil, nil, false
	}
	k := fmt.Sprintf("ns/%08d", p.i)
	v := make([]byte, 200)
	x := uint64(p.i)*0x9E3779B97F4A7C15 | 1
	for j := range v {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		v[j] = byte(x)
	}
	p.i++
	p.keys = append(p.keys, k)
	p.vals = append(p.vals, v)
	return []byte(k), v, true
}

// wantStateHash is doc.go's StateHash over the user keys (no request table).
func wantStateHash(kv map[string][]byte, keys []string) string {
	h := sha256.New()
	var n [8]byte
	for _, k := range keys {
		binary.BigEndian.PutUint64(n[:], uint64(len(k)))
		h.Write(n[:])
		h.Write([]byte(k))
		binary.BigEndian.PutUint64(n[:], uint64(len(kv[k])))
		h.Write(n[:])
		h.Write(kv[k])
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestIngestSorted(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join(t.TempDir(), "store")
	s, err := store.Open(dir, nil)
	require.NoError(t, err)
	defer func() { _ = s.Close() }()

	// A few applied entries first: their position and running hash must
	// survive the ingest; "a" and "zz" sort around the ingested range,
	// "ns/00000005" inside it (the ingest replaces its value).
	var entries []store.Entry
	for i, kv := range [][2]string{{"a", "1"}, {"zz", "2"}, {"ns/00000005", "old"}} {
		data, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte(kv[0]), Value: []byte(kv[1])}})
		require.NoError(t, err)
		entries = append(entries, store.Entry{Index: uint64(i + 1), Epoch: 2, Data: data})
	}
	_, err = s.Apply(entries)
	require.NoError(t, err)
	idx, epoch, batch := s.AppliedPosition()
	run := s.RunHash()

	// About 5 MB in files of at least 1 MiB: several sstables.
	p := &ingestPairs{n: 25_000}
	st, err := store.IngestSorted(ctx, s, p.next, 1<<20)
	require.NoError(t, err)
	require.EqualValues(t, p.n, st.Keys)
	require.Greater(t, st.Files, 2, "cut into several sstables")
	require.Greater(t, st.FileBytes, int64(4<<20), "values do not compress away")
	require.EqualValues(t, p.n*200, st.ValueBytes)
	t.Logf("ingested %+v", st)

	// Position, epoch, batch and running hash unchanged.
	i2, e2, b2 := s.AppliedPosition()
	require.Equal(t, []any{idx, epoch, batch}, []any{i2, e2, b2})
	require.Equal(t, run, s.RunHash())

	kv := map[string][]byte{"a": []byte("1"), "zz": []byte("2")}
	keys := []string{"a"}
	for i, k := range p.keys {
		kv[k] = p.vals[i]
		keys = append(keys, k)
	}
	keys = append(keys, "zz")
	want := wantStateHash(kv, keys)
	check := func(t *testing.T, s *store.Store) {
		t.Helper()
		for _, i := range []int{0, 5, 12_345, p.n - 1} {
			v, err := s.Get([]byte(p.keys[i]))
			require.NoError(t, err)
			require.Equal(t, p.vals[i], v, "key %s", p.keys[i])
		}
		h, at, err := s.StateHash()
		require.NoError(t, err)
		require.Equal(t, idx, at)
		require.Equal(t, want, h)
		require.Equal(t, run, s.RunHash())
	}
	check(t, s)
	names, err := os.ReadDir(dir)
	require.NoError(t, err)
	for _, n := range names {
		require.False(t, strings.HasPrefix(n.Name(), ".roomlog-ingest-"), "work dir %s left behind", n.Name())
	}

	// Applies go on after it.
	data, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte("zz"), Value: []byte("3")}})
	require.NoError(t, err)
	_, err = s.Apply([]store.Entry{{Index: idx + 1, Epoch: 2, Data: data}})
	require.NoError(t, err)
	kv["zz"] = []byte("3")
	want = wantStateHash(kv, keys)
	idx++
	run = s.RunHash()
	check(t, s)

	// A checkpoint of it restores them (package checkpoint's Create and
	// Restore, as a bootstrap does).
	origin := checkpoint.Origin{Room: "r1", RoomCzxid: 7}
	root := filepath.Join(t.TempDir(), "ckpts")
	info, err := checkpoint.Create(ctx, s, root, origin)
	require.NoError(t, err)
	require.Equal(t, idx, info.Manifest.Index)
	restored := filepath.Join(t.TempDir(), "restored")
	require.NoError(t, checkpoint.Restore(ctx, info.Path, restored, origin))
	r, err := store.Open(restored, nil)
	require.NoError(t, err)
	check(t, r)
	require.NoError(t, r.Close())

	// A reopened store has them.
	require.NoError(t, s.Close())
	s, err = store.Open(dir, nil)
	require.NoError(t, err)
	check(t, s)
}

func TestIngestSortedRefuses(t *testing.T) {
	ctx := context.Background()
	s, err := store.Open(t.TempDir(), nil)
	require.NoError(t, err)
	defer func() { _ = s.Close() }()
	pairs := func(keys ...string) func() ([]byte, []byte, bool) {
		return func() ([]byte, []byte, bool) {
			if len(keys) == 0 {
				return nil, nil, false
			}
			k := keys[0]
			keys = keys[1:]
			return []byte(k), []byte("v"), true
		}
	}
	for name, next := range map[string]func() ([]byte, []byte, bool){
		"out of order": pairs("a", "c", "b"),
		"duplicate":    pairs("a", "b", "b"),
		"empty key":    pairs("a", ""),
	} {
		t.Run(name, func(t *testing.T) {
			_, err := store.IngestSorted(ctx, s, next, 0)
			require.ErrorIs(t, err, store.ErrInvalid)
			_, err = s.Get([]byte("a"))
			require.ErrorIs(t, err, store.ErrNotFound, "nothing ingested")
		})
	}
	_, err = store.IngestSorted(ctx, s, pairs("a"), 10)
	require.ErrorIs(t, err, store.ErrInvalid, "targetFileBytes too small")
	st, err := store.IngestSorted(ctx, s, pairs(), 0)
	require.NoError(t, err)
	require.Zero(t, st.Files)

	require.NoError(t, s.Close())
	_, err = store.IngestSorted(ctx, s, pairs("a"), 0)
	require.ErrorIs(t, err, store.ErrClosed)
}

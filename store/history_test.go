package store

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// withBatches gives entries [from, to] BatchRefs of size n (the last one
// may be shorter).
func withBatches(es []Entry, n int) []Entry {
	for i := 0; i < len(es); i += n {
		end := min(i+n, len(es))
		ref := BatchRef{First: es[i].Index, Count: uint32(end - i), CRC: uint32(es[i].Index * 7)}
		for j := i; j < end; j++ {
			es[j].Batch = ref
		}
	}
	return es
}

// TestHistoryRecordsBatchEnds: each batch end's record survives a reopen
// and holds the running hash there; indexes inside a batch have none.
func TestHistoryRecordsBatchEnds(t *testing.T) {
	dir := t.TempDir()
	s := openTest(t, dir, nil)
	es := withBatches(genEntries(t, 1, 100), 10)
	_, err := s.Apply(es[:35]) // an Apply that ends inside a batch
	require.NoError(t, err)
	_, err = s.Apply(es[35:])
	require.NoError(t, err)
	want := map[uint64]RunHash{}
	for i := uint64(10); i <= 100; i += 10 {
		h, ok := s.RunHashAt(i)
		require.True(t, ok)
		want[i] = h
	}
	require.NoError(t, s.Close())

	s = openTest(t, dir, nil)
	for i := uint64(1); i <= 100; i++ {
		p, ok, err := s.PointAt(i)
		require.NoError(t, err)
		h, isEnd := want[i]
		require.Equal(t, isEnd, ok, "index %d", i)
		if !ok {
			continue
		}
		require.Equal(t, h, p.Hash, "index %d", i)
		require.Equal(t, genEpoch(i), p.Epoch)
		require.Equal(t, BatchRef{First: i - 9, Count: 10, CRC: uint32((i - 9) * 7)}, p.Batch)
	}
	cur := s.Position()
	require.EqualValues(t, 100, cur.Index)
	require.Equal(t, want[100], cur.Hash)
}

// TestHistoryPruned: records older than HistoryWindow below the applied
// index go, newer ones stay.
func TestHistoryPruned(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	total := uint64(HistoryWindow + 3*histPruneEvery)
	const chunk = 4000
	for first := uint64(1); first <= total; first += chunk {
		last := min(first+chunk-1, total)
		es := make([]Entry, 0, last-first+1)
		for i := first; i <= last; i++ {
			es = append(es, Entry{Index: i, Epoch: 1, Data: mustOps(t, set("k", "v"))})
		}
		_, err := s.Apply(withBatches(es, 100))
		require.NoError(t, err)
	}
	_, ok, err := s.PointAt(100)
	require.NoError(t, err)
	require.False(t, ok, "a record far below the window is pruned")
	_, ok, err = s.PointAt(((total-HistoryWindow)/100 + 1) * 100)
	require.NoError(t, err)
	require.True(t, ok, "a record inside the window stays")
}

package main

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/archive"
	"github.com/roomlog/roomlog/store"
)

func TestPickRestoreIndexes(t *testing.T) {
	var acked []uint64
	for i := uint64(1); i <= 100; i++ {
		acked = append(acked, i*10) // 10, 20, …, 1000
	}
	for seed := range uint64(50) {
		rng := rand.New(rand.NewPCG(seed, 1))
		got := pickRestoreIndexes(acked, 300, 800, 3, rng)
		require.Len(t, got, 3)
		require.True(t, slices.IsSorted(got))
		require.Len(t, slices.Compact(slices.Clone(got)), 3, "distinct: %v", got)
		// Two within (lo, covered], one above it (to be refused and
		// skipped).
		require.Greater(t, got[0], uint64(300))
		require.LessOrEqual(t, got[1], uint64(800))
		require.Greater(t, got[2], uint64(800))
		for _, x := range got {
			require.Contains(t, acked, x, "only acknowledged indexes")
		}
	}

	rng := rand.New(rand.NewPCG(7, 7))
	// Nothing acknowledged above the archive: every pick is archived.
	got := pickRestoreIndexes(acked, 0, 1000, 3, rng)
	require.Len(t, got, 3)
	require.LessOrEqual(t, got[2], uint64(1000))
	// Nothing archived in the window: only the one above.
	got = pickRestoreIndexes(acked, 500, 505, 3, rng)
	require.Len(t, got, 1)
	require.Greater(t, got[0], uint64(505))
	// Fewer candidates than picks.
	got = pickRestoreIndexes(acked, 970, 990, 3, rng)
	require.Equal(t, []uint64{980, 990, 1000}, got)
	// Nothing acknowledged in this incarnation.
	require.Empty(t, pickRestoreIndexes(nil, 0, 100, 3, rng))
	require.Empty(t, pickRestoreIndexes(acked, 0, 100, 0, rng))
	// covered below lo (an incarnation whose archive holds only what
	// precedes its seed): nothing in the window, one above.
	got = pickRestoreIndexes(acked, 500, 200, 3, rng)
	require.Len(t, got, 1)
	require.Greater(t, got[0], uint64(500))
}

func TestFallbackRestoreIndexes(t *testing.T) {
	acked := []uint64{5, 10, 15, 20, 25, 30}
	require.Equal(t, []uint64{25, 15, 10}, fallbackRestoreIndexes(acked, 0, 27, []uint64{20}, 3))
	require.Equal(t, []uint64{25, 20}, fallbackRestoreIndexes(acked, 15, 27, nil, 3), "none at or below lo")
	require.Empty(t, fallbackRestoreIndexes(acked, 30, 40, nil, 3))
}

func TestCompareRestore(t *testing.T) {
	h := store.RunHash{Index: 42, Base: 0}
	for i := range h.Sum {
		h.Sum[i] = byte(i)
	}
	sum := fmt.Sprintf("%x", h.Sum)
	other := strings.Repeat("ab", 32)

	v := compareRestore(h, []memberHash{{ID: "n0", Sum: sum}, {ID: "n1", Sum: sum}, {ID: "n2", Base: 17, Sum: other}})
	require.Equal(t, []string{"n0", "n1"}, v.Match)
	require.Empty(t, v.Mismatch)
	require.Equal(t, []string{"n2@base17"}, v.OtherBase, "another chain does not compare")
	require.True(t, v.Compared())

	v = compareRestore(h, []memberHash{{ID: "n0", Sum: sum}, {ID: "n1", Sum: other}})
	require.Equal(t, []string{"n0"}, v.Match)
	require.Equal(t, []string{"n1"}, v.Mismatch)

	v = compareRestore(h, []memberHash{{ID: "n2", Base: 17, Sum: sum}})
	require.False(t, v.Compared(), "only another chain: not compared")
	require.False(t, compareRestore(h, nil).Compared(), "no member keeps the hash")

	// The test hook: a perturbed restored hash mismatches every member
	// that matched, and the run fails, saying so in the CHAOS line.
	p := perturbRunHash(h)
	require.NotEqual(t, h.Sum, p.Sum)
	require.Equal(t, h.Index, p.Index)
	require.Equal(t, h.Base, p.Base)
	v = compareRestore(p, []memberHash{{ID: "n0", Sum: sum}, {ID: "n1", Sum: sum}})
	require.Empty(t, v.Match)
	require.Equal(t, []string{"n0", "n1"}, v.Mismatch)

	res := Result{Lifecycle: true, Converged: true}
	require.True(t, res.OK())
	res.RestoreMismatch = 1
	require.False(t, res.OK(), "a restore mismatch fails the run")
	require.Contains(t, res.Line(), " restore_mismatch=1 ")
	res.Kinds[RestoreCheck] = 1
	require.NotContains(t, res.Line(), "restore-check:-", "no gap is measured for it")
	res.RestoreMismatch, res.RestoreFailures = 0, 1
	require.False(t, res.OK(), "a failed restore fails the run")
	res.RestoreFailures, res.RestoreSkipped, res.RestoreUncompared = 0, 4, 1
	require.True(t, res.OK(), "skipped indexes and an uncompared step are not failures")
}

func TestCoveredBy(t *testing.T) {
	a := archive.Origin{Room: "r", RoomCzxid: 5, Fence: "epoch"}
	b := archive.Origin{Room: "r", RoomCzxid: 5, Fence: "epoch-00112233445566ff"}
	items := []archive.Item{
		{Kind: archive.KindChannel, Origin: a, First: 1, Last: 900},
		{Kind: archive.KindCheckpoint, Origin: a, First: 1200, Last: 1200},
		{Kind: archive.KindChannel, Origin: b, First: 801, Last: 1500},
	}
	c, n := coveredBy(items, a)
	require.Equal(t, uint64(1200), c)
	require.Equal(t, 2, n)
	c, _ = coveredBy(items, b)
	require.Equal(t, uint64(1500), c, "two incarnations with one czxid are told apart by the epoch znode")
	c, _ = coveredBy(items, archive.Origin{Room: "r", RoomCzxid: 9, Fence: "epoch"})
	require.Zero(t, c)
}

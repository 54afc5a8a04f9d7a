package archive

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Fences of re-seeded incarnations (logroom.SeedRoom draws such names).
const (
	fenceA = "epoch-00000000000000ab"
	fenceB = "epoch-00000000000000cd"
)

// TestSameCzxidTwoIncarnations: a wiped ensemble counts zxids from zero,
// so the re-seeded room can be created at the czxid the lost one had.
// Items of the two incarnations (same czxid, different epoch znode names)
// are kept apart: every put of both succeeds, a restore names either by
// (czxid, epoch znode) and rebuilds its state, and naming the czxid alone
// is refused (ErrAmbiguous) listing both. Before, both were filed under
// one folder: the second incarnation's puts failed with ErrConflict (the
// archive stopped, so deletion stopped and appends ended in ErrRoomFull).
func TestSameCzxidTwoIncarnations(t *testing.T) {
	ctx := context.Background()
	t0 := time.UnixMilli(1_700_000_000_000)
	lostO := Origin{Room: "r1", RoomCzxid: 0x5, Fence: "epoch"}
	newO := Origin{Room: "r1", RoomCzxid: 0x5, Fence: fenceA}
	lost := makeLogOf(t, lostO, t0, 60, 5, 20, 40)
	inService := makeLogOf(t, newO, t0.Add(time.Hour), 90, 5, 20, 40, 80)
	a, err := OpenDir(t.TempDir())
	require.NoError(t, err)
	lost.putAll(t, a)
	inService.putAll(t, a)
	lost.putAll(t, a) // idempotent, both
	inService.putAll(t, a)

	items, err := a.List(ctx, "r1")
	require.NoError(t, err)
	seen := map[Origin]int{}
	for _, it := range items {
		seen[it.Origin]++
	}
	require.Equal(t, map[Origin]int{lostO: len(lost.chans) + len(lost.ckpts), newO: len(inService.chans) + len(inService.ckpts)}, seen)

	for _, tc := range []struct {
		o    Origin
		want uint64
		l    *testLog
	}{{lostO, 60, lost}, {newO, 90, inService}} {
		t.Run(tc.o.ID(), func(t *testing.T) {
			res, err := Restore(ctx, RestoreOptions{Archive: a, Room: "r1", RoomCzxid: tc.o.RoomCzxid, RoomFence: tc.o.Fence, DataDir: t.TempDir()})
			require.NoError(t, err)
			require.Equal(t, tc.o, res.Origin)
			require.Equal(t, tc.want, res.Index)
			require.Equal(t, tc.l.run[tc.want], res.RunHash)
			res, err = Restore(ctx, RestoreOptions{Archive: a, Room: "r1", RoomCzxid: tc.o.RoomCzxid, RoomFence: tc.o.Fence,
				ToIndex: 50, DataDir: t.TempDir()})
			require.NoError(t, err)
			require.Equal(t, tc.l.state[50], res.StateHash)
		})
	}
	for name, opts := range map[string]RestoreOptions{
		"czxid only": {RoomCzxid: 0x5},
		"none named": {},
	} {
		t.Run(name, func(t *testing.T) {
			opts.Archive, opts.Room, opts.DataDir = a, "r1", t.TempDir()
			_, err := Restore(ctx, opts)
			require.ErrorIs(t, err, ErrAmbiguous)
			require.ErrorContains(t, err, "0x5/epoch:")
			require.ErrorContains(t, err, "0x5/"+fenceA+":")
		})
	}
	// An item whose record names another epoch znode than its folder is
	// foreign, not taken for the folder's incarnation.
	var victim Item
	for _, it := range items {
		if it.Origin == newO && it.Kind == KindChannel {
			victim = it
			break
		}
	}
	b, err := os.ReadFile(victim.Path)
	require.NoError(t, err)
	moved := filepath.Join(filepath.Dir(filepath.Dir(victim.Path)), "0000000000000005", chanName(victim.First, victim.Last)+"x")
	require.NoError(t, os.WriteFile(moved, b, 0o644))
	_, err = a.ReadChannel(ctx, Item{Kind: KindChannel, Origin: lostO, First: victim.First, Last: victim.Last, Path: moved})
	require.ErrorIs(t, err, ErrForeign)
}

// TestOriginNeedsFence: an origin without an epoch znode name, or with one
// no room can have, is refused by name, never filed as "epoch".
func TestOriginNeedsFence(t *testing.T) {
	ctx := context.Background()
	a, err := OpenDir(t.TempDir())
	require.NoError(t, err)
	l := makeLog(t, 10, 5, 10, 10)
	for fence, want := range map[string]string{"": "names no epoch znode", "epoch-xyz": `"epoch-xyz"`, "../x": `"../x"`} {
		ch := l.chans[0]
		ch.Origin.Fence = fence
		_, err := a.PutChannel(ctx, ch)
		require.ErrorContains(t, err, want)
		_, err = a.PutCheckpoint(ctx, ch.Origin, l.ckpts[0].Path)
		require.ErrorContains(t, err, want)
	}
	_, err = Restore(ctx, RestoreOptions{Archive: a, Room: "r1", RoomFence: "epoch", DataDir: t.TempDir()})
	require.ErrorContains(t, err, "RoomFence without RoomCzxid")
}

// TestLegacyLayoutReads: items of an incarnation whose epoch znode is
// "epoch" stay where v0.1.0 filed them (<room>/<czxid %016x>/, no fence
// in the folder name or the item's header), so archives written before
// read as that incarnation, and a v0.1.0 binary reads what this one adds
// there.
func TestLegacyLayoutReads(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	a, err := OpenDir(root)
	require.NoError(t, err)
	l := makeLog(t, 40, 5, 20, 20)
	l.putAll(t, a)
	ents, err := os.ReadDir(filepath.Join(root, "r1"))
	require.NoError(t, err)
	require.Len(t, ents, 1)
	require.Equal(t, "0000000000001234", ents[0].Name())
	b, err := os.ReadFile(filepath.Join(root, "r1", "0000000000001234", chanName(1, 20)))
	require.NoError(t, err)
	require.NotContains(t, string(b), "Fence")
	rec, err := os.ReadFile(filepath.Join(root, "r1", "0000000000001234", ckptName(20), itemName))
	require.NoError(t, err)
	require.NotContains(t, string(rec), "Fence")
	res, err := Restore(ctx, RestoreOptions{Archive: a, Room: "r1", RoomCzxid: 0x1234, RoomFence: "epoch", DataDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, uint64(40), res.Index)
	require.Equal(t, testOrigin, res.Origin)
}

func TestParseIncarnation(t *testing.T) {
	for in, want := range map[string]Origin{
		"0x5":                                    {RoomCzxid: 5},
		"31":                                     {RoomCzxid: 31},
		"0x5/epoch":                              {RoomCzxid: 5, Fence: "epoch"},
		"0x1f/" + fenceA:                         {RoomCzxid: 0x1f, Fence: fenceA},
		Origin{RoomCzxid: 7, Fence: fenceB}.ID(): {RoomCzxid: 7, Fence: fenceB},
	} {
		cz, f, err := ParseIncarnation(in)
		require.NoError(t, err, in)
		require.Equal(t, want, Origin{RoomCzxid: cz, Fence: f}, in)
	}
	for _, bad := range []string{"", "0", "-3", "x5", "0x5/", "0x5/epoch-1", "0x5/other", "/epoch"} {
		_, _, err := ParseIncarnation(bad)
		require.ErrorContains(t, err, "incarnation", bad)
	}
}

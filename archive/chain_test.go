package archive

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// chainArchive holds the incarnation lost with ZooKeeper (A: created by
// OpenRoom at czxid 0x500, indexes 1..60) and the one in service,
// re-seeded from A's index 60 in a wiped ensemble (B: czxid 0x3, a lower
// one; its checkpoint at 60 and channels 61..90), and, when extra is
// set, the items of extra.
type chainArchive struct {
	a        *Dir
	aO, bO   Origin
	aL, bL   *testLog
	reseeded time.Time
}

func newChainArchive(t *testing.T) *chainArchive {
	t.Helper()
	t0 := time.UnixMilli(1_700_000_000_000)
	c := &chainArchive{aO: Origin{Room: "r1", RoomCzxid: 0x500, Fence: "epoch"}, bO: Origin{Room: "r1", RoomCzxid: 0x3, Fence: fenceA},
		reseeded: t0.Add(50 * time.Minute)}
	c.aL = makeLogOf(t, c.aO, t0, 60, 5, 20, 40)
	c.bL = makeLogOf(t, c.bO, t0.Add(time.Hour), 90, 5, 30, 60)
	var err error
	c.a, err = OpenDir(t.TempDir())
	require.NoError(t, err)
	c.aL.putAll(t, c.a)
	ctx := context.Background()
	for _, ch := range c.bL.chans {
		if ch.First > 60 {
			_, err := c.a.PutChannel(ctx, ch)
			require.NoError(t, err)
		}
	}
	for _, ck := range c.bL.ckpts {
		_, err := c.a.PutCheckpoint(ctx, c.bO, ck.Path)
		require.NoError(t, err)
	}
	return c
}

func (c *chainArchive) bContinuesA(prev Origin) Incarnation {
	return Incarnation{Origin: c.bO, Reseeded: c.reseeded, Prev: prev, PrevIndex: 60}
}

// TestRestoreOrdersByReseedChain: with the re-seed chain recorded (B
// continues A from index 60), a restore that names no incarnation picks B,
// the one in service, although A's czxid is the higher: newest, --to-time
// now and --to-index all rebuild B. Where the chain cannot tell (no record
// for B, an incarnation the chain does not connect, two re-seeds from one
// predecessor, a predecessor named by a czxid two incarnations share), the
// restore is refused with ErrAmbiguous listing each incarnation and what
// the chain says of it. Before, there was no chain: every such restore
// was ErrAmbiguous.
func TestRestoreOrdersByReseedChain(t *testing.T) {
	ctx := context.Background()
	for name, prev := range map[string]Origin{
		"predecessor named":          {Room: "r1", RoomCzxid: 0x500, Fence: "epoch"},
		"predecessor by czxid alone": {RoomCzxid: 0x500},
	} {
		t.Run(name, func(t *testing.T) {
			c := newChainArchive(t)
			require.NoError(t, c.a.PutIncarnation(ctx, c.bContinuesA(prev)))
			for name, opts := range map[string]RestoreOptions{
				"newest":      {},
				"to time now": {ToTime: time.Now()},
				"to index":    {ToIndex: 80},
			} {
				t.Run(name, func(t *testing.T) {
					opts.Archive, opts.Room, opts.DataDir = c.a, "r1", t.TempDir()
					res, err := Restore(ctx, opts)
					require.NoError(t, err)
					require.Equal(t, c.bO, res.Origin)
					want := uint64(90)
					if opts.ToIndex != 0 {
						want = opts.ToIndex
					}
					require.Equal(t, want, res.Index)
					require.Equal(t, c.bL.state[want], res.StateHash)
					require.Contains(t, res.Chosen, "continuing 0x500")
				})
			}
			// Before B's seed: not B's; the error says where to look.
			for _, opts := range []RestoreOptions{{ToIndex: 30}, {ToTime: time.UnixMilli(1_700_000_000_000).Add(3 * time.Second)}} {
				opts.Archive, opts.Room, opts.DataDir = c.a, "r1", t.TempDir()
				_, err := Restore(ctx, opts)
				require.ErrorIs(t, err, ErrNotCovered)
				require.ErrorContains(t, err, "continuing 0x500")
				require.ErrorContains(t, err, "name it")
			}
			// Named, A still restores.
			res, err := Restore(ctx, RestoreOptions{Archive: c.a, Room: "r1", RoomCzxid: 0x500, DataDir: t.TempDir()})
			require.NoError(t, err)
			require.Equal(t, c.aL.run[60], res.RunHash)
			require.Empty(t, res.Chosen)
		})
	}

	refuse := func(t *testing.T, c *chainArchive, want ...string) {
		t.Helper()
		_, err := Restore(ctx, RestoreOptions{Archive: c.a, Room: "r1", DataDir: t.TempDir()})
		require.ErrorIs(t, err, ErrAmbiguous)
		for _, w := range append(want, "0x500/epoch:", "0x3/"+fenceA+":") {
			require.ErrorContains(t, err, w)
		}
	}
	t.Run("no record", func(t *testing.T) {
		refuse(t, newChainArchive(t), "no record of the re-seed")
	})
	t.Run("not connected", func(t *testing.T) {
		c := newChainArchive(t)
		require.NoError(t, c.a.PutIncarnation(ctx, c.bContinuesA(c.aO)))
		// Another room created under the name (by OpenRoom) later.
		other := makeLogOf(t, Origin{Room: "r1", RoomCzxid: 0x9, Fence: "epoch"}, time.Now(), 10, 5, 10)
		other.putAll(t, c.a)
		refuse(t, c, "0x9/epoch:", "does not connect", "continuing 0x500/epoch from index 60")
	})
	t.Run("two re-seeds of one predecessor", func(t *testing.T) {
		c := newChainArchive(t)
		require.NoError(t, c.a.PutIncarnation(ctx, c.bContinuesA(c.aO)))
		dO := Origin{Room: "r1", RoomCzxid: 0x3, Fence: fenceB}
		d := makeLogOf(t, dO, time.Now(), 10, 5, 10)
		d.putAll(t, c.a)
		require.NoError(t, c.a.PutIncarnation(ctx, Incarnation{Origin: dO, Reseeded: time.Now(), Prev: c.aO, PrevIndex: 60}))
		refuse(t, c, "two incarnations continue 0x500/epoch")
	})
	t.Run("predecessor czxid shared", func(t *testing.T) {
		c := newChainArchive(t)
		// B names czxid 0x500 only, and two archived incarnations have it.
		require.NoError(t, c.a.PutIncarnation(ctx, c.bContinuesA(Origin{RoomCzxid: 0x500})))
		eO := Origin{Room: "r1", RoomCzxid: 0x500, Fence: fenceB}
		makeLogOf(t, eO, time.Now(), 10, 5, 10).putAll(t, c.a)
		refuse(t, c, "which of 0x500/epoch, 0x500/"+fenceB+" is not recorded")
	})
}

// TestIncarnationRecord: a record is idempotent, another one for the same
// incarnation is ErrConflict, a damaged one reads as ErrCorrupt (and a put
// replaces it), and records that cannot be true are refused by name.
func TestIncarnationRecord(t *testing.T) {
	ctx := context.Background()
	a, err := OpenDir(t.TempDir())
	require.NoError(t, err)
	bO := Origin{Room: "r1", RoomCzxid: 0x3, Fence: fenceA}
	at := time.UnixMilli(1_700_000_000_000).UTC()
	inc := Incarnation{Origin: bO, Reseeded: at, Prev: Origin{Room: "r1", RoomCzxid: 0x500, Fence: "epoch"}, PrevIndex: 60}
	_, ok, err := a.ReadIncarnation(ctx, bO)
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, a.PutIncarnation(ctx, inc))
	require.NoError(t, a.PutIncarnation(ctx, inc))
	got, ok, err := a.ReadIncarnation(ctx, bO)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, inc, got)
	other := inc
	other.PrevIndex = 61
	require.ErrorIs(t, a.PutIncarnation(ctx, other), ErrConflict)

	p := filepath.Join(a.Root(), "r1", "0000000000000003-"+fenceA, incName)
	b, err := os.ReadFile(p)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(p, []byte(string(b[:len(b)-20])+"0000000000000000000\n"), 0o644))
	_, _, err = a.ReadIncarnation(ctx, bO)
	require.ErrorIs(t, err, ErrCorrupt)
	require.NoError(t, a.PutIncarnation(ctx, inc))
	got, _, err = a.ReadIncarnation(ctx, bO)
	require.NoError(t, err)
	require.Equal(t, inc, got)

	for name, bad := range map[string]Incarnation{
		"re-seeded with epoch":    {Origin: Origin{Room: "r1", RoomCzxid: 3, Fence: "epoch"}, Reseeded: at},
		"new fence, no re-seed":   {Origin: bO},
		"predecessor, no re-seed": {Origin: Origin{Room: "r1", RoomCzxid: 3, Fence: "epoch"}, Prev: inc.Prev, PrevIndex: 1},
		"continues itself":        {Origin: bO, Reseeded: at, Prev: bO, PrevIndex: 1},
		"bad predecessor fence":   {Origin: bO, Reseeded: at, Prev: Origin{RoomCzxid: 5, Fence: "x"}},
		"no fence":                {Origin: Origin{Room: "r1", RoomCzxid: 3}},
	} {
		require.Error(t, a.PutIncarnation(ctx, bad), name)
	}
}

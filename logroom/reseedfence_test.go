package logroom

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestReseedFenceSurvives: a writer of the room's previous incarnation that
// is still alive after the room was deleted and re-seeded must not land a
// write in the new incarnation, even when the new incarnation's first
// takeover brought the epoch znode back to the znode version the old writer
// holds. Before the fence was named per incarnation (SeedRoom created the
// epoch znode "epoch" anew at version 0) the old writer's append was
// acknowledged in the re-seeded room after the new primary's, and the new
// primary was then fenced by that ghost batch. Both incarnation pairs are
// checked: an original room re-seeded, and a re-seeded room re-seeded
// again.
func TestReseedFenceSurvives(t *testing.T) {
	needZK(t)
	zs := sharedZK(t)
	for _, reseedTwice := range []bool{false, true} {
		t.Run(fmt.Sprintf("seeded-before=%v", reseedTwice), func(t *testing.T) {
			ctx := testCtx(t, 60*time.Second)
			base := testBase(t)
			const name = "fence"
			cOld, cNew := dial(t, zs.Addrs()), dial(t, zs.Addrs())
			if reseedTwice {
				_, err := SeedRoom(ctx, cOld, base, name, Seed{Index: 100, Epoch: 5, Owner: "reseed"})
				require.NoError(t, err)
			}
			rOld, err := OpenRoom(ctx, cOld, name, RoomOptions{Base: base})
			require.NoError(t, err)
			old := newWriter(t, rOld, WriterConfig{Owner: "old"})
			last, err := old.Append(ctx, payload(1), payload(2))
			require.NoError(t, err)
			oldEpoch := old.Epoch()

			// The room is lost and re-seeded from a survivor at last, under
			// an epoch above the old writer's; the old writer lives on.
			require.NoError(t, DeleteRoom(ctx, cNew, base, name))
			_, err = SeedRoom(ctx, cNew, base, name, Seed{Index: last, Epoch: oldEpoch + 1, Owner: "reseed"})
			require.NoError(t, err)
			rNew, err := OpenRoom(ctx, cNew, name, RoomOptions{Base: base, NoCreate: true})
			require.NoError(t, err)
			nw := newWriter(t, rNew, WriterConfig{Owner: "new"})
			require.Greater(t, nw.Epoch(), oldEpoch)

			// The old writer's append, right after the new takeover, must not
			// be acknowledged...
			_, err = old.Append(ctx, []byte("ghost"))
			require.Error(t, err, "a writer of the lost incarnation appended to the re-seeded room")
			t.Logf("old writer: %v", err)
			require.True(t, errors.Is(err, ErrFenced) || errors.Is(err, ErrNoRoom) || errors.Is(err, ErrClosed),
				"the old writer's refusal says it was fenced: %v", err)

			// ... and nothing of it is in the new room: the new writer goes on,
			// and a reader sees exactly the new writer's entries.
			newLast, err := nw.Append(ctx, []byte("new-1"))
			require.NoError(t, err, "the new primary was fenced by the old incarnation's writer")
			require.Equal(t, last+1, newLast)
			more, err := nw.Append(ctx, []byte("new-2"))
			require.NoError(t, err)
			require.Equal(t, newLast+1, more)
			rd, err := rNew.Tail(ctx, last+1)
			require.NoError(t, err)
			defer rd.Close()
			got := readN(t, ctx, rd, 2)
			require.Equal(t, "new-1", string(got[0].Data))
			require.Equal(t, "new-2", string(got[1].Data))

			// Views read the fence under its recorded name.
			ep, err := ReadEpoch(ctx, cNew, base, name)
			require.NoError(t, err)
			require.Equal(t, nw.Epoch(), ep.Epoch)
			require.Equal(t, "new", ep.Owner)
		})
	}
}

// TestRecreatedRoomFence: a room deleted under a live writer and created
// again by OpenRoom (a member started on an empty disk before any
// survivor wrote a tombstone, or automation) has its epoch znode "epoch"
// created anew at version 0, and its first takeover brings it to the
// version the old writer checks. The old writer's append must still be
// refused (each writer's token under the epoch znode is gone with the old
// room), and the new writer must go on.
func TestRecreatedRoomFence(t *testing.T) {
	needZK(t)
	zs := sharedZK(t)
	ctx := testCtx(t, 60*time.Second)
	base := testBase(t)
	const name = "recreate"
	cOld, cNew := dial(t, zs.Addrs()), dial(t, zs.Addrs())
	rOld, err := OpenRoom(ctx, cOld, name, RoomOptions{Base: base})
	require.NoError(t, err)
	old := newWriter(t, rOld, WriterConfig{Owner: "old"})
	_, err = old.Append(ctx, payload(1), payload(2))
	require.NoError(t, err)

	require.NoError(t, DeleteRoom(ctx, cNew, base, name))
	rNew, err := OpenRoom(ctx, cNew, name, RoomOptions{Base: base})
	require.NoError(t, err)
	nw := newWriter(t, rNew, WriterConfig{Owner: "new"})

	_, err = old.Append(ctx, []byte("ghost"))
	require.ErrorIs(t, err, ErrFenced, "a writer of the deleted room appended to the re-created room")
	last, err := nw.Append(ctx, []byte("new-1"), []byte("new-2"))
	require.NoError(t, err, "the new writer was fenced by the deleted room's writer")
	rd, err := rNew.Tail(ctx, 1)
	require.NoError(t, err)
	defer rd.Close()
	got := readN(t, ctx, rd, int(last))
	require.Equal(t, "new-1", string(got[0].Data))
}

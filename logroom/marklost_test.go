package logroom

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMarkLost: a room marked lost fences its sitting writer at once,
// refuses a takeover and an OpenRoom with ErrRoomLost naming the text,
// still opens for inspection (re-seed, verify), and is left alone when
// the marker names another incarnation.
func TestMarkLost(t *testing.T) {
	needZK(t)
	zs := sharedZK(t)
	ctx := testCtx(t, 60*time.Second)
	base := testBase(t)
	c, c2 := dial(t, zs.Addrs()), dial(t, zs.Addrs())
	room, err := OpenRoom(ctx, c, "marked", RoomOptions{Base: base})
	require.NoError(t, err)
	w := newWriter(t, room, WriterConfig{Owner: "primary"})
	last, err := w.Append(ctx, payload(1), payload(2))
	require.NoError(t, err)
	info, err := ReadRoomInfo(ctx, c2, base, "marked")
	require.NoError(t, err)
	require.Empty(t, info.Lost)

	// Another incarnation (czxid, or the epoch znode's name of a room
	// re-seeded under the same czxid): nothing happens.
	marked, err := MarkLost(ctx, c2, base, "marked", info.Czxid+1, info.EpochZnode, "wrong incarnation")
	require.NoError(t, err)
	require.False(t, marked)
	marked, err = MarkLost(ctx, c2, base, "marked", info.Czxid, "epoch-0123456789abcdef", "wrong fence")
	require.NoError(t, err)
	require.False(t, marked)
	_, err = MarkLost(ctx, c2, base, "marked", info.Czxid, "../x", "bad name")
	require.ErrorIs(t, err, ErrBadName)
	_, err = w.Append(ctx, payload(3))
	require.NoError(t, err, "a marker for another incarnation fenced the writer")
	last++

	marked, err = MarkLost(ctx, c2, base, "marked", info.Czxid, info.EpochZnode, "member m1 found the log ends at 2, below 9 it applied")
	require.NoError(t, err)
	require.True(t, marked)
	marked, err = MarkLost(ctx, c2, base, "marked", info.Czxid, info.EpochZnode, "again")
	require.NoError(t, err, "marking twice is no error")
	require.True(t, marked)

	// The sitting writer is fenced at its next write.
	_, err = w.Append(ctx, []byte("after the mark"))
	require.ErrorIs(t, err, ErrFenced, "the writer of a room marked lost appended")

	// Refused by name everywhere a member would go on.
	got, err := ReadRoomInfo(ctx, c2, base, "marked")
	require.ErrorIs(t, err, ErrRoomLost)
	require.Contains(t, err.Error(), "below 9 it applied")
	require.NotContains(t, err.Error(), "again")
	require.Equal(t, info.Czxid, got.Czxid)
	require.Equal(t, info.EpochZnode, got.EpochZnode)
	require.Contains(t, got.Lost, "m1 found")
	_, err = OpenRoom(ctx, c2, "marked", RoomOptions{Base: base, NoCreate: true})
	require.ErrorIs(t, err, ErrRoomLost)
	_, err = OpenRoom(ctx, c2, "marked", RoomOptions{Base: base})
	require.ErrorIs(t, err, ErrRoomLost, "an empty member's OpenRoom")

	// Opened for inspection: readable, but no writer takes over.
	insp, err := OpenRoom(ctx, c2, "marked", RoomOptions{Base: base, NoCreate: true, Inspect: true})
	require.NoError(t, err)
	end, err := insp.CommittedIndex(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, last, end, "nothing was written after the mark")
	_, err = insp.NewWriter(ctx, WriterConfig{Owner: "next"})
	require.ErrorIs(t, err, ErrRoomLost, "a takeover of a room marked lost")
	ep, err := ReadEpoch(ctx, c2, base, "marked")
	require.NoError(t, err, "the epoch of a marked room can be read (re-seed)")
	require.Positive(t, ep.Epoch)

	// Deleting the marker by hand undoes the mark; a re-seed deletes the
	// old room, marker included.
	require.NoError(t, c2.Conn().Delete(RoomPath(base, "marked")+"/"+info.EpochZnode+"/"+lostNode, -1))
	_, err = ReadRoomInfo(ctx, c2, base, "marked")
	require.NoError(t, err)
	marked, err = MarkLost(ctx, c2, base, "marked", info.Czxid, info.EpochZnode, "marked again")
	require.NoError(t, err)
	require.True(t, marked)
	require.NoError(t, DeleteRoom(ctx, c2, base, "marked"))
	_, err = SeedRoom(ctx, c2, base, "marked", Seed{Index: last, Epoch: ep.Epoch + 1, Owner: "reseed"})
	require.NoError(t, err)
	_, err = ReadRoomInfo(ctx, c2, base, "marked")
	require.NoError(t, err)
	require.False(t, errors.Is(err, ErrRoomLost))
}

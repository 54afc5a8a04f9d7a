package logroom

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestDeleteChannelOnlyOldest: a channel whose predecessor still exists is
// not deleted. A deletion decided on a listing taken before ZooKeeper was
// restored from an older copy (chaos seed 906087811: channel 17 deleted
// after the copy brought channel 16 back) left a hole every reader then
// reported as corruption ("channel 18 follows channel 16").
func TestDeleteChannelOnlyOldest(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "delete-oldest")
	ctx := testCtx(t, 30*time.Second)
	w := newWriter(t, r, WriterConfig{})
	for ch := 0; ch < 2; ch++ {
		for i := 0; i < 3; i++ {
			_, err := w.Append(ctx, payload(ch*3+i))
			require.NoError(t, err)
		}
		_, err := w.Rotate(ctx)
		require.NoError(t, err)
	}
	err := r.DeleteChannel(ctx, 2)
	require.ErrorIs(t, err, ErrDeleteFenced)
	require.Contains(t, err.Error(), "channel 1")
	infos, err := r.Channels(ctx)
	require.NoError(t, err)
	require.Len(t, infos, 3, "nothing deleted: %+v", infos)
	require.False(t, infos[1].Deleting, "channel 2 was not even marked")

	require.NoError(t, r.DeleteChannel(ctx, 1))
	require.NoError(t, r.DeleteChannel(ctx, 2))
	infos, err = r.Channels(ctx)
	require.NoError(t, err)
	require.Len(t, infos, 1)
	require.Equal(t, uint64(3), infos[0].Num)
	_, err = r.CheckChain(ctx)
	require.NoError(t, err, "the chain holds after in-order deletions")
}

// TestDeleteChannelFenced: a deletion whose room changed after it read its
// fence (here another deleter's write to the channels znode; a restore from
// an older copy moves the same version) stops before writing anything.
func TestDeleteChannelFenced(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	other := dial(t, e.Addrs())
	r := openRoom(t, c, "delete-fenced")
	ctx := testCtx(t, 30*time.Second)
	w := newWriter(t, r, WriterConfig{})
	for i := 0; i < 3; i++ {
		_, err := w.Append(ctx, payload(i))
		require.NoError(t, err)
	}
	_, err := w.Rotate(ctx)
	require.NoError(t, err)

	testHookDeleteFence = func() {
		_, err := other.Conn().Set(r.Path(channelsNode), nil, -1)
		require.NoError(t, err)
	}
	defer func() { testHookDeleteFence = nil }()
	err = r.DeleteChannel(ctx, 1)
	require.ErrorIs(t, err, ErrDeleteFenced)
	require.Contains(t, err.Error(), "changed since the deletion began")
	infos, err := r.Channels(ctx)
	require.NoError(t, err)
	require.Len(t, infos, 2)
	require.False(t, infos[0].Deleting, "the fenced deletion wrote nothing")

	// Decided again, it deletes.
	testHookDeleteFence = nil
	require.NoError(t, r.DeleteChannel(ctx, 1))
	infos, err = r.Channels(ctx)
	require.NoError(t, err)
	require.Len(t, infos, 1)
	_, err = r.CheckChain(ctx)
	require.NoError(t, err)
}

// TestWriterDeleteChannelFenced: a deletion through a writer is behind its
// epoch fence: once a newer writer took over, the old one deletes nothing
// (a deposed primary's checkpointer, or one whose room was re-seeded under
// it), while the new one deletes.
func TestWriterDeleteChannelFenced(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "delete-writer-fenced")
	ctx := testCtx(t, 30*time.Second)
	old := newWriter(t, r, WriterConfig{})
	for i := 0; i < 3; i++ {
		_, err := old.Append(ctx, payload(i))
		require.NoError(t, err)
	}
	_, err := old.Rotate(ctx)
	require.NoError(t, err)
	require.NoError(t, old.DeleteChannel(ctx, 1), "the writer in office deletes")

	_, err = old.Append(ctx, payload(3))
	require.NoError(t, err)
	_, err = old.Rotate(ctx)
	require.NoError(t, err)
	c2 := dial(t, e.Addrs())
	r2 := openRoom(t, c2, "delete-writer-fenced")
	nw := newWriter(t, r2, WriterConfig{})
	err = old.DeleteChannel(ctx, 2)
	require.ErrorIs(t, err, ErrDeleteFenced)
	require.ErrorIs(t, err, ErrFenced)
	infos, err := r.Channels(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), infos[0].Num)
	require.False(t, infos[0].Deleting, "the fenced writer wrote nothing")
	require.NoError(t, nw.DeleteChannel(ctx, 2))
}

package logroom

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestTakeoverSkipsWhatAReaderVerified: a Writer taking over on a Room
// whose Reader delivered the open channel from its first batch on does
// not read those batches again when it seals the channel (a standby's
// takeover read every batch of the channel it had just applied), and the
// seal records the same end, batch count and bytes as a full scan. A
// batch removed from the verified prefix is still refused, and a Reader
// that started mid-channel verified no prefix.
func TestTakeoverSkipsWhatAReaderVerified(t *testing.T) {
	e := sharedZK(t)
	ctx := testCtx(t, 60*time.Second)
	// sealedBytes sums the data of channel num's batch znodes [1, last].
	sealedBytes := func(c *Client, r *Room, num uint64, last int) int64 {
		var n int64
		for i := 1; i <= last; i++ {
			d, _, err := c.Conn().Get(r.batchPath(num, uint64(i)))
			require.NoError(t, err)
			n += int64(len(d))
		}
		return n
	}
	for _, tc := range []struct {
		name       string
		tailFrom   uint64 // the standby's reader starts here
		read       int    // entries it reads (one batch each)
		removeAt   uint64 // a foreign client deletes this batch (0: none)
		recreate   bool   // the room is deleted and created again, the same 30 batches written
		wantSkip   int
		wantRefuse bool
	}{
		{name: "prefix read", tailFrom: 1, read: 20, wantSkip: 20},
		{name: "reader started mid-channel", tailFrom: 11, read: 10, wantSkip: 0},
		{name: "batch removed from the prefix", tailFrom: 1, read: 20, removeAt: 7, wantRefuse: true},
		// The room deleted and created again under the reader's Room:
		// channel 1, first index 1 and epoch 1 again, and 30 batches of
		// the same entries, so only the channel znode's czxid tells the
		// reader's prefix (20 batches of the old incarnation) from them:
		// it must not be used.
		{name: "room created again", tailFrom: 1, read: 20, recreate: true, wantSkip: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			room := fmt.Sprintf("readprefix-%d", time.Now().UnixNano())
			ca, cb := dial(t, e.Addrs()), dial(t, e.Addrs())
			ra, rb := openRoom(t, ca, room), openRoom(t, cb, room)
			wa := newWriter(t, ra, WriterConfig{Owner: "a", MaxInFlight: 1})
			for i := 1; i <= 30; i++ {
				_, err := wa.Append(ctx, payload(i))
				require.NoError(t, err)
			}
			rd, err := rb.Tail(ctx, tc.tailFrom)
			require.NoError(t, err)
			readN(t, ctx, rd, tc.read)
			require.NoError(t, rd.Close())
			if tc.removeAt != 0 {
				require.NoError(t, ca.Conn().Delete(ra.batchPath(1, tc.removeAt), -1))
			}
			wantLast := uint64(30)
			if tc.recreate {
				require.NoError(t, wa.Close())
				require.NoError(t, DeleteRoom(ctx, ca, testBase(t), room))
				ra2 := openRoom(t, ca, room)
				wa2 := newWriter(t, ra2, WriterConfig{Owner: "a2", MaxInFlight: 1})
				require.Equal(t, uint64(1), wa2.Epoch(), "the new incarnation restarts at epoch 1")
				for i := 1; i <= 30; i++ {
					_, err := wa2.Append(ctx, payload(i))
					require.NoError(t, err)
				}
			}
			wb, err := rb.NewWriter(ctx, WriterConfig{Owner: "b"})
			if tc.wantRefuse {
				require.ErrorIs(t, err, ErrCorrupt, "a batch removed from the prefix the reader verified")
				return
			}
			require.NoError(t, err)
			defer wb.Close()
			require.Equal(t, wantLast+1, wb.StartIndex())
			require.Equal(t, tc.wantSkip, wb.skippedScan, "batches of the sealed channel not read again")
			m, _, err := rb.readChannel(ctx, 1)
			require.NoError(t, err)
			require.True(t, m.Sealed)
			require.Equal(t, wantLast, m.Last)
			require.Equal(t, int(wantLast), m.Batches)
			require.Equal(t, sealedBytes(cb, rb, 1, int(wantLast)), m.Bytes, "the seal's bytes equal the batches' data")
		})
	}
}

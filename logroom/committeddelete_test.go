package logroom

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCommittedIndexAcrossDeletion: CommittedIndex read the last channel's
// meta while it was open, then walked its batches; if a checkpoint sealed
// that channel and deleted it in between (what a primary does under its
// retention bound while standbys audit), the walk found a batch missing
// and returned the index before it as the end of the log. Every standby
// auditing at that moment then saw "the primary published index N as
// applied, but the log ends at M < N" and failed with ErrRoomLost (a
// clean-clone TestAlertsLive run: three members failed after the room was
// filled and checkpointed). Both interleavings are run: the channel
// deleted, and only sealed (its batches still there, the next channel
// holding the new entries).
func TestCommittedIndexAcrossDeletion(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	for _, tc := range []struct {
		name   string
		delete bool
	}{{"sealed and deleted", true}, {"sealed only", false}} {
		t.Run(tc.name, func(t *testing.T) {
			r := openRoom(t, c, "committed-delete")
			w := newWriter(t, r, WriterConfig{Compression: CompressionNone, maxBatchEntries: 1})
			ctx := testCtx(t, time.Minute)
			for i := range 40 {
				_, err := w.Append(ctx, payload(i))
				require.NoError(t, err)
			}
			ran := false
			committedWalkHook = func(num uint64) {
				if ran || num != 1 {
					return
				}
				ran = true
				_, err := w.Rotate(ctx)
				require.NoError(t, err)
				for i := range 5 {
					_, err := w.Append(ctx, payload(100+i))
					require.NoError(t, err)
				}
				if tc.delete {
					require.NoError(t, r.DeleteChannel(ctx, 1))
				}
			}
			t.Cleanup(func() { committedWalkHook = nil })
			end, err := r.CommittedIndex(ctx, 10)
			require.NoError(t, err)
			require.True(t, ran, "the hook ran between the meta read and the walk")
			require.Equal(t, uint64(45), end, "the log ends where the writer's next channel ends")
		})
	}
}

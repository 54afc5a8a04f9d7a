package archive

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRestoreSeveralIncarnationsNeedsOne: an archive holding items of two
// incarnations of a room (the first lost with ZooKeeper, the one in
// service created in a wiped ensemble, whose zxids started again from
// zero, so its czxid is the lower) never picks one by czxid: a restore
// that names none is refused with ErrAmbiguous listing both, what each
// covers and when its last archived batch committed; naming one restores
// it. Before, the highest czxid was taken as the newest: "newest",
// --to-time now and --to-index all went to the lost incarnation.
func TestRestoreSeveralIncarnationsNeedsOne(t *testing.T) {
	ctx := context.Background()
	t0 := time.UnixMilli(1_700_000_000_000)
	lost := makeLogOf(t, Origin{Room: "r1", RoomCzxid: 0x500}, t0, 60, 5, 20, 40)
	inService := makeLogOf(t, Origin{Room: "r1", RoomCzxid: 0x3}, t0.Add(time.Hour), 90, 5, 30, 60)
	a, err := OpenDir(t.TempDir())
	require.NoError(t, err)
	lost.putAll(t, a)
	inService.putAll(t, a)

	for name, opts := range map[string]RestoreOptions{
		"newest":      {},
		"to time now": {ToTime: time.Now()},
		"to index":    {ToIndex: 80},
	} {
		t.Run(name, func(t *testing.T) {
			opts.Archive, opts.Room, opts.DataDir = a, "r1", t.TempDir()
			_, err := Restore(ctx, opts)
			require.ErrorIs(t, err, ErrAmbiguous)
			for _, want := range []string{"0x500", "0x3:", "indexes 1..60", "indexes 1..90",
				t0.Add(11 * time.Second).UTC().Format(time.RFC3339), t0.Add(time.Hour + 17*time.Second).UTC().Format(time.RFC3339)} {
				require.ErrorContains(t, err, want)
			}
		})
	}
	for _, tc := range []struct {
		czxid int64
		want  uint64
		l     *testLog
	}{{0x3, 90, inService}, {0x500, 60, lost}} {
		t.Run(fmt.Sprintf("named 0x%x", tc.czxid), func(t *testing.T) {
			res, err := Restore(ctx, RestoreOptions{Archive: a, Room: "r1", RoomCzxid: tc.czxid, DataDir: t.TempDir()})
			require.NoError(t, err)
			require.Equal(t, tc.want, res.Index)
			require.Equal(t, tc.l.run[tc.want], res.RunHash)
		})
	}
	res, err := Restore(ctx, RestoreOptions{Archive: a, Room: "r1", RoomCzxid: 0x3, ToIndex: 80, DataDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, inService.state[80], res.StateHash)
}

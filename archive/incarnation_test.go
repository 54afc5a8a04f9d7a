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
	lost := makeLogOf(t, Origin{Room: "r1", RoomCzxid: 0x500, Fence: "epoch"}, t0, 60, 5, 20, 40)
	inService := makeLogOf(t, Origin{Room: "r1", RoomCzxid: 0x3, Fence: "epoch"}, t0.Add(time.Hour), 90, 5, 30, 60)
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
			for _, want := range []string{"0x500/epoch:", "0x3/epoch:", "indexes 1..60", "indexes 1..90",
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

// TestRestoreToTimePastArchivedBatches: a time later than every archived
// batch resolves to the newest archived index, the checkpoint at 250 above
// the last archived channel (210), when that checkpoint was made at or
// before the time; a time before the checkpoint was made cannot be
// resolved past 210, and the result says it was cut back (Cut, CutReason).
// Before, both resolved to 210, silently.
func TestRestoreToTimePastArchivedBatches(t *testing.T) {
	ctx := context.Background()
	l := makeLog(t, 250, 5, 30, 210, 250)
	a, err := OpenDir(t.TempDir())
	require.NoError(t, err)
	for _, ch := range l.chans {
		if ch.Last <= 210 {
			_, err := a.PutChannel(ctx, ch)
			require.NoError(t, err)
		}
	}
	for _, c := range l.ckpts {
		_, err := a.PutCheckpoint(ctx, testOrigin, c.Path)
		require.NoError(t, err)
	}
	require.Equal(t, uint64(250), l.ckpts[len(l.ckpts)-1].Manifest.Index)
	made := l.ckpts[len(l.ckpts)-1].Manifest.Created

	res, err := Restore(ctx, RestoreOptions{Archive: a, Room: "r1", ToTime: made.Add(time.Minute), DataDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, uint64(250), res.Index, "the newest archived index (the checkpoint)")
	require.Equal(t, l.state[250], res.StateHash)
	require.True(t, res.Cut, "entries after 250 committed before the time are not archived")
	require.Contains(t, res.CutReason, "250")

	// Past the batches but before the checkpoint at 250 was made: the
	// archive cannot tell when 211..250 committed.
	res, err = Restore(ctx, RestoreOptions{Archive: a, Room: "r1", ToTime: l.t0.Add(24 * time.Hour), DataDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, uint64(210), res.Index)
	require.Equal(t, l.state[210], res.StateHash)
	require.True(t, res.Cut)
	require.Contains(t, res.CutReason, "210")

	// Within the archived batches: exact, not cut.
	res, err = Restore(ctx, RestoreOptions{Archive: a, Room: "r1", ToTime: l.t0.Add(9 * time.Second), DataDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, uint64(50), res.Index)
	require.False(t, res.Cut)
}

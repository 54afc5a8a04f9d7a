package archive

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/checkpoint"
)

// TestDamagedSharedTableKeepsRestorePoints: checkpoint items share an
// unchanged table by hard link, but no file is shared by more than two
// items, so one flipped byte takes at most two restore points: the third
// checkpoint holds its own copy and restores; a restore between the
// damaged ones falls back to an older restore point (here the log's first
// channel) and says which checkpoints it skipped and that the damaged
// file is shared. Before, every checkpoint of the incarnation linked the
// same file and all of them failed.
func TestDamagedSharedTableKeepsRestorePoints(t *testing.T) {
	ctx := context.Background()
	var l *testLog
	var common []string
	for attempt := 0; ; attempt++ {
		// The first checkpoint flushes 200 entries into a table; the next
		// two (5 entries each, below the flush threshold) carry their WAL
		// and the same table.
		l = makeLogFlush(t, testOrigin, time.UnixMilli(1_700_000_000_000), 8<<10, 300, 5, 1000, 200, 205, 210)
		require.Len(t, l.ckpts, 3)
		c01 := commonTables(t, l.ckpts[0].Path, l.ckpts[1].Path)
		common = nil
		for _, n := range commonTables(t, l.ckpts[1].Path, l.ckpts[2].Path) {
			if slices.Contains(c01, n) {
				common = append(common, n)
			}
		}
		if len(common) > 0 {
			break
		}
		require.Less(t, attempt, 5, "the three checkpoints never shared a table")
	}
	a, err := OpenDir(t.TempDir())
	require.NoError(t, err)
	l.putAll(t, a)
	var items []Item
	for _, i := range []uint64{200, 205, 210} {
		it, ok, err := a.Lookup(ctx, testOrigin, KindCheckpoint, i, i)
		require.NoError(t, err)
		require.True(t, ok)
		items = append(items, it)
	}
	same := func(x, y Item, name string) bool {
		fx, err1 := os.Stat(filepath.Join(x.Path, checkpoint.DBDir, name))
		fy, err2 := os.Stat(filepath.Join(y.Path, checkpoint.DBDir, name))
		return err1 == nil && err2 == nil && os.SameFile(fx, fy)
	}
	name := common[0]
	require.True(t, same(items[0], items[1], name), "the second item links the first's table")
	require.False(t, same(items[1], items[2], name), "a file already shared by two items is copied, not linked a third time")

	victim := filepath.Join(items[1].Path, checkpoint.DBDir, name)
	b, err := os.ReadFile(victim)
	require.NoError(t, err)
	b[len(b)/2] ^= 1
	require.NoError(t, os.WriteFile(victim, b, 0o644))

	_, _, err = a.OpenCheckpoint(ctx, items[1])
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorContains(t, err, victim)
	require.ErrorContains(t, err, "checkpoint at index 200", "the error names the other item sharing the file")

	res, err := Restore(ctx, RestoreOptions{Archive: a, Room: "r1", ToIndex: 250, DataDir: t.TempDir()})
	require.NoError(t, err)
	require.Equal(t, uint64(210), res.Checkpoint, "the third checkpoint holds its own copy")
	require.Equal(t, l.state[250], res.StateHash)

	res, err = Restore(ctx, RestoreOptions{Archive: a, Room: "r1", ToIndex: 207, DataDir: t.TempDir()})
	require.NoError(t, err, "falls back to an older restore point")
	require.Equal(t, uint64(207), res.Index)
	require.Equal(t, l.state[207], res.StateHash)
	require.Equal(t, l.run[207], res.RunHash)
	require.Zero(t, res.Checkpoint, "both damaged checkpoints skipped: from the log's first channel")
	require.Len(t, res.Skipped, 2)
	require.Contains(t, fmt.Sprint(res.Skipped), victim)
}

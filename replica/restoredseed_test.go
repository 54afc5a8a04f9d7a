package replica

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/archive"
)

// TestRestoredSeedServesEmptyStandby: a data dir archive.Restore built
// (no local checkpoint) seeds a new room; the seed and a member started
// on an empty disk run with nothing written. The empty member must reach
// the seed's index within seconds and stop reporting a tail error: the
// seed offers a checkpoint at once when the log starts past its last
// one. Before, the seed checkpointed only when something was written and
// a checkpoint came due, and the empty member sat at index 0 with its
// tail error saying there was no checkpoint source.
func TestRestoredSeedServesEmptyStandby(t *testing.T) {
	ens := sharedEnsemble(t)
	arch, err := archive.OpenDir(t.TempDir())
	require.NoError(t, err)
	c := newCluster(t, ens, func(cfg *Config) { cfg.Archive = arch })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c.openN(1)
	p := c.waitPrimary(20 * time.Second)
	var at uint64
	for i := 0; i < 200; i++ {
		res, err := p.Propose(ctx, setOp(fmt.Sprint("k", i%13), fmt.Sprint(i)))
		require.NoError(t, err)
		if i == 149 {
			at = res.Index
		}
	}
	require.NoError(t, p.Checkpoint(ctx))
	require.Eventually(t, func() bool { return p.ArchiveStatus().Index >= at }, 20*time.Second, 10*time.Millisecond)
	c.close(p.ID())

	// The restored room: a new name, the seed's data dir restored from
	// the archive at an index between checkpoints.
	c2 := newCluster(t, ens, nil)
	seedDir := c2.config("seed").DataDir
	res, err := archive.Restore(ctx, archive.RestoreOptions{Archive: arch, Room: c.room, ToIndex: at, DataDir: seedDir})
	require.NoError(t, err)
	require.Equal(t, at, res.Index)
	_, err = Reseed(ctx, ReseedConfig{Servers: ens.Addrs(), Room: c2.room, DataDirs: []string{seedDir}, Logger: testLogger(t)})
	require.NoError(t, err)
	seed := c2.open("seed")
	require.Eventually(t, func() bool { return seed.Status().Role == RolePrimary }, 30*time.Second, 10*time.Millisecond)
	require.Equal(t, at, seed.Status().Applied)

	// An empty member joins; nothing is written.
	start := time.Now()
	sb := c2.open("empty")
	var st Status
	ok := assertEventually(10*time.Second, func() bool {
		st = sb.Status()
		return st.Applied == at && st.TailErr == nil
	})
	require.True(t, ok, "the empty member is at %d of %d after %v, tail error %v (seed's checkpoint: %d)",
		st.Applied, at, time.Since(start).Round(time.Millisecond), st.TailErr, seed.Status().CheckpointIndex)
	t.Logf("the empty member reached %d in %v (seed's checkpoint at %d)", at, time.Since(start).Round(time.Millisecond), seed.Status().CheckpointIndex)
	h, idx, err := sb.StateHash()
	require.NoError(t, err)
	require.Equal(t, at, idx)
	require.Equal(t, res.StateHash, h)
}

// assertEventually polls cond every 20 ms until it holds (true) or d
// passed (false).
func assertEventually(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(20 * time.Millisecond) // polling a member's status: no event to wait on
	}
	return true
}

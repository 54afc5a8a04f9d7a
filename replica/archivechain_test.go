package replica

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/archive"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
)

// TestArchiveFollowsReseedChain: a room archived, lost with a wiped
// ZooKeeper, and re-seeded from its member's data dir keeps archiving
// into the same archive; the new incarnation (zxids counted from zero
// again, a new epoch znode name) is filed apart from the lost one, records
// the incarnation it continues and from which index, and a restore that
// names no incarnation rebuilds the one in service. Before, the new
// incarnation recorded nothing and such a restore was refused
// (ErrAmbiguous).
func TestArchiveFollowsReseedChain(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	arch, err := archive.OpenDir(t.TempDir())
	require.NoError(t, err)
	cl := newCluster(t, ens, func(cfg *Config) { cfg.Archive = arch })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl.openN(1)
	p := cl.waitPrimary(30 * time.Second)
	propose := func(p *Replica, n int, tag string) uint64 {
		var last uint64
		for i := 0; i < n; i++ {
			res, err := p.Propose(ctx, setOp(fmt.Sprint("k", i%11), fmt.Sprint(tag, i)))
			require.NoError(t, err)
			last = res.Index
		}
		require.NoError(t, p.Checkpoint(ctx)) // seals the channel: archived
		require.Eventually(t, func() bool { return p.ArchiveStatus().Index >= last }, 30*time.Second, 10*time.Millisecond)
		return last
	}
	lastLost := propose(p, 60, "lost")
	lostO := p.archiveOrigin()
	cfg := cl.config(p.ID())
	cl.close(p.ID())

	require.NoError(t, ens.WipeData(ctx))
	rs, err := Reseed(ctx, ReseedConfig{Servers: ens.Addrs(), Room: cl.room, DataDirs: []string{cfg.DataDir}, Logger: testLogger(t)})
	require.NoError(t, err)
	require.Equal(t, lastLost, rs.Seed.Index)
	require.NotEmpty(t, rs.EpochZnode)
	r, err := Open(ctx, cfg)
	require.NoError(t, err)
	defer r.Close()
	require.Eventually(t, func() bool { return r.Status().Role == RolePrimary }, 30*time.Second, 10*time.Millisecond)
	last := propose(r, 40, "new")
	newO := r.archiveOrigin()
	t.Logf("lost incarnation %s, in service %s", lostO.ID(), newO.ID())
	require.Equal(t, archive.Origin{Room: cl.room, RoomCzxid: rs.Czxid, Fence: rs.EpochZnode}, newO)
	require.NotEqual(t, lostO, newO)

	inc, ok, err := arch.ReadIncarnation(ctx, newO)
	require.NoError(t, err)
	require.True(t, ok, "the new incarnation's record")
	require.Equal(t, lostO, inc.Prev)
	require.Equal(t, lastLost, inc.PrevIndex)

	for name, opts := range map[string]archive.RestoreOptions{
		"newest":      {},
		"to time now": {ToTime: time.Now()},
	} {
		t.Run(name, func(t *testing.T) {
			opts.Archive, opts.Room, opts.DataDir = arch, cl.room, t.TempDir()
			res, err := archive.Restore(ctx, opts)
			require.NoError(t, err)
			require.Equal(t, newO, res.Origin)
			require.GreaterOrEqual(t, res.Index, last)
			h, ok := r.runHashAt(res.Index)
			require.True(t, ok)
			require.Equal(t, h, res.RunHash)
		})
	}
}

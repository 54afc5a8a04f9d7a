package replica

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/store"
)

// TestReseedOverEarlierIncarnation: ZooKeeper is wiped and the room
// re-seeded; later ZooKeeper is restored from a copy taken before the
// wipe, so it holds the room's earlier incarnation, whose log the
// survivors applied long ago. Re-seeding from the survivors loses nothing
// of that log (the seed's history holds its last batch at its index), so
// Reseed goes ahead without Force, and the room comes back with every
// acknowledged entry. (Found by `go run ./chaos -lifecycle -seed 2
// -faults 3 -force zk-wipe-reseed,zk-rollback-reseed,kill-primary`: the
// re-seed refused, saying it "would delete" entries 1..56 that every
// survivor held.)
func TestReseedOverEarlierIncarnation(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	cl := newCluster(t, ens, nil)
	cl.openN(3)
	p := cl.waitPrimary(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	var last uint64
	propose := func(p *Replica, from, to int) {
		for i := from; i < to; i++ {
			res, err := p.ProposeRequest(ctx, store.RequestIDFromKey(reqKey(i)), setOp(fmt.Sprintf("k%03d", i), fmt.Sprintf("v%d", i)))
			require.NoError(t, err)
			last = res.Index
		}
	}
	// loseAndReseed waits until every member failed with ErrRoomLost,
	// closes them and re-seeds from their data dirs.
	loseAndReseed := func(what string, lose func() error) ReseedResult {
		cl.waitConverged(last, 30*time.Second)
		require.NoError(t, lose(), what)
		require.Eventually(t, func() bool {
			for _, r := range cl.all() {
				if r.Status().Role != RoleFailed {
					return false
				}
			}
			return true
		}, 20*time.Second, 10*time.Millisecond, "%s: every member fails", what)
		var dirs []string
		for _, r := range cl.all() {
			dirs = append(dirs, cl.config(r.ID()).DataDir)
			cl.close(r.ID())
		}
		res, err := Reseed(ctx, ReseedConfig{Servers: ens.Addrs(), Room: cl.room, DataDirs: dirs, SessionTimeout: 4 * time.Second, Logger: testLogger(t)})
		require.NoError(t, err, "%s: reseed", what)
		t.Logf("%s: re-seeded at %d from %s (previous: %s)", what, res.Seed.Index, res.From, res.Previous)
		require.Equal(t, last, res.Seed.Index)
		return res
	}

	propose(p, 0, 40)
	require.NoError(t, p.Checkpoint(ctx))
	propose(p, 40, 60)
	cp, err := ens.CopyData(t.TempDir())
	require.NoError(t, err)
	propose(p, 60, 100)

	loseAndReseed("wipe", func() error {
		wctx, wcancel := context.WithTimeout(ctx, 90*time.Second)
		defer wcancel()
		return ens.WipeData(wctx)
	})
	cl.openN(3)
	p = cl.waitPrimary(30 * time.Second)
	propose(p, 100, 150)

	// ZooKeeper comes back with the tree of before the wipe: the room's
	// earlier incarnation, its log a prefix of what every survivor holds.
	loseAndReseed("restore of the earlier incarnation", func() error {
		rctx, rcancel := context.WithTimeout(ctx, 90*time.Second)
		defer rcancel()
		return ens.RestoreData(rctx, cp)
	})
	reps := cl.openN(3)
	p = cl.waitPrimary(30 * time.Second)
	next, err := p.Propose(ctx, setOp("after", "reseed"))
	require.NoError(t, err)
	require.Greater(t, next.Index, last)
	cl.waitConverged(next.Index, 30*time.Second)
	for i := range 150 {
		for _, r := range reps {
			v, err := r.Get([]byte(fmt.Sprintf("k%03d", i)))
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("v%d", i), string(v))
		}
	}
}

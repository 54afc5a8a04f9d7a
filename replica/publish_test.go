package replica

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestMemberPublishPace: under a steady load a standby rewrites its member
// znode about once per MemberUpdateInterval, at most twice (each rewrite
// is a quorum write competing with appends: 300 members of 100 rooms
// rewriting ten times a second starved the rooms), once the load stops its
// final applied index is published within the interval, and a primary
// handing over (CatchUp in its member data) sees it at once.
func TestMemberPublishPace(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil) // default MemberUpdateInterval (1s)
	c.openN(2)
	p := c.waitPrimary(20 * time.Second)
	s := c.other(p)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	path := p.room.Path(membersDir, s.ID())
	version := func() int32 {
		_, st, err := p.conn.Get(path)
		require.NoError(t, err)
		return st.Version
	}

	v0 := version()
	const run = 3 * time.Second
	var n atomic.Int64
	lctx, lcancel := context.WithTimeout(ctx, run)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; lctx.Err() == nil; i++ {
				if _, err := p.Propose(lctx, setOp(fmt.Sprintf("w%d/%d", w, i%50), "v")); err == nil {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	lcancel()
	writes := version() - v0
	t.Logf("%d proposals in %v; standby member znode rewritten %d times", n.Load(), run, writes)
	require.Greater(t, n.Load(), int64(100), "too little load to say anything")
	// 3 intervals, each with at most one settled publish, and the edges.
	require.LessOrEqual(t, writes, int32(3*2+2), "member data rewritten too often under load")

	// Load stopped: the final index shows within the interval.
	last := p.Status().Applied
	start := time.Now()
	require.Eventually(t, func() bool {
		m, ok := p.member(s.ID())
		return ok && m.Applied >= last
	}, 5*time.Second, 5*time.Millisecond, "the standby's final applied index is published")
	took := time.Since(start)
	t.Logf("final applied index visible to the primary after %v", took)
	require.Less(t, took, 1500*time.Millisecond, "a settled applied index waited past the interval")

	// Asked: the primary's CatchUp makes the standby publish as soon as it
	// applied the index, whatever its own pace. Spend the standby's settled
	// publish first (one entry, applied and published), then ask for the
	// next one.
	res, err := p.Propose(ctx, setOp("ask/0", "v"))
	require.NoError(t, err)
	require.Eventually(t, func() bool { m, ok := p.member(s.ID()); return ok && m.Applied >= res.Index }, 5*time.Second, 5*time.Millisecond, "first entry published")
	for i := 1; i <= 3; i++ {
		res, err = p.Propose(ctx, setOp(fmt.Sprintf("ask/%d", i), "v"))
		require.NoError(t, err)
		p.catchUp.Store(res.Index)
		start = time.Now()
		require.Eventually(t, func() bool { m, ok := p.member(s.ID()); return ok && m.Applied >= res.Index }, 5*time.Second, 5*time.Millisecond, "asked index published")
		took = time.Since(start)
		t.Logf("asked index %d visible to the primary after %v", res.Index, took)
		require.Less(t, took, 400*time.Millisecond, "an asked-for index waited for the standby's own pace")
	}
	p.catchUp.Store(0)
}

package replica

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/logroom"
)

// TestWronglyDeposedPrimaryStepsDown: a live primary whose candidate node
// is deleted (what a standby's liveness deposition does when its proof was
// wrong: a proxy that resets connections) must stop saying primary within
// about a second, without writing anything: its candidate is gone and the
// next in line takes the epoch. Before the term watched its candidate and
// the epoch znode, the old primary went on reporting primary (Status,
// member data) until its own next write was fenced — with an idle room,
// for as long as nobody proposed.
func TestWronglyDeposedPrimaryStepsDown(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	c.openN(2)
	p := c.waitPrimary(30 * time.Second)
	s := c.other(p)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := c.proposeRetry(ctx, setOp("k", "v"))
	require.NoError(t, err)
	oldEpoch := p.Status().Epoch

	// Delete p's candidate node as a deposition does (exactly the node,
	// version 0), from a client of our own: no write of p's follows.
	cl, err := logroom.Dial(ctx, logroom.DialConfig{Servers: ens.Addrs(), SessionTimeout: 4 * time.Second})
	require.NoError(t, err)
	defer cl.Close()
	dir := logroom.RoomPath(logroom.DefaultBase, c.room, electionDir)
	kids, _, err := cl.Conn().Children(dir)
	require.NoError(t, err)
	node := ""
	for _, k := range kids {
		data, _, err := cl.Conn().Get(dir + "/" + k)
		require.NoError(t, err)
		if strings.Contains(string(data), p.cfg.ID) && strings.Contains(k, *p.live.guid.Load()) {
			node = k
		}
	}
	require.NotEmpty(t, node, "p's candidate node among %v", kids)
	_, err = cl.Conn().Multi(&zk.CheckVersionRequest{Path: dir + "/" + node, Version: 0}, &zk.DeleteRequest{Path: dir + "/" + node, Version: 0})
	require.NoError(t, err)
	deposed := time.Now()

	// A Barrier asked of the old primary as it is deposed answers
	// promptly: a read point once it follows the new primary, or that it
	// is not the primary — never a wait until the caller gives up (before,
	// its Barrier timed out).
	type barrierResult struct {
		idx  uint64
		err  error
		took time.Duration
	}
	early := make(chan barrierResult, 1)
	go func() {
		bctx, bcancel := context.WithTimeout(ctx, 10*time.Second)
		defer bcancel()
		start := time.Now()
		idx, err := p.Barrier(bctx)
		early <- barrierResult{idx, err, time.Since(start)}
	}()

	// The standby takes over (the line moved on)...
	require.Eventually(t, func() bool {
		st := s.Status()
		return st.Role == RolePrimary && st.Epoch > oldEpoch
	}, 20*time.Second, 10*time.Millisecond, "the standby did not take over after the primary's candidate was deleted")
	// ... and the old primary learns it within about a second of the
	// newer epoch (a second and a half of slack for a loaded machine),
	// without proposing anything.
	took := time.Duration(0)
	require.Eventually(t, func() bool {
		if p.Status().Role != RolePrimary {
			took = time.Since(deposed)
			return true
		}
		return false
	}, 2500*time.Millisecond, 10*time.Millisecond, "the deposed primary still says primary %v after its candidate was deleted and a newer epoch took over", time.Since(deposed))
	t.Logf("the old primary stopped saying primary %v after its candidate was deleted", took)

	// Its published member data stops saying primary too (what other
	// members, tools and the election read).
	mdir := logroom.RoomPath(logroom.DefaultBase, c.room, membersDir)
	var pub memberData
	require.Eventually(t, func() bool {
		ms, err := readMembers(cl.Conn(), mdir)
		if err != nil {
			return false
		}
		d, ok := ms[p.cfg.ID]
		pub = d
		return ok && d.Role != roleStrPrimary
	}, 2*time.Second, 10*time.Millisecond, "the deposed primary's member data still says %q (epoch %d) %v after its candidate was deleted", pub.Role, pub.Epoch, time.Since(deposed))
	t.Logf("its member data says %q %v after its candidate was deleted", pub.Role, time.Since(deposed))
	select {
	case b := <-early:
		t.Logf("the Barrier asked as it was deposed: index %d, err %v, in %v", b.idx, b.err, b.took)
		require.False(t, errors.Is(b.err, context.DeadlineExceeded), "the deposed primary's Barrier waited %v for nothing: %v", b.took, b.err)
		require.Less(t, b.took, 5*time.Second, "the deposed primary's Barrier took %v", b.took)
		if b.err != nil {
			require.ErrorIs(t, b.err, ErrNotPrimary, "the deposed primary's Barrier failed for another reason")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the deposed primary's Barrier did not return")
	}

	// It follows the new primary: a write through the new primary reaches it.
	res, err := s.Propose(ctx, setOp("k2", "v2"))
	require.NoError(t, err)
	require.NoError(t, p.WaitApplied(ctx, res.Index))
	require.NotEqual(t, RoleFailed, p.Status().Role)

	// A Barrier on it now is a read point past the new primary's write,
	// at once.
	bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
	start := time.Now()
	idx, err := p.Barrier(bctx)
	bcancel()
	require.NoError(t, err, "Barrier on the deposed primary after %v", time.Since(start))
	require.GreaterOrEqual(t, idx, res.Index)
	require.Less(t, time.Since(start), 2*time.Second, "Barrier on the deposed primary")
}

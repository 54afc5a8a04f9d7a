package replica

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestStandbyBarrier(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	c.openN(3)
	p := c.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var standbys []*Replica
	for _, r := range c.all() {
		if r != p {
			standbys = append(standbys, r)
		}
	}
	for i := 0; i < 30; i++ {
		k := "b" + string(rune('a'+i%26)) + time.Now().Format("150405.000000")
		res, err := p.Propose(ctx, setOp(k, "v"))
		require.NoError(t, err)
		s := standbys[i%len(standbys)]
		idx, err := s.Barrier(ctx)
		require.NoError(t, err)
		require.GreaterOrEqual(t, idx, res.Index, "barrier covers an acknowledged write")
		v, err := s.Get([]byte(k))
		require.NoError(t, err, "a read after Barrier on a standby sees the write acknowledged before it")
		require.Equal(t, "v", string(v))
	}
	idx, err := p.Barrier(ctx)
	require.NoError(t, err)
	c.waitConverged(idx, 10*time.Second)
}

func TestStepDownAndTransfer(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	c.openN(3)
	p := c.waitPrimary(20 * time.Second)
	roles := p.RoleChanges()
	l := startLoad(c, 4)
	defer l.finish()
	l.waitAcked(t, 50, 20*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, p.StepDown(ctx))
	require.NotEqual(t, RolePrimary, p.Status().Role)
	p2 := c.waitPrimary(20 * time.Second)
	require.NotEqual(t, p.ID(), p2.ID(), "a stepped-down primary goes to the back of the line")
	// The role change was delivered.
	require.Eventually(t, func() bool {
		for {
			select {
			case rc := <-roles:
				if rc.Role == RoleStandby {
					return true
				}
			default:
				return false
			}
		}
	}, 5*time.Second, 5*time.Millisecond, "role change to standby delivered")
	l.waitAcked(t, 50, 20*time.Second)

	// Transfer to a specific standby, several times.
	var took []time.Duration
	for i := 0; i < 4; i++ {
		cur := c.waitPrimary(20 * time.Second)
		var target *Replica
		for _, r := range c.all() {
			if r != cur && (target == nil || r.ID() < target.ID()) {
				target = r
			}
		}
		if i%2 == 1 { // not always the lowest id
			for _, r := range c.all() {
				if r != cur && r != target {
					target = r
				}
			}
		}
		start := time.Now()
		require.NoError(t, cur.TransferLeadership(ctx, target.ID()))
		took = append(took, time.Since(start))
		require.Equal(t, RolePrimary, target.Status().Role)
		require.Equal(t, target.ID(), c.waitPrimary(20*time.Second).ID())
		l.waitAcked(t, 20, 20*time.Second)
	}
	t.Logf("transfer times: %v", took)

	// Transfer errors.
	cur := c.waitPrimary(20 * time.Second)
	require.ErrorIs(t, cur.TransferLeadership(ctx, "nobody"), ErrTransfer)
	require.ErrorIs(t, cur.TransferLeadership(ctx, cur.ID()), ErrTransfer)
	for _, r := range c.all() {
		if r != cur {
			require.ErrorIs(t, r.TransferLeadership(ctx, cur.ID()), ErrNotPrimary)
			require.ErrorIs(t, r.StepDown(ctx), ErrNotPrimary)
		}
	}
	l.finish()
	l.verify(t)
}

func TestPrimaryCloseFailover(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	c.openN(3)
	p := c.waitPrimary(20 * time.Second)
	l := startLoad(c, 4)
	defer l.finish()
	l.waitAcked(t, 100, 20*time.Second)
	start := time.Now()
	c.close(p.ID())
	p2 := c.waitPrimary(20 * time.Second)
	l.waitAcked(t, 1, 20*time.Second)
	t.Logf("close -> next acknowledged proposal on %s: %v", p2.ID(), time.Since(start))
	l.waitAcked(t, 100, 20*time.Second)
	// Closing twice is fine.
	require.NoError(t, p.Close())
	_, err := p.Propose(context.Background(), setOp("a", "b"))
	require.ErrorIs(t, err, ErrClosed)
	l.finish()
	l.verify(t)
	// The closed member's nodes are gone.
	require.Eventually(t, func() bool { return len(p2.Status().Members) == 2 }, 5*time.Second, 5*time.Millisecond, "closed member left the membership")
}

package replica

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestShutdownHandsOff: Shutdown of a primary under load hands its role
// to a standby before it closes, so a primary of a newer epoch already
// leads when Shutdown returns (Close alone leaves the choice to the
// election); a standby's Shutdown, and a lone primary's, just close. No
// acknowledged proposal is lost.
func TestShutdownHandsOff(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	c.openN(3)
	p := c.waitPrimary(20 * time.Second)
	epoch := p.Status().Epoch
	l := startLoad(c, 4)
	defer l.finish()
	l.waitAcked(t, 50, 20*time.Second)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	require.NoError(t, p.Shutdown(ctx))
	took := time.Since(start)
	c.mu.Lock()
	delete(c.reps, p.ID())
	c.mu.Unlock()
	var leaders []string
	for _, r := range c.all() {
		if st := r.Status(); st.Role == RolePrimary && st.Epoch > epoch {
			leaders = append(leaders, r.ID())
		}
	}
	require.Len(t, leaders, 1, "no new primary when Shutdown returned")
	_, err := p.Propose(ctx, setOp("a", "b"))
	require.ErrorIs(t, err, ErrClosed)
	l.waitAcked(t, 50, 20*time.Second)
	t.Logf("Shutdown of the primary took %v; %s leads", took, leaders[0])

	// A standby: closes, nothing else.
	p2 := c.waitPrimary(20 * time.Second)
	s := c.other(p2)
	require.NoError(t, s.Shutdown(ctx))
	c.mu.Lock()
	delete(c.reps, s.ID())
	c.mu.Unlock()
	require.Equal(t, RolePrimary, p2.Status().Role)
	l.waitAcked(t, 20, 20*time.Second)
	l.finish()
	l.verify(t)

	// A lone primary: nobody to hand to; it closes.
	require.Eventually(t, func() bool { return len(p2.Status().Members) == 1 }, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, p2.Shutdown(ctx))
	c.mu.Lock()
	delete(c.reps, p2.ID())
	c.mu.Unlock()
	_, err = p2.Propose(ctx, setOp("a", "b"))
	require.ErrorIs(t, err, ErrClosed)
}

func TestHandOffTarget(t *testing.T) {
	ms := []MemberStatus{
		{ID: "p", Role: RolePrimary, Applied: 90},
		{ID: "o", Role: RoleStandby, Observer: true, Applied: 80},
		{ID: "a", Role: RoleStandby, Applied: 50},
		{ID: "b", Role: RoleStandby, Applied: 70},
	}
	require.Equal(t, "b", handOffTarget("p", ms))
	require.Equal(t, "", handOffTarget("p", ms[:2]))
}

package replica

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/faultnet"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
)

// newProxy is a faultnet proxy to the ensemble (round robin over targets)
// that a test can Cut (reset every connection and refuse new ones until
// Heal): what a network partition, or a long pause, looks like to the
// client.
func newProxy(t *testing.T, targets ...string) *faultnet.Proxy {
	t.Helper()
	p, err := faultnet.New(faultnet.Config{Targets: targets})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

// proxiedCluster gives each replica its own proxy to the shared ensemble.
func proxiedCluster(t *testing.T, ids ...string) (*cluster, map[string]*faultnet.Proxy) {
	return proxiedClusterOn(t, sharedEnsemble(t), ids...)
}

func proxiedClusterOn(t *testing.T, ens *zkensemble.Ensemble, ids ...string) (*cluster, map[string]*faultnet.Proxy) {
	proxies := map[string]*faultnet.Proxy{}
	for _, id := range ids {
		proxies[id] = newProxy(t, ens.Addrs()...)
	}
	c := newCluster(t, ens, nil)
	c.mutate = func(cfg *Config) {
		cfg.Servers = []string{proxies[cfg.ID].Addr()}
		cfg.SessionTimeout = 2 * time.Second
	}
	for _, id := range ids {
		c.open(id)
	}
	return c, proxies
}

// TestSessionExpiryPrimary: the primary is cut off past its session
// timeout. It stops leading, another member takes over with a newer epoch,
// and when the old primary reconnects it finds its session expired, rejoins
// as a standby and converges; no acknowledged proposal is lost.
func TestSessionExpiryPrimary(t *testing.T) {
	c, proxies := proxiedCluster(t, "m0", "m1", "m2")
	old := c.waitPrimary(20 * time.Second)
	oldSession := old.Status().SessionID
	oldEpoch := old.Status().Epoch
	l := startLoad(c, 4)
	defer l.finish()
	l.waitAcked(t, 100, 20*time.Second)

	start := time.Now()
	proxies[old.ID()].Cut()
	var next *Replica
	require.Eventually(t, func() bool {
		for _, r := range c.all() {
			if r != old && r.Status().Role == RolePrimary {
				next = r
				return true
			}
		}
		return false
	}, 20*time.Second, 5*time.Millisecond, "another member takes over")
	l.waitAcked(t, 1, 20*time.Second)
	t.Logf("cut -> first acknowledged proposal on %s: %v", next.ID(), time.Since(start))
	require.Greater(t, next.Status().Epoch, oldEpoch)
	// Cut off past the session timeout, the old primary no longer leads
	// even before it hears that its session expired.
	require.Eventually(t, func() bool { return old.Status().Role == RoleStandby }, 10*time.Second, 5*time.Millisecond, "the cut-off primary steps down on its own")
	require.False(t, old.Status().Connected)
	l.waitAcked(t, 100, 20*time.Second)

	proxies[old.ID()].Heal()
	require.Eventually(t, func() bool {
		s := old.Status()
		return s.Connected && s.SessionID != oldSession && len(s.Members) == 3 && s.PrimaryID == next.ID()
	}, 20*time.Second, 5*time.Millisecond, "the old primary rejoins with a new session")
	require.Equal(t, next.ID(), c.waitPrimary(20*time.Second).ID())
	l.waitAcked(t, 100, 20*time.Second)
	l.finish()
	l.verify(t)
}

// TestSuspendedPrimary: a short disconnection (within the session
// timeout) pauses the primary's acknowledgements; it keeps its session and
// its role and continues.
func TestSuspendedPrimary(t *testing.T) {
	c, proxies := proxiedCluster(t, "m0", "m1", "m2")
	p := c.waitPrimary(20 * time.Second)
	epoch, session := p.Status().Epoch, p.Status().SessionID
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.Propose(ctx, setOp("before", "1"))
	require.NoError(t, err)

	proxies[p.ID()].Cut()
	require.Eventually(t, func() bool { return !p.Status().Connected }, 5*time.Second, 5*time.Millisecond, "the primary notices the disconnection")
	// While suspended, Propose waits (here until its short ctx ends).
	sctx, scancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = p.Propose(sctx, setOp("during", "1"))
	scancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, RolePrimary, p.Status().Role)
	// A proposal issued while suspended completes after the reconnect.
	done := make(chan error, 1)
	go func() {
		_, err := p.Propose(ctx, setOp("after", "1"))
		done <- err
	}()
	time.Sleep(100 * time.Millisecond) // let it block on the suspended connection (not a synchronisation: the result is checked below)
	proxies[p.ID()].Heal()
	require.NoError(t, <-done)
	s := p.Status()
	require.Equal(t, RolePrimary, s.Role)
	require.Equal(t, epoch, s.Epoch)
	require.Equal(t, session, s.SessionID)
	v, err := p.Get([]byte("after"))
	require.NoError(t, err)
	require.Equal(t, "1", string(v))
	idx, err := p.Barrier(ctx)
	require.NoError(t, err)
	c.waitConverged(idx, 10*time.Second)
}

// TestTransferTargetLeaves: the transfer target is cut off while the
// primary waits for it to catch up. The transfer fails once the target's
// session expires (its member node goes), not when the caller's context
// ends, and the primary accepts proposals again.
func TestTransferTargetLeaves(t *testing.T) {
	c, proxies := proxiedCluster(t, "m0", "m1")
	p := c.waitPrimary(20 * time.Second)
	s := c.other(p)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := p.Propose(ctx, setOp("a", "1"))
	require.NoError(t, err)
	proxies[s.ID()].Cut()
	_, err = p.Propose(ctx, setOp("b", "1"))
	require.NoError(t, err)

	start := time.Now()
	tctx, tcancel := context.WithTimeout(ctx, 20*time.Second)
	err = p.TransferLeadership(tctx, s.ID())
	tcancel()
	took := time.Since(start)
	require.ErrorIs(t, err, ErrTransfer)
	require.Less(t, took, 2*time.Second+2*time.Second, "fails about when the target's session expires: %v", err)
	_, err = p.Propose(ctx, setOp("c", "1"))
	require.NoError(t, err, "the primary accepts proposals again")
	proxies[s.ID()].Heal()
	idx, err := p.Barrier(ctx)
	require.NoError(t, err)
	c.waitConverged(idx, 30*time.Second)
}

package replica

import (
	"context"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
)

// TestThreeServerEnsemble runs three replicas on a 3-server ensemble under
// continuous proposals: the ZooKeeper leader is killed and restarted
// (proposals pause, then continue), the primary is cut off for good (a
// kill -9 as ZooKeeper sees it: its session expires) and restarted with its
// data dir, and leadership is transferred. Failover and transfer times are
// logged; REPLICA_MEASURE=n repeats them n times and logs the medians.
func TestThreeServerEnsemble(t *testing.T) {
	if testing.Short() {
		t.Skip("3-server ensemble")
	}
	ens := zkensemble.ForTest(t, zkensemble.Options{Servers: 3})
	c, proxies := proxiedClusterOn(t, ens, "m0", "m1", "m2")
	c.waitPrimary(30 * time.Second)
	l := startLoad(c, 4)
	defer l.finish()
	l.waitAcked(t, 100, 30*time.Second)

	// The ZooKeeper quorum leader dies mid-load, then comes back.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	zl, err := ens.Leader(ctx)
	require.NoError(t, err)
	require.NoError(t, ens.Kill(zl))
	l.waitAcked(t, 200, 60*time.Second)
	require.NoError(t, ens.Start(ctx, zl))
	l.waitAcked(t, 100, 30*time.Second)

	rounds := 1
	if n, err := strconv.Atoi(os.Getenv("REPLICA_MEASURE")); err == nil && n > 0 {
		rounds = n
	}
	var failovers, transfers []time.Duration
	for i := 0; i < rounds; i++ {
		old := c.waitPrimary(30 * time.Second)
		l.waitAcked(t, 50, 30*time.Second)
		// "kill -9": the primary goes silent; its session must expire.
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
		}, 30*time.Second, 5*time.Millisecond, "a standby takes over")
		// First acknowledged proposal after the takeover.
		require.Eventually(t, func() bool {
			l.mu.Lock()
			defer l.mu.Unlock()
			for _, idx := range l.acked {
				if idx >= next.currentStart() {
					return true
				}
			}
			return false
		}, 30*time.Second, 5*time.Millisecond, "first acknowledged proposal on the new primary")
		failovers = append(failovers, time.Since(start))
		// Restart the dead one from its data dir.
		c.close(old.ID())
		proxies[old.ID()].Heal()
		c.open(old.ID())
		c.waitPrimary(30 * time.Second)
		l.waitAcked(t, 50, 30*time.Second)

		// Graceful transfer to the standby with the lowest id.
		cur := c.waitPrimary(30 * time.Second)
		var target *Replica
		for _, r := range c.all() {
			if r != cur && (target == nil || r.ID() < target.ID()) {
				target = r
			}
		}
		start = time.Now()
		require.NoError(t, cur.TransferLeadership(ctx, target.ID()))
		transfers = append(transfers, time.Since(start))
		l.waitAcked(t, 50, 30*time.Second)
	}
	t.Logf("session timeout %v; failover (silence -> first ack on the new primary): %v, median %v",
		c.config("m0").SessionTimeout, failovers, median(failovers))
	t.Logf("transfer (call -> target primary): %v, median %v", transfers, median(transfers))
	l.finish()
	l.verify(t)
}

// currentStart is the first index of the current term (0 when not primary).
func (r *Replica) currentStart() uint64 {
	if t := r.currentTerm(); t != nil {
		return t.start
	}
	return ^uint64(0)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

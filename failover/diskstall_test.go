package failover

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/testnode"
)

// TestPrimaryDiskStall: the primary's disk stops answering mid-load (every
// write of its store blocks, as on a hung device; internal/infra/faultfs in
// the node process). Its store declares the stall after
// --disk-stall-timeout, the replica fails and resigns, a standby leads and
// proposals continue. The failed process is killed and restarted on a
// healthy disk (the operator's fix) and converges; nothing acknowledged is
// lost. Without the stall handling the primary keeps its role with its
// apply stuck, and no standby ever leads.
func TestPrimaryDiskStall(t *testing.T) {
	const stallTimeout = time.Second
	e := newEnv(t, 3, 3*time.Minute, func(o *testnode.NodeOptions) {
		o.ExtraArgs = append(o.ExtraArgs, "--disk-faults", "--disk-stall-timeout", stallTimeout.String())
	})
	p := e.primary()
	l := e.load(testnode.LoadOptions{Workers: 4})
	e.waitAcked(l, 200, 30*time.Second)

	ctx, cancel := context.WithTimeout(e.ctx, 5*time.Second)
	require.NoError(t, p.Client().StallDisk(ctx, true))
	cancel()
	stalled := time.Now()
	// Detection: the timeout plus Pebble's 2 s check; then the resignation
	// and the next candidate's takeover.
	bound := stallTimeout + 2*time.Second + sessionTimeout
	np, elected := e.waitNewPrimary(p, bound+10*time.Second)
	took := elected.Sub(stalled)
	t.Logf("%s's disk stalled; %s primary after %v", p.ID(), np.ID(), took)
	require.LessOrEqual(t, took, bound, "a standby must lead within DiskStallTimeout + 2 s + the session timeout")
	s := e.roleOf(p)
	require.Equal(t, testnode.RoleFailed, s.Role, "status %+v", s)
	require.Contains(t, s.Err, "disk stalled")

	e.waitAcked(l, 200, 30*time.Second)
	first, ok := e.h.FirstAckAfter(stalled, p.ID())
	require.True(t, ok)
	t.Logf("first proposal acknowledged by the new primary %v after the stall", first.End.Sub(stalled))

	require.NoError(t, p.Kill())
	require.NoError(t, p.Restart(e.ctx))
	e.waitFor(30*time.Second, p.ID()+" to follow "+np.ID()+" as a standby", func() bool {
		s := e.roleOf(p)
		return s.Role == testnode.RoleStandby && s.PrimaryID == np.ID()
	})
	e.waitAcked(l, 100, 30*time.Second)
	e.settle(l)
}

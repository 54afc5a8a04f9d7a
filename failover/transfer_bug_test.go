package failover

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/replica"
)

// TestTransferFailsWhenTargetLeaves: TransferLeadership to a standby that
// dies while the primary waits for it to catch up must fail once the
// target's member znode is gone (its session expired), and the primary
// must accept proposals again.
//
// Regression test for a fixed bug: replica.waitMember used to notice the
// target's departure only when the caller's context ended, so a transfer
// to a dead target kept the room refusing every write for the caller's
// whole timeout (here 12 s) instead of about one session timeout. Now
// waitMember re-checks that the target is still a live member at every
// status change and fails as soon as it is not (and the catch-up wait is
// also capped by Config.TransferTimeout, default 5 s). The bound below,
// session timeout + 3 s = 5 s, is well under the caller's 12 s and no
// longer than TransferTimeout, so only the departure itself can end the
// wait in time.
func TestTransferFailsWhenTargetLeaves(t *testing.T) {
	e := newEnv(t, 2, 2*time.Minute, nil)
	p := e.primary()
	s := e.standbys(p)[0]
	entry := func(k string) []byte {
		b, err := testnode.SetEntry(k, []byte("v"))
		require.NoError(t, err)
		return b
	}
	_, err := p.Propose(e.ctx, entry("a"))
	require.NoError(t, err)

	// The target stops (as if its machine froze), and the log moves past
	// what it applied, so the transfer has to wait for it to catch up.
	require.NoError(t, s.Pause())
	_, err = p.Propose(e.ctx, entry("b"))
	require.NoError(t, err)

	start := time.Now()
	ctx, cancel := context.WithTimeout(e.ctx, 12*time.Second)
	err = p.Transfer(ctx, s.ID())
	cancel()
	took := time.Since(start)
	t.Logf("transfer to a departing target: %v after %v", err, took)
	require.ErrorIs(t, err, replica.ErrTransfer)
	require.Less(t, took, sessionTimeout+3*time.Second,
		"the target's session expired after %v: the transfer must fail then, not when the caller's context ends", sessionTimeout)

	_, err = p.Propose(e.ctx, entry("c"))
	require.NoError(t, err, "the primary accepts proposals again after a failed transfer")
	require.NoError(t, s.Resume())
}

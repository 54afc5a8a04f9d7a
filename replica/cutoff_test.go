package replica

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCutOffReadsRefused: a standby cut from every ZooKeeper server (bytes
// held, no RST, as a real partition) does not hold its readers. A read
// waiting for an index it has not applied is released with ErrUnavailable
// the moment the standby sees the loss; a read arriving during the
// partition is refused at once, and so is a Barrier; a read of what it has
// applied is served. A connected standby still waits (bounded by the
// caller's context), and a blip shorter than the ping timeout lets a
// waiting read simply succeed.
func TestCutOffReadsRefused(t *testing.T) {
	c, proxies := proxiedCluster(t, "a", "b")
	p := c.waitPrimary(20 * time.Second)
	s := c.other(p)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := p.Propose(ctx, setOp("k", "v1"))
	require.NoError(t, err)
	require.NoError(t, s.WaitApplied(ctx, res.Index))

	// Connected and behind: it waits, bounded by the caller's context.
	short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = s.WaitApplied(short, res.Index+1000)
	scancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// A blip below the ping timeout: a read waiting for the next entry is
	// not refused; it succeeds once the entry arrives.
	waited := make(chan error, 1)
	go func() { waited <- s.WaitApplied(ctx, res.Index+1) }()
	proxies[s.ID()].Blackhole()
	time.Sleep(200 * time.Millisecond) // the blip
	proxies[s.ID()].Heal()
	res2, err := p.Propose(ctx, setOp("k", "v2"))
	require.NoError(t, err)
	require.NoError(t, <-waited)
	require.True(t, s.Status().Connected)

	// A partition: the waiting read is released when the standby sees the
	// loss, long before the partition heals.
	far := res2.Index + 1000
	type result struct {
		err error
		at  time.Time
	}
	released := make(chan result, 1)
	go func() {
		err := s.WaitApplied(ctx, far)
		released <- result{err, time.Now()}
	}()
	proxies[s.ID()].Blackhole()
	require.Eventually(t, func() bool { return !s.Status().Connected }, 10*time.Second, time.Millisecond, "the standby sees the loss")
	seen := time.Now()
	var got result
	select {
	case got = <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting read was not released while the standby was cut off")
	}
	require.ErrorIs(t, got.err, ErrUnavailable)
	require.Contains(t, got.err.Error(), "behind")
	t.Logf("released %v after the standby saw the loss: %v", got.at.Sub(seen), got.err)
	// The issue asks for 100 ms; a loaded CI machine under -race gets ten
	// times that (the release itself is the same publish that flips
	// Status().Connected, so it lands at once).
	require.Less(t, got.at.Sub(seen), time.Second, "released when the loss was seen")

	// During the partition: refused at once; served when already applied.
	start := time.Now()
	err = s.WaitApplied(ctx, res2.Index+1)
	require.ErrorIs(t, err, ErrUnavailable)
	_, err = s.Barrier(ctx)
	require.ErrorIs(t, err, ErrUnavailable)
	require.Less(t, time.Since(start), 2*time.Second, "refused without waiting for the partition")
	require.NoError(t, s.WaitApplied(ctx, res2.Index))
	require.Positive(t, s.Status().Suspended)

	// Healed: it reconnects (a new session, its old one expired), waits and
	// catches up again.
	proxies[s.ID()].Heal()
	require.Eventually(t, func() bool { return s.Status().Connected }, 20*time.Second, 5*time.Millisecond, "reconnected")
	res3, err := p.Propose(ctx, setOp("k", "v3"))
	require.NoError(t, err)
	require.NoError(t, s.WaitApplied(ctx, res3.Index))
	idx, err := s.Barrier(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, idx, res3.Index)
}

package replica

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/faultfs"
	"github.com/roomlog/roomlog/store"
)

// A primary whose disk stops answering gets out of the way: its store
// declares the stall within DiskStallTimeout (plus Pebble's 2 s check), the
// replica fails with the stall as its reason and resigns, a standby takes
// over and accepts proposals, the proposal caught in the stall gets an
// error rather than waiting out its deadline, and Close returns instead of
// waiting for the Apply stuck on the disk. Nothing acknowledged is lost.
// Without the stall handling the primary stays primary with its applier
// stuck, and every proposal to it waits out its deadline.
func TestPrimaryDiskStallFailsOver(t *testing.T) {
	ens := sharedEnsemble(t)
	ffs := faultfs.New(nil)
	const stallTimeout = 300 * time.Millisecond
	c := newCluster(t, ens, func(cfg *Config) {
		if cfg.ID == "m0" {
			cfg.StoreOptions = &store.Options{FS: ffs, DiskStallTimeout: stallTimeout}
		}
	})
	// Registered after the cluster's: runs before it closes the replicas,
	// so that the goroutines stuck on the disk end.
	t.Cleanup(ffs.Resume)
	m0 := c.open("m0")
	require.Eventually(t, func() bool { return m0.Status().Role == RolePrimary }, 20*time.Second, 5*time.Millisecond, "m0 primary")
	m1, m2 := c.open("m1"), c.open("m2")
	require.Equal(t, m0, c.waitPrimary(20*time.Second))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var acked []uint64
	for i := 0; i < 20; i++ {
		res, err := m0.Propose(ctx, setOp("before", "v"))
		require.NoError(t, err)
		acked = append(acked, res.Index)
	}

	ffs.Stall()
	t0 := time.Now()
	pctx, pcancel := context.WithTimeout(ctx, 40*time.Second)
	defer pcancel()
	_, err := m0.Propose(pctx, setOp("during", "v"))
	require.Error(t, err, "a proposal to a primary whose disk stalled")
	require.NoError(t, pctx.Err(), "the proposal waited out its deadline: %v", err)
	require.True(t, errors.Is(err, ErrFailed) || errors.Is(err, ErrNoResponse) || errors.Is(err, ErrNotPrimary), "%v", err)

	require.Eventually(t, func() bool { return m0.Status().Role == RoleFailed }, 20*time.Second, 5*time.Millisecond, "m0 failed")
	require.ErrorIs(t, m0.Status().Err, store.ErrDiskStalled)
	var p *Replica
	require.Eventually(t, func() bool {
		for _, r := range []*Replica{m1, m2} {
			if r.Status().Role == RolePrimary {
				p = r
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "a standby takes over")
	t.Logf("failed over %v after the stall", time.Since(t0).Round(time.Millisecond))
	res, err := p.Propose(ctx, setOp("after", "v"))
	require.NoError(t, err)
	require.Greater(t, res.Index, acked[len(acked)-1])
	for _, r := range []*Replica{m1, m2} {
		require.NoError(t, r.WaitApplied(ctx, res.Index))
		v, err := r.Get([]byte("before"))
		require.NoError(t, err)
		require.Equal(t, "v", string(v))
	}

	// Close does not wait for the Apply stuck on the disk.
	c.mu.Lock()
	delete(c.reps, "m0")
	c.mu.Unlock()
	closed := make(chan error, 1)
	go func() { closed <- m0.Close() }()
	select {
	case err := <-closed:
		require.ErrorIs(t, err, store.ErrDiskStalled)
	case <-time.After(15 * time.Second):
		t.Fatal("Close of a replica whose disk stalled did not return")
	}
	require.Positive(t, ffs.Blocked(), "the disk was stalled throughout")
}

// unlessStalled bounds every wait for a goroutine that may be stuck on the
// disk, also where no store watched the operation (a restore, a directory
// swap): past DiskStallTimeout + stopSlack the goroutine is presumed stuck
// and the replica fails with ErrDiskStalled naming what it waited for.
func TestUnlessStalledIsBounded(t *testing.T) {
	defer func(d time.Duration) { stopSlack = d }(stopSlack)
	stopSlack = 50 * time.Millisecond
	r := &Replica{stalled: make(chan struct{}), failc: make(chan error, 1),
		cfg: Config{StoreOptions: &store.Options{DiskStallTimeout: 100 * time.Millisecond}}}

	done := make(chan struct{})
	close(done)
	require.True(t, r.unlessStalled("an ended goroutine", done))
	require.Len(t, r.failc, 0)

	t0 := time.Now()
	require.False(t, r.unlessStalled("the test's goroutine", make(chan struct{})))
	require.Less(t, time.Since(t0), 5*time.Second)
	require.GreaterOrEqual(t, time.Since(t0), 150*time.Millisecond)
	select {
	case err := <-r.failc:
		require.ErrorIs(t, err, store.ErrDiskStalled)
		require.Contains(t, err.Error(), "the test's goroutine did not end within 150ms")
	default:
		t.Fatal("the replica was not failed")
	}
	select {
	case <-r.stalled:
	default:
		t.Fatal("stalled not closed")
	}
	// Once stalled, later waits end at once.
	t0 = time.Now()
	require.False(t, r.unlessStalled("another", make(chan struct{})))
	require.Less(t, time.Since(t0), time.Second)
}

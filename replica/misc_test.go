package replica

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/logroom"
)

func TestDuplicateID(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, func(cfg *Config) { cfg.SessionTimeout = 500 * time.Millisecond })
	c.open("m0")
	cfg := c.config("m0")
	cfg.DataDir = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	_, err := Open(ctx, cfg)
	require.ErrorIs(t, err, ErrDuplicateID)
	require.Contains(t, err.Error(), "m0")
	t.Logf("duplicate detected after %v", time.Since(start))
	// The live one is unaffected.
	c.waitPrimary(10 * time.Second)
}

func TestProposeLimits(t *testing.T) {
	c, proxies := proxiedCluster(t, "solo")
	c.mutate = func(cfg *Config) {
		cfg.Servers = []string{proxies[cfg.ID].Addr()}
		// The held proposal below must outlive the cut: a primary cut off
		// for a whole session timeout ends its term, so leave headroom for
		// a loaded machine (the default 4s, not 2s).
		cfg.SessionTimeout = 4 * time.Second
		cfg.MaxPendingProposals = 1
	}
	c.close("solo")
	p := c.open("solo")
	c.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// An entry that can never fit a batch: nothing written.
	before := p.Status().Applied
	_, err := p.Propose(ctx, make([]byte, 2<<20))
	require.ErrorIs(t, err, logroom.ErrEntryTooLarge)
	require.Equal(t, before, p.Status().Applied)

	// One proposal held in flight (the connection is down) fills the queue.
	proxies["solo"].Cut()
	require.Eventually(t, func() bool { return !p.Status().Connected }, 5*time.Second, 5*time.Millisecond, "disconnected")
	done := make(chan error, 1)
	go func() {
		_, err := p.Propose(ctx, setOp("held", "1"))
		done <- err
	}()
	require.Eventually(t, func() bool { return p.Status().Pending == 1 }, 5*time.Second, 5*time.Millisecond, "one proposal pending")
	_, err = p.Propose(ctx, setOp("extra", "1"))
	require.ErrorIs(t, err, ErrQueueFull)
	proxies["solo"].Heal()
	require.NoError(t, <-done)
	_, err = p.Propose(ctx, setOp("extra", "1"))
	require.NoError(t, err)
}

// TestRoleChangesSlowConsumer: nobody reads RoleChanges while the role
// flips many times; the replica is not stalled and the channel holds the
// newest changes.
func TestRoleChangesSlowConsumer(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	p := c.open("solo")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var last uint64
	for i := 0; i < 12; i++ {
		c.waitPrimary(20 * time.Second)
		res, err := p.Propose(ctx, setOp("k", "v"))
		require.NoError(t, err)
		require.Greater(t, res.Index, last)
		last = res.Index
		require.NoError(t, p.StepDown(ctx))
	}
	c.waitPrimary(20 * time.Second)
	ch := p.RoleChanges()
	require.Equal(t, cap(ch), len(ch), "the buffer is full: older changes were dropped, not blocked on")
	var rcs []RoleChange
	for len(ch) > 0 {
		rcs = append(rcs, <-ch)
	}
	require.Equal(t, RolePrimary, rcs[len(rcs)-1].Role, "the newest change is kept")
	require.Greater(t, rcs[len(rcs)-1].Epoch, uint64(10))
}

func TestWrongDataDir(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	p := c.open("m0")
	c.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.Propose(ctx, setOp("k", "v"))
	require.NoError(t, err)
	cfg := c.config("m0")
	c.close("m0")

	// Another room: refused.
	other := cfg
	other.Room = cfg.Room + "x"
	_, err = Open(ctx, other)
	require.ErrorIs(t, err, ErrWrongDataDir)

	// An earlier incarnation of the same room: refused.
	path := filepath.Join(cfg.DataDir, markerName)
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var m dirMarker
	require.NoError(t, json.Unmarshal(b, &m))
	m.RoomCzxid++
	b, err = json.Marshal(m)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, b, 0o644))
	_, err = Open(ctx, cfg)
	require.ErrorIs(t, err, ErrWrongDataDir)
	require.Contains(t, err.Error(), "earlier room")

	// An empty data dir adopts any room.
	fresh := other
	fresh.DataDir = t.TempDir()
	r, err := Open(ctx, fresh)
	require.NoError(t, err)
	require.NoError(t, r.Close())
}

// TestCloseStopsGoroutines: after Close every goroutine a replica started
// is gone (primary and standby, after role changes and a checkpoint).
func TestCloseStopsGoroutines(t *testing.T) {
	ens := sharedEnsemble(t)
	before := runtime.NumGoroutine()
	c := newCluster(t, ens, nil)
	c.openN(2)
	p := c.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := p.Propose(ctx, setOp("k", "v"))
	require.NoError(t, err)
	require.NoError(t, p.Checkpoint(ctx))
	require.NoError(t, p.StepDown(ctx))
	c.waitPrimary(20 * time.Second)
	for _, r := range c.all() {
		c.close(r.ID())
	}
	// Counted in this goroutine: require.Eventually runs its condition in
	// a goroutine of its own, which would count itself.
	for deadline := time.Now().Add(10 * time.Second); runtime.NumGoroutine() > before && time.Now().Before(deadline); {
		time.Sleep(5 * time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before, "goroutines back to %d", before)
}

package replica

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/store"
)

// holdApplier is skewApplier's applier, except that the entry it is told
// to hold blocks Apply until release: a member stuck before an index (as
// one that cannot bootstrap past a deleted channel stays).
type holdApplier struct {
	skewApplier
	hold    atomic.Pointer[[]byte]
	release chan struct{}
	once    sync.Once
}

func (a *holdApplier) Apply(b store.Batch, e store.Entry) ([]byte, error) {
	if p := a.hold.Load(); p != nil && bytes.Equal(*p, e.Data) {
		<-a.release
	}
	return a.skewApplier.Apply(b, e)
}

func (a *holdApplier) let() { a.once.Do(func() { close(a.release) }) }

// TestIntegrityTieWithStuckMember: a room of four, the primary m0, a
// standby m1 and two observers; m3 is stuck before the entry m2's Applier
// skews (it has nothing to say about that index, or agreed with m2 before
// it). m2 then disagrees with the primary and the standby, which agree
// with each other: two against one, and one member that cannot decide.
// Before the primary's side won a tie, m2 waited for m3 forever ("waiting
// for the undecided members", or "no majority" once it compared m3's
// older hash): TestAlertsLive's divergent observer, in a room where
// another observer could not bootstrap, was never reported diverged. Now
// m2 stops with ErrDiverged (the verdict is not recorded in its data dir:
// m3 may yet decide), and the others carry on.
func TestIntegrityTieWithStuckMember(t *testing.T) {
	appliers := map[string]*holdApplier{}
	var mu sync.Mutex
	cl := newCluster(t, sharedEnsemble(t), func(cfg *Config) {
		mu.Lock()
		defer mu.Unlock()
		a := appliers[cfg.ID]
		if a == nil {
			a = &holdApplier{release: make(chan struct{})}
			appliers[cfg.ID] = a
		}
		cfg.Applier = a
		cfg.Observer = cfg.ID == "m2" || cfg.ID == "m3"
	})
	// Registered after the cluster's cleanup, so it runs first: the held
	// Apply returns before the replicas close.
	t.Cleanup(func() {
		for _, a := range appliers {
			a.let()
		}
	})
	m0 := cl.open("m0")
	require.Eventually(t, func() bool { return m0.Status().Role == RolePrimary }, 30*time.Second, 5*time.Millisecond, "m0 primary")
	m1, m2, m3 := cl.open("m1"), cl.open("m2"), cl.open("m3")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	last := proposeN(t, ctx, m0, 5)
	for _, r := range []*Replica{m1, m2, m3} {
		require.NoError(t, r.WaitApplied(ctx, last))
	}

	hold := setOp("hold", "v")
	appliers["m3"].hold.Store(&hold)
	held, err := m0.Propose(ctx, hold)
	require.NoError(t, err)
	poison := setOp("poison", "v")
	appliers["m2"].bad.Store(&poison)
	res, err := m0.Propose(ctx, poison)
	require.NoError(t, err)
	// The room goes on writing, as rooms do.
	for i := 0; i < 3; i++ {
		_, err := m0.Propose(ctx, setOp("after", "v"))
		require.NoError(t, err)
	}

	err = waitFailed(t, m2, 20*time.Second, ErrDiverged)
	t.Logf("m2: %v", err)
	require.Contains(t, err.Error(), "the primary's side wins a tie")
	require.Less(t, m3.Status().Applied, held.Index, "m3 is still stuck before the divergence")
	require.Greater(t, res.Index, held.Index)
	for _, r := range []*Replica{m0, m1, m3} {
		require.NotEqual(t, RoleFailed, r.Status().Role, "%s: %v", r.ID(), r.Status().Err)
	}
	require.Equal(t, RolePrimary, m0.Status().Role)
	// A tie's verdict is not recorded: m3, once it catches up, may yet
	// change the count.
	_, err = os.Stat(filepath.Join(cl.root, "m2", divergedName))
	require.ErrorIs(t, err, os.ErrNotExist)

	// m3 released catches up and agrees with the primary's side.
	appliers["m3"].let()
	r2, err := m0.Propose(ctx, setOp("later", "v"))
	require.NoError(t, err)
	require.NoError(t, m3.WaitApplied(ctx, r2.Index))
	require.NotEqual(t, RoleFailed, m3.Status().Role, "%v", m3.Status().Err)
}

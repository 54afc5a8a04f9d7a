package simzk_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/roomlog/roomlog/internal/simzk"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
	"github.com/stretchr/testify/require"
)

// TestReplicasOnSimZK opens two real replicas of one room on simzk: one
// becomes primary and commits a proposal; every session is expired and a
// primary commits again; the primary closes and the standby takes over
// with both edits and commits its own.
func TestReplicasOnSimZK(t *testing.T) {
	srv, err := simzk.Start(simzk.Options{Tick: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	defer func() {
		if t.Failed() {
			t.Logf("simzk tree:\n%s", srv.Dump())
		}
	}()
	open := func(id string) *replica.Replica {
		r, err := replica.Open(ctx, replica.Config{
			Servers:    []string{srv.Addr()},
			Room:       "simroom",
			ID:         id,
			DataDir:    t.TempDir(),
			ListenAddr: "127.0.0.1:0",
		})
		require.NoError(t, err)
		t.Cleanup(func() { r.Close() })
		return r
	}
	a, b := open("a"), open("b")
	primary := func() *replica.Replica {
		var p *replica.Replica
		require.Eventually(t, func() bool {
			for _, r := range []*replica.Replica{a, b} {
				if r.Status().Role == replica.RolePrimary {
					p = r
					return true
				}
			}
			return false
		}, 60*time.Second, 20*time.Millisecond, "no primary")
		return p
	}
	set := func(r *replica.Replica, k, v string) {
		edit, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte(k), Value: []byte(v)}})
		require.NoError(t, err)
		// Right after an election the primary may still be taking over:
		// ErrNotPrimary is retried.
		for {
			_, err = r.Propose(ctx, edit)
			if !errors.Is(err, replica.ErrNotPrimary) || ctx.Err() != nil {
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		require.NoError(t, err)
	}
	p1 := primary()
	set(p1, "k1", "v1")
	// Every session expires at once: both replicas get new sessions, a
	// primary is elected again and commits.
	require.Len(t, srv.Sessions(), 2)
	for _, sid := range srv.Sessions() {
		srv.Expire(sid)
	}
	p2 := primary()
	set(p2, "k2", "v2")
	// The primary goes away: the other takes over with both edits.
	other := a
	if p2 == a {
		other = b
	}
	require.NoError(t, p2.Close())
	require.Eventually(t, func() bool { return other.Status().Role == replica.RolePrimary }, 60*time.Second, 20*time.Millisecond,
		"the standby never took over")
	set(other, "k3", "v3")
	for _, k := range []string{"k1", "k2", "k3"} {
		v, err := other.Get([]byte(k))
		require.NoError(t, err)
		require.Equal(t, "v"+k[1:], string(v), k)
	}
}

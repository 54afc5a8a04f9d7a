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
	// commit proposes k=v at whichever replica is primary (retrying
	// ErrNotPrimary, ErrFenced and ErrOutcomeUnknown: right after an
	// expiry a replica may still think it leads, be fenced by the new
	// primary or lose its role with the proposal in flight, and the new
	// one may still be taking over) and returns it.
	commit := func(k, v string, among ...*replica.Replica) *replica.Replica {
		edit, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte(k), Value: []byte(v)}})
		require.NoError(t, err)
		for {
			for _, r := range among {
				if r.Status().Role != replica.RolePrimary {
					continue
				}
				_, err := r.Propose(ctx, edit)
				if err == nil {
					return r
				}
				// The set is idempotent: an unknown outcome is retried too.
				if !errors.Is(err, replica.ErrNotPrimary) && !errors.Is(err, replica.ErrOutcomeUnknown) &&
					!errors.Is(err, replica.ErrFenced) {
					require.NoError(t, err)
				}
			}
			require.NoError(t, ctx.Err(), "no primary committed %s", k)
			time.Sleep(10 * time.Millisecond)
		}
	}
	commit("k1", "v1", a, b)
	// Every session expires at once: both replicas get new sessions, a
	// primary is elected again and commits.
	require.Len(t, srv.Sessions(), 2)
	for _, sid := range srv.Sessions() {
		srv.Expire(sid)
	}
	p2 := commit("k2", "v2", a, b)
	// The primary goes away: the other takes over with both edits.
	other := a
	if p2 == a {
		other = b
	}
	require.NoError(t, p2.Close())
	require.Equal(t, other, commit("k3", "v3", other))
	for _, k := range []string{"k1", "k2", "k3"} {
		v, err := other.Get([]byte(k))
		require.NoError(t, err)
		require.Equal(t, "v"+k[1:], string(v), k)
	}
}

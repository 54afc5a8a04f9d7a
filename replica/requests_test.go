package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/store"
)

// countOp is an entry that appends one "x" to key k: applying it twice
// shows as "xx".
func countOp(t testing.TB, r *Replica, k string) []byte {
	t.Helper()
	v, err := r.Get([]byte(k))
	if errors.Is(err, store.ErrNotFound) {
		v = nil
	} else {
		require.NoError(t, err)
	}
	return setOp(k, string(v)+"x")
}

// TestProposeRequestRetries: a retry on the same primary — sequential or
// racing the original — is answered with the original result and appends
// or applies nothing twice; another entry under the same id is refused.
func TestProposeRequestRetries(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	c.openN(2)
	p := c.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	id := NewRequestID()
	entry := setOp("k1", "v1")
	first, err := p.ProposeRequest(ctx, id, entry)
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	committed := p.Status().Applied

	// A sequential retry on the primary is appended and skipped at apply
	// time: the original's answer, one more (inert) log entry.
	again, err := p.ProposeRequest(ctx, id, entry)
	require.NoError(t, err)
	require.Equal(t, Result{Index: first.Index, Response: first.Response, Duplicate: true}, again)
	idx, err := p.Barrier(ctx)
	require.NoError(t, err)
	require.Equal(t, committed+1, idx)
	committed = idx
	// A standby that applied it answers from its table without appending.
	s := c.other(p)
	require.NoError(t, s.WaitApplied(ctx, idx))
	fromStandby, err := s.ProposeRequest(ctx, id, entry)
	require.NoError(t, err)
	require.Equal(t, again, fromStandby)
	idx, err = p.Barrier(ctx)
	require.NoError(t, err)
	require.Equal(t, committed, idx, "the standby's answer appended an entry")

	// The same id with another entry.
	_, err = p.ProposeRequest(ctx, id, setOp("k1", "other"))
	require.ErrorIs(t, err, ErrRequestConflict)
	v, err := p.Get([]byte("k1"))
	require.NoError(t, err)
	require.Equal(t, "v1", string(v))

	// Retries racing each other: 16 concurrent calls of one id. Those that
	// find it in flight wait for it; late ones are skipped at apply time.
	for round := 0; round < 5; round++ {
		id := NewRequestID()
		key := fmt.Sprintf("race%d", round)
		entry := countOp(t, p, key)
		var wg sync.WaitGroup
		results := make([]Result, 16)
		errs := make([]error, 16)
		for i := range results {
			wg.Add(1)
			go func() {
				defer wg.Done()
				results[i], errs[i] = p.ProposeRequest(ctx, id, entry)
			}()
		}
		wg.Wait()
		originals := 0
		for i := range results {
			require.NoError(t, errs[i])
			require.Equal(t, results[0].Index, results[i].Index)
			require.Equal(t, results[0].Response, results[i].Response)
			if !results[i].Duplicate {
				originals++
			}
		}
		require.Equal(t, 1, originals, "exactly one call is the original")
	}
	idx, err = p.Barrier(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, idx, committed+5)
	require.Less(t, idx, committed+5*16, "no racing call waited for the one in flight")
	for round := 0; round < 5; round++ {
		v, err := p.Get([]byte(fmt.Sprintf("race%d", round)))
		require.NoError(t, err)
		require.Equal(t, "x", string(v), "a racing retry was applied twice")
	}

	// A zero id is refused.
	_, err = p.ProposeRequest(ctx, RequestID{}, entry)
	require.ErrorIs(t, err, store.ErrInvalid)
}

// TestRequestDedupAtApply: a second copy of a request in the log (a retry
// that raced the original through another primary, which Propose cannot
// see) is skipped by every replica at apply time, deterministically.
func TestRequestDedupAtApply(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	c.openN(3)
	p := c.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	id := NewRequestID()
	env, err := store.EncodeRequest(store.Request{ID: id, Stamp: time.Now().UnixMilli(), TTL: time.Minute, Window: 1000},
		countOp(t, p, "n"))
	require.NoError(t, err)
	// Both copies go to the log, bypassing ProposeRequest's guards.
	orig, err := p.propose(ctx, env)
	require.NoError(t, err)
	require.False(t, orig.Duplicate)
	_, err = p.Propose(ctx, setOp("between", "1"))
	require.NoError(t, err)
	dup, err := p.propose(ctx, env)
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	require.Equal(t, orig.Index, dup.Index)
	require.Equal(t, orig.Response, dup.Response)

	idx, err := p.Barrier(ctx)
	require.NoError(t, err)
	require.Equal(t, orig.Index+2, idx, "both copies are in the log")
	c.waitConverged(idx, 20*time.Second)
	for _, r := range c.all() {
		v, err := r.Get([]byte("n"))
		require.NoError(t, err)
		require.Equal(t, "x", string(v), "%s applied the request twice", r.ID())
		rec, ok, err := r.Store().LookupRequest(id)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, orig.Index, rec.Index)
	}
}

// TestRequestExpiryDeterministic: a small window, decided by the proposer
// and carried in the log, expires the same records on every replica; a
// retry after its record expired is applied again (the documented limit).
func TestRequestExpiryDeterministic(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, func(cfg *Config) { cfg.RequestWindow = 4 })
	c.openN(3)
	p := c.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	ids := make([]RequestID, 12)
	for i := range ids {
		ids[i] = NewRequestID()
		_, err := p.ProposeRequest(ctx, ids[i], setOp(fmt.Sprintf("e%02d", i), "v"))
		require.NoError(t, err)
	}
	idx, err := p.Barrier(ctx)
	require.NoError(t, err)
	c.waitConverged(idx, 20*time.Second)
	for _, r := range c.all() {
		n, err := r.Store().RequestTableLen()
		require.NoError(t, err)
		require.Equal(t, 4, n, "%s holds %d records, the window is 4", r.ID(), n)
		_, ok, err := r.Store().LookupRequest(ids[11])
		require.NoError(t, err)
		require.True(t, ok)
		_, ok, err = r.Store().LookupRequest(ids[7])
		require.NoError(t, err)
		require.False(t, ok, "%s kept a record outside the window", r.ID())
	}
	// A retry of an expired request is applied again, at a new index.
	entry := countOp(t, p, "late")
	first, err := p.ProposeRequest(ctx, ids[0], entry)
	require.NoError(t, err)
	require.False(t, first.Duplicate)
	require.Greater(t, first.Index, idx)
	// A stale retry of a live one is not.
	res, err := p.ProposeRequest(ctx, ids[0], entry)
	require.NoError(t, err)
	require.True(t, res.Duplicate)
	idx, err = p.Barrier(ctx)
	require.NoError(t, err)
	c.waitConverged(idx, 20*time.Second)
}

// TestRequestSurvivesFailoverAndBootstrap: the request table is replicated
// state: a standby that took over answers a retry with the original
// result, and so does a member that bootstrapped from a checkpoint after
// the entry's channel was deleted — also when a second copy reaches it
// through the log.
func TestRequestSurvivesFailoverAndBootstrap(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, smallCheckpoints)
	c.openN(2)
	p := c.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	id := NewRequestID()
	entry := countOp(t, p, "once")
	orig, err := p.ProposeRequest(ctx, id, entry)
	require.NoError(t, err)
	env, err := store.EncodeRequest(store.Request{ID: id, Stamp: time.Now().UnixMilli(), TTL: time.Hour, Window: 1 << 20}, entry)
	require.NoError(t, err)

	// Fail over: the old primary goes away, the standby takes over.
	c.close(p.ID())
	p = c.waitPrimary(30 * time.Second)
	res, err := p.ProposeRequest(ctx, id, entry)
	require.NoError(t, err)
	require.Equal(t, Result{Index: orig.Index, Response: orig.Response, Duplicate: true}, res)

	// Move the room past the entry's channel: checkpoints delete it.
	val := strings.Repeat("y", 1000)
	for i := 0; i < 1500; i++ {
		_, err := c.proposeRetry(ctx, setOp(fmt.Sprintf("fill%05d", i), val))
		require.NoError(t, err)
	}
	chans, err := p.Room().Channels(ctx)
	require.NoError(t, err)
	require.Greater(t, chans[0].FirstIndex, orig.Index, "the original's channel is still there")

	fresh := c.open("fresh")
	idx, err := p.Barrier(ctx)
	require.NoError(t, err)
	c.waitConverged(idx, 60*time.Second)
	require.Equal(t, 1, fresh.Status().Bootstraps)
	// The bootstrapped standby answers the retry from its table...
	res, err = fresh.ProposeRequest(ctx, id, entry)
	require.NoError(t, err)
	require.Equal(t, Result{Index: orig.Index, Response: orig.Response, Duplicate: true}, res)
	// ...and skips a second copy that reaches it through the log.
	dup, err := p.propose(ctx, env)
	require.NoError(t, err)
	require.True(t, dup.Duplicate)
	require.Equal(t, orig.Index, dup.Index)
	idx, err = p.Barrier(ctx)
	require.NoError(t, err)
	c.waitConverged(idx, 60*time.Second)
	v, err := fresh.Get([]byte("once"))
	require.NoError(t, err)
	require.Equal(t, "x", string(v))
}

// TestCheckpointToken: with Config.CheckpointToken, a member's checkpoint
// endpoint serves nothing without the token (401), a member with the
// token bootstraps, and one with another token cannot (its tail says why).
func TestCheckpointToken(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, func(cfg *Config) {
		smallCheckpoints(cfg)
		if cfg.ID == "wrong" {
			cfg.CheckpointToken = "not the token"
		} else {
			cfg.CheckpointToken = "room secret"
		}
	})
	c.openN(2)
	p := c.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	val := strings.Repeat("z", 1000)
	for i := 0; i < 1500; i++ {
		_, err := c.proposeRetry(ctx, setOp(fmt.Sprintf("fill%05d", i), val))
		require.NoError(t, err)
	}
	chans, err := p.Room().Channels(ctx)
	require.NoError(t, err)
	require.Greater(t, chans[0].FirstIndex, uint64(1), "channels were deleted (the peer's manifest was fetched with the token)")

	// Unauthenticated: 401, nothing served.
	url := "http://" + p.ListenAddr() + CheckpointPath(c.room)
	for _, u := range []string{url, url + "manifest"} {
		resp, err := http.Get(u)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "%s: %s", u, body)
	}

	fresh := c.open("fresh")
	idx, err := p.Barrier(ctx)
	require.NoError(t, err)
	require.NoError(t, fresh.WaitApplied(ctx, idx))
	require.Equal(t, 1, fresh.Status().Bootstraps)

	wrong := c.open("wrong")
	require.Eventually(t, func() bool {
		err := wrong.Status().TailErr
		return err != nil && errors.Is(err, checkpoint.ErrUnauthorized)
	}, 30*time.Second, 5*time.Millisecond, "the member with the wrong token reports unauthorized fetches")
	require.Zero(t, wrong.Status().Bootstraps)
	require.Less(t, wrong.Status().Applied, idx)
}

package main

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/replica"
)

// keyedPost sends one mutation with an Idempotency-Key; follow says whether
// a 307 is followed.
func keyedPost(t *testing.T, url, body, key string, follow bool) httpReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(api.IdempotencyKeyHeader, key)
	hc := &http.Client{}
	if !follow {
		hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	}
	resp, err := hc.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return httpReply{status: resp.StatusCode, header: resp.Header, body: string(raw)}
}

// TestServeIdempotencyKeyAcrossFailoverAndRestart: a mutation sent with an
// Idempotency-Key to the primary is retried with the same key after the
// primary left (on the standby that took over) and after the old primary
// restarted from its data dir (now a standby): every retry gets the
// original's status and body, marked Idempotent-Replayed, and the command
// was applied once on every master. The same key with another body is 422.
func TestServeIdempotencyKeyAcrossFailoverAndRestart(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	dir := t.TempDir()
	const room = "idem-e2e"
	m1 := openTestMaster(t, ens, room, "m1", dir)
	require.Eventually(t, func() bool { return apiStatus(t, m1.Addr()).Role == api.RolePrimary }, 30*time.Second, 20*time.Millisecond, "m1 primary")
	m2 := openTestMaster(t, ens, room, "m2", dir)
	require.Eventually(t, func() bool {
		s := apiStatus(t, m2.Addr())
		return s.Role == api.RoleStandby && s.PrimaryAddr == m1.Addr()
	}, 30*time.Second, 20*time.Millisecond, "m2 a standby naming m1")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c1, err := client.New(m1.Addr(), nil)
	require.NoError(t, err)
	_, err = c1.Mkdir(ctx, "/d", false)
	require.NoError(t, err)
	_, err = c1.Create(ctx, "/d/f", 1)
	require.NoError(t, err)

	const key = "e2e-addblock-1"
	const body = `{"path":"/d/f","size":4096}`
	blocks := func(addr string, minIndex uint64) int {
		t.Helper()
		c, err := client.New(addr, nil)
		require.NoError(t, err)
		st, err := c.Stat(ctx, "/d/f", minIndex)
		require.NoError(t, err)
		return len(st.BlockList)
	}
	same := func(want, got httpReply) {
		t.Helper()
		require.Equal(t, want.status, got.status, "body %s", got.body)
		require.Equal(t, want.body, got.body)
		require.Equal(t, "true", got.header.Get(api.IdempotentReplayedHeader))
	}

	first := keyedPost(t, "http://"+m1.Addr()+"/v1/addblock", body, key, false)
	require.Equal(t, http.StatusOK, first.status, "body %s", first.body)
	require.Empty(t, first.header.Get(api.IdempotentReplayedHeader))
	require.Contains(t, first.body, `"block_id":1`)
	same(first, keyedPost(t, "http://"+m1.Addr()+"/v1/addblock", body, key, false))
	index := apiStatus(t, m1.Addr()).AppliedIndex

	// Failover: m1 leaves, m2 takes over; the retry goes to m2.
	require.NoError(t, m1.Close())
	require.Eventually(t, func() bool { return apiStatus(t, m2.Addr()).Role == api.RolePrimary }, 30*time.Second, 20*time.Millisecond, "m2 primary")
	same(first, keyedPost(t, "http://"+m2.Addr()+"/v1/addblock", body, key, false))
	require.Equal(t, 1, blocks(m2.Addr(), 0))
	r := keyedPost(t, "http://"+m2.Addr()+"/v1/addblock", `{"path":"/d/f","size":4097}`, key, false)
	require.Equal(t, http.StatusUnprocessableEntity, r.status, "body %s", r.body)
	require.Equal(t, api.CodeIdempotencyKeyReused, r.errorBody(t).Error)
	// On a primary a retry (and a reused key) is appended and skipped at
	// apply time: at most two inert entries, and nothing applied again.
	require.LessOrEqual(t, apiStatus(t, m2.Addr()).AppliedIndex, index+2)
	require.Equal(t, 1, blocks(m2.Addr(), 0), "a retry was applied again")

	// A new key is a new request.
	c2, err := client.New(m2.Addr(), nil)
	require.NoError(t, err)
	nb, err := c2.AddBlock(ctx, "/d/f", 1, client.IdempotencyKey("e2e-addblock-2"))
	require.NoError(t, err)
	require.False(t, nb.Replayed)
	require.Equal(t, uint64(2), nb.BlockID)

	// Restart m1 from its data dir: a standby that has the request table.
	m1 = openTestMaster(t, ens, room, "m1", dir)
	require.Eventually(t, func() bool {
		s := apiStatus(t, m1.Addr())
		return s.Role == api.RoleStandby && s.AppliedIndex >= nb.Index
	}, 30*time.Second, 20*time.Millisecond, "m1 a caught-up standby")
	same(first, keyedPost(t, "http://"+m1.Addr()+"/v1/addblock", body, key, false)) // from m1's own table
	c1, err = client.New(m1.Addr(), nil)
	require.NoError(t, err)
	again, err := c1.AddBlock(ctx, "/d/f", 4096, client.IdempotencyKey(key))
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, uint64(1), again.BlockID)
	require.Equal(t, 1, again.Attempts)
	require.Equal(t, 2, blocks(m1.Addr(), nb.Index))
	require.Equal(t, 2, blocks(m2.Addr(), nb.Index))
	h1, err := c1.Hash(ctx, nb.Index)
	require.NoError(t, err)
	h2, err := c2.Hash(ctx, nb.Index)
	require.NoError(t, err)
	require.Equal(t, h1, h2)

	// The request id the API proposes under is replica.RequestIDFromKey of
	// the key in the API's scope (one id per key, room-wide).
	require.Equal(t, replica.RequestIDFromKey("dfsmaster-demo/v1 Idempotency-Key\x00"+key), api.RequestIDForKey(key))
}

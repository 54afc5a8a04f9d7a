package main

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/replica"
)

// getWithAuth sends a GET with an optional Authorization header.
func getWithAuth(t *testing.T, url, auth string) httpReply {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b [4096]byte
	n, _ := resp.Body.Read(b[:])
	return httpReply{status: resp.StatusCode, header: resp.Header, body: string(b[:n])}
}

// TestServeCheckpointToken: with a checkpoint token (serve
// --checkpoint-token-file), a master's checkpoint endpoint serves nothing
// without it (401, also with a wrong one), the primary deletes the
// channels its checkpoints cover (it fetched its own manifest over HTTP
// with the token), and a new standby bootstraps from it with the token.
// The refusals are counted in the API's metrics.
func TestServeCheckpointToken(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	dir := t.TempDir()
	const room, token = "ckpt-token", "s3cret-checkpoint-token"
	withToken := func(c *serveConfig) { c.CheckpointToken = token; c.CheckpointEvery = 40 }
	m1 := openTestMaster(t, ens, room, "m1", dir, withToken)
	require.Eventually(t, func() bool { return apiStatus(t, m1.Addr()).Role == api.RolePrimary }, 30*time.Second, 20*time.Millisecond, "m1 primary")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c1, err := client.New(m1.Addr(), nil)
	require.NoError(t, err)
	for i := 0; i < 150; i++ {
		_, err := c1.Mkdir(ctx, fmt.Sprintf("/d%03d", i), false)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		chans, err := m1.rep.Room().Channels(ctx)
		return err == nil && len(chans) > 0 && chans[0].FirstIndex > 1
	}, 60*time.Second, 20*time.Millisecond, "the primary deleted the channels its checkpoint covers")

	url := "http://" + m1.Addr() + replica.CheckpointPath(room)
	for _, u := range []string{url, url + "manifest"} {
		for _, auth := range []string{"", "Bearer wrong-token", "Basic " + token, token} {
			r := getWithAuth(t, u, auth)
			require.Equal(t, http.StatusUnauthorized, r.status, "%s with %q: %s", u, auth, r.body)
			require.Contains(t, r.header.Get("WWW-Authenticate"), "Bearer")
			require.NotContains(t, r.body, room, "nothing of the checkpoint is served")
		}
	}
	r := getWithAuth(t, url+"manifest", "Bearer "+token)
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.Contains(t, r.body, room)

	// A new standby, with the token, bootstraps from m1's checkpoint.
	m2 := openTestMaster(t, ens, room, "m2", dir, withToken)
	idx, err := m1.rep.Barrier(ctx)
	require.NoError(t, err)
	require.NoError(t, m2.rep.WaitApplied(ctx, idx))
	require.Equal(t, 1, m2.rep.Status().Bootstraps)
	require.Equal(t, 1, apiStatus(t, m2.Addr()).Bootstraps)
	h1, err := c1.Hash(ctx, idx)
	require.NoError(t, err)
	c2, err := client.New(m2.Addr(), nil)
	require.NoError(t, err)
	h2, err := c2.Hash(ctx, idx)
	require.NoError(t, err)
	require.Equal(t, h1, h2)

	body := getMetrics(t, m1.Addr())
	require.Contains(t, body, fmt.Sprintf(`roomlog_demo_http_requests_total{code="401",member="m1",room=%q,route="checkpoint"} 8`, room))
	require.Regexp(t, fmt.Sprintf(`roomlog_demo_http_requests_total\{code="200",member="m1",room=%q,route="checkpoint"\} [1-9]`, room), body)
}

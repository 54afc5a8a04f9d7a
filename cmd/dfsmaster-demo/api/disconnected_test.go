package api_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
)

// TestDisconnectedMaster: a master cut off from ZooKeeper answers a read it
// cannot serve (min_index above what it applied) 503 disconnected at once,
// with a Retry-After and the reason, instead of holding the reader for
// ReadWait; a read it can serve is served; /v1/health is 503 disconnected,
// not "failed"; once reconnected everything is as before.
func TestDisconnectedMaster(t *testing.T) {
	p := newPair(t, api.Config{ReadWait: 5 * time.Second})
	base := p.standbySrv.URL
	r := get(t, base, "/v1/ls?path=/")
	require.Equal(t, http.StatusOK, r.status, "body %s", r.raw)
	applied := p.standby.Status().AppliedIndex

	p.standby.set(func(f *fakeMaster) { f.status.Connected, f.status.DisconnectedMS = false, 1500 })
	start := time.Now()
	r = get(t, base, fmt.Sprintf("/v1/ls?path=/&min_index=%d", applied+1))
	require.Equal(t, http.StatusServiceUnavailable, r.status, "body %s", r.raw)
	require.Equal(t, api.CodeDisconnected, r.code(t))
	require.Equal(t, "1", r.header.Get("Retry-After"))
	require.Contains(t, string(r.raw), fmt.Sprintf("asked for %d", applied+1))
	require.Less(t, time.Since(start), 4*time.Second, "refused at once, not after ReadWait")

	// What it has applied it still serves (a read without min_index, or one
	// it has reached).
	r = get(t, base, fmt.Sprintf("/v1/ls?path=/&min_index=%d", applied))
	require.Equal(t, http.StatusOK, r.status, "body %s", r.raw)

	// Health tells a load balancer, distinctly from a failure.
	r = get(t, base, "/v1/health")
	require.Equal(t, http.StatusServiceUnavailable, r.status, "body %s", r.raw)
	require.Equal(t, api.CodeDisconnected, r.code(t))
	require.Equal(t, "1", r.header.Get("Retry-After"))
	require.Contains(t, string(r.raw), "1500 ms")

	// A mutation sent to it is redirected to the primary it last knew,
	// saying that it is cut off (the primary may have changed).
	r = do(t, noRedirect, http.MethodPost, base+"/v1/mkdir", `{"path":"/x"}`)
	require.Equal(t, http.StatusTemporaryRedirect, r.status, "body %s", r.raw)
	require.Contains(t, string(r.raw), "cut off from ZooKeeper")

	p.standby.set(func(f *fakeMaster) { f.status.Connected, f.status.DisconnectedMS = true, 0 })
	r = get(t, base, "/v1/health")
	require.Equal(t, http.StatusOK, r.status, "body %s", r.raw)
}

package main

import (
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHTTPServerIdleTimeout: a master's server closes kept-alive
// connections that stay idle (IdleTimeout), so a client whose CA was
// removed from the master's CA file, or whose certificate expired, loses
// access within that time instead of keeping it over a connection
// verified once. Before the fix IdleTimeout was 0 (net/http then uses
// ReadTimeout, also 0: never).
func TestHTTPServerIdleTimeout(t *testing.T) {
	srv := newHTTPServer(http.NotFoundHandler(), slog.New(slog.DiscardHandler))
	require.Positive(t, srv.IdleTimeout)
	require.LessOrEqual(t, srv.IdleTimeout, 2*time.Minute)
	require.Positive(t, srv.ReadHeaderTimeout)
	require.LessOrEqual(t, srv.ReadHeaderTimeout, srv.IdleTimeout)
}

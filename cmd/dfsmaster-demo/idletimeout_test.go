package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"sync/atomic"
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
	srv := newHTTPServer(http.NotFoundHandler(), slog.New(slog.DiscardHandler), 0)
	require.Positive(t, srv.IdleTimeout)
	require.LessOrEqual(t, srv.IdleTimeout, 2*time.Minute)
	require.Positive(t, srv.ReadHeaderTimeout)
	require.LessOrEqual(t, srv.ReadHeaderTimeout, srv.IdleTimeout)
}

// TestHTTPServerMaxConnAge: a client that keeps its connection busy (a
// request every few milliseconds, never idle) still gets a new
// connection, and so a new handshake against the current CA file, once
// the connection is older than the master's max age (masterConfig
// MaxConnAge). Before the fix one busy connection was served for ever: a
// client whose CA was removed kept access 2 min 30 s later.
func TestHTTPServerMaxConnAge(t *testing.T) {
	const maxAge = 300 * time.Millisecond
	var conns atomic.Int64
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), slog.New(slog.DiscardHandler), maxAge)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		conns.Add(1)
		return (&net.Dialer{}).DialContext(ctx, network, addr)
	}}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	defer hc.CloseIdleConnections()
	for start := time.Now(); time.Since(start) < 4*maxAge; {
		resp, err := hc.Get("http://" + ln.Addr().String() + "/")
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		time.Sleep(5 * time.Millisecond) // the client's pace
	}
	require.GreaterOrEqual(t, conns.Load(), int64(3), "a busy connection is replaced every max age")
	require.Equal(t, httpMaxConnAge, maxConnAgeOr(0))
	require.LessOrEqual(t, 2*httpMaxConnAge, 2*time.Minute, "access ends within 2 minutes (docs/tls.md)")
}

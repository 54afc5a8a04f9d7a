package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
)

// startHTTP serves rootHandler over a testMaster's API with serve's own
// http.Server (newHTTPServer), a stand-in checkpoint handler for room and
// /metrics over reg. It returns the base URL.
func startHTTP(t *testing.T, room string, reg *prometheus.Registry) string {
	t.Helper()
	st, err := store.Open(t.TempDir(), &store.Options{Applier: namespace.Applier{}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	apiSrv, err := api.New(api.Config{Master: &testMaster{st: st, primary: true}, Registerer: reg, MetricsPath: metricsPath})
	require.NoError(t, err)
	ckpt := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "checkpoint handler: %s", r.URL.Path)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := newHTTPServer(rootHandler(apiSrv, room, ckpt, promhttp.HandlerFor(reg, promhttp.HandlerOpts{})), slog.New(slog.DiscardHandler), 0)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String()
}

// rawHTTP sends one raw HTTP/1.1 request and returns the status line,
// the headers and the body.
func rawHTTP(t *testing.T, base, request string) (status string, header http.Header, body string) {
	t.Helper()
	conn, err := net.DialTimeout("tcp", strings.TrimPrefix(base, "http://"), 5*time.Second)
	require.NoError(t, err)
	defer conn.Close()
	require.NoError(t, conn.SetDeadline(time.Now().Add(10*time.Second)))
	_, err = io.WriteString(conn, request)
	require.NoError(t, err)
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.Status, resp.Header, string(b)
}

// TestServeHTTPErrorShape: what a master's HTTP server answers itself.
// Unclean or unknown paths reach the API (its JSON 404, not a ServeMux
// redirect); only the room's checkpoint path reaches the checkpoint
// handler; /metrics serves the registry and is counted. Headers larger
// than api.MaxHeaderBytes get net/http's own plain-text 431 before any
// handler: the one answer that is not the API's JSON (documented in
// package api).
func TestServeHTTPErrorShape(t *testing.T) {
	reg := prometheus.NewRegistry()
	const room = "r oom/ü" // escaped in the checkpoint path
	base := startHTTP(t, room, reg)

	for _, p := range []string{"//v1/status", "/v1/../v1/status", "/v1/./status", "/v1/status/", "/roomlog/checkpoint/other/manifest",
		"/roomlog/checkpoint/r%20oomX/", "/metrics/", "/v1/ls/../../etc/passwd"} {
		status, h, body := rawHTTP(t, base, "GET "+p+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		require.Equal(t, "404 Not Found", status, "%s: %s", p, body)
		require.Equal(t, "application/json", h.Get("Content-Type"), p)
		var eb api.ErrorBody
		require.NoError(t, json.Unmarshal([]byte(body), &eb), "%s: %s", p, body)
		require.Equal(t, api.CodeBadRequest, eb.Error, p)
		require.Contains(t, eb.Message, "no endpoint", p)
	}
	ckpt := replica.CheckpointPath(room)
	require.Equal(t, "/roomlog/checkpoint/r%20oom%2F%C3%BC/", ckpt)
	for _, p := range []string{ckpt, ckpt + "manifest", strings.TrimSuffix(ckpt, "/")} {
		status, _, body := rawHTTP(t, base, "GET "+p+" HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
		require.Equal(t, "200 OK", status, "%s: %s", p, body)
		require.True(t, strings.HasPrefix(body, "checkpoint handler: /roomlog/checkpoint/r oom/ü"), "%s: %s", p, body)
	}

	status, h, body := rawHTTP(t, base, "GET /v1/status HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	require.Equal(t, "200 OK", status, body)
	require.Equal(t, "application/json", h.Get("Content-Type"))

	// Headers over the limit: net/http answers 431 in plain text, before
	// any handler (not counted either).
	big := strings.Repeat("a", api.MaxHeaderBytes+8<<10)
	status, h, body = rawHTTP(t, base, "GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Big: "+big+"\r\nConnection: close\r\n\r\n")
	require.Equal(t, "431 Request Header Fields Too Large", status)
	require.Equal(t, "text/plain; charset=utf-8", h.Get("Content-Type"))
	require.Equal(t, "431 Request Header Fields Too Large", body)
	// Just under the limit is served.
	status, _, body = rawHTTP(t, base, "GET /v1/status HTTP/1.1\r\nHost: x\r\nX-Big: "+big[:api.MaxHeaderBytes-200]+"\r\nConnection: close\r\n\r\n")
	require.Equal(t, "200 OK", status, body)
	// A malformed request: net/http's plain-text 400.
	status, h, body = rawHTTP(t, base, "GET /v1/status HTTP/1.1\r\nHost: x\r\nBad Header\r\nConnection: close\r\n\r\n")
	require.Equal(t, "400 Bad Request", status)
	require.Equal(t, "text/plain; charset=utf-8", h.Get("Content-Type"))
	require.Contains(t, body, "400 Bad Request")

	status, _, body = rawHTTP(t, base, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	require.Equal(t, "200 OK", status)
	for _, want := range []string{
		`roomlog_demo_http_requests_total{code="404",route="other"} 8`,
		`roomlog_demo_http_requests_total{code="200",route="checkpoint"} 3`,
		`roomlog_demo_http_requests_total{code="200",route="/v1/status"} 2`,
	} {
		require.Contains(t, body, want)
	}
	_, _, body = rawHTTP(t, base, "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
	require.Contains(t, body, `roomlog_demo_http_requests_total{code="200",route="/metrics"} 1`)
}

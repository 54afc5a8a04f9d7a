package tlsfiles_test

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/tlsfiles"
)

// TestRemovedCAEndsBusyConnection: a client whose CA is removed from the
// server's CA file loses access within 2×MaxConnAge even when it keeps
// its connection busy (a request every few milliseconds, so IdleTimeout
// never fires). Before LimitConnAge the busy connection, verified once at
// its handshake, was served for as long as the client kept it busy.
func TestRemovedCAEndsBusyConnection(t *testing.T) {
	const maxAge = 400 * time.Millisecond
	dir := t.TempDir()
	keep, gone := newCA(t, "keep"), newCA(t, "gone")
	srvFiles, err := keep.Issue(filepath.Join(dir, "server"), "server", testpki.Options{})
	require.NoError(t, err)
	// The server trusts both CAs; the client's certificate is of "gone".
	require.NoError(t, testpki.WriteFile(srvFiles.CA, append(append([]byte(nil), keep.PEM...), gone.PEM...)))
	cliFiles, err := gone.Issue(filepath.Join(dir, "client"), "client", testpki.Options{Client: true})
	require.NoError(t, err)
	require.NoError(t, testpki.WriteFile(cliFiles.CA, append(append([]byte(nil), keep.PEM...), gone.PEM...))) // the server's CA and its own
	srvSrc, err := tlsfiles.LoadWithOptions(srvFiles, tlsfiles.Options{CheckEvery: -1})
	require.NoError(t, err)
	cliSrc, err := tlsfiles.Load(cliFiles)
	require.NoError(t, err)

	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}))
	ts.Config.IdleTimeout = time.Minute
	tlsfiles.LimitConnAge(ts.Config, maxAge)
	ts.TLS = srvSrc.ServerConfig(tls.RequireAndVerifyClientCert)
	ts.StartTLS()
	defer ts.Close()

	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialTLSContext: cliSrc.DialContext(&net.Dialer{Timeout: 2 * time.Second}, 2*time.Second, "http/1.1"),
	}}
	defer hc.CloseIdleConnections()
	get := func() error {
		resp, err := hc.Get(ts.URL)
		if err != nil {
			return err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		return resp.Body.Close()
	}
	require.NoError(t, get())
	// Remove the client's CA, then keep the connection busy.
	require.NoError(t, testpki.WriteFile(srvFiles.CA, keep.PEM))
	removed := time.Now()
	var lastOK time.Time
	for time.Since(removed) < 3*maxAge+2*time.Second {
		if err := get(); err != nil {
			break
		}
		lastOK = time.Now()
		time.Sleep(5 * time.Millisecond) // the client's own pace, not a synchronisation
	}
	require.Error(t, get(), "a client whose CA was removed is still served %v later", time.Since(removed))
	require.Less(t, lastOK.Sub(removed), 2*maxAge+500*time.Millisecond, "served after its CA was removed")
}

// TestLimitConnAge: with LimitConnAge(srv, maxAge), no request starts on
// a connection older than maxAge (a busy keep-alive connection is closed
// after the request in progress), a hijacked connection is closed at
// maxAge, and a single request still running at 2×maxAge is cut. The
// ConnState hook the server had is still called.
func TestLimitConnAge(t *testing.T) {
	const maxAge = 300 * time.Millisecond
	type bornKey struct{}
	var hookCalls atomic.Int64
	var tooOld atomic.Int64
	hijacked := make(chan error, 1)
	ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if age := time.Since(r.Context().Value(bornKey{}).(time.Time)); age > maxAge+100*time.Millisecond {
			tooOld.Add(1)
		}
		switch r.URL.Path {
		case "/hijack":
			c, _, err := http.NewResponseController(w).Hijack()
			if err != nil {
				hijacked <- err
				return
			}
			defer c.Close()
			_, err = c.Read(make([]byte, 1)) // the client never writes: returns when closed
			hijacked <- err
		case "/long":
			rc := http.NewResponseController(w)
			for range 50 {
				if _, err := io.WriteString(w, "."); err != nil || rc.Flush() != nil {
					return
				}
				time.Sleep(50 * time.Millisecond)
			}
		default:
			_, _ = io.WriteString(w, "ok")
		}
	}))
	ts.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, bornKey{}, time.Now())
	}
	ts.Config.ConnState = func(net.Conn, http.ConnState) { hookCalls.Add(1) }
	tlsfiles.LimitConnAge(ts.Config, maxAge)
	ts.Start()
	defer ts.Close()

	var mu sync.Mutex
	conns := map[string]bool{}
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err == nil {
			mu.Lock()
			conns[c.LocalAddr().String()] = true
			mu.Unlock()
		}
		return c, err
	}}
	hc := &http.Client{Timeout: 5 * time.Second, Transport: tr}
	defer hc.CloseIdleConnections()
	for start := time.Now(); time.Since(start) < 4*maxAge; {
		resp, err := hc.Get(ts.URL)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		time.Sleep(5 * time.Millisecond)
	}
	require.Zero(t, tooOld.Load(), "requests started on connections older than maxAge")
	mu.Lock()
	require.GreaterOrEqual(t, len(conns), 3, "a busy connection is replaced every maxAge")
	mu.Unlock()
	require.Positive(t, hookCalls.Load(), "the server's own ConnState hook still runs")

	// A hijacked connection is closed at maxAge.
	c, err := net.Dial("tcp", ts.Listener.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	_, err = io.WriteString(c, "GET /hijack HTTP/1.1\r\nHost: x\r\n\r\n")
	require.NoError(t, err)
	select {
	case err := <-hijacked:
		require.Error(t, err)
	case <-time.After(2*maxAge + 2*time.Second):
		t.Fatal("a hijacked connection outlived maxAge")
	}

	// A request still running at 2×maxAge is cut.
	began := time.Now()
	resp, err := hc.Get(ts.URL + "/long")
	require.NoError(t, err)
	_, err = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Error(t, err, "a 2.5 s response was not cut")
	require.Less(t, time.Since(began), 2*maxAge+time.Second)
}

package replica

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

// TestPeerServerMaxConnAge: the replica's own checkpoint server
// (Config.ListenAddr) replaces a connection its peer keeps busy once it is
// older than Config.PeerConnMaxAge, and closes idle ones. Before the fix
// it had neither an idle timeout nor a bound on a connection's age: a
// peer whose CA was removed kept access over a connection verified once.
func TestPeerServerMaxConnAge(t *testing.T) {
	require.Equal(t, DefaultPeerConnMaxAge, Config{}.peerConnMaxAge())
	require.Zero(t, Config{PeerConnMaxAge: -1}.peerConnMaxAge())
	require.LessOrEqual(t, 2*DefaultPeerConnMaxAge, 2*time.Minute)

	const maxAge = 300 * time.Millisecond
	srv := newPeerServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "ok")
	}), Config{PeerConnMaxAge: maxAge}.peerConnMaxAge(), slog.New(slog.DiscardHandler))
	require.Equal(t, maxAge, srv.IdleTimeout)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	var conns atomic.Int64
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			conns.Add(1)
			return (&net.Dialer{}).DialContext(ctx, network, addr)
		}}}
	defer hc.CloseIdleConnections()
	for start := time.Now(); time.Since(start) < 4*maxAge; {
		resp, err := hc.Get("http://" + ln.Addr().String() + "/")
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		time.Sleep(5 * time.Millisecond) // the peer's pace
	}
	require.GreaterOrEqual(t, conns.Load(), int64(3), "a busy connection is replaced every PeerConnMaxAge")
}

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

	"github.com/roomlog/roomlog/internal/infra/faultnet"
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

// TestShortPeerConnMaxAgeKeepsPrimary: with a short Config.PeerConnMaxAge
// the peer server cuts every connection, the standby's liveness stream to
// the primary included, every few hundred milliseconds. A cut stream is
// no proof that the primary's process is gone: an idle room of two must
// keep its primary (same epoch, no deposition, no takeover) for seconds
// of such cuts.
func TestShortPeerConnMaxAgeKeepsPrimary(t *testing.T) {
	// Each member advertises a proxy to its peer server, which counts the
	// connections its peers open (the liveness stream's among them).
	listen, proxies := map[string]string{}, map[string]*faultnet.Proxy{}
	for _, id := range []string{"m0", "m1"} {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		listen[id] = ln.Addr().String()
		require.NoError(t, ln.Close())
		proxies[id] = newProxy(t, listen[id])
	}
	c := newCluster(t, sharedEnsemble(t), func(cfg *Config) {
		cfg.PeerConnMaxAge = 300 * time.Millisecond
		cfg.ListenAddr, cfg.AdvertiseAddr = listen[cfg.ID], proxies[cfg.ID].Addr()
	})
	c.openN(2)
	p := c.waitPrimary(30 * time.Second)
	s := c.other(p)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := p.Propose(ctx, setOp("k", "v"))
	require.NoError(t, err)
	require.NoError(t, s.WaitApplied(ctx, res.Index))
	epoch := p.Status().Epoch

	dialed := proxies[p.ID()].Stats().Accepted
	for start := time.Now(); time.Since(start) < 5*time.Second; {
		ps, ss := p.Status(), s.Status()
		require.Equal(t, RolePrimary, ps.Role, "the primary lost its role %v into the idle stretch (standby: %s, epoch %d; its last deposition: %q)",
			time.Since(start).Round(time.Millisecond), ss.Role, ss.Epoch, ss.LastDeposition)
		require.Equal(t, epoch, ps.Epoch)
		require.NotEqual(t, RolePrimary, ss.Role)
		require.NotEqual(t, RoleTakingOver, ss.Role, "the standby began a takeover %v into the idle stretch", time.Since(start).Round(time.Millisecond))
		require.Zero(t, ss.Depositions, "the standby deposed the primary: %s", ss.LastDeposition)
		time.Sleep(20 * time.Millisecond) // sampling both members' status through the idle stretch
	}
	dialed = proxies[p.ID()].Stats().Accepted - dialed
	t.Logf("the standby opened %d connections to the primary's peer server in 5 s", dialed)
	require.GreaterOrEqual(t, dialed, int64(3), "the liveness stream was not cut: the test proves nothing")
	// Still one room: a write goes through the same primary.
	res, err = p.Propose(ctx, setOp("k", "after"))
	require.NoError(t, err)
	require.Equal(t, epoch, p.Status().Epoch)
	require.NoError(t, s.WaitApplied(ctx, res.Index))
}

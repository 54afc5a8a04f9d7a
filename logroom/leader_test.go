package logroom

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/stretchr/testify/require"
)

// fakeSrvr is a loopback listener that answers every connection with
// reply (after reading the four-letter word), or holds it silent when
// silent is set.
func fakeSrvr(t *testing.T, reply string, silent bool) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			if silent {
				continue // accepted, never answered (closed at cleanup)
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 4)
				if _, err := c.Read(buf); err != nil {
					return
				}
				_, _ = c.Write([]byte(reply))
			}()
		}
	}()
	return ln.Addr().String()
}

const srvrReply = "Zookeeper version: 3.8.0-debian\nLatency min/avg/max: 0/0.1/9\nReceived: 12\nSent: 11\nConnections: 1\nOutstanding: 0\nZxid: 0x100000004\nMode: %s\nNode count: 5\n"

func srvrSays(mode string) string { return strings.Replace(srvrReply, "%s", mode, 1) }

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestProbeLeader(t *testing.T) {
	follower := fakeSrvr(t, srvrSays("follower"), false)
	leader := fakeSrvr(t, srvrSays("leader"), false)
	standalone := fakeSrvr(t, srvrSays("standalone"), false)
	observer := fakeSrvr(t, srvrSays("observer"), false)
	silent := fakeSrvr(t, "", true)
	notServing := fakeSrvr(t, "This ZooKeeper instance is not currently serving requests\n", false)
	notListed := fakeSrvr(t, "srvr is not executed because it is not in the whitelist.\n", false)
	garbage := fakeSrvr(t, strings.Repeat("x", 3*leaderProbeMaxReply)+"\nMode: leader\n", false)
	closed := closedAddr(t)

	for _, tc := range []struct {
		name    string
		servers []string
		want    int
	}{
		{"leader among followers", []string{follower, follower, leader}, 2},
		{"a standalone server leads", []string{standalone}, 0},
		{"observers and followers only", []string{follower, observer}, -1},
		{"two claim to lead: the first in order", []string{follower, leader, leader}, 1},
		{"silent and closed servers do not hide the leader", []string{silent, closed, leader}, 2},
		{"not serving, not whitelisted", []string{notServing, notListed}, -1},
		// A Mode line past the reply cap is not read: the reply is not a
		// real srvr reply, and the probe reads no more than the cap.
		{"a flood is cut at the cap", []string{garbage}, -1},
		{"nothing answers", []string{silent, closed}, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			got := probeLeader(tc.servers, 300*time.Millisecond)
			took := time.Since(start)
			require.Equal(t, tc.want, got)
			require.Less(t, took, 2*time.Second, "the probe is bounded by its timeout")
		})
	}

	// A silent server costs the timeout, no more.
	start := time.Now()
	require.Equal(t, -1, probeLeader([]string{silent}, 200*time.Millisecond))
	require.Less(t, time.Since(start), time.Second)
}

func TestServerModeErrors(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err := serverMode(ctx, fakeSrvr(t, "hello\n", false))
	require.ErrorIs(t, err, errNoMode)
	_, err = serverMode(ctx, closedAddr(t))
	require.Error(t, err)
	m, err := serverMode(ctx, fakeSrvr(t, srvrSays("follower"), false))
	require.NoError(t, err)
	require.Equal(t, "follower", m)
}

// TestLeaderFirstPasses: the provider probes at the start of every pass,
// puts the leader first, reports retryStart when a pass ends without a
// connection, and starts afresh after Connected.
func TestLeaderFirstPasses(t *testing.T) {
	leader := 2
	h := &leaderFirst{log: slog.New(slog.DiscardHandler)}
	h.probe = func(s []string) int { return leader }
	require.NoError(t, h.Init([]string{"a", "b", "c"}))
	require.Equal(t, 3, h.Len())

	next := func() string {
		s, retry := h.Next()
		if retry {
			return s + "!"
		}
		return s
	}
	require.Equal(t, []string{"c", "a", "b"}, []string{next(), next(), next()})
	probes, _ := h.counts()
	require.Equal(t, 1, probes)
	// A second pass without a connection: retryStart, probed again.
	leader = 0
	require.Equal(t, []string{"a!", "b", "c"}, []string{next(), next(), next()})
	probes, _ = h.counts()
	require.Equal(t, 2, probes)
	// Connected to b; when the connection drops, a new pass, probed.
	h.Connected()
	leader = 1
	require.Equal(t, "b", next())
	probes, _ = h.counts()
	require.Equal(t, 3, probes)
	// No leader known: the order go-zookeeper gave.
	h.Connected()
	leader = -1
	require.Equal(t, []string{"a", "b", "c"}, []string{next(), next(), next()})
	_, leaders := h.counts()
	require.Equal(t, 3, leaders)
	require.Error(t, h.Init(nil))
}

// TestDialPrefersLeader: on a 3-server ensemble every client dialled with
// the defaults is connected to the leader (go-zookeeper's shuffle would
// put two of three elsewhere; seven dials all landing there by chance has
// odds 1 in 2187), and one dialled with AnyServer still works. After the
// leader is killed the clients reconnect and keep working.
func TestDialPrefersLeader(t *testing.T) {
	needZK(t)
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 3})
	ctx := testCtx(t, 120*time.Second)
	leader, err := e.Leader(ctx)
	require.NoError(t, err)

	var clients []*Client
	for i := range 7 {
		// Vary the order the addresses are given in.
		addrs := e.Addrs()
		addrs = append(addrs[i%3:], addrs[:i%3]...)
		c := dial(t, addrs)
		require.Equal(t, e.Addrs()[leader], c.Conn().Server(), "client %d", i)
		_, leaders := c.hosts.counts()
		require.GreaterOrEqual(t, leaders, 1)
		clients = append(clients, c)
	}
	any, err := Dial(ctx, DialConfig{Servers: e.Addrs(), SessionTimeout: 4 * time.Second, AnyServer: true})
	require.NoError(t, err)
	defer any.Close()
	require.Nil(t, any.hosts)
	_, err = any.Conn().Create("/any", nil, 0, any.ACL())
	require.NoError(t, err)

	require.NoError(t, e.Kill(leader))
	newLeader, err := e.Leader(ctx)
	require.NoError(t, err)
	for i, c := range clients {
		require.NoError(t, c.waitSession(ctx), "client %d", i)
		// Every client reconnected to a live server and writes there.
		_, err := retryConn(ctx, func() error {
			_, err := c.Conn().Create("/after-"+string(rune('a'+i)), nil, 0, c.ACL())
			return err
		})
		require.NoError(t, err, "client %d", i)
		require.NotEqual(t, e.Addrs()[leader], c.Conn().Server())
		probes, _ := c.hosts.counts()
		require.GreaterOrEqual(t, probes, 2, "client %d probed again on reconnect", i)
	}
	t.Logf("old leader %d, new leader %d", leader, newLeader)
}

// retryConn retries f while ZooKeeper is unreachable (the ensemble electing).
func retryConn(ctx context.Context, f func() error) (int, error) {
	for n := 1; ; n++ {
		err := f()
		if err == nil || !(isConnErr(err) || err == zk.ErrNoServer) {
			return n, err
		}
		select {
		case <-ctx.Done():
			return n, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

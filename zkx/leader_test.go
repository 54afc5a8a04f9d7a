package zkx

import (
	"context"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/third_party/zk"
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

func TestProbeModes(t *testing.T) {
	follower := fakeSrvr(t, srvrSays("follower"), false)
	leader := fakeSrvr(t, srvrSays("leader"), false)
	standalone := fakeSrvr(t, srvrSays("standalone"), false)
	observer := fakeSrvr(t, srvrSays("observer"), false)
	silent := fakeSrvr(t, "", true)
	notServing := fakeSrvr(t, "This ZooKeeper instance is not currently serving requests\n", false)
	notListed := fakeSrvr(t, "srvr is not executed because it is not in the whitelist.\n", false)
	// A Mode line past the reply cap is not read: the probe reads no more
	// than the cap of a reply that is not a real srvr reply.
	flood := fakeSrvr(t, strings.Repeat("x", 3*leaderProbeMaxReply)+"\nMode: leader\n", false)
	closed := closedAddr(t)

	servers := []string{follower, leader, standalone, observer, silent, notServing, notListed, flood, closed}
	start := time.Now()
	modes := probeModes(servers, 300*time.Millisecond)
	require.Less(t, time.Since(start), 2*time.Second, "the probe is bounded by its timeout")
	require.Equal(t, []string{"follower", "leader", "standalone", "observer", "", "", "", "", ""}, modes)

	// A silent server costs the timeout, no more.
	start = time.Now()
	require.Equal(t, []string{""}, probeModes([]string{silent}, 200*time.Millisecond))
	require.Less(t, time.Since(start), time.Second)
}

func TestOrderServers(t *testing.T) {
	s := []string{"a", "b", "c", "d"}
	for _, tc := range []struct {
		name   string
		modes  []string
		last   string
		want   []string
		leader bool
	}{
		{"leader first, the rest as given", []string{"follower", "follower", "leader", "follower"}, "", []string{"c", "a", "b", "d"}, true},
		{"silent servers last", []string{"", "follower", "", "follower"}, "", []string{"b", "d", "a", "c"}, false},
		{"no leader: start after the last connection", []string{"follower", "follower", "follower", "follower"}, "b", []string{"c", "d", "a", "b"}, false},
		// The server of the last connection went silent (a partition that
		// accepts and says nothing): it is tried last, not first again.
		{"a silent last connection is tried last", []string{"", "follower", "", "follower"}, "a", []string{"b", "d", "c", "a"}, false},
		{"the leader even if it was the last connection", []string{"leader", "follower", "", "follower"}, "a", []string{"a", "b", "d", "c"}, true},
		{"two claim to lead: both first, rotated", []string{"leader", "follower", "leader", ""}, "a", []string{"c", "a", "b", "d"}, true},
		{"standalone in a list is not a leader", []string{"standalone", "follower", "", ""}, "", []string{"a", "b", "c", "d"}, false},
		{"last unknown", []string{"", "", "", ""}, "zz", []string{"a", "b", "c", "d"}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, leader := orderServers(s, tc.modes, tc.last)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.leader, leader)
		})
	}
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

// fakeLookup resolves "multi" to two addresses and fails "nowhere".
func fakeLookup(_ context.Context, host string) ([]string, error) {
	switch host {
	case "multi":
		return []string{"10.0.0.1", "10.0.0.2"}, nil
	case "nowhere":
		return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
	default:
		return []string{host}, nil
	}
}

// TestLeaderFirstPasses: the provider resolves names once into one
// address per record, probes at the start of every pass, orders the
// leader first, reports retryStart when a pass ends without a
// connection, and after Connected starts afresh with the server of that
// connection last.
func TestLeaderFirstPasses(t *testing.T) {
	var modes map[string]string
	h := &leaderFirst{log: slog.New(slog.DiscardHandler), lookup: fakeLookup}
	h.probe = func(s []string) []string {
		out := make([]string, len(s))
		for i, a := range s {
			out[i] = modes[a]
		}
		return out
	}
	require.NoError(t, h.Init([]string{"multi:2181", "127.0.0.3:2181"}))
	require.Equal(t, 3, h.Len())
	require.ElementsMatch(t, []string{"10.0.0.1:2181", "10.0.0.2:2181", "127.0.0.3:2181"}, h.servers)

	next := func() string {
		s, retry := h.Next()
		if retry {
			return s + "!"
		}
		return s
	}
	pass := func() []string { return []string{next(), next(), next()} }
	modes = map[string]string{"10.0.0.1:2181": "follower", "10.0.0.2:2181": "follower", "127.0.0.3:2181": "leader"}
	got := pass()
	require.Equal(t, "127.0.0.3:2181", got[0])
	probes, _ := h.counts()
	require.Equal(t, 1, probes)
	// A second pass without a connection: retryStart, probed again.
	modes = map[string]string{"10.0.0.1:2181": "leader", "10.0.0.2:2181": "follower", "127.0.0.3:2181": ""}
	require.Equal(t, []string{"10.0.0.1:2181!", "10.0.0.2:2181"}, []string{next(), next()})
	probes, _ = h.counts()
	require.Equal(t, 2, probes)
	// Connected to 10.0.0.2 (the second of that pass); the connection
	// drops and the leader is gone: 10.0.0.2 goes silent, so it is tried
	// last, after every server that answered.
	h.Connected()
	require.Equal(t, "10.0.0.2:2181", h.last)
	modes = map[string]string{"10.0.0.1:2181": "follower", "10.0.0.2:2181": "", "127.0.0.3:2181": "follower"}
	got = pass()
	require.Equal(t, "10.0.0.2:2181", got[2])
	require.NotContains(t, got[0], "!")
	probes, leaders := h.counts()
	require.Equal(t, 3, probes)
	require.Equal(t, 2, leaders)

	// A name that does not resolve fails Init (and so Dial) at once.
	err := h.Init([]string{"nowhere:2181"})
	require.Error(t, err)
	require.Contains(t, err.Error(), "nowhere")
	require.Error(t, h.Init(nil))
	require.Error(t, h.Init([]string{"no-port"}))
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
		require.NoError(t, c.WaitSession(ctx), "client %d", i)
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
		if err == nil || !(IsConnLoss(err) || err == zk.ErrNoServer) {
			return n, err
		}
		select {
		case <-ctx.Done():
			return n, err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// TestDialUnresolvable: a server name that does not resolve fails Dial at
// once, naming it (as with go-zookeeper's own provider), instead of
// retrying until ctx ends.
func TestDialUnresolvable(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	start := time.Now()
	_, err := Dial(ctx, DialConfig{Servers: []string{"roomlog-no-such-host.invalid:2181"}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "roomlog-no-such-host.invalid")
	require.Less(t, time.Since(start), 10*time.Second)
}

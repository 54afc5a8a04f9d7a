package zkensemble

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/faultnet"
)

func TestFaultNetOff(t *testing.T) {
	// Without the option nothing is proxied and every helper says so.
	e := &Ensemble{servers: []*server{{index: 0, clientPort: 1}}}
	require.Nil(t, e.Net())
	require.Nil(t, e.ProxiedAddrs())
	_, err := e.ClientLinks("m1")
	require.ErrorIs(t, err, ErrNoFaultNet)
	require.ErrorIs(t, e.Isolate(0), ErrNoFaultNet)
	require.ErrorIs(t, e.HealNet(), ErrNoFaultNet)
	require.ErrorIs(t, e.DelayAll(time.Millisecond, 0), ErrNoFaultNet)
	require.Nil(t, e.PeerLinks(0))

	// zoo.cfg is byte for byte what it was before the option existed.
	dir := t.TempDir()
	all := []*server{
		{index: 0, clientPort: 10, quorumPort: 11, electionPort: 12, dir: filepath.Join(dir, "s0")},
		{index: 1, clientPort: 20, quorumPort: 21, electionPort: 22, dir: filepath.Join(dir, "s1")},
		{index: 2, clientPort: 30, quorumPort: 31, electionPort: 32, dir: filepath.Join(dir, "s2")},
	}
	require.NoError(t, writeFiles(all[1], all, nil, DefaultTickTime, nil))
	cfg, err := os.ReadFile(all[1].cfgPath())
	require.NoError(t, err)
	require.Contains(t, string(cfg), "server.1=127.0.0.1:11:12\nserver.2=127.0.0.1:21:22\nserver.3=127.0.0.1:31:32\n")
}

func TestLinkNames(t *testing.T) {
	require.Equal(t, "zk2", ServerNode(2))
	require.Equal(t, "zk0->zk2/quorum", QuorumLinkName(0, 2))
	require.Equal(t, "zk2->zk0/election", ElectionLinkName(2, 0))
	require.Equal(t, "m1->zk1", ClientLinkName("m1", 1))
	require.True(t, faultnet.To("zk1")(ClientLinkName("m1", 1)))
	require.True(t, faultnet.From("zk0")(QuorumLinkName(0, 1)))
	require.False(t, faultnet.To("zk1")(QuorumLinkName(0, 1)), "To(server) selects client links only")
}

// TestFaultNet runs one 3-server ensemble whose every link goes through
// faultnet and breaks it in turn.
func TestFaultNet(t *testing.T) {
	began := time.Now()
	e := ForTest(t, Options{Servers: 3, FaultNet: true, FaultNetSeed: 7, Logger: testLogger()})
	t.Logf("3 servers behind faultnet started in %v", time.Since(began))
	require.NotNil(t, e.Net())

	t.Run("QuorumThroughProxies", func(t *testing.T) { testQuorumThroughProxies(t, e) })
	t.Run("ClientLinkPartition", func(t *testing.T) { testClientLinkPartition(t, e) })
	t.Run("IsolateLeader", func(t *testing.T) { testIsolateLeader(t, e) })
	t.Run("RestartThroughProxies", func(t *testing.T) { testRestartThroughProxies(t, e) })
	t.Run("DelayAll", func(t *testing.T) { testDelayAll(t, e) })

	// Close stops every proxy: none listens and no goroutine of faultnet is left.
	proxied := e.ProxiedAddrs()
	require.NoError(t, e.Close())
	for _, a := range proxied {
		c, err := net.DialTimeout("tcp", a, time.Second)
		if err == nil {
			c.Close()
			t.Fatalf("proxy %s still listens after Close", a)
		}
	}
	// Close waited for every proxy and relay goroutine; one that has run
	// its deferred Done is still listed until it returns (nothing in Go
	// joins a goroutine's exit), so the stacks are read until they are
	// clean, within a deadline that a goroutine Close did not wait for
	// outlives.
	var stacks string
	require.Eventually(t, func() bool {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		return !strings.Contains(stacks, "internal/infra/faultnet.") && !strings.Contains(stacks, "zkensemble.(*relay)")
	}, 2*time.Second, 5*time.Millisecond, "faultnet or relay goroutines left after Close")
	require.NotContains(t, stacks, "internal/infra/faultnet.", "faultnet goroutines left after Close")
	require.NotContains(t, stacks, "zkensemble.(*relay)", "relay goroutines left after Close")
}

func testQuorumThroughProxies(t *testing.T, e *Ensemble) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// Every link exists: one client link per server, quorum and election
	// per directed pair.
	want := []string{"client->zk0", "client->zk1", "client->zk2"}
	for i := 0; i < 3; i++ {
		for j := 0; j < 3; j++ {
			if i != j {
				want = append(want, QuorumLinkName(i, j), ElectionLinkName(i, j))
			}
		}
	}
	require.ElementsMatch(t, want, e.Net().Names(nil))
	require.Len(t, e.PeerLinks(1), 8)

	// Each server's zoo.cfg names itself at its real ports on the wildcard
	// address and every peer at the proxy of its own link to that peer.
	for i, s := range e.servers {
		cfg, err := os.ReadFile(s.cfgPath())
		require.NoError(t, err)
		for j, o := range e.servers {
			line := fmt.Sprintf("server.%d=0.0.0.0:%d:%d\n", j+1, o.quorumPort, o.electionPort)
			if i != j {
				q := e.Net().Link(QuorumLinkName(i, j))
				el := e.Net().Link(ElectionLinkName(i, j))
				require.Equal(t, []string{e.relays[j].addr()}, q.Targets())
				require.Equal(t, fmt.Sprintf("127.0.0.1:%d", o.quorumPort), e.relays[j].target)
				require.Equal(t, []string{fmt.Sprintf("127.0.0.1:%d", o.electionPort)}, el.Targets())
				line = fmt.Sprintf("server.%d=%s:%d\n", j+1, q.Addr(), port(t, el.Addr()))
			}
			require.Contains(t, string(cfg), line, "zoo.cfg of server %d", i)
		}
	}

	// The quorum formed through the proxies: one leader, two followers,
	// every follower's quorum link to the leader and the election link of
	// every pair (kept from the higher id to the lower) carried traffic.
	leader, err := e.Leader(ctx)
	require.NoError(t, err)
	stats := e.Net().Stats()
	for i := 0; i < 3; i++ {
		if i != leader {
			m, err := e.Mode(ctx, i)
			require.NoError(t, err)
			require.Equal(t, "follower", m)
			st := stats[QuorumLinkName(i, leader)]
			require.Positive(t, st.BytesUp, "%s: %+v", QuorumLinkName(i, leader), st)
			require.Positive(t, st.BytesDown, "%s: %+v", QuorumLinkName(i, leader), st)
		}
		for j := 0; j < i; j++ {
			st := stats[ElectionLinkName(i, j)]
			require.Positive(t, st.BytesUp, "%s: %+v", ElectionLinkName(i, j), st)
			require.Positive(t, st.BytesDown, "%s: %+v", ElectionLinkName(i, j), st)
		}
	}
	// No server reached a peer's quorum or election port directly.
	requireNoDirectPeerConnections(t, e)

	// A client through the proxies gets a session and writes.
	conn := connect(t, e.ProxiedAddrs())
	k := e.IndexOf(conn.Server())
	require.GreaterOrEqual(t, k, 0, "IndexOf(%s) knows proxied addresses", conn.Server())
	createRetry(t, conn, "/through", []byte("proxies"), 10*time.Second)
	data, _, err := conn.Get("/through")
	require.NoError(t, err)
	require.Equal(t, "proxies", string(data))
	require.Positive(t, e.Net().Link(ClientLinkName(DefaultClient, k)).Stats().BytesUp)
}

func port(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return n
}

// requireNoDirectPeerConnections fails if a server process holds an
// established TCP connection to a peer's real quorum or election port:
// every such connection must be the proxy's (this process), never a JVM's.
// Linux only (it reads /proc).
func requireNoDirectPeerConnections(t *testing.T, e *Ensemble) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Log("not on Linux: direct connections not checked")
		return
	}
	peerPorts := map[int]bool{}
	for _, s := range e.servers {
		peerPorts[s.quorumPort] = true
		peerPorts[s.electionPort] = true
	}
	proxyPorts := map[int]bool{} // of the peer links: where the servers do dial
	for i := range e.servers {
		for _, name := range e.PeerLinks(i) {
			proxyPorts[port(t, e.Net().Link(name).Addr())] = true
		}
	}
	viaProxy := 0
	remote := map[string]int{} // socket inode -> remote port, established only
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		fh, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(fh)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "01" { // 01: ESTABLISHED
				continue
			}
			_, hexPort, ok := strings.Cut(fields[2], ":")
			if !ok {
				continue
			}
			p, err := strconv.ParseInt(hexPort, 16, 32)
			if err != nil {
				continue
			}
			remote[fields[9]] = int(p)
		}
		fh.Close()
	}
	for i := range e.servers {
		pid := e.PID(i)
		if pid == 0 {
			continue
		}
		fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
		require.NoError(t, err)
		for _, fd := range fds {
			l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
			if err != nil {
				continue
			}
			inode, ok := strings.CutPrefix(l, "socket:[")
			if !ok {
				continue
			}
			p, ok := remote[strings.TrimSuffix(inode, "]")]
			if ok && peerPorts[p] {
				t.Fatalf("server %d (pid %d) is connected straight to peer port %d, bypassing faultnet", i, pid, p)
			}
			if ok && proxyPorts[p] {
				viaProxy++
			}
		}
	}
	// The check sees the servers' sockets at all: the followers' quorum
	// connections and the election connections go to peer link proxies.
	require.GreaterOrEqual(t, viaProxy, 4, "server connections to peer link proxies found in /proc")
}

func testClientLinkPartition(t *testing.T, e *Ensemble) {
	for _, bad := range []string{"", "a->b", "x/y", "zk1", "a b"} {
		_, err := e.ClientLinks(bad)
		require.ErrorIs(t, err, ErrBadLinkName, "%q", bad)
	}
	c1, err := e.ClientLinks("c1")
	require.NoError(t, err)
	require.Len(t, c1, 3)
	again, err := e.ClientLinks("c1")
	require.NoError(t, err)
	require.Equal(t, c1, again, "ClientLinks is idempotent")
	for i, a := range c1 {
		require.Equal(t, a, e.Net().Link(ClientLinkName("c1", i)).Addr())
		require.Equal(t, i, e.IndexOf(a))
	}

	one := connectTimeout(t, c1, 3*time.Second)
	k := e.IndexOf(one.Server())
	require.GreaterOrEqual(t, k, 0)
	// c2 is another client of the same server k, on its own link.
	c2, err := e.ClientLinks("c2")
	require.NoError(t, err)
	two := connectTimeout(t, []string{c2[k]}, 3*time.Second)
	createRetry(t, one, "/c1", nil, 10*time.Second)

	require.NoError(t, e.Net().Partition(ClientLinkName("c1", k)))
	t.Cleanup(func() { _ = e.Net().Heal(ClientLinkName("c1", k)) })

	// c1 gives up on server k and carries on through another server...
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		if i := e.IndexOf(one.Server()); i == k || one.State() != zk.StateHasSession {
			c.Errorf("c1 on server %d, state %v", i, one.State())
		}
	}, 15*time.Second, 50*time.Millisecond, "c1 moves off server "+strconv.Itoa(k))
	createRetry(t, one, "/c1/after", nil, 10*time.Second)
	// ...while c2 still talks to server k through its own link, and a new
	// connection through c1's link to k gets nothing at all.
	require.Equal(t, k, e.IndexOf(two.Server()))
	_, err = two.Create("/c2", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	c, err := net.DialTimeout("tcp", c1[k], time.Second)
	require.NoError(t, err, "the proxy still accepts")
	defer c.Close()
	_, err = c.Write([]byte("srvr"))
	require.NoError(t, err)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(500*time.Millisecond)))
	n, err := c.Read(make([]byte, 64))
	require.Zero(t, n, "an answer crossed a partitioned link")
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "silence, not a reset: %v", err)
	require.Positive(t, e.Net().Link(ClientLinkName("c1", k)).Stats().Open)
}

func testIsolateLeader(t *testing.T, e *Ensemble) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	leader, err := e.Leader(ctx)
	require.NoError(t, err)
	var others []int
	for i := 0; i < 3; i++ {
		if i != leader {
			others = append(others, i)
		}
	}
	proxied := e.ProxiedAddrs()
	majority := connect(t, []string{proxied[others[0]], proxied[others[1]]})
	createRetry(t, majority, "/iso", nil, 10*time.Second)
	alone := connect(t, []string{proxied[leader]})

	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("links: %+v", e.Net().Stats())
		}
	})
	began := time.Now()
	require.NoError(t, e.Isolate(leader))
	t.Cleanup(func() { _ = e.HealNet() })

	// The other two elect a new leader between them...
	var newLeader int
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		var modes []string
		for _, i := range others {
			m, err := e.Mode(ctx, i)
			if err == nil && m == "leader" {
				newLeader = i
				return
			}
			modes = append(modes, fmt.Sprintf("%d: %s %v", i, m, err))
		}
		c.Errorf("%s", strings.Join(modes, "; "))
	}, 30*time.Second, 50*time.Millisecond, "a new leader among "+fmt.Sprint(others))
	t.Logf("server %d leads %v after isolating server %d", newLeader, time.Since(began), leader)
	// ...while the isolated one still accepts TCP on its client port and
	// says it is not serving.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		out, err := fourLetter(ctx, e.Addrs()[leader], "srvr")
		if assert.NoError(c, err) {
			assert.Contains(c, out, "not currently serving", "srvr")
		}
	}, 10*time.Second, 50*time.Millisecond, "isolated server stops serving")
	out, err := fourLetter(ctx, proxied[leader], "srvr")
	require.NoError(t, err, "the client link of the isolated server is up")
	require.Contains(t, out, "not currently serving")

	// A write through the isolated server does not land; one through the
	// majority does.
	res := make(chan error, 1)
	go func() { // owner: this test; drained below or abandoned to a buffered channel
		_, err := alone.Create("/iso/alone", nil, 0, zk.WorldACL(zk.PermAll))
		res <- err
	}()
	createRetry(t, majority, "/iso/quorum", []byte("q"), 10*time.Second)
	select {
	case err := <-res:
		require.Error(t, err, "a write through the isolated server succeeded")
	case <-time.After(time.Second):
	}

	// Healed, it rejoins as a follower and catches up.
	healed := time.Now()
	require.NoError(t, e.HealNet())
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		m, err := e.Mode(ctx, leader)
		if assert.NoError(c, err) {
			assert.Equal(c, "follower", m, "mode")
		}
	}, 30*time.Second, 50*time.Millisecond, "isolated server rejoins as follower")
	t.Logf("server %d follows again %v after HealNet", leader, time.Since(healed))
	back := connect(t, []string{proxied[leader]})
	data, _, err := back.Get("/iso/quorum")
	require.NoError(t, err)
	require.Equal(t, "q", string(data))
}

func testRestartThroughProxies(t *testing.T, e *Ensemble) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader, err := e.Leader(ctx)
	require.NoError(t, err)
	f := (leader + 1) % 3
	link := e.Net().Link(QuorumLinkName(f, leader))
	before := link.Stats()
	names := e.Net().Names(nil)
	proxied := e.ProxiedAddrs()

	require.NoError(t, e.Kill(f))
	require.NoError(t, e.Start(ctx, f))
	m, err := e.Mode(ctx, f)
	require.NoError(t, err)
	require.Equal(t, "follower", m)
	after := link.Stats()
	require.Greater(t, after.Accepted, before.Accepted, "the restarted follower dialed its leader through the proxy")
	require.Equal(t, names, e.Net().Names(nil), "a restart adds or drops no link")
	require.Equal(t, proxied, e.ProxiedAddrs(), "proxies keep their ports over restarts")
	requireNoDirectPeerConnections(t, e)

	conn := connect(t, []string{proxied[f]})
	_, _, err = conn.Get("/through")
	require.NoError(t, err)
}

func testDelayAll(t *testing.T, e *Ensemble) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	const d = 50 * time.Millisecond
	require.NoError(t, e.DelayAll(d, 0))
	t.Cleanup(func() { _ = e.DelayAll(0, 0) })
	// A link made after DelayAll gets the delay too: a srvr round trip
	// through it takes at least 2d.
	late, err := e.ClientLinks("late")
	require.NoError(t, err)
	for _, a := range []string{late[0], e.ProxiedAddrs()[1]} {
		began := time.Now()
		out, err := fourLetter(ctx, a, "srvr")
		require.NoError(t, err)
		require.Contains(t, out, "Mode:")
		require.GreaterOrEqual(t, time.Since(began), 2*d, "srvr through %s", a)
	}
	// The ensemble still works with latency on every link.
	conn := connect(t, late)
	createRetry(t, conn, "/slow", nil, 10*time.Second)

	require.NoError(t, e.DelayAll(0, 0))
	// With the delay on, every round trip takes 2d or more; so the fastest
	// of a few does without it. (One round trip alone may take longer on a
	// busy machine: the server is a JVM sharing its cores.)
	fastest := time.Duration(1<<63 - 1)
	for range 5 {
		began := time.Now()
		_, err = fourLetter(ctx, late[0], "srvr")
		require.NoError(t, err)
		fastest = min(fastest, time.Since(began))
	}
	require.Less(t, fastest, 2*d, "DelayAll(0, 0) removes the delay")
}

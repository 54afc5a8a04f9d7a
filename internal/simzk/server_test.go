package simzk

import (
	"bufio"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
)

type quietZK struct{}

func (quietZK) Printf(string, ...interface{}) {}

var openACL = zk.WorldACL(zk.PermAll)

// client is a zk.Conn and the session events it saw.
type client struct {
	*zk.Conn
	mu     sync.Mutex
	states []zk.State
}

func (c *client) sawState(st zk.State) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.states {
		if s == st {
			return true
		}
	}
	return false
}

func dialAddrs(t *testing.T, addrs []string, timeout time.Duration) *client {
	t.Helper()
	c := &client{}
	conn, _, err := zk.Connect(addrs, timeout, zk.WithLogInfo(false), zk.WithLogger(quietZK{}),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type == zk.EventSession {
				c.mu.Lock()
				c.states = append(c.states, ev.State)
				c.mu.Unlock()
			}
		}))
	require.NoError(t, err)
	c.Conn = conn
	t.Cleanup(conn.Close)
	require.Eventually(t, func() bool { return conn.State() == zk.StateHasSession }, 10*time.Second, 5*time.Millisecond)
	return c
}

func startServer(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Start(opts)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

func waitEvent(t *testing.T, ch <-chan zk.Event, within time.Duration) zk.Event {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(within):
		t.Fatalf("no watch event within %v", within)
		return zk.Event{}
	}
}

func TestBasicOps(t *testing.T) {
	s := startServer(t, Options{})
	c := dialAddrs(t, []string{s.Addr()}, 10*time.Second)
	require.Equal(t, 2*time.Second, c.NegotiatedSessionTimeout(), "clamped to 20 ticks")
	c2 := dialAddrs(t, []string{s.Addr()}, time.Millisecond)
	require.Equal(t, 200*time.Millisecond, c2.NegotiatedSessionTimeout(), "clamped to 2 ticks")
	p, err := c.Create("/a", []byte("x"), 0, openACL)
	require.NoError(t, err)
	require.Equal(t, "/a", p)
	b, st, err := c.Get("/a")
	require.NoError(t, err)
	require.Equal(t, "x", string(b))
	require.Equal(t, st.Czxid, st.Mzxid)
	st2, err := c.Set("/a", []byte("yy"), 0)
	require.NoError(t, err)
	require.Equal(t, int32(1), st2.Version)
	require.Equal(t, int32(2), st2.DataLength)
	require.Greater(t, st2.Mzxid, st.Mzxid)
	_, err = c.Set("/a", nil, 0)
	require.ErrorIs(t, err, zk.ErrBadVersion)
	_, err = c.Create("/a/b", nil, 0, openACL)
	require.NoError(t, err)
	require.ErrorIs(t, c.Delete("/a", -1), zk.ErrNotEmpty)
	names, _, err := c.Children("/")
	require.NoError(t, err)
	require.Equal(t, []string{"a", "zookeeper"}, names)
	res, err := c.Multi(&zk.CreateRequest{Path: "/m", Acl: openACL}, &zk.SetDataRequest{Path: "/m", Data: []byte("z"), Version: 0})
	require.NoError(t, err)
	require.Equal(t, "/m", res[0].String)
	require.Equal(t, int32(1), res[1].Stat.Version)
	_, err = c.Multi(&zk.CreateRequest{Path: "/n", Acl: openACL}, &zk.CheckVersionRequest{Path: "/m", Version: 7})
	require.ErrorIs(t, err, zk.ErrBadVersion)
	ok, _, err := c.Exists("/n")
	require.NoError(t, err)
	require.False(t, ok)
	_, err = c.Sync("/a")
	require.NoError(t, err)
	require.NoError(t, c.AddAuth("digest", []byte("u:p")))
	_, err = c.Create("/auth", nil, 0, []zk.ACL{{Perms: zk.PermAll, Scheme: "auth"}})
	require.NoError(t, err)
	acl, _, err := c.GetACL("/auth")
	require.NoError(t, err)
	require.Equal(t, zk.DigestACL(zk.PermAll, "u", "p"), acl)
}

func TestFourLetterWords(t *testing.T) {
	s := startServer(t, Options{})
	ask := func(cmd string) string {
		nc, err := net.DialTimeout("tcp", s.Addr(), time.Second)
		require.NoError(t, err)
		defer nc.Close()
		require.NoError(t, nc.SetDeadline(time.Now().Add(5*time.Second)))
		_, err = nc.Write([]byte(cmd))
		require.NoError(t, err)
		b, err := io.ReadAll(bufio.NewReader(nc))
		require.NoError(t, err)
		return string(b)
	}
	require.Equal(t, "imok", ask("ruok"))
	out := ask("srvr")
	require.Contains(t, out, "Mode: standalone\n")
	require.Contains(t, out, "Zxid: 0x0\n")
	c := dialAddrs(t, []string{s.Addr()}, time.Second)
	_, err := c.Create("/a", nil, 0, openACL)
	require.NoError(t, err)
	require.Contains(t, ask("srvr"), "Zxid: 0x2\n", "a session and a create")
	require.Contains(t, ask("stat"), "Clients:")
}

// TestReconnectRearmsWatches: the connection drops; the watched node
// changes before the client's setWatches is processed; the watch fires
// after the re-attach (setWatches' relative zxid), and the untouched
// watches are re-armed and fire later.
func TestReconnectRearmsWatches(t *testing.T) {
	var other atomic.Pointer[client]
	var sid atomic.Int64
	var setWatches atomic.Int32
	s := startServer(t, Options{Intercept: func(r Request) Fault {
		if r.Op == "setWatches" && r.Session == sid.Load() {
			setWatches.Add(1)
			// While the client has no connection: a change it must learn of.
			_, err := other.Load().Set("/a", []byte("changed"), -1)
			if err != nil {
				panic(err)
			}
		}
		return None
	}})
	c := dialAddrs(t, []string{s.Addr()}, 2*time.Second)
	o := dialAddrs(t, []string{s.Addr()}, 2*time.Second)
	other.Store(o)
	for _, p := range []string{"/a", "/b", "/dir"} {
		_, err := o.Create(p, nil, 0, openACL)
		require.NoError(t, err)
	}
	_, _, wa, err := c.GetW("/a")
	require.NoError(t, err)
	_, _, wb, err := c.GetW("/b")
	require.NoError(t, err)
	_, _, wdir, err := c.ChildrenW("/dir")
	require.NoError(t, err)
	ok, _, wnew, err := c.ExistsW("/new")
	require.NoError(t, err)
	require.False(t, ok)

	sid.Store(c.SessionID())
	before := c.SessionID()
	s.Disconnect(before)
	ev := waitEvent(t, wa, 5*time.Second)
	require.Equal(t, zk.EventNodeDataChanged, ev.Type)
	require.Equal(t, "/a", ev.Path)
	require.Equal(t, int32(1), setWatches.Load())
	require.Equal(t, before, c.SessionID(), "the session was re-attached")

	// The others were re-armed: they fire on the next change.
	_, err = o.Set("/b", []byte("1"), -1)
	require.NoError(t, err)
	require.Equal(t, zk.EventNodeDataChanged, waitEvent(t, wb, 5*time.Second).Type)
	_, err = o.Create("/dir/x", nil, 0, openACL)
	require.NoError(t, err)
	require.Equal(t, zk.EventNodeChildrenChanged, waitEvent(t, wdir, 5*time.Second).Type)
	_, err = o.Create("/new", nil, 0, openACL)
	require.NoError(t, err)
	require.Equal(t, zk.EventNodeCreated, waitEvent(t, wnew, 5*time.Second).Type)
}

// TestSetWatchesRules: each setWatches rule on its own, through the
// client's re-send after a disconnect with changes made meanwhile; with
// the planted bug setWatchesRearmAll the changes go unnoticed.
func TestSetWatchesRules(t *testing.T) {
	want := []zk.EventType{zk.EventNodeDeleted, zk.EventNodeChildrenChanged, zk.EventNodeDeleted, zk.EventNodeCreated}
	require.Equal(t, want, setWatchesRules(t, bugs{}))
	require.NotEqual(t, want, setWatchesRules(t, bugs{setWatchesRearmAll: true}), "planted bug setWatchesRearmAll")
}

// setWatchesRules returns the event each watch saw (EventNotWatching:
// none within a second of the re-attach).
func setWatchesRules(t *testing.T, b bugs) []zk.EventType {
	var sid atomic.Int64
	var during func()
	s := startServer(t, Options{bugs: b, Intercept: func(r Request) Fault {
		if r.Op == "setWatches" && r.Session == sid.Load() && during != nil {
			during()
		}
		return None
	}})
	c := dialAddrs(t, []string{s.Addr()}, 2*time.Second)
	o := dialAddrs(t, []string{s.Addr()}, 2*time.Second)
	for _, p := range []string{"/gone", "/kids", "/kidsgone"} {
		_, err := o.Create(p, nil, 0, openACL)
		require.NoError(t, err)
	}
	_, _, wgone, err := c.GetW("/gone")
	require.NoError(t, err)
	_, _, wkids, err := c.ChildrenW("/kids")
	require.NoError(t, err)
	_, _, wkg, err := c.ChildrenW("/kidsgone")
	require.NoError(t, err)
	_, _, wborn, err := c.ExistsW("/born")
	require.NoError(t, err)
	during = func() {
		require.NoError(t, o.Delete("/gone", -1))
		_, err := o.Create("/kids/x", nil, 0, openACL)
		require.NoError(t, err)
		require.NoError(t, o.Delete("/kidsgone", -1))
		_, err = o.Create("/born", nil, 0, openACL)
		require.NoError(t, err)
	}
	sid.Store(c.SessionID())
	s.Disconnect(c.SessionID())
	require.Eventually(t, func() bool {
		_, _, err := c.Exists("/")
		return err == nil
	}, 5*time.Second, 5*time.Millisecond)
	var got []zk.EventType
	for _, ch := range []<-chan zk.Event{wgone, wkids, wkg, wborn} {
		select {
		case ev := <-ch:
			got = append(got, ev.Type)
		case <-time.After(time.Second):
			got = append(got, zk.EventNotWatching)
		}
	}
	return got
}

func TestExpire(t *testing.T) {
	s := startServer(t, Options{})
	c := dialAddrs(t, []string{s.Addr()}, 2*time.Second)
	o := dialAddrs(t, []string{s.Addr()}, 2*time.Second)
	_, err := c.Create("/eph", nil, zk.FlagEphemeral, openACL)
	require.NoError(t, err)
	ok, _, w, err := o.ExistsW("/eph")
	require.NoError(t, err)
	require.True(t, ok)
	old := c.SessionID()
	require.Contains(t, s.Sessions(), old)
	s.Expire(old)
	require.NotContains(t, s.Sessions(), old)
	require.Equal(t, zk.EventNodeDeleted, waitEvent(t, w, time.Second).Type)
	require.Eventually(t, func() bool {
		return c.sawState(zk.StateExpired) && c.State() == zk.StateHasSession && c.SessionID() != old
	}, 10*time.Second, 5*time.Millisecond)
	ok, _, err = c.Exists("/eph")
	require.NoError(t, err)
	require.False(t, ok)
	require.Contains(t, s.Sessions(), c.SessionID())
}

func TestSessionTimeoutExpires(t *testing.T) {
	s := startServer(t, Options{Tick: 20 * time.Millisecond})
	c := dialAddrs(t, []string{s.Addr()}, 400*time.Millisecond)
	_, err := c.Create("/eph", nil, zk.FlagEphemeral, openACL)
	require.NoError(t, err)
	sid := c.SessionID()
	// A live client keeps its session with pings, well past the timeout.
	time.Sleep(time.Second)
	require.Contains(t, s.Sessions(), sid)
	c.Close()
	// Close is closeSession: the session ends at once.
	require.NotContains(t, s.Sessions(), sid)
	require.NotContains(t, s.Dump(), "/eph")
}

// TestHold: a held session's requests go unanswered; the client's read
// times out, the session expires after its timeout (ephemerals go), and
// after the release the client gets StateExpired and a new session.
func TestHold(t *testing.T) {
	s := startServer(t, Options{Tick: 20 * time.Millisecond})
	c := dialAddrs(t, []string{s.Addr()}, 600*time.Millisecond)
	o := dialAddrs(t, []string{s.Addr()}, 5*time.Second)
	// The create is heard after sent, so the session cannot expire
	// before sent + its timeout.
	sent := time.Now()
	_, err := c.Create("/eph", nil, zk.FlagEphemeral, openACL)
	require.NoError(t, err)
	sid := c.SessionID()
	s.Hold(sid, true)
	start := time.Now()
	_, _, err = c.Get("/eph")
	require.Error(t, err, "a held request is not answered")
	require.Less(t, time.Since(start), 2*time.Second)
	require.Eventually(t, func() bool {
		ok, _, err := o.Exists("/eph")
		return err == nil && !ok
	}, 3*time.Second, 10*time.Millisecond, "the held session expires")
	require.NotContains(t, s.Sessions(), sid)
	require.Equal(t, 400*time.Millisecond, c.NegotiatedSessionTimeout(), "20 ticks")
	require.GreaterOrEqual(t, time.Since(sent), c.NegotiatedSessionTimeout())
	require.False(t, c.sawState(zk.StateExpired), "held: the client hears nothing yet")
	require.NotEqual(t, zk.StateHasSession, c.State())
	s.Hold(sid, false)
	require.Eventually(t, func() bool {
		return c.sawState(zk.StateExpired) && c.State() == zk.StateHasSession && c.SessionID() != sid
	}, 10*time.Second, 5*time.Millisecond)
}

// TestHoldReleasedInTime: released before the timeout, the session lives.
func TestHoldReleasedInTime(t *testing.T) {
	s := startServer(t, Options{Tick: 20 * time.Millisecond, MaxSessionTimeout: 2 * time.Second})
	c := dialAddrs(t, []string{s.Addr()}, 2*time.Second)
	sid := c.SessionID()
	s.Hold(sid, true)
	time.Sleep(300 * time.Millisecond)
	s.Hold(sid, false)
	require.Eventually(t, func() bool {
		_, _, err := c.Exists("/")
		return err == nil
	}, 5*time.Second, 10*time.Millisecond)
	require.Equal(t, sid, c.SessionID())
	require.False(t, c.sawState(zk.StateExpired))
}

func TestDropBeforeAndAfter(t *testing.T) {
	var sid atomic.Int64
	s := startServer(t, Options{Intercept: func(r Request) Fault {
		if r.Session != sid.Load() {
			return None
		}
		switch r.Path {
		case "/before":
			return DropBefore
		case "/after":
			return DropAfter
		}
		if r.Op == "multi" && len(r.Ops) > 0 && r.Ops[0] == "create /multi" {
			return DropAfter
		}
		return None
	}})
	c := dialAddrs(t, []string{s.Addr()}, 2*time.Second)
	o := dialAddrs(t, []string{s.Addr()}, 2*time.Second)
	sid.Store(c.SessionID())
	// After each drop the client reconnects before the next request (one
	// sent while go-zookeeper waits to retry fails with ErrNoServer).
	reconnected := func() {
		require.Eventually(t, func() bool { return c.State() == zk.StateHasSession }, 5*time.Second, 5*time.Millisecond)
	}
	_, err := c.Create("/before", nil, 0, openACL)
	require.ErrorIs(t, err, zk.ErrConnectionClosed)
	reconnected()
	_, err = c.Create("/after", nil, 0, openACL)
	require.ErrorIs(t, err, zk.ErrConnectionClosed)
	reconnected()
	_, err = c.Multi(&zk.CreateRequest{Path: "/multi", Acl: openACL})
	require.ErrorIs(t, err, zk.ErrConnectionClosed)
	for p, want := range map[string]bool{"/before": false, "/after": true, "/multi": true} {
		ok, _, err := o.Exists(p)
		require.NoError(t, err)
		require.Equal(t, want, ok, p)
	}
	require.Eventually(t, func() bool { return c.State() == zk.StateHasSession }, 5*time.Second, 5*time.Millisecond)
	require.Equal(t, sid.Load(), c.SessionID(), "a dropped connection keeps the session")
}

func TestDelay(t *testing.T) {
	var sid atomic.Int64
	s := startServer(t, Options{FaultDelay: 300 * time.Millisecond, Intercept: func(r Request) Fault {
		if r.Session == sid.Load() && r.Op == "create" {
			return Delay
		}
		return None
	}})
	c := dialAddrs(t, []string{s.Addr()}, 2*time.Second)
	sid.Store(c.SessionID())
	start := time.Now()
	_, err := c.Create("/slow", nil, 0, openACL)
	require.NoError(t, err)
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond)
	ok, _, err := c.Exists("/slow")
	require.NoError(t, err)
	require.True(t, ok)
}

func TestSnapshotRestore(t *testing.T) {
	s := startServer(t, Options{})
	c := dialAddrs(t, []string{s.Addr()}, 2*time.Second)
	_, err := c.Create("/a", []byte("old"), 0, openACL)
	require.NoError(t, err)
	_, err = c.Create("/eph", nil, zk.FlagEphemeral, openACL)
	require.NoError(t, err)
	snap := s.Snapshot()
	_, err = c.Set("/a", []byte("new"), -1)
	require.NoError(t, err)
	_, err = c.Create("/b", nil, 0, openACL)
	require.NoError(t, err)
	for i := 0; i < 10; i++ {
		_, err = c.Set("/b", nil, -1)
		require.NoError(t, err)
	}
	require.Contains(t, snap.Dump(), "/eph")

	s.Restore(snap)
	require.Empty(t, s.Sessions())
	n := dialAddrs(t, []string{s.Addr()}, 2*time.Second)
	b, st, err := n.Get("/a")
	require.NoError(t, err)
	require.Equal(t, "old", string(b))
	require.Equal(t, int32(0), st.Version)
	ok, _, err := n.Exists("/b")
	require.NoError(t, err)
	require.False(t, ok)
	ok, _, err = n.Exists("/eph")
	require.NoError(t, err)
	require.False(t, ok, "the restored ephemeral's session is gone")
	p, err := n.Create("/c", nil, 0, openACL)
	require.NoError(t, err)
	_, st, err = n.Get(p)
	require.NoError(t, err)
	// After the snapshot's zxid: the restored ephemeral's session end, the
	// new session, the create.
	require.Equal(t, snap.Zxid()+3, st.Czxid, "zxids are reused after a restore")

	// The old client has seen a newer zxid: refused until the zxid
	// passes it, then told its session expired.
	require.False(t, c.sawState(zk.StateExpired))
	time.Sleep(100 * time.Millisecond)
	require.False(t, c.sawState(zk.StateExpired))
	for i := 0; i < 15; i++ {
		_, err := n.Set("/c", nil, -1)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		return c.sawState(zk.StateExpired) && c.State() == zk.StateHasSession
	}, 10*time.Second, 5*time.Millisecond)

	s.Wipe()
	w := dialAddrs(t, []string{s.Addr()}, 2*time.Second)
	names, _, err := w.Children("/")
	require.NoError(t, err)
	require.Equal(t, []string{"zookeeper"}, names)
}

func TestGarbageAndClose(t *testing.T) {
	s := startServer(t, Options{})
	nc, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	_, err = nc.Write([]byte{0x7f, 0xff, 0xff, 0xff, 1, 2, 3})
	require.NoError(t, err)
	require.NoError(t, nc.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = nc.Read(make([]byte, 1))
	require.Error(t, err, "an oversized length closes the connection")
	nc2, err := net.Dial("tcp", s.Addr())
	require.NoError(t, err)
	_, err = nc2.Write([]byte{0, 0, 0, 3, 1, 2, 3})
	require.NoError(t, err)
	require.NoError(t, nc2.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = nc2.Read(make([]byte, 1))
	require.Error(t, err, "a short connect request closes the connection")
	c := dialAddrs(t, []string{s.Addr()}, 2*time.Second)
	start := time.Now()
	s.Close()
	require.Less(t, time.Since(start), 2*time.Second)
	require.True(t, strings.HasPrefix(s.Addr(), "127.0.0.1:"))
	_ = c
}

// TestFaultStorm: clients work while faults of every kind hit them from
// another goroutine and from Intercept; nothing deadlocks, the race
// detector stays quiet, the tree keeps its invariants, and Close ends
// everything promptly.
func TestFaultStorm(t *testing.T) {
	var drops atomic.Int64
	var n atomic.Int64
	s := startServer(t, Options{Tick: 20 * time.Millisecond, MaxSessionTimeout: time.Second, AcceptStaleClients: true, Intercept: func(r Request) Fault {
		switch n.Add(1) % 23 {
		case 5:
			drops.Add(1)
			return DropBefore
		case 11:
			drops.Add(1)
			return DropAfter
		}
		return None
	}})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var clients []*client
	for i := 0; i < 4; i++ {
		clients = append(clients, dialAddrs(t, []string{s.Addr()}, time.Second))
	}
	var ops atomic.Int64
	for i, c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				p := "/storm-" + string(rune('a'+j%3))
				switch j % 6 {
				case 0:
					_, _ = c.Create(p, []byte{byte(i)}, int32(j%4), openACL)
				case 1:
					_, _ = c.Set(p, []byte{byte(j)}, -1)
				case 2:
					_, _, _, _ = c.GetW(p)
				case 3:
					_, _, _, _ = c.ChildrenW("/")
				case 4:
					_, _ = c.Multi(&zk.CreateRequest{Path: p + "/m", Acl: openACL}, &zk.DeleteRequest{Path: p + "/m", Version: -1})
				default:
					_ = c.Delete(p, -1)
				}
				ops.Add(1)
			}
		}()
	}
	held := map[int64]bool{} // owned by the fault goroutine until wg.Wait
	wg.Add(1)
	go func() {
		defer wg.Done()
		var snap *Tree
		for k := 0; ; k++ {
			select {
			case <-stop:
				return
			case <-time.After(40 * time.Millisecond):
			}
			ids := s.Sessions()
			if len(ids) == 0 {
				continue
			}
			sid := ids[k%len(ids)]
			switch k % 7 {
			case 0:
				s.Disconnect(sid)
			case 1:
				s.Expire(sid)
			case 2:
				s.Hold(sid, true)
				held[sid] = true
			case 3:
				for id := range held {
					s.Hold(id, false)
				}
				clear(held)
			case 4:
				snap = s.Snapshot()
			case 5:
				if snap != nil && k%3 == 0 {
					s.Restore(snap)
				}
			default:
				_ = s.Dump()
			}
		}
	}()
	time.Sleep(3 * time.Second)
	close(stop)
	wg.Wait()
	for id := range held {
		s.Hold(id, false)
	}
	// With the faults over, every client gets a session again.
	for i, c := range clients {
		require.Eventually(t, func() bool {
			_, _, err := c.Exists("/")
			return err == nil
		}, 15*time.Second, 10*time.Millisecond, "client %d: %v", i, c.State())
	}
	t.Logf("%d client operations, %d dropped by Intercept", ops.Load(), drops.Load())
	require.Greater(t, ops.Load(), int64(20))
	// Invariants: every znode's parent lists it; no ephemeral of a dead
	// session; numChildren matches.
	s.mu.Lock()
	for p, nd := range s.tree.nodes {
		if p != "/" {
			par := s.tree.nodes[parentOf(p)]
			require.NotNil(t, par, p)
			_, listed := par.children[baseOf(p)]
			require.True(t, listed, p)
		}
		for k := range nd.children {
			require.NotNil(t, s.tree.nodes[strings.TrimSuffix(p, "/")+"/"+k])
		}
		if o := nd.stat.EphemeralOwner; o != 0 {
			require.NotNil(t, s.sessions[o], "ephemeral %s of a dead session", p)
		}
	}
	s.mu.Unlock()
	start := time.Now()
	s.Close()
	require.Less(t, time.Since(start), 3*time.Second)
}

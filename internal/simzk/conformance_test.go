package simzk

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
)

// TestConformance runs the same operation sequences through a real
// zk.Conn on a real ZooKeeper (internal/infra/zkensemble, standalone,
// tickTime 200 ms) and on simzk (Tick 200 ms, MaxSessionTimeout 60 s, as
// the ensemble's zoo.cfg), and requires the same transcript: every
// error, created name, data, Stat field but the times (zxids relative to
// the scenario's first transaction, ephemeral owners by session), multi
// result and watch event (type and path, at every client, the global
// event callback included, so a watch set where ZooKeeper sets none
// shows up as an extra event). Run it under flock /tmp/roomlog-zk.lock.
func TestConformance(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	sim, err := Start(Options{Tick: zkensemble.DefaultTickTime, MaxSessionTimeout: zkensemble.MaxSessionTimeout})
	require.NoError(t, err)
	t.Cleanup(sim.Close)
	backends := []backend{{"zookeeper", ens.Addrs()}, {"simzk", []string{sim.Addr()}}}
	byName := map[string]scenario{}
	for _, sc := range scenarios() {
		byName[sc.name] = sc
	}
	t.Run("planted", func(t *testing.T) {
		// Each planted bug makes some scenario's transcript differ.
		for _, pb := range []struct {
			name      string
			bugs      bugs
			scenarios []string
		}{
			{"seqFromCversion", bugs{seqFromCversion: true}, []string{"sequential"}},
			{"deleteKeepsCversion", bugs{deleteKeepsCversion: true}, []string{"stat-and-zxids"}},
			{"multiNoRollback", bugs{multiNoRollback: true}, []string{"multi-results"}},
			{"failedWriteNoZxid", bugs{failedWriteNoZxid: true}, []string{"stat-and-zxids"}},
			{"noACLCheck", bugs{noACLCheck: true}, []string{"acl-and-misc"}},
			{"existsNoWatchMissing", bugs{existsNoWatchMissing: true}, []string{"watches"}},
			{"multiNoRollback/random", bugs{multiNoRollback: true}, []string{"random-seed1"}},
		} {
			t.Run(pb.name, func(t *testing.T) {
				bad, err := Start(Options{Tick: zkensemble.DefaultTickTime, MaxSessionTimeout: zkensemble.MaxSessionTimeout, bugs: pb.bugs})
				require.NoError(t, err)
				defer bad.Close()
				for _, name := range pb.scenarios {
					var out [2][]string
					for i, b := range []backend{backends[0], {"simzk with " + pb.name, []string{bad.Addr()}}} {
						r := newRun(t, b)
						byName[name].run(r)
						r.close()
						out[i] = r.lines
					}
					i := firstDiff(out[0], out[1])
					if i < 0 {
						t.Fatalf("planted bug %s: scenario %s did not notice", pb.name, name)
					}
					line := func(l []string) string {
						if i < len(l) {
							return l[i]
						}
						return "<end>"
					}
					t.Logf("%s caught by %s at line %d:\n  zookeeper: %s\n  simzk:     %s", pb.name, name, i, line(out[0]), line(out[1]))
				}
			})
		}
	})
	for _, sc := range scenarios() {
		t.Run(sc.name, func(t *testing.T) {
			var out [2][]string
			for i, b := range backends {
				r := newRun(t, b)
				sc.run(r)
				r.close()
				out[i] = r.lines
			}
			compareTranscripts(t, out[0], out[1])
			events := 0
			for _, l := range out[0] {
				if strings.HasPrefix(l, "  event ") {
					events++
				}
			}
			t.Logf("%d transcript lines, %d watch events", len(out[0]), events)
			if testing.Verbose() && sc.name == "watches" {
				t.Logf("transcript:\n%s", strings.Join(out[0], "\n"))
			}
		})
	}
}

// firstDiff returns the first line where the transcripts differ, -1 if
// none.
func firstDiff(real, sim []string) int {
	for i := 0; i < max(len(real), len(sim)); i++ {
		if i >= len(real) || i >= len(sim) || real[i] != sim[i] {
			return i
		}
	}
	return -1
}

func compareTranscripts(t *testing.T, real, sim []string) {
	t.Helper()
	if i := firstDiff(real, sim); i >= 0 {
		var a, b string
		if i < len(real) {
			a = real[i]
		}
		if i < len(sim) {
			b = sim[i]
		}
		{
			lo := max(0, i-30)
			t.Fatalf("simzk differs from ZooKeeper at line %d:\n  zookeeper: %s\n  simzk:     %s\nzookeeper transcript (lines %d..%d):\n%s\nsimzk transcript:\n%s",
				i, a, b, lo, i, strings.Join(real[lo:min(i+1, len(real))], "\n"), strings.Join(sim[lo:min(i+1, len(sim))], "\n"))
		}
	}
}

type backend struct {
	name  string
	addrs []string
}

type scenario struct {
	name string
	run  func(r *run)
}

// run is one scenario on one backend: its clients and transcript.
type run struct {
	t       *testing.T
	b       backend
	base    string
	zx0     int64 // the base node's czxid: zxids are written relative to it
	lines   []string
	clients []*rclient
	owners  map[int64]string // session id -> "s<i>"
}

// rclient is a client of a run, recording its events.
type rclient struct {
	*zk.Conn
	name   string
	frozen atomic.Bool // the dialer refuses and the link is cut (real expiry)
	mu     sync.Mutex
	events []zk.Event
	links  []net.Conn
}

var runSeq atomic.Int64

func newRun(t *testing.T, b backend) *run {
	r := &run{t: t, b: b, owners: map[int64]string{}}
	r.base = fmt.Sprintf("/conf-%d-%d", time.Now().UnixNano(), runSeq.Add(1))
	c := r.dial(4 * time.Second)
	_, err := c.Create(r.base, nil, 0, openACL)
	require.NoError(t, err)
	_, st, err := c.Get(r.base)
	require.NoError(t, err)
	r.zx0 = st.Czxid
	return r
}

func (r *run) close() {
	for _, c := range r.clients {
		c.Close()
	}
}

func (r *run) dial(timeout time.Duration) *rclient {
	c := &rclient{name: fmt.Sprintf("c%d", len(r.clients))}
	dialer := func(network, addr string, to time.Duration) (net.Conn, error) {
		if c.frozen.Load() {
			return nil, errors.New("frozen")
		}
		nc, err := net.DialTimeout(network, addr, to)
		if err == nil {
			c.mu.Lock()
			c.links = append(c.links, nc)
			c.mu.Unlock()
		}
		return nc, err
	}
	conn, _, err := zk.Connect(r.b.addrs, timeout, zk.WithLogInfo(false), zk.WithLogger(quietZK{}), zk.WithDialer(dialer),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type != zk.EventSession {
				c.mu.Lock()
				c.events = append(c.events, ev)
				c.mu.Unlock()
			}
		}))
	require.NoError(r.t, err)
	c.Conn = conn
	require.Eventually(r.t, func() bool { return conn.State() == zk.StateHasSession }, 10*time.Second, 2*time.Millisecond)
	r.owners[conn.SessionID()] = fmt.Sprintf("s%d", len(r.clients))
	r.clients = append(r.clients, c)
	return c
}

// freeze cuts c off for good without a closeSession: its session
// expires on the server after its timeout.
func (c *rclient) freeze() {
	c.frozen.Store(true)
	c.mu.Lock()
	for _, l := range c.links {
		_ = l.Close()
	}
	c.mu.Unlock()
}

func (r *run) logf(format string, args ...any) {
	r.lines = append(r.lines, r.rel(fmt.Sprintf(format, args...)))
}

// rel writes the base path as "~".
func (r *run) rel(s string) string { return strings.ReplaceAll(s, r.base, "~") }

func (r *run) zx(z int64) string {
	if z == 0 {
		return "0"
	}
	return fmt.Sprintf("z%+d", z-r.zx0)
}

func (r *run) stat(st *zk.Stat) string {
	if st == nil {
		return "<nil stat>"
	}
	owner := "-"
	if st.EphemeralOwner != 0 {
		owner = r.owners[st.EphemeralOwner]
		if owner == "" {
			owner = "?"
		}
	}
	return fmt.Sprintf("{czxid %s mzxid %s pzxid %s v%d cv%d av%d eph %s len %d kids %d mtime>=ctime %v}",
		r.zx(st.Czxid), r.zx(st.Mzxid), r.zx(st.Pzxid), st.Version, st.Cversion, st.Aversion, owner,
		st.DataLength, st.NumChildren, st.Mtime >= st.Ctime)
}

// flush makes a round trip on every client (so the events of every
// earlier change have arrived: ZooKeeper queues them before any later
// reply) and writes down the events each saw.
func (r *run) flush() {
	for _, c := range r.clients {
		if c.frozen.Load() || c.State() != zk.StateHasSession {
			continue
		}
		_, _, _ = c.Exists("/")
		c.mu.Lock()
		evs := c.events
		c.events = nil
		c.mu.Unlock()
		for _, ev := range evs {
			r.logf("  event %s %s %s", c.name, ev.Type, ev.Path)
		}
	}
}

func errName(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

// Operations written to the transcript.

func (r *run) create(c *rclient, p string, data []byte, flags int32) string {
	got, err := c.Create(p, data, flags, openACL)
	r.logf("%s create %s flags=%d: %q %s", c.name, p, flags, got, errName(err))
	return got
}

func (r *run) get(c *rclient, p string) {
	b, st, err := c.Get(p)
	if err != nil {
		st = nil
	}
	r.logf("%s get %s: %q nil=%v %s %s", c.name, p, b, b == nil, r.stat(st), errName(err))
}

func (r *run) set(c *rclient, p string, data []byte, v int32) {
	st, err := c.Set(p, data, v)
	if err != nil {
		st = nil
	}
	r.logf("%s set %s v%d: %s %s", c.name, p, v, r.stat(st), errName(err))
}

func (r *run) del(c *rclient, p string, v int32) {
	r.logf("%s delete %s v%d: %s", c.name, p, v, errName(c.Delete(p, v)))
}

func (r *run) exists(c *rclient, p string) {
	ok, st, err := c.Exists(p)
	if !ok {
		st = nil
	}
	r.logf("%s exists %s: %v %s %s", c.name, p, ok, r.stat(st), errName(err))
}

func (r *run) children(c *rclient, p string) {
	names, st, err := c.Children(p)
	if err != nil {
		st = nil
	}
	names = append([]string(nil), names...)
	sort.Strings(names)
	r.logf("%s children %s: %v %s %s", c.name, p, names, r.stat(st), errName(err))
}

func (r *run) multi(c *rclient, ops ...any) {
	res, err := c.Multi(ops...)
	var b strings.Builder
	for _, o := range ops {
		switch o := o.(type) {
		case *zk.CreateRequest:
			fmt.Fprintf(&b, " create(%s,%d)", o.Path, o.Flags)
		case *zk.DeleteRequest:
			fmt.Fprintf(&b, " delete(%s,v%d)", o.Path, o.Version)
		case *zk.SetDataRequest:
			fmt.Fprintf(&b, " set(%s,v%d)", o.Path, o.Version)
		case *zk.CheckVersionRequest:
			fmt.Fprintf(&b, " check(%s,v%d)", o.Path, o.Version)
		}
	}
	r.logf("%s multi%s: %s", c.name, b.String(), errName(err))
	for i, x := range res {
		r.logf("  result %d: %q %s %s", i, x.String, r.stat(x.Stat), errName(x.Error))
	}
}

func (r *run) watchData(c *rclient, p string) {
	_, _, _, err := c.GetW(p)
	r.logf("%s getW %s: %s", c.name, p, errName(err))
}

func (r *run) watchExists(c *rclient, p string) {
	ok, _, _, err := c.ExistsW(p)
	r.logf("%s existsW %s: %v %s", c.name, p, ok, errName(err))
}

func (r *run) watchChildren(c *rclient, p string) {
	_, _, _, err := c.ChildrenW(p)
	r.logf("%s childrenW %s: %s", c.name, p, errName(err))
}

func scenarios() []scenario {
	scs := []scenario{
		{"stat-and-zxids", func(r *run) {
			c := r.dial(4 * time.Second)
			a := r.base + "/a"
			r.create(c, a, []byte("x"), 0)
			r.get(c, a)
			r.create(c, a, nil, 0) // NodeExists: a failed write
			r.set(c, a, []byte("yy"), 0)
			r.set(c, a, []byte("z"), 5) // BadVersion
			r.set(c, a, []byte("zzz"), -1)
			r.get(c, a)
			r.create(c, a+"/k", nil, 0)
			r.get(c, a)
			r.del(c, a+"/k", 3)
			r.del(c, a+"/k", 0)
			r.get(c, a)
			r.create(c, a+"/nil", nil, 0)
			r.get(c, a+"/nil")
			r.create(c, a+"/empty", []byte{}, 0)
			r.get(c, a+"/empty")
			r.del(c, a, -1)
			r.exists(c, a)
			r.exists(c, a+"/nil")
			r.create(c, r.base+"/no/parent", nil, 0)
			r.del(c, r.base+"/missing", -1)
			r.set(c, r.base+"/missing", nil, -1)
			r.get(c, r.base+"/missing")
			r.children(c, r.base+"/missing")
			r.children(c, "/zookeeper")
			r.del(c, "/zookeeper", -1)
			r.create(c, "/zookeeper", nil, 0)
			r.create(c, r.base+"/x", nil, 0)
			r.get(c, r.base+"/x")
		}},
		{"sequential", func(r *run) {
			c := r.dial(4 * time.Second)
			d := r.base + "/d"
			r.create(c, d, nil, 0)
			r.create(c, d+"/s-", nil, zk.FlagSequence)
			r.create(c, d+"/s-", nil, zk.FlagSequence)
			r.create(c, d+"/plain", nil, 0)
			r.create(c, d+"/plain", nil, 0) // fails: NodeExists
			r.create(c, d+"/s-", nil, zk.FlagSequence|zk.FlagEphemeral)
			r.del(c, d+"/s-0000000000", -1)
			r.del(c, d+"/plain", -1)
			r.children(c, d)
			r.create(c, d+"/s-", nil, zk.FlagSequence)
			r.create(c, d+"/", nil, zk.FlagSequence)
			r.multi(c, &zk.CreateRequest{Path: d + "/m-", Acl: openACL, Flags: zk.FlagSequence},
				&zk.CheckVersionRequest{Path: d, Version: 99})
			r.create(c, d+"/s-", nil, zk.FlagSequence)
			r.multi(c, &zk.CreateRequest{Path: d + "/m-", Acl: openACL, Flags: zk.FlagSequence},
				&zk.CreateRequest{Path: d + "/m-", Acl: openACL, Flags: zk.FlagSequence})
			r.children(c, d)
		}},
		{"ephemerals", func(r *run) {
			c := r.dial(4 * time.Second)
			o := r.dial(4 * time.Second)
			e := r.base + "/e"
			r.create(c, e, nil, zk.FlagEphemeral)
			r.create(c, e, nil, 0)        // NodeExists before NoChildrenForEphemerals
			r.create(c, e+"/k", nil, 0)   // NoChildrenForEphemerals
			r.create(c, e+"/k/j", nil, 0) // NoNode
			r.create(c, e+"/s", nil, zk.FlagSequence)
			r.exists(o, e)
			r.watchExists(o, e)
			r.watchChildren(o, r.base)
			r.set(o, e, []byte("by other"), -1)
			r.flush()
			r.watchData(o, e)
			c.Close()
			r.logf("c1 closed its session")
			r.flush()
			r.exists(o, e)
			r.children(o, r.base)
		}},
		{"acl-and-misc", func(r *run) {
			c := r.dial(4 * time.Second)
			a := r.base + "/acl"
			_, err := c.Create(a, nil, 0, nil)
			r.logf("create with no ACL: %s", errName(err))
			_, err = c.Create(a, nil, 0, []zk.ACL{{Perms: zk.PermAll, Scheme: "auth"}})
			r.logf("create with auth ACL, no auth: %s", errName(err))
			_, err = c.Create(a, nil, 0, []zk.ACL{{Perms: zk.PermAll, Scheme: "world", ID: "someone"}})
			r.logf("create with world:someone: %s", errName(err))
			r.create(c, a, nil, 0)
			acl, st, err := c.GetACL(a)
			r.logf("getACL: %v %s %s", acl, r.stat(st), errName(err))
			st, err = c.SetACL(a, zk.WorldACL(zk.PermRead|zk.PermWrite), 3)
			r.logf("setACL v3: %s", errName(err))
			st, err = c.SetACL(a, zk.WorldACL(zk.PermRead|zk.PermWrite), 0)
			r.logf("setACL v0: %s %s", r.stat(st), errName(err))
			acl, st, err = c.GetACL(a)
			r.logf("getACL: %v %s %s", acl, r.stat(st), errName(err))
			require.NoError(r.t, c.AddAuth("digest", []byte("user:pw")))
			_, err = c.Create(a+"/d", nil, 0, []zk.ACL{{Perms: zk.PermAll, Scheme: "auth"}})
			r.logf("create with auth ACL after digest auth: %s", errName(err))
			acl, _, err = c.GetACL(a + "/d")
			r.logf("getACL: %v %s", acl, errName(err))
			_, _, err = c.GetACL(a + "/missing")
			r.logf("getACL missing: %s", errName(err))
			// Enforcement: a digest-only node seen by a client without auth.
			o := r.dial(4 * time.Second)
			priv := r.base + "/priv"
			_, err = c.Create(priv, []byte("secret"), 0, []zk.ACL{{Perms: zk.PermAll, Scheme: "auth"}})
			r.logf("create priv: %s", errName(err))
			r.create(c, priv+"/k", nil, 0)
			for _, who := range []*rclient{o, c} {
				r.get(who, priv)
				r.set(who, priv, []byte("w"), -1)
				r.children(who, priv)
				r.exists(who, priv)
				acl, _, err = who.GetACL(priv)
				r.logf("%s getACL priv: %v %s", who.name, acl, errName(err))
				r.create(who, priv+"/new", nil, 0)
				r.del(who, priv+"/missing", -1)
				r.multi(who, &zk.CheckVersionRequest{Path: priv, Version: -1})
				_, err = who.SetACL(priv+"/k", openACL, -1)
				r.logf("%s setACL priv/k (world acl): %s", who.name, errName(err))
				_, err = who.SetACL(priv, []zk.ACL{{Perms: zk.PermAll, Scheme: "auth"}}, -1)
				r.logf("%s setACL priv: %s", who.name, errName(err))
			}
			mixed := r.base + "/mixed"
			_, err = c.Create(mixed, nil, 0, append(zk.WorldACL(zk.PermRead), zk.DigestACL(zk.PermAdmin, "user", "pw")...))
			r.logf("create mixed: %s", errName(err))
			acl, _, err = o.GetACL(mixed)
			r.logf("o getACL mixed: %v %s", acl, errName(err))
			acl, _, err = c.GetACL(mixed)
			r.logf("c getACL mixed: %v %s", acl, errName(err))
			_, err = o.Create(r.base+"/ip", nil, 0, []zk.ACL{{Perms: zk.PermAll, Scheme: "ip", ID: "127.0.0.1"}})
			r.logf("create ip: %s", errName(err))
			r.get(o, r.base+"/ip")
			r.create(o, r.base+"/ip/k", nil, 0)
			p, err := c.Sync(a)
			r.logf("sync: %s %s", p, errName(err))
			p, err = c.Sync(a + "/missing")
			r.logf("sync missing: %s %s", p, errName(err))
		}},
		{"multi-results", func(r *run) {
			c := r.dial(4 * time.Second)
			o := r.dial(4 * time.Second)
			m := r.base + "/m"
			r.create(c, m, []byte("0"), 0)
			r.create(c, m+"/kid", nil, 0)
			r.create(c, m+"/eph", nil, zk.FlagEphemeral)
			r.watchData(o, m)
			r.watchChildren(o, m)
			ok := func(i int) any { return &zk.CreateRequest{Path: fmt.Sprintf("%s/ok%d", m, i), Acl: openACL} }
			failures := map[string]any{
				"NoNode":        &zk.SetDataRequest{Path: m + "/missing", Version: -1},
				"NodeExists":    &zk.CreateRequest{Path: m + "/kid", Acl: openACL},
				"BadVersion":    &zk.CheckVersionRequest{Path: m, Version: 42},
				"NotEmpty":      &zk.DeleteRequest{Path: m, Version: -1},
				"NoChildrenEph": &zk.CreateRequest{Path: m + "/eph/x", Acl: openACL},
				"DelBadVersion": &zk.DeleteRequest{Path: m + "/kid", Version: 3},
			}
			kinds := make([]string, 0, len(failures))
			for k := range failures {
				kinds = append(kinds, k)
			}
			sort.Strings(kinds)
			for _, k := range kinds {
				for pos := 0; pos < 3; pos++ {
					ops := []any{ok(0), ok(1)}
					ops = append(ops[:pos], append([]any{failures[k]}, ops[pos:]...)...)
					r.logf("failure %s at %d", k, pos)
					r.multi(c, ops...)
				}
			}
			r.flush()
			r.get(c, m)
			r.multi(c,
				&zk.CreateRequest{Path: m + "/n", Data: []byte("a"), Acl: openACL},
				&zk.SetDataRequest{Path: m + "/n", Data: []byte("bb"), Version: 0},
				&zk.SetDataRequest{Path: m + "/n", Data: []byte("ccc"), Version: 1},
				&zk.CheckVersionRequest{Path: m + "/n", Version: 2},
				&zk.SetDataRequest{Path: m, Data: []byte("1"), Version: -1},
				&zk.CreateRequest{Path: m + "/tmp", Acl: openACL},
				&zk.DeleteRequest{Path: m + "/tmp", Version: 0},
				&zk.DeleteRequest{Path: m + "/kid", Version: 0},
				&zk.CreateRequest{Path: m + "/q-", Acl: openACL, Flags: zk.FlagSequence | zk.FlagEphemeral},
			)
			r.flush()
			r.get(c, m)
			r.get(c, m+"/n")
			r.children(c, m)
			r.multi(c)
			r.multi(c, &zk.CheckVersionRequest{Path: m, Version: -1})
			r.multi(c, &zk.CheckVersionRequest{Path: m + "/missing", Version: -1})
			r.get(c, m)
		}},
		{"watches", func(r *run) {
			c := r.dial(4 * time.Second)
			w := r.dial(4 * time.Second)
			a := r.base + "/a"
			r.watchData(w, a)     // NoNode: no watch
			r.watchChildren(w, a) // NoNode: no watch
			r.watchExists(w, a)
			r.create(c, a, nil, 0)
			r.flush()
			r.watchData(w, a)
			r.watchExists(w, a)
			r.watchChildren(w, a)
			r.set(c, a, []byte("1"), -1)
			r.flush()
			r.set(c, a, []byte("2"), -1) // no watch left on data
			r.flush()
			r.create(c, a+"/k", nil, 0)
			r.flush()
			r.watchChildren(w, a)
			r.set(c, a+"/k", nil, -1) // a child's data: no child event
			r.flush()
			r.del(c, a+"/k", -1)
			r.flush()
			r.watchData(w, a)
			r.watchChildren(w, a)
			r.watchExists(w, a)
			r.watchChildren(w, r.base)
			r.del(c, a, -1)
			r.flush()
			// Two clients, one change.
			r.watchExists(w, a)
			r.watchExists(c, a)
			r.create(w, a, nil, zk.FlagEphemeral)
			r.flush()
			r.watchData(c, a)
			r.watchChildren(c, r.base)
			r.watchData(w, a)
			// The owner's session expires (no closeSession): its ephemeral
			// goes, the watches fire.
			e := r.dial(800 * time.Millisecond)
			r.create(e, a+"-e", nil, zk.FlagEphemeral)
			r.watchData(c, a+"-e")
			e.freeze()
			start := time.Now()
			for {
				ok, _, err := c.Exists(a + "-e")
				if err == nil && !ok {
					break
				}
				if time.Since(start) > 20*time.Second {
					r.t.Fatalf("%s: the frozen session's ephemeral is still there", r.b.name)
				}
				time.Sleep(20 * time.Millisecond)
			}
			r.logf("e's session expired")
			r.flush()
			w.Close()
			r.logf("w closed its session")
			r.flush()
			r.exists(c, a)
		}},
		{"session-timeouts", func(r *run) {
			for _, ask := range []time.Duration{time.Millisecond, 4 * time.Second, 100 * time.Second} {
				c := r.dial(ask)
				r.logf("asked %v, granted %v", ask, c.NegotiatedSessionTimeout())
			}
		}},
	}
	for seed := uint64(1); seed <= 20; seed++ {
		scs = append(scs, scenario{fmt.Sprint("random-seed", seed), func(r *run) { randomScenario(r, seed) }})
	}
	return scs
}

// randomScenario is the simulation model's conformance sequence
// (replica/simzk_conformance_test.go), with Stats, multi results and
// watches written down as well.
func randomScenario(r *run, seed uint64) {
	rnd := rand.New(rand.NewPCG(seed, 0xc0f))
	conns := []*rclient{r.dial(4 * time.Second), r.dial(4 * time.Second)}
	watcher := r.dial(4 * time.Second)
	base := r.base
	paths := []string{base + "/a", base + "/b", base + "/a/x", base + "/seq-", base + "/b/y"}
	randomOp := func() any {
		p := paths[rnd.IntN(len(paths))]
		version := int32(-1)
		if rnd.IntN(2) == 0 {
			version = int32(rnd.IntN(3))
		}
		switch rnd.IntN(4) {
		case 0, 1:
			var flags int32
			if rnd.IntN(3) == 0 {
				flags |= zk.FlagEphemeral
			}
			if strings.HasSuffix(p, "-") {
				flags |= zk.FlagSequence
			}
			return &zk.CreateRequest{Path: p, Data: []byte(fmt.Sprint(rnd.IntN(100))), Acl: openACL, Flags: flags}
		case 2:
			return &zk.DeleteRequest{Path: p, Version: version}
		default:
			if rnd.IntN(2) == 0 {
				return &zk.CheckVersionRequest{Path: p, Version: version}
			}
			return &zk.SetDataRequest{Path: p, Data: []byte(fmt.Sprint(rnd.IntN(100))), Version: version}
		}
	}
	for step := 0; step < 200; step++ {
		who := rnd.IntN(2)
		c := conns[who]
		r.logf("step %d", step)
		switch k := rnd.IntN(12); {
		case k < 5:
			switch o := randomOp().(type) {
			case *zk.CreateRequest:
				r.create(c, o.Path, o.Data, o.Flags)
			case *zk.DeleteRequest:
				r.del(c, o.Path, o.Version)
			case *zk.SetDataRequest:
				r.set(c, o.Path, o.Data, o.Version)
			case *zk.CheckVersionRequest:
				r.multi(c, o)
			}
		case k < 7:
			r.multi(c, randomOp(), randomOp())
		case k < 8:
			r.get(c, paths[rnd.IntN(len(paths))])
		case k < 9:
			p := paths[rnd.IntN(len(paths))]
			r.children(c, p[:strings.LastIndexByte(p, '/')])
		case k < 11:
			p := paths[rnd.IntN(len(paths))]
			if strings.HasSuffix(p, "-") {
				p = p[:strings.LastIndexByte(p, '/')]
			}
			switch rnd.IntN(3) {
			case 0:
				r.watchData(watcher, p)
			case 1:
				r.watchExists(watcher, p)
			default:
				r.watchChildren(watcher, p)
			}
		default:
			// Session 1 ends (closeSession deletes its ephemerals) and a
			// new one takes its place.
			conns[1].Close()
			r.logf("session 1 closed")
			conns[1] = r.dial(4 * time.Second)
		}
		r.flush()
	}
}

// TestConformanceRestore: ZooKeeper restored from an older copy of its
// data (zkensemble.RestoreData) against simzk's Restore of a Snapshot
// taken at the same point: a client that saw a newer zxid is refused
// until the zxid passes it, then learns its session expired; a new
// client reads the old tree. Run it under flock /tmp/roomlog-zk.lock.
func TestConformanceRestore(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	sim, err := Start(Options{Tick: zkensemble.DefaultTickTime, MaxSessionTimeout: zkensemble.MaxSessionTimeout})
	require.NoError(t, err)
	t.Cleanup(sim.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type side struct {
		b       backend
		copy    func()
		restore func()
	}
	var dc *zkensemble.DataCopy
	var snap *Tree
	sides := []side{
		{backend{"zookeeper", ens.Addrs()},
			func() { dc, err = ens.CopyData(t.TempDir()); require.NoError(t, err) },
			func() { require.NoError(t, ens.RestoreData(ctx, dc)) }},
		{backend{"simzk", []string{sim.Addr()}},
			func() { snap = sim.Snapshot() },
			func() { sim.Restore(snap) }},
	}
	var out [2][]string
	for i, sd := range sides {
		r := newRun(t, sd.b)
		old := r.dial(time.Second)
		p := r.base + "/r"
		r.create(old, p, nil, 0)
		for k := 0; k < 3; k++ {
			r.set(old, p, []byte{byte(k)}, -1)
		}
		sd.copy()
		for k := 0; k < 10; k++ {
			_, err := old.Set(p, []byte("after the copy"), -1)
			require.NoError(t, err)
		}
		oldSID := old.SessionID()
		sd.restore()
		// The old client's session is older than the copy's zxid allows.
		time.Sleep(3 * time.Second)
		r.logf("old client has a session 3s after the restore: %v", old.State() == zk.StateHasSession)
		fresh := r.dial(4 * time.Second)
		r.get(fresh, p)
		for k := 0; k < 15; k++ {
			_, err := fresh.Set(p, []byte("fresh"), -1)
			require.NoError(t, err)
		}
		r.get(fresh, p)
		require.Eventually(t, func() bool { return old.State() == zk.StateHasSession }, 20*time.Second, 10*time.Millisecond,
			"%s: the old client never got in", sd.b.name)
		r.logf("old client back with a new session: %v", old.SessionID() != oldSID)
		b, st, err := old.Get(p)
		r.logf("old client reads: %q v%d %s", b, st.Version, errName(err))
		r.close()
		out[i] = r.lines
	}
	compareTranscripts(t, out[0], out[1])
	t.Logf("transcript:\n%s", strings.Join(out[0], "\n"))
}

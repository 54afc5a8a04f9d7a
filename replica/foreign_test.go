package replica

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	elect "github.com/roomlog/roomlog/recipe/election"
	"github.com/roomlog/roomlog/zkx"
)

// Forgeries under members/ and election/ made with a second, raw
// ZooKeeper client (issue 10, bullet 4): replicas must ignore them for
// every decision and report each once, by path, as foreign.

// foreignLog counts the Warn records about foreign znodes, by path.
type foreignLog struct {
	mu     sync.Mutex
	counts map[string]int
}

func (l *foreignLog) count(path string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.counts[path]
}

type foreignLogHandler struct {
	l    *foreignLog
	next slog.Handler
}

func (h foreignLogHandler) Enabled(ctx context.Context, lv slog.Level) bool { return true }

func (h foreignLogHandler) Handle(ctx context.Context, rec slog.Record) error {
	if rec.Level == slog.LevelWarn && strings.Contains(rec.Message, "foreign") {
		rec.Attrs(func(a slog.Attr) bool {
			if a.Key == "path" {
				h.l.mu.Lock()
				h.l.counts[a.Value.String()]++
				h.l.mu.Unlock()
			}
			return true
		})
	}
	if h.next.Enabled(ctx, rec.Level) {
		return h.next.Handle(ctx, rec)
	}
	return nil
}

func (h foreignLogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return foreignLogHandler{h.l, h.next.WithAttrs(as)}
}

func (h foreignLogHandler) WithGroup(name string) slog.Handler {
	return foreignLogHandler{h.l, h.next.WithGroup(name)}
}

// foreignSetup opens n replicas (m0 is the first candidate, so the
// primary), waits for the primary and returns a raw forging connection.
type foreignSetup struct {
	c       *cluster
	reps    []*Replica
	primary *Replica
	forger  *zk.Conn
	logs    *foreignLog
}

func newForeignSetup(t *testing.T, n int) *foreignSetup {
	t.Helper()
	ens := sharedEnsemble(t)
	logs := &foreignLog{counts: map[string]int{}}
	c := newCluster(t, ens, func(cfg *Config) {
		cfg.Logger = slog.New(foreignLogHandler{logs, testLogger(t).Handler()})
		cfg.SessionTimeout = 2 * time.Second
	})
	fs := &foreignSetup{c: c, logs: logs}
	fs.reps = c.openN(n)
	fs.primary = c.waitPrimary(20 * time.Second)
	require.Equal(t, "m0", fs.primary.ID(), "the first candidate leads")
	fs.forger = zkConn(t, ens)
	return fs
}

func (fs *foreignSetup) path(elems ...string) string { return fs.primary.Room().Path(elems...) }

// forge creates path with data: persistent, or ephemeral in the forger's
// session.
func (fs *foreignSetup) forge(t *testing.T, path string, data []byte, ephemeral bool) {
	t.Helper()
	var flags int32
	if ephemeral {
		flags = zk.FlagEphemeral
	}
	_, err := fs.forger.Create(path, data, flags, zk.WorldACL(zk.PermAll))
	require.NoError(t, err, "forge %s", path)
}

func foreignOf(s Status, path string) (ForeignZnode, bool) {
	for _, f := range s.Foreign {
		if f.Path == path {
			return f, true
		}
	}
	return ForeignZnode{}, false
}

func memberIDs(s Status) []string {
	var ids []string
	for _, m := range s.Members {
		ids = append(ids, m.ID)
	}
	return ids
}

func mustPack(t *testing.T, v any) []byte {
	t.Helper()
	b, err := msgpack.Marshal(v)
	require.NoError(t, err)
	return b
}

// waitSeen waits until every replica either reports path as foreign or
// shows a member set other than the real one (the bug: the forgery was
// adopted), so the assertions that follow see what the replica made of it.
func (fs *foreignSetup) waitSeen(t *testing.T, path string, want []string) {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, r := range fs.reps {
			s := r.Status()
			_, seen := foreignOf(s, path)
			if !seen && slices.Equal(memberIDs(s), want) {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "every replica sees %s", path)
}

// checkDecisions: the real members only, the real primary named by its
// real address, and no committed hint taken from a forgery.
func (fs *foreignSetup) checkDecisions(t *testing.T, want []string, maxCommitted uint64) {
	t.Helper()
	paddr := fs.primary.Status().PrimaryAddr
	require.NotEmpty(t, paddr)
	for _, r := range fs.reps {
		s := r.Status()
		require.Equal(t, want, memberIDs(s), "%s: members", r.ID())
		for _, m := range s.Members {
			require.NotEmpty(t, m.ID, "%s: a member with an empty id", r.ID())
			require.NotEqual(t, "10.255.0.1:9", m.Addr, "%s: a forged address", r.ID())
		}
		require.Equal(t, fs.primary.ID(), s.PrimaryID, "%s: primary", r.ID())
		require.Equal(t, paddr, s.PrimaryAddr, "%s: primary address", r.ID())
		require.LessOrEqual(t, s.Committed, maxCommitted, "%s: committed hint from a forgery", r.ID())
		if r != fs.primary {
			require.Equal(t, RoleStandby, s.Role, "%s", r.ID())
			_, err := r.Propose(context.Background(), setOp("k", "v"))
			var np *NotPrimaryError
			require.ErrorAs(t, err, &np)
			require.Equal(t, fs.primary.ID(), np.PrimaryID)
			require.Equal(t, paddr, np.PrimaryAddr, "%s: a redirect must name the live primary", r.ID())
		}
	}
	require.Equal(t, RolePrimary, fs.primary.Status().Role)
}

// proposeSome proposes n entries on the primary and waits until every
// replica applied them; it returns the last index.
func (fs *foreignSetup) proposeSome(t *testing.T, n int) uint64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var last uint64
	for i := 0; i < n; i++ {
		res, err := fs.c.proposeRetry(ctx, setOp(fmt.Sprintf("f%d", i), "v"))
		require.NoError(t, err)
		last = res.Index
	}
	fs.c.waitConverged(last, 20*time.Second)
	return last
}

const forgedHuge = uint64(1) << 40

// TestForeignMemberPersistent: a persistent members/ node with a valid
// body naming another address, role primary and a huge epoch and applied
// index is ignored (not a member, not the primary, no committed hint, no
// 307 to it), reported once by path on every replica, and forgotten once
// deleted.
func TestForeignMemberPersistent(t *testing.T) {
	fs := newForeignSetup(t, 2)
	last := fs.proposeSome(t, 3)
	want := []string{"m0", "m1"}
	p := fs.path(membersDir, "evil")
	fs.forge(t, p, encode(memberData{V: formatVersion1, ID: "evil", Addr: "10.255.0.1:9", Role: roleStrPrimary,
		Epoch: forgedHuge, Applied: forgedHuge, Checkpoint: forgedHuge}), false)
	fs.waitSeen(t, p, want)
	fs.checkDecisions(t, want, last+100)
	for _, r := range fs.reps {
		f, ok := foreignOf(r.Status(), p)
		require.True(t, ok, "%s: Status().Foreign names %s", r.ID(), p)
		require.Contains(t, f.Reason, "ephemeral")
	}

	// Re-read (a data change fires the watch): still foreign, not logged again.
	_, err := fs.forger.Set(p, encode(memberData{V: formatVersion1, ID: "evil", Addr: "10.255.0.1:9", Role: roleStrPrimary,
		Epoch: forgedHuge, Applied: forgedHuge + 1}), -1)
	require.NoError(t, err)
	last = fs.proposeSome(t, 2)
	fs.checkDecisions(t, want, last+100)
	// Each replica logged it exactly once (two replicas).
	require.Equal(t, len(fs.reps), fs.logs.count(p), "one Warn per replica for %s", p)

	// Deleted: no longer reported.
	require.NoError(t, fs.forger.Delete(p, -1))
	require.Eventually(t, func() bool {
		for _, r := range fs.reps {
			if _, ok := foreignOf(r.Status(), p); ok {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond, "the deleted forgery is no longer reported")
	fs.checkDecisions(t, want, last+100)
}

// TestForeignMemberJunk: ephemeral member nodes whose data happens to
// decode (no id, an empty map, an array) or does not decode at all are
// not members with an empty id and give no committed hint.
func TestForeignMemberJunk(t *testing.T) {
	fs := newForeignSetup(t, 2)
	last := fs.proposeSome(t, 3)
	want := []string{"m0", "m1"}
	junk := map[string][]byte{
		"junk-noid":  mustPack(t, map[string]any{"v": 1, "role": "primary", "applied": forgedHuge, "epoch": forgedHuge, "addr": "10.255.0.1:9"}),
		"junk-empty": {0x80},                         // {}
		"junk-array": {0x92, 0x01, 0xa0},             // [1, ""]
		"junk-str32": {0xdb, 0xff, 0xff, 0xff, 0xff}, // a 4 GiB string in 5 bytes
		"junk-deep":  append(slices.Repeat([]byte{0x91}, 64), 0xc0),
	}
	var paths []string
	for name, data := range junk {
		p := fs.path(membersDir, name)
		paths = append(paths, p)
		fs.forge(t, p, data, true)
	}
	for _, p := range paths {
		fs.waitSeen(t, p, want)
	}
	fs.checkDecisions(t, want, last+100)
	for _, r := range fs.reps {
		for _, p := range paths {
			_, ok := foreignOf(r.Status(), p)
			require.True(t, ok, "%s: Status().Foreign names %s", r.ID(), p)
		}
	}
}

// TestForeignMemberAlias: an ephemeral node whose name differs from the id
// in its body (claiming to be the standby, as primary of a huge epoch at
// another address) is ignored.
func TestForeignMemberAlias(t *testing.T) {
	fs := newForeignSetup(t, 2)
	last := fs.proposeSome(t, 3)
	want := []string{"m0", "m1"}
	p := fs.path(membersDir, "alias")
	fs.forge(t, p, encode(memberData{V: formatVersion1, ID: "m1", Addr: "10.255.0.1:9", Role: roleStrPrimary,
		Epoch: forgedHuge, Applied: forgedHuge}), true)
	// And one with a body id matching its name but an address that does
	// not parse.
	pa := fs.path(membersDir, "badaddr")
	fs.forge(t, pa, encode(memberData{V: formatVersion1, ID: "badaddr", Addr: "no port here", Role: roleStrPrimary,
		Epoch: forgedHuge, Applied: forgedHuge}), true)
	fs.waitSeen(t, p, want)
	fs.waitSeen(t, pa, want)
	fs.checkDecisions(t, want, last+100)
	for _, r := range fs.reps {
		f, ok := foreignOf(r.Status(), p)
		require.True(t, ok, "%s: Status().Foreign names %s", r.ID(), p)
		require.Contains(t, f.Reason, `"m1"`)
		f, ok = foreignOf(r.Status(), pa)
		require.True(t, ok, "%s: Status().Foreign names %s", r.ID(), pa)
		require.Contains(t, f.Reason, "addr")
	}
}

// failover closes the primary and requires the standby m1 to become
// primary within a bounded time, naming itself, and to accept writes.
func (fs *foreignSetup) failover(t *testing.T) {
	t.Helper()
	standby := fs.reps[1]
	fs.c.close(fs.primary.ID())
	start := time.Now()
	require.Eventually(t, func() bool { return standby.Status().Role == RolePrimary }, 15*time.Second, 5*time.Millisecond, "%s becomes primary after the primary closed (a forged candidate must not block failover)", standby.ID())
	t.Logf("failover took %v", time.Since(start))
	require.Eventually(t, func() bool {
		s := standby.Status()
		return s.PrimaryID == standby.ID() && slices.Equal(memberIDs(s), []string{standby.ID()})
	}, 10*time.Second, 5*time.Millisecond, "%s names itself primary and is the only member", standby.ID())
	fs.primary, fs.reps = standby, []*Replica{standby}
	fs.proposeSome(t, 2)
}

// TestForeignCandidatePersistent: a persistent election node with a
// sequence lower than every real candidate does not block failover and is
// reported by the standby that evaluates the election.
func TestForeignCandidatePersistent(t *testing.T) {
	fs := newForeignSetup(t, 2)
	fs.proposeSome(t, 2)
	// Sequence 0 like m0's, and a guid of zeros: lowest by (seq, name).
	p := fs.path(electionDir, "c-"+strings.Repeat("0", guidHexLen)+"-0000000000")
	fs.forge(t, p, encode(candidateData{V: formatVersion1, ID: "ghost", Addr: "10.255.0.1:9"}), false)
	fs.failover(t)
	f, ok := foreignOf(fs.primary.Status(), p)
	require.True(t, ok, "Status().Foreign names %s", p)
	require.Contains(t, f.Reason, "ephemeral")
}

// TestForeignCandidateNegative: an ephemeral candidate with a valid body
// but a negative sequence ("c-<guid>--000000001", below every real one)
// is foreign: failover proceeds.
func TestForeignCandidateNegative(t *testing.T) {
	fs := newForeignSetup(t, 2)
	fs.proposeSome(t, 2)
	p := fs.path(electionDir, "c-"+newGUID()+"--000000001")
	fs.forge(t, p, encode(candidateData{V: formatVersion1, ID: "ghost", Addr: "10.255.0.1:9"}), true)
	fs.failover(t)
	f, ok := foreignOf(fs.primary.Status(), p)
	require.True(t, ok, "Status().Foreign names %s", p)
	require.Contains(t, f.Reason, "negative")
}

// TestForeignCandidateJunk: an ephemeral, well-named lowest candidate
// whose data decodes without an id is foreign, as is a non-candidate name.
func TestForeignCandidateJunk(t *testing.T) {
	fs := newForeignSetup(t, 2)
	fs.proposeSome(t, 2)
	p := fs.path(electionDir, "c-"+strings.Repeat("0", guidHexLen)+"-0000000000")
	fs.forge(t, p, mustPack(t, map[string]any{"v": 1, "addr": "10.255.0.1:9"}), true)
	pj := fs.path(electionDir, "junk")
	fs.forge(t, pj, []byte("hello"), true)
	fs.failover(t)
	s := fs.primary.Status()
	for _, q := range []string{p, pj} {
		_, ok := foreignOf(s, q)
		require.True(t, ok, "Status().Foreign names %s: %+v", q, s.Foreign)
	}
	require.Equal(t, fs.primary.ID(), s.PrimaryID)
}

// TestForeignReadMembers: the fresh member read used by deletion and
// bootstrap source choice returns only accepted members.
func TestForeignReadMembers(t *testing.T) {
	ens := sharedEnsemble(t)
	dir := "/fmem-" + newGUID()[:8]
	client := viewClient(t, ens)
	conn := client.Conn()
	acl := zk.WorldACL(zk.PermAll)
	require.NoError(t, zkx.EnsurePath(context.Background(), zkx.Plain(conn, acl), dir))
	m := newMembership(client, dir, "a", testLogger(t))
	defer m.close(context.Background())
	require.NoError(t, m.join(context.Background(), memberData{ID: "a", Addr: "127.0.0.1:1", Applied: 7, Checkpoint: 5}, time.Second))
	mk := func(name string, data []byte, flags int32) {
		_, err := conn.Create(dir+"/"+name, data, flags, acl)
		require.NoError(t, err)
	}
	mk("persist", encode(memberData{V: 1, ID: "persist", Addr: "10.255.0.1:9", Checkpoint: forgedHuge}), 0)
	mk("alias", encode(memberData{V: 1, ID: "a", Addr: "10.255.0.1:9", Checkpoint: forgedHuge}), zk.FlagEphemeral)
	mk("noid", mustPack(t, map[string]any{"v": 1, "addr": "10.255.0.1:9", "ckpt": forgedHuge}), zk.FlagEphemeral)
	mk("v2", encode(memberData{V: 2, ID: "v2", Addr: "10.255.0.1:9", Checkpoint: forgedHuge}), zk.FlagEphemeral)
	// One nobody but "mallory" may read: it must not stall the reads.
	_, err := conn.Create(dir+"/locked", encode(memberData{V: 1, ID: "locked"}), zk.FlagEphemeral,
		zk.DigestACL(zk.PermAll, "mallory", "pw"))
	require.NoError(t, err)
	got, err := readMembers(conn, dir)
	require.NoError(t, err)
	require.Len(t, got, 1, "%+v", got)
	require.Equal(t, uint64(7), got["a"].Applied)

	// The watched view agrees, and names every foreign node.
	want := []string{dir + "/alias", dir + "/locked", dir + "/noid", dir + "/persist", dir + "/v2"}
	var fp []string
	require.Eventually(t, func() bool {
		fp = fp[:0]
		for _, f := range m.foreign() {
			fp = append(fp, f.Path)
		}
		return slices.Equal(fp, want)
	}, 10*time.Second, 5*time.Millisecond, "the watcher names every foreign node")
	m.reload()
	require.Equal(t, []string{"a"}, memberIDs(Status{Members: m.snapshot()}))
}

// TestForeignElectionComponent: forged candidates below ours (persistent,
// negative sequence, junk data, our own guid held by another session) are
// neither counted, adopted, deleted nor watched.
func TestForeignElectionComponent(t *testing.T) {
	ens := sharedEnsemble(t)
	dir := "/fel-" + newGUID()[:8]
	acl := zk.WorldACL(zk.PermAll)
	forger := zkConn(t, ens)
	require.NoError(t, zkx.EnsurePath(context.Background(), zkx.Plain(forger, acl), dir))
	client := viewClient(t, ens)
	conn := client.Conn()
	el, err := newElection(client, dir, "a", "", testLogger(t))
	require.NoError(t, err)
	defer el.close()
	guid := el.line.GUID()
	zero := strings.Repeat("0", guidHexLen)
	good := encode(candidateData{V: 1, ID: "x", Addr: "10.255.0.1:9"})
	forged := map[string]struct {
		data  []byte
		flags int32
	}{
		"c-" + zero + "-0000000000":  {good, 0},                                                // persistent
		"c-" + zero + "--000000001":  {good, zk.FlagEphemeral},                                 // negative
		"c-" + zero + "-0000000001":  {mustPack(t, map[string]any{"v": 1}), zk.FlagEphemeral},  // no id
		"c-" + guid + "-0000000002":  {encode(candidateData{V: 1, ID: "a"}), zk.FlagEphemeral}, // our guid, another session
		"c-" + zero + "-00000000003": {good, zk.FlagEphemeral},                                 // 11 digits
		"junk":                       {nil, zk.FlagEphemeral},                                  // not a candidate name
	}
	for name, f := range forged {
		_, err := forger.Create(dir+"/"+name, f.data, f.flags, acl)
		require.NoError(t, err, name)
	}
	// Unreadable by us: must not stall the listing.
	locked := "c-" + zero + "-0000000004"
	_, err = forger.Create(dir+"/"+locked, good, zk.FlagEphemeral, zk.DigestACL(zk.PermAll, "mallory", "pw"))
	require.NoError(t, err)
	forged[locked] = struct {
		data  []byte
		flags int32
	}{good, zk.FlagEphemeral}
	v, err := el.evaluate(context.Background())
	require.NoError(t, err)
	require.True(t, v.leader, "forged candidates are not predecessors: %+v", v.cands)
	require.Nil(t, v.watch)
	require.Len(t, v.cands, 1)
	low, _ := v.lowest()
	require.Equal(t, "a", low.ID)
	require.Equal(t, el.line.Node(), low.Node)
	names, _, err := conn.Children(dir)
	require.NoError(t, err)
	require.Len(t, names, len(forged)+1, "nothing forged was deleted")
	var fp []string
	for _, f := range el.foreign() {
		fp = append(fp, strings.TrimPrefix(f.Path, dir+"/"))
	}
	var wantNames []string
	for name := range forged {
		wantNames = append(wantNames, name)
	}
	slices.Sort(wantNames)
	require.Equal(t, wantNames, fp)
}

// ---- pure acceptance rules (no server) ----

func TestForeignAcceptMember(t *testing.T) {
	ok := func(id, addr string) []byte {
		return encode(memberData{V: formatVersion1, ID: id, Addr: addr, Role: roleStrStandby, Applied: 3})
	}
	for _, tc := range []struct {
		what   string
		name   string
		data   []byte
		owner  int64
		reason string // "" = accepted
	}{
		{"valid", "m0", ok("m0", "127.0.0.1:8080"), 7, ""},
		{"no address", "m0", ok("m0", ""), 7, ""},
		{"url address", "m0", ok("m0", "https://master-a.example:8443/x"), 7, ""},
		{"ipv6 address", "m0", ok("m0", "[::1]:80"), 7, ""},
		{"persistent", "m0", ok("m0", "127.0.0.1:8080"), 0, "not ephemeral"},
		{"name differs from id", "m0", ok("m1", "127.0.0.1:8080"), 7, `names member "m1"`},
		{"empty id", "m0", ok("", "127.0.0.1:8080"), 7, "no member id"},
		{"bad address", "m0", ok("m0", "no port"), 7, "addr"},
		{"bad scheme", "m0", ok("m0", "ftp://h:1"), 7, "addr"},
		{"bad id", "a b", ok("a b", ""), 7, "id"},
		{"version 2", "m0", encode(memberData{V: 2, ID: "m0"}), 7, "version 2"},
		{"no version", "m0", mustPack(t, map[string]any{"id": "m0"}), 7, "version 0"},
		{"empty map", "m0", []byte{0x80}, 7, "version 0"},
		{"empty", "m0", nil, 7, "decode"},
		{"not msgpack", "m0", []byte("hello"), 7, "decode"},
		{"trailing bytes", "m0", append(ok("m0", ""), 0xc0), 7, "decode"},
		{"huge declared string", "m0", []byte{0xdb, 0xff, 0xff, 0xff, 0xff}, 7, "decode"},
		{"huge declared map", "m0", []byte{0xdf, 0xff, 0xff, 0xff, 0xff}, 7, "decode"},
		{"deep", "m0", append(slices.Repeat([]byte{0x91}, 100), 0xc0), 7, "decode"},
		{"wrong field type", "m0", mustPack(t, map[string]any{"v": 1, "id": 5}), 7, "decode"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			d, err := acceptMember(tc.name, tc.data, tc.owner)
			if tc.reason == "" {
				require.NoError(t, err)
				require.Equal(t, tc.name, d.ID)
				require.NoError(t, checkMemberZnode(tc.name, tc.data, tc.owner))
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.reason)
			require.Error(t, checkMemberZnode(tc.name, tc.data, tc.owner))
		})
	}
}

// TestForeignAcceptCandidate: the replica's part of a candidate's
// acceptance (the election recipe checks the name, the Stat and the
// format: recipe/election TestForeignCandidates): the id and the address
// must be ones a Config accepts.
func TestForeignAcceptCandidate(t *testing.T) {
	for _, tc := range []struct {
		what   string
		id     string
		addr   string
		reason string
	}{
		{"valid", "m0", "127.0.0.1:1", ""},
		{"no address", "m0", "", ""},
		{"ipv6", "m0", "[::1]:8080", ""},
		{"bad id", "a b", "127.0.0.1:1", "bad member id"},
		{"bad address", "m0", "nope", "bad advertised addr"},
		{"url", "m0", "http://h:1", ""},
		{"bad scheme", "m0", "ftp://h:1", "bad advertised addr"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			err := acceptCandidate(elect.Candidate{ID: tc.id, Data: []byte(tc.addr)})
			if tc.reason == "" {
				require.NoError(t, err)
				return
			}
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.reason)
		})
	}
}

// TestForeignDecodeBounded: the hardened decoder refuses what plain
// msgpack.Unmarshal would accept or allocate for.
func TestForeignDecodeBounded(t *testing.T) {
	var d memberData
	for what, b := range map[string][]byte{
		"trailing":     append(encode(memberData{V: 1, ID: "a"}), 0x01),
		"bin32 4GiB":   {0xc6, 0xff, 0xff, 0xff, 0xff},
		"array32 4G":   {0xdd, 0xff, 0xff, 0xff, 0xff},
		"deep maps":    append(slices.Repeat([]byte{0x81, 0xa1, 'x'}, 20), 0xc0),
		"never-used":   {0xc1},
		"truncated":    encode(memberData{V: 1, ID: "abc"})[:5],
		"empty":        {},
		"ext8 too big": {0xc7, 0xff, 0x01},
	} {
		err := decode(b, &d)
		require.Error(t, err, what)
		require.True(t, errors.Is(err, errBadZnodeData), what)
	}
	require.NoError(t, decode(encode(memberData{V: 1, ID: "a", Addr: "h:1"}), &d))
	require.Equal(t, "a", d.ID)
}

// TestForeignOwnIDPersistent: a persistent znode forged at our own member
// path never goes away: Open fails at once with ErrDuplicateID naming it
// as persistent, instead of waiting for a session to expire.
func TestForeignOwnIDPersistent(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, func(cfg *Config) { cfg.SessionTimeout = 2 * time.Second })
	m1 := c.open("m1")
	forger := zkConn(t, ens)
	_, err := forger.Create(m1.Room().Path(membersDir, "m0"), encode(memberData{V: formatVersion1, ID: "m0"}), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	r, err := Open(ctx, c.config("m0"))
	if err == nil {
		r.Close()
	}
	require.ErrorIs(t, err, ErrDuplicateID)
	require.Contains(t, err.Error(), "persistent")
	require.Less(t, time.Since(start), time.Second, "no wait for a session that does not exist")
	// m1 is unaffected: it does not count the forgery.
	require.Eventually(t, func() bool { _, ok := foreignOf(m1.Status(), m1.Room().Path(membersDir, "m0")); return ok }, 10*time.Second, 5*time.Millisecond, "m1 reports the forged m0 as foreign")
	require.Equal(t, []string{"m1"}, memberIDs(m1.Status()))
}

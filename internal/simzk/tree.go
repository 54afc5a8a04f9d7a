package simzk

import (
	"fmt"
	"net"
	"sort"
	"strings"
	"unicode/utf8"

	"github.com/roomlog/roomlog/third_party/zk"
)

// node is one znode. stat.DataLength and stat.NumChildren are filled in
// when the Stat is read (statOf).
type node struct {
	data     []byte
	acl      []zk.ACL
	stat     zk.Stat
	children map[string]struct{}
	// seq counts the creates under the node: the next sequence number.
	// Stat.Cversion counts creates and deletes (measured on ZooKeeper 3.8).
	seq int32
}

func (n *node) clone() *node {
	c := *n
	c.data = copyData(n.data)
	c.acl = append([]zk.ACL(nil), n.acl...)
	c.children = make(map[string]struct{}, len(n.children))
	for k := range n.children {
		c.children[k] = struct{}{}
	}
	return &c
}

func (n *node) statOf() zk.Stat {
	st := n.stat
	st.DataLength = int32(len(n.data))
	st.NumChildren = int32(len(n.children))
	return st
}

// Tree is a copy of the znode tree and the zxid of its last transaction
// (Server.Snapshot, Server.Restore). A Tree is not changed by the server
// once returned; its methods are safe for concurrent use.
type Tree struct {
	zxid  int64
	nodes map[string]*node
}

// newTree returns the tree of a new ZooKeeper: "/" and the special
// "/zookeeper", "/zookeeper/config" and "/zookeeper/quota".
func newTree() *Tree {
	t := &Tree{nodes: map[string]*node{}}
	open := []zk.ACL{{Perms: zk.PermAll, Scheme: "world", ID: "anyone"}}
	for _, p := range []string{"/", "/zookeeper", "/zookeeper/config", "/zookeeper/quota"} {
		t.nodes[p] = &node{acl: open, children: map[string]struct{}{}}
		if p != "/" {
			t.nodes[parentOf(p)].children[baseOf(p)] = struct{}{}
		}
	}
	// ZooKeeper 3.8 builds /zookeeper/config and /zookeeper/quota in a
	// way that leaves /zookeeper's cversion at -2 (measured).
	t.nodes["/zookeeper"].stat.Cversion = -2
	return t
}

func (t *Tree) clone() *Tree {
	c := &Tree{zxid: t.zxid, nodes: make(map[string]*node, len(t.nodes))}
	for p, n := range t.nodes {
		c.nodes[p] = n.clone()
	}
	return c
}

// Zxid returns the zxid of the tree's last transaction.
func (t *Tree) Zxid() int64 { return t.zxid }

// Len returns the number of znodes, "/" and "/zookeeper..." included.
func (t *Tree) Len() int { return len(t.nodes) }

// Dump renders the tree, one znode a line in path order, with its data
// (quoted, cut at 40 bytes), version, cversion, ephemeral owner and
// zxids.
func (t *Tree) Dump() string {
	paths := make([]string, 0, len(t.nodes))
	for p := range t.nodes {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	var b strings.Builder
	fmt.Fprintf(&b, "zxid 0x%x, %d znodes\n", t.zxid, len(paths))
	for _, p := range paths {
		n := t.nodes[p]
		d := n.data
		cut := ""
		if len(d) > 40 {
			d, cut = d[:40], "..."
		}
		fmt.Fprintf(&b, "%s %q%s v%d cv%d czxid=0x%x mzxid=0x%x pzxid=0x%x", p, d, cut, n.stat.Version, n.stat.Cversion, n.stat.Czxid, n.stat.Mzxid, n.stat.Pzxid)
		if n.stat.EphemeralOwner != 0 {
			fmt.Fprintf(&b, " eph=0x%x", n.stat.EphemeralOwner)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// copyData copies b, keeping nil and empty apart (ZooKeeper does).
func copyData(b []byte) []byte {
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func parentOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

func baseOf(p string) string { return p[strings.LastIndexByte(p, '/')+1:] }

// isSpecial reports ZooKeeper's special paths, which cannot be deleted
// (ZKDatabase.isSpecialPath).
func isSpecial(p string) bool {
	return p == "/" || p == "/zookeeper" || p == "/zookeeper/quota" || p == "/zookeeper/config"
}

// validPath is PathUtils.validatePath.
func validPath(p string) bool {
	if p == "" || p[0] != '/' || !utf8.ValidString(p) {
		return false
	}
	if p == "/" {
		return true
	}
	if p[len(p)-1] == '/' {
		return false
	}
	for _, name := range strings.Split(p[1:], "/") {
		if name == "" || name == "." || name == ".." {
			return false
		}
		for _, r := range name {
			if r == 0 || (r > 0 && r <= 0x1f) || (r >= 0x7f && r <= 0x9f) ||
				(r >= 0xd800 && r <= 0xf8ff) || (r >= 0xfff0 && r <= 0xffff) {
				return false
			}
		}
	}
	return true
}

// Create flags (CreateMode).
const (
	flagEphemeral = 1
	flagSequence  = 2
)

// op is one write: a request of its own or one op of a multi.
type op struct {
	code    int32 // opCreate, opCreate2, opDelete, opSetData, opCheck, opSetACL
	path    string
	data    []byte
	acl     []zk.ACL
	flags   int32
	version int32
}

// result is what an op returns.
type result struct {
	err  int32
	path string  // create: the created path
	stat zk.Stat // create2, setData, setACL
}

// trigger is one watch trigger of a transaction: event typ at path, for
// the data watches (data) or the child watches (!data) there.
type trigger struct {
	path string
	typ  int32
	data bool
}

// Watch event types.
const (
	evCreated         = 1
	evDeleted         = 2
	evDataChanged     = 3
	evChildrenChanged = 4
)

// txn applies ops of one transaction with one zxid and time; undo holds
// what reverts it.
type txn struct {
	t        *Tree
	sid      int64
	ids      []zk.ACL // the session's authenticated ids (Perms unused)
	zxid     int64
	now      int64
	bugs     bugs
	undo     []func()
	triggers []trigger
}

func (x *txn) rollback() {
	for i := len(x.undo) - 1; i >= 0; i-- {
		x.undo[i]()
	}
	x.undo, x.triggers = nil, nil
}

// saveStat records what restores n's Stat.
func (x *txn) saveStat(n *node) {
	st := n.stat
	x.undo = append(x.undo, func() { n.stat = st })
}

// allowed is ZooKeeperServer.checkACL: whether ids (with the implicit
// ip:127.0.0.1 of every connection here) grant perm on acl.
func allowed(acl []zk.ACL, ids []zk.ACL, perm int32) bool {
	if len(acl) == 0 {
		return true
	}
	for _, a := range acl {
		if a.Perms&perm == 0 {
			continue
		}
		switch a.Scheme {
		case "world":
			if a.ID == "anyone" {
				return true
			}
		case "digest":
			for _, id := range ids {
				if id.Scheme == "digest" && id.ID == a.ID {
					return true
				}
			}
		case "ip":
			if ipMatches(a.ID, "127.0.0.1") {
				return true
			}
		}
	}
	return false
}

func (x *txn) allowed(acl []zk.ACL, perm int32) bool {
	return x.bugs.noACLCheck || allowed(acl, x.ids, perm)
}

func ipMatches(pattern, ip string) bool {
	if pattern == ip {
		return true
	}
	_, n, err := net.ParseCIDR(pattern)
	return err == nil && n.Contains(net.ParseIP(ip))
}

// fixACL is PrepRequestProcessor.fixupACL: an empty list is refused, the
// "auth" scheme stands for the session's authenticated ids.
func (x *txn) fixACL(acl []zk.ACL) ([]zk.ACL, bool) {
	if len(acl) == 0 {
		return nil, false
	}
	var out []zk.ACL
	for _, a := range acl {
		switch a.Scheme {
		case "world":
			if a.ID != "anyone" {
				return nil, false
			}
			out = append(out, a)
		case "auth":
			if len(x.ids) == 0 {
				return nil, false
			}
			for _, id := range x.ids {
				out = append(out, zk.ACL{Perms: a.Perms, Scheme: id.Scheme, ID: id.ID})
			}
		case "digest":
			if !strings.Contains(a.ID, ":") {
				return nil, false
			}
			out = append(out, a)
		case "ip", "x509", "sasl":
			out = append(out, a)
		default:
			return nil, false
		}
	}
	// Remove duplicates, keeping the first.
	var dedup []zk.ACL
	for _, a := range out {
		dup := false
		for _, b := range dedup {
			if a == b {
				dup = true
			}
		}
		if !dup {
			dedup = append(dedup, a)
		}
	}
	return dedup, true
}

// apply runs o, recording its undo and triggers; on an error it changes
// nothing.
func (x *txn) apply(o op) result {
	t := x.t
	switch o.code {
	case opCreate, opCreate2:
		seq := o.flags&flagSequence != 0
		vp := o.path
		if seq {
			vp += "1"
		}
		if o.flags < 0 || o.flags > 3 || !validPath(vp) || o.path == "/" {
			return result{err: errBadArguments}
		}
		acl, ok := x.fixACL(o.acl)
		if !ok {
			return result{err: errInvalidACL}
		}
		pp := parentOf(o.path)
		par := t.nodes[pp]
		if par == nil {
			return result{err: errNoNode}
		}
		if !x.allowed(par.acl, zk.PermCreate) {
			return result{err: errNoAuth}
		}
		p := o.path
		if seq {
			p = fmt.Sprintf("%s%010d", o.path, par.seq)
			if x.bugs.seqFromCversion {
				p = fmt.Sprintf("%s%010d", o.path, par.stat.Cversion)
			}
		}
		if t.nodes[p] != nil {
			return result{err: errNodeExists}
		}
		if par.stat.EphemeralOwner != 0 {
			return result{err: errNoChildrenForEphemerals}
		}
		var owner int64
		if o.flags&flagEphemeral != 0 {
			owner = x.sid
		}
		n := &node{data: copyData(o.data), acl: acl, children: map[string]struct{}{}}
		n.stat = zk.Stat{Czxid: x.zxid, Mzxid: x.zxid, Pzxid: x.zxid, Ctime: x.now, Mtime: x.now, EphemeralOwner: owner}
		x.saveStat(par)
		name := baseOf(p)
		t.nodes[p] = n
		par.children[name] = struct{}{}
		par.stat.Cversion++
		par.seq++
		par.stat.Pzxid = x.zxid
		x.undo = append(x.undo, func() { delete(t.nodes, p); delete(par.children, name); par.seq-- })
		x.triggers = append(x.triggers, trigger{p, evCreated, true}, trigger{pp, evChildrenChanged, false})
		return result{path: p, stat: n.statOf()}
	case opDelete:
		if !validPath(o.path) || isSpecial(o.path) {
			return result{err: errBadArguments}
		}
		par := t.nodes[parentOf(o.path)]
		if par == nil {
			return result{err: errNoNode}
		}
		if !x.allowed(par.acl, zk.PermDelete) {
			return result{err: errNoAuth}
		}
		n := t.nodes[o.path]
		if n == nil {
			return result{err: errNoNode}
		}
		if o.version != -1 && o.version != n.stat.Version {
			return result{err: errBadVersion}
		}
		if len(n.children) > 0 {
			return result{err: errNotEmpty}
		}
		x.remove(o.path)
		return result{}
	case opSetData:
		if !validPath(o.path) {
			return result{err: errBadArguments}
		}
		n := t.nodes[o.path]
		if n == nil {
			return result{err: errNoNode}
		}
		if !x.allowed(n.acl, zk.PermWrite) {
			return result{err: errNoAuth}
		}
		if o.version != -1 && o.version != n.stat.Version {
			return result{err: errBadVersion}
		}
		x.saveStat(n)
		old := n.data
		x.undo = append(x.undo, func() { n.data = old })
		n.data = copyData(o.data)
		n.stat.Version++
		n.stat.Mzxid = x.zxid
		n.stat.Mtime = x.now
		x.triggers = append(x.triggers, trigger{o.path, evDataChanged, true})
		return result{stat: n.statOf()}
	case opCheck:
		if !validPath(o.path) {
			return result{err: errBadArguments}
		}
		n := t.nodes[o.path]
		if n == nil {
			return result{err: errNoNode}
		}
		if !x.allowed(n.acl, zk.PermRead) {
			return result{err: errNoAuth}
		}
		if o.version != -1 && o.version != n.stat.Version {
			return result{err: errBadVersion}
		}
		return result{}
	case opSetACL:
		if !validPath(o.path) {
			return result{err: errBadArguments}
		}
		acl, ok := x.fixACL(o.acl)
		if !ok {
			return result{err: errInvalidACL}
		}
		n := t.nodes[o.path]
		if n == nil {
			return result{err: errNoNode}
		}
		if !x.allowed(n.acl, zk.PermAdmin) {
			return result{err: errNoAuth}
		}
		if o.version != -1 && o.version != n.stat.Aversion {
			return result{err: errBadVersion}
		}
		x.saveStat(n)
		old := n.acl
		x.undo = append(x.undo, func() { n.acl = old })
		n.acl = acl
		n.stat.Aversion++
		return result{stat: n.statOf()}
	}
	return result{err: errUnimplemented}
}

// remove deletes the childless znode at p.
func (x *txn) remove(p string) {
	t := x.t
	n := t.nodes[p]
	pp := parentOf(p)
	par := t.nodes[pp]
	name := baseOf(p)
	x.saveStat(par)
	delete(t.nodes, p)
	delete(par.children, name)
	if x.zxid > par.stat.Pzxid {
		par.stat.Pzxid = x.zxid
	}
	if !x.bugs.deleteKeepsCversion {
		par.stat.Cversion++
	}
	x.undo = append(x.undo, func() { t.nodes[p] = n; par.children[name] = struct{}{} })
	x.triggers = append(x.triggers, trigger{p, evDeleted, true}, trigger{pp, evChildrenChanged, false})
}

// ephemeralsOf lists the paths of sid's ephemeral znodes, deepest and
// then in reverse order first (an ephemeral has no children, so any order
// works; this one is deterministic).
func (t *Tree) ephemeralsOf(sid int64) []string {
	var out []string
	for p, n := range t.nodes {
		if n.stat.EphemeralOwner == sid {
			out = append(out, p)
		}
	}
	sort.Strings(out)
	return out
}

package replica

import (
	"fmt"
	"sort"
	"strings"

	"github.com/roomlog/roomlog/third_party/zk"
)

// simZK is the in-memory model of the ZooKeeper semantics the replica's
// protocol relies on, for the randomized simulation (sim_test.go): a tree
// of znodes with data versions, sessions whose end deletes their ephemeral
// nodes, sequential names numbered by the creates under the parent (every
// create counts, sequential or not; a delete does not, although it moves
// the parent's Stat.Cversion; a failed Multi changes nothing — all three
// measured on ZooKeeper 3.8 by the conformance test), and atomic Multi
// with version checks. One-shot child watches
// are modelled as a change counter per directory, which the simulation
// turns into watch events. TestSimZKConformance runs the same operation
// sequences on this model and on real ZooKeeper and requires the same
// results.
type simZK struct {
	nodes    map[string]*simNode
	sessions map[int64]bool // live sessions
	nextSID  int64
	// changes counts the child changes of each directory (the simulation
	// fires the election watch on a change).
	changes map[string]int
}

type simNode struct {
	data     []byte
	version  int32
	owner    int64 // ephemeral owner session, 0: persistent
	cversion int32 // child changes: creates and deletes (Stat.Cversion)
	seq      int32 // child creates: the next sequence number
	children map[string]bool
}

func newSimZK() *simZK {
	return &simZK{
		nodes:    map[string]*simNode{"/": {children: map[string]bool{}}},
		sessions: map[int64]bool{},
		nextSID:  0x100,
		changes:  map[string]int{},
	}
}

// open starts a session.
func (z *simZK) open() int64 {
	z.nextSID++
	z.sessions[z.nextSID] = true
	return z.nextSID
}

// expire ends session sid: its ephemeral nodes go.
func (z *simZK) expire(sid int64) {
	if !z.sessions[sid] {
		return
	}
	delete(z.sessions, sid)
	var gone []string
	for p, n := range z.nodes {
		if n.owner == sid {
			gone = append(gone, p)
		}
	}
	sort.Strings(gone)
	for _, p := range gone {
		z.remove(p)
	}
}

func parentOf(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// simOp is one operation of a Multi (or a single request).
type simOp struct {
	kind      string // create, delete, set, check
	path      string
	data      []byte
	version   int32 // -1: any
	ephemeral bool
	sequence  bool
}

// apply checks op against the tree without changing it (dry) or applies
// it; it returns the created path for a create.
func (z *simZK) apply(sid int64, op simOp, dry bool) (string, error) {
	if !z.sessions[sid] {
		return "", zk.ErrSessionExpired
	}
	n := z.nodes[op.path]
	switch op.kind {
	case "create":
		par := z.nodes[parentOf(op.path)]
		if par == nil {
			return "", zk.ErrNoNode
		}
		p := op.path
		if op.sequence {
			p = fmt.Sprintf("%s%010d", op.path, par.seq)
		}
		if z.nodes[p] != nil {
			return "", zk.ErrNodeExists
		}
		if par.owner != 0 {
			return "", zk.ErrNoChildrenForEphemerals
		}
		if dry {
			return p, nil
		}
		owner := int64(0)
		if op.ephemeral {
			owner = sid
		}
		z.nodes[p] = &simNode{data: append([]byte(nil), op.data...), owner: owner, children: map[string]bool{}}
		par.children[p[strings.LastIndexByte(p, '/')+1:]] = true
		par.cversion++
		par.seq++
		z.changes[parentOf(p)]++
		return p, nil
	case "delete":
		if n == nil {
			return "", zk.ErrNoNode
		}
		if op.version != -1 && op.version != n.version {
			return "", zk.ErrBadVersion
		}
		if len(n.children) > 0 {
			return "", zk.ErrNotEmpty
		}
		if !dry {
			z.remove(op.path)
		}
		return "", nil
	case "set":
		if n == nil {
			return "", zk.ErrNoNode
		}
		if op.version != -1 && op.version != n.version {
			return "", zk.ErrBadVersion
		}
		if !dry {
			n.data = append([]byte(nil), op.data...)
			n.version++
		}
		return "", nil
	case "check":
		if n == nil {
			return "", zk.ErrNoNode
		}
		if op.version != -1 && op.version != n.version {
			return "", zk.ErrBadVersion
		}
		return "", nil
	}
	panic("simzk: unknown op " + op.kind)
}

func (z *simZK) remove(p string) {
	delete(z.nodes, p)
	par := z.nodes[parentOf(p)]
	delete(par.children, p[strings.LastIndexByte(p, '/')+1:])
	par.cversion++
	z.changes[parentOf(p)]++
}

// do runs one request.
func (z *simZK) do(sid int64, op simOp) (string, error) { return z.apply(sid, op, false) }

// multi runs ops atomically: all or nothing. A failed Multi changes
// nothing (not even a parent's sequence counter). Its error is the first
// failing op's. The ops apply in order (a later op sees an earlier one's
// effect); a failure undoes those applied, newest first.
func (z *simZK) multi(sid int64, ops ...simOp) error {
	var undo []func()
	for _, op := range ops {
		p, err := z.apply(sid, op, true)
		if err != nil {
			for i := len(undo) - 1; i >= 0; i-- {
				undo[i]()
			}
			return err
		}
		if op.kind == "create" {
			op.path, op.sequence = p, false
		}
		if u := z.undoOf(op); u != nil {
			undo = append(undo, u)
		}
		if _, err := z.apply(sid, op, false); err != nil {
			panic(fmt.Sprintf("simzk: %s %s passed its dry run, then failed: %v", op.kind, op.path, err))
		}
	}
	return nil
}

// undoOf returns what undoes op, about to be applied (nil: nothing to
// undo).
func (z *simZK) undoOf(op simOp) func() {
	par, name := parentOf(op.path), op.path[strings.LastIndexByte(op.path, '/')+1:]
	switch op.kind {
	case "create":
		return func() {
			delete(z.nodes, op.path)
			pn := z.nodes[par]
			delete(pn.children, name)
			pn.cversion--
			pn.seq--
			z.changes[par]--
		}
	case "delete":
		n := z.nodes[op.path]
		return func() {
			z.nodes[op.path] = n
			pn := z.nodes[par]
			pn.children[name] = true
			pn.cversion--
			z.changes[par]--
		}
	case "set":
		n := z.nodes[op.path]
		data, version := n.data, n.version
		return func() { n.data, n.version = data, version }
	}
	return nil
}

func (z *simZK) clone() *simZK {
	c := &simZK{nodes: make(map[string]*simNode, len(z.nodes)), sessions: make(map[int64]bool, len(z.sessions)),
		nextSID: z.nextSID, changes: make(map[string]int, len(z.changes))}
	for p, n := range z.nodes {
		cn := *n
		cn.children = make(map[string]bool, len(n.children))
		for k := range n.children {
			cn.children[k] = true
		}
		c.nodes[p] = &cn
	}
	for k, v := range z.sessions {
		c.sessions[k] = v
	}
	for k, v := range z.changes {
		c.changes[k] = v
	}
	return c
}

func (z *simZK) get(sid int64, p string) ([]byte, int32, error) {
	if !z.sessions[sid] {
		return nil, 0, zk.ErrSessionExpired
	}
	n := z.nodes[p]
	if n == nil {
		return nil, 0, zk.ErrNoNode
	}
	return n.data, n.version, nil
}

// children lists p's children, sorted.
func (z *simZK) children(sid int64, p string) ([]string, error) {
	if !z.sessions[sid] {
		return nil, zk.ErrSessionExpired
	}
	n := z.nodes[p]
	if n == nil {
		return nil, zk.ErrNoNode
	}
	out := make([]string, 0, len(n.children))
	for k := range n.children {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}

package simzk

import (
	"crypto/sha1"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
)

// Options configure a Server. The zero value is valid.
type Options struct {
	// Tick is ZooKeeper's tickTime: the session expiry check runs every
	// Tick (default 100 ms).
	Tick time.Duration
	// MinSessionTimeout and MaxSessionTimeout bound the negotiated
	// session timeout (defaults 2*Tick and 20*Tick, as ZooKeeper's).
	MinSessionTimeout, MaxSessionTimeout time.Duration
	// Intercept, when set, is called for every request but pings and the
	// connect handshake, before it is applied, without the server's lock
	// held (it may call the Server's methods). Its Fault says what
	// happens to the request.
	Intercept func(Request) Fault
	// FaultDelay is how long a request Intercept answers Delay for waits
	// before it is applied (default 10*Tick).
	FaultDelay time.Duration
	// AcceptStaleClients turns off ZooKeeper's refusal of a client that has
	// seen a zxid newer than the server's (after Restore or Wipe, a client
	// whose session went on would otherwise be refused until the zxid
	// catches up, as with a real ZooKeeper restored from an older copy).
	AcceptStaleClients bool
	// Logger receives the server's logs (nil: discard).
	Logger *slog.Logger

	// bugs are planted by this package's tests only.
	bugs bugs
}

// bugs are deliberate deviations from ZooKeeper that the tests plant to
// show they catch them; all false outside those tests.
type bugs struct {
	seqFromCversion      bool // a sequence number is the parent's cversion (counting deletes)
	deleteKeepsCversion  bool // a delete does not move the parent's cversion
	multiNoRollback      bool // a failed multi keeps the ops before the failing one
	failedWriteNoZxid    bool // a failed write takes no zxid
	noACLCheck           bool // ACLs are not enforced
	existsNoWatchMissing bool // exists on a missing node sets no watch
	setWatchesRearmAll   bool // setWatches re-arms every watch and fires none
	eventsLate           bool // a watch event is queued after the next reply on its connection
}

// Request is what Options.Intercept sees of a request.
type Request struct {
	Session int64
	// Op is the operation: "create", "delete", "exists", "getData",
	// "setData", "getACL", "setACL", "getChildren", "getChildren2",
	// "sync", "multi", "setAuth", "setWatches", "closeSession", or
	// "op<N>" for an unknown opcode N.
	Op string
	// Path is the request's path ("" for multi, setAuth, setWatches and
	// closeSession).
	Path string
	// Ops lists a multi's op names and paths as "create /a".
	Ops []string
}

// Fault is what Intercept decides for a request.
type Fault int

const (
	// None: the request is applied and answered.
	None Fault = iota
	// DropBefore: the connection is closed without applying the request.
	DropBefore
	// DropAfter: the request is applied, then the connection is closed
	// instead of answering (a lost reply).
	DropAfter
	// Delay: the request waits Options.FaultDelay, then is applied and
	// answered; the connection's later requests (pings too) wait behind
	// it, as behind a slow server, and the session is not touched
	// meanwhile.
	Delay
)

// session is a ZooKeeper session. Guarded by Server.mu.
type session struct {
	id      int64
	passwd  []byte
	timeout time.Duration
	last    time.Time // last time a request or ping was heard
	conn    *conn     // the connection it is attached to, nil if none
	ids     []zk.ACL  // authenticated ids (setAuth digest)
}

// Server is an in-process ZooKeeper serving the client protocol on
// 127.0.0.1. Its methods are safe for concurrent use.
type Server struct {
	opts Options
	log  *slog.Logger
	ln   net.Listener
	wg   sync.WaitGroup
	done chan struct{}

	mu sync.Mutex // guards the fields below
	// tree is the znode tree; tree.zxid is the last zxid.
	tree     *Tree
	sessions map[int64]*session
	nextSID  int64
	conns    map[*conn]struct{}
	// held are the sessions whose connections are held (Hold).
	held map[int64]bool
	// holdCh is closed and replaced on every change of held and on Close.
	holdCh chan struct{}
	// dataW and childW are the watches: path -> connections.
	dataW, childW map[string]map[*conn]struct{}
	closed        bool
	received      int64
	sent          int64
	rnd           *rand.Rand
	connSeq       int64
}

// Start starts a server listening on 127.0.0.1 on a free port.
func Start(opts Options) (*Server, error) {
	if opts.Tick <= 0 {
		opts.Tick = 100 * time.Millisecond
	}
	if opts.MinSessionTimeout <= 0 {
		opts.MinSessionTimeout = 2 * opts.Tick
	}
	if opts.MaxSessionTimeout <= 0 {
		opts.MaxSessionTimeout = 20 * opts.Tick
	}
	if opts.FaultDelay <= 0 {
		opts.FaultDelay = 10 * opts.Tick
	}
	if opts.MaxSessionTimeout < opts.MinSessionTimeout {
		return nil, fmt.Errorf("simzk: MaxSessionTimeout %v < MinSessionTimeout %v", opts.MaxSessionTimeout, opts.MinSessionTimeout)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("simzk: listen: %w", err)
	}
	s := &Server{
		opts:     opts,
		log:      log,
		ln:       ln,
		done:     make(chan struct{}),
		tree:     newTree(),
		sessions: map[int64]*session{},
		// Session ids look like ZooKeeper's (server id 1 in the top byte).
		nextSID: 1<<56 | time.Now().UnixMilli()<<16&(1<<56-1),
		conns:   map[*conn]struct{}{},
		held:    map[int64]bool{},
		holdCh:  make(chan struct{}),
		dataW:   map[string]map[*conn]struct{}{},
		childW:  map[string]map[*conn]struct{}{},
		rnd:     rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1)),
	}
	s.wg.Add(2)
	go s.acceptLoop()
	go s.expiryLoop()
	return s, nil
}

// Addr returns the "127.0.0.1:port" clients connect to.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// Close stops the server: the listener and every connection close, the
// goroutines end (Close waits for them, at most 10 seconds).
func (s *Server) Close() {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.closed = true
	close(s.done)
	for c := range s.conns {
		s.closeConnLocked(c)
	}
	close(s.holdCh)
	s.holdCh = make(chan struct{})
	s.mu.Unlock()
	_ = s.ln.Close()
	waited := make(chan struct{})
	go func() { s.wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		s.log.Error("simzk: goroutines still running 10s after Close")
	}
}

// Sessions returns the live session ids, sorted.
func (s *Server) Sessions() []int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int64, 0, len(s.sessions))
	for id := range s.sessions {
		out = append(out, id)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// Expire ends session sid now, as its timeout would: its ephemeral
// znodes are deleted (one transaction; watches fire) and its connection
// is closed; the client learns of the expiry when it reconnects.
func (s *Server) Expire(sid int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[sid]; ss != nil {
		s.endSessionLocked(ss, "expired by Expire")
	}
}

// Disconnect closes session sid's connection; the session lives on until
// its timeout (the client reconnects and re-attaches it).
func (s *Server) Disconnect(sid int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if ss := s.sessions[sid]; ss != nil && ss.conn != nil {
		s.closeConnLocked(ss.conn)
	}
}

// Hold partitions session sid without closing anything (on) or heals it
// (!on): while held, nothing is read from or written to its connection
// (bytes wait in the kernel's buffers), so its pings go unheard, the
// client's read times out and the session expires after its timeout
// unless released first. A new connection that asks for a held session
// is held too (after its connect request is read). Holding outlives the
// session: release it to let the client in again.
func (s *Server) Hold(sid int64, on bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on {
		s.held[sid] = true
	} else {
		delete(s.held, sid)
	}
	close(s.holdCh)
	s.holdCh = make(chan struct{})
}

// Snapshot returns a deep copy of the znode tree and its zxid.
func (s *Server) Snapshot() *Tree {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.tree.clone()
}

// Restore rolls the tree back to t, as a ZooKeeper restored from an older
// copy: every session is expired (its connection closed; the ephemeral
// znodes in t, whose sessions are gone, are deleted, one transaction per
// owner) and later transactions reuse the zxids after t's. A client that
// has seen a later zxid is refused until the zxid passes it (unless
// Options.AcceptStaleClients), then told its session expired, as
// TestConformanceRestore measured on ZooKeeper 3.8. One difference:
// a real restore also brings back the sessions the copy held, which a
// client may re-attach within their timeout; here none survives. t
// itself is not changed.
func (s *Server) Restore(t *Tree) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked(t.clone())
}

// Wipe empties the tree, as a brand-new ZooKeeper: every session is
// expired and the zxid starts again from 0, so a client that saw any
// zxid is refused until the zxid passes it (unless
// Options.AcceptStaleClients).
func (s *Server) Wipe() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetLocked(newTree())
}

func (s *Server) resetLocked(t *Tree) {
	for _, ss := range s.sessions {
		if ss.conn != nil {
			s.closeConnLocked(ss.conn)
		}
	}
	s.sessions = map[int64]*session{}
	s.tree = t
	owners := map[int64]bool{}
	for _, n := range t.nodes {
		if n.stat.EphemeralOwner != 0 {
			owners[n.stat.EphemeralOwner] = true
		}
	}
	ids := make([]int64, 0, len(owners))
	for id := range owners {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		s.deleteEphemeralsLocked(id)
	}
	s.log.Info("simzk: tree reset", "zxid", t.zxid, "znodes", len(t.nodes))
}

// Dump renders the tree and the sessions for a failure trace.
func (s *Server) Dump() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var b strings.Builder
	b.WriteString(s.tree.Dump())
	ids := make([]int64, 0, len(s.sessions))
	for id := range s.sessions {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		ss := s.sessions[id]
		fmt.Fprintf(&b, "session 0x%x timeout %v connected=%v held=%v\n", id, ss.timeout, ss.conn != nil, s.held[id])
	}
	return b.String()
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		nc, err := s.ln.Accept()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
			}
			s.log.Error("simzk: accept", "err", err)
			return
		}
		c := &conn{s: s, nc: nc, wake: make(chan struct{}, 1), done: make(chan struct{}), watched: map[string]struct{}{}}
		s.mu.Lock()
		s.connSeq++
		c.seq = s.connSeq
		if s.closed {
			s.mu.Unlock()
			_ = nc.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		s.wg.Add(2)
		go c.readLoop()
		go c.writeLoop()
	}
}

func (s *Server) expiryLoop() {
	defer s.wg.Done()
	tk := time.NewTicker(s.opts.Tick)
	defer tk.Stop()
	for {
		select {
		case <-s.done:
			return
		case now := <-tk.C:
			s.mu.Lock()
			var due []*session
			for _, ss := range s.sessions {
				if now.Sub(ss.last) >= ss.timeout {
					due = append(due, ss)
				}
			}
			sort.Slice(due, func(i, j int) bool { return due[i].id < due[j].id })
			for _, ss := range due {
				s.endSessionLocked(ss, "expired")
			}
			s.mu.Unlock()
		}
	}
}

// nextZxidLocked starts a transaction.
func (s *Server) nextZxidLocked() int64 {
	s.tree.zxid++
	return s.tree.zxid
}

// endSessionLocked ends ss (closeSession or expiry): one transaction that
// deletes its ephemerals, and its connection closes.
func (s *Server) endSessionLocked(ss *session, why string) {
	delete(s.sessions, ss.id)
	s.deleteEphemeralsLocked(ss.id)
	if ss.conn != nil {
		s.closeConnLocked(ss.conn)
	}
	s.log.Debug("simzk: session ended", "session", fmt.Sprintf("0x%x", ss.id), "why", why)
}

func (s *Server) deleteEphemeralsLocked(sid int64) {
	x := &txn{t: s.tree, sid: sid, zxid: s.nextZxidLocked(), now: time.Now().UnixMilli()}
	for _, p := range s.tree.ephemeralsOf(sid) {
		x.remove(p)
	}
	s.fireLocked(x.triggers)
}

// fireLocked sends the events of a transaction's triggers to the
// watching connections (one event per connection per path: a delete
// seen by a data and a child watch is one event) and removes those
// one-shot watches.
func (s *Server) fireLocked(trs []trigger) {
	for i := 0; i < len(trs); i++ {
		tr := trs[i]
		got := map[*conn]struct{}{}
		take := func(m map[string]map[*conn]struct{}) {
			for c := range m[tr.path] {
				got[c] = struct{}{}
			}
			delete(m, tr.path)
		}
		switch {
		case tr.typ == evDeleted:
			take(s.dataW)
			take(s.childW)
		case tr.data:
			take(s.dataW)
		default:
			take(s.childW)
		}
		cs := make([]*conn, 0, len(got))
		for c := range got {
			cs = append(cs, c)
		}
		sort.Slice(cs, func(i, j int) bool { return cs[i].seq < cs[j].seq })
		for _, c := range cs {
			c.sendEventLocked(tr.typ, tr.path)
		}
	}
}

func (s *Server) addWatchLocked(m map[string]map[*conn]struct{}, p string, c *conn) {
	if m[p] == nil {
		m[p] = map[*conn]struct{}{}
	}
	m[p][c] = struct{}{}
	c.watched[p] = struct{}{}
}

// closeConnLocked closes c: its watches go, its session is detached.
func (s *Server) closeConnLocked(c *conn) {
	if c.closed {
		return
	}
	c.closed = true
	close(c.done)
	_ = c.nc.Close()
	delete(s.conns, c)
	for p := range c.watched {
		for _, m := range []map[string]map[*conn]struct{}{s.dataW, s.childW} {
			if w := m[p]; w != nil {
				delete(w, c)
				if len(w) == 0 {
					delete(m, p)
				}
			}
		}
	}
	if c.sess != nil && c.sess.conn == c {
		c.sess.conn = nil
	}
}

func digestID(auth []byte) (zk.ACL, bool) {
	user, _, ok := strings.Cut(string(auth), ":")
	if !ok {
		return zk.ACL{}, false
	}
	h := sha1.Sum(auth)
	return zk.ACL{Scheme: "digest", ID: user + ":" + base64.StdEncoding.EncodeToString(h[:])}, true
}

// fourLetter answers a four-letter word.
func (s *Server) fourLetter(cmd string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch cmd {
	case "ruok":
		return "imok"
	case "srvr", "stat":
		var b strings.Builder
		b.WriteString("Zookeeper version: 3.8.4-simzk, built on 01/01/2024 00:00 GMT\n")
		if cmd == "stat" {
			b.WriteString("Clients:\n")
			for c := range s.conns {
				fmt.Fprintf(&b, " %s[1](queued=0,recved=0,sent=0)\n", c.nc.RemoteAddr())
			}
			b.WriteString("\n")
		}
		b.WriteString("Latency min/avg/max: 0/0.0/0\n")
		fmt.Fprintf(&b, "Received: %d\nSent: %d\nConnections: %d\nOutstanding: 0\n", s.received, s.sent, len(s.conns))
		fmt.Fprintf(&b, "Zxid: 0x%x\nMode: standalone\nNode count: %d\n", s.tree.zxid, len(s.tree.nodes))
		return b.String()
	}
	return ""
}

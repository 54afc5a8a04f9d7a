package simzk

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sort"
	"strings"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
)

// writeTimeout bounds one write to a client; a client that does not read
// for that long is disconnected.
const writeTimeout = 10 * time.Second

// conn is one client connection: a reader goroutine that reads and
// processes requests in order, and a writer goroutine that sends the
// queued replies and events in order.
type conn struct {
	s    *Server
	nc   net.Conn
	seq  int64         // accept order (deterministic event order)
	wake chan struct{} // cap 1: out has something or the conn closed
	done chan struct{} // closed by closeConnLocked

	// Guarded by s.mu.
	sess       *session
	closed     bool
	out        [][]byte // framed packets to write, in order
	closeAfter bool     // close once out is written
	watched    map[string]struct{}
	late       [][]byte // events held back by the planted bug eventsLate
}

func (c *conn) enqueueLocked(pkt []byte) {
	c.out = append(c.out, frame(pkt))
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *conn) sendEventLocked(typ int32, path string) {
	if c.closed {
		return
	}
	if c.s.opts.bugs.eventsLate {
		var e enc
		e.i32(xidWatchEvent)
		e.i64(-1)
		e.i32(errOK)
		e.i32(typ)
		e.i32(3)
		e.str(path)
		c.late = append(c.late, e.b)
		return
	}
	var e enc
	e.i32(xidWatchEvent)
	e.i64(-1)
	e.i32(errOK)
	e.i32(typ)
	e.i32(3) // SyncConnected
	e.str(path)
	c.enqueueLocked(e.b)
}

func (c *conn) closeLater() {
	c.closeAfter = true
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// waitHeld waits while session sid is held; false: the connection or the
// server closed meanwhile.
func (c *conn) waitHeld(sid int64) bool {
	for {
		c.s.mu.Lock()
		held := c.s.held[sid] && !c.closed && !c.s.closed
		ch := c.s.holdCh
		closed := c.closed
		c.s.mu.Unlock()
		if closed {
			return false
		}
		if !held {
			return true
		}
		select {
		case <-ch:
		case <-c.done:
			return false
		}
	}
}

func (c *conn) sid() int64 {
	c.s.mu.Lock()
	defer c.s.mu.Unlock()
	if c.sess == nil {
		return 0
	}
	return c.sess.id
}

func (c *conn) close() {
	c.s.mu.Lock()
	c.s.closeConnLocked(c)
	c.s.mu.Unlock()
}

func (c *conn) writeLoop() {
	defer c.s.wg.Done()
	defer c.close()
	for {
		select {
		case <-c.wake:
		case <-c.done:
			return
		}
		for {
			if sid := c.sid(); sid != 0 && !c.waitHeld(sid) {
				return
			}
			c.s.mu.Lock()
			if c.closed {
				c.s.mu.Unlock()
				return
			}
			if len(c.out) == 0 {
				closeNow := c.closeAfter
				c.s.mu.Unlock()
				if closeNow {
					return
				}
				break
			}
			pkt := c.out[0]
			c.out = c.out[1:]
			c.s.sent++
			c.s.mu.Unlock()
			_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
			if _, err := c.nc.Write(pkt); err != nil {
				return
			}
		}
	}
}

func (c *conn) readLoop() {
	defer c.s.wg.Done()
	defer c.close()
	var hdr [4]byte
	if _, err := io.ReadFull(c.nc, hdr[:]); err != nil {
		return
	}
	switch w := string(hdr[:]); w {
	case "ruok", "srvr", "stat":
		_ = c.nc.SetWriteDeadline(time.Now().Add(writeTimeout))
		_, _ = io.WriteString(c.nc, c.s.fourLetter(w))
		return
	}
	pkt, ok := c.readBody(hdr)
	if !ok || !c.connect(pkt) {
		return
	}
	if c.sid() == 0 {
		// Refused (expired or unknown session): the writer closes the
		// connection once the reply is out.
		select {
		case <-c.done:
		case <-time.After(writeTimeout):
		}
		return
	}
	for {
		if _, err := io.ReadFull(c.nc, hdr[:]); err != nil {
			return
		}
		pkt, ok := c.readBody(hdr)
		if !ok {
			return
		}
		if sid := c.sid(); sid != 0 && !c.waitHeld(sid) {
			return
		}
		if !c.request(pkt) {
			return
		}
	}
}

func (c *conn) readBody(hdr [4]byte) ([]byte, bool) {
	n := int32(binary.BigEndian.Uint32(hdr[:]))
	if n < 0 || n > maxPacket {
		c.s.log.Warn("simzk: packet length out of range, closing", "len", n)
		return nil, false
	}
	pkt := make([]byte, n)
	if _, err := io.ReadFull(c.nc, pkt); err != nil {
		return nil, false
	}
	return pkt, true
}

// connect handles the connect request; false: close the connection.
func (c *conn) connect(pkt []byte) bool {
	d := dec{b: pkt}
	_ = d.i32() // protocol version
	lastZxid := d.i64()
	timeoutMs := d.i32()
	sid := d.i64()
	passwd := d.buf()
	if d.err != nil {
		return false
	}
	// A readOnly byte may follow (newer clients); it is ignored.
	if sid != 0 && !c.waitHeld(sid) {
		return false
	}
	s := c.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.closed {
		return false
	}
	s.received++
	if !s.opts.AcceptStaleClients && lastZxid > s.tree.zxid {
		s.log.Info("simzk: refusing a client that has seen a newer zxid", "client", fmt.Sprintf("0x%x", lastZxid), "server", fmt.Sprintf("0x%x", s.tree.zxid))
		return false
	}
	timeout := time.Duration(timeoutMs) * time.Millisecond
	timeout = max(s.opts.MinSessionTimeout, min(s.opts.MaxSessionTimeout, timeout))
	var ss *session
	if sid == 0 {
		s.nextSID++
		ss = &session{id: s.nextSID, timeout: timeout, passwd: make([]byte, 16)}
		for i := range ss.passwd {
			ss.passwd[i] = byte(s.rnd.UintN(256))
		}
		s.sessions[ss.id] = ss
		s.nextZxidLocked() // createSession is a transaction
		s.log.Debug("simzk: new session", "session", fmt.Sprintf("0x%x", ss.id), "timeout", timeout)
	} else {
		ss = s.sessions[sid]
		if ss == nil || !bytes.Equal(ss.passwd, passwd) {
			var e enc
			e.i32(0)
			e.i32(0)
			e.i64(0)
			e.buf(make([]byte, 16))
			e.boolean(false)
			c.enqueueLocked(e.b)
			c.closeLater()
			return true // the writer closes the connection after this reply
		}
		if ss.conn != nil && ss.conn != c {
			s.closeConnLocked(ss.conn)
		}
	}
	ss.last = time.Now()
	ss.conn = c
	c.sess = ss
	var e enc
	e.i32(0)
	e.i32(int32(ss.timeout / time.Millisecond))
	e.i64(ss.id)
	e.buf(ss.passwd)
	e.boolean(false)
	c.enqueueLocked(e.b)
	return true
}

var opNames = map[int32]string{
	opCreate: "create", opCreate2: "create2", opDelete: "delete", opExists: "exists",
	opGetData: "getData", opSetData: "setData", opGetACL: "getACL", opSetACL: "setACL",
	opGetChildren: "getChildren", opGetChildren2: "getChildren2", opSync: "sync",
	opCheck: "check", opMulti: "multi", opClose: "closeSession", opSetAuth: "setAuth",
	opSetWatches: "setWatches",
}

func opName(code int32) string {
	if n, ok := opNames[code]; ok {
		return n
	}
	return fmt.Sprintf("op%d", code)
}

// parsed is a decoded request.
type parsed struct {
	xid, code int32
	path      string
	watch     bool
	op        op   // single writes
	multi     []op // multi
	auth      struct {
		scheme string
		data   []byte
	}
	setW struct {
		rel                 int64
		data, exist, childs []string
	}
}

// parse decodes a request; ok false: malformed.
func parse(pkt []byte) (parsed, bool) {
	d := dec{b: pkt}
	var r parsed
	r.xid = d.i32()
	r.code = d.i32()
	readOp := func(code int32) op {
		o := op{code: code, path: d.str()}
		switch code {
		case opCreate, opCreate2:
			o.data = d.buf()
			o.acl = d.acls()
			o.flags = d.i32()
		case opDelete, opCheck:
			o.version = d.i32()
		case opSetData:
			o.data = d.buf()
			o.version = d.i32()
		case opSetACL:
			o.acl = d.acls()
			o.version = d.i32()
		}
		return o
	}
	switch r.code {
	case opPing, opClose:
	case opCreate, opCreate2, opDelete, opSetData, opSetACL:
		r.op = readOp(r.code)
		r.path = r.op.path
	case opExists, opGetData, opGetChildren, opGetChildren2:
		r.path = d.str()
		r.watch = d.boolean()
	case opGetACL, opSync:
		r.path = d.str()
	case opMulti:
		for d.err == nil {
			typ := d.i32()
			done := d.boolean()
			_ = d.i32()
			if done || d.err != nil {
				break
			}
			switch typ {
			case opCreate, opCreate2, opDelete, opSetData, opCheck:
				r.multi = append(r.multi, readOp(typ))
			default:
				return r, false
			}
		}
	case opSetAuth:
		_ = d.i32()
		r.auth.scheme = d.str()
		r.auth.data = d.buf()
	case opSetWatches:
		r.setW.rel = d.i64()
		r.setW.data = d.strs()
		r.setW.exist = d.strs()
		r.setW.childs = d.strs()
	}
	return r, d.err == nil
}

// request processes one request packet; false: close the connection.
func (c *conn) request(pkt []byte) bool {
	s := c.s
	r, ok := parse(pkt)
	if !ok {
		s.log.Warn("simzk: malformed request, closing", "opcode", r.code)
		return false
	}
	fault := None
	if r.code != opPing && s.opts.Intercept != nil {
		req := Request{Session: c.sid(), Op: opName(r.code), Path: r.path}
		for _, o := range r.multi {
			req.Ops = append(req.Ops, opName(o.code)+" "+o.path)
		}
		fault = s.opts.Intercept(req)
	}
	if fault == Delay {
		select {
		case <-time.After(s.opts.FaultDelay):
		case <-c.done:
			return false
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if c.closed || c.sess == nil {
		return false
	}
	if fault == DropBefore {
		s.log.Debug("simzk: request dropped before applying", "session", fmt.Sprintf("0x%x", c.sess.id), "op", opName(r.code), "path", r.path)
		s.closeConnLocked(c)
		return false
	}
	ss := c.sess
	if s.sessions[ss.id] != ss {
		s.closeConnLocked(c) // the session ended
		return false
	}
	s.received++
	ss.last = time.Now()
	reply := c.handleLocked(r)
	if fault == DropAfter {
		s.log.Debug("simzk: reply dropped after applying", "session", fmt.Sprintf("0x%x", ss.id), "op", opName(r.code), "path", r.path)
		s.closeConnLocked(c)
		return false
	}
	if reply != nil {
		c.enqueueLocked(reply)
	}
	for _, ev := range c.late {
		c.enqueueLocked(ev)
	}
	c.late = nil
	if r.code == opClose {
		c.closeLater()
	}
	return true
}

func header(xid int32, zxid int64, err int32) enc {
	var e enc
	e.i32(xid)
	e.i64(zxid)
	e.i32(err)
	return e
}

// handleLocked applies r and returns the reply (header and body).
func (c *conn) handleLocked(r parsed) []byte {
	s := c.s
	t := s.tree
	ss := c.sess
	errReply := func(zxid int64, code int32) []byte { e := header(r.xid, zxid, code); return e.b }
	bugs := s.opts.bugs
	newTxn := func() *txn {
		return &txn{t: t, sid: ss.id, ids: ss.ids, zxid: s.nextZxidLocked(), now: time.Now().UnixMilli(), bugs: bugs}
	}
	failedZxid := func(x *txn) int64 {
		if bugs.failedWriteNoZxid {
			s.tree.zxid--
			return s.tree.zxid
		}
		return x.zxid
	}
	switch r.code {
	case opPing:
		e := header(xidPing, t.zxid, errOK)
		return e.b
	case opClose:
		zx := t.zxid + 1 // deleteEphemeralsLocked takes it
		ss.conn = nil
		delete(s.sessions, ss.id)
		s.deleteEphemeralsLocked(ss.id)
		e := header(r.xid, zx, errOK)
		return e.b
	case opCreate, opCreate2, opDelete, opSetData, opSetACL:
		x := newTxn()
		res := x.apply(r.op)
		if res.err != errOK {
			return errReply(failedZxid(x), res.err)
		}
		s.fireLocked(x.triggers)
		e := header(r.xid, x.zxid, errOK)
		switch r.code {
		case opCreate:
			e.str(res.path)
		case opCreate2:
			e.str(res.path)
			e.stat(res.stat)
		case opSetData, opSetACL:
			e.stat(res.stat)
		}
		return e.b
	case opMulti:
		x := newTxn()
		results := make([]result, len(r.multi))
		failed := -1
		for i, o := range r.multi {
			results[i] = x.apply(o)
			if results[i].err != errOK {
				failed = i
				break
			}
		}
		e := header(r.xid, x.zxid, errOK)
		if failed >= 0 {
			if bugs.multiNoRollback {
				s.fireLocked(x.triggers)
			} else {
				x.rollback()
			}
			e = header(r.xid, failedZxid(x), errOK)
			for i := range r.multi {
				code := errOK
				switch {
				case i == failed:
					code = results[i].err
				case i > failed:
					code = errRuntimeInconsistency
				}
				e.i32(opError)
				e.boolean(false)
				e.i32(code)
				e.i32(code)
			}
		} else {
			s.fireLocked(x.triggers)
			for i, o := range r.multi {
				e.i32(o.code)
				e.boolean(false)
				e.i32(errOK)
				switch o.code {
				case opCreate:
					e.str(results[i].path)
				case opCreate2:
					e.str(results[i].path)
					e.stat(results[i].stat)
				case opSetData:
					e.stat(results[i].stat)
				}
			}
		}
		e.i32(-1)
		e.boolean(true)
		e.i32(-1)
		return e.b
	case opExists, opGetData, opGetChildren, opGetChildren2, opGetACL:
		if !validPath(r.path) {
			return errReply(t.zxid, errBadArguments)
		}
		n := t.nodes[r.path]
		if r.code == opExists && r.watch && (n != nil || !bugs.existsNoWatchMissing) {
			s.addWatchLocked(s.dataW, r.path, c)
		}
		if n == nil {
			return errReply(t.zxid, errNoNode)
		}
		switch r.code {
		case opGetData, opGetChildren, opGetChildren2:
			if !allowed(n.acl, ss.ids, zk.PermRead) {
				return errReply(t.zxid, errNoAuth)
			}
		case opGetACL:
			if !allowed(n.acl, ss.ids, zk.PermRead|zk.PermAdmin) {
				return errReply(t.zxid, errNoAuth)
			}
		}
		e := header(r.xid, t.zxid, errOK)
		switch r.code {
		case opExists:
			e.stat(n.statOf())
		case opGetData:
			if r.watch {
				s.addWatchLocked(s.dataW, r.path, c)
			}
			e.buf(n.data)
			e.stat(n.statOf())
		case opGetChildren, opGetChildren2:
			if r.watch {
				s.addWatchLocked(s.childW, r.path, c)
			}
			names := make([]string, 0, len(n.children))
			for k := range n.children {
				names = append(names, k)
			}
			sort.Strings(names)
			e.strs(names)
			if r.code == opGetChildren2 {
				e.stat(n.statOf())
			}
		case opGetACL:
			acl := n.acl
			if !allowed(n.acl, ss.ids, zk.PermAdmin) {
				// Without ADMIN, digest hashes are redacted.
				acl = append([]zk.ACL(nil), n.acl...)
				for i := range acl {
					if acl[i].Scheme == "digest" {
						user, _, _ := strings.Cut(acl[i].ID, ":")
						acl[i].ID = user + ":x"
					}
				}
			}
			e.acls(acl)
			e.stat(n.statOf())
		}
		return e.b
	case opSync:
		if !validPath(r.path) {
			return errReply(t.zxid, errBadArguments)
		}
		e := header(r.xid, t.zxid, errOK)
		e.str(r.path)
		return e.b
	case opSetAuth:
		if r.auth.scheme == "digest" {
			if id, ok := digestID(r.auth.data); ok {
				ss.ids = append(ss.ids, id)
			}
		}
		e := header(r.xid, 0, errOK)
		return e.b
	case opSetWatches:
		rel := r.setW.rel
		if bugs.setWatchesRearmAll {
			rel = 1<<63 - 1
		}
		for _, p := range r.setW.data {
			switch n := t.nodes[p]; {
			case n == nil:
				c.sendEventLocked(evDeleted, p)
			case n.stat.Mzxid > rel:
				c.sendEventLocked(evDataChanged, p)
			default:
				s.addWatchLocked(s.dataW, p, c)
			}
		}
		for _, p := range r.setW.exist {
			if t.nodes[p] != nil && !bugs.setWatchesRearmAll {
				c.sendEventLocked(evCreated, p)
			} else {
				s.addWatchLocked(s.dataW, p, c)
			}
		}
		for _, p := range r.setW.childs {
			switch n := t.nodes[p]; {
			case n == nil:
				c.sendEventLocked(evDeleted, p)
			case n.stat.Pzxid > rel:
				c.sendEventLocked(evChildrenChanged, p)
			default:
				s.addWatchLocked(s.childW, p, c)
			}
		}
		e := header(r.xid, t.zxid, errOK)
		return e.b
	}
	return errReply(t.zxid, errUnimplemented)
}

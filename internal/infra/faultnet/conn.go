package faultnet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"time"
)

const (
	readSize   = 32 << 10 // largest chunk read at once
	queueDepth = 128      // chunks queued per half before the proxy stops reading
)

// conn is one proxied connection: the accepted client socket, the dialed
// server socket and the two halves between them.
type conn struct {
	p      *Proxy
	client net.Conn
	ctx    context.Context // done when the connection is killed or the proxy closed
	cancel context.CancelFunc

	// Guarded by p.mu.
	server net.Conn // nil until dialed
	killed bool     // sockets closed, ctx cancelled
}

func newConn(p *Proxy, client net.Conn) *conn {
	ctx, cancel := context.WithCancel(p.ctx)
	return &conn{p: p, client: client, ctx: ctx, cancel: cancel}
}

// killLocked closes both sockets (resetting them if rst) and wakes every
// goroutine of the connection. The caller holds p.mu.
func (c *conn) killLocked(rst bool) {
	if c.killed {
		return
	}
	c.killed = true
	c.cancel()
	closeConn(c.client, rst)
	if c.server != nil {
		closeConn(c.server, rst)
	}
}

// run dials the target and copies both ways until both halves end or the
// connection is killed.
func (c *conn) run() {
	defer c.p.wg.Done()
	defer c.p.forget(c)
	server, ok := c.dial()
	if !ok {
		return
	}
	halves := []*half{
		{c: c, dir: up, src: c.client, dst: server, q: make(chan chunk, queueDepth)},
		{c: c, dir: down, src: server, dst: c.client, q: make(chan chunk, queueDepth)},
	}
	var wg sync.WaitGroup
	for _, h := range halves {
		wg.Add(2)
		go func() { defer wg.Done(); h.read() }()
		go func() { defer wg.Done(); h.write() }()
	}
	wg.Wait()
}

// dial waits out a Blackhole (the target sees nothing of a held
// connection), then dials the next target.
func (c *conn) dial() (net.Conn, bool) {
	if !c.p.unheld(c.ctx) {
		return nil, false
	}
	d := net.Dialer{Timeout: c.p.cfg.DialTimeout}
	s, err := d.DialContext(c.ctx, "tcp", c.p.nextTarget())
	c.p.mu.Lock()
	defer c.p.mu.Unlock()
	if c.killed {
		if s != nil {
			closeConn(s, true)
		}
		return nil, false
	}
	if err != nil {
		c.p.stats.dialFailed.Add(1)
		c.killLocked(true)
		return nil, false
	}
	c.server = s
	return s, true
}

// chunk is a piece of one direction's stream with the time it is due.
type chunk struct {
	data    []byte
	release time.Time
}

// half is one direction of a connection: read moves chunks from src into
// q, write delivers them from q to dst. q is FIFO and write waits for each
// chunk before it looks at the next: a chunk drawn a shorter delay than
// the one before it waits for it, so jitter never reorders.
type half struct {
	c        *conn
	dir      int
	src, dst net.Conn
	q        chan chunk

	linkFree time.Time // owned by write: when the capped link is free again
}

// read queues what src sends, stamped with its release time; it closes q
// at the end of src's stream.
func (h *half) read() {
	defer close(h.q)
	buf := make([]byte, readSize)
	for {
		n, err := h.src.Read(buf)
		if n > 0 {
			h.c.p.record(h.dir, buf[:n])
			ch := chunk{data: bytes.Clone(buf[:n]), release: time.Now().Add(h.c.p.latency())}
			select {
			case h.q <- ch:
			case <-h.c.ctx.Done():
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				// A reset (or our own close) on one side resets both.
				h.c.p.kill(h.c, true)
			}
			return
		}
	}
}

// write delivers queued chunks in order, then passes the FIN on.
func (h *half) write() {
	for {
		var ch chunk
		var ok bool
		select {
		case ch, ok = <-h.q:
		case <-h.c.ctx.Done():
			return
		}
		if !ok {
			// The FIN is held like bytes (never dropped).
			if h.c.p.unheld(h.c.ctx) && h.c.ctx.Err() == nil {
				closeWrite(h.dst)
			}
			return
		}
		if !h.deliver(ch) {
			return
		}
	}
}

// deliver writes ch to dst (or discards it while dropping) once it is due,
// the link is free and no Blackhole holds it. It returns false when the
// connection ended.
func (h *half) deliver(ch chunk) bool {
	data := ch.data
	for len(data) > 0 {
		f, changed := h.c.p.state()
		if f.hold {
			if !h.c.p.unheld(h.c.ctx) {
				return false
			}
			continue
		}
		n, at := len(data), ch.release
		if f.rate > 0 {
			n = min(n, max(int(f.rate/100), 1))
			if h.linkFree.After(at) {
				at = h.linkFree
			}
			at = at.Add(time.Duration(n) * time.Second / time.Duration(f.rate))
		}
		if wait := time.Until(at); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-changed:
			case <-h.c.ctx.Done():
				t.Stop()
				return false
			}
			t.Stop()
			continue // the faults may have changed meanwhile: look again
		}
		if f.rate > 0 {
			h.linkFree = at
		}
		if f.drop[h.dir] {
			h.c.p.stats.dropped[h.dir].Add(int64(n))
		} else {
			if _, err := h.dst.Write(data[:n]); err != nil {
				h.c.p.kill(h.c, true)
				return false
			}
			h.c.p.stats.forwarded[h.dir].Add(int64(n))
		}
		data = data[n:]
	}
	return true
}

// closeWrite passes a FIN on, keeping the other direction open.
func closeWrite(nc net.Conn) {
	if tc, ok := nc.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
		return
	}
	_ = nc.Close()
}

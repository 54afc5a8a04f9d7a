package zkensemble

import (
	"context"
	"io"
	"net"
	"sync"
	"time"
)

// How long a relay redials a target that refuses, and how often.
const (
	relayRedialFor   = 2 * time.Second
	relayRedialEvery = 20 * time.Millisecond
)

// relay sits between the faultnet proxies of the quorum links to a server
// and that server's real quorum port, and redials while the port refuses.
//
// A faultnet proxy accepts a connection before it dials its target and
// resets it when the dial fails: where a direct connect would fail with
// ECONNREFUSED, the client sees a connect that succeeds and a reset right
// after. ZooKeeper's Learner retries a refused connect to its new leader
// (which binds its quorum port only once elected, a few milliseconds
// after its followers may dial it), but a reset after connecting makes it
// abandon that leader, and the leader then waits initLimit (10 s) for a
// quorum before a new election. With the relay as the proxies' target the
// follower's connect waits until the leader listens (up to 2 s), as its
// own retries would have. Faults are applied by the faultnet proxy in
// front; the relay only forwards (a reset on one side resets the other, a
// half-close is passed on).
type relay struct {
	target    string
	redialFor time.Duration
	ln        net.Listener
	ctx       context.Context // ends on close
	cancel    context.CancelFunc
	wg        sync.WaitGroup // the accept loop and every connection's goroutines

	mu     sync.Mutex // guards conns and closed
	conns  map[net.Conn]struct{}
	closed bool
}

func newRelay(target string, redialFor time.Duration) (*relay, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &relay{target: target, redialFor: redialFor, ln: ln, ctx: ctx, cancel: cancel, conns: map[net.Conn]struct{}{}}
	r.wg.Add(1)
	go r.acceptLoop() // owner: the relay; close waits for it
	return r, nil
}

func (r *relay) addr() string { return r.ln.Addr().String() }

// close stops the relay, resets every connection and returns once every
// goroutine of the relay has returned. It is idempotent.
func (r *relay) close() {
	r.mu.Lock()
	if !r.closed {
		r.closed = true
		r.cancel()
		_ = r.ln.Close()
		for c := range r.conns {
			reset(c)
		}
	}
	r.mu.Unlock()
	r.wg.Wait()
}

func (r *relay) acceptLoop() {
	defer r.wg.Done()
	for {
		c, err := r.ln.Accept()
		if err != nil {
			return // closed
		}
		if !r.track(c) {
			return
		}
		r.wg.Add(1)
		go r.serve(c) // owner: the relay; close resets c and waits
	}
}

// track registers c for close to reset; false (and c reset) when closed.
func (r *relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		reset(c)
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *relay) untrack(cs ...net.Conn) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, c := range cs {
		delete(r.conns, c)
	}
}

func (r *relay) serve(c net.Conn) {
	defer r.wg.Done()
	s := r.dial()
	if s == nil || !r.track(s) {
		reset(c)
		r.untrack(c)
		return
	}
	done := make(chan struct{})
	r.wg.Add(1)
	go func() { // owner: serve, which waits for done
		defer r.wg.Done()
		defer close(done)
		pipe(s, c)
	}()
	pipe(c, s)
	<-done
	_ = c.Close()
	_ = s.Close()
	r.untrack(c, s)
}

// dial dials the target until it answers, for at most redialFor; nil if
// it never did or the relay closed.
func (r *relay) dial() net.Conn {
	deadline := time.Now().Add(r.redialFor)
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		d := net.Dialer{Timeout: r.redialFor}
		s, err := d.DialContext(r.ctx, "tcp", r.target)
		if err == nil {
			return s
		}
		if time.Now().After(deadline) {
			return nil
		}
		t.Reset(relayRedialEvery)
		select {
		case <-r.ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// pipe copies src to dst. At EOF it half-closes dst; on an error it resets
// both, so the other direction ends too.
func pipe(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err == nil {
		if tc, ok := dst.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
			return
		}
		_ = dst.Close()
		return
	}
	reset(dst)
	reset(src)
}

// reset closes c with SO_LINGER 0: the peer sees a reset, not a FIN.
func reset(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}

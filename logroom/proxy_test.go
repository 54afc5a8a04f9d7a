package logroom

import (
	"net"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
)

// proxy is a TCP proxy in front of one ZooKeeper server that a test can cut
// (close every connection) and freeze (accept but forward nothing), so
// connection loss and session expiry happen exactly when the test wants.
type proxy struct {
	ln     net.Listener
	target string

	mu     sync.Mutex // guards conns, frozen, thawCh
	conns  map[net.Conn]struct{}
	frozen bool
	thawCh chan struct{}
	wg     sync.WaitGroup

	// blackhole drops client->server bytes silently; discarded counts them.
	blackhole atomic.Bool
	discarded atomic.Int64
	// dropReplies drops server->client bytes; dropped counts them.
	dropReplies atomic.Bool
	dropped     atomic.Int64
}

func newProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &proxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}, thawCh: make(chan struct{})}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) accept() {
	defer p.wg.Done()
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *proxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *proxy) serve(c net.Conn) {
	defer p.wg.Done()
	if !p.track(c) {
		c.Close()
		return
	}
	// While frozen, hold the client connection without dialing.
	p.mu.Lock()
	thaw, frozen := p.thawCh, p.frozen
	p.mu.Unlock()
	if frozen {
		<-thaw
		// A cut while frozen closed c: the copy below ends at once.
	}
	s, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	if !p.track(s) {
		c.Close()
		s.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn, toServer bool) {
		defer wg.Done()
		drop, count := &p.dropReplies, &p.dropped
		if toServer {
			drop, count = &p.blackhole, &p.discarded
		}
		buf := make([]byte, 64<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if drop.Load() {
					count.Add(int64(n))
				} else if _, werr := dst.Write(buf[:n]); werr != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		dst.Close()
		src.Close()
	}
	go pipe(s, c, true)
	go pipe(c, s, false)
	wg.Wait()
	p.mu.Lock()
	delete(p.conns, c)
	delete(p.conns, s)
	p.mu.Unlock()
}

// cut closes every open connection.
func (p *proxy) cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.conns {
		c.Close()
		delete(p.conns, c)
	}
}

// freeze cuts every connection and holds new ones without forwarding.
func (p *proxy) freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
	p.cut()
}

// thaw lets held and new connections through.
func (p *proxy) thaw() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		p.frozen = false
		close(p.thawCh)
		p.thawCh = make(chan struct{})
	}
}

func (p *proxy) close() {
	p.ln.Close()
	p.thaw()
	p.mu.Lock()
	for c := range p.conns {
		c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

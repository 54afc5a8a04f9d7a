package faultnet

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Directions, as indexes of per-direction fields.
const (
	up   = 0 // client to server: requests
	down = 1 // server to client: replies
)

// faults is the state the setters change. The zero value forwards
// everything at once.
type faults struct {
	cut    bool    // reset current and new connections
	hold   bool    // Blackhole: deliver nothing, dial nothing
	drop   [2]bool // per direction: discard chunks when due
	delay  time.Duration
	jitter time.Duration
	rate   int64 // bytes per second per direction; 0 = unlimited
}

// counters are the proxy's statistics, updated without the mutex.
type counters struct {
	accepted   atomic.Int64
	refused    atomic.Int64
	dialFailed atomic.Int64
	resets     atomic.Int64
	forwarded  [2]atomic.Int64
	dropped    [2]atomic.Int64
}

// Stats is a snapshot of a proxy's counters.
type Stats struct {
	Accepted    int64 // connections accepted, refused ones included
	Refused     int64 // connections reset on accept because the proxy was cut
	DialFailed  int64 // connections reset because their target could not be dialed
	Resets      int64 // connections reset by Cut or Reset
	Open        int   // connections accepted and not yet ended
	BytesUp     int64 // bytes delivered client to server
	BytesDown   int64 // bytes delivered server to client
	DroppedUp   int64 // bytes discarded by DropRequests
	DroppedDown int64 // bytes discarded by DropReplies
}

// Proxy forwards the TCP connections it accepts to its targets and injects
// the faults its setters switch on. Its methods are safe for concurrent
// use. See the package documentation for what each fault does.
type Proxy struct {
	cfg    Config
	ln     net.Listener
	ctx    context.Context // ends on Close: ends dials and every wait
	cancel context.CancelFunc
	wg     sync.WaitGroup // the accept loop and every connection's goroutines

	closeOnce sync.Once
	closeErr  error

	mu      sync.Mutex // guards f, changed, conns, next, rng, closed and each conn's server and killed
	f       faults
	changed chan struct{} // closed and replaced whenever f changes: waiters re-read f
	conns   map[*conn]struct{}
	next    int        // index into cfg.Targets of the next dial
	rng     *rand.Rand // jitter draws
	closed  bool

	stats counters

	recMu     sync.Mutex      // guards recording and rec
	recording bool            // Record was called
	rec       [2]bytes.Buffer // per direction: every byte read since Record, all connections in arrival order
}

// New listens on cfg.Listen and forwards every connection it accepts, until
// Close.
func New(cfg Config) (*Proxy, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("faultnet: listen on %s: %w", cfg.Listen, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		cfg:     cfg,
		ln:      ln,
		ctx:     ctx,
		cancel:  cancel,
		changed: make(chan struct{}),
		conns:   map[*conn]struct{}{},
		rng:     rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)),
	}
	p.wg.Add(1)
	go p.acceptLoop()
	return p, nil
}

// Addr is the address clients connect to ("127.0.0.1:port").
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Targets are the addresses connections are forwarded to.
func (p *Proxy) Targets() []string { return append([]string(nil), p.cfg.Targets...) }

// Cut resets every current connection and every new one until Heal.
func (p *Proxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.f.cut = true
	p.changedLocked()
	p.resetAllLocked()
}

// Reset resets every current connection once; new connections are
// forwarded as before.
func (p *Proxy) Reset() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	p.resetAllLocked()
}

// Blackhole holds every byte in both directions, and every new connection
// undialed, until Heal; nothing is lost or closed.
func (p *Proxy) Blackhole() { p.update(func(f *faults) { f.hold = true }) }

// DropRequests discards client-to-server bytes until Heal, counting them
// in Stats.DroppedUp.
func (p *Proxy) DropRequests() { p.update(func(f *faults) { f.drop[up] = true }) }

// DropReplies discards server-to-client bytes until Heal, counting them in
// Stats.DroppedDown.
func (p *Proxy) DropReplies() { p.update(func(f *faults) { f.drop[down] = true }) }

// Delay sets the one-way latency of each direction to d plus a uniform draw
// from [-jitter, +jitter], never reordering. Negative values count as 0;
// Delay(0, 0) removes it. Heal leaves it as it is.
func (p *Proxy) Delay(d, jitter time.Duration) {
	p.update(func(f *faults) { f.delay, f.jitter = max(d, 0), max(jitter, 0) })
}

// Bandwidth caps each direction at bytesPerSecond; 0 or less removes the
// cap. Heal leaves it as it is.
func (p *Proxy) Bandwidth(bytesPerSecond int64) {
	p.update(func(f *faults) { f.rate = max(bytesPerSecond, 0) })
}

// Heal ends Cut, Blackhole, DropRequests and DropReplies: held connections
// are dialed and held bytes delivered. Delay and Bandwidth stay.
func (p *Proxy) Heal() {
	p.update(func(f *faults) {
		f.cut, f.hold = false, false
		f.drop = [2]bool{}
	})
}

// Record starts recording every byte the proxy reads, both directions,
// from every connection (current and later ones), until Close: what an
// eavesdropper on the link would see. Meant for short tests (the bytes
// are kept in memory); Contains asks about them.
func (p *Proxy) Record() {
	p.recMu.Lock()
	defer p.recMu.Unlock()
	p.recording = true
}

// Contains reports whether b occurs in the bytes recorded since Record in
// either direction (each direction's bytes of all connections
// concatenated in arrival order). False without Record.
func (p *Proxy) Contains(b []byte) bool {
	p.recMu.Lock()
	defer p.recMu.Unlock()
	return bytes.Contains(p.rec[up].Bytes(), b) || bytes.Contains(p.rec[down].Bytes(), b)
}

// Recorded returns the number of bytes recorded since Record, both
// directions.
func (p *Proxy) Recorded() int {
	p.recMu.Lock()
	defer p.recMu.Unlock()
	return p.rec[up].Len() + p.rec[down].Len()
}

// record appends b to direction dir's recording when Record was called.
func (p *Proxy) record(dir int, b []byte) {
	p.recMu.Lock()
	defer p.recMu.Unlock()
	if p.recording {
		p.rec[dir].Write(b)
	}
}

// Stats snapshots the counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	open := 0
	for c := range p.conns {
		if !c.killed {
			open++
		}
	}
	p.mu.Unlock()
	s := &p.stats
	return Stats{
		Accepted:    s.accepted.Load(),
		Refused:     s.refused.Load(),
		DialFailed:  s.dialFailed.Load(),
		Resets:      s.resets.Load(),
		Open:        open,
		BytesUp:     s.forwarded[up].Load(),
		BytesDown:   s.forwarded[down].Load(),
		DroppedUp:   s.dropped[up].Load(),
		DroppedDown: s.dropped[down].Load(),
	}
}

// Close stops listening, resets every connection and returns once every
// goroutine of the proxy has returned. It is idempotent; fault setters
// after Close do nothing.
func (p *Proxy) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.cancel()
		if err := p.ln.Close(); err != nil && !errors.Is(err, net.ErrClosed) {
			p.closeErr = fmt.Errorf("faultnet: close listener: %w", err)
		}
		for c := range p.conns {
			c.killLocked(true)
		}
		p.mu.Unlock()
	})
	p.wg.Wait()
	return p.closeErr
}

func (p *Proxy) update(fn func(*faults)) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return
	}
	fn(&p.f)
	p.changedLocked()
}

// changedLocked wakes every goroutine waiting on the faults.
func (p *Proxy) changedLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Proxy) resetAllLocked() {
	for c := range p.conns {
		if !c.killed {
			p.stats.resets.Add(1)
			c.killLocked(true)
		}
	}
}

// state returns the current faults and a channel closed when they change.
func (p *Proxy) state() (faults, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.f, p.changed
}

// unheld waits until no Blackhole holds the link. It returns false when
// ctx ended first.
func (p *Proxy) unheld(ctx context.Context) bool {
	for {
		f, changed := p.state()
		if !f.hold {
			return true
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return false
		}
	}
}

// latency draws the delay of a chunk read now.
func (p *Proxy) latency() time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.f.delay
	if j := p.f.jitter; j > 0 {
		d += time.Duration(p.rng.Int64N(2*int64(j)+1)) - j
	}
	return max(d, 0)
}

func (p *Proxy) nextTarget() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	t := p.cfg.Targets[p.next%len(p.cfg.Targets)]
	p.next++
	return t
}

// acceptLoop hands each accepted connection to its own goroutine and never
// waits on one.
func (p *Proxy) acceptLoop() {
	defer p.wg.Done()
	for {
		nc, err := p.ln.Accept()
		if err != nil {
			if p.ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of descriptors or the like: back off instead of spinning.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.stats.accepted.Add(1)
		p.mu.Lock()
		if p.closed || p.f.cut {
			if !p.closed {
				p.stats.refused.Add(1)
			}
			p.mu.Unlock()
			closeConn(nc, true)
			continue
		}
		c := newConn(p, nc)
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go c.run()
	}
}

// kill ends c, resetting its sockets if rst.
func (p *Proxy) kill(c *conn, rst bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.killLocked(rst)
}

// forget removes an ended connection, closing whatever is still open.
func (p *Proxy) forget(c *conn) {
	p.mu.Lock()
	defer p.mu.Unlock()
	c.killLocked(false)
	delete(p.conns, c)
}

// closeConn closes nc, with an RST instead of a FIN if rst.
func closeConn(nc net.Conn, rst bool) {
	if tc, ok := nc.(*net.TCPConn); ok && rst {
		_ = tc.SetLinger(0)
	}
	_ = nc.Close()
}

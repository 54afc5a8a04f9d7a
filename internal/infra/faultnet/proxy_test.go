package faultnet

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const (
	prompt = 2 * time.Second        // bound on anything that should happen at once
	quiet  = 150 * time.Millisecond // how long a test watches for an absence
)

func TestForward(t *testing.T) {
	for _, size := range []int{1, 1000, 4 << 20} {
		t.Run(byteSize(size), func(t *testing.T) {
			s := newEcho(t)
			p := newProxy(t, s.addr())
			c := dial(t, p.Addr())
			msg := make([]byte, size)
			_, _ = rand.Read(msg)
			werr := make(chan error, 1)
			go func() { _, err := c.Write(msg); werr <- err }()
			got, err := readN(c, size, 10*time.Second)
			require.NoError(t, err)
			require.NoError(t, <-werr)
			require.True(t, bytes.Equal(msg, got), "the echo differs from what was sent")
			require.Eventually(t, func() bool {
				st := p.Stats()
				return st.BytesUp == int64(size) && st.BytesDown == int64(size)
			}, prompt, 2*time.Millisecond, "counters")
			st := p.Stats()
			require.Equal(t, Stats{Accepted: 1, Open: 1, BytesUp: int64(size), BytesDown: int64(size)}, st)
		})
	}
}

func byteSize(n int) string {
	switch {
	case n >= 1<<20:
		return "MiB"
	case n >= 1<<10:
		return "KiB"
	}
	return "bytes"
}

// A half-close goes through after the bytes before it; the server's
// answering FIN comes back after its bytes.
func TestHalfClose(t *testing.T) {
	s := newEcho(t)
	p := newProxy(t, s.addr())
	p.Delay(5*time.Millisecond, 0) // the FIN must wait for the queued bytes
	c := dial(t, p.Addr())
	_, err := c.Write([]byte("last words"))
	require.NoError(t, err)
	require.NoError(t, c.CloseWrite())
	require.NoError(t, c.SetReadDeadline(time.Now().Add(prompt)))
	got, err := io.ReadAll(c)
	require.NoError(t, err)
	require.Equal(t, "last words", string(got))
	require.Eventually(t, func() bool { return p.Stats().Open == 0 }, prompt, 2*time.Millisecond, "the connection ends")
}

func TestRoundRobin(t *testing.T) {
	a, b := newEcho(t), newEcho(t)
	p := newProxy(t, a.addr(), b.addr())
	for i := 0; i < 4; i++ {
		roundTrip(t, dial(t, p.Addr()), "x", prompt)
	}
	require.Equal(t, int64(2), a.accepted.Load())
	require.Equal(t, int64(2), b.accepted.Load())
}

func TestDialFailure(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close()) // nobody listens there now
	p := newProxy(t, dead)
	requireRefused(t, p.Addr())
	require.Equal(t, int64(1), p.Stats().DialFailed)
}

// Cut and Reset both reset live connections at once, on both sides; only
// Cut refuses new connections, until Heal.
func TestCutAndReset(t *testing.T) {
	tests := []struct {
		name         string
		fault        func(*Proxy)
		refusesUntil bool // new connections are reset until Heal
	}{
		{"cut", (*Proxy).Cut, true},
		{"reset", (*Proxy).Reset, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newEcho(t)
			p := newProxy(t, s.addr())
			c := dial(t, p.Addr())
			roundTrip(t, c, "hello", prompt)
			readErr := make(chan error, 1)
			go func() { _, err := readN(c, 1, 10*time.Second); readErr <- err }()

			tt.fault(p)
			select {
			case err := <-readErr:
				require.ErrorIs(t, err, syscall.ECONNRESET, "a blocked read sees the reset")
			case <-time.After(prompt):
				t.Fatal("a blocked read did not return after the reset")
			}
			require.Eventually(t, func() bool { return s.ended.Load() == 1 }, prompt, 2*time.Millisecond, "the server's side ends too")
			require.Equal(t, int64(1), p.Stats().Resets)

			if tt.refusesUntil {
				requireRefused(t, p.Addr())
				require.Equal(t, int64(1), s.accepted.Load(), "no dial while cut")
				require.Equal(t, int64(1), p.Stats().Refused)
				p.Heal()
			}
			roundTrip(t, dial(t, p.Addr()), "again", prompt)
			require.Equal(t, int64(2), s.accepted.Load())
		})
	}
}

// What a live connection sees during each fault and after Heal.
func TestLiveConnection(t *testing.T) {
	const msg = "the quick brown fox"
	n := int64(len(msg))
	tests := []struct {
		name       string
		fault      func(*Proxy)
		serverGets bool // msg reaches the server during the fault
		clientGets bool // its echo reaches the client during the fault
		held       bool // the echo arrives after Heal: nothing was lost
		dropped    Stats
	}{
		{name: "none", fault: func(*Proxy) {}, serverGets: true, clientGets: true},
		{name: "blackhole", fault: (*Proxy).Blackhole, held: true},
		{name: "drop requests", fault: (*Proxy).DropRequests, dropped: Stats{DroppedUp: n}},
		{name: "drop replies", fault: (*Proxy).DropReplies, serverGets: true, dropped: Stats{DroppedDown: n}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newEcho(t)
			p := newProxy(t, s.addr())
			c := dial(t, p.Addr())
			roundTrip(t, c, "hi", prompt)

			tt.fault(p)
			_, err := c.Write([]byte(msg))
			require.NoError(t, err)
			if tt.serverGets {
				require.Eventually(t, func() bool { return s.received.Load() == 2+n }, prompt, 2*time.Millisecond, "the server receives")
			}
			if tt.clientGets {
				got, err := readN(c, len(msg), prompt)
				require.NoError(t, err)
				require.Equal(t, msg, string(got))
			} else {
				requireSilent(t, c, quiet)
			}
			if !tt.serverGets {
				require.Equal(t, int64(2), s.received.Load(), "the server got bytes during the fault")
			}
			require.Eventually(t, func() bool {
				st := p.Stats()
				return st.DroppedUp == tt.dropped.DroppedUp && st.DroppedDown == tt.dropped.DroppedDown
			}, prompt, 2*time.Millisecond, "drop counters")

			p.Heal()
			if tt.held {
				got, err := readN(c, len(msg), prompt)
				require.NoError(t, err, "held bytes are delivered on Heal")
				require.Equal(t, msg, string(got))
			}
			roundTrip(t, c, "after", prompt)
			st := p.Stats()
			require.Equal(t, tt.dropped.DroppedUp, st.DroppedUp)
			require.Equal(t, tt.dropped.DroppedDown, st.DroppedDown)
			require.Equal(t, int64(1), st.Accepted)
		})
	}
}

// What a connection made during each fault sees, and after Heal.
func TestNewConnection(t *testing.T) {
	tests := []struct {
		name    string
		fault   func(*Proxy)
		dialed  bool // the target sees the connection during the fault
		echo    bool // a write is echoed during the fault
		held    bool // after Heal the held write is echoed
		dropped Stats
	}{
		{name: "none", fault: func(*Proxy) {}, dialed: true, echo: true},
		{name: "blackhole", fault: (*Proxy).Blackhole, held: true},
		{name: "drop requests", fault: (*Proxy).DropRequests, dialed: true, dropped: Stats{DroppedUp: 4}},
		{name: "drop replies", fault: (*Proxy).DropReplies, dialed: true, dropped: Stats{DroppedDown: 4}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newEcho(t)
			p := newProxy(t, s.addr())
			tt.fault(p)
			c := dial(t, p.Addr())
			_, err := c.Write([]byte("ping"))
			require.NoError(t, err)
			if tt.echo {
				got, err := readN(c, 4, prompt)
				require.NoError(t, err)
				require.Equal(t, "ping", string(got))
			} else {
				requireSilent(t, c, quiet)
			}
			if tt.dialed {
				require.Eventually(t, func() bool { return s.accepted.Load() == 1 }, prompt, 2*time.Millisecond, "the dial")
			} else {
				require.Zero(t, s.accepted.Load(), "a held connection was dialed")
			}
			require.Eventually(t, func() bool {
				st := p.Stats()
				return st.DroppedUp == tt.dropped.DroppedUp && st.DroppedDown == tt.dropped.DroppedDown
			}, prompt, 2*time.Millisecond, "drop counters")
			p.Heal()
			if tt.held {
				got, err := readN(c, 4, prompt)
				require.NoError(t, err)
				require.Equal(t, "ping", string(got))
			}
			roundTrip(t, c, "pong", prompt)
			roundTrip(t, dial(t, p.Addr()), "fresh", prompt)
		})
	}
}

// Bytes and the FIN the server sends during a Blackhole are held too, and
// delivered in order on Heal.
func TestBlackholeHoldsReplies(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	p := newProxy(t, ln.Addr().String())
	c := dial(t, p.Addr())
	var sc net.Conn
	select {
	case sc = <-accepted:
		require.NotNil(t, sc)
		defer sc.Close()
	case <-time.After(prompt):
		t.Fatal("the proxy did not dial")
	}

	p.Blackhole()
	_, err = sc.Write([]byte("reply"))
	require.NoError(t, err)
	require.NoError(t, sc.(*net.TCPConn).CloseWrite())
	requireSilent(t, c, quiet)
	p.Heal()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(prompt)))
	got, err := io.ReadAll(c)
	require.NoError(t, err, "the held FIN ends the stream")
	require.Equal(t, "reply", string(got))
	require.Equal(t, int64(5), p.Stats().BytesDown)
}

func TestDelay(t *testing.T) {
	tests := []struct {
		d, jitter time.Duration
	}{
		{20 * time.Millisecond, 0},
		{30 * time.Millisecond, 10 * time.Millisecond},
		{5 * time.Millisecond, 5 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.d.String()+"±"+tt.jitter.String(), func(t *testing.T) {
			s := newEcho(t)
			p := newProxy(t, s.addr())
			p.Delay(tt.d, tt.jitter)
			c := dial(t, p.Addr())
			floor := 2 * (tt.d - tt.jitter)
			for i := 0; i < 5; i++ {
				start := time.Now()
				roundTrip(t, c, "rtt", prompt)
				require.GreaterOrEqual(t, time.Since(start), floor, "round trip %d", i)
			}
			// Many small writes, each its own chunk at the proxy most of the
			// time: jitter must not reorder them.
			const count = 2000
			var want bytes.Buffer
			for i := 0; i < count; i++ {
				want.Write([]byte{byte(i >> 8), byte(i)})
			}
			werr := make(chan error, 1)
			go func() {
				for i := 0; i < count; i++ {
					if _, err := c.Write(want.Bytes()[2*i : 2*i+2]); err != nil {
						werr <- err
						return
					}
				}
				werr <- nil
			}()
			got, err := readN(c, want.Len(), 10*time.Second)
			require.NoError(t, err)
			require.NoError(t, <-werr)
			require.Equal(t, want.Bytes(), got, "bytes reordered")
		})
	}
}

// The same seed draws the same latencies; another seed draws others.
func TestDelaySeed(t *testing.T) {
	draws := func(seed uint64) []time.Duration {
		p, err := New(Config{Targets: []string{"127.0.0.1:1"}, Seed: seed})
		require.NoError(t, err)
		defer p.Close()
		p.Delay(time.Millisecond, time.Millisecond)
		var out []time.Duration
		for i := 0; i < 20; i++ {
			d := p.latency()
			require.LessOrEqual(t, d, 2*time.Millisecond)
			out = append(out, d)
		}
		return out
	}
	require.Equal(t, draws(7), draws(7))
	require.NotEqual(t, draws(7), draws(8))
}

func TestBandwidth(t *testing.T) {
	tests := []struct {
		name  string
		rate  int64
		size  int
		delay time.Duration
	}{
		{"64KiB at 256KiB/s", 256 << 10, 64 << 10, 0},
		{"8KiB at 32KiB/s", 32 << 10, 8 << 10, 0},
		{"64KiB at 512KiB/s with 20ms", 512 << 10, 64 << 10, 20 * time.Millisecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newEcho(t)
			p := newProxy(t, s.addr())
			p.Bandwidth(tt.rate)
			p.Delay(tt.delay, 0)
			c := dial(t, p.Addr())
			msg := make([]byte, tt.size)
			_, _ = rand.Read(msg)
			start := time.Now()
			werr := make(chan error, 1)
			go func() { _, err := c.Write(msg); werr <- err }()
			got, err := readN(c, tt.size, 10*time.Second)
			took := time.Since(start)
			require.NoError(t, err)
			require.NoError(t, <-werr)
			require.True(t, bytes.Equal(msg, got))
			// Each direction is capped; the echo pipelines them.
			floor := time.Duration(tt.size)*time.Second/time.Duration(tt.rate) + 2*tt.delay
			require.GreaterOrEqual(t, took, floor)
			require.Less(t, took, 3*floor+time.Second, "far slower than the cap")
			t.Logf("%d bytes each way in %v (floor %v)", tt.size, took, floor)

			p.Bandwidth(0)
			p.Delay(0, 0)
			// With the cap on, the same bytes take floor or more each time;
			// so the fastest of a few transfers does without it. (One alone
			// may take longer on a busy machine.)
			fastest := time.Duration(1<<63 - 1)
			for range 3 {
				start = time.Now()
				go func() { _, err := c.Write(msg); werr <- err }()
				got, err := readN(c, tt.size, prompt)
				require.NoError(t, err)
				require.NoError(t, <-werr)
				require.True(t, bytes.Equal(msg, got))
				fastest = min(fastest, time.Since(start))
			}
			require.Less(t, fastest, floor, "the cap is off")
		})
	}
}

// Fault setters at any time, from many goroutines, while traffic flows:
// for the race detector, and to check nothing wedges.
func TestConcurrentFaults(t *testing.T) {
	s := newEcho(t)
	p := newProxy(t, s.addr())
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		faults := []func(){
			p.Blackhole, p.DropReplies, p.DropRequests, p.Reset, p.Cut, p.Heal,
			func() { p.Delay(time.Millisecond, time.Millisecond) },
			func() { p.Bandwidth(1 << 20) },
			func() { p.Bandwidth(0); p.Delay(0, 0) },
		}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			faults[i%len(faults)]()
			_ = p.Stats()
		}
	}()
	deadline := time.Now().Add(300 * time.Millisecond)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", p.Addr(), prompt)
		if err != nil {
			require.ErrorIs(t, err, syscall.ECONNRESET, "only a Cut fails a dial")
			continue
		}
		_, _ = c.Write([]byte("x"))
		_, _ = readN(c, 1, 5*time.Millisecond)
		c.Close()
	}
	close(stop)
	<-done
	p.Heal()
	p.Bandwidth(0)
	p.Delay(0, 0)
	roundTrip(t, dial(t, p.Addr()), "still works", prompt)
}

// Close returns promptly during every fault, with connections live,
// held, delayed or blocked on a target that does not read, and leaves no
// goroutine behind.
func TestCloseDuringFault(t *testing.T) {
	accepted := func(st Stats) bool { return st.Accepted == 2 }
	tests := []struct {
		name  string
		mute  bool // the target never reads: the proxy's writes block
		fault func(*Proxy)
		busy  func(Stats) bool // the proxy is in the state to test
	}{
		{name: "none", fault: func(*Proxy) {}, busy: func(st Stats) bool { return st.BytesDown > 2 }},
		{name: "cut", fault: (*Proxy).Cut, busy: func(st Stats) bool { return st.Refused == 1 }},
		{name: "blackhole", fault: (*Proxy).Blackhole, busy: accepted},
		{name: "drop requests", fault: (*Proxy).DropRequests, busy: func(st Stats) bool { return st.DroppedUp > 0 }},
		{name: "drop replies", fault: (*Proxy).DropReplies, busy: func(st Stats) bool { return st.DroppedDown > 0 }},
		{name: "delay 1h", fault: func(p *Proxy) { p.Delay(time.Hour, 0) }, busy: accepted},
		{name: "1 byte per second", fault: func(p *Proxy) { p.Bandwidth(1) }, busy: accepted},
		{name: "target not reading", mute: true, fault: func(*Proxy) {}, busy: func(st Stats) bool { return st.BytesUp > 0 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newServer(t, tt.mute)
			p, err := New(Config{Targets: []string{s.addr()}})
			require.NoError(t, err)
			t.Cleanup(func() { p.Close() }) // a failing subtest must not leak into the next one's leak check
			live := dial(t, p.Addr())
			if !tt.mute {
				roundTrip(t, live, "hi", prompt)
			}
			tt.fault(p)
			conns := []net.Conn{live}
			// Under Cut the reset may reach the client before its connect
			// returns (see doc.go): then there is no held connection.
			if held, err := net.DialTimeout("tcp", p.Addr(), prompt); err == nil {
				t.Cleanup(func() { held.Close() })
				conns = append(conns, held)
			} else {
				require.Equal(t, "cut", tt.name, "dial: %v", err)
			}
			// Fill every queue and buffer on the way: writes block.
			big := make([]byte, 8<<20)
			werrs := make(chan error, len(conns))
			for _, c := range conns {
				go func() { _, err := c.Write(big); werrs <- err }()
			}
			require.Eventually(t, func() bool { st := p.Stats(); return accepted(st) && tt.busy(st) }, prompt, 2*time.Millisecond, "the proxy busy")

			require.NotEmpty(t, proxyGoroutines(), "the leak check sees the proxy's goroutines")
			start := time.Now()
			require.NoError(t, p.Close())
			require.Less(t, time.Since(start), prompt, "Close took too long")
			requireNoLeak(t)
			require.NoError(t, p.Close(), "Close is idempotent")
			// The clients' blocked writes end with the reset.
			for range conns {
				select {
				case <-werrs:
				case <-time.After(prompt):
					t.Fatal("a client write still blocked after Close")
				}
			}
			_, err = net.DialTimeout("tcp", p.Addr(), prompt)
			require.Error(t, err, "nothing listens after Close")
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
		bad  []string // fields named in the error; none: valid
	}{
		{name: "minimal", cfg: Config{Targets: []string{"127.0.0.1:2181"}}},
		{name: "full", cfg: Config{Listen: "127.0.0.1:0", Targets: []string{"a:1", "b:2"}, DialTimeout: time.Second, Seed: 3}},
		{name: "no target", cfg: Config{}, bad: []string{"Targets"}},
		{name: "bad target", cfg: Config{Targets: []string{"a:1", "nope"}}, bad: []string{"Targets[1]"}},
		{name: "everything", cfg: Config{Listen: "x", DialTimeout: -1}, bad: []string{"Listen", "Targets", "DialTimeout"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if len(tt.bad) == 0 {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, ErrInvalidConfig)
			for _, f := range tt.bad {
				require.Contains(t, err.Error(), f+":")
			}
			_, nerr := New(tt.cfg)
			require.ErrorIs(t, nerr, ErrInvalidConfig)
		})
	}
}

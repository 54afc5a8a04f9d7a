package faultnet

import (
	"io"
	"net"
	"os"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// server is a real TCP server behind a proxy. It echoes what it reads
// (unless mute: it then holds its connections without reading) and counts
// connections and bytes, so a test can see what reached the target.
type server struct {
	ln   net.Listener
	mute bool
	wg   sync.WaitGroup

	mu    sync.Mutex // guards conns
	conns map[net.Conn]struct{}

	accepted atomic.Int64
	ended    atomic.Int64 // connections whose read side ended (EOF, reset)
	received atomic.Int64
}

func newServer(t *testing.T, mute bool) *server {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &server{ln: ln, mute: mute, conns: map[net.Conn]struct{}{}}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(s.close)
	return s
}

func newEcho(t *testing.T) *server { return newServer(t, false) }

func (s *server) addr() string { return s.ln.Addr().String() }

func (s *server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			return
		}
		s.accepted.Add(1)
		s.mu.Lock()
		s.conns[c] = struct{}{}
		s.mu.Unlock()
		if s.mute {
			continue
		}
		s.wg.Add(1)
		go s.echo(c)
	}
}

func (s *server) echo(c net.Conn) {
	defer s.wg.Done()
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		s.received.Add(int64(n))
		if n > 0 {
			if _, werr := c.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	s.ended.Add(1)
	// Answer a half-close with one: the client reads everything, then EOF.
	_ = c.(*net.TCPConn).CloseWrite()
}

func (s *server) close() {
	s.ln.Close()
	s.mu.Lock()
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
}

func newProxy(t *testing.T, targets ...string) *Proxy {
	t.Helper()
	p, err := New(Config{Targets: targets, Seed: 1})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

func dial(t *testing.T, addr string) *net.TCPConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c.(*net.TCPConn)
}

// readN reads exactly n bytes within d.
func readN(c net.Conn, n int, d time.Duration) ([]byte, error) {
	if err := c.SetReadDeadline(time.Now().Add(d)); err != nil {
		return nil, err
	}
	defer c.SetReadDeadline(time.Time{})
	buf := make([]byte, n)
	_, err := io.ReadFull(c, buf)
	return buf, err
}

// roundTrip writes msg and requires its echo within d.
func roundTrip(t *testing.T, c net.Conn, msg string, d time.Duration) {
	t.Helper()
	_, err := c.Write([]byte(msg))
	require.NoError(t, err)
	got, err := readN(c, len(msg), d)
	require.NoError(t, err)
	require.Equal(t, msg, string(got))
}

// requireSilent requires that nothing arrives on c for d (a wait for an
// absence: the only way to see one).
func requireSilent(t *testing.T, c net.Conn, d time.Duration) {
	t.Helper()
	_, err := readN(c, 1, d)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded, "bytes arrived during the fault")
}

// requireRefused requires a new connection to addr to be reset at once:
// the kernel completes the handshake, the proxy resets it, and the reset
// reaches the client during its connect (ECONNRESET from Dial) or after
// (ECONNRESET from its first read).
func requireRefused(t *testing.T, addr string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err == nil {
		defer c.Close()
		_, err = readN(c, 1, 2*time.Second)
	}
	require.ErrorIs(t, err, syscall.ECONNRESET)
}

// proxyFrame matches a stack frame of the proxy's own goroutines.
var proxyFrame = regexp.MustCompile(`faultnet\.\(\*(Proxy|conn|half)\)\.`)

// proxyGoroutines returns the stacks of live goroutines running proxy code.
func proxyGoroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var out []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if proxyFrame.MatchString(g) {
			out = append(out, g)
		}
	}
	return out
}

// requireNoLeak requires that no proxy goroutine is left. Close waited for
// them all; the grace period only covers each goroutine's return after its
// deferred Done.
func requireNoLeak(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for {
		left := proxyGoroutines()
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d proxy goroutines left:\n%s", len(left), strings.Join(left, "\n\n"))
		}
		time.Sleep(time.Millisecond)
	}
}

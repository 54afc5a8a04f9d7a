package zkensemble

import (
	"errors"
	"io"
	"net"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// relayTarget returns a free loopback address nothing listens on (yet).
func relayTarget(t *testing.T) string {
	t.Helper()
	ports, err := freePorts(1)
	require.NoError(t, err)
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(ports[0]))
}

func TestRelayRedialsUntilTheTargetListens(t *testing.T) {
	target := relayTarget(t)
	r, err := newRelay(target, 5*time.Second)
	require.NoError(t, err)
	defer r.close()

	c, err := net.Dial("tcp", r.addr())
	require.NoError(t, err)
	defer c.Close()
	_, err = c.Write([]byte("hello"))
	require.NoError(t, err)

	// While the target refuses, the client's connection stays open and
	// silent (no reset)...
	require.NoError(t, c.SetReadDeadline(time.Now().Add(200*time.Millisecond)))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	require.ErrorAs(t, err, &ne)
	require.True(t, ne.Timeout(), "%v", err)
	require.NoError(t, c.SetReadDeadline(time.Time{}))
	// ...and once it listens, the relay forwards what the client sent,
	// both ways.
	ln, err := net.Listen("tcp", target)
	require.NoError(t, err)
	defer ln.Close()
	s, err := ln.Accept()
	require.NoError(t, err)
	defer s.Close()
	buf := make([]byte, 5)
	_, err = io.ReadFull(s, buf)
	require.NoError(t, err)
	require.Equal(t, "hello", string(buf))
	_, err = s.Write([]byte("world"))
	require.NoError(t, err)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, "world", string(buf))

	// A half-close passes through; the other direction still works.
	require.NoError(t, c.(*net.TCPConn).CloseWrite())
	n, err := s.Read(buf)
	require.Zero(t, n)
	require.ErrorIs(t, err, io.EOF)
	_, err = s.Write([]byte("after"))
	require.NoError(t, err)
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, "after", string(buf))

	// A reset on one side resets the other.
	reset(s)
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Read(buf)
	require.True(t, errors.Is(err, syscall.ECONNRESET) || errors.Is(err, io.EOF), "client after the target reset: %v", err)
}

func TestRelayResetsWhenTheTargetNeverListens(t *testing.T) {
	r, err := newRelay(relayTarget(t), 200*time.Millisecond)
	require.NoError(t, err)
	defer r.close()
	c, err := net.Dial("tcp", r.addr())
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = c.Read(make([]byte, 1))
	require.ErrorIs(t, err, syscall.ECONNRESET)
}

func TestRelayCloseLeavesNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	r, err := newRelay(ln.Addr().String(), time.Second)
	require.NoError(t, err)
	c, err := net.Dial("tcp", r.addr())
	require.NoError(t, err)
	defer c.Close()
	s, err := ln.Accept()
	require.NoError(t, err)
	defer s.Close()
	// A second client whose target never answers is mid-redial at close.
	r2, err := newRelay(relayTarget(t), time.Minute)
	require.NoError(t, err)
	c2, err := net.Dial("tcp", r2.addr())
	require.NoError(t, err)
	defer c2.Close()

	done := make(chan struct{})
	go func() { r.close(); r2.close(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("relay close hangs")
	}
	r.close() // idempotent
	_, err = net.Dial("tcp", r.addr())
	require.Error(t, err, "a closed relay does not listen")
	require.NoError(t, s.SetReadDeadline(time.Now().Add(5*time.Second)))
	_, err = s.Read(make([]byte, 1))
	require.Error(t, err, "the target side ends with the relay")
	// close returned only after every relay goroutine ran its deferred
	// wg.Done, so each had untracked its connections by then: nothing is
	// left to reset, with no wait.
	for _, rr := range []*relay{r, r2} {
		rr.mu.Lock()
		n := len(rr.conns)
		rr.mu.Unlock()
		require.Zero(t, n, "connections still tracked after close")
	}
	// A goroutine that has run its deferred Done is still listed until it
	// returns, and no primitive joins a goroutine's exit; so the stacks are
	// read until they are clean, within a deadline. A goroutine that close
	// did not wait for (blocked in a copy, or redialling for a minute) stays
	// listed past it.
	var stacks string
	require.Eventually(t, func() bool {
		buf := make([]byte, 1<<20)
		stacks = string(buf[:runtime.Stack(buf, true)])
		return !strings.Contains(stacks, "zkensemble.(*relay)")
	}, 2*time.Second, 5*time.Millisecond, "relay goroutines left after close")
	require.NotContains(t, stacks, "zkensemble.(*relay)")
}

package zkx

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
)

// realWriteError returns the error a socket write gets after the peer
// reset the connection: what go-zookeeper hands a request whose write
// failed (a *net.OpError, not zk.ErrConnectionClosed).
func realWriteError(t *testing.T) error {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
	}()
	c, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer c.Close()
	srv := <-accepted
	require.NoError(t, srv.(*net.TCPConn).SetLinger(0))
	require.NoError(t, srv.Close()) // RST
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := c.Write(make([]byte, 64<<10)); err != nil {
			return err
		}
		time.Sleep(time.Millisecond)
	}
	t.Fatal("writes to a reset connection kept succeeding")
	return nil
}

func TestIsConnLoss(t *testing.T) {
	werr := realWriteError(t)
	var oe *net.OpError
	require.True(t, errors.As(werr, &oe), "a failed write is a *net.OpError: %T %v", werr, werr)
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"nil", nil, false},
		{"connection closed", zk.ErrConnectionClosed, true},
		{"no server", zk.ErrNoServer, true},
		{"session expired", zk.ErrSessionExpired, true},
		{"session moved", fmt.Errorf("wrapped: %w", zk.ErrSessionMoved), true},
		{"raw write error", werr, true},
		{"wrapped write error", fmt.Errorf("multi: %w", werr), true},
		{"timeout", &net.OpError{Op: "write", Net: "tcp", Err: errTimeout{}}, true},
		{"eof", io.EOF, true},
		{"unexpected eof", fmt.Errorf("read: %w", io.ErrUnexpectedEOF), true},
		{"closed conn", net.ErrClosed, true},
		{"reset", syscall.ECONNRESET, true},
		{"no node", zk.ErrNoNode, false},
		{"bad version", zk.ErrBadVersion, false},
		{"node exists", zk.ErrNodeExists, false},
		{"closing", zk.ErrClosing, false},
		{"no auth", zk.ErrNoAuth, false},
		{"other", errors.New("other"), false},
		{"caller's deadline", context.DeadlineExceeded, false},
		{"caller's cancel", fmt.Errorf("x: %w", context.Canceled), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, IsConnLoss(tc.err), "%v", tc.err)
		})
	}
}

type errTimeout struct{}

func (errTimeout) Error() string   { return "i/o timeout" }
func (errTimeout) Timeout() bool   { return true }
func (errTimeout) Temporary() bool { return true }

package zkx

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/roomlog/roomlog/third_party/zk"
)

// IsConnLoss reports whether err, returned by a go-zookeeper request, says
// the request's fate is unknown because the connection or session went
// away: zk.ErrConnectionClosed (in flight when the connection dropped),
// zk.ErrNoServer, zk.ErrSessionExpired, zk.ErrSessionMoved, and any
// transport error go-zookeeper hands over raw — a failed socket write
// reaches the request as a *net.OpError (broken pipe, reset, i/o timeout),
// and a request may have been sent before the write failed. Such requests
// must be resolved by reading back, never treated as definite failures.
//
// The caller's own context ending (context.Canceled,
// context.DeadlineExceeded) is not a connection loss, nor is
// zk.ErrClosing (the client is being closed).
func IsConnLoss(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // the caller's own deadline (it satisfies net.Error too)
	}
	if errors.Is(err, zk.ErrConnectionClosed) || errors.Is(err, zk.ErrNoServer) ||
		errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrSessionMoved) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, net.ErrClosed) || errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.ECONNABORTED) || errors.Is(err, os.ErrDeadlineExceeded)
}

package zkx

import (
	"errors"
	"fmt"

	"github.com/roomlog/roomlog/third_party/zk"
)

// Sentinel errors. logroom's ErrClosed, ErrBadConfig and ErrUnavailable are
// these same values, so errors.Is answers alike whichever package a caller
// names.
var (
	// ErrClosed: the Client (or an object built on it) is closed.
	ErrClosed = errors.New("roomlog: closed")
	// ErrBadConfig: a configuration field is invalid.
	ErrBadConfig = errors.New("roomlog: bad config")
	// ErrUnavailable: ZooKeeper could not be reached (connection lost, no
	// server, session expired) and the operation was not retried. It wraps
	// the ZooKeeper error.
	ErrUnavailable = errors.New("roomlog: zookeeper unavailable")
)

// Translate turns an error of a ZooKeeper request into one of this
// package's sentinels at a package edge: a closing connection becomes
// ErrClosed, a connection loss (IsConnLoss) ErrUnavailable, each with the
// ZooKeeper error still in the chain; zk.ErrNoAuth is wrapped with what
// it means (the ACL grants neither this client's digest nor its
// certificate identity); other errors are wrapped as they are. what
// names the operation. Translate(what, nil) is nil.
func Translate(what string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zk.ErrClosing):
		return fmt.Errorf("%s: %w (%w)", what, ErrClosed, err)
	case IsConnLoss(err):
		return fmt.Errorf("%s: %w: %w", what, ErrUnavailable, err)
	case errors.Is(err, zk.ErrNoAuth):
		return fmt.Errorf("%s: %w (permission denied by the znode's ACL: neither this client's digest credentials nor its TLS certificate identity are granted)", what, err)
	default:
		return fmt.Errorf("%s: %w", what, err)
	}
}

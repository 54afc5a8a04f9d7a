package lock

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/zkx"
)

// Sentinel errors, wrapped by the errors this package returns (check with
// errors.Is). ZooKeeper errors stay visible in the chain.
var (
	// ErrBadConfig: a Config field is invalid. Nothing was sent.
	ErrBadConfig = errors.New("lock: bad config")
	// ErrLockLost: the lease ended other than by Unlock — its node was
	// deleted or written by someone else, its session expired, or the client stayed disconnected
	// longer than SuspendGrace — so the holder may no longer be the only
	// one. A guarded write that gets it applied nothing.
	ErrLockLost = errors.New("lock: lock lost")
	// ErrNotLocked: Unlock without a lease, or a guarded write on a lease
	// that was unlocked.
	ErrNotLocked = errors.New("lock: not locked")
	// ErrClosed: the Mutex is closed.
	ErrClosed = errors.New("lock: closed")
)

// Config configures a Mutex.
type Config struct {
	// Client is the ZooKeeper client (required). The Mutex shares its
	// session and creates nodes with its ACL.
	Client *zkx.Client
	// Dir is the lock's directory (required): contenders are its
	// children. Missing components are created (persistent).
	Dir string
	// ID names the holder in its node's data, for diagnostics (Holder);
	// optional, a valid znode name when set.
	ID string
	// SuspendGrace is how long a lease survives a disconnection before it
	// ends with ErrLockLost (default 0: at the first disconnection, since a
	// disconnected holder cannot know it still holds the lock). The node
	// stays until Unlock or the session's end either way. Keep it below a
	// third of the session timeout (Validate refuses it otherwise; see the
	// package doc).
	SuspendGrace time.Duration
	// Logger receives the mutex's logs (nil: discard).
	Logger *slog.Logger
}

// Validate reports every invalid field at once.
func (c Config) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, fmt.Errorf("%w: Client is nil", ErrBadConfig))
	}
	if err := zkr.ValidDir(c.Dir); err != nil {
		errs = append(errs, fmt.Errorf("%w: Dir %q: %v", ErrBadConfig, c.Dir, err))
	}
	if c.ID != "" {
		if err := zkx.ValidName(c.ID); err != nil {
			errs = append(errs, fmt.Errorf("%w: ID %q: %v", ErrBadConfig, c.ID, err))
		}
	}
	if c.SuspendGrace < 0 {
		errs = append(errs, fmt.Errorf("%w: SuspendGrace %v < 0", ErrBadConfig, c.SuspendGrace))
	}
	if err := zkr.CheckGrace(c.Client, c.SuspendGrace); err != nil {
		errs = append(errs, fmt.Errorf("%w: %v", ErrBadConfig, err))
	}
	return errors.Join(errs...)
}

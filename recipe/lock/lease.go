package lock

import (
	"context"
	"errors"
	"fmt"
	"path"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/zkx"
)

// Lease is one acquisition of the lock: it lasts from Lock until Unlock,
// or until the lock is lost (Done closes, Err wraps ErrLockLost).
type Lease struct {
	m    *Mutex
	hold *zkr.Hold
}

// Token is the fencing token of this lease: the czxid of its node. It is
// larger than the token of every earlier lease of the lock: leases are
// granted in node creation order, and zxids grow across the ensemble.
// Hand it to any other system the holder writes to, which must refuse a
// token lower than the highest it has seen.
func (l *Lease) Token() int64 { return l.hold.Token() }

// Path returns the lease's node path.
func (l *Lease) Path() string { return l.hold.Path() }

// Done is closed when the lease ends: Unlock, or the lock is lost (node
// deleted or written by someone else, session expired, disconnected
// beyond Config.SuspendGrace).
func (l *Lease) Done() <-chan struct{} { return l.hold.Done() }

// Err returns nil while the lease lasts; then ErrNotLocked after Unlock,
// or ErrLockLost wrapping why it was lost.
func (l *Lease) Err() error { return leaseErr(l.hold.Err()) }

func leaseErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zkr.ErrHoldReleased):
		return ErrNotLocked
	default:
		return fmt.Errorf("%w: %w", ErrLockLost, err)
	}
}

// Active reports whether the lease lasts and the client is connected in
// the session that holds it: the only time the holder may act as the
// holder. It is advice; Multi is the check that cannot be wrong.
func (l *Lease) Active() bool { return l.hold.Active() }

// Guard returns ops preceded by a check that the lease's node still exists
// (zk.CheckVersionRequest at version 0: contender nodes are never
// written). Passed to zk.Conn.Multi, they commit only while this lease
// holds the lock; prefer Multi, which also translates the failure.
func (l *Lease) Guard(ops ...any) []any { return zkr.Guard(l.Path(), 0, ops...) }

// Multi runs ops (zk.CreateRequest, SetDataRequest, DeleteRequest,
// CheckVersionRequest) atomically, only if this lease still holds the
// lock: ZooKeeper checks the lease's node in the same transaction, so a
// holder that was paused while its session expired and another took the
// lock cannot write. It returns the responses of ops. When the lease
// ended or its node is gone, the error wraps ErrLockLost (or ErrNotLocked
// after Unlock) and nothing was written. On a connection loss the outcome
// is unknown (zkx.IsConnLoss): read back before retrying.
func (l *Lease) Multi(ctx context.Context, ops ...any) ([]zk.MultiResponse, error) {
	res, err := l.hold.Multi(ctx, ops...)
	switch {
	case errors.Is(err, zkr.ErrHoldEnded):
		return nil, fmt.Errorf("lock: guarded write on %s not sent: %w", l.Path(), l.Err())
	case errors.Is(err, zkr.ErrGuardFailed):
		return nil, fmt.Errorf("lock: guarded write refused by ZooKeeper, nothing written: %w: %w", ErrLockLost, err)
	}
	if err != nil {
		return nil, fmt.Errorf("lock: guarded write on %s: %w", l.Path(), err)
	}
	return res, nil
}

// Unlock releases the lease: it ends it (Done closes), deletes its node and
// lets the next Lock of this Mutex proceed. It returns ErrNotLocked if the
// lease was already unlocked, and ErrLockLost if the lease had been lost
// before (the lock is released all the same: the critical section may not
// have been exclusive). When ctx ends before the delete is confirmed, the
// node is deleted in the background (or goes with the session).
func (l *Lease) Unlock(ctx context.Context) error {
	m := l.m
	m.mu.Lock()
	if m.lease != l {
		m.mu.Unlock()
		return fmt.Errorf("lock: unlock %s: %w", l.Path(), ErrNotLocked)
	}
	m.lease = nil
	m.mu.Unlock()
	defer func() { <-m.sem }()
	lost := l.hold.Err()
	l.hold.End(zkr.ErrHoldReleased)
	name := path.Base(l.Path())
	var errs []error
	if lost != nil {
		errs = append(errs, leaseErr(lost))
	}
	gone, err := m.deleteLeaseNode(ctx, l.Path())
	switch {
	case err != nil:
		m.addStray(name)
		errs = append(errs, err)
	case gone && lost == nil:
		errs = append(errs, fmt.Errorf("%w: node was gone at unlock", ErrLockLost))
	}
	delete(m.stats, name)
	if m.isDirty() {
		if err := m.sweep(ctx); err != nil {
			errs = append(errs, err)
		}
	}
	m.log.Debug("lock: released", "node", l.Path(), "token", l.Token())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lock: unlock %s: %w", l.Path(), err)
	}
	return nil
}

// deleteLeaseNode deletes the lease's node at version 0. gone reports that
// it was missing at the first answer (deleted, or its session expired).
func (m *Mutex) deleteLeaseNode(ctx context.Context, p string) (gone bool, err error) {
	var bo zkx.Backoff
	for attempt := 0; ; attempt++ {
		err := zkr.Do0(ctx, m.sess, func() error { return m.sess.Conn().Delete(p, 0) }, nil)
		switch {
		case err == nil:
			return false, nil
		case errors.Is(err, zk.ErrNoNode):
			// After a connection loss, our own earlier delete may have
			// landed.
			return attempt == 0, nil
		case errors.Is(err, zk.ErrBadVersion):
			return false, fmt.Errorf("delete %s: %w (someone wrote to the lock node)", p, err)
		case !zkx.IsConnLoss(err):
			return false, fmt.Errorf("delete %s: %w", p, err)
		}
		if werr := bo.Wait(ctx); werr != nil {
			return false, fmt.Errorf("delete %s: %w (last error: %w)", p, werr, err)
		}
	}
}

package store

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// ErrDiskStalled: a write, sync or file operation of the store's disk did
// not complete within Options.DiskStallTimeout. The store is failed for
// good: Apply, Sync and Checkpoint return it at once, Close returns it
// without waiting for the operations stuck in the kernel (the close
// finishes in the background if the disk ever comes back), and the process
// should stop using the store. Reads still run (a stalled device often
// serves them from the page cache).
var ErrDiskStalled = errors.New("store: disk stalled")

// Disk stall bounds.
const (
	DefaultDiskStallTimeout = 20 * time.Second
	minDiskStallTimeout     = 100 * time.Millisecond
	maxDiskStallTimeout     = time.Hour
	// diskSlowLog is the longest an operation runs before it is logged as
	// slow (Pebble's own default threshold).
	diskSlowLog = 5 * time.Second
)

// stallWatch receives Pebble's disk-slowness reports for one store and
// turns the first operation older than the timeout into a stall.
//
// Pebble's health-checking file system (vfs.WithDiskHealthChecks) checks
// the operations in progress every 2 s and reports each one older than the
// slow threshold, again on every check while it lasts: a stall is declared
// at most about 2 s after an operation passed the timeout.
type stallWatch struct {
	timeout time.Duration
	log     *slog.Logger
	onStall func(error)

	once sync.Once
	err  atomic.Pointer[error]
	ch   chan struct{} // closed when the stall is declared

	lastSlowLog atomic.Int64 // unix nanos of the last "disk slow" log line
}

func newStallWatch(timeout time.Duration, log *slog.Logger, onStall func(error)) *stallWatch {
	return &stallWatch{timeout: timeout, log: log, onStall: onStall, ch: make(chan struct{})}
}

// wrap returns fs with Pebble's disk health checks reporting to w, and the
// closer that stops its monitoring goroutine.
func (w *stallWatch) wrap(fs vfs.FS) (vfs.FS, io.Closer) {
	return vfs.WithDiskHealthChecks(fs, min(diskSlowLog, w.timeout/2), nil, w.onDiskSlow)
}

// onDiskSlow runs on Pebble's monitoring goroutine, which must not block or
// do I/O: logging and the callback run on goroutines of their own.
func (w *stallWatch) onDiskSlow(info vfs.DiskSlowInfo) {
	if info.Duration < w.timeout {
		now := time.Now().UnixNano()
		if last := w.lastSlowLog.Load(); now-last >= int64(time.Second) && w.lastSlowLog.CompareAndSwap(last, now) {
			go w.log.Warn("store: disk slow", "op", info.OpType.String(), "path", info.Path, "for", info.Duration.Round(time.Millisecond))
		}
		return
	}
	w.declare(info.OpType.String(), info.Path, info.Duration)
}

// declare fails the store (once): op on path has run for d.
func (w *stallWatch) declare(op, path string, d time.Duration) {
	w.once.Do(func() {
		err := fmt.Errorf("%w: %s on %s has not completed after %v (DiskStallTimeout %v)",
			ErrDiskStalled, op, path, d.Round(time.Millisecond), w.timeout)
		w.err.Store(&err)
		close(w.ch)
		go func() {
			w.log.Error("store: disk stalled; the store is failed", "err", err)
			if w.onStall != nil {
				w.onStall(err)
			}
		}()
	})
}

// stalled returns the stall error, or nil.
func (w *stallWatch) stalled() error {
	if p := w.err.Load(); p != nil {
		return *p
	}
	return nil
}

// DiskOp bounds a disk operation that the caller runs on the store's disk
// outside the store (package checkpoint's reads, writes and syncs of a
// checkpoint) like the store's own: if end is not called within
// DiskStallTimeout, the store fails with ErrDiskStalled (see "Disk stalls"
// in the package doc). op and path name the operation in that error. Call
// end when the operation returns.
func (s *Store) DiskOp(op, path string) (end func()) {
	d := s.stall.timeout
	t := time.AfterFunc(d, func() { s.stall.declare(op, path, d) })
	return func() { t.Stop() }
}

package store

import (
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// gatedScheduler is Pebble's compaction scheduler with one addition: it
// grants nothing until release is called. store.Open releases it once
// pebble.Open has returned.
//
// Why: pebble.Open (v2.1.7) registers the scheduler, may start a
// compaction, and then waits for every running compaction to finish before
// it scans for obsolete files (fixed upstream by cockroachdb/pebble#5431,
// not in a v2 release). A store restored from a checkpoint of a busy
// primary holds tens of L0 files, and Open then spent 0.3–0.9 s rewriting
// them before it returned: most of a bootstrap's swap. Held back, the same
// compaction runs after Open, while the standby already catches up.
//
// Otherwise it behaves as pebble's ConcurrencyLimitScheduler: at most
// GetAllowedWithoutPermission compactions run; a compaction that ends, a
// flush (UpdateGetAllowedWithoutPermission) and a 100 ms tick offer the
// freed slots to a waiting compaction, from a goroutine (the DB calls the
// scheduler holding its own mutex, which Schedule takes again).
type gatedScheduler struct {
	mu       sync.Mutex
	db       pebble.DBForCompaction
	held     bool // until release; guarded by mu
	running  int  // granted compactions not yet Done; guarded by mu
	stopped  bool // guarded by mu
	poke     chan struct{}
	stopOnce sync.Once
	quit     chan struct{}
	done     chan struct{}
}

var _ pebble.CompactionScheduler = (*gatedScheduler)(nil)

func newGatedScheduler() *gatedScheduler {
	s := &gatedScheduler{
		held: true,
		poke: make(chan struct{}, 1),
		quit: make(chan struct{}),
		done: make(chan struct{}),
	}
	return s
}

// Register starts the granting goroutine (pebble calls it once in Open).
func (s *gatedScheduler) Register(_ int, db pebble.DBForCompaction) {
	s.mu.Lock()
	s.db = db
	s.mu.Unlock()
	go s.granter()
}

// Unregister stops granting and waits for the granting goroutine, and so
// for a grant loop in progress, to end (pebble calls it in Close).
func (s *gatedScheduler) Unregister() { s.stop() }

// stop is Unregister, also for a pebble.Open that failed after Register.
func (s *gatedScheduler) stop() {
	s.stopOnce.Do(func() {
		close(s.quit)
		s.mu.Lock()
		registered := s.db != nil
		s.stopped = true
		s.mu.Unlock()
		if registered {
			<-s.done
		}
	})
}

// release lets compactions run from now on and offers them the free slots.
func (s *gatedScheduler) release() {
	s.mu.Lock()
	s.held = false
	s.mu.Unlock()
	s.wake()
}

func (s *gatedScheduler) wake() {
	select {
	case s.poke <- struct{}{}:
	default:
	}
}

// TrySchedule is called by the DB, holding its mutex, when it wants to run
// a compaction. A refusal leaves the compaction waiting for a grant.
func (s *gatedScheduler) TrySchedule() (bool, pebble.CompactionGrantHandle) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.held || s.stopped || s.db == nil {
		return false, nil
	}
	if s.db.GetAllowedWithoutPermission() > s.running {
		s.running++
		return true, grantHandle{s}
	}
	return false, nil
}

// UpdateGetAllowedWithoutPermission is called after a flush, which can
// raise the allowance.
func (s *gatedScheduler) UpdateGetAllowedWithoutPermission() { s.wake() }

func (s *gatedScheduler) granter() {
	defer close(s.done)
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.quit:
			return
		case <-t.C:
		case <-s.poke:
		}
		s.grant()
	}
}

// grant offers free slots to waiting compactions, without holding mu while
// the DB schedules (Schedule takes the DB's mutex). Only the granting
// goroutine calls it, so no two grant loops overlap.
func (s *gatedScheduler) grant() {
	s.mu.Lock()
	if s.held || s.stopped {
		s.mu.Unlock()
		return
	}
	free := s.db.GetAllowedWithoutPermission() - s.running
	if free <= 0 {
		s.mu.Unlock()
		return
	}
	s.mu.Unlock()
	for ; free > 0; free-- {
		if waiting, _ := s.db.GetWaitingCompaction(); !waiting {
			break
		}
		s.mu.Lock()
		s.running++ // before Schedule: the compaction may finish (Done) at once
		s.mu.Unlock()
		if !s.db.Schedule(grantHandle{s}) {
			s.mu.Lock()
			s.running--
			s.mu.Unlock()
			break
		}
	}
}

// grantHandle is one granted compaction; Done frees its slot.
type grantHandle struct{ s *gatedScheduler }

func (h grantHandle) Started()                                          {}
func (h grantHandle) MeasureCPU(pebble.CompactionGoroutineKind)         {}
func (h grantHandle) CumulativeStats(pebble.CompactionGrantHandleStats) {}
func (h grantHandle) Done() {
	h.s.mu.Lock()
	h.s.running--
	h.s.mu.Unlock()
	h.s.wake()
}

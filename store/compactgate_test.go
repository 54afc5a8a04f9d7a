package store

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"
)

const l0DebtFiles = 40

// makeL0Debt builds a store whose LSM holds l0DebtFiles overlapping L0
// sstables (as a checkpoint of a busy primary does): each flush carries
// the applied position, so every file spans the internal keys and its
// slice of the data. It returns the applied index and the L0 file count.
func makeL0Debt(t *testing.T, dir string) (index uint64, l0 int64) {
	t.Helper()
	s, err := Open(dir, nil)
	require.NoError(t, err)
	require.NoError(t, s.Close())
	// No compaction, and no write stall over the L0 files piling up.
	db, err := pebble.Open(dir, &pebble.Options{DisableAutomaticCompactions: true, L0StopWritesThreshold: 1000})
	require.NoError(t, err)
	val := make([]byte, 4096)
	idx := uint64(0)
	for f := 0; f < l0DebtFiles; f++ {
		b := db.NewBatch()
		for i := 0; i < 64; i++ {
			idx++
			for j := range val {
				val[j] = byte(splitmix64(idx*4096 + uint64(j)))
			}
			require.NoError(t, b.Set(appendUserKey(nil, []byte(fmt.Sprintf("file/%09d", idx))), val, nil))
		}
		require.NoError(t, b.Set(keyApplied, encodeApplied(position{index: idx, epoch: 1}), nil))
		require.NoError(t, b.Commit(pebble.Sync))
		if f < l0DebtFiles-1 {
			require.NoError(t, db.Flush())
		}
	}
	// The last batch stays in the WAL only (Close does not flush): the next
	// Open replays and flushes it, and that flush schedules a compaction
	// before Open scans for obsolete files, as after a restore.
	l0 = db.Metrics().Levels[0].TablesCount
	require.GreaterOrEqual(t, l0, int64(l0DebtFiles-1))
	require.NoError(t, db.Close())
	return idx, l0
}

// TestCompactionsHeldUntilOpenReturns: with L0 over its compaction
// threshold, pebble.Open (v2.1.7) starts an L0 compaction and waits for it
// before returning. The store's scheduler grants none until released, so
// Open returns with the LSM as it was; released, the compactions run.
func TestCompactionsHeldUntilOpenReturns(t *testing.T) {
	dir := t.TempDir()
	_, l0 := makeL0Debt(t, dir)

	sched := newGatedScheduler()
	opts := &pebble.Options{}
	opts.Experimental.CompactionScheduler = sched
	db, err := pebble.Open(dir, opts)
	require.NoError(t, err)
	defer func() { require.NoError(t, db.Close()) }()
	m := db.Metrics()
	require.Zero(t, m.Compact.Count, "a compaction ran inside Open")
	require.GreaterOrEqual(t, m.Levels[0].TablesCount, l0)

	// Still held: ticks pass and nothing is granted.
	time.Sleep(300 * time.Millisecond)
	require.Zero(t, db.Metrics().Compact.Count, "a compaction ran while the scheduler was held")

	sched.release()
	require.Eventually(t, func() bool {
		m := db.Metrics()
		return m.Compact.Count > 0 && m.Levels[0].TablesCount < l0DebtFiles/2
	}, 30*time.Second, 20*time.Millisecond, "compactions did not run after release")
}

// TestStoreOpenCompactsAfterward: store.Open on a store with L0 debt
// returns its position, and the LSM is compacted in the background
// afterwards (the scheduler was released); Close stops the scheduler.
func TestStoreOpenCompactsAfterward(t *testing.T) {
	dir := t.TempDir()
	idx, _ := makeL0Debt(t, dir)
	s, err := Open(dir, nil)
	require.NoError(t, err)
	require.Equal(t, idx, s.AppliedIndex())
	require.Eventually(t, func() bool {
		return s.db.Metrics().Levels[0].TablesCount < l0DebtFiles/2
	}, 30*time.Second, 20*time.Millisecond, "no compaction after Open")
	v, err := s.Get([]byte("file/000000001"))
	require.NoError(t, err)
	require.Len(t, v, 4096)
	// Apply goes on over the compacted LSM.
	_, err = s.Apply([]Entry{{Index: idx + 1, Epoch: 1, Data: mustOps(t, Op{Kind: OpSet, Key: []byte("k"), Value: []byte("v")})}})
	require.NoError(t, err)
	require.NoError(t, s.Close())
}

// TestStoreOpenHoldsCompactions: store.Open wires the gate in: when
// pebble.Open returns inside store.Open, no compaction has run, and the
// replayed flush and the L0 debt are still there.
func TestStoreOpenHoldsCompactions(t *testing.T) {
	dir := t.TempDir()
	_, l0 := makeL0Debt(t, dir)
	var compactions, files int64 = -1, -1
	testHookPebbleOpened = func(db *pebble.DB) {
		m := db.Metrics()
		compactions, files = m.Compact.Count, m.Levels[0].TablesCount
	}
	defer func() { testHookPebbleOpened = nil }()
	s, err := Open(dir, nil)
	require.NoError(t, err)
	defer s.Close()
	require.Zero(t, compactions, "a compaction ran inside Open")
	require.GreaterOrEqual(t, files, l0)
}

// TestGatedSchedulerStopWithoutRegister: a pebble.Open that fails before
// registering the scheduler leaves nothing running.
func TestGatedSchedulerStopWithoutRegister(t *testing.T) {
	sched := newGatedScheduler()
	opts := &pebble.Options{ReadOnly: true}
	opts.Experimental.CompactionScheduler = sched
	_, err := pebble.Open(filepath.Join(t.TempDir(), "missing"), opts)
	require.Error(t, err)
	stopWithin(t, sched)
}

// TestGatedSchedulerStopAfterRegister: stop ends the granting goroutine of
// a registered scheduler (pebble.Open failing after Register never calls
// Unregister), and is idempotent.
func TestGatedSchedulerStopAfterRegister(t *testing.T) {
	sched := newGatedScheduler()
	sched.Register(1, fakeDB{})
	sched.release()
	stopWithin(t, sched)
	ok, _ := sched.TrySchedule()
	require.False(t, ok, "granted after stop")
}

func stopWithin(t *testing.T, sched *gatedScheduler) {
	t.Helper()
	done := make(chan struct{})
	go func() { sched.stop(); sched.stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("stop hung")
	}
}

// fakeDB always has a compaction waiting and refuses every grant.
type fakeDB struct{}

func (fakeDB) GetAllowedWithoutPermission() int { return 1 }
func (fakeDB) GetWaitingCompaction() (bool, pebble.WaitingCompaction) {
	return true, pebble.WaitingCompaction{}
}
func (fakeDB) Schedule(pebble.CompactionGrantHandle) bool { return false }

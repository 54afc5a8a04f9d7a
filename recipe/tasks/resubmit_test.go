package tasks_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/tasks"
)

// TestResubmitAfterResultDeleted: an assigner round reads the assignments
// (task x is at w1), then, before it reads the waiting tasks, x finishes,
// its result is deleted and x is submitted again (same data). The new
// task node is not a duplicate of the assignment the round read — that
// one is gone — so it must not be deleted: x runs again.
func TestResubmitAfterResultDeleted(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	l := newLedger()
	var first atomic.Bool
	w1 := startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, "w1", l, workerOpts{
		hold: func(a tasks.Assignment) bool { return a.ID == "x" && first.CompareAndSwap(false, true) },
	})
	a, err := tasks.NewAssigner(tasks.AssignerConfig{Client: admin, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock"), Logger: recipetest.Logger(t)})
	require.NoError(t, err)
	var held atomic.Pointer[tasks.Assignment]
	hookErr := make(chan error, 1)
	tasks.SetAfterReadAssignmentsForTest(a, func() {
		as := held.Swap(nil)
		if as == nil {
			return
		}
		// The round saw x assigned; x now finishes, its result is
		// deleted and it is submitted again.
		err := w1.w.Report(ctx, *as, true, []byte("done-x"))
		if err == nil {
			err = tasks.DeleteResult(ctx, admin, dir, "x")
		}
		if err == nil {
			err = tasks.Submit(ctx, admin, dir, "x", []byte("data-x"))
		}
		hookErr <- err
	})
	ra := startAssigner(t, a)
	require.NoError(t, tasks.Submit(ctx, admin, dir, "x", []byte("data-x")))
	var as tasks.Assignment
	select {
	case as = <-w1.held:
	case <-ctx.Done():
		t.Fatal("x was not delivered")
	}
	held.Store(&as)
	require.NoError(t, tasks.Submit(ctx, admin, dir, "kick", []byte("k"))) // a round
	select {
	case err := <-hookErr:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("no round read the assignments")
	}
	wctx := recipetest.Ctx(t, 15*time.Second)
	r, err := tasks.WaitResult(wctx, admin, dir, "x")
	require.NoError(t, err, "the second submission of x runs (tasks: %v)", children(t, admin, dir+"/tasks"))
	require.Equal(t, "done-x", string(r.Result))
	require.Equal(t, 0, ra.a.Stats().Duplicates)
	l.mu.Lock()
	require.Len(t, l.delivered["x"][1], 2, "x delivered twice, once per submission")
	l.mu.Unlock()
	l.check(t)
}

package tasks_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/tasks"
)

// TestManyTasks is the seed's scenario: clients submit, the master
// assigns, workers execute and report, clients wait for the results.
// 200 tasks, three workers: every task has one result, of its first
// attempt, reported once; a second Submit of the same task is nil, of
// other data ErrConflict; results are deleted once read.
func TestManyTasks(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	l := newLedger()
	for _, id := range []string{"w1", "w2", "w3"} {
		startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, id, l, workerOpts{})
	}
	ra := runAssigner(t, tasks.AssignerConfig{Client: recipetest.Dial(t, nil, 4*time.Second), Dir: dir,
		Fence: leaseFence(t, admin, dir+"-lock")})
	ids := submitAll(t, admin, dir, 0, 200)
	res := waitResults(t, admin, dir, ids, 40*time.Second)
	perWorker := map[string]int{}
	for _, r := range res {
		require.Equal(t, 1, r.Attempt)
		perWorker[r.Worker]++
	}
	require.Len(t, perWorker, 3, "every worker got work: %v", perWorker)
	l.check(t)
	require.Len(t, l.accepted, 200)
	require.Equal(t, 200, ra.a.Stats().Assigned)

	// Idempotent Submit, finished task: nil; other data: ErrConflict.
	require.NoError(t, tasks.Submit(ctx, admin, dir, ids[0], []byte("data-0")))
	require.ErrorIs(t, tasks.Submit(ctx, admin, dir, ids[0], []byte("other")), tasks.ErrConflict)
	require.Empty(t, children(t, admin, dir+"/tasks"))
	require.Empty(t, openAssignments(t, admin, dir))

	for _, id := range ids {
		require.NoError(t, tasks.DeleteResult(ctx, admin, dir, id))
	}
	require.NoError(t, tasks.DeleteResult(ctx, admin, dir, ids[0]), "deleting a deleted result is nil")
	_, ok, err := tasks.ReadResult(ctx, admin, dir, ids[0])
	require.NoError(t, err)
	require.False(t, ok)
	require.Empty(t, children(t, admin, dir+"/results"))
	require.Empty(t, ra.a.Foreign())
}

// TestResultTTL: a result nobody deletes is deleted by the assigner
// ResultTTL after it first saw it; once everything is closed no goroutine
// of the recipe is left.
func TestResultTTL(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	l := newLedger()
	tw := startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, "w1", l, workerOpts{})
	ra := runAssigner(t, tasks.AssignerConfig{Client: admin, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock"), ResultTTL: 700 * time.Millisecond})
	require.NoError(t, tasks.Submit(ctx, admin, dir, "x", []byte("d")))
	start := time.Now()
	_, err := tasks.WaitResult(ctx, admin, dir, "x")
	require.NoError(t, err)
	recipetest.Eventually(t, 10*time.Second, "the result expires", func() bool {
		_, ok, err := tasks.ReadResult(ctx, admin, dir, "x")
		require.NoError(t, err)
		return !ok
	})
	require.GreaterOrEqual(t, time.Since(start), 700*time.Millisecond)
	// The assigner counts the expiry once its delete returned, which may
	// be just after the test saw the result gone (it failed once in CI).
	recipetest.Eventually(t, 5*time.Second, "the expiry counted", func() bool { return ra.a.Stats().Expired == 1 })
	require.Equal(t, 1, ra.a.Stats().Expired)
	// The id is free again: a new submission runs again.
	require.NoError(t, tasks.Submit(ctx, admin, dir, "x", []byte("other")))
	r, err := tasks.WaitResult(ctx, admin, dir, "x")
	require.NoError(t, err)
	require.Equal(t, 1, r.Attempt)

	ra.cancel()
	require.ErrorIs(t, ra.wait(t, 10*time.Second), context.Canceled)
	tw.stop()
	recipetest.NoLeaks(t, pkgTasks)
}

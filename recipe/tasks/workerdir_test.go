package tasks_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/tasks"
)

// TestWorkerDirDeleted: an operator deletes the empty directory of a live
// worker; the worker creates it again, with a watch: the next task is
// delivered to it.
func TestWorkerDirDeleted(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	l := newLedger()
	startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, "w1", l, workerOpts{})
	runAssigner(t, tasks.AssignerConfig{Client: admin, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock")})
	require.NoError(t, tasks.Submit(ctx, admin, dir, "a", []byte("a")))
	waitResults(t, admin, dir, []string{"a"}, 15*time.Second)

	_, st, err := admin.Conn().Exists(dir + "/assign/w1")
	require.NoError(t, err)
	require.NoError(t, admin.Conn().Delete(dir+"/assign/w1", st.Version))
	recipetest.Eventually(t, 10*time.Second, "w1 creates its directory again", func() bool {
		ok, _, err := admin.Conn().Exists(dir + "/assign/w1")
		require.NoError(t, err)
		return ok
	})
	require.NoError(t, tasks.Submit(ctx, admin, dir, "b", []byte("b")))
	waitResults(t, admin, dir, []string{"b"}, 15*time.Second)
	l.check(t)
}

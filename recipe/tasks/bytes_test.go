package tasks_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/tasks"
	"github.com/roomlog/roomlog/zkx"
)

// dirBytes is what <p>'s children hold in ZooKeeper: names and data.
func dirBytes(t *testing.T, c *zkx.Client, p string) int64 {
	t.Helper()
	var n int64
	for _, name := range children(t, c, p) {
		_, st, err := c.Conn().Exists(p + "/" + name)
		require.NoError(t, err)
		n += int64(len(name)) + int64(st.DataLength)
	}
	return n
}

// submitUntilFull submits tasks of data (ids prefix-0, prefix-1, ...)
// until Submit refuses, and returns how many it accepted and the refusal.
func submitUntilFull(t *testing.T, c *zkx.Client, dir, prefix string, data []byte, most int) (int, error) {
	t.Helper()
	ctx := recipetest.Ctx(t, 30*time.Second)
	for i := 0; i < most; i++ {
		if err := tasks.Submit(ctx, c, dir, prefix+strconv.Itoa(i), data); err != nil {
			return i, err
		}
	}
	return most, nil
}

// published waits until the assigner published a byte total in
// <dir>/<sub>'s data.
func published(t *testing.T, c *zkx.Client, p string) {
	t.Helper()
	recipetest.Eventually(t, 10*time.Second, "a byte total published in "+p, func() bool {
		b, _, err := c.Conn().Get(p)
		require.NoError(t, err)
		return len(b) > 0
	})
}

// TestSubmitByteBound (issue 40, finding 12): the caps of <dir>/tasks
// and <dir>/results count bytes, not only nodes. With no worker, tasks
// of MaxDataBytes pile up in <dir>/tasks until Submit refuses with
// ErrFull naming the bytes and the bound, with ZooKeeper holding no
// more than the bound; a directory with no total published yet counts
// nodes as before. Once a worker drains the tasks the total follows and
// Submit accepts again. Results of MaxResultBytes nobody deletes fill
// <dir>/results the same way: Submit refuses, the assigner holds the
// waiting tasks, and deleting the results lets both go on.
func TestSubmitByteBound(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	big := bytes.Repeat([]byte{'d'}, tasks.MaxDataBytes)
	const waitingBound = 16 * tasks.MaxDataBytes
	const finishedBound = 4 * tasks.MaxResultBytes

	// No total published yet (no assigner ever ran): nodes are counted,
	// as in directories of earlier releases.
	n, err := submitUntilFull(t, admin, dir, "early-", big, 20)
	require.NoError(t, err)
	require.Equal(t, 20, n)
	for i := 0; i < 20; i++ {
		p := dir + "/tasks/t-early-" + strconv.Itoa(i)
		require.NoError(t, admin.Conn().Delete(p, -1))
	}

	ra := runAssigner(t, tasks.AssignerConfig{Client: admin, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock"),
		MaxWaitingBytes: waitingBound, MaxFinishedBytes: finishedBound, MaxOpenBytes: tasks.MaxDataBytes})
	published(t, admin, dir+"/tasks")
	n, err = submitUntilFull(t, admin, dir, "a-", big, 40)
	require.ErrorIs(t, err, tasks.ErrFull, "after %d tasks of %d bytes", n, len(big))
	require.ErrorContains(t, err, dir+"/tasks")
	require.ErrorContains(t, err, strconv.Itoa(waitingBound))
	require.GreaterOrEqual(t, n, 12, "refused far below the bound")
	require.LessOrEqual(t, dirBytes(t, admin, dir+"/tasks"), int64(waitingBound))

	// A worker reporting results of MaxResultBytes, kept (nobody
	// deletes them): the tasks drain, the results fill up.
	w, err := tasks.JoinWorker(ctx, recipetest.Dial(t, nil, 4*time.Second), dir, "w1", tasks.WorkerOptions{Logger: recipetest.Logger(t)})
	require.NoError(t, err)
	wctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		for a := range w.Assignments() {
			if err := w.Report(wctx, a, true, bytes.Repeat([]byte{'r'}, tasks.MaxResultBytes)); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("report %s: %v", a.ID, err)
			}
		}
	}()
	t.Cleanup(func() { cancel(); _ = w.Close(); <-done })

	recipetest.Eventually(t, 20*time.Second, "results fill up", func() bool {
		return dirBytes(t, admin, dir+"/results") >= finishedBound
	})
	err = tasks.Submit(ctx, admin, dir, "b-0", []byte("small"))
	require.ErrorIs(t, err, tasks.ErrFull)
	require.ErrorContains(t, err, dir+"/results")
	require.ErrorContains(t, err, strconv.Itoa(finishedBound))
	// The assigner holds the waiting tasks while the results are full
	// (one task at a time per worker here: MaxOpenBytes): results stay
	// within the bound plus what was assigned already.
	recipetest.Eventually(t, 10*time.Second, "what was assigned finished", func() bool {
		return len(openAssignments(t, admin, dir)) == 0
	})
	require.LessOrEqual(t, dirBytes(t, admin, dir+"/results"), int64(finishedBound+2*tasks.MaxResultBytes+4096))
	require.NotEmpty(t, children(t, admin, dir+"/tasks"), "tasks wait while the results are full")

	// Deleting results makes room: everything runs, and Submit accepts.
	recipetest.Eventually(t, 30*time.Second, "every task finishes once results are deleted", func() bool {
		for _, name := range children(t, admin, dir+"/results") {
			require.NoError(t, tasks.DeleteResult(ctx, admin, dir, name[len("t-"):]))
		}
		return len(children(t, admin, dir+"/tasks")) == 0 && len(openAssignments(t, admin, dir)) == 0 &&
			len(children(t, admin, dir+"/results")) == 0
	})
	recipetest.Eventually(t, 10*time.Second, "Submit accepts again", func() bool {
		err := tasks.Submit(ctx, admin, dir, "c-0", big)
		if err != nil {
			require.ErrorIs(t, err, tasks.ErrFull)
		}
		return err == nil
	})
	require.GreaterOrEqual(t, ra.a.Stats().Assigned, n, fmt.Sprintf("stats %+v", ra.a.Stats()))
}

package tasks_test

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/tasks"
	"github.com/roomlog/roomlog/zkx"
)

// idleRounds is how many rounds an assigner may run in a second when
// nothing changes (a session event, a retry): a spinning one runs
// thousands.
const idleRounds = 3

// roundsIn returns how many rounds a runs within d: a measuring window,
// not a synchronisation.
func roundsIn(t *testing.T, a *tasks.Assigner, d time.Duration) int {
	t.Helper()
	before := a.Stats().Rounds
	time.Sleep(d)
	return a.Stats().Rounds - before
}

// foreignPaths lists a's foreign nodes, relative to dir.
func foreignPaths(a *tasks.Assigner, dir string) []string {
	var out []string
	for _, f := range a.Foreign() {
		out = append(out, strings.TrimPrefix(f.Path, dir))
	}
	return out
}

func create(t *testing.T, c *zkx.Client, p string, data []byte) {
	t.Helper()
	require.NoError(t, zkx.EnsurePath(recipetest.Ctx(t, 10*time.Second), c, p[:strings.LastIndex(p, "/")]))
	_, err := c.Conn().Create(p, data, 0, c.ACL())
	require.NoError(t, err)
}

// TestForeignAssignmentNode: a foreign node at assign/w1/t-x. Submit of x
// is ErrMalformed naming it. A task x waiting already (submitted before
// the node appeared) is not offered to w1, whose directory holds that
// name: the assigner does not retry the create that cannot land, x waits
// while w1 is the only worker and goes to w2 once it joins.
func TestForeignAssignmentNode(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	create(t, admin, dir+"/assign/w1/t-x", []byte("not msgpack"))
	err := tasks.Submit(ctx, admin, dir, "x", []byte("data-x"))
	require.ErrorIs(t, err, tasks.ErrMalformed)
	require.ErrorContains(t, err, dir+"/assign/w1/t-x")
	require.Empty(t, children(t, admin, dir+"/tasks"), "nothing written")

	create(t, admin, dir+"/tasks/t-x", tasks.EncodeTaskForTest("x", []byte("data-x")))
	l := newLedger()
	startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, "w1", l, workerOpts{})
	ra := runAssigner(t, tasks.AssignerConfig{Client: admin, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock")})
	recipetest.Eventually(t, 10*time.Second, "the foreign node reported", func() bool {
		return slices.Contains(foreignPaths(ra.a, dir), "/assign/w1/t-x")
	})
	require.LessOrEqual(t, roundsIn(t, ra.a, time.Second), idleRounds, "the assigner spins")
	require.Equal(t, []string{"t-x"}, children(t, admin, dir+"/tasks"), "x waits")

	startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, "w2", l, workerOpts{})
	r, err := tasks.WaitResult(recipetest.Ctx(t, 15*time.Second), admin, dir, "x")
	require.NoError(t, err)
	require.Equal(t, "w2", r.Worker)
	require.LessOrEqual(t, roundsIn(t, ra.a, time.Second), idleRounds, "the assigner spins")
	l.check(t)
}

// TestForeignResultBesideWaitingTask: a foreign node at results/t-x (its
// name parses, its data does not) and a task x waiting. The task waits
// without the assigner spinning, the node is reported, and once the
// result TTL deleted it x runs.
func TestForeignResultBesideWaitingTask(t *testing.T) {
	dir := recipetest.Dir(t)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	create(t, admin, dir+"/results/t-x", []byte("not msgpack"))
	create(t, admin, dir+"/tasks/t-x", tasks.EncodeTaskForTest("x", []byte("data-x")))
	l := newLedger()
	startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, "w1", l, workerOpts{})
	ra := runAssigner(t, tasks.AssignerConfig{Client: admin, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock"), ResultTTL: 3 * time.Second})
	recipetest.Eventually(t, 10*time.Second, "a first round", func() bool { return ra.a.Stats().Rounds > 0 })
	require.LessOrEqual(t, roundsIn(t, ra.a, time.Second), idleRounds, "the assigner spins")
	require.Contains(t, foreignPaths(ra.a, dir), "/results/t-x")
	require.Equal(t, []string{"t-x"}, children(t, admin, dir+"/tasks"), "x waits")

	recipetest.Eventually(t, 15*time.Second, "the foreign result expires", func() bool {
		ok, _, err := admin.Conn().Exists(dir + "/results/t-x")
		require.NoError(t, err)
		return !ok || len(children(t, admin, dir+"/tasks")) == 0
	})
	r, err := tasks.WaitResult(recipetest.Ctx(t, 15*time.Second), admin, dir, "x")
	require.NoError(t, err)
	require.Equal(t, "done-x", string(r.Result))
	require.NotContains(t, foreignPaths(ra.a, dir), "/results/t-x", "gone: no longer listed")
}

// TestDepartedWorkerDirsRemoved: the directories of workers that are gone
// are deleted once empty (a Submit reads every worker directory): empty
// ones at once, one holding an assignment once it was reassigned; one
// holding a foreign node stays. A live worker's empty directory stays.
func TestDepartedWorkerDirsRemoved(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	require.NoError(t, zkx.EnsurePath(ctx, admin, dir+"/assign"))
	const gone = 500
	ops := make([]any, 0, 250)
	for i := 0; i < gone; i++ {
		ops = append(ops, &zk.CreateRequest{Path: fmt.Sprintf("%s/assign/gone-%04d", dir, i), Acl: admin.ACL()})
		if len(ops) == cap(ops) {
			_, err := admin.Conn().Multi(ops...)
			require.NoError(t, err)
			ops = ops[:0]
		}
	}
	create(t, admin, dir+"/assign/gone-busy/t-orphan", tasks.EncodeAssignForTest("orphan", "gone-busy", []byte("orphan-data"), 1))
	create(t, admin, dir+"/assign/gone-foreign/t-junk", []byte("not msgpack"))
	l := newLedger()
	startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, "w1", l, workerOpts{})
	ra := runAssigner(t, tasks.AssignerConfig{Client: admin, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock")})
	r, err := tasks.WaitResult(ctx, admin, dir, "orphan")
	require.NoError(t, err)
	require.Equal(t, 2, r.Attempt)
	recipetest.Eventually(t, 20*time.Second, "the empty directories of departed workers deleted", func() bool {
		return len(children(t, admin, dir+"/assign")) == 2
	})
	require.ElementsMatch(t, []string{"w1", "gone-foreign"}, children(t, admin, dir+"/assign"))
	require.LessOrEqual(t, roundsIn(t, ra.a, time.Second), idleRounds, "the assigner spins")
	require.NoError(t, tasks.Submit(ctx, admin, dir, "x", []byte("x")))
	waitResults(t, admin, dir, []string{"x"}, 15*time.Second)
	require.ElementsMatch(t, []string{"w1", "gone-foreign"}, children(t, admin, dir+"/assign"))
}

// TestMaxOpenBytes: the assigner caps the task data assigned to one
// worker in bytes, not only in nodes: 150 tasks of 60 KiB (9 MB) are not
// all given to the one worker, which sits on them; a second worker gets
// the rest.
func TestMaxOpenBytes(t *testing.T) {
	dir := recipetest.Dir(t)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	l := newLedger()
	startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, "w1", l, workerOpts{hold: func(tasks.Assignment) bool { return true }})
	ra := runAssigner(t, tasks.AssignerConfig{Client: admin, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock")})
	const n, size = 150, 60 << 10
	ctx := recipetest.Ctx(t, 60*time.Second)
	for i := 0; i < n; i++ {
		require.NoError(t, tasks.Submit(ctx, admin, dir, fmt.Sprintf("t%03d", i), make([]byte, size)))
	}
	perWorker := tasks.DefaultMaxOpenBytes / size
	recipetest.Eventually(t, 20*time.Second, "w1 full", func() bool {
		return len(children(t, admin, dir+"/assign/w1")) >= perWorker
	})
	require.LessOrEqual(t, roundsIn(t, ra.a, time.Second), idleRounds, "the assigner spins")
	require.Len(t, children(t, admin, dir+"/assign/w1"), perWorker, "at most DefaultMaxOpenBytes of task data")
	require.Len(t, children(t, admin, dir+"/tasks"), n-perWorker)
	startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, "w2", l, workerOpts{})
	recipetest.Eventually(t, 30*time.Second, "w2 runs the rest", func() bool {
		return len(children(t, admin, dir+"/results")) == n-perWorker
	})
	require.Empty(t, children(t, admin, dir+"/tasks"))
}

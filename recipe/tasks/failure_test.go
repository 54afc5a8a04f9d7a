package tasks_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/election"
	"github.com/roomlog/roomlog/recipe/tasks"
	"github.com/roomlog/roomlog/zkx"
)

// pickFirst prefers worker w whenever it is offered.
func pickFirst(w string) func(tasks.Task, []string) string {
	return func(_ tasks.Task, ws []string) string {
		for _, x := range ws {
			if x == w {
				return w
			}
		}
		return ws[0]
	}
}

// TestWorkerKilledMidTask: w1 takes ten tasks and sits on them; its
// session expires. Its tasks move to w2 (attempt 2) and finish there; w1,
// back in a new session, can no longer report them (ErrReassigned).
func TestWorkerKilledMidTask(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	l := newLedger()
	p1 := recipetest.DialProxied(t)
	w1 := startWorker(t, p1.Client, dir, "w1", l, workerOpts{hold: func(tasks.Assignment) bool { return true }})
	runAssigner(t, tasks.AssignerConfig{Client: admin, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock"), Pick: pickFirst("w1")})
	ids := submitAll(t, admin, dir, 0, 10)
	var held []tasks.Assignment
	for len(held) < 10 {
		select {
		case a := <-w1.held:
			held = append(held, a)
		case <-ctx.Done():
			t.Fatalf("w1 got %d of 10 tasks", len(held))
		}
	}
	startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, "w2", l, workerOpts{})
	p1.CutUntilExpired(t)
	res := waitResults(t, admin, dir, ids, 30*time.Second)
	for _, r := range res {
		require.Equal(t, "w2", r.Worker)
		require.Equal(t, 2, r.Attempt)
	}
	p1.Heal(t)
	for _, a := range held {
		err := w1.w.Report(ctx, a, true, []byte("late"))
		require.ErrorIs(t, err, tasks.ErrReassigned, "task %s", a.ID)
	}
	for _, id := range ids {
		r, ok, err := tasks.ReadResult(ctx, admin, dir, id)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, "done-"+id, string(r.Result), "w1's late report changed nothing")
	}
	l.check(t)
	require.Empty(t, openAssignments(t, admin, dir))
}

// candidate runs for the assigner's election on its own client and runs
// an Assigner for every term it wins, until ctx ends.
func candidate(ctx context.Context, t *testing.T, c *zkx.Client, dir, id string, runs *atomic.Int64, mutate func(*tasks.AssignerConfig)) <-chan struct{} {
	done := make(chan struct{})
	p, err := election.Join(ctx, election.Config{Client: c, Dir: dir + "-election", ID: id, Logger: recipetest.Logger(t)})
	if err != nil {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		defer func() {
			rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			_ = p.Resign(rctx)
		}()
		for ctx.Err() == nil {
			term, err := p.Await(ctx)
			if err != nil {
				return
			}
			cfg := tasks.AssignerConfig{Client: c, Dir: dir, Fence: term, Logger: recipetest.Logger(t)}
			if mutate != nil {
				mutate(&cfg)
			}
			a, err := tasks.NewAssigner(cfg)
			if err != nil {
				t.Errorf("NewAssigner: %v", err)
				return
			}
			runs.Add(1)
			err = a.Run(ctx)
			if ctx.Err() == nil && !errors.Is(err, tasks.ErrFenced) && !errors.Is(err, zkx.ErrClosed) {
				t.Logf("candidate %s: Run: %v", id, err)
			}
			if errors.Is(err, zkx.ErrClosed) {
				return
			}
		}
	}()
	return done
}

// TestAssignerKilledMidAssignment: the first assigner is killed (its
// client closed) while it assigns 300 tasks; the second, elected next,
// recovers from ZooKeeper and finishes. Workers stay: every task is
// delivered exactly once, at attempt 1, and reported once.
func TestAssignerKilledMidAssignment(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	l := newLedger()
	for _, id := range []string{"w1", "w2", "w3"} {
		startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, id, l, workerOpts{})
	}
	ids := submitAll(t, admin, dir, 0, 300)
	cA := recipetest.Dial(t, nil, 4*time.Second)
	var runs atomic.Int64
	var assignedA atomic.Int64
	doneA := candidate(ctx, t, cA, dir, "a", &runs, func(cfg *tasks.AssignerConfig) {
		cfg.Pick = func(_ tasks.Task, ws []string) string { assignedA.Add(1); return ws[0] }
	})
	recipetest.Eventually(t, 20*time.Second, "a assigns", func() bool { return assignedA.Load() >= 40 })
	doneB := candidate(ctx, t, recipetest.Dial(t, nil, 4*time.Second), dir, "b", &runs, nil)
	cA.Close() // killed mid-assignment
	<-doneA
	res := waitResults(t, admin, dir, ids, 40*time.Second)
	for id, r := range res {
		require.Equal(t, 1, r.Attempt, "task %s", id)
	}
	require.Less(t, assignedA.Load(), int64(300), "a was killed before it finished")
	require.GreaterOrEqual(t, runs.Load(), int64(2))
	l.check(t)
	for id, m := range l.delivered {
		require.Len(t, m, 1, "task %s: one attempt", id)
		require.Len(t, m[1], 1, "task %s delivered once", id)
	}
	require.Len(t, l.delivered, 300)
	_ = doneB
}

// TestDeposedAssignerFenced: an assigner whose fence is gone without its
// knowing (a process paused past its session) wakes up and tries to
// assign: ZooKeeper refuses the Multi (ErrFenced), nothing is assigned;
// the next assigner assigns the task.
func TestDeposedAssignerFenced(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	l := newLedger()
	startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, "w1", l, workerOpts{})
	fence := newNodeFence(t, admin, dir+"-fence")
	old := runAssigner(t, tasks.AssignerConfig{Client: recipetest.Dial(t, nil, 4*time.Second), Dir: dir, Fence: fence})
	waitResults(t, admin, dir, submitAll(t, admin, dir, 0, 1), 20*time.Second)

	require.NoError(t, admin.Conn().Delete(fence.path, -1)) // deposed; it does not know
	require.NoError(t, tasks.Submit(ctx, admin, dir, "late", []byte("x")))
	err := old.wait(t, 20*time.Second)
	require.ErrorIs(t, err, tasks.ErrFenced)
	require.Equal(t, []string{"t-late"}, children(t, admin, dir+"/tasks"), "nothing assigned by the deposed assigner")
	require.Empty(t, openAssignments(t, admin, dir))
	require.Equal(t, 1, old.a.Stats().Assigned)

	runAssigner(t, tasks.AssignerConfig{Client: admin, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock")})
	r, err := tasks.WaitResult(ctx, admin, dir, "late")
	require.NoError(t, err)
	require.Equal(t, 1, r.Attempt)
	l.check(t)
}

// TestTermEndStopsRun: Run returns ErrFenced as soon as its term ends
// (Done), without waiting for a write.
func TestTermEndStopsRun(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	c := recipetest.Dial(t, nil, 4*time.Second)
	p, err := election.Join(ctx, election.Config{Client: c, Dir: dir + "-election", ID: "a"})
	require.NoError(t, err)
	term, err := p.Await(ctx)
	require.NoError(t, err)
	ra := runAssigner(t, tasks.AssignerConfig{Client: c, Dir: dir, Fence: term})
	require.NoError(t, p.Resign(ctx))
	require.ErrorIs(t, ra.wait(t, 10*time.Second), tasks.ErrFenced)
}

// TestForgedNodes: task nodes that break the format (garbage data, a bad
// name, an id that does not match, ephemeral) are ignored and reported,
// never assigned; a forged assignment is never delivered; a well-formed
// assignment under the directory of a worker that is not a member is
// reassigned to a live one and finishes.
func TestForgedNodes(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	require.NoError(t, zkx.EnsurePath(ctx, admin, dir+"/tasks"))
	require.NoError(t, zkx.EnsurePath(ctx, admin, dir+"/assign/ghost"))
	require.NoError(t, zkx.EnsurePath(ctx, admin, dir+"/assign/w1"))
	mk := func(p string, data []byte, flags int32) {
		_, err := admin.Conn().Create(p, data, flags, admin.ACL())
		require.NoError(t, err)
	}
	mk(dir+"/tasks/t-garbage", []byte{0xc1, 0xff, 0x00}, 0)
	mk(dir+"/tasks/notatask", tasks.EncodeTaskForTest("notatask", []byte("x")), 0)
	mk(dir+"/tasks/t-mismatch", tasks.EncodeTaskForTest("other", []byte("x")), 0)
	mk(dir+"/tasks/t-ephemeral", tasks.EncodeTaskForTest("ephemeral", []byte("x")), zk.FlagEphemeral)
	mk(dir+"/tasks/t-deep", []byte{0x91, 0x91, 0x91, 0x91, 0x91, 0x91, 0x90}, 0)
	mk(dir+"/assign/w1/t-forged", []byte("not msgpack"), 0)
	mk(dir+"/assign/ghost/t-orphan", tasks.EncodeAssignForTest("orphan", "ghost", []byte("orphan-data"), 1), 0)

	l := newLedger()
	w1 := startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, "w1", l, workerOpts{})
	ra := runAssigner(t, tasks.AssignerConfig{Client: admin, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock")})
	ids := submitAll(t, admin, dir, 0, 3)
	waitResults(t, admin, dir, ids, 20*time.Second)
	r, err := tasks.WaitResult(ctx, admin, dir, "orphan")
	require.NoError(t, err)
	require.Equal(t, "w1", r.Worker)
	require.Equal(t, 2, r.Attempt, "reassigned from the worker that is not a member")

	recipetest.Eventually(t, 10*time.Second, "every forged node reported", func() bool { return len(ra.a.Foreign()) == 6 })
	var paths []string
	for _, f := range ra.a.Foreign() {
		paths = append(paths, strings.TrimPrefix(f.Path, dir))
	}
	require.ElementsMatch(t, []string{"/tasks/t-garbage", "/tasks/notatask", "/tasks/t-mismatch", "/tasks/t-ephemeral", "/tasks/t-deep", "/assign/w1/t-forged"}, paths)
	require.Len(t, children(t, admin, dir+"/tasks"), 5, "forged tasks stay, unassigned")
	require.Equal(t, []string{"t-forged"}, children(t, admin, dir+"/assign/w1"))
	require.Len(t, w1.w.Foreign(), 1)
	l.mu.Lock()
	_, delivered := l.delivered["forged"]
	l.mu.Unlock()
	require.False(t, delivered)
	require.Equal(t, 1, ra.a.Stats().Reassigned)
	require.ErrorIs(t, tasks.Submit(ctx, admin, dir, "garbage", []byte("x")), tasks.ErrMalformed)
	for _, bad := range []string{"", "a/b", "a b", strings.Repeat("x", 200)} {
		require.ErrorIs(t, tasks.Submit(ctx, admin, dir, bad, nil), tasks.ErrBadConfig, "id %q", bad)
	}
	require.ErrorIs(t, tasks.Submit(ctx, admin, dir, "big", make([]byte, tasks.MaxDataBytes+1)), tasks.ErrBadConfig)
}

// TestSubmitCap: Submit refuses once DefaultMaxOpen tasks wait (no
// assigner runs), but still answers nil for a task already there.
func TestSubmitCap(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	require.NoError(t, tasks.Submit(ctx, admin, dir, "first", []byte("1")))
	// Fill the parent directly (fast): the cap counts children.
	ops := make([]any, 0, 500)
	for i := 1; i < tasks.DefaultMaxOpen; i++ {
		id := fmt.Sprintf("fill-%05d", i)
		ops = append(ops, &zk.CreateRequest{Path: dir + "/tasks/t-" + id, Data: tasks.EncodeTaskForTest(id, nil), Acl: admin.ACL()})
		if len(ops) == cap(ops) || i == tasks.DefaultMaxOpen-1 {
			_, err := admin.Conn().Multi(ops...)
			require.NoError(t, err)
			ops = ops[:0]
		}
	}
	require.ErrorIs(t, tasks.Submit(ctx, admin, dir, "one-too-many", []byte("x")), tasks.ErrTooMany)
	require.NoError(t, tasks.Submit(ctx, admin, dir, "first", []byte("1")), "already there: nil")
}

// loseAnswer waits (polling from another client) until landed, then
// resets the proxied client's connection: the answer, delayed by the
// proxy, is lost with it.
func loseAnswer(t *testing.T, p *recipetest.Proxied, landed func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !landed() {
		require.True(t, time.Now().Before(deadline), "the request did not land")
		time.Sleep(2 * time.Millisecond)
	}
	p.Proxy.Reset()
	p.Proxy.Delay(0, 0)
}

// TestLostAnswers: the answer to each create of the recipe is lost (the
// proxy drops replies while the request lands, then the connection is
// reset): each is resolved by reading back, nothing is written twice.
func TestLostAnswers(t *testing.T) {
	t.Run("submit", func(t *testing.T) {
		dir := recipetest.Dir(t)
		ctx := recipetest.Ctx(t, 30*time.Second)
		admin := recipetest.Dial(t, nil, 4*time.Second)
		p := recipetest.DialProxiedSession(t, 6*time.Second)
		require.NoError(t, tasks.Submit(ctx, p.Client, dir, "warm", nil)) // the directories exist
		// Submit reads before it creates: slow the link down, and reset
		// it the moment the create has landed, before its answer is back.
		p.Proxy.Delay(150*time.Millisecond, 0)
		errc := make(chan error, 1)
		go func() { errc <- tasks.Submit(ctx, p.Client, dir, "x", []byte("data")) }()
		loseAnswer(t, p, func() bool { return len(children(t, admin, dir+"/tasks")) == 2 })
		require.NoError(t, <-errc)
		require.ElementsMatch(t, []string{"t-warm", "t-x"}, children(t, admin, dir+"/tasks"))
	})
	t.Run("assign", func(t *testing.T) {
		dir := recipetest.Dir(t)
		ctx := recipetest.Ctx(t, 30*time.Second)
		admin := recipetest.Dial(t, nil, 4*time.Second)
		p := recipetest.DialProxiedSession(t, 6*time.Second)
		l := newLedger()
		startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, "w1", l, workerOpts{})
		var dropped atomic.Bool
		ra := runAssigner(t, tasks.AssignerConfig{Client: p.Client, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock"),
			Pick: func(_ tasks.Task, ws []string) string {
				if dropped.CompareAndSwap(false, true) {
					p.Proxy.DropReplies() // the assignment's Multi is the next request
				}
				return ws[0]
			}})
		require.NoError(t, tasks.Submit(ctx, admin, dir, "x", []byte("data")))
		recipetest.Eventually(t, 10*time.Second, "the assignment lands", func() bool {
			return len(children(t, admin, dir+"/assign/w1")) == 1 || len(children(t, admin, dir+"/results")) == 1
		})
		p.Proxy.Heal()
		p.Proxy.Reset()
		r, err := tasks.WaitResult(ctx, admin, dir, "x")
		require.NoError(t, err)
		require.Equal(t, 1, r.Attempt)
		require.NoError(t, tasks.Submit(ctx, admin, dir, "y", []byte("data")))
		_, err = tasks.WaitResult(ctx, admin, dir, "y")
		require.NoError(t, err)
		l.check(t)
		require.Len(t, l.delivered["x"][1], 1, "delivered once")
		require.Empty(t, children(t, admin, dir+"/tasks"))
		require.LessOrEqual(t, ra.a.Stats().Assigned, 2)
	})
	t.Run("reassign", func(t *testing.T) {
		dir := recipetest.Dir(t)
		ctx := recipetest.Ctx(t, 30*time.Second)
		admin := recipetest.Dial(t, nil, 4*time.Second)
		p := recipetest.DialProxiedSession(t, 6*time.Second)
		l := newLedger()
		c1 := recipetest.Dial(t, nil, 4*time.Second)
		w1 := startWorker(t, c1, dir, "w1", l, workerOpts{hold: func(tasks.Assignment) bool { return true }})
		var armed, dropped atomic.Bool
		runAssigner(t, tasks.AssignerConfig{Client: p.Client, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock"),
			Pick: func(task tasks.Task, ws []string) string {
				if armed.Load() && dropped.CompareAndSwap(false, true) {
					p.Proxy.DropReplies() // the reassignment's Multi is the next request
				}
				return ws[0]
			}})
		require.NoError(t, tasks.Submit(ctx, admin, dir, "x", []byte("data")))
		<-w1.held
		startWorker(t, recipetest.Dial(t, nil, 4*time.Second), dir, "w2", l, workerOpts{})
		armed.Store(true)
		c1.Close() // w1 killed
		recipetest.Eventually(t, 10*time.Second, "the reassignment lands", func() bool {
			return len(children(t, admin, dir+"/assign/w2")) == 1 || len(children(t, admin, dir+"/results")) == 1
		})
		p.Proxy.Heal()
		p.Proxy.Reset()
		r, err := tasks.WaitResult(ctx, admin, dir, "x")
		require.NoError(t, err)
		require.Equal(t, "w2", r.Worker)
		require.Equal(t, 2, r.Attempt)
		l.check(t)
		require.Len(t, l.delivered["x"][2], 1)
		require.Empty(t, openAssignments(t, admin, dir))
	})
	t.Run("report", func(t *testing.T) {
		dir := recipetest.Dir(t)
		ctx := recipetest.Ctx(t, 30*time.Second)
		admin := recipetest.Dial(t, nil, 4*time.Second)
		p := recipetest.DialProxiedSession(t, 6*time.Second)
		l := newLedger()
		w1 := startWorker(t, p.Client, dir, "w1", l, workerOpts{hold: func(tasks.Assignment) bool { return true }})
		runAssigner(t, tasks.AssignerConfig{Client: admin, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock")})
		require.NoError(t, tasks.Submit(ctx, admin, dir, "x", []byte("data")))
		a := <-w1.held
		p.Proxy.Delay(150*time.Millisecond, 0)
		errc := make(chan error, 1)
		go func() { errc <- w1.w.Report(ctx, a, true, []byte("done-x")) }()
		loseAnswer(t, p, func() bool { return len(children(t, admin, dir+"/results")) == 1 })
		require.NoError(t, <-errc, "our own result, found by reading back")
		require.NoError(t, w1.w.Report(ctx, a, false, nil), "idempotent: this attempt's result is recorded; nothing written")
		r, err := tasks.WaitResult(ctx, admin, dir, "x")
		require.NoError(t, err)
		require.Equal(t, "done-x", string(r.Result))
		require.True(t, r.OK)
	})
}

// TestDeliveryAcrossSessions: a disconnection within the session delivers
// nothing again; after a session expiry (no other worker to take the
// task) the assignment still there is delivered again, same attempt, and
// its Report is accepted.
func TestDeliveryAcrossSessions(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	l := newLedger()
	p := recipetest.DialProxiedSession(t, 3*time.Second)
	w1 := startWorker(t, p.Client, dir, "w1", l, workerOpts{hold: func(tasks.Assignment) bool { return true }})
	runAssigner(t, tasks.AssignerConfig{Client: admin, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock")})
	require.NoError(t, tasks.Submit(ctx, admin, dir, "x", []byte("d")))
	a := <-w1.held
	p.Disconnect(t)
	select {
	case again := <-w1.held:
		t.Fatalf("delivered again after a reconnection in the same session: %+v", again)
	case <-time.After(time.Second):
	}
	p.Expire(t)
	select {
	case again := <-w1.held:
		require.Equal(t, a.ID, again.ID)
		require.Equal(t, a.Attempt, again.Attempt, "the same attempt, delivered again in the new session")
		require.NoError(t, w1.w.Report(ctx, again, true, []byte("done-x")))
	case <-time.After(15 * time.Second):
		t.Fatal("not delivered again after the session expired")
	}
	r, err := tasks.WaitResult(ctx, admin, dir, "x")
	require.NoError(t, err)
	require.Equal(t, "w1", r.Worker)
	l.check(t)
}

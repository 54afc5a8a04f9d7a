package tasks_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/election"
	"github.com/roomlog/roomlog/recipe/lock"
	"github.com/roomlog/roomlog/recipe/tasks"
	"github.com/roomlog/roomlog/zkx"
)

func TestMain(m *testing.M) { recipetest.Main(m) }

const (
	pkgTasks = "github.com/roomlog/roomlog/recipe/tasks"
	pkgZKR   = "github.com/roomlog/roomlog/recipe/internal/zkr"
)

// Both tenures of the recipe kit are Fences.
var (
	_ tasks.Fence = (*election.Term)(nil)
	_ tasks.Fence = (*lock.Lease)(nil)
)

// nodeFence guards on a persistent node the test owns: deleting it
// deposes the assigner without the assigner noticing (no Done): a paused
// process that wakes up.
type nodeFence struct{ path string }

func (f nodeFence) Guard(ops ...any) []any {
	return append([]any{&zk.CheckVersionRequest{Path: f.path, Version: -1}}, ops...)
}

func newNodeFence(t *testing.T, c *zkx.Client, p string) nodeFence {
	t.Helper()
	_, err := c.Conn().Create(p, nil, 0, c.ACL())
	require.NoError(t, err)
	return nodeFence{p}
}

// ledger records what the test's workers saw and did, for the checkers.
type ledger struct {
	mu sync.Mutex
	// delivered counts deliveries per task id and attempt, by worker.
	delivered map[string]map[int][]string
	// accepted counts the Reports that returned nil, per task id.
	accepted map[string][]string // worker/attempt
	// refused counts Reports refused with ErrReassigned.
	refused int
}

func newLedger() *ledger {
	return &ledger{delivered: map[string]map[int][]string{}, accepted: map[string][]string{}}
}

func (l *ledger) deliver(a tasks.Assignment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.delivered[a.ID]
	if m == nil {
		m = map[int][]string{}
		l.delivered[a.ID] = m
	}
	m[a.Attempt] = append(m[a.Attempt], a.Worker)
}

func (l *ledger) accept(a tasks.Assignment) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.accepted[a.ID] = append(l.accepted[a.ID], fmt.Sprintf("%s/%d", a.Worker, a.Attempt))
}

func (l *ledger) refuse() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.refused++
}

// check: each attempt of a task went to one worker only (several
// deliveries to that worker only after a session expiry); at most one
// accepted Report per task.
func (l *ledger) check(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for id, m := range l.delivered {
		for att, ws := range m {
			for _, w := range ws {
				require.Equal(t, ws[0], w, "task %s attempt %d delivered to two workers: %v", id, att, ws)
			}
		}
	}
	for id, acc := range l.accepted {
		require.Len(t, acc, 1, "task %s: more than one accepted report: %v", id, acc)
	}
}

// workerOpts tune a test worker's behaviour per assignment.
type workerOpts struct {
	// hold, when set, decides to keep an assignment without reporting.
	hold func(a tasks.Assignment) bool
	// beforeReport runs before each Report.
	beforeReport func(a tasks.Assignment)
	delay        time.Duration
}

// testWorker runs a Worker: it executes every delivered assignment
// (result: "done-<id>") and reports it.
type testWorker struct {
	w    *tasks.Worker
	held chan tasks.Assignment
	done chan struct{}
}

func startWorker(t *testing.T, c *zkx.Client, dir, id string, l *ledger, o workerOpts) *testWorker {
	t.Helper()
	w, err := tasks.JoinWorker(recipetest.Ctx(t, 15*time.Second), c, dir, id, tasks.WorkerOptions{Logger: recipetest.Logger(t)})
	require.NoError(t, err)
	tw := &testWorker{w: w, held: make(chan tasks.Assignment, 1024), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		defer close(tw.done)
		for a := range w.Assignments() {
			l.deliver(a)
			if o.hold != nil && o.hold(a) {
				tw.held <- a
				continue
			}
			if o.delay > 0 {
				time.Sleep(o.delay)
			}
			if o.beforeReport != nil {
				o.beforeReport(a)
			}
			err := w.Report(ctx, a, true, []byte("done-"+a.ID))
			switch {
			case err == nil:
				l.accept(a)
			case errors.Is(err, tasks.ErrReassigned):
				l.refuse()
			}
		}
	}()
	t.Cleanup(func() {
		cancel()
		_ = w.Close()
		<-tw.done
	})
	return tw
}

// stop closes the worker and waits for its goroutine.
func (tw *testWorker) stop() {
	_ = tw.w.Close()
	<-tw.done
}

// runningAssigner is an Assigner's Run on a goroutine.
type runningAssigner struct {
	a      *tasks.Assigner
	cancel context.CancelFunc
	errc   chan error
}

func runAssigner(t *testing.T, cfg tasks.AssignerConfig) *runningAssigner {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = recipetest.Logger(t)
	}
	a, err := tasks.NewAssigner(cfg)
	require.NoError(t, err)
	return startAssigner(t, a)
}

// startAssigner runs a on a goroutine until the test ends.
func startAssigner(t *testing.T, a *tasks.Assigner) *runningAssigner {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ra := &runningAssigner{a: a, cancel: cancel, errc: make(chan error, 1)}
	go func() { ra.errc <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-ra.errc
		ra.errc <- nil
	})
	return ra
}

// wait returns Run's error within d.
func (ra *runningAssigner) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-ra.errc:
		ra.errc <- err
		return err
	case <-time.After(d):
		t.Fatalf("Run did not return within %v", d)
		return nil
	}
}

// leaseFence takes a lock on its own client: the usual fence in tests.
func leaseFence(t *testing.T, c *zkx.Client, dir string) *lock.Lease {
	t.Helper()
	m, err := lock.New(recipetest.Ctx(t, 10*time.Second), lock.Config{Client: c, Dir: dir, Logger: recipetest.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	l, err := m.Lock(recipetest.Ctx(t, 10*time.Second))
	require.NoError(t, err)
	return l
}

// submitAll submits ids 0..n-1 ("task-%04d", data "data-%d").
func submitAll(t *testing.T, c *zkx.Client, dir string, from, n int) []string {
	t.Helper()
	ctx := recipetest.Ctx(t, 30*time.Second)
	ids := make([]string, 0, n)
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := from; i < from+n; i++ {
		id := fmt.Sprintf("task-%04d", i)
		ids = append(ids, id)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- tasks.Submit(ctx, c, dir, id, []byte(fmt.Sprintf("data-%d", i)))
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	return ids
}

// waitResults waits for every id's result and checks it.
func waitResults(t *testing.T, c *zkx.Client, dir string, ids []string, d time.Duration) map[string]tasks.Result {
	t.Helper()
	ctx := recipetest.Ctx(t, d)
	out := map[string]tasks.Result{}
	for _, id := range ids {
		r, err := tasks.WaitResult(ctx, c, dir, id)
		require.NoError(t, err, "result of %s", id)
		require.Equal(t, id, r.ID)
		require.True(t, r.OK)
		require.Equal(t, "done-"+id, string(r.Result))
		out[id] = r
	}
	return out
}

// children lists p ([] when missing).
func children(t *testing.T, c *zkx.Client, p string) []string {
	t.Helper()
	names, _, err := c.Conn().Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	require.NoError(t, err)
	return names
}

// openAssignments counts the nodes under <dir>/assign/*.
func openAssignments(t *testing.T, c *zkx.Client, dir string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, w := range children(t, c, dir+"/assign") {
		if ns := children(t, c, dir+"/assign/"+w); len(ns) > 0 {
			out[w] = ns
		}
	}
	return out
}

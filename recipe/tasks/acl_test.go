package tasks_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/tasks"
	"github.com/roomlog/roomlog/zkx"
)

// digestClient dials the shared ZooKeeper as digest user (password
// "pw-"+user), its creates granting all permissions to itself and to
// the digest users also.
func digestClient(t *testing.T, user string, also ...string) *zkx.Client {
	t.Helper()
	var ids []string
	for _, u := range also {
		ids = append(ids, "digest:"+zkx.DigestID(u, "pw-"+u))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := zkx.Dial(ctx, zkx.DialConfig{Servers: recipetest.ZK(t).Addrs(), SessionTimeout: 4 * time.Second,
		Auth: &zkx.Digest{User: user, Password: "pw-" + user}, ACLIdentities: ids})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func digestEntry(user string) zk.ACL { return zk.DigestACL(zk.PermAll, user, "pw-"+user)[0] }

// TestWorkerACL (issue 40, finding 3): with per-worker ACLs (digest
// identities: the master, workers wa and wb), the normal flow works —
// tasks run on both workers, results reach the client — while worker
// wa can neither read, create, write nor delete anything under wb's
// directory, nor write the assigner's nodes: the waiting tasks, the
// results (a forged result of wb's task), the published totals, the
// assignment directories.
func TestWorkerACL(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := digestClient(t, "master")
	wa := digestClient(t, "wa", "master")
	wb := digestClient(t, "wb", "master")
	runAssigner(t, tasks.AssignerConfig{Client: admin, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock"),
		WorkerACL: func(w string) []zk.ACL {
			if w == "wa" || w == "wb" {
				return []zk.ACL{digestEntry(w)}
			}
			return nil
		},
		WorkerIdentities: []zk.ACL{digestEntry("wa"), digestEntry("wb")},
		// Tasks named b-* go to wb.
		Pick: func(task tasks.Task, ws []string) string {
			if !strings.HasPrefix(task.ID, "b-") {
				return ws[0]
			}
			for _, w := range ws {
				if w == "wb" {
					return w
				}
			}
			return ""
		}})
	recipetest.Eventually(t, 10*time.Second, "the assigner made the directories", func() bool {
		ok, _, err := admin.Conn().Exists(dir + "/workers")
		require.NoError(t, err)
		return ok
	})
	l := newLedger()
	startWorker(t, wa, dir, "wa", l, workerOpts{})
	twB := startWorker(t, wb, dir, "wb", l, workerOpts{hold: func(a tasks.Assignment) bool { return a.ID == "b-held" }})
	ids := submitAll(t, admin, dir, 0, 20)
	res := waitResults(t, admin, dir, ids, 30*time.Second)
	workers := map[string]bool{}
	for _, r := range res {
		workers[r.Worker] = true
	}
	require.Len(t, workers, 2, "both workers ran tasks")

	require.NoError(t, tasks.Submit(ctx, admin, dir, "b-held", []byte("held")))
	var held tasks.Assignment
	select {
	case held = <-twB.held:
	case <-ctx.Done():
		t.Fatal("b-held never reached wb")
	}
	bdir := dir + "/assign/wb"
	bnode := bdir + "/t-b-held"
	c := wa.Conn()
	refused := func(what string, err error) {
		t.Helper()
		require.ErrorIs(t, err, zk.ErrNoAuth, "worker wa: %s", what)
	}
	_, _, err := c.Get(bnode)
	refused("read wb's assignment", err)
	_, _, err = c.Children(bdir)
	refused("list wb's directory", err)
	_, err = c.Create(bdir+"/t-forged", tasks.EncodeAssignForTest("forged", "wb", nil, 1), 0, wa.ACL())
	refused("create an assignment for wb", err)
	_, err = c.Create(bdir+"/r-b-held", tasks.EncodeResultForTest("b-held", "wb", 1, []byte("held")), 0, wa.ACL())
	refused("report wb's task in wb's directory", err)
	refused("delete wb's assignment", c.Delete(bnode, -1))
	_, err = c.Set(bnode, []byte("x"), -1)
	refused("write wb's assignment", err)
	_, err = c.Create(dir+"/results/t-b-held", tasks.EncodeResultForTest("b-held", "wb", 1, []byte("held")), 0, wa.ACL())
	refused("forge wb's result", err)
	refused("delete a result", c.Delete(dir+"/results/t-"+ids[0], -1))
	_, err = c.Create(dir+"/tasks/t-x", tasks.EncodeTaskForTest("x", nil), 0, wa.ACL())
	refused("submit a task", err)
	_, err = c.Set(dir+"/tasks", nil, -1)
	refused("write the published total", err)
	refused("delete wb's directory", c.Delete(bdir, -1))
	_, err = c.Create(dir+"/assign/wc", nil, 0, wa.ACL())
	refused("create a worker directory", err)
	_, err = c.Set(dir+"/workers/wb", []byte("x"), -1)
	refused("write wb's membership node", err)

	// wb's held task still runs its course.
	require.NoError(t, twB.w.Report(ctx, held, true, []byte("done-b-held")))
	waitResults(t, admin, dir, []string{"b-held"}, 15*time.Second)
	l.check(t)
}

// TestWorkerACLForgery: under per-worker ACLs a worker can neither
// forge another worker's result nor inject a task. Worker wa writes a
// well-formed report of wb's task b-held (naming itself) where workers
// report; the assigner deletes it, unmatched (b-held is not assigned
// to wa), and lists it as foreign, and wb's genuine result is the one
// that lands. wa's own directory accepts no node from wa: an injected
// or hijacking assignment (t-<id>, any attempt) and a report there are
// refused.
func TestWorkerACLForgery(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := digestClient(t, "master")
	wa := digestClient(t, "wa", "master")
	wb := digestClient(t, "wb", "master")
	ra := runAssigner(t, tasks.AssignerConfig{Client: admin, Dir: dir, Fence: leaseFence(t, admin, dir+"-lock"),
		WorkerACL: func(w string) []zk.ACL {
			if w == "wa" || w == "wb" {
				return []zk.ACL{digestEntry(w)}
			}
			return nil
		},
		WorkerIdentities: []zk.ACL{digestEntry("wa"), digestEntry("wb")},
		Pick: func(task tasks.Task, ws []string) string {
			want := "wa"
			if strings.HasPrefix(task.ID, "b-") {
				want = "wb"
			}
			for _, w := range ws {
				if w == want {
					return w
				}
			}
			return ""
		}})
	recipetest.Eventually(t, 10*time.Second, "the assigner made the directories", func() bool {
		ok, _, err := admin.Conn().Exists(dir + "/reports")
		require.NoError(t, err)
		return ok
	})
	l := newLedger()
	twA := startWorker(t, wa, dir, "wa", l, workerOpts{hold: func(a tasks.Assignment) bool { return a.ID == "a-held" }})
	twB := startWorker(t, wb, dir, "wb", l, workerOpts{hold: func(a tasks.Assignment) bool { return a.ID == "b-held" }})
	require.NoError(t, tasks.Submit(ctx, admin, dir, "b-held", []byte("held")))
	require.NoError(t, tasks.Submit(ctx, admin, dir, "a-held", []byte("held-a")))
	held := func(tw *testWorker) tasks.Assignment {
		select {
		case a := <-tw.held:
			return a
		case <-ctx.Done():
			t.Fatal("a held task never arrived")
			return tasks.Assignment{}
		}
	}
	bHeld, aHeld := held(twB), held(twA)
	c := wa.Conn()
	adir := dir + "/assign/wa"

	// Injection and hijacking: wa creates nothing in its own directory.
	_, err := c.Create(adir+"/t-injected", tasks.EncodeAssignForTest("injected", "wa", []byte("x"), 1), 0, wa.ACL())
	require.ErrorIs(t, err, zk.ErrNoAuth, "wa injects a task into its own directory")
	_, err = c.Create(adir+"/t-b-held", tasks.EncodeAssignForTest("b-held", "wa", []byte("held"), 9), 0, wa.ACL())
	require.ErrorIs(t, err, zk.ErrNoAuth, "wa hijacks wb's task with a higher attempt")
	_, err = c.Create(adir+"/r-b-held", tasks.EncodeResultForTest("b-held", "wa", 1, []byte("held")), 0, wa.ACL())
	require.ErrorIs(t, err, zk.ErrNoAuth, "wa reports in its assignment directory")
	// Nor in wb's report directory.
	_, err = c.Create(dir+"/reports/wb/r-b-held", tasks.EncodeResultForTest("b-held", "wb", 1, []byte("held")), 0, wa.ACL())
	require.ErrorIs(t, err, zk.ErrNoAuth, "wa reports in wb's report directory")

	// The forged report, where wa may report: deleted, never moved.
	forged := dir + "/reports/wa/r-b-held"
	_, err = c.Create(forged, tasks.EncodeResultForTest("b-held", "wa", 1, []byte("held")), 0, wa.ACL())
	require.NoError(t, err, "wa reports in its own report directory")
	recipetest.Eventually(t, 15*time.Second, "the assigner deletes wa's forged report", func() bool {
		ok, _, err := admin.Conn().Exists(forged)
		require.NoError(t, err)
		return !ok
	})
	found := false
	for _, f := range ra.a.Foreign() {
		found = found || f.Path == forged
	}
	require.True(t, found, "the forged report is listed as foreign: %v", ra.a.Foreign())
	ok, _, err := admin.Conn().Exists(dir + "/results/t-b-held")
	require.NoError(t, err)
	require.False(t, ok, "the forged report was not moved to results")

	// The genuine reports land.
	require.NoError(t, twB.w.Report(ctx, bHeld, true, []byte("done-b-held")))
	require.NoError(t, twA.w.Report(ctx, aHeld, true, []byte("done-a-held")))
	res := waitResults(t, admin, dir, []string{"b-held", "a-held"}, 15*time.Second)
	require.Equal(t, "wb", res["b-held"].Worker)
	require.Equal(t, "done-b-held", string(res["b-held"].Result))
	require.Equal(t, "wa", res["a-held"].Worker)
	recipetest.Eventually(t, 15*time.Second, "the reports were moved", func() bool {
		return len(children(t, admin, dir+"/reports/wa")) == 0 && len(children(t, admin, dir+"/reports/wb")) == 0
	})
}

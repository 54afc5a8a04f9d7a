package failover

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
)

// sessionTimeout is every replica's ZooKeeper session timeout (see doc.go).
const sessionTimeout = 2 * time.Second

func TestMain(m *testing.M) {
	code := m.Run()
	testnode.RemoveBuilds()
	os.Exit(code)
}

// env is one test's world: a 3-server ensemble, a cluster of node
// processes on it, and the history of every proposal.
type env struct {
	t   *testing.T
	ctx context.Context
	ens *zkensemble.Ensemble
	c   *testnode.Cluster
	h   *testnode.History
	log *slog.Logger
}

// newEnv starts a 3-server ensemble and nodes node processes (session
// timeout 2 s, checkpoints off unless tune sets them) and waits for a
// primary. The test's context ends after budget.
func newEnv(t *testing.T, nodes int, budget time.Duration, tune func(*testnode.NodeOptions)) *env {
	t.Helper()
	bin := testnode.BuildT(t) // before the ensemble: the build is CPU-heavy
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	ens := zkensemble.ForTest(t, zkensemble.Options{Servers: 3, TickTime: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), budget)
	t.Cleanup(cancel)
	no := testnode.NodeOptions{
		Binary:               bin,
		SessionTimeout:       sessionTimeout,
		CheckpointEvery:      -1,
		CheckpointEveryBytes: -1,
		Logger:               log,
	}
	if tune != nil {
		tune(&no)
	}
	c := testnode.ClusterForTest(t, testnode.ClusterOptions{Nodes: nodes, ZK: ens.Addrs(), Node: no, Logger: log})
	e := &env{t: t, ctx: ctx, ens: ens, c: c, h: &testnode.History{}, log: log}
	e.primary()
	return e
}

// primary waits (up to 30 s) for exactly one primary and returns it.
func (e *env) primary() *testnode.Node {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	p, err := e.c.WaitPrimary(ctx)
	require.NoError(e.t, err)
	return p
}

// standbys returns the live nodes other than p.
func (e *env) standbys(p *testnode.Node) []*testnode.Node {
	var out []*testnode.Node
	for _, n := range e.c.Live() {
		if n != p {
			out = append(out, n)
		}
	}
	return out
}

// load starts proposers recording into e.h; the test stops them (settle).
func (e *env) load(opts testnode.LoadOptions) *testnode.Load {
	l := testnode.StartLoad(e.ctx, e.c, e.h, opts)
	e.t.Cleanup(l.Stop) // idempotent with an explicit Stop
	return l
}

// waitAcked waits for n more acknowledged proposals of l (within d).
func (e *env) waitAcked(l *testnode.Load, n int64, d time.Duration) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, d)
	defer cancel()
	require.NoError(e.t, l.WaitAcked(ctx, n), "load errors so far: %v", l.Errors())
}

// settle stops the load, waits until every live node converged (same hash
// at the same index), checks the history against every live node's dump,
// and returns the result (the test fails on any violation).
func (e *env) settle(l *testnode.Load) testnode.CheckResult {
	e.t.Helper()
	if l != nil {
		l.Stop()
		e.t.Logf("load: %d proposals acknowledged; failed attempts by code: %v", l.Acked(), l.Errors())
	}
	ctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
	defer cancel()
	h, err := e.c.WaitConverged(ctx)
	require.NoError(e.t, err)
	r, err := testnode.Check(ctx, e.c.Live(), e.h)
	require.NoError(e.t, err)
	e.t.Logf("converged at index %d (hash %.16s) on %d nodes; %s", h.Index, h.Hash, len(e.c.Live()), r.Summary())
	require.NoError(e.t, r.Err())
	require.GreaterOrEqual(e.t, h.Index, e.h.MaxAckedIndex())
	return r
}

// roleOf returns n's role as n reports it ("" if it does not answer).
func (e *env) roleOf(n *testnode.Node) testnode.StatusJSON {
	ctx, cancel := context.WithTimeout(e.ctx, 2*time.Second)
	defer cancel()
	s, err := n.Status(ctx)
	if err != nil {
		return testnode.StatusJSON{}
	}
	return s
}

// waitNewPrimary polls (every 10 ms) until a live node other than old
// reports role primary, and returns it with the time it was seen.
func (e *env) waitNewPrimary(old *testnode.Node, d time.Duration) (*testnode.Node, time.Time) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for {
		for _, n := range e.c.Live() {
			if n != old && e.roleOf(n).Role == testnode.RolePrimary {
				return n, time.Now()
			}
		}
		if time.Now().After(deadline) || e.ctx.Err() != nil {
			e.t.Fatalf("no new primary within %v (old %s)", d, old.ID())
		}
		time.Sleep(10 * time.Millisecond) // polling the nodes' status: no event to wait on
	}
}

// waitFor polls cond every 20 ms until it holds, failing the test after d.
func (e *env) waitFor(d time.Duration, what string, cond func() bool) {
	e.t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) || e.ctx.Err() != nil {
			e.t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition with a deadline
	}
}

// room opens the test's room through a separate ZooKeeper client (closed
// on cleanup).
func (e *env) room() *logroom.Room {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(e.ctx, 20*time.Second)
	defer cancel()
	cl, err := logroom.Dial(ctx, logroom.DialConfig{Servers: e.ens.Addrs(), SessionTimeout: 10 * time.Second})
	require.NoError(e.t, err)
	e.t.Cleanup(cl.Close)
	r, err := logroom.OpenRoom(ctx, cl, e.c.Room(), logroom.RoomOptions{})
	require.NoError(e.t, err)
	return r
}

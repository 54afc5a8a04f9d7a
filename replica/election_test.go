package replica

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
)

func testLogger(t testing.TB) *slog.Logger {
	if os.Getenv("REPLICA_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", t.Name())
	}
	return slog.New(slog.DiscardHandler)
}

// zkConn opens a raw connection with a session for component tests.
func zkConn(t *testing.T, ens *zkensemble.Ensemble) *zk.Conn {
	t.Helper()
	conn, _, err := zk.Connect(ens.Addrs(), 2*time.Second, zk.WithLogInfo(false), zk.WithLogger(quietZK{}))
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	eventually(t, 10*time.Second, func() bool { return conn.State() == zk.StateHasSession }, "zk session")
	return conn
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

// eventually polls cond until it holds or the deadline passes.
func eventually(t testing.TB, d time.Duration, cond func() bool, what string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for: %s", d, fmt.Sprintf(what, args...))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestParseCandidate(t *testing.T) {
	g := newGUID()
	for _, tc := range []struct {
		name string
		ok   bool
		seq  int64
	}{
		{"c-" + g + "-0000000007", true, 7},
		{"c-" + g + "-2147483647", true, 2147483647},
		{"c-" + g + "--000000001", true, -1},
		{"c-" + g + "-", false, 0},
		{"c-" + g[:31] + "-0000000001", false, 0},
		{"x-" + g + "-0000000001", false, 0},
		{"c-" + g + "-00000000zz", false, 0},
		{"c-zz" + g[2:] + "-0000000001", false, 0},
		{"members", false, 0},
	} {
		c, ok := parseCandidate(tc.name)
		require.Equal(t, tc.ok, ok, tc.name)
		if ok {
			require.Equal(t, tc.seq, c.Seq, tc.name)
			require.Equal(t, g, c.GUID)
		}
	}
	// Numeric, not lexical, order.
	cs := sortCandidates([]string{"c-" + g + "-0000000010", "c-" + g + "-0000000009", "junk", "c-" + g + "-0000000100"})
	require.Len(t, cs, 3)
	require.Equal(t, []int64{9, 10, 100}, []int64{cs[0].Seq, cs[1].Seq, cs[2].Seq})
}

func TestElectionComponent(t *testing.T) {
	ens := sharedEnsemble(t)
	dir := "/el-" + newGUID()[:8]
	c0 := zkConn(t, ens)
	require.NoError(t, ensurePersistent(c0, zk.WorldACL(zk.PermAll), dir))

	const n = 3
	conns := make([]*zk.Conn, n)
	els := make([]*election, n)
	views := make([]electionView, n)
	for i := range els {
		conns[i] = zkConn(t, ens)
		els[i] = newElection(conns[i], zk.WorldACL(zk.PermAll), dir, newGUID(), candidateData{ID: fmt.Sprint("m", i)}, testLogger(t))
	}
	for i := range els {
		v, err := els[i].evaluate()
		require.NoError(t, err)
		views[i] = v
	}
	require.True(t, views[0].leader)
	require.False(t, views[1].leader)
	require.False(t, views[2].leader)
	require.NotNil(t, views[1].watch)
	require.Equal(t, els[0].mine, views[1].cands[0].Name)
	d, ok, err := els[2].dataOf(views[2].cands[0].Name)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "m0", d.ID)

	// Deleting the leader fires only its successor's watch.
	require.NoError(t, els[0].resign())
	select {
	case ev := <-views[1].watch:
		require.Equal(t, zk.EventNodeDeleted, ev.Type)
	case <-time.After(5 * time.Second):
		t.Fatal("successor's watch did not fire")
	}
	select {
	case <-views[2].watch:
		t.Fatal("no herd: the third candidate must not be woken")
	default:
	}
	v, err := els[1].evaluate()
	require.NoError(t, err)
	require.True(t, v.leader)

	// Re-queue moves a candidate to the back.
	require.NoError(t, els[1].requeue())
	v, err = els[2].evaluate()
	require.NoError(t, err)
	require.True(t, v.leader)
	v, err = els[1].evaluate()
	require.NoError(t, err)
	require.False(t, v.leader)
	require.Equal(t, 1, v.mine)

	// Session loss (close) removes the candidate; the next takes over.
	conns[2].Close()
	eventually(t, 10*time.Second, func() bool {
		v, err := els[1].evaluate()
		return err == nil && v.leader
	}, "m1 leads after m2's session closed")
}

func TestElectionProtectedCreate(t *testing.T) {
	ens := sharedEnsemble(t)
	dir := "/elp-" + newGUID()[:8]
	conn := zkConn(t, ens)
	acl := zk.WorldACL(zk.PermAll)
	require.NoError(t, ensurePersistent(conn, acl, dir))
	guid := newGUID()
	el := newElection(conn, acl, dir, guid, candidateData{ID: "a"}, testLogger(t))

	// A create whose answer was lost: the node exists, we do not know it.
	p, err := conn.Create(dir+"/c-"+guid+"-", el.data, zk.FlagEphemeral|zk.FlagSequence, acl)
	require.NoError(t, err)
	el.maybe = true
	require.NoError(t, el.ensure())
	require.Equal(t, p[len(dir)+1:], el.mine, "adopts the node carrying its guid instead of creating another")
	names, _, err := conn.Children(dir)
	require.NoError(t, err)
	require.Len(t, names, 1)

	// A ghost (a create that ran in a new session later): deleted by list.
	_, err = conn.Create(dir+"/c-"+guid+"-", el.data, zk.FlagEphemeral|zk.FlagSequence, acl)
	require.NoError(t, err)
	v, err := el.evaluate()
	require.NoError(t, err)
	require.True(t, v.leader)
	require.Len(t, v.cands, 1)
	names, _, err = conn.Children(dir)
	require.NoError(t, err)
	require.Equal(t, []string{el.mine}, names)

	// Foreign children are ignored.
	_, err = conn.Create(dir+"/junk", nil, zk.FlagEphemeral, acl)
	require.NoError(t, err)
	v, err = el.evaluate()
	require.NoError(t, err)
	require.True(t, v.leader)
}

func TestMembershipComponent(t *testing.T) {
	ens := sharedEnsemble(t)
	dir := "/mem-" + newGUID()[:8]
	acl := zk.WorldACL(zk.PermAll)
	ca, cb := viewClient(t, ens), viewClient(t, ens)
	a := newMembership(ca, dir, "a", testLogger(t))
	b := newMembership(cb, dir, "b", testLogger(t))
	ctx := context.Background()
	defer a.close(ctx)
	defer b.close(ctx)
	require.NoError(t, a.join(ctx, memberData{ID: "a", Applied: 1}, time.Second))
	require.Equal(t, uint64(1), a.known["a"].Applied, "the first listing is loaded by join")
	// reloaded waits for a's watcher to signal and reloads its view until
	// cond holds.
	reloaded := func(cond func() bool, what string) {
		t.Helper()
		deadline := time.After(5 * time.Second)
		for !cond() {
			select {
			case <-a.changed.C():
				a.reload()
			case <-deadline:
				t.Fatalf("a's view never showed %s: %+v", what, a.known)
			}
		}
	}

	// b joins: a's watcher signals and its view names b.
	require.NoError(t, b.join(ctx, memberData{ID: "b", Applied: 5}, time.Second))
	reloaded(func() bool { return a.known["b"].Applied == 5 }, "b joined")

	// b publishes new data: a's data watch delivers it.
	require.NoError(t, b.publish(ctx, memberData{ID: "b", Applied: 9}))
	reloaded(func() bool { return a.known["b"].Applied == 9 }, "b's new data")

	// A third process with b's id: b is alive, so it is a duplicate.
	cb2 := viewClient(t, ens)
	b2 := newMembership(cb2, dir, "b", testLogger(t))
	defer b2.close(ctx)
	err := b2.join(ctx, memberData{ID: "b"}, 300*time.Millisecond)
	require.ErrorIs(t, err, ErrDuplicateID)

	// b leaves (session closed): the duplicate may now join; a sees b's
	// node go and come back with b2's data.
	cb.Close()
	require.NoError(t, b2.join(ctx, memberData{ID: "b", Applied: 11}, 10*time.Second))
	reloaded(func() bool { return a.known["b"].Applied == 11 }, "b2 joined")
	require.Len(t, a.snapshot(), 2)

	// A node of our id created in our own session (lost answer) is adopted,
	// and the registration writes our data into it.
	cc := viewClient(t, ens)
	_, err = cc.Conn().Create(dir+"/c", nil, zk.FlagEphemeral, acl)
	require.NoError(t, err)
	c := newMembership(cc, dir, "c", testLogger(t))
	defer c.close(ctx)
	require.NoError(t, c.join(ctx, memberData{ID: "c", Applied: 2}, time.Second))
	require.NoError(t, c.publish(ctx, memberData{ID: "c", Applied: 3}))
	got, err := readMembers(ca.Conn(), dir)
	require.NoError(t, err)
	require.Equal(t, uint64(3), got["c"].Applied)

	// A resigned member is gone from the others' views, and its
	// registration writes nothing more.
	require.NoError(t, c.resign(ctx))
	reloaded(func() bool { _, ok := a.known["c"]; return !ok }, "c left")
	require.Error(t, c.publish(ctx, memberData{ID: "c", Applied: 4}))
}

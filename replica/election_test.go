package replica

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/zkx"
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
	require.Eventually(t, func() bool { return conn.State() == zk.StateHasSession }, 10*time.Second, 5*time.Millisecond, "zk session")
	return conn
}

type quietZK struct{}

func (quietZK) Printf(string, ...any) {}

// The election's mechanism (protected create, line order, predecessor
// watch, stray nodes) is the election recipe's and is tested there
// (recipe/election: TestProtectedCreate, TestForeignCandidates, ...); this
// test checks the replica's use of it.
func TestElectionComponent(t *testing.T) {
	ens := sharedEnsemble(t)
	dir := "/el-" + newGUID()[:8]
	ctx := context.Background()

	const n = 3
	clients := make([]*logroom.Client, n)
	els := make([]*election, n)
	views := make([]electionView, n)
	for i := range els {
		clients[i] = viewClient(t, ens)
		if i == 0 { // the replica's Open creates the directory (the line never does: KeepDir)
			require.NoError(t, zkx.EnsurePath(ctx, clients[0], dir))
		}
		var err error
		els[i], err = newElection(clients[i], dir, fmt.Sprint("m", i), fmt.Sprintf("127.0.0.1:%d", 9000+i), testLogger(t))
		require.NoError(t, err)
		defer els[i].close()
	}
	for i := range els {
		v, err := els[i].evaluate(ctx)
		require.NoError(t, err)
		views[i] = v
	}
	require.True(t, views[0].leader)
	require.False(t, views[1].leader)
	require.False(t, views[2].leader)
	require.NotNil(t, views[1].watch)
	require.Equal(t, els[0].line.Node(), views[1].cands[0].Node)
	low, ok := views[2].lowest()
	require.True(t, ok)
	require.Equal(t, "m0", low.ID)
	require.Equal(t, "127.0.0.1:9000", string(low.Data), "the candidate's data is its advertised address")

	// Deleting the leader fires only its successor's watch.
	require.NoError(t, els[0].resign(ctx))
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
	v, err := els[1].evaluate(ctx)
	require.NoError(t, err)
	require.True(t, v.leader)

	// Re-queue moves a candidate to the back.
	require.NoError(t, els[1].requeue(ctx))
	v, err = els[2].evaluate(ctx)
	require.NoError(t, err)
	require.True(t, v.leader)
	v, err = els[1].evaluate(ctx)
	require.NoError(t, err)
	require.False(t, v.leader)
	require.Equal(t, 1, v.mine)

	// A candidate whose address does not parse is foreign to every
	// replica (acceptCandidate), and not in the line.
	forger := viewClient(t, ens)
	bad, err := forger.Conn().Create(dir+"/c-"+newGUID()+"-", encode(candidateData{V: 1, ID: "mallory", Addr: "no port here"}),
		zk.FlagEphemeral|zk.FlagSequence, forger.ACL())
	require.NoError(t, err)
	v, err = els[2].evaluate(ctx)
	require.NoError(t, err)
	require.Len(t, v.cands, 2)
	fr := els[2].foreign()
	require.Len(t, fr, 1)
	require.Equal(t, bad, fr[0].Path)
	require.Contains(t, fr[0].Reason, "bad advertised addr")

	// Session loss (close) removes the candidate; the next takes over.
	clients[2].Close()
	require.Eventually(t, func() bool {
		v, err := els[1].evaluate(ctx)
		return err == nil && v.leader
	}, 10*time.Second, 5*time.Millisecond, "m1 leads after m2's session closed")
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

package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/election"
	"github.com/roomlog/roomlog/zkx"
)

// TestJoinGaveUpMidCreate: Join's ctx ends while its create is on the wire
// (the proxy delays every byte), so the create lands after Join returned
// its error. The late node is deleted: it does not stay in the shared
// client's session, lowest in the line, leaving nobody to lead.
func TestJoinGaveUpMidCreate(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	_, err := admin.Conn().Create(dir, nil, 0, admin.ACL())
	require.NoError(t, err)
	px := recipetest.DialProxiedSession(t, 6*time.Second)
	px.Proxy.Delay(300*time.Millisecond, 0)
	jctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	_, err = election.Join(jctx, election.Config{Client: px.Client, Dir: dir, ID: "late", Logger: recipetest.Logger(t)})
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// The create lands at the server about 300ms after it was sent (the
	// directory's child version counts it, deleted or not).
	recipetest.Eventually(t, 5*time.Second, "the late create lands", func() bool {
		_, st, err := admin.Conn().Exists(dir)
		require.NoError(t, err)
		return st.Cversion >= 1
	})
	b := join(t, recipetest.Dial(t, nil, 4*time.Second), dir, "b")
	bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
	defer bcancel()
	_, err = b.Await(bctx)
	require.NoError(t, err, "a candidate node left by the failed Join blocks the line")
	names, _, err := admin.Conn().Children(dir)
	require.NoError(t, err)
	require.Equal(t, []string{b.Node()}, names, "only b's node is left")
}

// dialDigest dials the shared ensemble with digest credentials: the
// client's nodes are readable by that user only.
func dialDigest(t *testing.T, user string) *zkx.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := zkx.Dial(ctx, zkx.DialConfig{Servers: recipetest.ZK(t).Addrs(), SessionTimeout: 4 * time.Second,
		Auth: &zkx.Digest{User: user, Password: user + "-secret"}})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// TestUnreadableCandidate: two clients with different digest credentials
// stand in a world-writable directory; neither can read the other's
// node, yet each must count it (its Stat needs no read permission): one
// leads, the other follows, and leads once the first resigns (woken by a
// children watch: ZooKeeper fires no watch on a node the client may not
// read).
func TestUnreadableCandidate(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	_, err := admin.Conn().Create(dir, nil, 0, admin.ACL()) // world: all
	require.NoError(t, err)
	a := join(t, dialDigest(t, "alice"), dir, "a")
	ta, err := a.Await(ctx)
	require.NoError(t, err)
	b := join(t, dialDigest(t, "bob"), dir, "b")
	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	tb, err := b.Await(bctx)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "b leads while a leads: b ignored a's unreadable node")
	require.Nil(t, tb)
	require.Equal(t, election.Follower, b.Role())
	require.Empty(t, b.Foreign(), "an unreadable ephemeral candidate is not foreign")
	require.NoError(t, a.Resign(ctx))
	tb, err = b.Await(ctx)
	require.NoError(t, err)
	require.Greater(t, tb.Token(), ta.Token())
}

// TestGraceBelowAThird: Validate refuses a SuspendGrace that is not below a
// third of the client's session timeout, naming both values.
func TestGraceBelowAThird(t *testing.T) {
	c := recipetest.Dial(t, nil, 6*time.Second)
	err := election.Config{Client: c, Dir: "/x", ID: "a", SuspendGrace: 2 * time.Second}.Validate()
	require.ErrorIs(t, err, election.ErrBadConfig)
	require.ErrorContains(t, err, "SuspendGrace 2s is not below a third of the client's session timeout 6s")
	require.NoError(t, election.Config{Client: c, Dir: "/x", ID: "a", SuspendGrace: 1999 * time.Millisecond}.Validate())
	require.NoError(t, election.Config{Client: c, Dir: "/x", ID: "a"}.Validate())
}

// TestForeignWriteEndsTerm: a foreign client writes the leader's node
// (SetData: version 1). Every guarded write would fail from then on, so
// the term ends at once with a named reason instead of staying Active.
func TestForeignWriteEndsTerm(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	a := join(t, recipetest.Dial(t, nil, 4*time.Second), dir, "a")
	term, err := a.Await(ctx)
	require.NoError(t, err)
	_, err = admin.Conn().Set(term.Node(), []byte("forged"), -1)
	require.NoError(t, err)
	select {
	case <-term.Done():
	case <-time.After(5 * time.Second):
		_, merr := term.Multi(ctx, &zk.CheckVersionRequest{Path: term.Node(), Version: 1})
		t.Fatalf("the term stays Active=%v after a foreign write; a guarded write gets: %v", term.Active(), merr)
	}
	require.ErrorIs(t, term.Err(), election.ErrLeadershipLost)
	require.ErrorContains(t, term.Err(), "node changed")
	require.False(t, term.Active())
	// a goes to the back with a new node and leads again from it.
	again, err := a.Await(ctx)
	require.NoError(t, err)
	require.Greater(t, again.Token(), term.Token())
	_, err = again.Multi(ctx, &zk.CheckVersionRequest{Path: again.Node(), Version: 0})
	require.NoError(t, err)
}

// TestGraceSurvivesWaitingWrites: with SuspendGrace, a disconnection shorter
// than the grace keeps the term even while guarded writes wait for the
// session: their wait must not take the reconnection event the term's own
// goroutine needs to stop its grace timer.
func TestGraceSurvivesWaitingWrites(t *testing.T) {
	ctx := recipetest.Ctx(t, 60*time.Second)
	p := recipetest.DialProxiedSession(t, 6*time.Second)
	a := join(t, p.Client, recipetest.Dir(t), "a", func(c *election.Config) { c.SuspendGrace = 1900 * time.Millisecond })
	term, err := a.Await(ctx)
	require.NoError(t, err)
	sid := p.SessionID()
	for round := range 3 {
		p.Proxy.Cut()
		recipetest.Eventually(t, 10*time.Second, "the client notices the cut", func() bool { return p.State() != zk.StateHasSession })
		const writers = 16
		errs := make(chan error, writers)
		for range writers {
			go func() {
				_, err := term.Multi(ctx, &zk.CheckVersionRequest{Path: term.Node(), Version: 0})
				errs <- err
			}()
		}
		p.Proxy.Heal()
		recipetest.Eventually(t, 10*time.Second, "the same session is back", func() bool {
			return p.State() == zk.StateHasSession && p.SessionID() == sid
		})
		for range writers {
			require.NoError(t, <-errs, "round %d", round)
		}
	}
	select {
	case <-term.Done():
		t.Fatalf("the term ended although the session came back within the grace: %v", term.Err())
	case <-time.After(3 * time.Second):
	}
	require.NoError(t, term.Err())
	require.True(t, term.Active())
	require.Same(t, term, a.Term())
}

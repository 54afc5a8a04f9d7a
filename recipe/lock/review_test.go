package lock_test

import (
	"context"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/lock"
	"github.com/roomlog/roomlog/zkx"
)

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

// TestUnreadableContender: two clients with different digest credentials
// contend in a world-writable directory; neither can read the other's
// node, yet each must count it (its Stat needs no read permission): only
// one holds the lock at a time, and the waiter behind an unreadable node
// is woken when it goes (by a children watch: ZooKeeper fires no watch on
// a node the client may not read).
func TestUnreadableContender(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	_, err := admin.Conn().Create(dir, nil, 0, admin.ACL()) // world: all
	require.NoError(t, err)
	a := newMutex(t, dialDigest(t, "alice"), dir, "a")
	b := newMutex(t, dialDigest(t, "bob"), dir, "b")
	la, err := a.Lock(ctx)
	require.NoError(t, err)
	got := make(chan *lock.Lease, 1)
	go func() {
		lb, err := b.Lock(ctx)
		if err != nil {
			t.Errorf("b.Lock: %v", err)
		}
		got <- lb
	}()
	select {
	case lb := <-got:
		require.Nil(t, lb, "b failed")
		t.Fatal("b holds the lock while a holds it: b ignored a's unreadable node")
	case <-time.After(2 * time.Second):
	}
	c, ok, err := b.Holder(ctx)
	require.NoError(t, err)
	require.True(t, ok, "b sees a holder")
	require.Equal(t, la.Path(), dir+"/"+c.Name)
	require.Empty(t, b.Foreign(), "an unreadable ephemeral contender is not foreign")
	require.NoError(t, la.Unlock(ctx))
	select {
	case lb := <-got:
		require.NotNil(t, lb, "b failed")
		require.Greater(t, lb.Token(), la.Token())
		require.NoError(t, lb.Unlock(ctx))
	case <-time.After(10 * time.Second):
		t.Fatal("b did not get the lock after a unlocked")
	}
}

// TestGraceSurvivesWaitingWrites: with SuspendGrace, a disconnection shorter
// than the grace keeps the lease even while guarded writes wait for the
// session: their wait must not take the reconnection event the lease's
// own goroutine needs to stop its grace timer.
func TestGraceSurvivesWaitingWrites(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	p := recipetest.DialProxiedSession(t, 6*time.Second)
	m, err := lock.New(ctx, lock.Config{Client: p.Client, Dir: dir, SuspendGrace: 1900 * time.Millisecond, Logger: recipetest.Logger(t)})
	require.NoError(t, err)
	defer func() { require.NoError(t, m.Close(ctx)) }()
	l, err := m.Lock(ctx)
	require.NoError(t, err)
	sid := p.SessionID()
	for round := range 3 {
		p.Proxy.Cut()
		recipetest.Eventually(t, 10*time.Second, "the client notices the cut", func() bool { return p.State() != zk.StateHasSession })
		const writers = 16
		errs := make(chan error, writers)
		for range writers {
			go func() {
				_, err := l.Multi(ctx, &zk.CheckVersionRequest{Path: l.Path(), Version: 0})
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
	case <-l.Done():
		t.Fatalf("the lease ended although the session came back within the grace: %v", l.Err())
	case <-time.After(3 * time.Second):
	}
	require.NoError(t, l.Err())
	require.True(t, l.Active())
	require.NoError(t, l.Unlock(ctx))
}

// TestGraceBelowAThird: Validate refuses a SuspendGrace that is not below a
// third of the client's session timeout, naming both values.
func TestGraceBelowAThird(t *testing.T) {
	c := recipetest.Dial(t, nil, 6*time.Second)
	err := lock.Config{Client: c, Dir: "/x", SuspendGrace: 2 * time.Second}.Validate()
	require.ErrorIs(t, err, lock.ErrBadConfig)
	require.ErrorContains(t, err, "SuspendGrace 2s is not below a third of the client's session timeout 6s")
	require.NoError(t, lock.Config{Client: c, Dir: "/x", SuspendGrace: 1999 * time.Millisecond}.Validate())
	require.NoError(t, lock.Config{Client: c, Dir: "/x"}.Validate())
}

// TestDeletedDirRecreated: the lock's directory is deleted (by an
// operator, or a cleanup) between two leases; the next Lock re-creates
// it instead of failing forever.
func TestDeletedDirRecreated(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	m := newMutex(t, recipetest.Dial(t, nil, 4*time.Second), dir, "a")
	l, err := m.Lock(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, admin.Conn().Delete(dir, -1))
	lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err = m.Lock(lctx)
	require.NoError(t, err)
	ok, _, err := admin.Conn().Exists(l.Path())
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, l.Unlock(ctx))
}

// TestForeignWriteEndsLease: a foreign client writes the holder's node
// (SetData: version 1). Every guarded write would fail from then on, so
// the lease ends at once with a named reason instead of staying Active.
func TestForeignWriteEndsLease(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	m := newMutex(t, recipetest.Dial(t, nil, 4*time.Second), dir, "a")
	l, err := m.Lock(ctx)
	require.NoError(t, err)
	_, err = admin.Conn().Set(l.Path(), []byte("forged"), -1)
	require.NoError(t, err)
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		_, merr := l.Multi(ctx, &zk.CheckVersionRequest{Path: l.Path(), Version: 1})
		t.Fatalf("the lease stays Active=%v after a foreign write; a guarded write gets: %v", l.Active(), merr)
	}
	require.ErrorIs(t, l.Err(), lock.ErrLockLost)
	require.ErrorContains(t, l.Err(), "node changed")
	require.False(t, l.Active())
	require.ErrorIs(t, l.Unlock(ctx), lock.ErrLockLost)
}

package lock_test

import (
	"context"
	"testing"
	"time"

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

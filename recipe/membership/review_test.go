package membership_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/membership"
)

// TestSuspendedDuringRefresh: the watcher's link goes down while it is
// re-reading the directory (every byte is delayed, so a refresh of many
// members is long) and comes back in the same session before that refresh
// ends. The watcher still reports Suspended then Reconnected: the
// disconnection is not lost to the refresh's own wait for the session.
func TestSuspendedDuringRefresh(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	_, err := admin.Conn().Create(dir, nil, 0, admin.ACL())
	require.NoError(t, err)
	const members = 30
	for i := range members {
		_, err := admin.Conn().Create(fmt.Sprintf("%s/m%02d", dir, i), nil, zk.FlagEphemeral, admin.ACL())
		require.NoError(t, err)
	}
	p := recipetest.DialProxiedSession(t, 6*time.Second)
	rec := newRecorder()
	w, err := membership.Watch(ctx, p.Client, dir, rec.options())
	require.NoError(t, err)
	defer w.Close()
	require.Len(t, w.Members(), members)
	sid := p.SessionID()

	p.Proxy.Delay(20*time.Millisecond, 0) // a refresh: 31 round trips of 40ms
	up := p.Proxy.Stats().BytesUp
	_, err = admin.Conn().Create(dir+"/new", nil, zk.FlagEphemeral, admin.ACL())
	require.NoError(t, err)
	// The watch fires and the refresh starts: its first requests go up.
	recipetest.Eventually(t, 10*time.Second, "the refresh starts", func() bool { return p.Proxy.Stats().BytesUp > up+100 })
	p.Proxy.Cut()
	recipetest.Eventually(t, 10*time.Second, "the client notices the cut", func() bool { return p.State() != zk.StateHasSession })
	p.Proxy.Heal()
	recipetest.Eventually(t, 10*time.Second, "the same session is back", func() bool {
		return p.State() == zk.StateHasSession && p.SessionID() == sid
	})
	recipetest.Eventually(t, 10*time.Second, "the new member is seen", func() bool { return len(w.Members()) == members+1 })
	recipetest.Eventually(t, 5*time.Second, "suspended then reconnected", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return slices.Equal(rec.sessions, []membership.SessionEvent{membership.Suspended, membership.Reconnected})
	})
	require.False(t, w.Stale())
	rec.check(t)
}

// TestDeletedDirRebuilt: the member node and its directory are deleted at
// once (one Multi, by an operator); the registration re-creates both.
func TestDeletedDirRebuilt(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	c := recipetest.Dial(t, nil, 4*time.Second)
	r, err := membership.Join(ctx, c, dir, "a", []byte("x"), membership.JoinOptions{Logger: recipetest.Logger(t)})
	require.NoError(t, err)
	defer r.Leave(ctx)
	_, err = admin.Conn().Multi(&zk.DeleteRequest{Path: r.Path(), Version: -1}, &zk.DeleteRequest{Path: dir, Version: -1})
	require.NoError(t, err)
	recipetest.Eventually(t, 5*time.Second, "the member node is back", func() bool {
		ok, st, err := admin.Conn().Exists(r.Path())
		require.NoError(t, err)
		return ok && st.EphemeralOwner == c.SessionID()
	})
	recipetest.Eventually(t, 5*time.Second, "registered again", r.Registered)
	require.Equal(t, 1, r.Rebuilds())
	require.NoError(t, r.Err())
}

// TestMatesExcludeSelf: Members is every member, the caller's own
// included; Mates is the others only (the seed's GetOriginMates): the
// members held by another session than the watcher's client's.
func TestMatesExcludeSelf(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	a := recipetest.Dial(t, nil, 4*time.Second)
	b := recipetest.Dial(t, nil, 4*time.Second)
	ra, err := membership.Join(ctx, a, dir, "a", nil, membership.JoinOptions{})
	require.NoError(t, err)
	defer ra.Leave(ctx)
	rb, err := membership.Join(ctx, b, dir, "b", nil, membership.JoinOptions{})
	require.NoError(t, err)
	defer rb.Leave(ctx)
	w, err := membership.Watch(ctx, a, dir, membership.WatchOptions{})
	require.NoError(t, err)
	defer w.Close()
	require.Equal(t, []string{"a", "b"}, ids(w.Members()))
	require.Equal(t, []string{"b"}, ids(w.Mates()))
	wb, err := membership.Watch(ctx, b, dir, membership.WatchOptions{})
	require.NoError(t, err)
	defer wb.Close()
	require.Equal(t, []string{"a"}, ids(wb.Mates()))
}

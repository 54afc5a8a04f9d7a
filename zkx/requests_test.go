package zkx

import (
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
)

// TestRequests runs the Requester helpers on a Client and on Plain: reads,
// watches, Sync, and EnsurePath under digest ACLs.
func TestRequests(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	ctx := testCtx(t, 60*time.Second)
	alice, err := Dial(ctx, DialConfig{Servers: e.Addrs(), Auth: &Digest{User: "alice", Password: "a"}})
	require.NoError(t, err)
	defer alice.Close()
	bob, err := Dial(ctx, DialConfig{Servers: e.Addrs(), Auth: &Digest{User: "bob", Password: "b"}})
	require.NoError(t, err)
	defer bob.Close()

	t.Run("ensure path, read, sync", func(t *testing.T) {
		require.NoError(t, EnsurePath(ctx, alice, "/a/b/c"))
		require.NoError(t, EnsurePath(ctx, alice, "/a/b/c"), "again: nothing to do")
		require.NoError(t, EnsurePath(ctx, alice, "/"), "the root needs nothing")
		require.NoError(t, EnsurePath(ctx, alice, "/a//b/"), "empty components are skipped")
		ok, st, err := Exists(ctx, alice, "/a/b/c")
		require.NoError(t, err)
		require.True(t, ok)
		require.Zero(t, st.DataLength)
		acl, _, err := alice.Conn().GetACL("/a/b/c")
		require.NoError(t, err)
		require.Equal(t, alice.ACL(), acl, "created with the client's ACL")
		names, err := Children(ctx, alice, "/a")
		require.NoError(t, err)
		require.Equal(t, []string{"b"}, names)
		data, _, err := Get(ctx, alice, "/a/b")
		require.NoError(t, err)
		require.Empty(t, data)
		require.NoError(t, Sync(ctx, alice, "/a"))
		_, _, err = Get(ctx, alice, "/a/none")
		require.ErrorIs(t, err, zk.ErrNoNode)
	})

	t.Run("watches", func(t *testing.T) {
		names, ch, err := ChildrenW(ctx, alice, "/a/b")
		require.NoError(t, err)
		require.Equal(t, []string{"c"}, names)
		ok, _, ech, err := ExistsW(ctx, alice, "/a/b/w")
		require.NoError(t, err)
		require.False(t, ok)
		_, err = alice.Conn().Create("/a/b/w", nil, 0, alice.ACL())
		require.NoError(t, err)
		require.Equal(t, zk.EventNodeChildrenChanged, (<-ch).Type)
		require.Equal(t, zk.EventNodeCreated, (<-ech).Type)
	})

	// A shared parent of alice's that bob may only traverse (READ for
	// all, every other permission alice's): bob can still ensure a path
	// through it when the component below exists, and below that creates
	// with his own ACL. A create-first EnsurePath fails here with
	// ErrNoAuth, since ZooKeeper checks CREATE on the parent before it
	// looks for the child.
	t.Run("digest: traverse a parent without CREATE", func(t *testing.T) {
		shared := append(zk.WorldACL(zk.PermRead), alice.ACL()...)
		_, err := alice.Conn().Create("/shared", nil, 0, shared)
		require.NoError(t, err)
		_, err = alice.Conn().Create("/shared/bobs", nil, 0, append(zk.WorldACL(zk.PermRead), bob.ACL()...))
		require.NoError(t, err)
		_, err = bob.Conn().Create("/shared/bobs", nil, 0, bob.ACL())
		require.ErrorIs(t, err, zk.ErrNoAuth, "ZooKeeper refuses the create before it sees the node exists")

		require.NoError(t, EnsurePath(ctx, bob, "/shared/bobs/room"))
		acl, _, err := bob.Conn().GetACL("/shared/bobs/room")
		require.NoError(t, err)
		require.Equal(t, bob.ACL(), acl)

		// Where bob really lacks CREATE, the refusal is returned.
		err = EnsurePath(ctx, bob, "/shared/other")
		require.ErrorIs(t, err, zk.ErrNoAuth)
		require.Contains(t, err.Error(), "/shared/other")
	})

	t.Run("plain connection", func(t *testing.T) {
		p := Plain(alice.Conn(), zk.WorldACL(zk.PermAll))
		require.NoError(t, EnsurePath(ctx, p, "/plain/x"))
		acl, _, err := alice.Conn().GetACL("/plain/x")
		require.NoError(t, err)
		require.Equal(t, zk.WorldACL(zk.PermAll), acl)
	})

	t.Run("closed client", func(t *testing.T) {
		c, err := Dial(ctx, DialConfig{Servers: e.Addrs()})
		require.NoError(t, err)
		c.Close()
		err = EnsurePath(ctx, c, "/closed/x")
		require.Error(t, err)
		require.ErrorIs(t, Translate("ensure", err), ErrClosed)
	})
}

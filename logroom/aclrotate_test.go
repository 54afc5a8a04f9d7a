package logroom

import (
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/tlsfiles"
	"github.com/roomlog/roomlog/zkx"
)

// TestRotateIdentity follows docs/tls.md's rotation of a member's
// certificate identity (CN=member-a to CN=member-a2) in an x509 room:
//
//  1. every member's ACLIdentities gets the new identity first: they
//     still open the room, whose ACL is the old list (before the fix:
//     ErrForeignACL, so nobody could follow docs/tls.md);
//  2. an operator sets the base and the room's tree to the configured
//     list (zkx.SetACL, zkx.SetACLTree): the new certificate opens the
//     room and reads a znode created before;
//  3. the old identity is taken out of the tree's ACL, then out of the
//     configurations: members with either list open the room, the old
//     certificate is refused by name.
//
// A room that grants an identity outside the configured list, or does
// not grant the member itself, is refused throughout (ErrForeignACL).
func TestRotateIdentity(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{TLS: &zkensemble.TLSOptions{}})
	ctx := testCtx(t, 90*time.Second)
	ca := e.TLSCA()
	dir := t.TempDir()
	srcA, idA := tlsMember(t, ca, dir, "member-a")
	_, idB := tlsMember(t, ca, dir, "member-b")
	srcA2, idA2 := tlsMember(t, ca, dir, "member-a2")
	_, idX := tlsMember(t, ca, dir, "intruder")
	dial := func(src *tlsfiles.Source, ids ...string) *Client {
		c, err := Dial(ctx, DialConfig{Servers: e.SecureAddrs(), SessionTimeout: 4 * time.Second, AnyServer: true,
			TLS: src, TLSServerName: "127.0.0.1", ACLIdentities: ids})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	open := func(c *Client) error {
		_, err := OpenRoom(ctx, c, "rot", RoomOptions{})
		return err
	}

	a := dial(srcA, idA, idB)
	require.NoError(t, open(a))
	r, err := OpenRoom(ctx, a, "rot", RoomOptions{})
	require.NoError(t, err)
	old := r.Path("members")
	_, err = a.Conn().Create(old, []byte("made before"), 0, a.ACL())
	require.NoError(t, err)

	// 1. The new identity in every configuration first.
	aBoth := dial(srcA, idA, idB, idA2)
	require.NoError(t, open(aBoth), "a member whose configuration adds an identity opens the room")
	a2 := dial(srcA2, idA, idB, idA2)
	require.ErrorIs(t, open(a2), zk.ErrNoAuth, "the base and the room do not grant the new certificate yet")

	// 2. The operator updates the base and the room's tree.
	require.NoError(t, zkx.SetACL(ctx, aBoth, DefaultBase, aBoth.ACL()))
	n, err := zkx.SetACLTree(ctx, aBoth, r.Path(), aBoth.ACL())
	require.NoError(t, err)
	require.GreaterOrEqual(t, n, 4)
	require.NoError(t, open(a2))
	b, _, err := a2.Conn().Get(old)
	require.NoError(t, err)
	require.Equal(t, "made before", string(b))
	err = open(a)
	require.ErrorIs(t, err, ErrForeignACL, "a member still configured without the new identity refuses a room granting it")
	require.ErrorContains(t, err, "is not a configured identity")

	// 3. The old identity out of the tree, then out of the configurations.
	a2New := dial(srcA2, idB, idA2)
	require.ErrorIs(t, open(a2New), ErrForeignACL, "the room still grants CN=member-a, which the new list drops")
	require.NoError(t, zkx.SetACL(ctx, a2New, DefaultBase, a2New.ACL()))
	_, err = zkx.SetACLTree(ctx, a2New, r.Path(), a2New.ACL())
	require.NoError(t, err)
	require.NoError(t, open(a2New))
	require.NoError(t, open(a2), "a configuration still listing the old identity opens the room")
	require.ErrorIs(t, open(aBoth), zk.ErrNoAuth, "the old certificate is no longer granted")
	// Readable by the member but not granting it all: refused by name.
	require.NoError(t, zkx.SetACL(ctx, a2New, DefaultBase, append(a2New.ACL(), zkx.X509ACL(zk.PermAll, idA)...)))
	require.NoError(t, zkx.SetACL(ctx, a2New, r.Path(), append(a2New.ACL(), zkx.X509ACL(zk.PermRead, idA)...)))
	err = open(aBoth)
	require.ErrorIs(t, err, ErrForeignACL)
	require.ErrorContains(t, err, "no entry grants this client")

	// A room granting someone outside the configured list is refused.
	require.NoError(t, zkx.SetACL(ctx, a2New, r.Path(), append(a2New.ACL(), zkx.X509ACL(zk.PermRead, idX)...)))
	err = open(a2New)
	require.ErrorIs(t, err, ErrForeignACL)
	require.ErrorContains(t, err, "is not a configured identity")
}

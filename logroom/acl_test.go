package logroom

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
)

// aclDial dials with optional digest credentials.
func aclDial(t *testing.T, servers []string, auth *Digest) *Client {
	t.Helper()
	c, err := Dial(testCtx(t, 30*time.Second), DialConfig{Servers: servers, Auth: auth})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// aclWalk calls fn for root and every znode below it.
func aclWalk(t *testing.T, conn *zk.Conn, root string, fn func(path string)) {
	t.Helper()
	fn(root)
	kids, _, err := conn.Children(root)
	require.NoError(t, err, root)
	slices.Sort(kids)
	for _, k := range kids {
		aclWalk(t, conn, root+"/"+k, fn)
	}
}

// aclSnapshot records data, data version and child version of every znode
// under root.
func aclSnapshot(t *testing.T, conn *zk.Conn, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	aclWalk(t, conn, root, func(p string) {
		data, st, err := conn.Get(p)
		require.NoError(t, err, p)
		out[p] = fmt.Sprintf("v%d cv%d %x", st.Version, st.Cversion, data)
	})
	return out
}

// requireNoAuth requires err to be ZooKeeper's permission error.
func requireNoAuth(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, "%s: an unauthorised client succeeded", what)
	require.True(t, errors.Is(err, zk.ErrNoAuth), "%s: want zk.ErrNoAuth, got %v", what, err)
}

// TestDigestACLDeniesOthers: a room created with digest credentials
// carries exactly that digest ACL on every znode (base path included), and
// clients without the credentials, with a wrong password or as another user
// get zk.ErrNoAuth on every read and write: reading a batch, listing,
// creating a batch or a channel, setting the epoch or a channel's meta,
// deleting, changing an ACL, a fenced Multi, and OpenRoom itself. The room
// is unchanged afterwards and its writer and readers carry on.
func TestDigestACLDeniesOthers(t *testing.T) {
	e := sharedZK(t)
	ctx := testCtx(t, 60*time.Second)
	cred := &Digest{User: "alice", Password: "s3cret"}
	owner := aclDial(t, e.Addrs(), cred)
	base := testBase(t)
	r, err := OpenRoom(ctx, owner, "vault", RoomOptions{Base: base})
	require.NoError(t, err)
	w := newWriter(t, r, WriterConfig{Owner: "alice-writer"})
	for i := 1; i <= 10; i++ {
		_, err := w.Append(ctx, payload(i))
		require.NoError(t, err)
	}
	_, err = w.Rotate(ctx)
	require.NoError(t, err)
	last, err := w.Append(ctx, payload(11), payload(12), payload(13))
	require.NoError(t, err)
	require.Equal(t, uint64(13), last)

	want := zk.DigestACL(zk.PermAll, cred.User, cred.Password)
	require.Equal(t, want, owner.ACL())
	var audited []string
	aclWalk(t, owner.Conn(), base, func(p string) {
		acl, _, err := owner.Conn().GetACL(p)
		require.NoError(t, err, p)
		require.Equal(t, want, acl, "ACL of %s", p)
		audited = append(audited, p)
	})
	for _, p := range []string{base, r.Path(), r.Path(epochNode), r.Path(channelsNode), r.channelPath(1),
		r.channelPath(2), r.batchPath(1, 1), r.batchPath(2, 11)} {
		require.Contains(t, audited, p)
	}

	before := aclSnapshot(t, owner.Conn(), r.Path())
	epochData, epochStat, err := owner.Conn().Get(r.Path(epochNode))
	require.NoError(t, err)

	intruders := []struct {
		name string
		auth *Digest
	}{
		{"no credentials", nil},
		{"wrong password", &Digest{User: "alice", Password: "guess"}},
		{"another user", &Digest{User: "mallory", Password: "s3cret"}},
	}
	for _, in := range intruders {
		t.Run(in.name, func(t *testing.T) {
			ic := aclDial(t, e.Addrs(), in.auth)
			conn := ic.Conn()
			_, _, err := conn.Get(r.batchPath(1, 1))
			requireNoAuth(t, err, "read a batch")
			_, _, err = conn.Get(r.Path(epochNode))
			requireNoAuth(t, err, "read the epoch")
			_, _, err = conn.Get(r.channelPath(2))
			requireNoAuth(t, err, "read a channel's meta")
			_, _, err = conn.Children(r.channelPath(2))
			requireNoAuth(t, err, "list a channel")
			_, _, err = conn.Children(r.Path(channelsNode))
			requireNoAuth(t, err, "list the channels")
			_, _, err = conn.Children(base)
			requireNoAuth(t, err, "list the base")

			evil, err := EncodeBatch(99, 14, [][]byte{[]byte("evil")})
			require.NoError(t, err)
			_, err = conn.Create(r.batchPath(2, 14), evil, 0, zk.WorldACL(zk.PermAll))
			requireNoAuth(t, err, "create a batch in the open channel")
			_, err = conn.Create(r.channelPath(3), encodeMeta(channelMeta{Version: channelFormatVersion, First: 14, Epoch: 99}),
				0, zk.WorldACL(zk.PermAll))
			requireNoAuth(t, err, "create a channel")
			_, err = conn.Create(r.Path("members"), nil, 0, zk.WorldACL(zk.PermAll))
			requireNoAuth(t, err, "create a child of the room")
			_, err = conn.Set(r.Path(epochNode), encodeMeta(epochMeta{Version: epochFormatVersion, Epoch: 99, Owner: "mallory"}), -1)
			requireNoAuth(t, err, "set the epoch")
			_, err = conn.Set(r.channelPath(1), []byte("junk"), -1)
			requireNoAuth(t, err, "set a channel's meta")
			err = conn.Delete(r.batchPath(2, 11), -1)
			requireNoAuth(t, err, "delete a batch")
			_, err = conn.SetACL(r.Path(epochNode), zk.WorldACL(zk.PermAll), -1)
			requireNoAuth(t, err, "open the epoch's ACL")
			_, err = multiErr(conn.Multi(
				&zk.CheckVersionRequest{Path: r.Path(epochNode), Version: epochStat.Version},
				&zk.CreateRequest{Path: r.batchPath(2, 14), Data: evil, Acl: zk.WorldACL(zk.PermAll)}))
			requireNoAuth(t, err, "a fenced Multi with the right epoch version")

			_, err = OpenRoom(ctx, ic, "vault", RoomOptions{Base: base})
			requireNoAuth(t, err, "OpenRoom")
			_, err = OpenRoom(ctx, ic, "squatter", RoomOptions{Base: base})
			requireNoAuth(t, err, "OpenRoom of a new room under the protected base")
		})
	}

	require.Equal(t, before, aclSnapshot(t, owner.Conn(), r.Path()), "an unauthorised client changed the room")
	data, st, err := owner.Conn().Get(r.Path(epochNode))
	require.NoError(t, err)
	require.Equal(t, epochData, data)
	require.Equal(t, epochStat.Version, st.Version)
	infos, err := r.Channels(ctx)
	require.NoError(t, err)
	require.Len(t, infos, 2)
	require.Equal(t, ChannelInfo{Num: 1, FirstIndex: 1, LastIndex: 10, Epoch: 1, Sealed: true, Bytes: infos[0].Bytes, Batches: 10, RoomVersion: 1}, infos[0])

	// The owner's writer was not fenced, and a reader gets everything.
	last, err = w.Append(ctx, payload(14))
	require.NoError(t, err)
	require.Equal(t, uint64(14), last)
	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	defer rd.Close()
	got := readN(t, ctx, rd, 14)
	for i, en := range got {
		require.Equal(t, payload(i+1), en.Data)
		require.Equal(t, uint64(1), en.Epoch)
	}
}

// TestDigestClientRefusesOpenRoom: a client with digest credentials does
// not adopt a room somebody created without them (its room, epoch and
// channels znodes world-writable: anyone could fence its writer or add
// channels): OpenRoom fails with ErrForeignACL and writes nothing.
func TestDigestClientRefusesOpenRoom(t *testing.T) {
	e := sharedZK(t)
	ctx := testCtx(t, 30*time.Second)
	base := testBase(t)
	squatter := aclDial(t, e.Addrs(), nil)
	sq, err := OpenRoom(ctx, squatter, "ns1", RoomOptions{Base: base})
	require.NoError(t, err)
	before := aclSnapshot(t, squatter.Conn(), sq.Path())

	owner := aclDial(t, e.Addrs(), &Digest{User: "alice", Password: "s3cret"})
	_, err = OpenRoom(ctx, owner, "ns1", RoomOptions{Base: base})
	require.ErrorIs(t, err, ErrForeignACL)
	require.Contains(t, err.Error(), "znode "+sq.Path()+" has ACL")
	require.Equal(t, before, aclSnapshot(t, squatter.Conn(), sq.Path()), "the refused OpenRoom wrote")

	// And a room of its own next to it is protected.
	r, err := OpenRoom(ctx, owner, "ns2", RoomOptions{Base: base})
	require.NoError(t, err)
	_, _, err = squatter.Conn().Get(r.Path(epochNode))
	requireNoAuth(t, err, "read the epoch of the owner's room")
}

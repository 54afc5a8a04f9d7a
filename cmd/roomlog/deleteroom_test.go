package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
)

// TestDeleteRoom: delete-room on a real ZooKeeper. A missing room exits 4;
// a room with a live member is refused (exit 1, the member named, nothing
// deleted) unless --force; without --yes the room's name is asked for on
// stdin and anything else deletes nothing; a stopped room is deleted, and
// its member then refuses to start (its room is gone).
func TestDeleteRoom(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	const base = "/del"
	ctx := testCtx(t, 90*time.Second)
	cl := newCLI(t, e, base)
	c := dialZK(t, e, nil)
	setStdin := func(s string) {
		old := stdin
		stdin = strings.NewReader(s)
		t.Cleanup(func() { stdin = old })
	}

	code, _, errs := cl.run("delete-room", "nosuch", "--yes")
	require.Equal(t, exitNoRoom, code, errs)

	open := func(room, id string) (*replica.Replica, replica.Config) {
		cfg := replica.Config{Servers: e.Addrs(), SessionTimeout: 2 * time.Second, Base: base, Room: room, ID: id,
			DataDir: t.TempDir(), ListenAddr: "127.0.0.1:0"}
		r, err := replica.Open(ctx, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { r.Close() })
		require.Eventually(t, func() bool { return r.Status().Role == replica.RolePrimary }, 30*time.Second, 10*time.Millisecond)
		_, err = r.Propose(ctx, opsEntry(t, "/k", "v"))
		require.NoError(t, err)
		return r, cfg
	}

	// A live member: refused by name, with or without --yes.
	r, cfg := open("live", "m0")
	code, out, errs := cl.run("delete-room", "live", "--yes")
	require.Equal(t, exitFail, code, errs)
	require.Empty(t, out)
	require.Contains(t, errs, "has live members (members/m0 (session 0x")
	require.Contains(t, errs, "--force")
	_, err := logroom.ReadRoomInfo(ctx, c, base, "live")
	require.NoError(t, err, "nothing deleted")

	// Stopped: asked for the name; a wrong answer or none deletes nothing.
	require.NoError(t, r.Close())
	setStdin("oops\n")
	code, _, errs = cl.run("delete-room", "live")
	require.Equal(t, exitFail, code, errs)
	require.Contains(t, errs, "Type the room's name to confirm")
	require.Contains(t, errs, `"oops" is not the room's name; nothing deleted`)
	setStdin("")
	code, _, errs = cl.run("delete-room", "live")
	require.Equal(t, exitFail, code, errs)
	require.Contains(t, errs, "no confirmation on stdin")
	_, err = logroom.ReadRoomInfo(ctx, c, base, "live")
	require.NoError(t, err, "nothing deleted")

	setStdin("live\n")
	var res deleteRoomOut
	cl.json(&res, "delete-room", "live")
	require.True(t, res.Deleted)
	require.Empty(t, res.Live)
	_, err = logroom.ReadRoomInfo(ctx, c, base, "live")
	require.ErrorIs(t, err, logroom.ErrNoRoom)
	_, err = replica.Open(ctx, cfg)
	require.ErrorIs(t, err, replica.ErrRoomLost, "the member's room is gone: it refuses")

	// --force deletes under a live member, which learns its room is gone.
	r2, _ := open("forced", "m1")
	text := cl.ok("delete-room", "forced", "--force", "--yes", "--wait", "30s")
	require.Contains(t, text, "room forced deleted")
	_, err = logroom.ReadRoomInfo(ctx, c, base, "forced")
	require.ErrorIs(t, err, logroom.ErrNoRoom)
	require.Eventually(t, func() bool { return r2.Status().Role != replica.RolePrimary }, 30*time.Second, 50*time.Millisecond,
		"the primary of a deleted room stops leading")

	// Usage: --yes and --force belong to delete-room (and --force to acl).
	code, _, errs = cl.run("rooms", "--yes")
	require.Equal(t, exitUsage, code, errs)
}

package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/third_party/zk"
)

// TestRoomsListsLostRoom: a room replaced by a tombstone (a member found
// it missing) is listed as LOST with the tombstone's text, and every other
// room is listed too; the command succeeds. Before, the tombstone failed
// the whole command (exit 1) and hid the other rooms.
func TestRoomsListsLostRoom(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	c := dialZK(t, e, nil)
	ctx := testCtx(t, 30*time.Second)
	const base = "/roomslost"
	buildRoom(t, c, base, "alive", false)
	buildRoom(t, c, base, "zeta", false)
	require.NoError(t, logroom.WriteTombstone(ctx, c, base, "gone", "member m1 found the room missing; recover with roomlog reseed"))
	cl := newCLI(t, e, base)

	code, out, errs := cl.run("rooms")
	require.Equal(t, exitOK, code, "%s%s", out, errs)
	require.Contains(t, out, "alive")
	require.Contains(t, out, "zeta")
	require.Contains(t, out, "gone")
	require.Contains(t, out, "LOST")
	require.Contains(t, out, "found the room missing")

	var rows []roomRow
	cl.json(&rows, "rooms")
	require.Len(t, rows, 3)
	byName := map[string]roomRow{}
	for _, r := range rows {
		byName[r.Name] = r
	}
	require.True(t, byName["gone"].Lost)
	require.Contains(t, byName["gone"].Error, "found the room missing")
	require.False(t, byName["alive"].Lost)
	require.EqualValues(t, 2, byName["zeta"].Epoch)
}

// TestRoomsEmpty: on a ZooKeeper with no room (the base never created) and
// with an empty base, rooms prints an empty table (JSON: []) and exits 0.
// Before, a missing base failed the command with exit 1.
func TestRoomsEmpty(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	c := dialZK(t, e, nil)
	for _, base := range []string{"/never", "/emptybase"} {
		if base == "/emptybase" {
			_, err := c.Conn().Create(base, nil, 0, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
		}
		cl := newCLI(t, e, base)
		code, out, errs := cl.run("rooms")
		require.Equal(t, exitOK, code, "%s: %s%s", base, out, errs)
		require.Equal(t, []string{"ROOM", "CREATED", "EPOCH", "OWNER", "CHANNELS", "FIRST", "MEMBERS"}, strings.Fields(out), base)
		var rows []roomRow
		cl.json(&rows, "rooms")
		require.NotNil(t, rows, base)
		require.Empty(t, rows, base)
	}
}

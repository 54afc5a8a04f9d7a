package main

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/version"
)

// TestRoomVersionUsage needs no ZooKeeper: a version outside this
// binary's range and misplaced flags are refused before dialling.
func TestRoomVersionUsage(t *testing.T) {
	rng := fmt.Sprintf("knows room versions %d..%d", version.RoomMin, version.RoomMax)
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"room-version", "r", "--set", "7"}, "--set 7: this binary (" + version.Release + ") " + rng},
		{[]string{"room-version", "r", "--set", "0"}, "--set 0: this binary"},
		{[]string{"room-version", "r", "--set", "-1"}, "--set -1: this binary"},
		{[]string{"room-version", "r", "--set", "x"}, "invalid value"},
		{[]string{"room-version", "r", "--wait", "5s"}, "--wait applies to room-version --set only"},
		{[]string{"room-version", "r", "--set", "1", "--wait", "-1s"}, "--wait must be >= 0"},
		{[]string{"channels", "r", "--set", "1"}, "--set applies to room-version only"},
		{[]string{"room-version"}, "room-version takes 1 argument(s), got 0"},
		{[]string{"room-version", "a/b", "--set", "1"}, "contains '/'"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			// An address nothing listens on: a usage error never dials.
			code := run(append([]string{"--zk", "127.0.0.1:1", "--timeout", "100ms"}, tc.args...), &out, &errb)
			require.Equal(t, exitUsage, code, "stdout:\n%s\nstderr:\n%s", out.String(), errb.String())
			require.Contains(t, errb.String(), tc.msg)
			require.Empty(t, out.String())
		})
	}
	var out, errb bytes.Buffer
	require.Equal(t, exitOK, run([]string{"help"}, &out, &errb))
	require.Contains(t, out.String(), "room-version ROOM --set N [--wait DURATION]")
	require.Contains(t, out.String(), "Read-only, except\n'room-version --set'")
}

// TestRoomVersionCommand on real ZooKeeper with live replicas: the status
// shows the room at version 1 and each member's range; --set 2 with a
// member capped at 1 records the target but names that member as the
// reason, and --wait gives up with it (exit 1); without that member,
// --set 2 --wait reaches room version 2, complete.
func TestRoomVersionCommand(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	const base, room = "/rv", "ns1"
	open := func(id string, maxRV int) *replica.Replica {
		ctx := testCtx(t, 30*time.Second)
		r, err := replica.Open(ctx, replica.Config{
			Servers: e.Addrs(), SessionTimeout: 2 * time.Second, Base: base, Room: room, ID: id,
			DataDir: filepath.Join(t.TempDir(), id), ListenAddr: "127.0.0.1:0", MaxRoomVersion: maxRV,
		})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, r.Close()) })
		return r
	}
	reps := []*replica.Replica{open("m0", 0), open("m1", 0)}
	var primary *replica.Replica
	require.Eventually(t, func() bool {
		for _, r := range reps {
			if r.Status().Role == replica.RolePrimary {
				primary = r
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "a primary")
	ctx := testCtx(t, 2*time.Minute)
	propose := func(n int, tag string) {
		t.Helper()
		for i := range n {
			_, err := primary.Propose(ctx, opsEntry(t, fmt.Sprintf("/%s/f%d", tag, i), "inode"))
			require.NoError(t, err)
		}
	}
	propose(10, "v1")
	cl := newCLI(t, e, base)
	rng := fmt.Sprintf("%d..%d", version.RoomMin, version.RoomMax)

	// Status: version 1 since the room began, no target, complete, and
	// both members with this binary's range.
	var text string
	require.Eventually(t, func() bool {
		text = cl.ok("room-version", room)
		return strings.Count(text, rng) == 3 // the binary line and two members
	}, 20*time.Second, 20*time.Millisecond, "both members listed")
	require.Regexp(t, `(?m)^room:\s+ns1$`, text)
	require.Regexp(t, `(?m)^room version:\s+1 \(since the room began\)$`, text)
	require.Regexp(t, `(?m)^target:\s+none$`, text)
	require.Regexp(t, `(?m)^complete:\s+yes$`, text)
	require.Regexp(t, `(?m)^blocked:\s+-$`, text)
	require.Regexp(t, `(?m)^oldest channel:\s+room version 1$`, text)
	require.Regexp(t, `(?m)^ID\s+ROLE\s+APPLIED\s+ROOM VERSIONS$`, text)
	require.Regexp(t, `(?m)^`+primary.ID()+`\s+primary\s+\d+\s+`+rng+`$`, text)
	require.Regexp(t, `(?m)^m[01]\s+standby\s+\d+\s+`+rng+`$`, text)
	t.Logf("roomlog room-version %s:\n%s", room, text)

	// --json: the status with lower-case snake keys.
	var raw map[string]any
	cl.json(&raw, "room-version", room)
	require.ElementsMatch(t, []string{"room", "version", "since", "target", "blocked", "complete",
		"oldest_channel_version", "members"}, keys(raw))
	var js roomVersionOut
	cl.json(&js, "room-version", room)
	require.Equal(t, room, js.Room)
	require.Equal(t, 1, js.Version)
	require.Zero(t, js.Since)
	require.Zero(t, js.Target)
	require.True(t, js.Complete)
	require.Empty(t, js.Blocked)
	require.Equal(t, 1, js.OldestChannelVersion)
	require.Len(t, js.Members, 2)
	for i, m := range js.Members {
		require.Equal(t, fmt.Sprintf("m%d", i), m.ID)
		require.Equal(t, version.RoomMin, m.RoomVersionMin)
		require.Equal(t, version.RoomMax, m.RoomVersionMax)
		require.NotEmpty(t, m.Addr)
	}
	mkeys := keys(raw["members"].([]any)[0].(map[string]any))
	require.ElementsMatch(t, []string{"id", "addr", "role", "epoch", "applied", "room_version_min", "room_version_max"}, mkeys)

	// A member capped at room version 1: the target is recorded, the
	// status names the member, and --wait gives up with that reason.
	m2 := open("m2", 1)
	require.Eventually(t, func() bool {
		return strings.Contains(cl.ok("room-version", room), "m2") // its member znode is live
	}, 20*time.Second, 20*time.Millisecond, "m2 listed")
	require.Regexp(t, `(?m)^m2\s+standby\s+\d+\s+1\.\.1$`, cl.ok("room-version", room))
	start := time.Now()
	code, out, errs := cl.run("room-version", room, "--set", "2", "--wait", "2s")
	waited := time.Since(start)
	require.Equal(t, exitFail, code, "stdout:\n%s\nstderr:\n%s", out, errs)
	require.Contains(t, out, "room ns1: room version target set to 2 (was none); the room is at room version 1")
	require.Contains(t, out, "waiting: room version 1, target 2")
	require.Contains(t, errs, `roomlog room-version: room "ns1" did not reach room version 2 (complete) within 2s (--wait): at room version 1: `+
		"target room version 2 is not supported by live member(s) m2 (supports 1..1)")
	require.GreaterOrEqual(t, waited, 2*time.Second)
	require.Less(t, waited, 10*time.Second)
	t.Logf("roomlog room-version %s --set 2 --wait 2s (exit %d):\n%s%s", room, code, out, errs)
	text = cl.ok("room-version", room)
	require.Regexp(t, `(?m)^target:\s+2$`, text)
	require.Regexp(t, `(?m)^blocked:\s+target room version 2 is not supported by live member\(s\) m2 \(supports 1\.\.1\)$`, text)
	require.Regexp(t, `(?m)^complete:\s+no: the room is at room version 1, not the target 2$`, text)
	t.Logf("roomlog room-version %s (blocked):\n%s", room, text)
	js = roomVersionOut{}
	cl.json(&js, "room-version", room)
	require.Equal(t, 2, js.Target)
	require.Equal(t, 1, js.Version)
	require.False(t, js.Complete)
	require.Contains(t, js.Blocked, "m2 (supports 1..1)")
	// Without --wait: the target is recorded again and the reason shown.
	out = cl.ok("room-version", room, "--set", "2")
	require.Contains(t, out, "room version target set to 2 (was 2)")
	require.Contains(t, out, "blocked: target room version 2 is not supported by live member(s) m2 (supports 1..1)")
	require.Equal(t, 1, primary.Status().RoomVersion, "nothing moved the room past m2")

	// Without m2 the primary moves the room; --wait sees it reach room
	// version 2, complete (every member past the change, the channels of
	// room version 1 deleted).
	require.NoError(t, m2.Close())
	var set roomVersionSetOut
	cl.json(&set, "room-version", room, "--set", "2", "--wait", "60s")
	require.True(t, set.Reached, "%+v", set)
	require.Equal(t, 2, set.Set)
	require.Equal(t, 2, set.PreviousTarget)
	require.Equal(t, "1m0s", set.Wait)
	require.Equal(t, 2, set.Status.Version)
	require.True(t, set.Status.Complete)
	require.Positive(t, set.Status.Since)
	require.Empty(t, set.Status.Incomplete)
	// The channels of room version 1 go with the primary's deletion after
	// that checkpoint (complete does not wait for it when raising).
	require.Eventually(t, func() bool {
		js = roomVersionOut{}
		cl.json(&js, "room-version", room)
		return js.OldestChannelVersion == 2
	}, 30*time.Second, 50*time.Millisecond, "the channels of room version 1 deleted")
	text = cl.ok("room-version", room)
	require.Regexp(t, fmt.Sprintf(`(?m)^room version:\s+2 \(since index %d\)$`, set.Status.Since), text)
	require.Regexp(t, `(?m)^target:\s+2$`, text)
	require.Regexp(t, `(?m)^complete:\s+yes$`, text)
	require.Regexp(t, `(?m)^oldest channel:\s+room version 2$`, text)
	t.Logf("roomlog room-version %s (at 2):\n%s", room, text)
	// Text output of a wait that succeeds at once; the room keeps serving.
	out = cl.ok("room-version", room, "--set", "2", "--wait", "10s")
	require.Contains(t, out, fmt.Sprintf("room ns1 is at room version 2 since index %d, complete", set.Status.Since))
	propose(5, "v2")
	require.Eventually(t, func() bool { return primary.Status().RoomVersion == 2 }, 10*time.Second, 20*time.Millisecond)
}

// TestRoomVersionErrors: a missing room and a room with a digest ACL are
// named errors; --set needs the credentials and writes nothing without
// them; with them, it records the target under the room's ACL.
func TestRoomVersionErrors(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	owner := dialZK(t, e, &logroom.Digest{User: "ops", Password: "s3cret"})
	buildRoom(t, owner, "/secure", "locked", false)
	plain := dialZK(t, e, nil)
	buildRoom(t, plain, "/open", "r", false)

	// A missing room: nothing is created.
	for _, args := range [][]string{{"room-version", "nosuch"}, {"room-version", "nosuch", "--set", "2"}} {
		code, out, errs := newCLI(t, e, "/open").run(args...)
		require.Equal(t, exitNoRoom, code, "%q", args)
		require.Contains(t, errs, `roomlog room-version: logroom: no such room: room "nosuch" not found under /open`)
		require.Empty(t, out)
	}
	ok, _, err := plain.Conn().Exists("/open/nosuch")
	require.NoError(t, err)
	require.False(t, ok, "room-version --set created a missing room")

	// No credentials: the permission error names the way out, for the
	// status and for --set (which writes nothing).
	cl := newCLI(t, e, "/secure")
	for _, args := range [][]string{{"room-version", "locked"}, {"room-version", "locked", "--set", "2"}} {
		code, _, errs := cl.run(args...)
		require.Equal(t, exitDenied, code, "%q", args)
		require.Contains(t, errs, "zk: not authenticated")
		require.Contains(t, errs, "pass --zk-digest-file FILE holding user:password")
	}
	ok, _, err = owner.Conn().Exists("/secure/locked/version")
	require.NoError(t, err)
	require.False(t, ok)

	// With them: the target is recorded; no member is live, so no primary
	// moves the room.
	file := filepath.Join(t.TempDir(), "zk-digest")
	require.NoError(t, os.WriteFile(file, []byte("ops:s3cret\n"), 0o600))
	good := newCLI(t, e, "/secure", "--zk-digest-file", file)
	out := good.ok("room-version", "locked", "--set", "2")
	require.Contains(t, out, "room locked: room version target set to 2 (was none); the room is at room version 1")
	text := good.ok("room-version", "locked")
	require.Regexp(t, `(?m)^target:\s+2$`, text)
	require.Regexp(t, `(?m)^complete:\s+no: the room is at room version 1, not the target 2; no live member is primary \(only a primary moves the room\)$`, text)
	require.Contains(t, text, "no live members")
	acl, _, err := owner.Conn().GetACL("/secure/locked/version")
	require.NoError(t, err)
	require.Len(t, acl, 1)
	require.Equal(t, "digest", acl[0].Scheme, "the target has the room's digest ACL")
	require.True(t, strings.HasPrefix(acl[0].ID, "ops:"), acl[0].ID)
	code, _, errs := cl.run("room-version", "locked")
	require.Equal(t, exitDenied, code)
	require.Contains(t, errs, "not authenticated")

	// --wait on a room nothing moves: exit 1 naming the reason.
	code, out, errs = good.run("room-version", "locked", "--set", "2", "--wait", "1s")
	require.Equal(t, exitFail, code, "stdout:\n%s\nstderr:\n%s", out, errs)
	require.Contains(t, errs, "did not reach room version 2 (complete) within 1s (--wait): at room version 1: ")
	require.Contains(t, errs, "no live member is primary")
}

func keys(m map[string]any) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

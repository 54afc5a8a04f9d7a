package api_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
)

// TestStatusVersions: /v1/status names the master's binary (release,
// commit), the room version as the master sees it (version, since,
// target, why it is blocked, the range this master advertises) and each
// member's advertised range; the page shows them too.
func TestStatusVersions(t *testing.T) {
	p := newPair(t, api.Config{})
	p.primary.set(func(f *fakeMaster) {
		f.status.Version, f.status.Commit = "v0.2.0", "0123456789abcdef0123456789abcdef01234567+dirty"
		f.status.RoomVersion, f.status.RoomVersionSince, f.status.RoomVersionTarget = 1, 0, 2
		f.status.RoomVersionBlocked = `member "m2" supports 1..1`
		f.status.RoomVersionMin, f.status.RoomVersionMax = 1, 2
		f.status.Members[0].RoomVersionMin, f.status.Members[0].RoomVersionMax = 1, 2
		f.status.Members[1].RoomVersionMin, f.status.Members[1].RoomVersionMax = 1, 1
	})
	st := ok(t, get(t, p.primarySrv.URL, "/v1/status"))
	for k, v := range map[string]any{
		"version": "v0.2.0", "commit": "0123456789abcdef0123456789abcdef01234567+dirty",
		"room_version": num(1), "room_version_since": num(0), "room_version_target": num(2),
		"room_version_blocked": `member "m2" supports 1..1`, "room_version_min": num(1), "room_version_max": num(2),
	} {
		require.Contains(t, st, k)
		require.Equal(t, v, st[k], k)
	}
	members := st["members"].([]any)
	require.Len(t, members, 2)
	for i, want := range [][2]uint64{{1, 2}, {1, 1}} {
		m := members[i].(map[string]any)
		require.Equal(t, num(want[0]), m["room_version_min"], "member %d", i)
		require.Equal(t, num(want[1]), m["room_version_max"], "member %d", i)
	}

	page := string(get(t, p.primarySrv.URL, "/").raw)
	for _, want := range []string{"v0.2.0 (commit 0123456789abcdef0123456789abcdef01234567&#43;dirty), room versions 1..2", // html/template escapes +
		"1 (target 2, blocked: member &#34;m2&#34; supports 1..1)", `<td class="l">1..1</td>`} {
		require.Contains(t, page, want)
	}

	// At its target, and the fields every status carries, set or not.
	p.primary.set(func(f *fakeMaster) {
		f.status.RoomVersion, f.status.RoomVersionSince, f.status.RoomVersionTarget, f.status.RoomVersionBlocked = 2, 1234, 2, ""
	})
	st = ok(t, get(t, p.primarySrv.URL, "/v1/status"))
	require.Equal(t, num(2), st["room_version"])
	require.Equal(t, num(1234), st["room_version_since"])
	require.Equal(t, "", st["room_version_blocked"])
	page = string(get(t, p.primarySrv.URL, "/").raw)
	require.Contains(t, page, `<td class="l">2 (target 2)</td>`)
}

package replica

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/version"
)

// TestDecideRoomVersion: the primary moves the room only to a target every
// live member supports, one move at a time; everyone else says why not.
func TestDecideRoomVersion(t *testing.T) {
	mv := func(lo, hi int, applied uint64) memberVersions {
		return memberVersions{Lo: lo, Hi: hi, Applied: applied}
	}
	both := map[string]memberVersions{"a": mv(1, 2, 100), "b": mv(1, 2, 100)}
	old := map[string]memberVersions{"a": mv(1, 2, 100), "b": mv(1, 1, 100), "c": mv(1, 1, 100)}
	for _, tc := range []struct {
		name    string
		f       versionFacts
		move    int
		blocked string
	}{
		{"no target", versionFacts{Primary: true, Current: 1, Members: both}, 0, ""},
		{"at target", versionFacts{Primary: true, Current: 2, Target: 2, Members: both}, 0, ""},
		{"raise", versionFacts{Primary: true, Current: 1, Target: 2, Members: both}, 2, ""},
		{"lower", versionFacts{Primary: true, Current: 2, Target: 1, Members: both, MaxChannel: 2}, 1, ""},
		{"raise past an old member", versionFacts{Primary: true, Current: 1, Target: 2, Members: old}, 0,
			"target room version 2 is not supported by live member(s) b (supports 1..1), c (supports 1..1)"},
		{"lower below a new-only member", versionFacts{Primary: true, Current: 2, Target: 1, Members: map[string]memberVersions{"a": mv(1, 2, 0), "n": mv(2, 3, 0)}}, 0,
			"target room version 1 is not supported by live member(s) n (supports 2..3)"},
		{"standby", versionFacts{Current: 1, Target: 2, Members: both}, 0, "waiting for the primary to move the room to room version 2"},
		{"already moving", versionFacts{Primary: true, Current: 1, Target: 2, Members: both, Moving: true}, 0, "moving to room version 2"},
		{"lowering, old channels remain", versionFacts{Primary: true, Current: 1, Target: 1, Lowering: true, Since: 50, Members: both, MaxChannel: 2}, 0,
			"lowering to room version 1: channels of room version 2 remain (deleted once a checkpoint covers them and every member serves one); until then the room meta keeps binaries of v0.1.0 out"},
		{"lowering, a member behind", versionFacts{Primary: true, Current: 1, Target: 1, Lowering: true, Since: 150, Members: both, MaxChannel: 1}, 0,
			"lowering to room version 1: live member(s) a (applied 100), b (applied 100) have not applied past the change at index 150"},
		{"lowering ends", versionFacts{Primary: true, Current: 1, Target: 1, Lowering: true, Since: 101, Members: both, MaxChannel: 1}, 1, ""},
		{"lowering ends without a target", versionFacts{Primary: true, Current: 1, Lowering: true, Since: 101, Members: both, MaxChannel: 1}, 1, ""},
		{"lowering ends on the primary only", versionFacts{Current: 1, Target: 1, Lowering: true, Since: 101, Members: both, MaxChannel: 1}, 0,
			"waiting for the primary to move the room to room version 1"},
		{"raise again while lowering", versionFacts{Primary: true, Current: 1, Target: 2, Lowering: true, Since: 101, Members: both, MaxChannel: 2}, 2, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			move, blocked := decideRoomVersion(tc.f)
			require.Equal(t, tc.move, move)
			require.Equal(t, tc.blocked, blocked)
		})
	}
}

// TestRoomVersionNegotiated (issue 26) on real ZooKeeper: a target the
// live members do not all support is not reached and the status names
// the member; once it has gone, the primary raises the room version with
// a checkpoint, writes zstd, and a member capped below it is refused at
// Open by name; lowering it again completes (every member past the change,
// the earlier channels deleted) and the capped member joins and converges;
// a room moved past a running member's range fails that member by name.
func TestRoomVersionNegotiated(t *testing.T) {
	var mu sync.Mutex
	caps := map[string]int{"m2": 1}
	cl := newCluster(t, sharedEnsemble(t), func(cfg *Config) {
		mu.Lock()
		defer mu.Unlock()
		cfg.MaxRoomVersion = caps[cfg.ID]
		cfg.Writer.Compression = logroom.CompressionZstd
	})
	cl.openN(3)
	p := cl.waitPrimary(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	zc, err := logroom.Dial(ctx, logroom.DialConfig{Servers: cl.ens.Addrs()})
	require.NoError(t, err)
	defer zc.Close()

	write := func(n int, tag string) uint64 {
		t.Helper()
		var last uint64
		for i := range n {
			res, err := cl.proposeRetry(ctx, setOp(fmt.Sprintf("%s-%d", tag, i), tag))
			require.NoError(t, err)
			last = res.Index
		}
		return last
	}
	write(50, "v1")
	require.Equal(t, 1, p.Status().RoomVersion)
	require.Equal(t, 2, p.Status().RoomVersionMax)

	// m2 advertises 1..1: the target is not reached, and everyone says why.
	sctx, scancel := context.WithTimeout(ctx, 3*time.Second)
	err = p.SetRoomVersion(sctx, 2)
	scancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "m2 (supports 1..1)")
	rv, err := ReadRoomVersion(ctx, zc, "", cl.room)
	require.NoError(t, err)
	require.Equal(t, 1, rv.Version)
	require.Equal(t, 2, rv.Target)
	require.Contains(t, rv.Blocked, "m2 (supports 1..1)")
	require.False(t, rv.Complete)
	require.Contains(t, p.Status().RoomVersionBlocked, "m2")

	// Without m2's cap the primary raises it.
	cl.close("m2")
	mu.Lock()
	caps["m2"] = 0
	mu.Unlock()
	cl.open("m2")
	sctx, scancel = context.WithTimeout(ctx, 20*time.Second)
	require.NoError(t, p.SetRoomVersion(sctx, 2))
	scancel()
	last := write(50, "v2")
	cl.waitConverged(last, 30*time.Second)
	for _, r := range cl.all() {
		require.Eventually(t, func() bool { return r.Status().RoomVersion == 2 }, 10*time.Second, 20*time.Millisecond, r.ID())
	}
	rv, err = ReadRoomVersion(ctx, zc, "", cl.room)
	require.NoError(t, err)
	require.Equal(t, 2, rv.Version)
	require.Positive(t, rv.Since)
	require.Empty(t, rv.Blocked)
	channels, err := logroom.ListChannels(ctx, zc, "", cl.room)
	require.NoError(t, err)
	ch, err := logroom.ReadChannel(ctx, zc, "", cl.room, channels.Nums[len(channels.Nums)-1])
	require.NoError(t, err)
	require.Equal(t, 2, ch.RoomVersion, "the open channel was opened at room version 2")

	// A member capped at 1 is refused at Open, by name, before it applies
	// anything.
	mu.Lock()
	caps["m3"] = 1
	mu.Unlock()
	octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
	_, err = Open(octx, cl.config("m3"))
	ocancel()
	require.ErrorIs(t, err, ErrUnsupportedVersion)
	require.Contains(t, err.Error(), "room version 2")
	require.Contains(t, err.Error(), "1..1")

	// Lower it: complete once every member is past the change and the
	// channels of room version 2 are deleted.
	sctx, scancel = context.WithTimeout(ctx, 20*time.Second)
	require.NoError(t, p.SetRoomVersion(sctx, 1))
	scancel()
	last = write(20, "back")
	require.Eventually(t, func() bool {
		rv, err = ReadRoomVersion(ctx, zc, "", cl.room)
		return err == nil && rv.Complete
	}, 30*time.Second, 50*time.Millisecond, "downgrade completes: %+v %v", rv, err)
	require.Equal(t, 1, rv.Version)
	require.Equal(t, 1, rv.OldestChannelVersion)
	m3 := cl.open("m3")
	last = write(20, "m3")
	cl.waitConverged(last, 30*time.Second)
	require.Equal(t, 1, m3.Status().RoomVersionMax)

	// A room meta moved past a running member's range with no channel to
	// match (a forged meta: no rotation wrote it) is reported, not obeyed:
	// one foreign write must not stop the room.
	root := logroom.RoomPath(logroom.DefaultBase, cl.room)
	raw, _, err := zc.Conn().Get(root)
	require.NoError(t, err)
	var meta map[string]any
	require.NoError(t, msgpack.Unmarshal(raw, &meta))
	meta["v"], meta["room"] = 2, version.RoomMax
	forged, err := msgpack.Marshal(meta)
	require.NoError(t, err)
	_, err = zc.Conn().Set(root, forged, -1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return strings.Contains(m3.Status().RoomVersionBlocked, "written by another client") },
		10*time.Second, 20*time.Millisecond, "m3 reports the forged meta: %q", m3.Status().RoomVersionBlocked)
	require.NotEqual(t, RoleFailed, m3.Status().Role)

	// With the open channel at room version 2 as well, the log holds what
	// m3 (capped at 1) does not read: it fails by name.
	channels, err = logroom.ListChannels(ctx, zc, "", cl.room)
	require.NoError(t, err)
	chPath := logroom.RoomPath(logroom.DefaultBase, cl.room, "channels", logroom.ChannelName(channels.Nums[len(channels.Nums)-1]))
	raw, _, err = zc.Conn().Get(chPath)
	require.NoError(t, err)
	var cm map[string]any
	require.NoError(t, msgpack.Unmarshal(raw, &cm))
	cm["room"] = 2
	forged, err = msgpack.Marshal(cm)
	require.NoError(t, err)
	_, err = zc.Conn().Set(chPath, forged, -1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return m3.Status().Role == RoleFailed }, 10*time.Second, 20*time.Millisecond)
	require.ErrorIs(t, m3.Status().Err, ErrUnsupportedVersion)
}

package main

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/third_party/zk"
)

// TestMembersDeposed: a live member whose data still says primary at an
// older epoch than the primary's (as a killed primary's node does until
// its session expires) is marked DEPOSED, naming the primary that
// replaced it; the primary is not. Before, members showed two primaries
// with nothing to tell them apart but the epoch.
func TestMembersDeposed(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	const base, room = "/dep", "ns1"
	r, err := replica.Open(testCtx(t, 30*time.Second), replica.Config{
		Servers: e.Addrs(), SessionTimeout: 2 * time.Second, Base: base, Room: room, ID: "m1",
		DataDir: filepath.Join(t.TempDir(), "m1"), ListenAddr: "127.0.0.1:0",
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, r.Close()) })
	require.Eventually(t, func() bool { return r.Status().Role == replica.RolePrimary }, 20*time.Second, 10*time.Millisecond)
	epoch := r.Status().Epoch
	require.Positive(t, epoch)

	// m0's node as a primary killed at the epoch before leaves it: held by
	// a live session, saying primary.
	data, err := msgpack.Marshal(map[string]any{"v": 1, "id": "m0", "addr": "127.0.0.1:9", "role": "primary", "epoch": epoch - 1, "applied": uint64(1)})
	require.NoError(t, err)
	_, err = dialZK(t, e, nil).Conn().Create(base+"/"+room+"/members/m0", data, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	cl := newCLI(t, e, base)
	var out membersOut
	cl.json(&out, "members", room)
	byID := map[string]memberRow{}
	for _, m := range out.Members {
		byID[m.ID] = m
	}
	require.Len(t, byID, 2)
	require.True(t, byID["m0"].Deposed)
	require.Equal(t, "m1 at epoch "+u64(epoch), byID["m0"].DeposedBy)
	require.Equal(t, epoch-1, byID["m0"].Epoch)
	require.False(t, byID["m1"].Deposed)
	require.Equal(t, epoch, byID["m1"].Epoch)

	text := cl.ok("members", room)
	for _, line := range strings.Split(text, "\n") {
		switch {
		case strings.HasPrefix(line, "m0 "):
			require.Contains(t, line, "DEPOSED: replaced by m1 at epoch "+u64(epoch))
		case strings.HasPrefix(line, "m1 "):
			require.NotContains(t, line, "DEPOSED")
		}
	}
	require.Contains(t, text, "DEPOSED")
}

package replica

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/logroom"
)

// TestReseedKeepsRoomVersion: after ZooKeeper lost a room that had been
// raised to room version 2, a re-seed from the members' data dirs creates
// it at 2 again (each member records the room versions it sees in its
// data dir's marker). Before, the re-seed created it at 1 — a downgrade
// without the downgrade protocol, which let a member that supports only
// version 1 back in. Asking for a lower version explicitly is refused by
// name.
func TestReseedKeepsRoomVersion(t *testing.T) {
	cl := newCluster(t, sharedEnsemble(t), nil)
	cl.openN(2)
	p := cl.waitPrimary(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 0; i < 5; i++ {
		_, err := cl.proposeRetry(ctx, setOp("a", "1"))
		require.NoError(t, err)
	}
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	require.NoError(t, p.SetRoomVersion(sctx, 2))
	scancel()
	var last uint64
	for i := 0; i < 5; i++ {
		res, err := cl.proposeRetry(ctx, setOp("b", "2"))
		require.NoError(t, err)
		last = res.Index
	}
	cl.waitConverged(last, 20*time.Second)
	var dirs []string
	for _, r := range cl.all() {
		dir := cl.config(r.ID()).DataDir
		dirs = append(dirs, dir)
		require.Eventually(t, func() bool {
			b, err := os.ReadFile(filepath.Join(dir, markerName))
			var m dirMarker
			return err == nil && json.Unmarshal(b, &m) == nil && m.RoomVersion == 2
		}, 10*time.Second, 20*time.Millisecond, "%s records room version 2 in its marker", r.ID())
	}
	for _, r := range cl.all() {
		cl.close(r.ID())
	}

	// ZooKeeper loses the room entirely.
	zc, err := logroom.Dial(ctx, logroom.DialConfig{Servers: cl.ens.Addrs()})
	require.NoError(t, err)
	defer zc.Close()
	require.NoError(t, logroom.DeleteRoom(ctx, zc, "", cl.room))

	_, err = Reseed(ctx, ReseedConfig{Servers: cl.ens.Addrs(), Room: cl.room, DataDirs: dirs, RoomVersion: 1, Logger: testLogger(t)})
	require.ErrorIs(t, err, ErrReseedRefused)
	require.Contains(t, err.Error(), "recorded room version 2")

	res, err := Reseed(ctx, ReseedConfig{Servers: cl.ens.Addrs(), Room: cl.room, DataDirs: dirs, Logger: testLogger(t)})
	require.NoError(t, err)
	require.Equal(t, 2, res.RoomVersion)
	info, err := logroom.ReadRoomInfo(ctx, zc, "", cl.room)
	require.NoError(t, err)
	require.Equal(t, 2, info.RoomVersion.Version, "the re-seeded room is at the version its state was written under")
	require.NotEqual(t, logroom.EpochZnode, info.EpochZnode, "a re-seeded room names its epoch znode anew")
}

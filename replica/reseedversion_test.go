package replica

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/archive"
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

// TestRestoreReseedKeepsRoomVersion: a room raised to room version 2 is
// archived, ZooKeeper loses it, and it is rebuilt the documented way —
// archive.Restore, then a re-seed from the restored data dir (which has
// no member marker). The re-seeded room is at 2 again, from a restore
// that applied an archived channel and from one that stopped at a
// checkpoint. Before, the restore recorded no room version and the
// re-seed created the room at 1: a downgrade without the downgrade
// protocol.
func TestRestoreReseedKeepsRoomVersion(t *testing.T) {
	ens := sharedEnsemble(t)
	arch, err := archive.OpenDir(t.TempDir())
	require.NoError(t, err)
	cl := newCluster(t, ens, func(cfg *Config) { cfg.Archive = arch })
	cl.openN(1)
	p := cl.waitPrimary(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := 0; i < 20; i++ {
		_, err := p.Propose(ctx, setOp("a", fmt.Sprint(i)))
		require.NoError(t, err)
	}
	sctx, scancel := context.WithTimeout(ctx, 20*time.Second)
	require.NoError(t, p.SetRoomVersion(sctx, 2))
	scancel()
	var mid uint64
	for i := 0; i < 20; i++ {
		res, err := p.Propose(ctx, setOp("b", fmt.Sprint(i)))
		require.NoError(t, err)
		if i == 10 {
			mid = res.Index
		}
	}
	require.NoError(t, p.Checkpoint(ctx))
	ck := p.Status().CheckpointIndex
	require.Eventually(t, func() bool { s := p.ArchiveStatus(); return s.Index >= ck && s.Checkpoint >= ck }, 20*time.Second, 10*time.Millisecond)
	cl.close(p.ID())

	// Two restores: one applies the archived channel holding mid, the
	// other stops at the archived checkpoint.
	midDir, ckDir := filepath.Join(t.TempDir(), "mid"), filepath.Join(t.TempDir(), "ckpt")
	rm, err := archive.Restore(ctx, archive.RestoreOptions{Archive: arch, Room: cl.room, ToIndex: mid, DataDir: midDir})
	require.NoError(t, err)
	require.NotZero(t, rm.Entries, "the restore to %d applies archived entries", mid)
	rc, err := archive.Restore(ctx, archive.RestoreOptions{Archive: arch, Room: cl.room, ToIndex: ck, DataDir: ckDir})
	require.NoError(t, err)
	require.Equal(t, ck, rc.Checkpoint, "the restore to %d starts from the archived checkpoint", ck)
	require.Zero(t, rc.Entries)

	zc, err := logroom.Dial(ctx, logroom.DialConfig{Servers: ens.Addrs()})
	require.NoError(t, err)
	defer zc.Close()
	require.NoError(t, logroom.DeleteRoom(ctx, zc, "", cl.room))

	dry, err := Reseed(ctx, ReseedConfig{Servers: ens.Addrs(), Room: cl.room, DataDirs: []string{midDir}, DryRun: true, Logger: testLogger(t)})
	require.NoError(t, err)
	require.Equal(t, 2, dry.RoomVersion, "a re-seed from the restore to %d (an archived channel of room version 2)", mid)
	// A restore that could not tell the room version (its record says
	// none) is refused without an explicit one, and taken with it.
	ri, err := archive.ReadRestoreInfo(midDir)
	require.NoError(t, err)
	require.NotNil(t, ri)
	require.Equal(t, 2, ri.RoomVersion)
	unknown := *ri
	unknown.RoomVersion = 0
	b, err := json.Marshal(unknown)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(midDir, archive.RestoreInfoName), b, 0o644))
	_, err = Reseed(ctx, ReseedConfig{Servers: ens.Addrs(), Room: cl.room, DataDirs: []string{midDir}, DryRun: true, Logger: testLogger(t)})
	require.ErrorIs(t, err, ErrReseedRefused)
	require.Contains(t, err.Error(), "--room-version")
	dry, err = Reseed(ctx, ReseedConfig{Servers: ens.Addrs(), Room: cl.room, DataDirs: []string{midDir}, DryRun: true, RoomVersion: 2, Logger: testLogger(t)})
	require.NoError(t, err)
	require.Equal(t, 2, dry.RoomVersion)
	_, err = Reseed(ctx, ReseedConfig{Servers: ens.Addrs(), Room: cl.room, DataDirs: []string{ckDir}, RoomVersion: 1, Logger: testLogger(t)})
	require.ErrorIs(t, err, ErrReseedRefused, "a re-seed at 1 from a room version 2 restore lowers it")
	res, err := Reseed(ctx, ReseedConfig{Servers: ens.Addrs(), Room: cl.room, DataDirs: []string{ckDir}, Force: true, Logger: testLogger(t)})
	require.NoError(t, err)
	require.Equal(t, 2, res.RoomVersion, "a re-seed from the restore to the checkpoint at %d", ck)
	info, err := logroom.ReadRoomInfo(ctx, zc, "", cl.room)
	require.NoError(t, err)
	require.Equal(t, 2, info.RoomVersion.Version, "the re-seeded room is at the version its restored state was written under")
}

package replica

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/checkpoint"
)

func smallCheckpoints(c *Config) {
	c.CheckpointEveryEntries = 250
	c.CheckpointEveryBytes = 256 << 10
	c.Writer.MaxRoomBytes = 2 << 20
	c.RetainRoomBytes = 3 << 19
}

// TestCheckpointsBoundRoom: under a stream much larger than MaxRoomBytes,
// checkpoints and channel deletion keep the room's ZooKeeper bytes bounded;
// a member that was away while its channels were deleted, and a brand-new
// member with an empty disk, both bootstrap from a peer's checkpoint and
// converge.
func TestCheckpointsBoundRoom(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, smallCheckpoints)
	c.openN(3)
	p := c.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	val := strings.Repeat("x", 1000)
	propose := func(n int, prefix string) {
		t.Helper()
		errs := make(chan error, 8)
		for w := 0; w < 8; w++ {
			go func() {
				for i := w; i < n; i += 8 {
					_, err := c.proposeRetry(ctx, setOp(fmt.Sprintf("%s-%06d", prefix, i), val))
					if err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for w := 0; w < 8; w++ {
			require.NoError(t, <-errs)
		}
	}

	// Sample the room's bytes all along.
	var maxBytes atomic.Int64
	stopSampling := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			if b, err := p.Room().Bytes(ctx); err == nil && b > maxBytes.Load() {
				maxBytes.Store(b)
			}
			select {
			case <-stopSampling:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	for round := 0; round < 5; round++ {
		propose(700, fmt.Sprintf("a%d", round))
	}
	close(stopSampling)
	<-sampled
	// ~3.5 MB written through a room bounded at 2 MiB (ErrRoomFull would
	// have failed a proposal above).
	chans, err := p.Room().Channels(ctx)
	require.NoError(t, err)
	require.Greater(t, chans[0].FirstIndex, uint64(1), "old channels were deleted")
	t.Logf("room bytes max %d, channels now %d (oldest first index %d)", maxBytes.Load(), len(chans), chans[0].FirstIndex)
	require.Less(t, maxBytes.Load(), int64(2<<20))
	for _, r := range c.all() {
		require.NotZero(t, r.Status().CheckpointIndex, "%s checkpoints locally", r.ID())
		list, err := checkpoint.List(r.ckptRoot)
		require.NoError(t, err)
		require.LessOrEqual(t, len(list), DefaultKeepCheckpoints)
	}
	rec, _, err := p.conn.Get(p.room.Path(checkpointsZ))
	require.NoError(t, err)
	var cr checkpointRecord
	require.NoError(t, decode(rec, &cr))
	require.Contains(t, []string{"m0", "m1", "m2"}, cr.ID)
	require.NotZero(t, cr.Index)
	p = c.waitPrimary(20 * time.Second) // (a loaded machine may have failed over)

	// A standby goes away; the room moves on past what it applied.
	var away *Replica
	for _, r := range c.all() {
		if r != p {
			away = r
			break
		}
	}
	awayID, awayApplied := away.ID(), away.Status().Applied
	c.close(awayID)
	for round := 0; round < 3; round++ {
		propose(700, fmt.Sprintf("b%d", round))
	}
	chans, err = p.Room().Channels(ctx)
	require.NoError(t, err)
	require.Greater(t, chans[0].FirstIndex, awayApplied+1, "the away member's next entry was deleted")

	// It comes back with its old disk, and a new member with an empty one.
	back := c.open(awayID)
	fresh := c.open("fresh")
	idx, err := p.Barrier(ctx)
	require.NoError(t, err)
	c.waitConverged(idx, 60*time.Second)
	require.Equal(t, 1, back.Status().Bootstraps)
	require.Equal(t, 1, fresh.Status().Bootstraps)
	v, err := fresh.Get([]byte("a0-000000"))
	require.NoError(t, err)
	require.Equal(t, val, string(v))
	// And they keep following.
	propose(200, "c")
	idx, err = p.Barrier(ctx)
	require.NoError(t, err)
	c.waitConverged(idx, 30*time.Second)
}

func TestCheckpointOnDemand(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	c.openN(2)
	p := c.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i := 0; i < 20; i++ {
		_, err := p.Propose(ctx, setOp(fmt.Sprint("k", i), "v"))
		require.NoError(t, err)
	}
	before, err := p.Room().Channels(ctx)
	require.NoError(t, err)
	require.NoError(t, p.Checkpoint(ctx))
	require.GreaterOrEqual(t, p.Status().CheckpointIndex, uint64(20))
	after, err := p.Room().Channels(ctx)
	require.NoError(t, err)
	// Rotated: the open channel is a new one.
	require.Greater(t, after[len(after)-1].Num, before[len(before)-1].Num)
	// Sealed channels covered by the checkpoint and applied by the (caught
	// up) standby are deleted by the sweep.
	require.Eventually(t, func() bool {
		chans, err := p.Room().Channels(ctx)
		return err == nil && len(chans) == 1
	}, 10*time.Second, 5*time.Millisecond, "covered channels deleted")
	for _, r := range c.all() {
		if r != p {
			require.NoError(t, r.Checkpoint(ctx), "a standby checkpoints locally")
			require.NotZero(t, r.Status().CheckpointIndex)
		}
	}
}

// TestCheckpointsNeverExceedKeep: a member never holds more than
// KeepCheckpoints local checkpoints, at any moment: not only once the
// checkpointer is done (the list is read all along, while checkpoints are
// made one after another).
func TestCheckpointsNeverExceedKeep(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	c.openN(1)
	p := c.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	var most atomic.Int64
	stop := make(chan struct{})
	listed := make(chan struct{})
	go func() {
		defer close(listed)
		for {
			if l, err := checkpoint.List(p.ckptRoot); err == nil && int64(len(l)) > most.Load() {
				most.Store(int64(len(l)))
			}
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	for i := 0; i < 30; i++ {
		_, err := p.Propose(ctx, setOp(fmt.Sprint("k", i), "v"))
		require.NoError(t, err)
		require.NoError(t, p.Checkpoint(ctx))
	}
	close(stop)
	<-listed
	require.Equal(t, int64(DefaultKeepCheckpoints), most.Load(), "most local checkpoints seen at once")
}

// TestCheckpointRecordNeverMovesBack: the checkpoints record only moves
// forward, whoever writes it: a primary just deposed that finishes an
// older checkpoint leaves its successor's newer record in place.
func TestCheckpointRecordNeverMovesBack(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	c.openN(1)
	p := c.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	path := p.room.Path(checkpointsZ)
	read := func() (checkpointRecord, int32) {
		t.Helper()
		data, st, err := p.conn.Get(path)
		require.NoError(t, err)
		var rec checkpointRecord
		require.NoError(t, decode(data, &rec))
		return rec, st.Version
	}
	// Far above any index this test's own checkpoints could reach.
	rec := func(index, epoch uint64, id string) checkpointRecord {
		return checkpointRecord{V: formatVersion1, Index: 1_000_000 + index, Epoch: epoch, ID: id, Addr: "127.0.0.1:1", Created: 1}
	}
	_, err := p.conn.Set(path, []byte("not a record"), -1)
	if errors.Is(err, zk.ErrNoNode) {
		_, err = p.conn.Create(path, []byte("not a record"), 0, p.acl)
	}
	require.NoError(t, err)
	require.NoError(t, p.recordCheckpoint(ctx, rec(100, 5, "new")))
	got, _ := read()
	require.Equal(t, rec(100, 5, "new"), got, "a record that does not decode is replaced")
	require.NoError(t, p.conn.Delete(path, -1))
	require.NoError(t, p.recordCheckpoint(ctx, rec(100, 5, "new")))
	got, ver := read()
	require.Equal(t, rec(100, 5, "new"), got, "created when missing")

	for _, tc := range []struct {
		name  string
		write checkpointRecord
		want  checkpointRecord
	}{
		{"an older index of an older epoch (a deposed primary) stays out", rec(50, 4, "old"), rec(100, 5, "new")},
		{"an older index of a newer epoch stays out", rec(99, 6, "old"), rec(100, 5, "new")},
		{"the same index of the same epoch is not rewritten", rec(100, 5, "other"), rec(100, 5, "new")},
		{"the same index of an older epoch stays out", rec(100, 4, "old"), rec(100, 5, "new")},
		{"the same index of a newer epoch replaces it", rec(100, 6, "newer"), rec(100, 6, "newer")},
		{"a higher index replaces it", rec(200, 6, "newer"), rec(200, 6, "newer")},
		{"a higher index of an older epoch replaces it (covers more)", rec(300, 5, "late"), rec(300, 5, "late")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NoError(t, p.recordCheckpoint(ctx, tc.write))
			got, v := read()
			require.Equal(t, tc.want, got)
			if tc.want == tc.write {
				require.Greater(t, v, ver)
			} else {
				require.Equal(t, ver, v, "no write at all")
			}
			ver = v
		})
	}
}

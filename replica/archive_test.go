package replica

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/archive"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

// recorded is what members held at one index.
type recorded struct {
	index uint64
	run   store.RunHash
	state string // "" when only the running hash was recorded
	what  string
}

// TestArchivePointInTimeRestore: a primary with an archive and frequent
// checkpoints under load archives every sealed channel and its checkpoints
// and deletes channels; a restore from the archive at several indexes
// (between checkpoints, at a checkpoint, mid-batch) reproduces exactly the
// running hash and state hash the members had there; a corrupt archived
// channel is refused by name.
func TestArchivePointInTimeRestore(t *testing.T) {
	ens := sharedEnsemble(t)
	arch, err := archive.OpenDir(t.TempDir())
	require.NoError(t, err)
	c := newCluster(t, ens, func(cfg *Config) {
		cfg.Archive = arch
		cfg.CheckpointEveryEntries = 300
		cfg.CheckpointEveryBytes = -1
		cfg.Writer.MaxRoomBytes = 4 << 20
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	c.openN(2)
	p := c.waitPrimary(20 * time.Second)

	var recs []recorded
	var seq atomic.Uint64
	load := func(n, workers int) {
		var wg sync.WaitGroup
		for w := 0; w < workers; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := seq.Add(1); i <= uint64(n); i = seq.Add(1) {
					_, err := p.Propose(ctx, setOp(fmt.Sprint("k", i%97), fmt.Sprint("v", i)))
					if err != nil {
						t.Errorf("propose: %v", err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	// record waits until the members agree at the primary's applied index
	// and records it.
	record := func(what string) recorded {
		idx := p.Status().Applied
		state := c.waitConverged(idx, 20*time.Second)
		var run store.RunHash
		for _, r := range c.all() {
			var h store.RunHash
			require.Eventually(t, func() bool {
				var ok bool
				h, ok = r.runHashAt(idx)
				return ok
			}, 10*time.Second, 5*time.Millisecond, "%s's running hash at %d", r.ID(), idx)
			require.Equal(t, idx, h.Index)
			if run.Index == 0 {
				run = h
			}
			require.Equal(t, run, h, "members agree on the running hash at %d", idx)
		}
		rec := recorded{index: idx, run: run, state: state, what: what}
		recs = append(recs, rec)
		return rec
	}
	// At the end of a phase, the time: every batch of the phase was
	// committed at or before it, every later one after it (the sleep
	// puts the next batch's ZooKeeper ctime in a later millisecond).
	type timed struct {
		at    time.Time
		index uint64
	}
	var times []timed
	target := 0
	for phase := 0; phase < 4; phase++ {
		target += 700
		seq.Store(uint64(target - 700))
		load(target, 16)
		require.False(t, t.Failed())
		rec := record(fmt.Sprintf("end of phase %d", phase))
		times = append(times, timed{at: time.Now(), index: rec.index})
		time.Sleep(3 * time.Millisecond)
		if phase == 1 {
			require.NoError(t, p.Checkpoint(ctx))
			rec := record("at a checkpoint")
			require.Equal(t, rec.index, p.Status().CheckpointIndex)
		}
	}
	// Running hashes of indexes in the middle of the load (mid-batch, between
	// checkpoints), from the members' history.
	for _, idx := range []uint64{333, 1234, 2101} {
		h, ok := p.runHashAt(idx)
		require.True(t, ok, "run hash at %d", idx)
		recs = append(recs, recorded{index: idx, run: h, what: "under load"})
	}
	// Everything up to the last record is sealed (checkpoint) and archived.
	last := recs[len(recs)-1].index
	for _, r := range recs {
		last = max(last, r.index)
	}
	require.NoError(t, p.Checkpoint(ctx))
	require.Eventually(t, func() bool {
		as := p.ArchiveStatus()
		return as.Index >= last && as.LastErr == nil
	}, 30*time.Second, 10*time.Millisecond, "archive reaches %d", last)
	as := p.ArchiveStatus()
	require.True(t, as.Enabled)
	require.NotZero(t, as.Checkpoint)
	require.NotZero(t, as.Bytes)
	chans, err := p.Room().Channels(ctx)
	require.NoError(t, err)
	require.Greater(t, chans[0].FirstIndex, uint64(1), "channels were deleted (once archived)")

	items, err := arch.List(ctx, c.room)
	require.NoError(t, err)
	var nckpt int
	for _, it := range items {
		if it.Kind == archive.KindCheckpoint {
			nckpt++
		}
	}
	require.GreaterOrEqual(t, nckpt, 3, "checkpoints archived")
	var between atomic.Int64
	for _, rec := range recs {
		t.Run(fmt.Sprintf("%s %d", rec.what, rec.index), func(t *testing.T) {
			res, err := archive.Restore(ctx, archive.RestoreOptions{Archive: arch, Room: c.room, ToIndex: rec.index,
				DataDir: t.TempDir(), Applier: store.OpsApplier{}})
			require.NoError(t, err)
			require.Equal(t, rec.index, res.Index)
			require.Equal(t, rec.run, res.RunHash, "running hash at %d (restored from checkpoint %d + %d entries)", rec.index, res.Checkpoint, res.Entries)
			if rec.state != "" {
				require.Equal(t, rec.state, res.StateHash, "state hash at %d", rec.index)
			}
			if rec.what == "at a checkpoint" {
				require.Equal(t, rec.index, res.Checkpoint, "restored from the checkpoint at the index itself")
				require.Zero(t, res.Entries)
			} else {
				require.LessOrEqual(t, res.Checkpoint, rec.index)
			}
			if res.Entries > 0 {
				between.Add(1)
			}
		})
	}
	require.GreaterOrEqual(t, between.Load(), int64(3), "restores between checkpoints (checkpoint + archived entries)")

	// --to-time: the ZooKeeper commit times the archive keeps resolve each
	// phase's end time to its last index.
	for _, tm := range times[:len(times)-1] {
		res, err := archive.Restore(ctx, archive.RestoreOptions{Archive: arch, Room: c.room, ToTime: tm.at, DataDir: t.TempDir()})
		require.NoError(t, err)
		require.Equal(t, tm.index, res.Index, "restore to %v", tm.at)
		for _, rec := range recs {
			if rec.index == tm.index && rec.state != "" {
				require.Equal(t, rec.state, res.StateHash)
				require.Equal(t, rec.run, res.RunHash)
			}
		}
	}

	// A corrupt channel item is refused by name.
	var victim archive.Item
	for _, it := range items {
		if it.Kind == archive.KindChannel && it.First <= 1234 && it.Last >= 1234 {
			victim = it
		}
	}
	require.NotEmpty(t, victim.Path)
	b, err := os.ReadFile(victim.Path)
	require.NoError(t, err)
	b[len(b)/2] ^= 0x01
	require.NoError(t, os.WriteFile(victim.Path, b, 0o644))
	_, err = archive.Restore(ctx, archive.RestoreOptions{Archive: arch, Room: c.room, ToIndex: 1234, DataDir: t.TempDir()})
	require.ErrorIs(t, err, archive.ErrCorrupt)
	require.ErrorContains(t, err, victim.Path)
	require.NoError(t, os.Truncate(victim.Path, int64(len(b)/2)))
	_, err = archive.Restore(ctx, archive.RestoreOptions{Archive: arch, Room: c.room, ToIndex: 1234, DataDir: t.TempDir()})
	require.ErrorIs(t, err, archive.ErrCorrupt)
	require.ErrorContains(t, err, victim.Path)
}

// flakyArchive is an Archive whose puts fail while failing is set.
type flakyArchive struct {
	archive.Archive
	failing atomic.Bool
	puts    atomic.Int64
}

var errArchiveDown = errors.New("test: the archive is down")

func (f *flakyArchive) PutChannel(ctx context.Context, ch archive.Channel) (archive.Item, error) {
	f.puts.Add(1)
	if f.failing.Load() {
		return archive.Item{}, errArchiveDown
	}
	return f.Archive.PutChannel(ctx, ch)
}

func (f *flakyArchive) PutCheckpoint(ctx context.Context, o archive.Origin, dir string) (archive.Item, error) {
	if f.failing.Load() {
		return archive.Item{}, errArchiveDown
	}
	return f.Archive.PutCheckpoint(ctx, o, dir)
}

// TestArchiveFailureHoldsDeletion: while the archive fails, no channel is
// deleted although checkpoints cover them; the room grows until Propose
// gets ErrRoomFull, and ArchiveStatus names the failure. Once the archive
// works again, the channels are archived, deleted, and appends succeed.
func TestArchiveFailureHoldsDeletion(t *testing.T) {
	ens := sharedEnsemble(t)
	dir, err := archive.OpenDir(t.TempDir())
	require.NoError(t, err)
	fa := &flakyArchive{Archive: dir}
	fa.failing.Store(true)
	c := newCluster(t, ens, func(cfg *Config) {
		cfg.Archive = fa
		cfg.CheckpointEveryEntries = 20
		cfg.CheckpointEveryBytes = -1
		cfg.Writer.MaxRoomBytes = 256 << 10
		cfg.RetainRoomBytes = 64 << 10
	})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c.openN(2)
	p := c.waitPrimary(20 * time.Second)
	rng := rand.New(rand.NewPCG(3, 4))
	raw := make([]byte, 2000)
	var fullErr error
	for i := 0; i < 2000 && fullErr == nil; i++ {
		for j := range raw {
			raw[j] = byte(rng.Uint32())
		}
		_, err := p.Propose(ctx, setOp(fmt.Sprint("f", i), string(raw)))
		if errors.Is(err, logroom.ErrRoomFull) {
			fullErr = err
		} else {
			require.NoError(t, err)
		}
	}
	require.Error(t, fullErr, "the room never filled up")
	t.Logf("full: %v", fullErr)
	chans, err := p.Room().Channels(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, chans[0].FirstIndex, "a channel was deleted though the archive fails")
	require.Greater(t, len(chans), 2, "checkpoints rotated the log")
	require.NotZero(t, p.Status().CheckpointIndex)
	as := p.ArchiveStatus()
	require.ErrorIs(t, as.LastErr, errArchiveDown)
	require.NotZero(t, as.Failures)
	require.Zero(t, as.Index)
	require.NotZero(t, as.BehindEntries)
	require.NotZero(t, as.BehindBytes)

	// The archive comes back: the next sweep archives and deletes.
	fa.failing.Store(false)
	require.Eventually(t, func() bool {
		cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
		defer ccancel()
		_, err := p.Propose(cctx, setOp("after", string(raw)))
		return err == nil
	}, 30*time.Second, 10*time.Millisecond, "appends succeed once the archive works")
	chans, err = p.Room().Channels(ctx)
	require.NoError(t, err)
	require.Greater(t, chans[0].FirstIndex, uint64(1))
	as = p.ArchiveStatus()
	require.NoError(t, as.LastErr)
	require.GreaterOrEqual(t, as.Index, chans[0].FirstIndex-1)
	// Nothing deleted is missing from the archive: a restore to the last
	// deleted index works.
	res, err := archive.Restore(ctx, archive.RestoreOptions{Archive: dir, Room: c.room, ToIndex: chans[0].FirstIndex - 1,
		DataDir: filepath.Join(t.TempDir(), "restored")})
	require.NoError(t, err)
	h, ok := p.runHashAt(res.Index)
	require.True(t, ok)
	require.Equal(t, h, res.RunHash)
}

// TestArchiveRestoreSeedsNewRoom: a point-in-time restore's data dir seeds
// a new room (Reseed): a member opened on it starts at the restored state
// and its log continues at the restored index + 1.
func TestArchiveRestoreSeedsNewRoom(t *testing.T) {
	ens := sharedEnsemble(t)
	arch, err := archive.OpenDir(t.TempDir())
	require.NoError(t, err)
	c := newCluster(t, ens, func(cfg *Config) { cfg.Archive = arch })
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c.openN(1)
	p := c.waitPrimary(20 * time.Second)
	for i := 0; i < 300; i++ {
		_, err := p.Propose(ctx, setOp(fmt.Sprint("k", i%13), fmt.Sprint(i)))
		require.NoError(t, err)
	}
	want, at, err := p.StateHash()
	require.NoError(t, err)
	for i := 0; i < 100; i++ {
		_, err := p.Propose(ctx, setOp(fmt.Sprint("k", i%13), "later"))
		require.NoError(t, err)
	}
	require.NoError(t, p.Checkpoint(ctx))
	require.Eventually(t, func() bool { return p.ArchiveStatus().Index >= at }, 20*time.Second, 10*time.Millisecond)

	dataDir := filepath.Join(t.TempDir(), "pitr")
	res, err := archive.Restore(ctx, archive.RestoreOptions{Archive: arch, Room: c.room, ToIndex: at, DataDir: dataDir})
	require.NoError(t, err)
	require.Equal(t, want, res.StateHash)

	newRoom := c.room + "-pitr"
	_, err = Reseed(ctx, ReseedConfig{Servers: ens.Addrs(), Room: newRoom, DataDirs: []string{dataDir}, Logger: testLogger(t)})
	require.NoError(t, err)
	cfg := c.config("pitr")
	cfg.Room, cfg.DataDir, cfg.Archive = newRoom, dataDir, nil
	r, err := Open(ctx, cfg)
	require.NoError(t, err)
	defer r.Close()
	require.Eventually(t, func() bool { return r.Status().Role == RolePrimary }, 30*time.Second, 10*time.Millisecond)
	h, idx, err := r.StateHash()
	require.NoError(t, err)
	require.Equal(t, at, idx)
	require.Equal(t, want, h)
	got, err := r.Propose(ctx, setOp("after", "restore"))
	require.NoError(t, err)
	require.Equal(t, at+1, got.Index)
}

// TestArchiveIgnoresOrphanBatches: a sealed channel holding an orphan batch
// past its sealed end (a deposed writer's pipelined batch, as logroom's
// doc describes) is archived as its chain up to the seal; the orphan is
// ignored, the channel is deleted once archived, and the archive keeps
// going. Before, the orphan was copied with the chain, the put refused the
// channel as corrupt on every sweep, and no channel was deleted again.
func TestArchiveIgnoresOrphanBatches(t *testing.T) {
	ens := sharedEnsemble(t)
	dir, err := archive.OpenDir(t.TempDir())
	require.NoError(t, err)
	fa := &flakyArchive{Archive: dir}
	fa.failing.Store(true)
	c := newCluster(t, ens, func(cfg *Config) {
		cfg.Archive = fa
		cfg.CheckpointEveryEntries = -1
		cfg.CheckpointEveryBytes = -1
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.openN(1)
	p := c.waitPrimary(20 * time.Second)
	for i := 0; i < 30; i++ {
		_, err := p.Propose(ctx, setOp(fmt.Sprint("k", i%7), fmt.Sprint(i)))
		require.NoError(t, err)
	}
	require.NoError(t, p.Checkpoint(ctx)) // seals channel 1; the archive is down, so it stays
	chans, err := p.Room().Channels(ctx)
	require.NoError(t, err)
	require.True(t, chans[0].Sealed)
	sealed := chans[0]
	require.EqualValues(t, 1, sealed.FirstIndex)

	// An orphan: a well-formed batch of the channel's epoch past a hole
	// after the sealed end.
	orphanFirst := sealed.LastIndex + 2
	data, err := logroom.EncodeBatch(sealed.Epoch, orphanFirst, [][]byte{[]byte("never acknowledged")})
	require.NoError(t, err)
	conn := zkConn(t, ens)
	_, err = conn.Create(p.room.Path(logroom.ChannelsZnode, logroom.ChannelName(sealed.Num), logroom.BatchName(orphanFirst)),
		data, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	fa.failing.Store(false)
	for i := 0; i < 30; i++ {
		_, err := p.Propose(ctx, setOp(fmt.Sprint("k", i%7), "later"))
		require.NoError(t, err)
	}
	require.NoError(t, p.Checkpoint(ctx))
	require.Eventually(t, func() bool {
		as := p.ArchiveStatus()
		return as.Index >= sealed.LastIndex && as.LastErr == nil
	}, 20*time.Second, 10*time.Millisecond, "the channel with an orphan is archived (status %+v)", p.ArchiveStatus())
	require.Eventually(t, func() bool {
		chans, err := p.Room().Channels(ctx)
		return err == nil && chans[0].FirstIndex > sealed.LastIndex
	}, 20*time.Second, 10*time.Millisecond, "the channel is deleted once archived")

	it, ok, err := dir.Lookup(ctx, p.archiveOrigin(), archive.KindChannel, sealed.FirstIndex, sealed.LastIndex)
	require.NoError(t, err)
	require.True(t, ok)
	ch, err := dir.ReadChannel(ctx, it)
	require.NoError(t, err)
	require.Len(t, ch.Batches, sealed.Batches, "the chain only, not the orphan")
	res, err := archive.Restore(ctx, archive.RestoreOptions{Archive: dir, Room: c.room, ToIndex: sealed.LastIndex,
		DataDir: t.TempDir()})
	require.NoError(t, err)
	h, ok := p.runHashAt(res.Index)
	require.True(t, ok)
	require.Equal(t, h, res.RunHash)
}

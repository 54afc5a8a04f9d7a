package main

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/roomlog/roomlog/archive"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
)

// restoreTail is how many entries past the newest checkpoint the restore
// row applies (issue 27: "an index 100k entries past the newest
// checkpoint").
const restoreTail = 100_000

// runArchive: Propose at 256 proposers on a lone primary without and with
// Config.Archive (a directory under the run's temp dir), alternated three
// times (on_vs_off: the ratio of the sums), both
// checkpointing every 20,000 entries so that channels and checkpoints are
// archived inside the windows; then a point-in-time restore to an index
// restoreTail entries past the newest archived checkpoint.
func runArchive(ctx context.Context, b *bench) ([]Result, error) {
	em, err := newEntryMaker(replicaEntryBytes, 100_000)
	if err != nil {
		return nil, err
	}
	ckpts := func(c *replica.Config) { c.CheckpointEveryEntries, c.CheckpointEveryBytes = 20_000, -1 }
	off, roomOff, err := b.lonePrimary(ctx, "archive-off", ckpts)
	if err != nil {
		return nil, err
	}
	defer b.dropRoom(roomOff)
	defer off.Close()
	dir, err := archive.OpenDir(filepath.Join(b.tmp, "archive"))
	if err != nil {
		return nil, err
	}
	on, roomOn, err := b.lonePrimary(ctx, "archive-on", func(c *replica.Config) { ckpts(c); c.Archive = dir })
	if err != nil {
		return nil, err
	}
	defer b.dropRoom(roomOn)
	defer on.Close()
	d := b.cfg.duration
	b.timedLoad(ctx, off.r, em, 256, 0, d/4, nil) // warm-up
	b.timedLoad(ctx, on.r, em, 256, 0, d/4, nil)
	var out []Result
	var sum [2]float64
	const rounds = 3
	for round := 0; round < rounds; round++ {
		for i, m := range []*member{off, on} {
			name := []string{"archive-off", "archive-on"}[i]
			b.prog.Logf("%s 256B x256 (round %d): %v", name, round+1, d)
			as0 := m.r.ArchiveStatus()
			st, el := b.timedLoad(ctx, m.r, em, 256, 0, d, nil)
			if ctx.Err() != nil {
				return out, ctx.Err()
			}
			row := b.proposeRow(name, 256, st, el)
			row.Note = "replica.Propose on a lone primary checkpointing every 20,000 entries, no archive"
			if i == 1 {
				as := m.r.ArchiveStatus()
				row.Note = "the same with Config.Archive (a directory): channels and checkpoints copied on the checkpointer goroutine"
				row.setExtra("archived_mb", round3(float64(as.Bytes-as0.Bytes)/1e6))
				row.setExtra("archive_failures", as.Failures)
				row.setExtra("archive_behind_entries", as.BehindEntries)
			}
			sum[i] += row.EntriesPerS
			if round == rounds-1 && i == 1 && sum[0] > 0 {
				row.setExtra("on_vs_off", round3(sum[1]/sum[0]))
			}
			b.emit(row)
			out = append(out, row)
		}
	}
	row, err := b.restoreRow(ctx, em, dir)
	if err != nil {
		return out, err
	}
	b.emit(row)
	return append(out, row), nil
}

// restoreRow writes a checkpoint, then restoreTail+10 entries, checkpoints
// again (sealing them into archived channels), and restores to the first
// checkpoint + restoreTail: the newest checkpoint at or below the target
// is the first, so restoreTail entries are applied from the archive.
func (b *bench) restoreRow(ctx context.Context, em *entryMaker, dir *archive.Dir) (Result, error) {
	m, room, err := b.lonePrimary(ctx, "archive-restore", func(c *replica.Config) { noCheckpoints(c); c.Archive = dir })
	if err != nil {
		return Result{}, err
	}
	defer b.dropRoom(room)
	defer m.Close()
	fill := func(n uint64) error {
		target := m.r.Status().Applied + n
		lctx, cancel := context.WithCancel(ctx)
		st := runLoad(lctx, m.r, em, 256, 0, nil)
		err := waitFor(ctx, 10*time.Minute, "the fill", func() bool { return m.r.Status().Applied >= target })
		cancel()
		st.wait()
		return err
	}
	b.prog.Logf("archive-restore: fill, checkpoint, %d entries, checkpoint", restoreTail)
	if err := fill(1000); err != nil {
		return Result{}, err
	}
	if err := m.r.Checkpoint(ctx); err != nil {
		return Result{}, err
	}
	first := m.r.Status().CheckpointIndex
	if err := fill(restoreTail + 10); err != nil {
		return Result{}, err
	}
	if err := m.r.Checkpoint(ctx); err != nil {
		return Result{}, err
	}
	target := first + restoreTail
	if err := waitFor(ctx, 2*time.Minute, "the archive", func() bool { return m.r.ArchiveStatus().Index >= target }); err != nil {
		return Result{}, fmt.Errorf("%w (archive: %+v)", err, m.r.ArchiveStatus())
	}
	b.prog.Logf("archive-restore: restoring to %d (checkpoint %d + %d)", target, first, restoreTail)
	res, err := archive.Restore(ctx, archive.RestoreOptions{Archive: dir, Room: room, ToIndex: target,
		DataDir: filepath.Join(b.tmp, "restored"), Applier: store.OpsApplier{}})
	if err != nil {
		return Result{}, err
	}
	if res.Index != target || res.Checkpoint != first || res.Entries != restoreTail {
		return Result{}, fmt.Errorf("restore: index %d from checkpoint %d + %d entries, want %d from %d + %d",
			res.Index, res.Checkpoint, res.Entries, target, first, restoreTail)
	}
	row := Result{System: "roomlog", Servers: b.cfg.servers, Scenario: "archive-restore", EntryBytes: replicaEntryBytes,
		EntriesPerS: round3(float64(res.Entries) / res.Apply.Seconds()),
		MBPerS:      round3(float64(res.Entries) * replicaEntryBytes / res.Apply.Seconds() / 1e6),
		Note: fmt.Sprintf("archive.Restore to checkpoint + %d entries: %v (checkpoint copy %v, channels read and applied %v)",
			res.Entries, res.Took.Round(time.Millisecond), res.CheckpointRestore.Round(time.Millisecond), res.Apply.Round(time.Millisecond))}
	row.setExtra("restore_s", round3(res.Took.Seconds()))
	row.setExtra("checkpoint_restore_s", round3(res.CheckpointRestore.Seconds()))
	row.setExtra("apply_s", round3(res.Apply.Seconds()))
	row.setExtra("entries", res.Entries)
	row.setExtra("channels", res.Channels)
	return row, nil
}

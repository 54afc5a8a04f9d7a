package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/roomlog/roomlog/archive"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
	"github.com/roomlog/roomlog/internal/cli"
	"github.com/roomlog/roomlog/store"
)

const restoreUsage = `usage: dfsmaster-demo restore --archive DIR --out DATADIR [--room ROOM]
                              [--to-index N | --to-time T] [--incarnation INC] [--json]

Point-in-time restore of the namespace from the archive the masters were
served with (serve --archive) into a new data dir: the newest archived
checkpoint at or below the target, then the archived entries up to it,
applied as the masters apply them. Needs no ZooKeeper and writes nothing but
DATADIR. Prints the result (index, epoch, hashes, what was cut and why) as
JSON; start a master on DATADIR, or re-seed a room from it (roomlog reseed).

flags:
`

// runRestore is 'dfsmaster-demo restore': archive.Restore with the
// namespace's applier (the one every master of the demo applies with),
// into a new data dir (DATADIR/store). It needs no ZooKeeper and writes
// nothing but DATADIR.
func runRestore(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, restoreUsage); fs.PrintDefaults() }
	dir := fs.String("archive", "", "the archive directory the masters were served with (--archive) (required)")
	room := fs.String("room", "dfs", "the room")
	toIndex := fs.Uint64("to-index", 0, "restore to exactly this index (0 without --to-time: the newest archived)")
	toTime := fs.String("to-time", "", "restore to the last index committed at or before this time (RFC 3339)")
	out := fs.String("out", "", "the new data dir; DATADIR/store must not exist or be empty (required)")
	allowRejected := fs.Bool("allow-rejected", false, "apply an entry that is not a namespace command as the masters did (rejected, nothing written) instead of failing the restore")
	fs.Bool("json", false, "print the result as JSON (it always is: accepted for the convention both binaries share)")
	incarnation := fs.String("incarnation", "", "the room incarnation: the czxid of its room znode (e.g. 0x1f), and its epoch znode when several share the czxid (0x1f/epoch-<16 hex>); required when the archive holds several (the error lists them)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	if fs.NArg() > 0 || *dir == "" || *out == "" || (*toIndex != 0 && *toTime != "") {
		fmt.Fprintln(stderr, "dfsmaster-demo restore: --archive and --out are required, --to-index or --to-time (not both), no arguments")
		return exitUsage
	}
	ap := &restoreApplier{allowRejected: *allowRejected}
	opts := archive.RestoreOptions{Room: *room, ToIndex: *toIndex, DataDir: *out, Applier: ap}
	if *incarnation != "" {
		cz, fence, err := archive.ParseIncarnation(*incarnation)
		if err != nil {
			fmt.Fprintf(stderr, "dfsmaster-demo restore: --incarnation: %v\n", err)
			return exitUsage
		}
		opts.RoomCzxid, opts.RoomFence = cz, fence
	}
	if *toTime != "" {
		t, err := time.Parse(time.RFC3339Nano, *toTime)
		if err != nil {
			fmt.Fprintf(stderr, "dfsmaster-demo restore: --to-time: %v\n", err)
			return exitUsage
		}
		opts.ToTime = t
	}
	a, err := archive.OpenDir(*dir)
	if err == nil {
		opts.Archive = a
		var res archive.RestoreResult
		prog := cli.StartProgress(stderr, "dfsmaster-demo restore", cli.IsTerminal(stderr))
		prog.Step("applying the archive of room %s", *room)
		opts.Progress = func(applied, target uint64) { prog.Count(int64(applied), int64(target), "entries") }
		res, err = archive.Restore(ctx, opts)
		prog.Stop()
		if err == nil {
			enc := json.NewEncoder(stdout)
			enc.SetIndent("", "  ")
			err = enc.Encode(map[string]any{"room": res.Origin.Room, "room_czxid": res.Origin.RoomCzxid, "epoch_znode": res.Origin.Fence, "chosen": res.Chosen,
				"index": res.Index, "epoch": res.Epoch, "checkpoint": res.Checkpoint, "entries": res.Entries,
				"run_hash": res.RunHash.String(), "run_hash_base": res.RunHash.Base, "state_hash": res.StateHash,
				"store_dir": res.StoreDir, "took_ms": res.Took.Milliseconds(), "cut": res.Cut, "cut_reason": res.CutReason, "skipped_checkpoints": res.Skipped,
				"rejected": ap.rejected, "first_rejected": ap.firstRejected})
		}
	}
	if err != nil {
		fmt.Fprintf(stderr, "dfsmaster-demo restore: %v\n", err)
		return exitCode(err)
	}
	return exitOK
}

// restoreApplier is namespace.Applier for a restore: an entry that is not
// a namespace command (an archive of a room whose members apply another
// Applier) fails the restore, naming its index, unless allowRejected
// (then it is rejected as the masters reject it, and counted).
type restoreApplier struct {
	allowRejected           bool
	rejected, firstRejected uint64
}

func (a *restoreApplier) Apply(b store.Batch, e store.Entry) ([]byte, error) {
	if _, err := namespace.DecodeCommand(e.Data); err != nil {
		if !a.allowRejected {
			return nil, fmt.Errorf("not a namespace command (was the room served by dfsmaster-demo? --allow-rejected applies it as the masters did): %w", err)
		}
		if a.rejected == 0 {
			a.firstRejected = e.Index
		}
		a.rejected++
	}
	return namespace.Applier{}.Apply(b, e)
}

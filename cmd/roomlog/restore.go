package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/roomlog/roomlog/archive"
	conv "github.com/roomlog/roomlog/internal/cli"
	"github.com/roomlog/roomlog/store"
)

// restoreUsage is restore's part of the usage text.
const restoreUsage = `  restore --archive DIR --room ROOM (--to-index N | --to-time T) --out DATADIR
          [--applier ops [--allow-rejected]] [--incarnation CZXID[/EPOCHZNODE]] [--json]
                              WRITES LOCALLY (never to ZooKeeper): builds a store at exactly
                              index N (or the last index committed at or before T, RFC 3339)
                              from the archive's newest checkpoint at or below it plus the
                              archived channels, in DATADIR/store (DATADIR laid out like a
                              member's data dir, without the member marker: seed a new room
                              from it with 'roomlog reseed --from DATADIR'); prints the
                              index, running hash and state hash. --applier must be the
                              room's: ops (store.OpsApplier) here; the demo namespace has
                              'dfsmaster-demo restore'. An entry that is not ops fails the
                              restore, naming its index and channel (--allow-rejected: reject
                              it as store.OpsApplier members did). No --to-*: the newest
                              archived index.
                              An archive holding several incarnations of the room (re-created,
                              or re-seeded after ZooKeeper lost it) needs --incarnation: zxids
                              restart from zero in a wiped ensemble, so no czxid order tells
                              the one in service, and two incarnations may share a czxid (their
                              epoch znodes tell them apart: 0x5/epoch, 0x5/epoch-<16 hex>) --
                              unless the re-seed chain the archive records says which one is in
                              service (each re-seeded incarnation records the one it continues);
                              the refusal lists each one.
`

// restoreJSON is what restore --json prints.
type restoreJSON struct {
	Room       string `json:"room"`
	RoomCzxid  int64  `json:"room_czxid"`
	EpochZnode string `json:"epoch_znode"`
	Chosen     string `json:"chosen,omitempty"`
	Index      uint64 `json:"index"`
	Epoch      uint64 `json:"epoch"`
	// RoomVersion: the room version the restored index was written
	// under (0: unknown), recorded for a re-seed from the data dir.
	RoomVersion int      `json:"room_version"`
	Checkpoint  uint64   `json:"checkpoint"`
	Entries     uint64   `json:"entries"`
	Channels    int      `json:"channels"`
	RunHash     string   `json:"run_hash"`
	RunHashAll  string   `json:"run_hash_full"`
	RunBase     uint64   `json:"run_hash_base"`
	StateHash   string   `json:"state_hash"`
	Time        string   `json:"time,omitempty"`
	Skipped     []string `json:"skipped_checkpoints,omitempty"`
	Cut         bool     `json:"cut,omitempty"`
	CutReason   string   `json:"cut_reason,omitempty"`
	// Rejected entries (--allow-rejected): not ops, rejected as
	// store.OpsApplier rejects them; FirstRejected is the first's index.
	Rejected      uint64 `json:"rejected,omitempty"`
	FirstRejected uint64 `json:"first_rejected,omitempty"`
	StoreDir      string `json:"store_dir"`
	TookMs        int64  `json:"took_ms"`
}

// cmdRestoreArgs runs 'roomlog restore' (its own flags; no ZooKeeper).
func cmdRestoreArgs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("roomlog restore", flag.ContinueOnError)
	fs.SetOutput(stderr)
	dir := fs.String("archive", "", "the archive directory (required)")
	room := fs.String("room", "", "the room (required)")
	toIndex := fs.Uint64("to-index", 0, "restore to exactly this index")
	toTime := fs.String("to-time", "", "restore to the last index committed at or before this time (RFC 3339)")
	out := fs.String("out", "", "the new data dir (DATADIR/store must not exist or be empty) (required)")
	applier := fs.String("applier", "ops", "the room's applier: ops (store.OpsApplier; an entry that is not ops fails the restore, naming it)")
	allowRejected := fs.Bool("allow-rejected", false, "with --applier ops: apply an entry that is not ops as the room's members did (store.OpsApplier rejects it, writing nothing) instead of failing; only for a room whose members apply store.OpsApplier")
	incarnation := fs.String("incarnation", "", "the room incarnation: the czxid of its room znode (e.g. 0x1f), and its epoch znode when several share the czxid (0x1f/epoch-<16 hex>); required when the archive holds several (the error lists them)")
	asJSON := fs.Bool("json", false, "machine-readable JSON output")
	fs.Usage = func() {
		fmt.Fprint(stderr, "usage: roomlog restore [flags]\n\n"+restoreUsage+"\nflags:\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "roomlog restore: "+format+"\n", a...)
		return exitUsage
	}
	switch {
	case fs.NArg() > 0:
		return usageErr("unexpected arguments %q", fs.Args())
	case *dir == "" || *room == "" || *out == "":
		return usageErr("--archive, --room and --out are required")
	case *toIndex != 0 && *toTime != "":
		return usageErr("give --to-index or --to-time, not both")
	case *applier != "ops":
		return usageErr("--applier %q: this binary knows ops (store.OpsApplier); restore the demo namespace with 'dfsmaster-demo restore'", *applier)
	}
	rej := &rejectCounter{}
	var ap store.Applier = store.OpsApplier{Strict: true}
	if *allowRejected {
		ap = rej
	}
	opts := archive.RestoreOptions{Room: *room, ToIndex: *toIndex, DataDir: *out, Applier: ap}
	if *incarnation != "" {
		cz, fence, err := archive.ParseIncarnation(*incarnation)
		if err != nil {
			return usageErr("--incarnation: %v", err)
		}
		opts.RoomCzxid, opts.RoomFence = cz, fence
	}
	if *toTime != "" {
		t, err := time.Parse(time.RFC3339Nano, *toTime)
		if err != nil {
			return usageErr("--to-time: %v", err)
		}
		opts.ToTime = t
	}
	a, err := archive.OpenDir(*dir)
	if err != nil {
		fmt.Fprintf(stderr, "roomlog restore: %v\n", err)
		return exitFail
	}
	opts.Archive = a
	prog := conv.StartProgress(stderr, "roomlog restore", conv.IsTerminal(stderr))
	prog.Step("applying the archive of room %s", *room)
	opts.Progress = func(applied, target uint64) { prog.Count(int64(applied), int64(target), "entries") }
	res, err := archive.Restore(ctx, opts)
	prog.Stop()
	if err != nil {
		fmt.Fprintf(stderr, "roomlog restore: %v\n", err)
		if errors.Is(err, store.ErrApply) {
			fmt.Fprint(stderr, "roomlog restore: the entry is not ops (store.OpsApplier's format): if the room's members apply with another "+
				"Applier, restore with it (the demo namespace: 'dfsmaster-demo restore'); if they apply store.OpsApplier and rejected "+
				"such entries too, give --allow-rejected. Nothing was restored.\n")
		}
		return exitFail
	}
	res2 := restoreOut{RestoreResult: res, Rejected: rej.n, FirstRejected: rej.first}
	if err := printRestore(stdout, res2, *asJSON); err != nil {
		fmt.Fprintf(stderr, "roomlog restore: %v\n", err)
		return exitFail
	}
	return exitOK
}

// rejectCounter is store.OpsApplier (not strict) counting the entries it
// rejects, as members applying store.OpsApplier rejected them.
type rejectCounter struct {
	n, first uint64
}

func (r *rejectCounter) Apply(b store.Batch, e store.Entry) ([]byte, error) {
	resp, err := store.OpsApplier{}.Apply(b, e)
	if err == nil && store.OpsResult(resp) != nil {
		if r.n == 0 {
			r.first = e.Index
		}
		r.n++
	}
	return resp, err
}

// restoreOut is what restore prints: the result and the entries rejected
// (--allow-rejected).
type restoreOut struct {
	archive.RestoreResult
	Rejected, FirstRejected uint64
}

func printRestore(w io.Writer, out restoreOut, asJSON bool) error {
	res := out.RestoreResult
	j := restoreJSON{Rejected: out.Rejected, FirstRejected: out.FirstRejected, Room: res.Origin.Room, RoomCzxid: res.Origin.RoomCzxid, EpochZnode: res.Origin.Fence, Chosen: res.Chosen, Index: res.Index, Epoch: res.Epoch, RoomVersion: res.RoomVersion,
		Checkpoint: res.Checkpoint, Entries: res.Entries, Channels: res.Channels, RunHash: res.RunHash.String(),
		RunHashAll: fmt.Sprintf("%x", res.RunHash.Sum), RunBase: res.RunHash.Base, StateHash: res.StateHash,
		StoreDir: res.StoreDir, TookMs: res.Took.Milliseconds(), Cut: res.Cut, CutReason: res.CutReason, Skipped: res.Skipped}
	if !res.Time.IsZero() {
		j.Time = res.Time.Format(time.RFC3339Nano)
	}
	if asJSON {
		return writeJSON(w, j)
	}
	_, err := fmt.Fprintf(w, "restored room %q (incarnation %s) at index %d (epoch %d) into %s\n"+
		"  from checkpoint %d + %d archived entries (%d channels), in %v\n"+
		"  running hash %s (base %d)\n  state hash   %s\n",
		j.Room, res.Origin.ID(), j.Index, j.Epoch, j.StoreDir, j.Checkpoint, j.Entries, j.Channels, res.Took.Round(time.Millisecond),
		j.RunHash, j.RunBase, j.StateHash)
	if err == nil {
		if j.RoomVersion > 0 {
			_, err = fmt.Fprintf(w, "  written under room version %d (a re-seed from it creates the room at that version)\n", j.RoomVersion)
		} else {
			_, err = fmt.Fprintf(w, "  room version unknown (no archived channel): give 'roomlog reseed' --room-version\n")
		}
	}
	if err == nil && j.Chosen != "" {
		_, err = fmt.Fprintf(w, "  incarnation chosen as %s\n", j.Chosen)
	}
	if err == nil && j.Time != "" {
		_, err = fmt.Fprintf(w, "  index %d committed at %s (ZooKeeper time)\n", j.Index, j.Time)
	}
	for _, sk := range j.Skipped {
		if err == nil {
			_, err = fmt.Fprintf(w, "  SKIPPED damaged %s\n", sk)
		}
	}
	if err == nil && j.Rejected > 0 {
		_, err = fmt.Fprintf(w, "  %d entries are not ops and were rejected (nothing written), the first at index %d: "+
			"right only if the room's members apply store.OpsApplier\n", j.Rejected, j.FirstRejected)
	}
	if err == nil && j.Cut {
		_, err = fmt.Fprintf(w, "  CUT BACK: %s\n", j.CutReason)
	}
	return err
}

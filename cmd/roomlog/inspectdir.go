package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/store"
)

// ---- inspect DATADIR ----
//
// A stopped member's data dir, read without ZooKeeper: the marker
// (roomlog-member.json: the room incarnation the state belongs to; replica
// package doc, "Data dir"), the store opened read-only (position, running
// hash, state hash), the local checkpoints (their manifests) and a
// diverged mark (roomlog-diverged.txt) if the integrity check left one.

// Data dir layout (replica package doc).
const (
	markerFile   = "roomlog-member.json"
	divergedFile = "roomlog-diverged.txt"
)

type inspectMarker struct {
	Base        string `json:"base"`
	Room        string `json:"room"`
	RoomCzxid   string `json:"room_czxid"`
	RoomVersion int    `json:"room_version,omitempty"`
}

type inspectCheckpoint struct {
	Index   uint64 `json:"index"`
	Epoch   uint64 `json:"epoch"`
	Room    string `json:"room"`
	Czxid   string `json:"room_czxid"`
	Created string `json:"created"`
	Bytes   int64  `json:"bytes"`
	Files   int    `json:"files"`
	Path    string `json:"path"`
}

type inspectOut struct {
	Dir    string         `json:"dir"`
	Marker *inspectMarker `json:"marker"` // null: none (a new or restored data dir)
	// Diverged holds the integrity check's verdict when it condemned the
	// data dir (the member refuses to start on it).
	Diverged  string              `json:"diverged,omitempty"`
	Applied   uint64              `json:"applied"`
	Epoch     uint64              `json:"epoch"`
	Batch     string              `json:"batch"`
	RunHash   string              `json:"run_hash"`
	HashBase  uint64              `json:"run_hash_base"`
	StateHash string              `json:"state_hash"`
	Ckpts     []inspectCheckpoint `json:"checkpoints"`
}

// errLocked marks a store another process holds open.
var errLocked = errors.New("the data dir is locked: is a member still running on it? stop it first")

func cmdInspect(_ context.Context, _ *inspector, o options, args []string, stdout, _ io.Writer) error {
	dir := args[0]
	fi, err := os.Stat(dir)
	if err != nil {
		return usageError{Err: fmt.Errorf("data dir: %w", err)}
	}
	if !fi.IsDir() {
		return usageError{Err: fmt.Errorf("data dir %s is not a directory", dir)}
	}
	out := inspectOut{Dir: dir, Ckpts: []inspectCheckpoint{}}
	if b, err := os.ReadFile(filepath.Join(dir, markerFile)); err == nil {
		var m struct {
			Base        string
			Room        string
			RoomCzxid   int64
			RoomVersion int
		}
		if err := json.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("%s is malformed: %w", filepath.Join(dir, markerFile), err)
		}
		out.Marker = &inspectMarker{Base: m.Base, Room: m.Room, RoomCzxid: fmt.Sprintf("0x%x", m.RoomCzxid), RoomVersion: m.RoomVersion}
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if b, err := os.ReadFile(filepath.Join(dir, divergedFile)); err == nil {
		out.Diverged = strings.TrimSpace(string(b))
	}
	storeDir := filepath.Join(dir, "store")
	if _, err := os.Stat(storeDir); err != nil {
		return fmt.Errorf("%s holds no store (%w): not a member's data dir", dir, err)
	}
	st, err := store.Open(storeDir, &store.Options{ReadOnly: true})
	if err != nil {
		if isLockErr(err) {
			return fmt.Errorf("%s: %w (%v)", storeDir, errLocked, err)
		}
		return fmt.Errorf("open the store %s read-only: %w", storeDir, err)
	}
	p := st.Position()
	out.Applied, out.Epoch, out.RunHash, out.HashBase = p.Index, p.Epoch, p.Hash.String(), p.Hash.Base
	out.Batch = fmt.Sprintf("%d+%d crc %08x", p.Batch.First, p.Batch.Count, p.Batch.CRC)
	out.StateHash, _, err = st.StateHash()
	st.Close()
	if err != nil {
		return fmt.Errorf("state hash of %s: %w", storeDir, err)
	}
	ckpts, err := checkpoint.List(filepath.Join(dir, "checkpoints"))
	if err != nil {
		return err
	}
	for _, c := range ckpts {
		m := c.Manifest
		out.Ckpts = append(out.Ckpts, inspectCheckpoint{Index: m.Index, Epoch: m.Epoch, Room: m.Room, Czxid: fmt.Sprintf("0x%x", m.RoomCzxid),
			Created: m.Created.UTC().Format("2006-01-02T15:04:05Z"), Bytes: c.Bytes, Files: len(m.Files), Path: c.Path})
	}
	if o.export != "" {
		if err := exportSummary(o.export, out); err != nil {
			return err
		}
	}
	if o.json {
		return writeJSON(stdout, out)
	}
	if m := out.Marker; m != nil {
		fmt.Fprintf(stdout, "data dir %s: room %s/%s, incarnation %s, room version %d\n", dir, m.Base, m.Room, m.RoomCzxid, max(m.RoomVersion, 1))
	} else {
		fmt.Fprintf(stdout, "data dir %s: no member marker (new, or built by roomlog restore)\n", dir)
	}
	if out.Diverged != "" {
		fmt.Fprintf(stdout, "DIVERGED (the member refuses to start on it): %s\n", out.Diverged)
	}
	if o.export != "" {
		fmt.Fprintf(stdout, "summary written to %s (for 'roomlog reseed ROOM --from-summaries' on the host that gathers them)\n", o.export)
	}
	fmt.Fprintf(stdout, "applied index %d, epoch %d, last batch %s\n", out.Applied, out.Epoch, out.Batch)
	fmt.Fprintf(stdout, "running hash %s (chain from index %d), state hash %s\n", out.RunHash, out.HashBase, out.StateHash)
	t := newTable(stdout, "CHECKPOINT", "EPOCH", "ROOM", "INCARNATION", "CREATED", "BYTES", "FILES")
	for _, c := range out.Ckpts {
		t.row(u64(c.Index), u64(c.Epoch), c.Room, c.Czxid, c.Created, fmt.Sprint(c.Bytes), fmt.Sprint(c.Files))
	}
	return t.flush()
}

// isLockErr reports whether err is Pebble's refusal of a locked directory.
func isLockErr(err error) bool {
	s := err.Error()
	return strings.Contains(s, "resource temporarily unavailable") || strings.Contains(s, "lock")
}

package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/roomlog/roomlog/checkpoint"
)

// origin is the room incarnation this replica's state and checkpoints
// belong to.
func (r *Replica) origin() checkpoint.Origin {
	return checkpoint.Origin{Room: r.cfg.Room, RoomCzxid: r.roomCzxid}
}

// markerName is the file in DataDir that ties it to one incarnation of one
// room: {"Base", "Room", "RoomCzxid"[, "EpochZnode"][, "RoomVersion"]}
// (JSON). RoomCzxid is the zxid that created the room znode, so a room
// deleted and re-created under the same name is told apart from the one
// this state was built from; EpochZnode is the room's epoch znode name
// (omitted by markers of earlier releases), which tells apart a room
// re-seeded in a wiped ensemble at the czxid a lost incarnation had, and
// which a re-seed from this data dir records as the incarnation it
// continues (<room>/reseed, and so the archive's re-seed chain). RoomVersion is the highest room version the member saw the room at
// (omitted before it saw one above 1): a re-seed after ZooKeeper lost the
// room creates it at that version, not at 1.
const markerName = "roomlog-member.json"

type dirMarker struct {
	Base        string
	Room        string
	RoomCzxid   int64
	EpochZnode  string `json:",omitempty"`
	RoomVersion int    `json:",omitempty"`
}

// incarnation names the incarnation m records: 0x<czxid>[/<epoch znode>].
func (m dirMarker) incarnation() string {
	if m.EpochZnode == "" {
		return fmt.Sprintf("0x%x", m.RoomCzxid)
	}
	return fmt.Sprintf("0x%x/%s", m.RoomCzxid, m.EpochZnode)
}

// sameRoom reports whether m names the same room incarnation as o: the
// same czxid and, where both record one, the same epoch znode name.
func (m dirMarker) sameRoom(o dirMarker) bool {
	return m.Base == o.Base && m.Room == o.Room && m.RoomCzxid == o.RoomCzxid &&
		(m.EpochZnode == "" || o.EpochZnode == "" || m.EpochZnode == o.EpochZnode)
}

// checkDataDir refuses a data dir whose state belongs to another room (or
// to an earlier incarnation of this one): its applied index would not
// match this log. An empty store adopts the room.
//
// It then drops the local checkpoints this replica must not advertise or
// serve (dropBadCheckpoints).
func (r *Replica) checkDataDir(ctx context.Context, czxid int64) error {
	r.roomCzxid = czxid
	if err := r.checkMarker(ctx, czxid); err != nil {
		return err
	}
	r.dropBadCheckpoints()
	return nil
}

// readMarker reads DataDir's marker: nil when there is none.
func readMarker(dataDir string) (*dirMarker, error) {
	path := filepath.Join(dataDir, markerName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("replica: read %s: %w", path, err)
	}
	var m dirMarker
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("%w: %s is malformed: %v", ErrWrongDataDir, path, err)
	}
	return &m, nil
}

// checkMarkerRoom refuses, before ZooKeeper is read, a data dir whose
// marker names another room (or base): its store must not be taken for a
// member of a room that vanished.
func (r *Replica) checkMarkerRoom() error {
	path := filepath.Join(r.cfg.DataDir, markerName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) || r.applied.Load() == 0 {
		return nil
	}
	if err != nil {
		return fmt.Errorf("replica: read %s: %w", path, err)
	}
	var have dirMarker
	if err := json.Unmarshal(b, &have); err != nil {
		return fmt.Errorf("%w: %s is malformed: %v", ErrWrongDataDir, path, err)
	}
	if have.Base != r.cfg.Base || have.Room != r.cfg.Room {
		return fmt.Errorf("%w: %s holds the state of room %s/%s, not %s/%s",
			ErrWrongDataDir, r.cfg.DataDir, have.Base, have.Room, r.cfg.Base, r.cfg.Room)
	}
	return nil
}

// checkMarker checks (or writes) DataDir's room marker.
func (r *Replica) checkMarker(ctx context.Context, czxid int64) error {
	want := dirMarker{Base: r.cfg.Base, Room: r.cfg.Room, RoomCzxid: czxid, EpochZnode: r.room.EpochZnode()}
	path := filepath.Join(r.cfg.DataDir, markerName)
	b, err := os.ReadFile(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return fmt.Errorf("replica: read %s: %w", path, err)
	default:
		var have dirMarker
		if err := json.Unmarshal(b, &have); err != nil {
			return fmt.Errorf("%w: %s is malformed: %v", ErrWrongDataDir, path, err)
		}
		if have.sameRoom(want) {
			r.markerRV = have.RoomVersion
			return nil
		}
		if have.Base == want.Base && have.Room == want.Room {
			want.RoomVersion = have.RoomVersion // a re-seed's incarnation keeps the version
		}
		if r.applied.Load() > 0 {
			if have.Base != want.Base || have.Room != want.Room {
				return fmt.Errorf("%w: %s holds the state of room %s/%s, not %s/%s",
					ErrWrongDataDir, r.cfg.DataDir, have.Base, have.Room, want.Base, want.Room)
			}
			// Another incarnation: accepted only at a re-seed's position.
			if err := r.adoptReseed(ctx, have, want); err != nil {
				return err
			}
		}
	}
	b, err = json.Marshal(want)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("replica: write %s: %w", tmp, err)
	}
	f, err := os.Open(tmp)
	if err == nil {
		err = f.Sync()
		f.Close()
	}
	if err != nil {
		return fmt.Errorf("replica: sync %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("replica: rename %s: %w", tmp, err)
	}
	r.markerRV = want.RoomVersion
	return nil
}

// recordRoomVersion records room version v, the version the room's
// formats are at now (the room meta's, or a higher one while channels
// written under it remain: a downgrade in progress), in DataDir's marker
// when it differs from what the marker holds (loop only; rare: once per
// move, a finished downgrade included), so that a re-seed after ZooKeeper
// lost the room restores it. A failed write is logged and tried again at
// the next read of the room version.
func (r *Replica) recordRoomVersion(v int) {
	if v == r.markerRV || v < 1 {
		return
	}
	path := filepath.Join(r.cfg.DataDir, markerName)
	b, err := os.ReadFile(path)
	var m dirMarker
	if err == nil {
		err = json.Unmarshal(b, &m)
	}
	if err != nil {
		r.log.Warn("cannot record the room version in the data dir's marker; will retry", "version", v, "err", err)
		return
	}
	if m.RoomVersion != v {
		m.RoomVersion = v
		if err := writeMarker(r.cfg.DataDir, m); err != nil {
			r.log.Warn("cannot record the room version in the data dir's marker; will retry", "version", v, "err", err)
			return
		}
	}
	r.markerRV = m.RoomVersion
}

// divergedName is the file in DataDir that records that the integrity
// check found this member's state diverged (package doc, "Integrity"): a
// restart on that data dir refuses, so the member cannot lead on it
// before its peers outvote it again.
const divergedName = "roomlog-diverged.txt"

// checkDiverged refuses a data dir the integrity check condemned.
func checkDiverged(dataDir string) error {
	path := filepath.Join(dataDir, divergedName)
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("replica: read %s: %w", path, err)
	}
	if len(b) > 4096 {
		b = b[:4096]
	}
	return fmt.Errorf("%w: %s records that this member's state diverged from the other members' (%s); "+
		"replace the data dir (move it away and let the member bootstrap from a peer's checkpoint)",
		ErrDiverged, path, strings.TrimSpace(string(b)))
}

// markDiverged records err in DataDir (divergedName), synced with its
// directory, so that a restart refuses. It writes from a goroutine of the
// replica's (Close waits for it, bounded like every wait on the disk);
// a failure is logged (the member has failed anyway).
func (r *Replica) markDiverged(err error) {
	path := filepath.Join(r.cfg.DataDir, divergedName)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		tmp := path + ".tmp"
		f, ferr := os.Create(tmp)
		if ferr == nil {
			_, ferr = f.WriteString(time.Now().UTC().Format(time.RFC3339) + " " + err.Error() + "\n")
			ferr = errors.Join(ferr, f.Sync(), f.Close())
		}
		if ferr == nil {
			ferr = os.Rename(tmp, path)
		}
		if ferr == nil {
			ferr = fsyncDir(r.cfg.DataDir)
		}
		if ferr != nil {
			r.log.Error("integrity check: could not record the divergence in the data dir", "path", path, "err", ferr)
		}
	}()
}

// dropBadCheckpoints runs in Open once the room's incarnation is known:
// every local checkpoint is checked (checkpoint.Check: our origin, its
// files at their sizes, and that they open as a store at its index), and
// one that fails is removed, so that nothing we advertise or serve is junk
// (a manifest that passes its checksum but describes no store), another
// incarnation's, or a format-1 checkpoint (which records no origin: the
// replica refuses those rather than guess). The advertised index is
// recomputed; if something was dropped and the store holds state, a fresh
// checkpoint is asked for at once.
func (r *Replica) dropBadCheckpoints() {
	l, err := checkpoint.List(r.ckptRoot)
	if err != nil {
		r.log.Warn("listing local checkpoints failed", "err", err)
		return
	}
	dropped := false
	for _, info := range l {
		if _, err := checkpoint.Check(info.Path, r.origin()); err != nil {
			if !errors.Is(err, checkpoint.ErrCorrupt) && !errors.Is(err, checkpoint.ErrForeign) {
				r.log.Warn("checking a local checkpoint failed (not a verdict on it: kept)", "path", info.Path, "err", err)
				continue
			}
			r.log.Warn("dropping a local checkpoint this replica must not serve", "path", info.Path, "index", info.Manifest.Index, "err", err)
			if err := checkpoint.Remove(info.Path); err != nil {
				r.log.Error("removing a bad checkpoint failed", "path", info.Path, "err", err)
			}
			dropped = true
		}
	}
	var idx uint64
	if n, err := checkpoint.Newest(r.ckptRoot); err == nil {
		idx = n.Manifest.Index
	}
	r.localCkpt.Store(idx)
	applied := r.applied.Load()
	r.sinceEntries.Store(int64(applied - min(idx, applied)))
	if dropped && applied > idx {
		r.ckptTrig.Notify()
	}
}

// Names a bootstrap's store swap leaves in DataDir (see installCheckpoint
// and checkpoint.Restore, which builds the new store in DataDir/.tmp-restore-*).
const (
	oldStoreSuffix   = ".old"
	restoreTmpPrefix = ".tmp-restore-"
)

// recoverInterruptedRestore resolves what a crash in the middle of a
// bootstrap's store swap left in DataDir, before the store is opened:
//
//   - DataDir/store.old without DataDir/store: the crash came after the
//     old store was moved aside and before the restored one was renamed
//     into place (or while a failed restore was being undone): the old
//     store is put back.
//   - both: the restored store was renamed into place (atomically, after
//     it was complete and fsynced): store.old is deleted.
//   - DataDir/.tmp-restore-*: a partial restore or a failed store being
//     deleted: removed.
func (r *Replica) recoverInterruptedRestore() error {
	dir := r.cfg.DataDir
	aside := r.storeDir + oldStoreSuffix
	if _, err := os.Lstat(aside); err == nil {
		if _, err := os.Lstat(r.storeDir); errors.Is(err, os.ErrNotExist) {
			r.log.Warn("a bootstrap was interrupted before its new store was in place; putting the old store back", "dir", aside)
			if err := os.Rename(aside, r.storeDir); err != nil {
				return fmt.Errorf("replica: put %s back: %w", aside, err)
			}
		} else if err != nil {
			return fmt.Errorf("replica: %w", err)
		} else {
			r.log.Warn("a bootstrap was interrupted after its new store was in place; removing the old store", "dir", aside)
			if err := os.RemoveAll(aside); err != nil {
				return fmt.Errorf("replica: remove %s: %w", aside, err)
			}
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("replica: %w", err)
	}
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("replica: data dir: %w", err)
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), restoreTmpPrefix) {
			if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
				return fmt.Errorf("replica: remove %s: %w", e.Name(), err)
			}
		}
	}
	return fsyncDir(dir)
}

package replica

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// markerName is the file in DataDir that ties it to one incarnation of one
// room: {"Base", "Room", "RoomCzxid"} (JSON). RoomCzxid is the zxid that
// created the room znode, so a room deleted and re-created under the same
// name is told apart from the one this state was built from.
const markerName = "roomlog-member.json"

type dirMarker struct {
	Base      string
	Room      string
	RoomCzxid int64
}

// checkDataDir refuses a data dir whose state belongs to another room (or
// to an earlier incarnation of this one): its applied index would not
// match this log. An empty store adopts the room.
func (r *Replica) checkDataDir(czxid int64) error {
	want := dirMarker{Base: r.cfg.Base, Room: r.cfg.Room, RoomCzxid: czxid}
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
		if have == want {
			return nil
		}
		if r.applied.Load() > 0 {
			if have.Base != want.Base || have.Room != want.Room {
				return fmt.Errorf("%w: %s holds the state of room %s/%s, not %s/%s",
					ErrWrongDataDir, r.cfg.DataDir, have.Base, have.Room, want.Base, want.Room)
			}
			return fmt.Errorf("%w: %s holds the state of an earlier room %s/%s (created at zxid 0x%x; the room now was created at 0x%x): move the directory away",
				ErrWrongDataDir, r.cfg.DataDir, want.Base, want.Room, have.RoomCzxid, want.RoomCzxid)
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
	return nil
}

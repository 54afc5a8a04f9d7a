package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/version"
)

// ---- room-version ----
//
// The one command that writes: with --set it records the room's target
// version (replica.SetRoomVersionTarget, the persistent znode
// <room>/version); the primary moves the room there when every live member
// supports it (replica package doc, "Room version"). Without --set it only
// reads (replica.ReadRoomVersion).

// roomVersionMember is one live member as room-version shows it.
type roomVersionMember struct {
	ID             string `json:"id"`
	Addr           string `json:"addr"`
	Role           string `json:"role"`
	Epoch          uint64 `json:"epoch"`
	Applied        uint64 `json:"applied"`
	RoomVersionMin int    `json:"room_version_min"`
	RoomVersionMax int    `json:"room_version_max"`
}

// roomVersionOut is replica.RoomVersionStatus with the tool's JSON keys.
type roomVersionOut struct {
	Room    string `json:"room"`
	Version int    `json:"version"`
	// Since is the first index written under Version (0: since the room
	// began).
	Since  uint64 `json:"since"`
	Target int    `json:"target"` // 0: none set
	// Blocked says why the room is not at Target ("" when it is, or none
	// is set).
	Blocked  string `json:"blocked"`
	Complete bool   `json:"complete"`
	// Incomplete lists why Complete is false, in the operator's terms
	// (derived from the fields above; empty when complete).
	Incomplete           []string            `json:"incomplete,omitempty"`
	OldestChannelVersion int                 `json:"oldest_channel_version"`
	Members              []roomVersionMember `json:"members"`
}

// roomVersionSetOut is what room-version --set --json prints.
type roomVersionSetOut struct {
	Set            int    `json:"set"`
	PreviousTarget int    `json:"previous_target"` // 0: none was set
	Wait           string `json:"wait,omitempty"`  // --wait, when given
	// Reached: the room is at Set and complete (always false without
	// --wait: the primary has not had time to move it).
	Reached bool           `json:"reached"`
	Status  roomVersionOut `json:"status"`
}

func toRoomVersionOut(st replica.RoomVersionStatus) roomVersionOut {
	out := roomVersionOut{Room: st.Room, Version: st.Version, Since: st.Since, Target: st.Target,
		Blocked: st.Blocked, Complete: st.Complete, OldestChannelVersion: st.OldestChannelVersion,
		Members: []roomVersionMember{}}
	for _, m := range st.Members {
		out.Members = append(out.Members, roomVersionMember{ID: m.ID, Addr: m.Addr, Role: m.Role.String(),
			Epoch: m.Epoch, Applied: m.Applied, RoomVersionMin: m.RoomVersionMin, RoomVersionMax: m.RoomVersionMax})
	}
	if !st.Complete {
		out.Incomplete = incompleteReasons(st, true)
	}
	return out
}

// incompleteReasons says why st is not complete, following
// ReadRoomVersion's definition: the room at the target, no channel of
// another room version left, every live member past the change. Blocked
// is not repeated; withTarget adds that the room is not at the target.
func incompleteReasons(st replica.RoomVersionStatus, withTarget bool) []string {
	var why []string
	if st.Target != 0 && st.Target != st.Version {
		if withTarget {
			why = append(why, fmt.Sprintf("the room is at room version %d, not the target %d", st.Version, st.Target))
		}
		primary := false
		for _, m := range st.Members {
			primary = primary || m.Role == replica.RolePrimary
		}
		if !primary {
			why = append(why, "no live member is primary (only a primary moves the room)")
		}
	}
	if st.OldestChannelVersion != 0 && st.OldestChannelVersion != st.Version {
		why = append(why, fmt.Sprintf("channels opened under room version %d remain (the primary deletes them once a checkpoint covers them and every live member applied past them)",
			st.OldestChannelVersion))
	}
	if st.Since > 0 {
		for _, m := range st.Members {
			if m.Applied+1 < st.Since {
				why = append(why, fmt.Sprintf("member %s applied index %d, not yet %d (the last index before the change)", m.ID, m.Applied, st.Since-1))
			}
		}
	}
	return why
}

// readRoomVersion reads the room's version status within the inspector's
// timeout, with the tool's error wording.
func (in *inspector) readRoomVersion(ctx context.Context, room string) (replica.RoomVersionStatus, error) {
	rctx, cancel := in.bounded(ctx)
	defer cancel()
	st, err := replica.ReadRoomVersion(rctx, in.c, in.base, room)
	if err != nil {
		return st, roomVersionErr(in, room, err)
	}
	return st, nil
}

// roomVersionErr words an error of replica's room version functions like
// the other commands' errors.
func roomVersionErr(in *inspector, room string, err error) error {
	if errors.Is(err, logroom.ErrNoRoom) {
		return err // "room %q not found under BASE"
	}
	if m, ok := malformed(err); ok {
		return fmt.Errorf("room %q under %s: %w", room, in.base, m)
	}
	return zkErr("", err)
}

func cmdRoomVersion(ctx context.Context, in *inspector, o options, args []string, stdout, stderr io.Writer) error {
	room := args[0]
	if !o.set["set"] {
		st, err := in.readRoomVersion(ctx, room)
		if err != nil {
			return err
		}
		out := toRoomVersionOut(st)
		if o.json {
			return writeJSON(stdout, out)
		}
		return printRoomVersion(stdout, out)
	}

	// --set: read first (a missing room or a permission problem is named
	// before anything is written), then record the target.
	before, err := in.readRoomVersion(ctx, room)
	if err != nil {
		return err
	}
	sctx, cancel := in.bounded(ctx)
	err = replica.SetRoomVersionTarget(sctx, in.c, in.base, room, o.setVersion)
	cancel()
	if err != nil {
		return fmt.Errorf("set the room version target of room %q: %w", room, roomVersionErr(in, room, err))
	}
	if !o.json {
		prev := "none"
		if before.Target != 0 {
			prev = fmt.Sprint(before.Target)
		}
		fmt.Fprintf(stdout, "room %s: room version target set to %d (was %s); the room is at room version %d\n",
			room, o.setVersion, prev, before.Version)
	}
	res := roomVersionSetOut{Set: o.setVersion, PreviousTarget: before.Target}
	if o.wait <= 0 {
		st, err := in.readRoomVersion(ctx, room)
		if err != nil {
			return err
		}
		res.Status = toRoomVersionOut(st)
		if o.json {
			return writeJSON(stdout, res)
		}
		if st.Blocked != "" {
			fmt.Fprintf(stdout, "blocked: %s\n", st.Blocked)
		}
		fmt.Fprintf(stdout, "the primary moves the room once every live member supports room version %d; follow it with 'roomlog room-version %s' (or --wait)\n",
			o.setVersion, room)
		return nil
	}

	res.Wait = o.wait.String()
	st, reached, err := in.waitRoomVersion(ctx, room, o.setVersion, o.wait, func(line string) {
		if !o.json {
			fmt.Fprintln(stdout, line)
		}
	})
	if err != nil {
		return err
	}
	res.Status, res.Reached = toRoomVersionOut(st), reached
	if o.json {
		if err := writeJSON(stdout, res); err != nil {
			return err
		}
	} else if reached {
		fmt.Fprintf(stdout, "room %s is at room version %d since index %d, complete\n", room, st.Version, st.Since)
	}
	if !reached {
		why := whyNot(st)
		if why == "" {
			why = "not complete"
		}
		return fmt.Errorf("room %q did not reach room version %d (complete) within %v (--wait): at room version %d: %s",
			room, o.setVersion, o.wait, st.Version, why)
	}
	return nil
}

// whyNot is why st is not at its target and complete: the blocked
// reason, then what else keeps it incomplete ("" when nothing does).
func whyNot(st replica.RoomVersionStatus) string {
	var why []string
	if st.Blocked != "" {
		why = append(why, st.Blocked)
	}
	return strings.Join(append(why, incompleteReasons(st, false)...), "; ")
}

// pollInterval is how often --wait reads the room's status.
const pollInterval = 200 * time.Millisecond

// waitRoomVersion polls the room until it is at room version v and
// complete (reached), or until wait passes (not reached, with the last
// status read). Every change of what stops it is reported through
// progress. A lost connection is retried until wait passes; any other
// error ends the wait.
func (in *inspector) waitRoomVersion(ctx context.Context, room string, v int, wait time.Duration,
	progress func(string)) (st replica.RoomVersionStatus, reached bool, err error) {
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	last := ""
	for {
		rctx, rcancel := in.bounded(wctx)
		cur, err := replica.ReadRoomVersion(rctx, in.c, in.base, room)
		rcancel()
		switch {
		case err == nil:
			st = cur
			if st.Version == v && st.Complete {
				return st, true, nil
			}
			line := fmt.Sprintf("waiting: room version %d, target %d", st.Version, st.Target)
			if why := whyNot(st); why != "" {
				line += ": " + why
			}
			if line != last {
				progress(line)
				last = line
			}
		case ctx.Err() != nil:
			return st, false, roomVersionErr(in, room, err)
		case wctx.Err() != nil: // the wait ended during the read
		case errors.Is(err, logroom.ErrUnavailable):
			if line := "waiting: " + zkErr("", err).Error(); line != last {
				progress(line)
				last = line
			}
		default:
			return st, false, roomVersionErr(in, room, err)
		}
		select {
		case <-ctx.Done():
			return st, false, fmt.Errorf("interrupted: %w", ctx.Err())
		case <-wctx.Done():
			if st.Room == "" { // never read it
				return st, false, fmt.Errorf("room %q: no status read within %v (--wait): %s", room, wait, last)
			}
			return st, false, nil
		case <-tick.C:
		}
	}
}

// printRoomVersion prints out as text: the room's version lines, then a
// table of the live members.
func printRoomVersion(w io.Writer, out roomVersionOut) error {
	since := fmt.Sprintf("since index %d", out.Since)
	if out.Since == 0 {
		since = "since the room began"
	}
	target := "none"
	if out.Target != 0 {
		target = fmt.Sprint(out.Target)
	}
	complete := "yes"
	if !out.Complete {
		complete = "no"
		if len(out.Incomplete) > 0 {
			complete += ": " + strings.Join(out.Incomplete, "; ")
		}
	}
	blocked := out.Blocked
	if blocked == "" {
		blocked = "-"
	}
	oldest := "- (no channel)"
	if out.OldestChannelVersion != 0 {
		oldest = fmt.Sprintf("room version %d", out.OldestChannelVersion)
	}
	kv := newTable(w, "room:", out.Room)
	kv.row("room version:", fmt.Sprintf("%d (%s)", out.Version, since))
	kv.row("target:", target)
	kv.row("complete:", complete)
	kv.row("blocked:", blocked)
	kv.row("oldest channel:", oldest)
	kv.row("this binary:", fmt.Sprintf("%s, room versions %d..%d", version.Release, version.RoomMin, version.RoomMax))
	if err := kv.flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	if len(out.Members) == 0 {
		_, err := fmt.Fprintln(w, "no live members")
		return err
	}
	t := newTable(w, "ID", "ROLE", "APPLIED", "ROOM VERSIONS")
	for _, m := range out.Members {
		t.row(m.ID, m.Role, u64(m.Applied), fmt.Sprintf("%d..%d", m.RoomVersionMin, m.RoomVersionMax))
	}
	return t.flush()
}

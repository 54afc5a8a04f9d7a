package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/version"
	"github.com/roomlog/roomlog/zkx"
)

// Room versions (package doc, "Room version"). The room meta records the
// room's version; the persistent znode <room>/version records the
// operator's target; members advertise the versions they support in their
// member data (rv_min, rv_max). The primary moves the room to the target
// when every live member supports it, with a checkpoint whose rotation
// records the new version (logroom's Writer.RotateToVersion): one fenced
// Multi seals the open channel, opens the next at the new version and
// rewrites the room meta.

// RoomVersionStatus is what ReadRoomVersion finds in a room.
type RoomVersionStatus struct {
	Room    string
	Version int    // the room's version (1 when its meta records none)
	Since   uint64 // first index written under it (0: since the room began)
	Target  int    // the operator's target (0: none set)
	// Members: the live members, sorted by id, with what they advertise
	// (RoomVersionMin, RoomVersionMax).
	Members []MemberStatus
	// Blocked says why the room is not at Target: members that do not
	// support it, or no primary ("" when it is at Target or none is set).
	Blocked string
	// Complete: the room is at Target (or none is set), every live member
	// applied Since-1 or more, and no channel opened under another room
	// version remains (the primary's checkpoint at the change let them be
	// deleted): a member restarted on any binary that supports Version,
	// on its own data dir or from a peer's checkpoint, reads nothing
	// written under an earlier room version.
	Complete bool
	// OldestChannelVersion is the room version of the oldest channel still
	// in the room (0: no channel).
	OldestChannelVersion int
}

// roomVersions is the range this member advertises: its binary's, capped
// by Config.MaxRoomVersion.
func (r *Replica) roomVersions() (lo, hi int) {
	return advertisedRange(r.cfg.MaxRoomVersion)
}

func advertisedRange(capVersion int) (lo, hi int) {
	hi = version.RoomMax
	if capVersion > 0 {
		hi = min(hi, capVersion)
	}
	return version.RoomMin, hi
}

// unsupportedRoom is the error of a member whose range excludes the
// room's version v.
func (r *Replica) unsupportedRoom(v int) error {
	lo, hi := r.roomVersions()
	capped := ""
	if r.cfg.MaxRoomVersion > 0 && r.cfg.MaxRoomVersion < version.RoomMax {
		capped = fmt.Sprintf(", capped by Config.MaxRoomVersion %d", r.cfg.MaxRoomVersion)
	}
	return fmt.Errorf("replica: %w: room %q is at room version %d; this member (%s) supports room versions %d..%d%s",
		ErrUnsupportedVersion, r.cfg.Room, v, version.Release, lo, hi, capped)
}

// versionFacts is what decideRoomVersion decides on.
type versionFacts struct {
	Primary bool
	Current int // the room's version
	Target  int // the operator's target (0: none)
	// Members: every live member's advertised range, by id (this member's
	// own included).
	Members map[string][2]int
	Moving  bool // a move is already under way
}

// decideRoomVersion: whether this member, as primary, moves the room to
// the target now, and otherwise why the room is not there ("" when it is,
// or no target is set). Only the primary moves it, and only when every
// live member supports the target.
func decideRoomVersion(f versionFacts) (move bool, blocked string) {
	if f.Target == 0 || f.Target == f.Current {
		return false, ""
	}
	var refuse []string
	ids := make([]string, 0, len(f.Members))
	for id := range f.Members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		rg := f.Members[id]
		if f.Target < rg[0] || f.Target > rg[1] {
			refuse = append(refuse, fmt.Sprintf("%s (supports %d..%d)", id, rg[0], rg[1]))
		}
	}
	switch {
	case len(refuse) > 0:
		return false, fmt.Sprintf("target room version %d is not supported by live member(s) %s", f.Target, strings.Join(refuse, ", "))
	case f.Moving:
		return false, fmt.Sprintf("moving to room version %d", f.Target)
	case !f.Primary:
		return false, fmt.Sprintf("the primary moves the room to room version %d", f.Target)
	}
	return true, ""
}

// readVersionTarget reads the operator's target (0: none set). A target
// that does not decode is an error naming the znode (and no move).
func readVersionTarget(ctx context.Context, c *logroom.Client, path string) (int, error) {
	data, _, err := zkx.Get(ctx, c, path)
	if errors.Is(err, zk.ErrNoNode) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("replica: read %s: %w", path, err)
	}
	var t roomVersionTarget
	if err := decode(data, &t); err != nil {
		return 0, fmt.Errorf("replica: room version target %s: %w", path, err)
	}
	if t.V != formatVersion1 || t.Target < 1 {
		return 0, fmt.Errorf("replica: room version target %s: format %d, target %d: %w", path, t.V, t.Target, errBadZnodeData)
	}
	return t.Target, nil
}

// ReadRoomVersion reads a room's version, the operator's target and what
// its live members advertise, without joining it. Tools (roomlog
// room-version) use it.
func ReadRoomVersion(ctx context.Context, c *logroom.Client, base, room string) (RoomVersionStatus, error) {
	if base == "" {
		base = DefaultBase
	}
	info, err := logroom.ReadRoomInfo(ctx, c, base, room)
	if err != nil {
		return RoomVersionStatus{}, err
	}
	st := RoomVersionStatus{Room: room, Version: info.RoomVersion.Version, Since: info.RoomVersion.Since}
	if st.Target, err = readVersionTarget(ctx, c, logroom.RoomPath(base, room, versionZ)); err != nil {
		return st, err
	}
	view, err := ReadRoomView(ctx, c, base, room)
	if err != nil {
		return st, err
	}
	st.Members = view.Live()
	listing, err := logroom.ListChannels(ctx, c, base, room)
	if err != nil {
		return st, err
	}
	if len(listing.Nums) > 0 {
		ch, err := logroom.ReadChannel(ctx, c, base, room, listing.Nums[0])
		if err != nil {
			return st, err
		}
		st.OldestChannelVersion = ch.RoomVersion
	}
	ranges := map[string][2]int{}
	primary := false
	for _, m := range st.Members {
		ranges[m.ID] = [2]int{m.RoomVersionMin, m.RoomVersionMax}
		primary = primary || m.Role == RolePrimary
	}
	_, st.Blocked = decideRoomVersion(versionFacts{Primary: primary, Current: st.Version, Target: st.Target, Members: ranges})
	if !primary && st.Target != 0 && st.Target != st.Version && st.Blocked == "" {
		st.Blocked = "no primary"
	}
	st.Complete = (st.Target == 0 || st.Target == st.Version) &&
		(st.OldestChannelVersion == 0 || st.OldestChannelVersion == st.Version)
	for _, m := range st.Members {
		if st.Since > 0 && m.Applied+1 < st.Since {
			st.Complete = false
		}
	}
	return st, nil
}

// SetRoomVersionTarget records v as the room's target version. The
// primary moves the room there (a checkpoint whose rotation records the
// new version, fenced) once every live member supports v; until then
// ReadRoomVersion's Blocked says why not. It never moves the room itself.
func SetRoomVersionTarget(ctx context.Context, c *logroom.Client, base, room string, v int) error {
	if v < version.RoomMin || v > version.RoomMax {
		return fmt.Errorf("replica: %w: room version %d; this binary (%s) knows room versions %d..%d",
			ErrUnsupportedVersion, v, version.Release, version.RoomMin, version.RoomMax)
	}
	if base == "" {
		base = DefaultBase
	}
	if _, err := logroom.ReadRoomInfo(ctx, c, base, room); err != nil {
		return err
	}
	p := logroom.RoomPath(base, room, versionZ)
	data := encode(roomVersionTarget{V: formatVersion1, Target: v, Set: time.Now().UnixMilli()})
	return c.Retry(ctx, func() error {
		_, err := c.Conn().Set(p, data, -1)
		if errors.Is(err, zk.ErrNoNode) {
			_, err = c.Conn().Create(p, data, 0, c.ACL())
			if errors.Is(err, zk.ErrNodeExists) {
				_, err = c.Conn().Set(p, data, -1)
			}
		}
		return err
	})
}

// SetRoomVersion asks for room version v (SetRoomVersionTarget through
// this member's session) and waits until this member sees the room at v.
// A downgrade is complete only when ReadRoomVersion says so (every member
// past the change, the earlier channels deleted); see the package doc for
// the procedure. If ctx ends first, the error says why the room is not
// there yet (Status().RoomVersionBlocked).
func (r *Replica) SetRoomVersion(ctx context.Context, v int) error {
	if err := r.usable(); err != nil {
		return err
	}
	if lo, hi := r.roomVersions(); v < lo || v > hi {
		return r.unsupportedRoom(v)
	}
	if err := SetRoomVersionTarget(ctx, r.client, r.cfg.Base, r.cfg.Room, v); err != nil {
		return err
	}
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		st := r.Status()
		if st.RoomVersion == v {
			return nil
		}
		if st.Role == RoleFailed {
			return fmt.Errorf("%w: %w", ErrFailed, st.Err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replica: room version %d not reached (at %d): %s: %w", v, st.RoomVersion, st.RoomVersionBlocked, ctx.Err())
		case <-r.stopc:
			return ErrClosed
		case <-tick.C:
		}
	}
}

// onRoomVersion is the loop's handling of a read of the room's version
// and target: a version this member does not support fails it; as
// primary, a target every live member supports starts the move.
func (r *Replica) onRoomVersion(rv logroom.RoomVersion, target int) {
	lp := r.lp
	if _, hi := r.roomVersions(); rv.Version > hi {
		r.step(evFail{Err: r.unsupportedRoom(rv.Version)})
		return
	}
	ranges := map[string][2]int{}
	for id, d := range lp.mem.known {
		lo, hi := d.roomVersions()
		ranges[id] = [2]int{lo, hi}
	}
	lo, hi := r.roomVersions()
	ranges[r.cfg.ID] = [2]int{lo, hi}
	t := r.currentTerm()
	primary := lp.c.role == RolePrimary && t != nil
	move, blocked := decideRoomVersion(versionFacts{Primary: primary, Current: rv.Version, Target: target,
		Members: ranges, Moving: r.versionMoving.Load()})
	if blocked != lp.versionBlocked && blocked != "" && primary {
		r.log.Warn("room version target not reached", "version", rv.Version, "target", target, "why", blocked)
	}
	lp.versionBlocked = blocked
	r.publishSnap(func(s *statusSnap) {
		s.roomVersion, s.roomVersionSince, s.roomVersionTarget, s.roomVersionBlocked = rv.Version, rv.Since, target, blocked
	})
	if !move {
		return
	}
	r.versionMoving.Store(true)
	r.log.Info("moving the room version", "from", rv.Version, "to", target, "members", len(ranges))
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		defer r.versionMoving.Store(false)
		ctx, cancel := context.WithTimeout(r.bgCtx, time.Minute)
		defer cancel()
		if err := r.checkpointAt(ctx, target); err != nil && ctx.Err() == nil {
			r.log.Warn("room version move failed; will retry", "to", target, "err", err)
		}
	}()
}

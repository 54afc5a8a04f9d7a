package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

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
	// Complete: the room is at Target (or none is set), no downgrade is
	// in progress (Lowering), every live member applied Since-1 or more,
	// and no channel opened under a higher room version remains (the
	// primary's checkpoint at the change let them be deleted): a member
	// restarted on any binary that supports Version, on its own data dir
	// or from a peer's checkpoint, reads nothing written under a higher
	// room version.
	Complete bool
	// OldestChannelVersion and MaxChannelVersion are the room versions of
	// the oldest channel still in the room and the highest among them (0:
	// no channel).
	OldestChannelVersion, MaxChannelVersion int
	// Lowering: the room is back at room version 1, but its meta keeps
	// binaries from before room versions out until no channel of a higher
	// version remains (the primary then ends the downgrade).
	Lowering bool
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
// room's version v (the core's message).
func (r *Replica) unsupportedRoom(v int) error {
	c := core{room: r.cfg.Room, rv: r.rvIdentity()}
	return c.unsupportedRoom(v)
}

// memberVersions is what decideRoomVersion needs of a live member.
type memberVersions struct {
	Lo, Hi  int    // advertised room versions
	Applied uint64 // its applied index
}

// versionFacts is what decideRoomVersion decides on.
type versionFacts struct {
	Primary bool
	Current int // the room's version
	// Lowering: the room is at 1 but its meta is still record version 2
	// (logroom RoomVersion.Lowering): channels of a higher version may
	// remain; Since is where the room went back to 1.
	Lowering bool
	Since    uint64
	Target   int // the operator's target (0: none)
	// Members: every live member, by id (this member's own included).
	Members map[string]memberVersions
	// MaxChannel is the highest room version among the room's channels.
	MaxChannel int
	Moving     bool // a move is already under way
}

// decideRoomVersion: the room version this member, as primary, moves the
// room to now (0: none), and otherwise why the room is not where it is
// going ("" when it is there, or no target is set). Only the primary
// moves it: to the target when every live member supports it; and, once
// the room is back at 1 (Lowering), to 1 again to end the downgrade (room
// meta record 1, which v0.1.0 opens) when no channel of a higher version
// remains and every live member has applied past the change.
func decideRoomVersion(f versionFacts) (move int, blocked string) {
	ids := make([]string, 0, len(f.Members))
	for id := range f.Members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	switch {
	case f.Target != 0 && f.Target != f.Current:
		var refuse []string
		for _, id := range ids {
			m := f.Members[id]
			if f.Target < m.Lo || f.Target > m.Hi {
				refuse = append(refuse, fmt.Sprintf("%s (supports %d..%d)", id, m.Lo, m.Hi))
			}
		}
		if len(refuse) > 0 {
			return 0, fmt.Sprintf("target room version %d is not supported by live member(s) %s", f.Target, strings.Join(refuse, ", "))
		}
	case f.Current == 1 && f.Lowering && (f.Target == 0 || f.Target == 1):
		if f.MaxChannel > 1 {
			return 0, fmt.Sprintf("lowering to room version 1: channels of room version %d remain (deleted once a checkpoint covers them and every member serves one); "+
				"until then the room meta keeps binaries of v0.1.0 out", f.MaxChannel)
		}
		var behind []string
		for _, id := range ids {
			if m := f.Members[id]; f.Since > 0 && m.Applied+1 < f.Since {
				behind = append(behind, fmt.Sprintf("%s (applied %d)", id, m.Applied))
			}
		}
		if len(behind) > 0 {
			return 0, fmt.Sprintf("lowering to room version 1: live member(s) %s have not applied past the change at index %d", strings.Join(behind, ", "), f.Since)
		}
	default:
		return 0, ""
	}
	target := max(f.Target, 1)
	switch {
	case f.Moving:
		return 0, fmt.Sprintf("moving to room version %d", target)
	case !f.Primary:
		return 0, fmt.Sprintf("waiting for the primary to move the room to room version %d", target)
	}
	return target, ""
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
	st := RoomVersionStatus{Room: room, Version: info.RoomVersion.Version, Since: info.RoomVersion.Since, Lowering: info.RoomVersion.Lowering}
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
	for i, num := range listing.Nums {
		ch, err := logroom.ReadChannel(ctx, c, base, room, num)
		if errors.Is(err, logroom.ErrNoRoom) {
			continue // deleted since the listing
		}
		if err != nil {
			return st, err
		}
		if i == 0 || st.OldestChannelVersion == 0 {
			st.OldestChannelVersion = ch.RoomVersion
		}
		st.MaxChannelVersion = max(st.MaxChannelVersion, ch.RoomVersion)
	}
	st.Blocked, st.Complete = roomVersionVerdict(st)
	return st, nil
}

// roomVersionVerdict is ReadRoomVersion's Blocked and Complete for what
// it read (st's other fields): no I/O.
func roomVersionVerdict(st RoomVersionStatus) (blocked string, complete bool) {
	f := versionFacts{Current: st.Version, Lowering: st.Lowering, Since: st.Since, Target: st.Target,
		Members: map[string]memberVersions{}, MaxChannel: st.MaxChannelVersion}
	for _, m := range st.Members {
		f.Members[m.ID] = memberVersions{Lo: m.RoomVersionMin, Hi: m.RoomVersionMax, Applied: m.Applied}
		f.Primary = f.Primary || m.Role == RolePrimary
	}
	_, blocked = decideRoomVersion(f)
	if !f.Primary && blocked != "" && !strings.Contains(blocked, "not supported") {
		blocked = "no live member is primary (only a primary moves the room): " + blocked
	}
	complete = (st.Target == 0 || st.Target == st.Version) && !st.Lowering && st.MaxChannelVersion <= st.Version
	for _, m := range st.Members {
		if st.Since > 0 && m.Applied+1 < st.Since {
			complete = false
		}
	}
	return blocked, complete
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

// roomVersionRead is what the loop's once-a-second job read of the room
// version: the room meta's version (err when it did not read), the
// operator's target (targetErr when the znode is malformed), and the
// highest room version among the channels.
type roomVersionRead struct {
	rv         logroom.RoomVersion
	err        error
	target     int
	targetErr  error
	maxChannel int
}

// roomVersionEvent is the core's evRoomVersion from the loop's
// once-a-second read: the room meta's version (metaErr when it did not
// read as one this binary knows), the operator's target (targetErr when
// the znode is malformed), the highest room version among the channels,
// and the live members' advertised ranges (the membership view, this
// member's own range included).
func (r *Replica) roomVersionEvent(rv logroom.RoomVersion, metaErr error, target int, targetErr error, maxChannel int) evRoomVersion {
	f := r.versionFacts(rv, target, r.lp.mem.known, maxChannel)
	return evRoomVersion{Meta: rv, MetaErr: metaErr, Target: target, TargetErr: targetErr, MaxChannel: maxChannel, Members: f.Members}
}

// rvIdentity is what the core needs of this member's binary and room for
// its room-version decisions and messages.
func (r *Replica) rvIdentity() rvIdentity {
	return rvIdentityFor(r.cfg.MaxRoomVersion, r.room.Path())
}

// rvIdentityFor is rvIdentity for a binary capped by capVersion
// (Config.MaxRoomVersion, 0: no cap) in the room at roomPath.
func rvIdentityFor(capVersion int, roomPath string) rvIdentity {
	lo, hi := advertisedRange(capVersion)
	capped := ""
	if capVersion > 0 && capVersion < version.RoomMax {
		capped = fmt.Sprintf(", capped by Config.MaxRoomVersion %d", capVersion)
	}
	return rvIdentity{Lo: lo, Hi: hi, Release: version.Release, CapNote: capped, RoomPath: roomPath}
}

// moveRoomVersion carries out the core's aMoveRoomVersion off the loop: a
// checkpoint whose rotation records the version (checkpointAt, which
// decides again on fresh reads: recheckMove), bounded; the result comes
// back as evRoomVersionMoved.
func (r *Replica) moveRoomVersion(from, to int) {
	r.log.Info("moving the room version", "from", from, "to", to)
	done := r.lp.movedDone
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.bgCtx, time.Minute)
		defer cancel()
		err := r.checkpointAt(ctx, to)
		if ctx.Err() != nil && err != nil {
			err = nil // closing: nothing to report
		}
		done <- evRoomVersionMoved{To: to, Err: err} // buffered: one move at a time (the core's versionMoving)
	}()
}

// versionFacts gathers decideRoomVersion's facts from a read of the room
// version, the target, the members' data and the channels (Primary is
// the caller's to set).
func (r *Replica) versionFacts(rv logroom.RoomVersion, target int, members map[string]memberData, maxChannel int) versionFacts {
	lo, hi := r.roomVersions()
	return buildVersionFacts(rv, target, members, maxChannel, r.cfg.ID, memberVersions{Lo: lo, Hi: hi, Applied: r.applied.Load()})
}

// buildVersionFacts is versionFacts with this member's own id and
// versions given (self overrides what members holds for selfID: its own
// range and applied index are known first hand): no I/O.
func buildVersionFacts(rv logroom.RoomVersion, target int, members map[string]memberData, maxChannel int, selfID string, self memberVersions) versionFacts {
	f := versionFacts{Current: rv.Version, Lowering: rv.Lowering, Since: rv.Since, Target: target,
		Members: map[string]memberVersions{}, MaxChannel: maxChannel}
	for id, d := range members {
		lo, hi := d.roomVersions()
		f.Members[id] = memberVersions{Lo: lo, Hi: hi, Applied: d.Applied}
	}
	f.Members[selfID] = self
	return f
}

// recheckMove decides again, on fresh reads (synced room meta, target,
// channels, and every member's data read afresh rather than the cached
// view), whether the move to v may be made now: the decision the loop
// made may be up to a checkpoint's wait old, and a member that joined
// meanwhile must not be moved past. It returns nil when it may.
func (r *Replica) recheckMove(ctx context.Context, v int) error {
	rv, err := r.room.RoomVersion(ctx)
	if err != nil {
		return err
	}
	target, err := readVersionTarget(ctx, r.client, r.room.Path(versionZ))
	if err != nil {
		return err
	}
	chans, err := r.room.Channels(ctx)
	if err != nil {
		return err
	}
	if err := zkx.Sync(ctx, r.client, r.room.Path(membersDir)); err != nil {
		return err
	}
	members, err := readMembers(r.conn, r.room.Path(membersDir))
	if err != nil {
		return err
	}
	return recheckVerdict(r.versionFacts(rv, target, members, maxChannelVersion(chans)), v)
}

// recheckVerdict is recheckMove's decision on facts read afresh: nil when
// the primary would move the room to v now.
func recheckVerdict(f versionFacts, v int) error {
	f.Primary = true
	if move, blocked := decideRoomVersion(f); move != v {
		return fmt.Errorf("replica: move to room version %d no longer decided (now: %d): %s", v, move, blocked)
	}
	return nil
}

// maxChannelVersion is the highest room version among chans (0: none).
func maxChannelVersion(chans []logroom.ChannelInfo) int {
	m := 0
	for _, c := range chans {
		m = max(m, c.RoomVersion)
	}
	return m
}

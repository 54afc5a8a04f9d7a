package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/logroom"
	elect "github.com/roomlog/roomlog/recipe/election"
)

// Read-only views of the znodes this package owns (doc.go, "Read-only
// views"), for tools that hold a ZooKeeper connection but no Replica. They
// decode and classify with the functions the replicas themselves use
// (decode, acceptMember; the election recipe's ReadLine with acceptCandidate), so a tool shows what replicas
// see: the same members, the same election order, the same foreign znodes
// for the same reasons.

// viewUnreadable is why a child whose ACL denies READ is foreign.
const viewUnreadable = "unreadable: its ACL denies this client READ"

// MemberView is one child of a room's members/ as replicas classify it.
type MemberView struct {
	Name string // node name (the member id, when accepted)
	Path string // full znode path
	// Session is the ZooKeeper session holding the node (its
	// EphemeralOwner; 0: a persistent node). 0 when Unreadable.
	Session    int64
	Unreadable bool // its ACL denies READ: nothing else is known
	// Decoded: the data decodes as member data of format version 1, and
	// MemberStatus and CatchUp hold it (also for a foreign node, e.g. a
	// persistent forgery: what it claims).
	Decoded bool
	MemberStatus
	// CatchUp is the index a primary handing leadership over asks members
	// to publish their applied index at once (0: none).
	CatchUp uint64
	// Foreign is "" for a live member, else why replicas ignore the node
	// (the acceptance rule it breaks).
	Foreign string
	// CheckpointURL is where replicas fetch the member's checkpoint ("":
	// no address, or a foreign member).
	CheckpointURL string
}

// DescribeMemberZnode classifies a child of a room's members/ (its path,
// data and Stat.EphemeralOwner) as replicas do, without ZooKeeper:
// ReadRoomView's members, for tools that read the znode their own way.
// room names the room for CheckpointURL. It never panics and allocates
// O(len(data)).
func DescribeMemberZnode(room, path string, data []byte, ephemeralOwner int64) MemberView {
	name := path[strings.LastIndexByte(path, '/')+1:]
	v := MemberView{Name: name, Path: path, Session: ephemeralOwner}
	var d memberData
	if decode(data, &d) == nil && d.V == formatVersion1 {
		v.Decoded = true
		v.MemberStatus = d.memberStatus()
		v.CatchUp = d.CatchUp
	}
	if _, err := acceptMember(name, data, ephemeralOwner); err != nil {
		v.Foreign = err.Error()
		return v
	}
	if base, err := checkpointBaseURL(v.Addr); err == nil && v.Addr != "" {
		v.CheckpointURL = base + CheckpointPath(room)
	}
	return v
}

// CandidateView is an accepted election candidate.
type CandidateView struct {
	Name    string // c-<guid>-<seq>
	Path    string
	Seq     int64 // ZooKeeper's sequence suffix: the lowest leads
	ID      string
	Addr    string
	Session int64 // the ZooKeeper session holding it
}

// TransferRecord is the room's transfer znode: a primary handing
// leadership over.
type TransferRecord struct {
	From, To string
	Epoch    uint64 // the room's epoch when it was written
	Deadline int64  // unix ms; binding until then
	Session  int64  // the session holding it (the handing-over primary's)
}

// CheckpointRecord is the room's checkpoints znode: the newest checkpoint
// the primary made after rotating (informational: replicas pick bootstrap
// sources from member data).
type CheckpointRecord struct {
	Index   uint64
	Epoch   uint64
	ID      string
	Addr    string
	Created int64 // unix ms
	// URL is where a member advertising Addr serves the room's newest
	// checkpoint ("" when Addr is empty or does not parse).
	URL string
}

// RoomView is what a room's members/, election/, transfer and checkpoints
// znodes say, as replicas read them.
type RoomView struct {
	Room string
	// Members is every child of members/ (live and foreign), by name.
	Members []MemberView
	// Candidates are the accepted election candidates in election order:
	// Candidates[0] leads (or is taking over); when it goes, the next one
	// does. One member may hold several (a leftover of a lost create).
	Candidates []CandidateView
	// Foreign lists every child of members/ and election/ that replicas
	// ignore, with the reason, sorted by path (as Status().Foreign does).
	Foreign []ForeignZnode
	// Transfer is the transfer record (nil: none, or TransferErr).
	Transfer *TransferRecord
	// TransferErr says why a transfer znode that exists is not shown:
	// its data does not decode (replicas ignore it) or its format version
	// is unknown (replicas, which do not check it, read its fields).
	TransferErr string
	// Checkpoint is the checkpoint record (nil: none, or CheckpointErr).
	Checkpoint *CheckpointRecord
	// CheckpointErr says why a checkpoints znode that exists is not shown
	// (as TransferErr).
	CheckpointErr string
}

// Live returns the members replicas accept, by id.
func (v RoomView) Live() []MemberStatus {
	var out []MemberStatus
	for _, m := range v.Members {
		if m.Foreign == "" {
			out = append(out, m.MemberStatus)
		}
	}
	return out
}

// Primary is the live member the replicas take for primary by the
// members' data, by the rule every member applies (primaryOf): among the
// live members whose data says primary, the one that leads the newest
// epoch, ties to the smaller id. ok is false when none says primary. Any
// other live member whose data says primary is deposed: a newer primary
// took over, and it has not learnt so yet or its session has not expired
// (after a kill -9, up to a session timeout).
func (v RoomView) Primary() (id string, epoch uint64, ok bool) {
	members := map[string]memberData{}
	for _, m := range v.Live() {
		if m.Role == RolePrimary {
			members[m.ID] = memberData{ID: m.ID, Role: roleStrPrimary, Epoch: m.Epoch}
		}
	}
	p, ok := primaryOf(members)
	return p.ID, p.Epoch, ok
}

// ElectionPlace is member id's place in the election line: 1 for the
// leading candidate, 0 when id holds no accepted candidate.
func (v RoomView) ElectionPlace(id string) int {
	for i, c := range v.Candidates {
		if c.ID == id {
			return i + 1
		}
	}
	return 0
}

// ReadRoomView reads room's members/, election/, transfer and checkpoints
// znodes under base (DefaultBase when empty) through c, without creating
// anything, and classifies them as replicas do. It syncs first, so it sees
// at least everything committed before the call; the znodes are read one
// by one, not as one snapshot. A missing room wraps logroom.ErrNoRoom; a
// ZooKeeper error (a lost connection included) fails the view.
func ReadRoomView(ctx context.Context, c *logroom.Client, base, room string) (RoomView, error) {
	if base == "" {
		base = DefaultBase
	}
	if err := logroom.ValidateBase(base); err != nil {
		return RoomView{}, err
	}
	if err := logroom.ValidateName(room); err != nil {
		return RoomView{}, err
	}
	conn := c.Conn()
	root := logroom.RoomPath(base, room)
	if _, err := conn.Sync(root); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return RoomView{}, fmt.Errorf("replica: sync %s: %w", root, err)
	}
	ok, _, err := conn.Exists(root)
	if err != nil {
		return RoomView{}, fmt.Errorf("replica: read room %s: %w", root, err)
	}
	if !ok {
		return RoomView{}, fmt.Errorf("%w: room %q not found under %s", logroom.ErrNoRoom, room, base)
	}
	v := RoomView{Room: room}
	if err := v.readMembers(ctx, conn, root+"/"+membersDir); err != nil {
		return RoomView{}, err
	}
	if err := v.readCandidates(ctx, c, root+"/"+electionDir); err != nil {
		return RoomView{}, err
	}
	slices.SortFunc(v.Foreign, func(a, b ForeignZnode) int { return strings.Compare(a.Path, b.Path) })
	data, st, err := viewGet(ctx, conn, root+"/"+transferZ)
	if err != nil {
		return RoomView{}, err
	}
	if st != nil {
		v.Transfer, v.TransferErr = viewTransferRecord(data, st.EphemeralOwner)
	}
	data, st, err = viewGet(ctx, conn, root+"/"+checkpointsZ)
	if err != nil {
		return RoomView{}, err
	}
	if st != nil {
		v.Checkpoint, v.CheckpointErr = viewCheckpointRecord(room, data)
	}
	return v, nil
}

// viewGet reads p; a missing znode is (nil, nil, nil).
func viewGet(ctx context.Context, conn *zk.Conn, p string) ([]byte, *zk.Stat, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	data, st, err := conn.Get(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("replica: read %s: %w", p, err)
	}
	return data, st, nil
}

// viewChildren lists dir, sorted; a missing dir has none.
func viewChildren(ctx context.Context, conn *zk.Conn, dir string) ([]string, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	names, _, err := conn.Children(dir)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("replica: list %s: %w", dir, err)
	}
	slices.Sort(names)
	return names, nil
}

// viewGetChild reads a child of members/ or election/: st is nil when it is
// gone, noAuth true when its ACL denies READ (foreign: replicas, holding
// the room's credentials, cannot read it either when the caller holds
// them).
func viewGetChild(ctx context.Context, conn *zk.Conn, p string) (data []byte, st *zk.Stat, noAuth bool, err error) {
	data, st, err = viewGet(ctx, conn, p)
	if errors.Is(err, zk.ErrNoAuth) {
		return nil, nil, true, nil
	}
	return data, st, false, err
}

func (v *RoomView) readMembers(ctx context.Context, conn *zk.Conn, dir string) error {
	names, err := viewChildren(ctx, conn, dir)
	if err != nil {
		return err
	}
	for _, n := range names {
		p := dir + "/" + n
		data, st, noAuth, err := viewGetChild(ctx, conn, p)
		switch {
		case err != nil:
			return err
		case noAuth:
			v.Members = append(v.Members, MemberView{Name: n, Path: p, Unreadable: true, Foreign: viewUnreadable})
			v.Foreign = append(v.Foreign, ForeignZnode{Path: p, Reason: viewUnreadable})
		case st != nil: // else gone since the listing
			m := DescribeMemberZnode(v.Room, p, data, st.EphemeralOwner)
			v.Members = append(v.Members, m)
			if m.Foreign != "" {
				v.Foreign = append(v.Foreign, ForeignZnode{Path: p, Reason: m.Foreign})
			}
		}
	}
	return nil
}

func (v *RoomView) readCandidates(ctx context.Context, c *logroom.Client, dir string) error {
	cands, foreign, err := elect.ReadLine(ctx, c, dir, acceptCandidate)
	if err != nil {
		return fmt.Errorf("replica: %w", err)
	}
	v.Foreign = append(v.Foreign, foreign...)
	for _, cd := range cands { // the replicas' election order
		v.Candidates = append(v.Candidates, CandidateView{Name: cd.Node, Path: dir + "/" + cd.Node, Seq: cd.Seq,
			ID: cd.ID, Addr: string(cd.Data), Session: cd.Session})
	}
	return nil
}

// viewTransferRecord decodes the transfer znode as replicas do (decode;
// data that does not decode is ignored) and checks its format version.
func viewTransferRecord(data []byte, session int64) (*TransferRecord, string) {
	var rec transferRecord
	if err := decode(data, &rec); err != nil {
		return nil, fmt.Sprintf("does not decode (ignored by replicas): %v", err)
	}
	if rec.V != formatVersion1 {
		return nil, fmt.Sprintf("unknown format version %d", rec.V)
	}
	return &TransferRecord{From: rec.From, To: rec.To, Epoch: rec.Epoch, Deadline: rec.Deadline, Session: session}, ""
}

// viewCheckpointRecord decodes the checkpoints znode (as viewTransferRecord).
func viewCheckpointRecord(room string, data []byte) (*CheckpointRecord, string) {
	var rec checkpointRecord
	if err := decode(data, &rec); err != nil {
		return nil, fmt.Sprintf("does not decode: %v", err)
	}
	if rec.V != formatVersion1 {
		return nil, fmt.Sprintf("unknown format version %d", rec.V)
	}
	out := &CheckpointRecord{Index: rec.Index, Epoch: rec.Epoch, ID: rec.ID, Addr: rec.Addr, Created: rec.Created}
	if base, err := checkpointBaseURL(rec.Addr); err == nil && rec.Addr != "" {
		out.URL = base + CheckpointPath(room)
	}
	return out, ""
}

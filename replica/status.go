package replica

import (
	"fmt"
	"sort"
	"time"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/zkx"
)

// Role is a replica's role in its room.
type Role int

const (
	// RoleStandby: tails the log and applies it; Propose returns ErrNotPrimary.
	RoleStandby Role = iota
	// RoleTakingOver: won the election; establishing its epoch and applying
	// the log to its end. Propose returns ErrNotPrimary until it is primary.
	RoleTakingOver
	// RolePrimary: appends; Propose works.
	RolePrimary
	// RoleFailed: stopped by an unrecoverable error (Status().Err).
	RoleFailed
	// RoleClosed: Close was called.
	RoleClosed
)

func (r Role) String() string {
	switch r {
	case RoleStandby:
		return roleStrStandby
	case RoleTakingOver:
		return roleStrTakeover
	case RolePrimary:
		return roleStrPrimary
	case RoleFailed:
		return "failed"
	case RoleClosed:
		return "closed"
	default:
		return fmt.Sprintf("Role(%d)", int(r))
	}
}

func parseRole(s string) Role {
	switch s {
	case roleStrPrimary:
		return RolePrimary
	case roleStrTakeover:
		return RoleTakingOver
	default:
		return RoleStandby
	}
}

// RoleChange is delivered on RoleChanges() whenever this replica's role
// changes.
type RoleChange struct {
	Role   Role
	Epoch  uint64 // the epoch led (primary) or last applied (standby)
	Reason string // why ("elected", "session expired", "fenced", "step down", …)
	At     time.Time
}

// MemberStatus is one live member as seen through its membership node.
type MemberStatus struct {
	ID   string
	Addr string
	Role Role
	// Observer: the member joined as an observer (Config.Observer): it
	// never leads (its Role stays RoleStandby) and is never a transfer
	// target.
	Observer   bool
	Epoch      uint64
	Applied    uint64 // its applied index (published at most every MemberUpdateInterval)
	Checkpoint uint64 // index of its newest local checkpoint (0: none)
	// Hash is its running state hash at index HashAt, of a chain started
	// at HashBase (package doc, "Integrity"; "": it publishes none).
	Hash             string
	HashAt, HashBase uint64
	// RoomVersionMin..RoomVersionMax: the room versions it advertises
	// (1..1 for a member that advertises none: a binary from before room
	// versions).
	RoomVersionMin, RoomVersionMax int
	// Identities are the ZooKeeper identities its session is
	// authenticated as ("digest:USER:HASH", "x509:SUBJECT"; none for a
	// member without credentials or from before identities were
	// published): what the room's ACL must keep granting it.
	Identities []string
}

// Status is a point-in-time view of a replica. Everything a test or an
// operator needs is here: Status never touches ZooKeeper.
type Status struct {
	ID    string
	Room  string
	Role  Role
	Epoch uint64 // epoch led when primary, else the epoch of the last applied entry
	// Observer: this member is an observer (Config.Observer): its Role is
	// RoleStandby (or RoleFailed, RoleClosed), never a leading one.
	Observer bool

	Applied   uint64 // local applied index
	Committed uint64 // highest committed index this replica has seen (own writer, primary's published applied index)
	Lag       uint64 // Committed - Applied

	PrimaryID   string // "" when unknown
	PrimaryAddr string
	Members     []MemberStatus // live members, sorted by ID (includes this one)
	// Foreign lists the znodes under members/ and election/ that this
	// replica saw and ignored because they break the acceptance rules
	// (package doc, "Znodes"): a persistent node, a name that does not
	// match its data's id, a negative or malformed sequence, data that does
	// not decode, an address that does not parse. Each is also logged once
	// (Warn). Sorted by path; an entry goes when the znode goes. Election
	// children are checked when this replica evaluates the election, member
	// children whenever they change.
	Foreign []ForeignZnode

	Connected   bool   // ZooKeeper session usable right now
	ConnState   string // go-zookeeper state name
	SessionID   int64
	Suspended   time.Duration // how long the connection has been down (0 when connected)
	OpenChannel uint64        // number of the room's open channel (refreshed about every second)
	Channels    int           // channels in the room
	RoomBytes   int64         // data bytes of the room's batch znodes in ZooKeeper, open channel included
	// RoomCharged is what Config.Writer.MaxRoomBytes bounds: RoomBytes
	// plus logroom.ZnodeHeapBytes per batch and channel znode. It and
	// RoomBytes are measured with the channels, about every second.
	RoomCharged  int64
	MaxRoomBytes int64 // Config.Writer.MaxRoomBytes (the bound, defaults applied)

	CheckpointIndex uint64 // newest local checkpoint (0: none)
	Bootstraps      int    // times this replica restored its store from a peer's checkpoint
	// Bootstrap holds (package doc, "Bootstrap holds"): BootstrapHold is
	// the first log index our own bootstrap still needs (0: none);
	// BootstrapOutruns counts our bootstraps whose log was deleted before
	// we applied it (ErrBootstrapOutrun). On the primary, HeldByBootstrap
	// is the hold its last deletion check honoured (0: none) and
	// BootstrapHoldsLapsed counts members' holds it stopped honouring
	// (no progress for Config.BootstrapHoldStall).
	BootstrapHold        uint64
	BootstrapOutruns     int64
	HeldByBootstrap      uint64
	BootstrapHoldsLapsed int64
	// LastBootstrap: this replica's last successful bootstrap (nil: none
	// since it opened): what it fetched and what it reused.
	LastBootstrap *BootstrapReport
	Pending       int   // proposals in flight
	TailErr       error // the standby tail's last error while it retries (e.g. no checkpoint source), nil while it progresses
	Err           error // the unrecoverable error when Role == RoleFailed

	// The integrity check (package doc, "Integrity"): this member's running
	// state hash (Hash, at HashIndex, of a chain started at HashBase), how
	// many peer hashes it compared and how many differed, and its last
	// report of a disagreement it survived (a peer in the minority, or a
	// room of two it holds as primary, or no majority; "" when none). A
	// member that lost the vote fails with ErrDiverged (Err). Hash is ""
	// before anything is applied.
	Hash           string
	HashIndex      uint64
	HashBase       uint64
	HashCompared   uint64
	HashMismatches uint64
	HashReport     string
	// Audited: when this member last completed an audit of the room's log
	// (every 3 s: its last applied batch still there, the channel chain
	// whole, no batch deleted from a channel not being deleted; zero:
	// none yet).
	Audited time.Time
	// Archive is the continuous archive's state (Config.Archive; zero
	// without one): see ArchiveStatus.
	Archive ArchiveStatus

	// Room version (package doc, "Room version"): the room's version and
	// the index it applies from, the operator's target (0: none set), and
	// why this member, as primary, does not move the room to the target
	// ("" when at the target or not primary). RoomVersionMin and
	// RoomVersionMax are what this member advertises (its binary's range,
	// capped by Config.MaxRoomVersion).
	RoomVersion        int
	RoomVersionSince   uint64
	RoomVersionTarget  int
	RoomVersionBlocked string
	RoomVersionMin     int
	RoomVersionMax     int

	// Crash detection (package doc, "Failover timeline"): how many times
	// this member, next in line, proved the primary's process gone and
	// deposed its candidate (so the line moved on before the session
	// expired), how many of those the primary's session outlived by a
	// session timeout (the evidence was wrong: an unneeded takeover, its
	// writes fenced), and the last evidence ("" when none).
	Depositions, DepositionsWrong uint64
	LastDeposition                string
}

// ForeignZnode is a znode under the room's members/ or election/ that does
// not count as a member or candidate: ignored for every decision. Path is
// the full znode path, Reason the acceptance rule it breaks.
type ForeignZnode = zkx.Foreign

// foreignSet records the foreign znodes of one directory (members/ or
// election/); the run loop writes it, Status reads it (it has its own lock).
type foreignSet = zkx.ForeignSet

// foreignZnodes is Status().Foreign, read by the loop (publishStatus).
func (r *Replica) foreignZnodes() []ForeignZnode {
	lp := r.lp
	out := append(lp.mem.foreign(), lp.el.foreign()...)
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	if len(out) == 0 {
		return nil
	}
	return out
}

// BootstrapReport describes one bootstrap from a peer's checkpoint.
type BootstrapReport struct {
	From  string        // the source member
	Index uint64        // the checkpoint's index
	Bytes int64         // the checkpoint's bytes
	Took  time.Duration // fetch, verify and install
	// Fetch: what was fetched from the source and what was reused
	// (linked from our store, our checkpoints, an interrupted fetch).
	Fetch checkpoint.FetchStats
}

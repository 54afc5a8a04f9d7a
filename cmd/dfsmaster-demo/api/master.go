package api

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/roomlog/roomlog/store"
)

// Master is what the API needs from the replicated master it fronts.
//
// Propose, ProposeRequest and WaitApplied may be called from many goroutines
// at once; Status and Store must be cheap and never block on ZooKeeper.
type Master interface {
	// Propose appends entry to the log and returns once it is durable and
	// applied to the local store, with the applier's response. Errors wrap
	// ErrNotPrimary (as a *NotPrimaryError), ErrOutcomeUnknown,
	// ErrOverloaded or ErrUnavailable, or are the context's error.
	Propose(ctx context.Context, entry []byte) (Result, error)
	// ProposeRequest is Propose for a request that may be retried: entry is
	// applied at most once per id (within the master's deduplication
	// window, replica.Config.RequestTTL and RequestWindow). A request
	// already applied is answered with the original's Result, Duplicate
	// set, and nothing is appended; any member may answer so, a standby
	// included, once it has applied the original. The same id with another
	// entry is ErrRequestConflict (nothing applied). Other errors are
	// Propose's; after any of them the same id may be proposed again.
	// (replica.ProposeRequest through the serve command's adapter.)
	ProposeRequest(ctx context.Context, id store.RequestID, entry []byte) (Result, error)
	// WaitApplied returns once the local store has applied index, or the
	// context's error; a master cut off from ZooKeeper that has not
	// applied index returns ErrDisconnected at once (or the moment it
	// sees the loss).
	WaitApplied(ctx context.Context, index uint64) error
	// Store is the read side of the local state the log produced.
	Store() store.Reader
	// Status describes the master and its room.
	Status() Status
}

// Result is the outcome of a committed proposal.
type Result struct {
	Index    uint64 // the entry's log index
	Response []byte // what the applier returned for it
	// Duplicate: ProposeRequest found the request already applied; Index
	// and Response are the original's and nothing was applied again.
	Duplicate bool
}

// Errors a Master returns (wrapped). The adapter in front of the real
// replica translates the replica's sentinels into these.
var (
	// ErrNotPrimary: this master does not accept writes. The error is a
	// *NotPrimaryError naming the primary, if one is known.
	ErrNotPrimary = errors.New("api: not the primary")
	// ErrOutcomeUnknown: the proposal may or may not have been committed.
	ErrOutcomeUnknown = errors.New("api: outcome unknown")
	// ErrOverloaded: nothing was sent (too many proposals in flight, room
	// full); retry later.
	ErrOverloaded = errors.New("api: overloaded")
	// ErrUnavailable: the master cannot serve (closed, deposed while
	// proposing); nothing was committed by this call.
	ErrUnavailable = errors.New("api: unavailable")
	// ErrFailed: the master stopped for good (an unrecoverable error of its
	// replica: a broken applier, corruption, divergence); nothing was
	// committed by this call. Status.Error says why. The client's errors
	// for a 503 "failed" also match it.
	ErrFailed = errors.New("api: master failed")
	// ErrDisconnected: the master is cut off from ZooKeeper and has not
	// applied the index a read asks for (replica.ErrUnavailable): it
	// refuses at once; the client tries another master.
	ErrDisconnected = errors.New("api: master cut off from ZooKeeper")
	// ErrRequestConflict: ProposeRequest with an id already applied (or in
	// flight) with another entry; nothing of this entry was applied.
	ErrRequestConflict = errors.New("api: request id reused with another entry")
	// ErrInvalidConfig: Config.Validate found bad fields (all are named).
	ErrInvalidConfig = errors.New("api: invalid config")
)

// NotPrimaryError names the primary a standby believes in. PrimaryAddr is
// the primary's advertised HTTP address ("host:port" or a base URL); both
// fields are empty when no primary is known.
type NotPrimaryError struct {
	PrimaryID   string
	PrimaryAddr string
}

func (e *NotPrimaryError) Error() string {
	if e.PrimaryAddr == "" {
		return "api: not the primary (no primary known)"
	}
	return fmt.Sprintf("api: not the primary (primary is %q at %s)", e.PrimaryID, e.PrimaryAddr)
}

// Unwrap makes errors.Is(err, ErrNotPrimary) true.
func (e *NotPrimaryError) Unwrap() error { return ErrNotPrimary }

// Roles as reported in Status. A master can also report a transitional
// role of its replica ("takeover").
const (
	RolePrimary = "primary"
	RoleStandby = "standby"
	RoleFailed  = "failed" // stopped by an unrecoverable error (Status.Error); needs an operator
	RoleClosed  = "closed" // shutting down
)

// Status is what /v1/status and the HTML page show.
type Status struct {
	ID   string `json:"id"`
	Room string `json:"room"`
	Role string `json:"role"` // RolePrimary, RoleStandby, RoleFailed, RoleClosed, or a transitional role of the replica
	// Observer: this master is an observer (serve --observer,
	// replica.Config.Observer): it serves reads and checkpoints but never
	// becomes primary; its Role stays RoleStandby.
	Observer        bool      `json:"observer"`
	Addr            string    `json:"addr"` // this master's advertised HTTP address
	Epoch           uint64    `json:"epoch"`
	AppliedIndex    uint64    `json:"applied_index"`
	CommittedIndex  uint64    `json:"committed_index"` // last committed index this master has seen
	Lag             uint64    `json:"lag"`             // CommittedIndex - AppliedIndex
	PrimaryID       string    `json:"primary_id"`
	PrimaryAddr     string    `json:"primary_addr"`
	Members         []Member  `json:"members"`
	Channels        []Channel `json:"channels"`
	Connected       bool      `json:"connected"`         // ZooKeeper session usable right now
	DisconnectedMS  int64     `json:"disconnected_ms"`   // how long the connection has been down (0 while connected)
	RoomBytes       int64     `json:"room_bytes"`        // bytes the room's channels hold in ZooKeeper
	CheckpointIndex uint64    `json:"checkpoint_index"`  // index of this master's newest local checkpoint (0: none)
	Bootstraps      int       `json:"bootstraps"`        // times this master restored its state from a peer's checkpoint
	Error           string    `json:"failure,omitempty"` // why the master failed (Role is RoleFailed), if it did
	// TailError: why this standby cannot catch up while its tail retries
	// (no member serves a checkpoint it needs, say); "" while it
	// progresses. /v1/health answers 503 behind while it is set.
	TailError string `json:"tail_error,omitempty"`
	// The integrity check (replica package doc, "Integrity"): this
	// master's running state hash at HashIndex, how many peers' hashes it
	// compared and how many differed, and its report of a disagreement it
	// survived ("" when none).
	Hash           string `json:"hash"`
	HashIndex      uint64 `json:"hash_index"`
	HashCompared   uint64 `json:"hash_compared"`
	HashMismatches uint64 `json:"hash_mismatches"`
	HashReport     string `json:"hash_report,omitempty"`
	// RoleChanges are this master's last role changes, newest first (at
	// most MaxRoleChanges; older ones are dropped).
	RoleChanges []RoleChange `json:"role_changes"`

	// This master's binary: its release ("v0.2.0") and the commit it was
	// built from (40 hex digits, "+dirty" when the work tree had
	// uncommitted changes, "unknown" when not built from a checkout).
	Version string `json:"version"`
	Commit  string `json:"commit"`
	// The room version (replica package doc, "Room version") as this
	// master sees it: the room's version and the first index written
	// under it (0: since the room began), the operator's target (0: none
	// set), and why this master, as primary, does not move the room to the
	// target ("" when it is there, or not primary). RoomVersionMin and
	// RoomVersionMax are the room versions this master advertises.
	RoomVersion        int    `json:"room_version"`
	RoomVersionSince   uint64 `json:"room_version_since"`
	RoomVersionTarget  int    `json:"room_version_target"`
	RoomVersionBlocked string `json:"room_version_blocked"`
	RoomVersionMin     int    `json:"room_version_min"`
	RoomVersionMax     int    `json:"room_version_max"`
}

// MaxRoleChanges bounds Status.RoleChanges.
const MaxRoleChanges = 10

// RoleChange is one role change of a master (replica.RoleChange).
type RoleChange struct {
	At     time.Time `json:"at"`
	Role   string    `json:"role"`   // the new role (as Status.Role)
	Epoch  uint64    `json:"epoch"`  // the epoch led (primary) or last applied (other roles)
	Reason string    `json:"reason"` // why: "elected", "session expired", "fenced", "step down", a failure, ...
}

// Failed reports whether the master failed: it no longer takes part in the
// room and needs an operator (Error says why).
func (s Status) Failed() bool { return s.Error != "" || s.Role == RoleFailed }

// HealthResponse is the body of a healthy /v1/health (200). A failed,
// closing or disconnected master answers 503 with an ErrorBody instead
// (codes failed, unavailable, disconnected).
type HealthResponse struct {
	Status       string `json:"status"` // "ok"
	ID           string `json:"id"`
	Role         string `json:"role"`
	AppliedIndex uint64 `json:"applied_index"`
}

// Member is one master of the room, as the reporting master last saw its
// membership data (a member publishes its applied index at most every
// replica.Config.MemberUpdateInterval, 50ms by default).
type Member struct {
	ID   string `json:"id"`
	Addr string `json:"addr"`
	Role string `json:"role"`
	// Observer: the member is an observer (it never becomes primary).
	Observer     bool   `json:"observer"`
	AppliedIndex uint64 `json:"applied_index"`
	// Lag is how far this member's applied index is behind the primary's:
	// the primary's applied index minus this one's, 0 when it is not
	// behind (the primary itself: 0). With no primary known, it is
	// measured against the highest applied index among the members.
	Lag uint64 `json:"lag"`
	// RoomVersionMin..RoomVersionMax: the room versions the member
	// advertises (1..1 for a member whose binary predates room versions).
	RoomVersionMin int `json:"room_version_min"`
	RoomVersionMax int `json:"room_version_max"`
}

// Channel is one channel (log segment) of the room.
type Channel struct {
	Num        uint64 `json:"num"`
	FirstIndex uint64 `json:"first_index"`
	LastIndex  uint64 `json:"last_index"` // meaningful when Sealed
	Epoch      uint64 `json:"epoch"`
	Sealed     bool   `json:"sealed"`
	Bytes      int64  `json:"bytes"`
	Batches    int    `json:"batches"`
}

package replica

import (
	"errors"
	"fmt"

	"github.com/roomlog/roomlog/logroom"
)

// Sentinel errors. Check them with errors.Is; the errors the replica returns
// wrap them with %w (and, where the cause came from logroom, wrap logroom's
// sentinel too, so errors.Is(err, logroom.ErrRoomFull) works as well).
var (
	// ErrNotPrimary: a write (Propose, StepDown, TransferLeadership) reached
	// a replica that is not the accepting primary. The error is a
	// *NotPrimaryError naming the primary this replica believes in, if any.
	ErrNotPrimary = errors.New("replica: not the primary")
	// ErrOutcomeUnknown: the proposal may or may not have been committed
	// (connection lost mid-append, session expired, context ended while the
	// append was in flight). Read the log (Barrier + your own state) to find
	// out; never blindly retry a non-idempotent command.
	ErrOutcomeUnknown = errors.New("replica: outcome unknown")
	// ErrClosed: the replica is closed (or closing).
	ErrClosed = errors.New("replica: closed")
	// ErrFenced: a newer epoch fenced this replica's writer; the proposal was
	// NOT committed. The replica continues as a standby.
	ErrFenced = errors.New("replica: fenced by a newer epoch")
	// ErrNoResponse: the proposal IS committed (Result.Index is valid) but
	// its response is not available: the context ended before the entry was
	// applied locally, the replica closed, or the replica skipped the entry
	// by restoring a checkpoint.
	ErrNoResponse = errors.New("replica: committed, response unavailable")
	// ErrQueueFull: Config.MaxPendingProposals proposals are already in
	// flight; nothing was sent. Back off and retry.
	ErrQueueFull = errors.New("replica: too many proposals in flight")
	// ErrRequestConflict: ProposeRequest with a request id already applied
	// (or in flight) with a different entry. Nothing of the second entry
	// was applied.
	ErrRequestConflict = errors.New("replica: request id reused with a different entry")
	// ErrInvalidConfig: Config.Validate found bad fields (all are named).
	ErrInvalidConfig = errors.New("replica: invalid config")
	// ErrWrongDataDir: DataDir holds the state of another room, or of an
	// earlier room of the same name (deleted and re-created since).
	ErrWrongDataDir = errors.New("replica: data dir belongs to another room")
	// ErrDuplicateID: another live process holds this member id in the room.
	ErrDuplicateID = errors.New("replica: member id already live in the room")
	// ErrFailed: the replica stopped because of an unrecoverable error (an
	// Applier error, corruption in the log, local state ahead of the log).
	// Status().Err holds the cause; only Close remains useful.
	ErrFailed = errors.New("replica: failed")
	// ErrDiverged: this replica's local state and the room's log disagree
	// (the log holds another batch at an index the replica applied, lost a
	// batch it applied, or ends below its applied index), e.g. after a
	// channel was deleted or re-created by another client. The replica
	// fails (Status().Err) instead of continuing on either history. It is
	// logroom.ErrDiverged, so errors.Is works with both.
	ErrDiverged = logroom.ErrDiverged
	// ErrUnsupportedVersion: the room is at a room version this member
	// does not support (its binary's range, capped by
	// Config.MaxRoomVersion), or its log holds a format this binary does
	// not read. Open refuses with it before applying anything; a running
	// member fails with it (Status().Err) when the room moves past its
	// range. It is logroom.ErrUnsupportedVersion.
	ErrUnsupportedVersion = logroom.ErrUnsupportedVersion
	// ErrTransfer: TransferLeadership could not hand over (target not a live,
	// caught-up standby, or it did not take over in time).
	ErrTransfer = errors.New("replica: leadership transfer failed")
	// ErrUnavailable: a read (WaitApplied, Barrier) reached a member that is
	// cut off from ZooKeeper (suspended) and has not applied the index asked
	// for: it cannot know when it will, so it refuses at once instead of
	// holding the reader (a wait already under way is released the moment
	// the member sees the loss). The error says since when and how far
	// behind; try another member. A connected member that is catching up
	// still waits.
	ErrUnavailable = errors.New("replica: cut off from ZooKeeper")
	// ErrRoomLost: ZooKeeper no longer holds what this member has seen of
	// the room: the room znode is gone (the ensemble was wiped, restored
	// from a copy older than the room, or a client deleted the room), it
	// is another incarnation (deleted and re-created), or its log ends
	// below, or holds another batch at, an index this member applied
	// (restored from an older copy, rolled back). A running member fails
	// with it within a few seconds (Status().Err, naming what was found)
	// and acknowledges nothing more; Open refuses with it, before writing
	// anything. The way back is a re-seed from the members' data dirs
	// (package doc, "Disaster recovery"; cmd/roomlog reseed).
	// It is logroom.ErrRoomLost (a tombstone a member wrote is refused
	// with it by logroom too).
	ErrRoomLost = logroom.ErrRoomLost
	// ErrSessionRefused: the member has been cut off from ZooKeeper for
	// longer than its session timeout (and two of go-zookeeper's
	// reconnect pauses) while new sessions reach the ensemble and find
	// the room intact: every server refuses this
	// member's session (ZooKeeper refuses a client that has seen a newer
	// zxid than the ensemble holds, which happens when the ensemble was
	// restored from an older copy). The member fails; restart it (a new
	// process connects).
	ErrSessionRefused = errors.New("replica: ZooKeeper refuses this member's session")
	// ErrNoCheckpointSource: bootstrap found no live member advertising a
	// checkpoint that covers the deleted part of the log (it keeps retrying).
	ErrNoCheckpointSource = errors.New("replica: no live member serves a usable checkpoint")
	// ErrBootstrapOutrun: the log a bootstrap needs after its checkpoint was
	// deleted before the member applied it (its hold lapsed: no progress
	// for Config.BootstrapHoldStall, or a primary that predates holds).
	// The member bootstraps again; after maxOutruns in a row it fails with
	// it (it cannot keep up: give it a faster link or disk, or the room a
	// larger RetainRoomBytes).
	ErrBootstrapOutrun = errors.New("replica: a bootstrap was outrun: the log it needs was deleted before it applied it")
)

// NotPrimaryError is returned (wrapping ErrNotPrimary) by calls that need the
// primary. PrimaryID and PrimaryAddr name the current primary as this replica
// last saw it (from membership data, else the lowest election candidate);
// both are empty when it knows none. PrimaryAddr is the primary's
// Config.AdvertiseAddr. Self is true when this replica is the one named:
// it won the election and is still taking over (or its term is ending, or
// its own member data still names it), so a caller retries, after a short
// wait, rather than redirect to itself.
type NotPrimaryError struct {
	PrimaryID   string
	PrimaryAddr string
	Self        bool
}

func (e *NotPrimaryError) Error() string {
	if e.PrimaryID == "" {
		return "replica: not the primary (primary unknown)"
	}
	if e.Self {
		return fmt.Sprintf("replica: not the primary now (%q is taking over or handing over)", e.PrimaryID)
	}
	return fmt.Sprintf("replica: not the primary (primary is %q at %q)", e.PrimaryID, e.PrimaryAddr)
}

// Unwrap makes errors.Is(err, ErrNotPrimary) true.
func (e *NotPrimaryError) Unwrap() error { return ErrNotPrimary }

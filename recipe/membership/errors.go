package membership

import "errors"

// Sentinel errors, wrapped by the errors this package returns (check with
// errors.Is). ZooKeeper errors stay visible in the chain.
var (
	// ErrBadName: an invalid directory path or member id (or a nil
	// client). Nothing was sent.
	ErrBadName = errors.New("membership: bad name")
	// ErrIDInUse: the member node of this id is held by another live
	// session (until the caller's ctx ended), or exists as a persistent
	// (foreign) znode.
	ErrIDInUse = errors.New("membership: id in use")
	// ErrPersistentNode: (with ErrIDInUse) the node at the member's path
	// is a persistent znode — foreign, and no session expiry removes it.
	ErrPersistentNode = errors.New("a persistent znode (foreign)")
	// ErrDataTooLarge: Join's or Update's data exceeds MaxDataBytes.
	// Nothing was sent, nor recorded.
	ErrDataTooLarge = errors.New("membership: data too large")
	// ErrLeft: Update after (or during) Leave.
	ErrLeft = errors.New("membership: registration left")
)

// MaxDataBytes bounds a member's data: every watcher reads every member's
// data on every change of the directory (and, with data watches, on every
// Update of any member).
const MaxDataBytes = 64 << 10

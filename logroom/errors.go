package logroom

import (
	"errors"
	"fmt"

	"github.com/roomlog/roomlog/zkx"
)

// Sentinel errors. Every error this package returns that matches one of these
// wraps it (check with errors.Is); ZooKeeper errors are translated at the
// package edge (see zkError) and, where useful, remain visible in the chain.
var (
	// ErrFenced: a writer of a newer epoch has taken over the room. Nothing of
	// the failed call was committed.
	ErrFenced = errors.New("logroom: fenced by a newer epoch")
	// ErrOutcomeUnknown: the entries may or may not be committed (the writer
	// could not find out, e.g. it was closed or the caller's context ended
	// while the outcome was being resolved). Read the log to learn it.
	ErrOutcomeUnknown = errors.New("logroom: outcome unknown")
	// ErrCorrupt: a batch or meta znode failed validation (format, version,
	// checksum, position, epoch order). The message names room, channel and
	// znode.
	ErrCorrupt = errors.New("logroom: corrupt data")
	// ErrCompacted: the requested position lies in a deleted channel; the
	// caller must bootstrap from a checkpoint.
	ErrCompacted = errors.New("logroom: position compacted")
	// ErrEntryTooLarge: an entry can never fit in one batch. Nothing was sent.
	ErrEntryTooLarge = errors.New("logroom: entry too large")
	// ErrRoomFull: the room holds MaxRoomBytes already (backpressure).
	// Nothing was sent; delete channels (after a checkpoint) and retry.
	ErrRoomFull = errors.New("logroom: room full")
	// ErrBadName: an invalid room name or base path.
	ErrBadName = errors.New("logroom: bad name")
	// ErrClosed: the Client, Writer or Reader is closed. It is zkx.ErrClosed
	// (the same value), which the Client returns.
	ErrClosed = zkx.ErrClosed
	// ErrChannelOpen: the open channel cannot be deleted.
	ErrChannelOpen = errors.New("logroom: channel is open")
	// ErrDeleteFenced: a channel deletion stopped because the room's
	// channels changed under it (another deleter, an older channel present,
	// ZooKeeper restored from an older copy) or its connection was lost.
	// Nothing out of order was deleted; list the channels and decide again.
	ErrDeleteFenced = errors.New("logroom: channel deletion fenced")
	// ErrNoRoom: the room (or the named channel) does not exist.
	ErrNoRoom = errors.New("logroom: no such room")
	// ErrUnavailable: ZooKeeper could not be reached (connection lost, no
	// server, session expired) and the operation was not retried. It wraps
	// the ZooKeeper error. It is zkx.ErrUnavailable (the same value).
	ErrUnavailable = zkx.ErrUnavailable
	// ErrBadConfig: a configuration field is invalid. It is
	// zkx.ErrBadConfig (the same value), which DialConfig.Validate returns.
	ErrBadConfig = zkx.ErrBadConfig
	// ErrWriterStopped: the writer stopped earlier on an outcome it could
	// not learn (that earlier Append got ErrOutcomeUnknown); nothing of this
	// Append was sent. Take over with a new writer to go on.
	ErrWriterStopped = errors.New("logroom: writer stopped")
	// ErrDiverged: the log no longer holds what the caller applied from it
	// (another batch at that index, the batch missing, or the log ending
	// below the caller's applied index): the room was tampered with or the
	// local state is not of this log. Never continue past it; an operator
	// must decide which side is right. The message names room, channel,
	// znode and both batch identities.
	ErrDiverged = errors.New("logroom: local state diverged from the log")
	// ErrUnsupportedVersion: the room, or a znode in it, uses a room
	// version or a format this binary does not read (it was written by a
	// newer roomlog, see package version). Nothing was applied from it.
	// The message names the znode, the version found and the binary's
	// range; upgrade this binary or lower the room version.
	ErrUnsupportedVersion = errors.New("logroom: unsupported room version")
	// ErrForeignACL: OpenRoom found a room whose znodes carry an ACL the
	// client's configuration does not allow (e.g. a world-writable room
	// opened with digest credentials, which anyone could fence): an entry
	// naming an identity outside the client's list or with more
	// permissions than configured, or no entry granting this client ALL
	// (zkx.CheckACL; a list in the middle of a rotation is accepted).
	// Nothing was changed.
	ErrForeignACL = errors.New("logroom: room has a foreign ACL")
	// ErrRoomLost: the room znode is a tombstone (WriteTombstone): a
	// member found that ZooKeeper lost the room and recorded it, so that
	// no member creates the room anew over the lost one; or the room is
	// marked lost (MarkLost): a member found that its log no longer holds
	// what the member applied (ZooKeeper restored from an older copy), so
	// that no member takes over and writes the lost indexes again. The
	// text says what was found and how to recover (re-seed).
	ErrRoomLost = errors.New("logroom: ZooKeeper lost the room")
	// ErrEntriesRemoved: batches were deleted from a channel that is not
	// being deleted (acknowledged entries lost from ZooKeeper). It comes
	// wrapped together with ErrCorrupt.
	ErrEntriesRemoved = errors.New("logroom: acknowledged entries removed")
)

// IsConnLoss reports whether err, returned by a go-zookeeper request, says
// the request's fate is unknown because the connection or session went
// away (zk.ErrConnectionClosed, zk.ErrNoServer, zk.ErrSessionExpired,
// zk.ErrSessionMoved, or a raw transport error such as a failed socket
// write). Such requests must be resolved by reading back, never treated
// as definite failures. The caller's own context ending is not one. The
// classification lives in package zkx (zkx.IsConnLoss).
func IsConnLoss(err error) bool { return zkx.IsConnLoss(err) }

func isConnErr(err error) bool { return IsConnLoss(err) }

// zkError translates a ZooKeeper error at the package edge
// (zkx.Translate): connection trouble becomes ErrUnavailable, a closing
// connection ErrClosed; other ZooKeeper errors are wrapped as they are.
// what names the operation.
func zkError(what string, err error) error { return zkx.Translate(what, err) }

// PartialAppendError answers an Append whose entries First..Last spanned
// several batches when some of them were committed (First..CommittedThrough
// are in the log) and the rest failed definitely (Err, e.g. a newer epoch
// fenced the writer). It wraps ErrOutcomeUnknown, never ErrFenced: a
// caller that does not look at the type must not believe that nothing of
// the Append was committed.
type PartialAppendError struct {
	First, Last      uint64
	CommittedThrough uint64
	Err              error
}

func (e *PartialAppendError) Error() string {
	return fmt.Sprintf("%v: append of entries %d..%d partly committed: %d..%d are in the log, the rest are not (%v)",
		ErrOutcomeUnknown, e.First, e.Last, e.First, e.CommittedThrough, e.Err)
}

// Unwrap makes errors.Is(err, ErrOutcomeUnknown) true.
func (e *PartialAppendError) Unwrap() error { return ErrOutcomeUnknown }

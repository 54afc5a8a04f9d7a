// Package store holds a replica's state: a Pebble database that the log's
// entries produce, together with the position (applied index and epoch) of
// the last entry applied.
//
// # On-disk format
//
// One Pebble database (github.com/cockroachdb/pebble/v2) per store. Its key
// space is split in two ranges that cannot overlap:
//
//	0x00 "roomlog/format"   uvarint format version (1)
//	0x00 "roomlog/applied"  8-byte big-endian applied index, 8-byte big-endian applied epoch,
//	                        then the last entry's BatchRef: 8-byte first, 4-byte count,
//	                        4-byte CRC (stores written before BatchRef existed hold
//	                        the first 16 bytes only; they read as a zero BatchRef)
//	0x01 <user key>         user value
//
// Internal keys start with 0x00, user keys with 0x01, so no user key can
// ever name an internal one. User iteration (Scan, ScanPrefix, Batch.Scan)
// and StateHash see the 0x01 range only, with the prefix stripped. A
// directory whose database has keys but no format marker is refused
// (ErrCorrupt).
//
// # Invariants
//
//  1. State and position move together: Apply writes the entries' effects
//     and the new applied position (index, epoch and the BatchRef of the
//     last entry: the identity of the log batch it came from) in one
//     Pebble batch. After any crash, the
//     stored applied index is exactly the index whose prefix of the log
//     produced the stored user state.
//  2. Exactly once, in order: Apply accepts entries only if the first is
//     AppliedIndex()+1 and they are contiguous (else ErrIndexGap and nothing
//     is written). No entry is skipped or applied twice.
//  3. All or nothing: an Applier error or panic aborts the whole Apply call.
//  4. A crash loses only whole, most recent batches, never part of one
//     (Pebble's WAL records are checksummed; replay stops at a torn record).
//     Under SyncEveryBatch it loses nothing Apply returned for; under
//     SyncGroup a crash (process or machine) may lose what was committed
//     since the last group sync (about GroupSyncInterval plus one fsync).
//
// # What must be deterministic
//
// Every replica applies the same entries in the same order and must reach
// the same state, which StateHash proves. Therefore an Applier's Apply must
// depend only on the Batch's contents and the Entry (Index, Epoch, Data):
// no clocks, randomness, map iteration order, goroutine scheduling,
// environment, local configuration or files. Its writes and its response
// must be the same on every replica. A command the Applier refuses is a
// response ("rejected: …"), not an error; an error stops a replica. The
// built-in OpsApplier is deterministic: it decodes Data (EncodeOps format)
// and performs the ops in order; an entry that fails to decode or holds an
// invalid op is rejected as a whole, with nothing written.
//
// # State hash
//
// StateHash is the lowercase hex SHA-256 of, for every user key in
// ascending byte order: uint64be(len(key)) || key || uint64be(len(value)) ||
// value. It is computed on a Pebble snapshot and returned with the applied
// index read from that same snapshot.
//
// # Protocol
//
//  1. Open(dir, opts). A new directory starts at applied index 0.
//  2. Feed committed log entries in index order: Apply(entries) with
//     entries[0].Index == AppliedIndex()+1. On ErrIndexGap, re-read the log
//     from AppliedIndex()+1. On ErrApply, stop: the Applier is broken.
//  3. Read with Get/Scan/ScanPrefix (live) or View (a snapshot that reports
//     its index; close it). StateHash to compare replicas.
//  4. Checkpoint(dir) for a consistent image at a reported index (package
//     checkpoint builds on it).
//  5. Close: waits for operations in progress, closes views, syncs, closes.
//     Every method afterwards returns ErrClosed.
//
// Concurrency: all methods are safe for concurrent use; Apply and
// Checkpoint are serialised with each other. Scan callbacks must not call
// Close. Under SyncGroup the store owns one goroutine (the periodic fsync),
// stopped by Close.
package store

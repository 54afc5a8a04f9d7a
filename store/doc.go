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
//	0x00 "roomlog/req/i/" <16-byte request id>
//	                        request record: 8-byte index, 8-byte stamp, 8-byte payload hash, response
//	0x00 "roomlog/req/o/" <8-byte big-endian index>
//	                        expiry queue: 16-byte request id, 8-byte stamp
//	0x00 "roomlog/req/low"  8-byte index below which the queue holds nothing (a hint)
//	0x00 "roomlog/runhash"  running hash: 1-byte version (1), 8-byte big-endian index,
//	                        8-byte big-endian base, 32-byte sum (see "Running hash")
//	0x00 "roomlog/hist/" <8-byte big-endian index>
//	                        history record at the end of each applied batch: 1-byte
//	                        version (1), 8-byte epoch, BatchRef (8-byte first, 4-byte
//	                        count, 4-byte CRC), the running hash record there; kept for
//	                        the HistoryWindow indexes below the applied one (see "History")
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
// # Request table (exactly-once requests)
//
// An entry may come wrapped in a request envelope (EncodeRequest):
//
//	c1 72 71 01            magic ("\xc1rq", version 1; 0xc1 is never valid msgpack)
//	16 bytes               request id (zero: no id, see WrapPlain)
//	uvarint stamp          proposer's clock, Unix ms: log time
//	uvarint ttl            ms, 1 ms ..= 30 days
//	uvarint window         entries, 1 ..= 2^26
//	payload                the rest: what the Applier sees as Entry.Data
//
// Only the canonical encoding is an envelope; an entry that starts with the
// magic but is not a well-formed envelope is plain and reaches the Applier
// unchanged, as does plain data that WrapPlain wrapped (zero id, zero
// policy) because it happened to start with the magic.
//
// Applying an entry with a request id, in this order:
//
//  1. Expire: records are removed oldest index first while the oldest is
//     window or more indexes before the entry, or its stamp is more
//     than the entry's TTL before the entry's stamp. The policy is the one
//     the entry carries, so expiry depends only on the log and the table:
//     every replica removes the same records at the same entry, whatever
//     its Apply calls' boundaries (a clock that went back expires nothing).
//  2. Look the id up. Found with the same payload (8 bytes of SHA-256):
//     Outcome.Duplicate, the Applier is not called, the response is the
//     original's and Outcome.Index the original's index. Found with another
//     payload: Outcome.Conflict, nothing applied.
//  3. Not found: the Applier runs (Entry.RequestID set) and the record
//     (index, stamp, payload hash, response) joins the table, in the same
//     Pebble batch as the entry's effects.
//
// Clocks: stamps come from proposers, so expiry by TTL follows their
// clocks. A stamp far ahead of the others expires every older record at
// once (a retry arriving then is applied again), and a record stamped in
// the future is not TTL-expired until later stamps pass it, holding the
// records behind it until the window pushes it out. Both are
// deterministic on every replica; the window bound holds regardless.
//
// Upgrades: every release (v0.1.0 on, see RELEASES) has the request
// table; stores from before it (earlier development builds) passed an
// envelope to the Applier as plain data. The store format is shared by
// room versions 1 and 2, so a data dir written by v0.2.0 opens under
// v0.1.0 (which ignores roomlog/runhash) and back (a running hash at
// another index than the applied one starts a new chain, below).
//
// Bounds: at most window records (the largest window in effect); a record
// costs about 90 bytes plus its response. A retry that arrives after its
// record expired is applied again: deduplication is promised within the
// window and TTL only. The table is outside the user key space (no Scan
// sees it), is covered by StateHash and travels in checkpoints.
//
// # State hash
//
// StateHash is the lowercase hex SHA-256 of, for every user key in
// ascending byte order: uint64be(len(key)) || key || uint64be(len(value)) ||
// value; then, only when the request table is not empty, uint64be(2^64-1)
// followed by each record as uint64be(len(k)) || k || uint64be(len(v)) || v
// with k the record's key without the 0x00 "roomlog/" prefix, in key order.
// It is computed on a Pebble snapshot and returned with the applied index
// read from that same snapshot.
//
// # Running hash
//
// Besides StateHash (a full scan, on demand), every Apply keeps a running
// hash (RunHash), O(1) per entry: for each entry, sum = SHA-256(previous
// sum || uint64be(index) || the entry's writes || outcome), where each
// write the Applier makes through its Batch, in order, is a tag ('s' set,
// 'd' delete, 'r' delete-range) followed by each argument as uvarint(len)
// || bytes (user keys, unprefixed), and the outcome is nothing for an
// applied entry, 'D' || uvarint(original index) for a deduplicated
// request, 'C' || uvarint(original index) for a conflicting one. The
// request table's own bookkeeping is not hashed (it is a function of the
// log). The record (index, base, sum) is written in the same Pebble batch
// as the entries' effects, before the applied key, so it is always at the
// applied index and travels in checkpoints. A store opened without the
// record (written by a version without it), or with a record at another
// index than the applied one (entries applied by such a version since),
// starts a new chain: base = index = the applied index, sum zero. Only
// chains with the same base compare. RunHashAt keeps the last 16384
// entries' hashes in memory (from Open on), so a member can compare a
// peer's hash at an index it applied a while ago.
//
// # History
//
// Every Apply also writes, in the same Pebble batch, a history record
// (Point: index, epoch, BatchRef, running hash) for each entry that ends
// its log batch, and deletes (one range deletion, each time the applied
// index crosses a multiple of 4096) the records more than HistoryWindow
// (131072) indexes below the applied one. Members apply whole batches, so
// every member's applied index is a batch end: a stopped member's
// Position can be looked up in another store of the same room (PointAt)
// to tell, without ZooKeeper, whether one history is a prefix of the
// other. That is what a re-seed after ZooKeeper lost a room decides by
// (replica package doc, "Disaster recovery"). A store written by a version
// without history has records only for what it applied since.
//
// # Bulk ingest
//
// IngestSorted builds a large state without the log: it writes sorted user
// key/value pairs as sstables of the 0x01 key encoding (what OpSet writes)
// in a work directory under the store directory (.roomlog-ingest-*,
// removed when it returns or by the next call) and ingests them with
// Pebble's Ingest. The ingested keys are state, not log entries: the
// applied index and epoch, the running hash, the history and the request
// table do not change, so nothing a member compares through the log (the
// running hash) sees them; StateHash does, and checkpoints taken after the
// ingest carry them. It is an offline tool, allowed only on a store that
// the caller opened itself with store.Open and that nothing else uses
// while it runs: no replica has it open, no Apply runs (IngestSorted holds
// Apply off itself), no Checkpoint is taken of it (package checkpoint's
// invariant 6 rests on a store that ingests nothing while a checkpoint is
// taken). Its members get the ingested state only by bootstrapping from a
// checkpoint taken after it: use it to seed a room's first member (or a
// bench), never on a member of a room whose peers replay the same log, and
// remove the member's checkpoints taken before the ingest (they hold the
// same index without the ingested keys).
//
// # Protocol
//
//  1. Open(dir, opts). A new directory starts at applied index 0.
//  2. Feed committed log entries in index order: Apply(entries) with
//     entries[0].Index == AppliedIndex()+1. On ErrIndexGap, re-read the log
//     from AppliedIndex()+1. On ErrApply, stop: the Applier is broken.
//  3. Read with Get/Scan/ScanPrefix (live) or View (a snapshot that reports
//     its index; close it). StateHash to compare replicas. A holder that
//     must not write gets a Reader, the read side alone.
//  4. Checkpoint(dir) for a consistent image at a reported index (package
//     checkpoint builds on it). Apply goes on meanwhile: the index reported
//     is the one stored in the image, read back from it. The memtable is
//     flushed first only when the WAL holds Options.CheckpointFlushBytes
//     (16 MiB) or more; otherwise the image carries the WAL, replayed when
//     it is opened. The position is read back from the image's newest WAL
//     when that holds an Apply (the last Set of the applied key in it is
//     the newest: every Apply writes the key last in its batch), reading
//     the files as Pebble's recovery does (wal.Scan, its record reader,
//     an unclean end accepted only in the newest WAL); in every other case
//     (no Apply in the newest WAL, any WAL that does not read to its end,
//     a batch that does not parse or miscounts, any other write of the
//     key) by opening the image read-only, which replays the WAL (a third
//     of a checkpoint's CPU in the bench when it carried up to 4 MiB;
//     walpos.go). On the WAL path the image is not opened: package
//     checkpoint opens it, and checks index and epoch, before restoring
//     it. A ReadOnly store does not checkpoint (ErrReadOnly).
//  5. Close: waits for operations in progress, closes views, syncs, closes.
//     Every method afterwards returns ErrClosed.
//
// # Disk stalls
//
// Every write-side disk operation of the store — WAL writes and syncs,
// flushes, compactions, the manifest, checkpoints, directory syncs, Open —
// runs on Pebble's health-checking file system, which looks at the
// operations in progress every 2 s. One still running after
// Options.DiskStallTimeout (default 20 s) fails the store for good with
// ErrDiskStalled: OnDiskStall is called once; Apply, Sync and Checkpoint
// return the error at once (the call stuck on the disk stays stuck: Go
// cannot cancel a system call); Close returns it within 1 s without
// waiting for the stuck operations and finishes in the background if the
// disk recovers; Store.DiskOp bounds the same way what a caller does on the
// store's disk outside Pebble (package checkpoint's Create);
// an Open that stalls returns it and closes what it opened late. Reads
// go on (a hung device often still serves them from the page cache). An
// operation that is slow but completes is logged, not a stall. What was
// acknowledged before the stall is durable; the entry stuck in its WAL sync
// may or may not be, and the store may show it to readers before its sync
// ends (Pebble publishes a batch before waiting for its fsync). Pebble
// watches only writes: a read of Pebble's stuck on the disk (a Get, Open's
// WAL replay) is not bounded; Create's checksum reads are (DiskOp). The clocks count a paused process's time too: a
// SIGSTOP longer than DiskStallTimeout across a write declares a stall.
//
// Concurrency: all methods are safe for concurrent use; Applies are
// serialised with each other, Checkpoint runs beside them. Scan callbacks
// must not call Close. Under SyncGroup the store owns one goroutine (the
// periodic fsync), stopped by Close. Pebble's compactions start only once
// Open has returned (Pebble v2.1.7's Open otherwise waits for an L0
// compaction it started itself: seconds for a store restored from a busy
// primary's checkpoint).
package store

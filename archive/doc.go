// Package archive keeps a room's history after ZooKeeper has let go of it:
// sealed channels (their batch znodes, byte for byte) and checkpoints
// (package checkpoint's directories), copied before the primary deletes a
// channel, and rebuilt into a store at any archived index (Restore: point-
// in-time restore).
//
// The Archive interface is what a store of items implements (a directory
// here, Dir; an object store would be another); package replica writes to
// it (replica.Config.Archive) and Restore reads from it.
//
// # Items and keys
//
// An item belongs to one room incarnation (Origin: the room's name, the
// czxid of its znode and the name of its epoch znode) and is keyed by its
// index range. The czxid alone is no identity: a wiped or new ensemble
// counts zxids from zero, so a room re-seeded there can be created at the
// czxid a lost incarnation had. The epoch znode's name completes it: a
// room OpenRoom creates has "epoch" and a czxid unique within one
// ensemble's life, and after a wipe the only way back is a re-seed
// (logroom.SeedRoom), which draws a fresh "epoch-<16 hex>". An origin
// without the name is refused, never taken for "epoch". The items:
//
//   - a channel item holds one sealed channel: its number, first and last
//     index, epoch, room version, the channel znode's data, and the
//     payload of every batch znode of its chain (from its first index to
//     its sealed last, as logroom's readers follow it) in index order with
//     the znode's ctime; orphan batches past the sealed end (a deposed
//     writer's, never acknowledged) are not part of the log and are not
//     archived (package replica copies the chain only);
//   - a checkpoint item holds one checkpoint: its manifest and its Pebble
//     files, at one index.
//
// A listing (List) tells from names alone which indexes are covered.
//
// # Directory layout (Dir)
//
//	<root>/<url.PathEscape(room)>/<czxid %016x>[-<epoch znode>]/
//	                                     an incarnation's items; the epoch
//	                                     znode's name is left out for
//	                                     "epoch" (v0.1.0's folders, which
//	                                     therefore read as that incarnation)
//	    roomlog-incarnation.json             how the incarnation began
//	                                         (Incarnation: re-seeded when,
//	                                         continuing which incarnation
//	                                         from which index), self-
//	                                         checksummed; absent in v0.1.0's
//	                                         archives
//	    ch-<first %020d>-<last %020d>        a channel item (one file)
//	    ckpt-<index %020d>/                  a checkpoint item
//	        roomlog-archive-item.json        its record: origin (Fence: the
//	                                         epoch znode, omitted for "epoch"),
//	                                         index, epoch,
//	                                         every file's size and SHA-256,
//	                                         self-checksummed (SHA-256 of the
//	                                         compact JSON with Checksum "")
//	        roomlog-checkpoint.json          the checkpoint's manifest
//	        db/<name>                        the checkpoint's files
//	    .tmp-*                               a put in progress (ignored)
//	    .corrupt-*                           a corrupt item a put replaced
//	                                         (ignored, kept for inspection)
//
// A channel item file is
//
//	"RLARCH01"
//	u32 n, n bytes of JSON header (room, czxid, Fence: the epoch znode
//	    omitted for "epoch", channel, first, last, epoch, room version,
//	    batch count, batch bytes, first and last ctime, and Content: the
//	    SHA-256 of the origin (its epoch znode only when not "epoch"),
//	    range, epoch and every batch with its ctime)
//	u32 n, n bytes: the channel znode's data
//	per batch: i64 ctime (unix ms), u32 n, n bytes of batch znode payload
//	"RLAREND1", then the SHA-256 of every byte before the 32 it occupies
//
// with big-endian integers. The batch payloads decode with
// logroom.DecodeBatch. Items of an incarnation whose epoch znode is
// "epoch" are v0.1.0's byte for byte (no Fence field, the same Content),
// so a v0.1.0 binary reads them; it does not see the folders of re-seeded
// incarnations (their names are not 16 hex digits).
//
// # Invariants
//
//  1. An item is complete or absent: it is written under a temp name,
//     fsynced, moved into place (a channel by link, which never replaces;
//     a checkpoint directory by rename), and its directory fsynced.
//  2. Every item is verified on every read: a channel's trailer checksum,
//     lengths, header, and its batches (each decodes, the first index of
//     each continues the previous one, epochs never decrease, the last
//     ends at the channel's last index); a checkpoint's record checksum,
//     exactly the recorded files at their sizes and SHA-256, and a
//     manifest of the item's origin and index. A corrupt or truncated
//     item is refused with ErrCorrupt naming its path and what was wrong;
//     one recording another origin (another czxid or epoch znode than
//     its folder's) with ErrForeign.
//  3. Puts are idempotent: a channel whose Content matches the stored one
//     (the channel znode's data may differ: DeleteChannel marks it) and a
//     checkpoint whose manifest matches byte for byte are the same item.
//     Other content under one key is ErrConflict, naming the path; nothing
//     is written. A corrupt stored item is moved aside and replaced.
//  4. A checkpoint is copied from the member, never linked (the archive
//     may be another filesystem), and each file's size and CRC32C are
//     checked against the checkpoint's manifest while it is copied: a
//     checkpoint that changed or rotted under the copy is never archived.
//     Within the archive, a Pebble table (immutable) that the previous
//     checkpoint item of the origin holds under the same name, size and
//     CRC32C is hard-linked instead of copied, after its CRC32C is checked
//     again, so rot in the earlier item is never carried into the new one;
//     its SHA-256 is the earlier record's. Where links fail, it is copied.
//     A file the previous item shares already with the one before it is
//     copied, never linked a third time: one damaged file takes at most
//     two restore points, and the error verifying an item names the other
//     items holding the damaged file.
//
// # The re-seed chain
//
// Czxids cannot order incarnations (a wiped ensemble counts from zero), so
// the archive records per incarnation the one it continues
// (PutIncarnation; package replica writes it once per primary, from the
// re-seed record <room>/reseed, which names the seed's incarnation by
// czxid and, for data dirs of this release, epoch znode): a room OpenRoom
// created (epoch znode "epoch") continues nothing; a re-seeded one
// continues its predecessor from the seed's index. A record is
// idempotent, another one for the same incarnation is ErrConflict. The
// archived incarnations are ordered by these records when they form one
// chain: each is continued by at most one other, exactly one (the
// newest, in service) by none, and following the predecessors from it
// visits every archived incarnation. A predecessor named by czxid alone
// (a marker of an earlier release) is the only other archived
// incarnation of that czxid, or unresolved. Anything else (a re-seeded
// incarnation without a record, a room created anew under the name, two
// re-seeds of one predecessor, an unresolved predecessor) and the archive
// cannot tell: a restore that names no incarnation is ErrAmbiguous,
// listing what the chain says of each.
//
// # Time
//
// The log records one real time per batch: the ctime of its znode, the
// ZooKeeper leader's clock when the create committed (when the batch's
// entries became durable and were acknowledged). The archive keeps it per
// batch. RestoreOptions.ToTime resolves to the last index of the last
// batch, in index order, committed at or before the time, stopping at the
// first batch committed after it (so a leader clock that stepped back
// never lets a later entry in before an earlier one). A time past every
// archived batch resolves to the newest checkpoint above them whose
// manifest was created (the member's clock) at or before it, else to the
// last archived batch; the result is then marked cut back
// (RestoreResult.Cut, CutReason): later entries may exist in channels not
// sealed and archived yet. Request envelopes
// (store.Request.Stamp) carry proposers' clocks too, but only for
// ProposeRequest entries and are not used to resolve a time.
//
// # Restore protocol
//
//  1. List the room's items; pick the incarnation: RestoreOptions.RoomCzxid
//     and RoomFence, or the only one archived, or the newest of the
//     re-seed chain ("The re-seed chain"; RestoreResult.Chosen says so).
//     Several, none named and no chain to order them is ErrAmbiguous,
//     listing each (0x<czxid>/<epoch znode>) with what it covers, its
//     last commit time and what the chain says of it: a wiped or new
//     ensemble counts zxids from zero, so no order of czxids tells the
//     incarnation in service from a lost one. A czxid named without the
//     epoch znode that several archived incarnations share is
//     ErrAmbiguous too. The chosen incarnation's items alone are used: a
//     target its items do not cover (an index before its seed) is
//     ErrNotCovered; name the predecessor to restore from its items.
//  2. Pick the target index (ToIndex, or resolve ToTime over the channels).
//  3. Pick the newest archived checkpoint at or below it (none: start from
//     an empty store, which needs the channel holding index 1) and the
//     channels that run from the checkpoint's index + 1 to the target
//     without gap; else ErrNotCovered naming the missing indexes.
//  4. Verify the checkpoint item and restore it (checkpoint.Restore, origin
//     checked) to DataDir/store; open the store with the members' Applier.
//     A checkpoint item that fails verification (corrupt, foreign, gone)
//     is skipped and named (RestoreResult.Skipped): back to step 3 with
//     the next older one.
//  5. Read each channel (verified), apply its entries after the checkpoint
//     and up to the target, in order, through store.Apply.
//  6. Report the applied index (the target, exactly), running hash and
//     state hash: a member of the room at that index reports the same.
//
// DataDir is laid out like a member's data dir (DataDir/store) without the
// member marker: `roomlog reseed --from DataDir` seeds a new room from it.
// Restore records what it built in DataDir/roomlog-restore.json
// (RestoreInfo), the room version the restored index was written under
// (its archived channel's) included: the re-seed creates the room at that
// version, not at 1, which would lower it without the downgrade protocol.
// checkpoint.Restore may hard-link the archived .sst files into the store
// when both are on one filesystem (Pebble never writes a table in place).
package archive

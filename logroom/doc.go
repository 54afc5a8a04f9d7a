// Package logroom is a durable replicated log on Apache ZooKeeper: one
// fenced writer per epoch appends batched entries, any number of readers
// tail them in order, exactly once, across channels.
//
// # Vocabulary
//
// A room is one log. Its entries have dense indexes 1, 2, 3… Entries are
// packed into batch znodes; batches live in channels (segments). Exactly one
// channel is open; the others are sealed with their last index recorded. An
// epoch grows with every writer takeover and fences all older writers.
//
// # Znode layout
//
//	<base>/R                        room meta: msgpack {v: 1, created: unix ms
//	                                [, since, epoch]} at room version 1, {v: 2,
//	                                created, room: N, since, epoch} at room
//	                                version N >= 2 (see "Room version"); a
//	                                re-seeded room adds fence: "epoch-<16 hex>"
//	<base>/R/epoch                  msgpack {v: 1, epoch, owner, nonce}; its znode
//	                                VERSION is the fence. A re-seeded room
//	                                (SeedRoom) names this znode by the meta's
//	                                fence instead: a name no earlier incarnation
//	                                of the room used
//	<base>/R/epoch/w-%016x          a writer's token (empty): created in the same
//	                                Multi as its epoch CAS, checked (version 0)
//	                                by its every write; a takeover deletes the
//	                                earlier writers' tokens behind its fence
//	<base>/R/channels/ch-%020d      channel N (N = 1, 2, 3…), data = msgpack
//	                                {v: 1, first, epoch, sealed, last, bytes, batches,
//	                                deleting (omitted unless set), room (the room
//	                                version it was opened under; omitted for 1)}
//	<base>/R/channels/ch-N/b-%020d  batch znode named by its FIRST index
//	<base>/R/epoch/lost             the room is marked lost (MarkLost), under
//	                                its epoch znode (whatever its name): text
//	                                after "#roomlog-room-lost v1\n" saying who
//	                                found what; OpenRoom (unless Inspect),
//	                                ReadRoomInfo and a takeover refuse the room
//	                                with ErrRoomLost
//	<base>/R/members, /election, /checkpoints   reserved for package replica
//
// base defaults to DefaultBase ("/roomlog"); room names must pass
// ValidateName and bases ValidateBase, the checks every package and command
// uses. Every znode is PERSISTENT (never SEQUENTIAL) and created with
// Client.ACL(); OpenRoom refuses a room whose znodes carry
// another ACL (ErrForeignACL). Meta znodes are msgpack maps, checked for
// sane lengths and nesting before they are decoded. Channel N+1's first
// index equals channel N's sealed last index + 1. A channel's batches form
// a chain: b-F holds
// entries F..F+count-1, the next is b-(F+count). The log is the chain of
// each channel up to its seal (for the open channel: up to the first
// missing name). Batches past a sealed channel's last index are orphans of
// a deposed writer, never acknowledged; readers ignore them and they are
// removed with their channel.
//
// Deterministic batch names are what make the writer safe: a resent batch
// cannot be duplicated (the second create fails NodeExists), pipelined
// creates that reach the server out of order are harmless (a reader waits
// for the exact next name), and a reader needs no listing to find its next
// batch.
//
// # Room version
//
// The room meta records the room's version (package version: the formats
// a writer may use); every channel records the version it was opened
// under, so each channel's batches use one version's formats. Room
// version 1 is release v0.1.0's formats byte for byte: room meta record
// version 1, channel metas without room, batch versions 1 and 2 with
// codecs none and S2. Room version 2 adds codec zstd and records itself in
// room meta record version 2, which v0.1.0's OpenRoom refuses ("room
// meta: unknown format version 2"), so an old binary refuses such a room
// before it joins instead of meeting a batch it cannot read.
//
// Record version 2 at room version 1 is a downgrade in progress
// (RoomVersion.Lowering): the room is at 1, but channels opened at a
// higher version may remain, so v0.1.0 is still kept out;
// RotateToVersion(1) on such a room writes record 1 (the caller makes
// sure no such channel remains first).
//
// Only a writer changes it, with Writer.RotateToVersion: the rotation's
// fenced Multi (epoch check, seal the open channel, create the next at the
// new version) also sets the room meta with a version check on the meta's
// znode version read at takeover. Since is the new channel's first index.
// A new writer reads the room version after its epoch CAS (nothing else
// can change it then), refuses a meta whose version is not the newest
// channel's (ErrCorrupt: no rotation wrote it), and opens its channel at
// it; a failed compare-and-set of the meta or the open channel's meta in
// a rotation is ErrCorrupt naming both; a rotation that changes the meta
// never goes out early (it waits for the batches in flight), and answers
// only the Rotate calls it was planned for. A writer refuses a room
// above this binary's range or WriterConfig.MaxRoomVersion with
// ErrUnsupportedVersion, as OpenRoom, the views and the readers do for a
// room meta, channel meta or batch beyond this binary
// (RoomOptions.MaxRoomVersion caps what a Room's readers read below the
// binary). A checksum-valid batch of an unknown format in a channel of a
// room version this binary reads is corrupt, not a newer writer's (no
// room version it reads has that format). Which members
// support a version, and when to change it, is package replica's
// decision.
//
// # Read-only views
//
// Tools that inspect a room without opening it (OpenRoom creates a missing
// room) read it through views that only Sync, Get and List, and decode
// with the library's own decoders: ReadRoomInfo (room meta and the room's
// czxid), ReadEpoch (epoch, owner, znode version), ListChannels (channel
// numbers, foreign names, the channels znode's Cversion) and ReadChannel
// (a ChannelView: ChannelInfo plus the deleting mark). A meta znode that
// fails the checks is a *CorruptZnodeError (wrapping ErrCorrupt) naming
// room, channel and znode; RoomPath, ChannelName, BatchName,
// ParseChannelName and ParseBatchName name the layout above.
//
// # Batch format (versions 1 and 2)
//
// Version 1 (uncompressed; EncodeBatch, and every batch a Writer does not
// compress): a msgpack array of 6 elements: [version=1, epoch, first
// index, entry count, crc, payload]. payload is one msgpack bin holding
// each entry as uvarint(len) followed by its bytes, the uvarint in its
// minimal encoding (a padded one, e.g. 0x8a 0x00 for 10, is corrupt, so
// that a batch decodes to one set of entries and re-encodes to the same
// bytes). crc is CRC32C
// (Castagnoli) over epoch, first and count as 8-byte big-endian integers
// followed by the payload (covering the header fields too: a flipped bit
// anywhere but in the version is a checksum error).
//
// Version 2 (a Writer's compressed batches): a msgpack array of 8
// elements: [version=2, epoch, first index, entry count, crc, codec,
// rawLen, payload]. The framed entries as in version 1 (rawLen bytes, the
// "raw payload") are stored encoded with codec: 0 none (payload
// is the raw payload, rawLen == its length), 1 S2 (payload is one S2 block,
// github.com/klauspost/compress/s2 block format, whose decoded-length
// prefix equals rawLen), 2 zstd (room version 2 and later: payload is one
// zstd frame, github.com/klauspost/compress/zstd, that announces its
// content size, equal to rawLen; the decoder inflates into exactly rawLen
// bytes and no further). A checksum-valid batch of another codec, or of a
// format version above 2, is a newer writer's: ErrUnsupportedVersion
// naming the znode (a version above 2 may as well be corruption: it
// wraps ErrCorrupt too). A zstd batch in a channel opened at room version
// 1 is corrupt. crc is CRC32C over
// version, epoch, first, count, codec and rawLen as 8-byte big-endian
// integers followed by the stored payload: it covers what is stored, so a
// corrupt compressed payload is caught before it is inflated. Bounds:
// rawLen <= MaxBatchRawBytes (16 MiB) and count <= MaxBatchEntries
// (262144); count <= rawLen as every entry takes its length prefix.
// DecodeBatch checks them, then the checksum, then that the S2 block
// announces exactly rawLen, and only then allocates rawLen bytes and
// inflates into them (the block must fill them exactly). The bound is a
// fixed size rather than a ratio to the stored size because S2 compresses
// repetitive entries more than 100-fold, which a writer cannot prevent;
// 16 MiB is 18 times HardMaxBatchBytes, above what S2 gives on realistic
// entries (about 5x, bench/README.md) at the largest batch size.
//
// Readers read both versions and every codec (release v0.1.0 reads none
// and S2). The entries of a compressed batch alias a buffer
// DecodeBatch allocated, those of an uncompressed one the input. Either
// way DecodeBatch never panics, and allocates O(len(input)) for an
// uncompressed batch, O(rawLen) (at most about 22 MiB with the entry
// slices) for a compressed one.
//
// An encoded batch, as stored, is at most WriterConfig.MaxBatchBytes
// (hard limit 900 KiB, below ZooKeeper's 1 MiB jute.maxbuffer with the
// Multi's overhead), compressed or not; the raw payload of a compressed
// one may be larger. BatchID.CRC is the stored crc: the same stored bytes
// at the same name are the same entries.
//
// A Writer with CompressionS2 (the default) or CompressionZstd (zstd in
// channels of room version 2 and later, S2 below) forms a batch by its
// raw payload: up to (MaxBatchBytes - 48) times its running estimate of
// the compression ratio times 0.85, at least what fits uncompressed, at
// most 16 x MaxBatchBytes, MaxBatchRawBytes and MaxQueuedBytes, and at
// most MaxBatchEntries entries. The estimate (starting at 1, kept within
// 1..16) moves by a quarter towards the ratio of each batch of at least
// min(16 KiB, half of MaxBatchBytes) of raw payload. The batch is S2-compressed; it is stored as
// version 2 if that saves at least 1/8 and fits MaxBatchBytes, else as
// version 1 if it fits uncompressed (raw payloads under 256 bytes are
// not tried), else it is split at the entry boundary nearest half its raw
// bytes and each half is stored the same way (the estimate jumps to the
// ratio just seen). An entry alone always fits uncompressed (Append
// refuses larger ones), so every stored batch is at most MaxBatchBytes.
// The pieces of a split go out together and may exceed MaxInFlight.
// MaxChannelBytes, Room.Bytes, ChannelInfo.Bytes and the room and batch
// byte metrics count stored bytes; a request is admitted against
// MaxRoomBytes by its uncompressed size, since its stored size is not known
// yet.
//
// # Byte bound
//
// MaxRoomBytes bounds ZooKeeper heap, not data: the room is charged its
// stored batch bytes plus ZnodeHeapBytes (480) for every batch and channel
// znode (Usage.Charged = roomlog_room_bytes + 480 x roomlog_room_znodes).
// A znode costs ZooKeeper 470 to 510 bytes of heap beyond its data, so
// counting data alone let a room of one-entry batches (29 bytes each) cost
// 16 times its bound in heap. Measured on ZooKeeper 3.8 with 1 GiB heap
// (TestRoomByteBoundHeap, live heap after a full GC through jcmd): a room
// filled to its bound with one-entry batches costs at most 1.5 times
// MaxRoomBytes (1.0 to 1.2 measured); with realistic batches (kilobytes
// each) the charge is within a few percent of the data. A request is
// checked as if it needed a batch (header and znode) of its own.
//
// # Invariants
//
//  1. Fencing: every write of a Writer (batch create, seal, channel open)
//     is a Multi whose first ops are CheckVersion(epoch znode, the version
//     its own CAS produced) and CheckVersion(its token under the epoch
//     znode, 0). Once a newer epoch exists, nothing of an older writer
//     lands. The checks also fence writers of an earlier incarnation of
//     the room (deleted under them, and re-seeded or created again), whose
//     epoch znode's version restarted at 0 and may come back to theirs: a
//     re-seeded room's epoch znode has a fresh name (room meta "fence"),
//     and no room created again holds their token.
//  2. Acknowledgement order: Append returns success only when its batches
//     and every earlier batch are durable; acknowledged batches are always
//     a contiguous prefix of the chain.
//  3. No false outcome: an Append gets success only if its entries are in
//     the log, ErrFenced/ErrEntryTooLarge/ErrRoomFull only if none is, and
//     ErrOutcomeUnknown whenever the writer could not find out.
//  4. Readers deliver each index once, in order, and nothing of a batch
//     that fails validation (decode, version, CRC, first == expected
//     position, count, epoch not below the previous batch's epoch and equal
//     to its channel's epoch, not past the channel's seal).
//
// # The channel chain (CheckChain)
//
// Before a takeover, a reader's Tail or a log-matching check uses the
// channels, they must form a chain: consecutive numbers; channel N+1's
// first index = channel N's sealed last index + 1; every channel but the
// last sealed; the last one open (seal and open are one Multi, and the
// open channel is never deleted); and a history that adds up: the channels
// znode's child version (Cversion, which counts every child create and
// delete) equals b + (a-1) (+ foreign children) for listed channels a..b,
// since channels are created in order and only the oldest are deleted. A
// channel deleted and created again — the open channel re-created empty
// at its old first index, say, which would otherwise look like a valid
// chain — fails this check, and so does a room whose channels are all
// gone. Batches are checked the same way, per channel: a channel znode's
// Cversion minus its number of children counts two per deleted child, and
// only DeleteChannel deletes batches, after marking the channel Deleting
// (ChannelInfo.Removed, .Deleting). A batch deleted from the open channel
// or from a sealed channel that is not marked — an acknowledged entry
// removed by another client, which no reader would read again — fails the
// check; a replica runs MatchLog (and so CheckChain) periodically while it
// runs, so it is noticed in seconds, not at the next takeover. Anything else is
// ErrCorrupt naming the channel: another client (or an operator) deleted
// or created channels. roomlog can detect this, not repair it: the
// operator must restore the znodes or decide which members' state is
// right (cmd/roomlog verify names the break).
//
// The listing and its Cversion are one read; the channels' metadata is
// read after it. A rotation or a compaction in between (a last channel
// that looks sealed without a successor, a listed channel gone from the
// reads) is not in the listing's history and moves Cversion: the check is
// done again, up to 100 times in a row, then CheckChain returns
// ErrUnavailable (try later), never ErrCorrupt for a race. A break the
// listing's history shows is reported at once; any other after five looks
// with nothing created or deleted in between.
//
// # Log matching (MatchLog)
//
// Every Entry carries the BatchID (epoch, first, count, CRC) of its batch
// znode. A replica keeps the BatchID of the last batch it applied with its
// state; MatchLog(id, applied) checks that the log still holds that exact
// batch at that name and reaches applied. Another batch there, the batch
// missing from a channel that is not being deleted, or a log that ends
// below applied is ErrDiverged (naming room, channel, znode and both
// identities); a batch in a channel deleted by compaction cannot be
// checked and passes.
//
// # Protocol: takeover (NewWriter)
//
//  1. Read the epoch znode (data and version v; a body that does not
//     decode is ErrCorrupt) and check the channel chain. The new epoch is
//     1 + the largest of the epoch znode's value and every channel's epoch
//     (batches carry their channel's epoch), so a lowered or reset epoch
//     znode never makes a writer reuse an epoch; an epoch that would
//     overflow is ErrCorrupt. Set the epoch znode to it with version v
//     (CAS) and create the writer's token epoch/w-<nonce>, in one Multi.
//     The writer's fence is version v+1 and its token. A lost reply is
//     resolved by reading back the nonce. BadVersion → ErrFenced. Once
//     the writer has taken over, it deletes earlier writers' tokens in
//     one Multi behind its fence (listed with the reads of 2).
//  2. Check the chain again (an older writer may have rotated before our
//     CAS). None: create ch-1 (first 1), fenced. (The reads of 1 — room
//     meta, epoch znode, chain — go out at once, and so do those after
//     the CAS's sync — lost marker, room meta, chain — and, in 4 and 5,
//     the last channel's meta and listing: none depends on another, and a
//     takeover's round trips are the failover's.)
//  3. Last channel sealed (only a foreign write can do that): ErrCorrupt.
//  4. Last channel open without any child: reuse it (fenced Set of its
//     meta's epoch with its version). No older writer can add a child any
//     more, so it stays empty until we write.
//  5. Otherwise list it once, read its named batches in index order
//     (16 Gets in flight) and stop at the first hole: that is the end E.
//     Batches a Reader of the same Room delivered from this channel's
//     first batch on are not read again, provided the channel znode is
//     the one the Reader read (its czxid: channel numbers, indexes and
//     epochs all restart in a room created again), never lost a child
//     (its Cversion) and the listing names exactly those batches below
//     the Reader's end; else the whole channel is read as before. Batch
//     znodes are immutable and the Reader validated each in order as the
//     scan would. A standby taking over has read the channel it seals up
//     to its applied index, so its scan reads only what it had not
//     applied. (Limit: a foreign client's SetData on a batch already
//     delivered is not seen by the seal; the next Reader of that batch
//     refuses it, ErrCorrupt, as it would any forged batch.)
//     Before writing anything, a channel recording an epoch at or above
//     the writer's (possible only if a foreign write lowered the epoch
//     znode under a concurrent writer) fails NewWriter with ErrFenced, so
//     no epoch is used twice; the next takeover picks one past it.
//     One fenced Multi seals it (sealed, last E, bytes, batches; version
//     checked) and creates the next channel with first E+1. A corrupt batch
//     in the chain fails NewWriter with ErrCorrupt (the log needs an
//     operator, a reader would stop there too).
//  6. In 1, 4 and 5, before anything but the epoch CAS is written: if the
//     log ends below WriterConfig.Applied (the caller's applied index), fail
//     with ErrDiverged. A writer never appends at an index its caller
//     already applied.
//  7. After the epoch CAS, a room marked lost (<epoch znode>/lost, read
//     after a sync) is refused
//     with ErrRoomLost. MarkLost creates the marker in one Multi with a
//     Set of the epoch znode (data unchanged, version checked), so a
//     takeover either sees the marker or is fenced by it: no writer
//     writes into a room marked lost after the mark.
//
// Close does not seal: the next writer does it at takeover. The takeover
// reads the open channel once (at most MaxChannelBytes), less what a
// Reader of its Room verified (5).
//
// # Protocol: append
//
//  1. Append checks sizes (ErrEntryTooLarge, nothing sent), copies the
//     entries (the caller may reuse its buffers) and queues them; beyond
//     MaxQueuedBytes it waits on its ctx.
//  2. One loop goroutine owns the pipeline. While fewer than EagerInFlight
//     (default 2) batches are unacknowledged, or fewer than MaxInFlight
//     (default 8) and a full batch is queued, it takes everything queued up
//     to MaxBatchBytes (natural batching; while another batch is in
//     flight, Linger — default 1 ms — waits for a fuller batch; with
//     nothing in flight a batch goes at once; with compression, up to the raw budget described under
//     "Batch format"), assigns dense indexes, encodes (compresses) and
//     starts one goroutine per batch running Multi(check epoch version,
//     create b-first). A
//     request larger than a batch spans several. ZooKeeper's cost is per
//     transaction, so under many small appends fewer, fuller Multis give
//     both more entries/s and lower latency; large entries still fill every
//     slot. The room byte bound is applied when a request is taken:
//     ErrRoomFull, nothing sent (the accounting, sealed channels' recorded
//     bytes plus the open channel's, is refreshed after a rotation, when
//     this Room deleted a channel, or at most once a second while full).
//  3. Results are acknowledged strictly in index order: a landed batch is
//     acknowledged once every earlier one is; its requests return.
//  4. At MaxChannelBatches or MaxChannelBytes, or on Rotate, no new batch
//     is formed and one fenced Multi seals the channel (last index, bytes,
//     batches; version checked) and creates the next one. It goes out at
//     once, alongside the batches in flight, with a version-0 check of
//     each of them: it can only land if they all did, so a seal never
//     lies past a batch that failed. Appends wait about one round
//     trip. If that early seal fails (a batch not there yet, a lost reply,
//     the fence), the writer waits for the in-flight batches (resolving
//     them as below) and seals again; reading the next channel back makes
//     an early seal that landed despite a lost reply harmless.
//
// # The ZooKeeper client
//
// Client, Dial, DialConfig and Digest are package zkx's (type aliases
// here): one client, with its session events, its leader-first host
// provider ("Connecting: the leader first" in zkx's doc), retry and
// backoff, is shared by logroom, replica and the recipes. Every
// request logroom sends that may be retried goes through zkx's helpers
// (Client.Retry, zkx.Get, zkx.Children, zkx.Sync, zkx.EnsurePath).
//
// # Protocol: connection loss and fencing
//
// In-flight Multis fail with zk.ErrConnectionClosed although many were
// applied; queued ones fail with zk.ErrNoServer; a session expiry makes
// go-zookeeper open a new session on the same connection (logged; the
// fence is the epoch version, not the session, so nothing changes).
//
//  1. Any outcome other than success or a failed fence pauses the pipeline.
//     When every in-flight goroutine has reported, the unacknowledged
//     batches are resolved in index order:
//  2. Wait for a session; Sync(channel); Get b-first. Our exact bytes →
//     landed. Other bytes → another writer's: fenced. Absent → resend the
//     same bytes, fenced: success → landed; NodeExists → compare again (a
//     request sent before the drop may land late: harmless, same name and
//     bytes); connection loss → repeat. An absent batch is only "absent"
//     if its channel, read after it, exists and is not marked deleting: a
//     newer primary may have read the batch, sealed past it and deleted
//     the channel meanwhile (DeleteChannel marks before it removes), and
//     then the outcome is unknown (step 4), never "not committed".
//  3. A failed fence (here or in flight) switches to fenced resolution:
//     Sync, then the unacknowledged batches present with our bytes as a
//     contiguous prefix are committed (the new writer read to the first
//     hole after its CAS, and nothing of ours can land after it) and are
//     acknowledged; the rest fail with ErrFenced, and so does everything
//     after.
//  4. When it cannot decide (Close during resolution, channel gone) the
//     unresolved appends get ErrOutcomeUnknown and the writer stops. An
//     Append whose ctx ends after its entries were handed to the pipeline
//     gets ErrOutcomeUnknown; before that, ctx's error.
//
// # Protocol: reading
//
//  1. Tail(from) finds the newest channel whose first index <= from (from
//     below the oldest channel's first → ErrCompacted) and, for a from in
//     the middle of a batch, the batch holding it (one listing).
//  2. Next: Get b-<position>. Present → validate and deliver. Absent → arm
//     (at most) one GetW on the channel znode, re-armed only after it
//     fired; sealed and position past its last index → go to channel N+1,
//     which must exist with first == last+1 (else ErrCorrupt; a missing
//     N+1 with later channels present → ErrCompacted). Not sealed but
//     channel N+1 exists (re-read: still not sealed) → ErrCorrupt, since
//     seal and open are one Multi. Not sealed →
//     ExistsW(b-<position>) (re-checking its result) and wait on the
//     watches and ctx. Caught up, the reader arms the next name's watch
//     and reads that name in the same round trip (ExistsW and Get sent
//     together): a batch already written is delivered at once, an absent
//     one is waited for by watch. Then, while batches are there, one Get
//     per batch. Behind (16 batches in a row found without waiting), it
//     lists the channel (the listing sent beside the next read) and keeps
//     up to 16 reads of the listed names in flight, a sliding window: each
//     batch is delivered, in order, as soon as it is in, and a new read
//     goes out for each one taken; it lists again when the names run out
//     and the last listing found at least two batches past the next one,
//     or after another 16 found without waiting. Batch znodes are
//     immutable, so this changes nothing but speed: each batch is still
//     validated in order. A read ahead that finds no node falls back to
//     the ordinary read of step 2 (so do a listing that finds the channel
//     gone, and a failed read, which empties the window); reads still in
//     flight at Close end by themselves.
//  3. Connection loss and session expiry are retried with backoff from
//     the same position; watches lost with the session are re-armed.
//  4. A channel deleted under the reader → ErrCompacted if a later channel
//     exists (it was sealed, then compacted), ErrCorrupt if not (the open
//     channel was deleted). Tail checks the channel chain first.
//     ErrCorrupt and ErrCompacted are sticky.
//
// # CommittedIndex
//
// Sync, list the channels, and walk the last (open) channel's chain from
// the hint with one Get per batch to the first hole. Every entry
// acknowledged before the call is <= the result. The channel's meta is
// read again after the walk: if it was sealed or deleted meanwhile (a
// checkpoint rotated and deleted it), the hole was the deletion, not the
// log's end, and the call starts over from the listing.
//
// # Deleting channels
//
// DeleteChannel refuses the open channel (ErrChannelOpen), marks the
// channel meta "deleting" (version checked), deletes the batch znodes
// (Multis of 200) and then the channel znode (version checked). A reader
// that finds a batch missing in a sealed channel reports ErrCompacted if the
// channel is gone or marked deleting, ErrCorrupt otherwise. Callers delete
// only what a durable checkpoint covers.
//
// A deletion is fenced (ErrDeleteFenced): it reads the channels znode's
// data and version first and deletes only the oldest channel (channel N-1
// must not exist); each of its writes is a Multi whose first op sets the
// channels znode's data back to the same bytes at the version the previous
// write left, so the deletion lands step by step only in the room it has
// seen. A connection loss ends it instead of being retried. Without this a
// deletion decided before ZooKeeper was restored from an older copy landed
// in the restored tree, deleted a channel whose predecessor was back, and
// every reader reported the hole as corruption. The channels znode's data
// is never changed (its version only counts deletion steps); v0.1.0
// deleters neither bump nor check it. Writer.DeleteChannel also puts the
// writer's fence (FenceOps: its epoch znode version and its token) first
// in every one of those Multis, so a deposed writer, or one whose room was
// deleted and re-seeded under it, deletes nothing (ErrDeleteFenced
// wrapping ErrFenced); package replica deletes only that way.
//
// # Metrics
//
// NewMetrics(reg) creates and registers the Prometheus collectors below,
// once per room and process; a registration error is returned and nothing
// of that call stays registered. RoomOptions.Metrics feeds the room's and
// its Readers' metrics, WriterConfig.Metrics a Writer's (nil: the room's).
// A Writer registers nothing, so the Writers a replica creates, one per
// primary term, all count into the same collectors. A nil *Metrics means
// no metrics and costs a nil check. The names carry no room or member
// label: wrap the registerer (prometheus.WrapRegistererWith) for that.
// Counters and gauges are atomics; an Append observes one histogram, a
// batch two; nothing allocates.
//
// Writer:
//
//   - roomlog_writer_append_seconds (histogram, seconds, buckets 100µs to
//     10s): latency of successful Append calls, from the call until its
//     entries are durable. How long do clients wait for a commit?
//   - roomlog_writer_entries_total, roomlog_writer_batches_total
//     (counters): entries and batch znodes acknowledged (committed). What
//     is the commit rate, and how many ZooKeeper transactions does it
//     cost (their ratio is the mean batch fill)?
//   - roomlog_writer_batch_entries (histogram, entries) and
//     roomlog_writer_batch_bytes (histogram, bytes, 256 B to 1 MiB): per
//     acknowledged batch, its bytes as stored (compressed). Is batching
//     working; are batches near MaxBatchBytes?
//   - roomlog_writer_batches_in_flight (gauge): batches sent and not yet
//     acknowledged. Pinned at MaxInFlight: ZooKeeper is the bottleneck.
//   - roomlog_writer_queued_bytes (gauge, bytes): entry bytes handed to
//     Append and not yet fully batched; at MaxQueuedBytes Append waits. Is
//     the writer backed up?
//   - roomlog_writer_errors_total{reason} (counter): failed Append calls
//     by reason, each series present from 0: "fenced" (a newer epoch took
//     over: this process is no longer the writer), "outcome_unknown"
//     (maybe committed, including partly committed appends: read the log),
//     "room_full" (MaxRoomBytes reached: compaction is behind),
//     "entry_too_large". Other failures (the caller's ctx, Close, a stopped
//     writer) are not counted. Why are appends failing?
//   - roomlog_writer_rotations_total (counter): channels sealed and
//     replaced, by Rotate or at MaxChannelBatches/MaxChannelBytes. How fast
//     do channels, the unit of compaction, turn over?
//
// Room (as this process last measured or changed it):
//
//   - roomlog_room_bytes (gauge, bytes): batch znode bytes the room holds
//     (MaxRoomBytes bounds this plus 480 per znode): sealed channels' recorded bytes
//     plus the open channel's. Set by a writer's takeover and by its
//     refresh while the room is full, and by Room.Bytes, Usage and UsageOf
//     (a replica measures once a second, so standbys report it too); raised by each
//     batch a writer sends (counted when sent, as the bound counts it),
//     lowered by DeleteChannel by the channel's recorded bytes. Are we near
//     the room's byte bound?
//   - roomlog_room_znodes (gauge): batch znodes plus channel znodes, from
//     the same sources (plus one per rotation). How much of ZooKeeper's
//     in-memory tree does the room use?
//   - roomlog_room_channels (gauge): channels, set by every listing
//     (Channels, CheckChain, a writer's takeover), +1 per rotation, -1 per
//     DeleteChannel. Is compaction keeping up?
//   - roomlog_room_channels_deleted_total (counter): channels
//     DeleteChannel deleted (a channel already gone is not counted). Is
//     compaction running?
//
// Reader:
//
//   - roomlog_reader_batches_total, roomlog_reader_entries_total
//     (counters): batches and entries Next delivered (entries before a
//     Tail's start in its first batch are not). Is the standby applying, as
//     fast as the writer commits?
//   - roomlog_reader_listings_total (counter): listings of a channel's
//     batch znodes: a Tail that starts inside a batch, and catch-up (when
//     a reader falls behind, and again while listings find new batches,
//     or after 16 more batches found without waiting).
//     Are readers listing large channels too often?
//   - roomlog_reader_catchup_reads_total (counter): batch reads made ahead,
//     up to 16 concurrently, while behind. Is a reader catching up?
//   - roomlog_reader_batch_commit_age_seconds (histogram, seconds, buckets
//     1ms to 1h): when a reader delivers a batch, now minus the batch
//     znode's ctime (ZooKeeper's commit time, millisecond resolution, the
//     server's clock: skew shifts it; negative ages count as 0). How far
//     behind the commits is the standby?
//
// Values are as this process saw them: a batch sent by a writer that then
// fails stays in roomlog_room_bytes until the next measurement (the
// writer's own bound counts it too), and orphan batches in sealed channels
// are not counted.
package logroom

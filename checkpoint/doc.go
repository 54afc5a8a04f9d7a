// Package checkpoint creates, verifies, ships and restores checkpoints: a
// consistent image of a store (package store) at one applied index, from
// which a new or lagging standby starts instead of the deleted log.
//
// # On-disk format
//
// A checkpoint root directory holds one directory per checkpoint:
//
//	root/ckpt-%020d/                 named by the applied index it holds
//	    roomlog-checkpoint.json      the manifest
//	    db/                          the Pebble checkpoint (flat files)
//	root/.tmp-*                      work in progress (Create, Fetch, Check's
//	                                 probe, Remove); ignored, CleanTemp removes
//	root/.corrupt-*                  an invalid or foreign checkpoint moved
//	                                 aside (Create, Fetch, Handler); ignored
//	root/.partial-%020d-<sum16>/     a per-file Fetch of the checkpoint at that
//	                                 index whose manifest checksum starts with
//	                                 those 16 hex digits (see "Partial
//	                                 fetches"); ignored by List and Handler
//
// The manifest is indented JSON (format 2):
//
//	{
//	  "FormatVersion": 2,
//	  "Room": "r1",
//	  "RoomCzxid": 4294967302,       // origin: czxid of the room znode
//	  "Epoch": 3,                    // applied epoch of the image
//	  "Index": 1200,                 // applied index of the image
//	  "Created": "2025-…Z",
//	  "Files": [{"Name": "000005.sst", "Size": 1234, "CRC32C": 3735928559}, …],
//	  "Checksum": "<hex sha256>"
//	}
//
// Files are sorted by name, relative to db/. Checksum is the SHA-256 of the
// compact JSON encoding of the manifest with Checksum set to "", so any edit
// of the manifest (an index, a size, a CRC, the origin) is detected. The
// checksum is not a signature: a forger can re-sign; what a checkpoint
// claims is checked against the store it opens as and the log it must
// continue (package replica).
//
// Origin: Room and RoomCzxid (the zxid that created the room znode) say
// which incarnation of which room the image belongs to. A room deleted and
// re-created under the same name, or a same-named room of another
// ZooKeeper, has another czxid (the czxid is per ensemble: two ensembles
// could in principle assign the same one to same-named rooms). Format 2
// requires RoomCzxid > 0.
//
// Format 1 (written before origins existed) has no RoomCzxid field; it
// still parses (its checksum is unchanged: RoomCzxid is omitted when 0) and
// Verify accepts it, but it records no origin, so Restore, Check and Fetch
// with FetchOptions.Origin refuse it with ErrForeign. A replica drops such
// checkpoints at Open and makes a new one.
//
// # Partial fetches
//
// A per-file Fetch receives into root/.partial-<index>-<sum16>/, which is
// laid out like a checkpoint directory and becomes one by a rename:
//
//	roomlog-checkpoint.json   the manifest being fetched, written (fsynced)
//	                          before any file
//	db/<name>                 a complete file: received or linked, its size
//	                          and CRC32C checked, fsynced, then renamed
//	                          from <name>.part
//	db/<name>.part            a file being received: a prefix of it, in
//	                          order (never checked until complete)
//
// One Fetch at a time writes into a partial directory (an exclusive flock
// on the directory, so across processes too); a second Fetch of the same
// checkpoint meanwhile fetches into a private root/.tmp-fetch-* instead.
// Nothing in a partial directory is trusted: a later Fetch of the same
// checkpoint (same manifest bytes) reads every complete file again to
// check its CRC, and recomputes a .part file's prefix CRC by reading it
// before it asks for the rest with a Range request; a complete file that
// fails is removed and fetched again, a .part longer than its file is
// discarded, and a resumed file whose CRC fails once complete is fetched
// again from byte 0. A partial directory whose manifest is missing or
// differs is emptied and restarted. A Fetch of another checkpoint links
// complete files of any partial of the same origin whose name, size and
// CRC32C match its manifest (and checks them again after linking).
//
// Disk use is bounded: a successful Fetch removes the partials of its
// index and below; Retain removes those at or below root's newest
// checkpoint; CleanTemp keeps only the newest partial (highest index,
// then most recently changed) and removes it too once unchanged for
// PartialMaxAge (24h). A partial a Fetch holds (locked) is never removed.
//
// # Wire protocol (Handler, Fetch)
//
// GET / answers one USTAR tar stream: roomlog-checkpoint.json first, then
// db/<name> for each manifest file in manifest order, with an exact
// Content-Length. GET /manifest answers the newest checkpoint's manifest;
// GET /manifest?index=N the manifest of the checkpoint at index N (404 if
// root does not hold it). GET /files/<name>?index=N&sum=<checksum> answers
// one db file of exactly that checkpoint, with Range support: 404 (naming
// what is gone) when index N is no longer held or lists no such file, 409
// when the checkpoint at N has another manifest checksum, 400 for a name
// that is not a plain manifest file name or a bad index or sum. The
// manifest and per-file answers carry the header
// X-Roomlog-Checkpoint-Files: 1 (HeaderFiles).
//
// Fetch first gets /manifest. Without HeaderFiles (an older server, or
// something that is not a Handler) it reads the tar stream of GET / as
// before. With it, it checks the manifest (self checksum, MaxManifestBytes,
// origin, MaxBytes) before any file is received, then for every file, in
// this order: keeps a complete file of its partial directory; links a
// file root knows to have the same name, size and CRC32C (its checkpoints
// of the same origin, other partials); links an sstable of the same name
// and size from FetchOptions.Local (the caller's live store: Pebble never
// writes an sstable after creating it); else fetches it per file,
// Parallel at once, largest first, continuing a .part with Range. Every
// linked file is read once to check its CRC (a mismatch, or a link that
// fails because the file was deleted meanwhile, falls back to fetching),
// unless this process already verified that very file, unchanged since
// (the verified-file memo below).
// A received file is checked (exact size, CRC32C) while it arrives,
// written once, fsynced once. A 404 without HeaderFiles on /files/ falls
// back to the tar stream; a 404 with it or a 409 (the source deleted the
// checkpoint) makes Fetch start over with the source's newest manifest
// (at most 3 rounds, not with FetchOptions.Index), reusing what it has.
// Fetch trusts nothing but the manifest (its self checksum and origin)
// and checks every file against it. Info.Fetch (FetchStats) says what was
// fetched, resumed and linked, and the time of each phase.
//
// # Invariants
//
//  1. Nothing that looks complete is incomplete: a checkpoint directory only
//     ever appears under its final name by an atomic rename of a fully
//     written and fsynced temp directory (files, db/, the temp dir, then the
//     root after the rename); it disappears (Retain, Remove) by a rename to
//     a temp name before it is deleted.
//  2. Corruption is detected, never restored or opened: Verify checks the
//     manifest checksum and every file's size and CRC32C; Fetch checks them
//     while streaming; Restore checks them while copying (MANIFEST, OPTIONS,
//     WAL: files Pebble appends to) or right after hard-linking (sstables,
//     which Pebble never writes after creating them, so the store and the
//     checkpoint share them as Pebble's own checkpoints do; a failed link
//     falls back to a copy; several files at once), and opens the result
//     read-only to confirm its applied index and epoch before renaming it
//     into place. Failures wrap ErrCorrupt and name the file. A file
//     this process already checked, unchanged since, is not read again
//     (below).
//
// # The verified-file memo
//
// Each process remembers the files it checked (their CRC32C computed
// over every byte while it was received, or read back) by device, inode,
// size and mtime (verified.go). A hard link shares all four, so Restore
// right after the Fetch that received a checkpoint, and a re-bootstrap
// that links the files of an earlier checkpoint under the same root,
// do not read them a second time (at 10 GB, seconds of reading each).
// A file written since, truncated, replaced or merely written within
// 50 ms of its check (mtimes come from a coarse clock) misses the memo
// and is read and checked as before. Each Fetch and Restore writes the
// memo's entries for root's checkpoint files to root/verified-files, and
// the first Fetch or Restore of root in a process reads it, so a standby
// restarted for a re-bootstrap links its earlier checkpoint without
// reading it either. The memo cannot see a change that keeps size and
// mtime (bit rot, a writer that restores the mtime): such bytes were
// checked once, and Pebble's block checksums check them again when they
// are read.
//  3. Nothing listed is junk: Fetch renames a download into place only
//     after its files opened as a store at the manifest's index and epoch
//     (a manifest with a valid checksum that describes no store, e.g. no
//     files and index 10^6, is refused). Check does the same for a local
//     checkpoint (through hard links: Pebble writes a LOCK file even
//     read-only, so a checkpoint directory itself is never opened). Handler
//     moves a checkpoint whose files no longer match its manifest aside and
//     serves the next one (a per-file request for it gets 404).
//  4. Origin is checked, not assumed: Restore (always), Check (always) and
//     Fetch (with FetchOptions.Origin, before any file is received) refuse a
//     checkpoint of another origin, or of none, with ErrForeign naming both.
//  5. Every fetch is bounded: connect (ConnectTimeout, 5s), response
//     headers (ResponseHeaderTimeout, 10s), every gap in a body
//     (IdleTimeout, 30s, per request: a peer that stops sending mid-stream
//     fails with ErrTimeout; so does a local disk whose fsync of a received
//     file stalls that long, with an error that says so), the manifest
//     (MaxManifestBytes, 8 MiB), the files' total
//     as declared (MaxBytes, 64 GiB: ErrTooLarge before anything is
//     written), each file (received to exactly its declared size: a tar
//     header or a Content-Length that says otherwise is refused before a
//     byte is written), the whole tar stream (its exact USTAR size plus
//     1 MiB, so endless tar meta headers fail too), and the average rate of
//     each body after IdleTimeout (MinRate). No redirect is followed: a 3xx
//     is an error naming its Location.
//  6. A checkpoint's state is exactly the state at Manifest.Index
//     (store.Checkpoint reports the position stored in the Pebble checkpoint
//     it took, read back from it; Apply is never held off. This rests on
//     Pebble's checkpoint being consistent while batches commit, which
//     holds for the store's pinned Pebble format and because the store
//     ingests nothing).
//  7. Nothing is received twice: a per-file Fetch writes every byte it
//     reads at once (gathering reads into writes of up to 256 KiB), so a
//     fetch that stops (ctx, a source stalled, cut or gone) leaves every
//     received byte in its partial directory (a killed process may lose
//     the last 256 KiB of each file in progress, a machine crash what was
//     not yet fsynced: that is fetched again), and the next Fetch of that checkpoint, from any
//     source, asks only for the rest (unless the checks described under
//     "Partial fetches" find it damaged).
//     Files that are already local (same name, size and CRC32C) are
//     linked, not received.
//
// # Protocol
//
//  1. Primary or any replica: Create(ctx, store, root, origin) after
//     applying up to some index; Retain(root, n) to bound disk use. Create
//     reads and CRCs only the files new since the newest checkpoint of the
//     origin under root: an sstable that is the very same file (a hard
//     link to the same inode, same size) takes its size and CRC from that
//     manifest (Info.ReadBytes says what was read), so a checkpoint costs
//     what changed, not the store's size, and damage to a shared sstable
//     fails the new checkpoint's Verify and Fetch instead of being
//     re-blessed with a fresh CRC. Each of Create's own disk operations
//     (every 1 MiB read of a checksum, fsyncs, the manifest, renames) is
//     bounded by the store's DiskStallTimeout through store.Store.DiskOp,
//     like the store's own: one stuck on the disk fails the store with
//     store.ErrDiskStalled. Only
//     once Create returned, and a peer demonstrably serves a checkpoint
//     covering them (FetchManifest), may log channels covered by the index
//     be deleted (package replica).
//  2. Serve Handler(root) over HTTP. Retain may run concurrently: a stream
//     in progress holds its files open.
//  3. New or lagging standby: Fetch(ctx, url, root, FetchOptions{Origin:
//     origin, Local: []string{liveStoreDir}, …}) → a verified local
//     checkpoint of that origin; on failure, try the next source with the
//     same root (the next Fetch resumes what this one received). Restore(ctx, info.Path, storeDir, origin) into
//     an empty or missing storeDir; store.Open(storeDir); tail the log from
//     AppliedIndex()+1. A checkpoint that fails to restore is deleted with
//     Remove, never kept or served.
//  4. After a crash: CleanTemp(root, age) removes leftovers of interrupted
//     Creates, Fetches, probes and removals (and keeps only the newest
//     partial fetch, for a resume); Check(path, origin) each
//     listed checkpoint before advertising it, and Remove the ones that fail.
//     Restore's leftovers (storeDir's parent/.tmp-restore-*) are the
//     caller's to remove.
//
// Concurrency: Create, Fetch, List, Retain, Remove, Check and Handler may
// run at once on one root. Two Creates or Fetches of the same index both
// succeed and return the same checkpoint (the second Fetch into a private
// temp dir while the first holds the partial directory). Restore from a local checkpoint
// that Retain deletes midway fails cleanly (nothing left at storeDir).
package checkpoint

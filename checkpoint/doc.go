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
// # Stream format (Handler, Fetch)
//
// GET / answers one USTAR tar stream: roomlog-checkpoint.json first, then
// db/<name> for each manifest file in manifest order, with an exact
// Content-Length. GET /manifest answers the manifest alone. Fetch trusts
// nothing but the manifest (its self checksum and origin) and checks every
// entry against it.
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
//     falls back to a copy), and opens the result read-only to confirm its
//     applied index and epoch before renaming it into place. Failures wrap ErrCorrupt and name the file.
//  3. Nothing listed is junk: Fetch renames a download into place only
//     after its files opened as a store at the manifest's index and epoch
//     (a manifest with a valid checksum that describes no store, e.g. no
//     files and index 10^6, is refused). Check does the same for a local
//     checkpoint (through hard links: Pebble writes a LOCK file even
//     read-only, so a checkpoint directory itself is never opened). Handler
//     moves a checkpoint whose files no longer match its manifest aside and
//     serves the next one.
//  4. Origin is checked, not assumed: Restore (always), Check (always) and
//     Fetch (with FetchOptions.Origin, before any file is received) refuse a
//     checkpoint of another origin, or of none, with ErrForeign naming both.
//  5. Every fetch is bounded: connect (ConnectTimeout, 5s), response
//     headers (ResponseHeaderTimeout, 10s), every gap in the body
//     (IdleTimeout, 30s: a peer that stops sending mid-stream fails with
//     ErrTimeout; so does a local disk whose fsync of received files stalls
//     that long, with an error that says so), the manifest
//     (MaxManifestBytes, 8 MiB), the files' total
//     as declared (MaxBytes, 64 GiB: ErrTooLarge before anything is
//     written), each file (received to exactly its declared size: a tar
//     header that says otherwise is refused before a byte is written), and
//     the whole stream (its exact USTAR size plus 1 MiB, so endless tar meta
//     headers fail too). No redirect is followed: a 3xx is an error naming
//     its Location. These bound every wait and every byte, not a peer that
//     trickles a byte per IdleTimeout (the caller's ctx bounds that).
//  6. A checkpoint's state is exactly the state at Manifest.Index
//     (store.Checkpoint reports the position stored in the Pebble checkpoint
//     it took, read back from it; Apply is never held off. This rests on
//     Pebble's checkpoint being consistent while batches commit, which
//     holds for the store's pinned Pebble format and because the store
//     ingests nothing).
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
//     origin, …}) → a verified local checkpoint of that origin; on failure,
//     try the next source. Restore(ctx, info.Path, storeDir, origin) into
//     an empty or missing storeDir; store.Open(storeDir); tail the log from
//     AppliedIndex()+1. A checkpoint that fails to restore is deleted with
//     Remove, never kept or served.
//  4. After a crash: CleanTemp(root, age) removes leftovers of interrupted
//     Creates, Fetches, probes and removals; Check(path, origin) each
//     listed checkpoint before advertising it, and Remove the ones that fail.
//     Restore's leftovers (storeDir's parent/.tmp-restore-*) are the
//     caller's to remove.
//
// Concurrency: Create, Fetch, List, Retain, Remove, Check and Handler may
// run at once on one root. Two Creates or Fetches of the same index both
// succeed and return the same checkpoint. Restore from a local checkpoint
// that Retain deletes midway fails cleanly (nothing left at storeDir).
package checkpoint

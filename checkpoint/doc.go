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
//	root/.tmp-*                      work in progress (Create, Fetch); ignored
//	root/.corrupt-*                  an invalid checkpoint moved aside; ignored
//
// The manifest is indented JSON:
//
//	{
//	  "FormatVersion": 1,
//	  "Room": "r1",
//	  "Epoch": 3,                    // applied epoch of the image
//	  "Index": 1200,                 // applied index of the image
//	  "Created": "2025-…Z",
//	  "Files": [{"Name": "000005.sst", "Size": 1234, "CRC32C": 3735928559}, …],
//	  "Checksum": "<hex sha256>"
//	}
//
// Files are sorted by name, relative to db/. Checksum is the SHA-256 of the
// compact JSON encoding of the manifest with Checksum set to "", so any edit
// of the manifest (an index, a size, a CRC) is detected.
//
// # Stream format (Handler, Fetch)
//
// GET / answers one USTAR tar stream: roomlog-checkpoint.json first, then
// db/<name> for each manifest file in manifest order, with an exact
// Content-Length. GET /manifest answers the manifest alone. Fetch trusts
// nothing but the manifest (its self checksum) and checks every entry
// against it.
//
// # Invariants
//
//  1. Nothing that looks complete is incomplete: a checkpoint directory only
//     ever appears under its final name by an atomic rename of a fully
//     written and fsynced temp directory (files, db/, the temp dir, then the
//     root after the rename).
//  2. Corruption is detected, never restored or opened: Verify checks the
//     manifest checksum and every file's size and CRC32C; Fetch checks them
//     while streaming; Restore checks them while copying and opens the
//     copy read-only to confirm its applied index and epoch before
//     renaming it into place. Failures wrap ErrCorrupt and name the file.
//  3. A checkpoint's state is exactly the state at Manifest.Index
//     (store.Checkpoint holds Apply off while Pebble takes it).
//
// # Protocol
//
//  1. Primary or any replica: Create(ctx, store, root, room) after applying
//     up to some index; Retain(root, n) to bound disk use. Only once Create
//     returned may log channels covered by the index be deleted.
//  2. Serve Handler(root) over HTTP. Retain may run concurrently: a stream
//     in progress holds its files open.
//  3. New or lagging standby: Fetch(ctx, url, root, opts) → a verified
//     local checkpoint; Restore(ctx, info.Path, storeDir) into an empty or
//     missing storeDir; store.Open(storeDir); tail the log from
//     AppliedIndex()+1.
//  4. After a crash: CleanTemp(root, age) removes leftovers of interrupted
//     Creates and Fetches.
//
// Concurrency: Create, Fetch, List, Retain and Handler may run at once on
// one root. Two Creates or Fetches of the same index both succeed and
// return the same checkpoint. Restore from a local checkpoint that Retain
// deletes midway fails cleanly (nothing left at storeDir).
package checkpoint

// Package namespace is the state machine of the dfsmaster demo: a DFS
// namespace of directories and files with ordered block lists, kept in a
// roomlog store and changed only by commands that went through the log.
//
// # Commands
//
// A command is one log entry: a version byte (CommandVersion) followed by a
// msgpack map (see Command). Five operations exist:
//
//	mkdir    path, parents    create a directory (and missing parents with parents=true;
//	                          an existing directory is then not an error, like mkdir -p)
//	create   path, replication create an empty file; the parent must be an existing directory
//	addblock path, size       append a block to a file; its id comes from a counter in the
//	                          store, so ids are unique across failovers and never reused
//	rename   src, dst         move a file or a directory with its subtree; dst must not
//	                          exist, its parent must be a directory, and a directory
//	                          cannot move into itself
//	delete   path, recursive  remove a file, an empty directory, or (recursive=true) a
//	                          directory with everything under it
//
// The Applier answers every entry with a Response (a version byte and a msgpack
// map): success (with the allocated block id for addblock), or one of the
// error codes of Code. A rejected command changes nothing: every check runs
// before the first write. A returned Go error is kept for storage failures and
// corrupt records; it stops the replica, as store.Applier documents.
//
// # Determinism
//
// Apply reads only the store and the entry: no clock, no randomness, no map
// iteration, no local configuration. Every key it visits is visited in key
// order, and its error messages are built only from the command and the state.
// Two stores fed the same entries hold the same bytes (equal StateHash).
//
// Versions: the command and record decoders are strict (an unknown field
// or version byte is a rejected command), so a master of another release
// that decoded a command differently would hold another state. A change
// to any format must be gated by a room version (package version): written
// only once the room's version says every member reads it. v0.2.0 adds the
// block placement (addblock's servers, addreplica, loseserver, ns/r/),
// which the demo's API and its re-replication propose only at room version
// 2 (v0.1.0 cannot be in such a room); every other format is v0.1.0's. A
// room that holds placements must not be lowered to room version 1 for
// v0.1.0 masters: their delete leaves ns/r/ keys this release removes.
//
// # Key layout
//
// Every key lives under "ns/". Inode ids are 8-byte big-endian integers; the
// root directory is inode 1 and has no record of its own.
//
//	ns/m/next_inode               8-byte BE: the next inode id to allocate (absent = 2)
//	ns/m/next_block               8-byte BE: the next block id to allocate (absent = 1)
//	ns/d/<parent id><name>        directory entry: version byte + msgpack record
//	                              {id, type, replication, size, blocks} of the child
//	ns/b/<file id><seq>           block seq (8-byte BE, from 0) of a file: id (8-byte BE)
//	                              then size (8-byte BE)
//	ns/r/<block id>               the block's placement (only for blocks added with
//	                              servers): version byte + msgpack {rf, servers, gen}
//	                              (replicas.go)
//
// Names never contain '/' or NUL, and the parent id has a fixed width, so the
// children of a directory are exactly the keys with prefix ns/d/<parent id>,
// in name order: ls is one prefix scan. A record lives in its directory entry
// and a directory's children hang off its id, never off its path, so rename is
// O(1) for files and directories alike: delete one entry, write one entry.
// Recursive delete visits the subtree depth first, removes each directory's
// entries with one DeleteRange and each file's blocks with one DeleteRange.
//
// # Paths
//
// A valid path is absolute and clean (path.Clean leaves it unchanged: no empty
// components, no trailing slash, no "." or ".."), valid UTF-8 without NUL, at
// most MaxPathBytes long, with components of at most MaxNameBytes.
//
// # Protocol
//
//  1. A client builds a Command and encodes it with EncodeCommand (after
//     ValidatePath and Command.Validate, so mistakes never reach the log).
//  2. The primary proposes the bytes; every replica's store runs
//     Applier.Apply on them at the same index and gets the same Response.
//  3. The proposer decodes the response with DecodeResponse; Response.Err is
//     nil or wraps one of the sentinel errors (ErrNotFound, ...).
//  4. Reads (Ls, Stat) run over a consistent view of the store and report
//     nothing newer or older than that view's index.
package namespace

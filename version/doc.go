// Package version names what a roomlog binary is and which room versions
// it speaks.
//
// # Release
//
// Release is this binary's release ("v0.2.0"). The repository's RELEASES
// file lists every release with the commit of main it was cut from (git
// tags may not travel with a copy of the repository; the history of main
// does); CHANGELOG.md lists each release's format and behaviour changes.
// Commit and Modified come from the Go toolchain's build information
// (vcs.revision, vcs.modified) when the binary was built from a checkout;
// when the toolchain recorded none (-buildvcs=false, or a copy without
// .git), from what the linker stamped: 'make build' passes the commit with
// -ldflags -X (see Info), so its binaries always know their commit.
//
// # Room versions
//
// A room version is a feature level of a room: it names every format a
// writer in that room may use (batch version and codec, member and
// candidate data, request envelope, checkpoint manifest, store format).
// The room records its version (logroom, "Room version"); a binary reads
// and writes every room version from RoomMin to RoomMax:
//
//	room version 1   the formats of release v0.1.0 (commit db29903): batch
//	                 versions 1 and 2 with codecs none (0) and S2 (1), member
//	                 data v 1 (fields a v0.1.0 reader ignores may be added),
//	                 room meta record 1, channel meta v 1, checkpoint
//	                 manifest format 2, store format 1, the demo's command
//	                 codec 1
//	room version 2   adds codec zstd (2) for version-2 batches, and room meta
//	                 record 2 that carries the room version; a reader of room
//	                 version 1 (every v0.1.0 binary) refuses both (the meta
//	                 when it opens the room, a zstd batch as corrupt)
//
// A binary from before room versions existed (v0.1.0) advertises nothing
// and counts as supporting room version 1 only. The room version rises
// and falls only by the primary's fenced rotation, and only when every
// live member supports the new one (package replica, "Room version"); a
// room meta written by anyone else is refused at the next takeover (it
// disagrees with the newest channel) and reported, never obeyed.
package version

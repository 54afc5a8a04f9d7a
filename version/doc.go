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
// (vcs.revision, vcs.modified) when the binary was built from a checkout.
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
//	                 versions 1 and 2 with codecs none and S2, member data
//	                 v 1 (fields a v0.1.0 reader ignores may be added), room
//	                 meta v 1, checkpoint manifest v 1, store format 1
//	room version 2   adds codec zstd (3) for version-2 batches, and the room
//	                 meta record v 2 that carries the room version; a reader
//	                 of room version 1 (every v0.1.0 binary) refuses both
//
// A binary from before room versions existed (v0.1.0) advertises nothing
// and counts as supporting room version 1 only. The room version rises
// and falls only by a fenced write of the primary, and only when every
// live member supports the new one (package replica, "Room version").
package version

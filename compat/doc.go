// Package compat holds roomlog's compatibility test: a room run by the
// previous release's binaries is upgraded to this tree's binaries one
// member at a time under a write load, and rolled back the same way, with
// nothing acknowledged lost and no member failing (issue 26, item 6). The
// package has no code of its own outside its tests.
//
// # The binaries
//
// The test builds cmd/dfsmaster-demo twice, once per test binary run
// (shared by every test of the package; TestMain removes them):
//
//   - the previous release: the repository's RELEASES file names, for
//     the release before version.Release, the commit of main it was cut
//     from; the test extracts that commit with `git archive` into a
//     temporary directory (the checkout is not touched) and runs `go
//     build` there (retrying with -mod=mod if the old go.sum is short of
//     an entry);
//   - this tree: `go build` at the repository root. Its members run with
//     --compression zstd, which the room version gates: S2 at room
//     version 1, zstd from 2.
//
// Neither is built with -race: they run as separate processes and the
// figures should be those of ordinary binaries. When the release's commit
// is not in the clone's history (a shallow clone), the test fails under
// CI=true, saying to fetch the full history (git fetch --unshallow), and
// skips otherwise.
//
// # The scenario (TestRollingUpgradeAndRollback)
//
//  1. One ZooKeeper server; three masters a, b, c of one room, all on the
//     previous release, session timeout 4 s (the default), a checkpoint
//     every 150 entries (--checkpoint-every; the default, 100,000, would
//     never checkpoint in this run), so that primaries of both releases
//     seal, checkpoint and delete channels while members of the other
//     follow. Wait until one is primary and the two standbys have applied
//     what the primary had.
//  2. A write load for the whole run: four clients, each creating
//     directories /w<k>/<n> one after another through the HTTP API, sent
//     to one master and following its redirect to the primary, moving to
//     the next master after any error (an error is allowed: the client
//     goes on with a new path). Every acknowledged mkdir is recorded with
//     its index and the time its answer arrived. A baseline window with no
//     fault shows what the machine stalls anyway.
//  3. Rolling upgrade: the two standbys, then the primary, one at a time.
//     Each member gets SIGTERM (a previous-release primary drains its
//     proposals and resigns, and a standby takes over at once; this
//     tree's primary first hands its role to the most caught-up standby),
//     must exit with
//     status 0 within 30 s, and is started on this tree's binary with the
//     same id, data directory and HTTP port; the step ends when the room
//     is settled again: one primary, two connected standbys that have
//     applied what the primary had applied when the room took that shape.
//     The step's unavailability is the longest time in it with no
//     acknowledged mutation; it must stay below the session timeout (a
//     transfer that fell back to waiting for a session to expire fails
//     the test); the target is 200 ms.
//  4. With the load held (the clients pause between mutations), every
//     member must report the same state hash at the same applied index,
//     and the integrity check of this tree's binaries must have found no
//     mismatch.
//  5. Room version steps: raise the room version to 2
//     (replica.SetRoomVersionTarget) and wait until ReadRoomVersion says
//     it is complete, then until zstd batches are in the room (a burst of
//     64 concurrent mkdirs fills batches big enough to compress); a
//     previous-release binary started against the room must exit non-zero
//     saying "unknown format version 2", and this tree's binary capped
//     with --max-room-version 1 must exit non-zero saying "unsupported
//     room version"; lower the room version to 1 and wait until the
//     downgrade is complete (no channel of version 2 left, no zstd batch
//     in the room).
//  6. Rolling rollback to the previous release, standbys first, primary
//     last, as in 3.
//  7. The load stops. Every acknowledged directory must be listed by
//     every master at or after the primary's last index; every master
//     must report the same state hash at one applied index; every process
//     must still run and answer /v1/health with 200.
//
// The test logs a table of the steps (member, role, binaries, time to
// stop, time to rejoin, unavailability, acknowledged mutations) and, when
// COMPAT_RESULTS names a file, writes the figures there as JSON. Each
// process's output goes to a file of its own under the test's temporary
// directory; the tails are logged when the test fails. Every wait has a
// deadline, and every process the test started is killed when it ends.
package compat

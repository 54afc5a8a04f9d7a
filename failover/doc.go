// Package failover holds roomlog's failover tests: a real 3-server
// ZooKeeper ensemble (internal/infra/zkensemble, tickTime 200 ms) and replicas
// running as separate OS processes (internal/harness/testnode), so a kill -9, a
// SIGSTOP or a ZooKeeper leader crash is real. The package has no code of
// its own besides this comment: everything is in its tests.
//
// # What the tests prove
//
//   - TestKillPrimary: kill -9 of the primary under continuous proposals; a
//     standby leads within SessionTimeout + 2 s; no acknowledged proposal is
//     lost; after the killed member restarts as a standby, every replica
//     reports the same StateHash at the same applied index.
//   - TestPausePrimary: SIGSTOP of the primary past its session, then
//     SIGCONT: no write of its epoch lands after the new epoch's first entry
//     (epochs by index never decrease), it reports itself a standby and
//     converges.
//   - TestPrimaryPausedBriefly: a SIGSTOP of a quarter of the session timeout
//     is not a failure: same primary, same epoch, same session, nothing lost.
//   - TestKillZooKeeperLeader: the ZooKeeper leader is killed mid-load and
//     later restarted: proposals pause, then continue; nothing is lost.
//   - TestStandbyKilledMidApply: a standby is killed under load and
//     restarted, several times; it applies each entry exactly once.
//   - TestEmptyDiskJoinsAfterDeletion: after checkpoints deleted the first
//     channels, a new member with an empty disk bootstraps from a peer's
//     checkpoint and converges.
//   - TestStandbysBehindDeletedChannels: both standbys are killed, one
//     wiped, the other left with a stale store; the channels they need are
//     deleted; both rejoin under their old ids, bootstrap from the
//     primary's checkpoint and converge.
//   - TestRoomBytesBounded: a long stream of proposals with checkpoints on
//     keeps the room's ZooKeeper bytes (logroom Room.Bytes through a separate
//     client) under the configured bound.
//   - TestTransferLeadership: TransferLeadership moves the primary role
//     (and back) under load with no lost proposal.
//   - TestTransferFailsWhenTargetLeaves: a transfer whose target dies while
//     it catches up fails about one session timeout later, not when the
//     caller's context ends, and the primary accepts proposals again (a
//     regression test: see the test's comment).
//   - TestPrimaryDiskStall: every disk write of the primary's store blocks
//     mid-load (a hung device, made by internal/infra/faultfs inside the
//     node process); its store declares the stall after
//     --disk-stall-timeout (1 s) plus Pebble's 2 s check, the replica fails
//     and resigns, and a standby leads within that + the session timeout;
//     killed and restarted on a healthy disk, the failed member converges
//     and nothing acknowledged is lost.
//   - TestMeasureFailover (ROOMLOG_MEASURE=1 only): median of 5 of failover
//     time (kill -9 → first acknowledged proposal on the new primary) and
//     graceful transfer time (Transfer called → first acknowledged proposal
//     on the target).
//
// # How every test checks
//
// A testnode.Load runs concurrent proposers that record each proposal's
// outcome (acknowledged at an index, surely not committed, committed without
// response, unknown) and never resend a payload whose outcome is unknown.
// Every node applies through testnode.RecordingApplier, which stores
// (index, epoch, sha256 of the entry, times applied) in the same batch as
// the entry's effects. At the end the test stops the load, waits until all
// live nodes report the same state hash at the same index, reads every
// node's /dump and runs testnode.CheckDumps: one record per index on every
// node, each applied once, identical across nodes, epochs non-decreasing,
// every acknowledged payload at its index, no payload at two indexes.
//
// # Timing
//
// Session timeout 2 s (the ensemble allows 400 ms to 60 s at tickTime
// 200 ms). Shorter sessions make failover faster but, on a loaded 2-core
// machine running -race tests and three JVMs, a GC or scheduling stall of a
// second would expire healthy sessions and turn every test into a flapping
// election; 2 s keeps failover around 3 s and false expirations rare. Tests
// run one after another (no t.Parallel: each starts three 1 GiB JVMs and
// three or four node processes).
package failover

// Package testnode runs roomlog replicas as separate OS processes for tests,
// the chaos suite and benchmarks, so that a kill -9 or a SIGSTOP is real:
// the process loses its memory, its ZooKeeper session and its sockets, and
// nothing in the test binary can paper over it.
//
// It has three parts:
//
//   - the node binary, cmd/roomlog-testnode: replica.Open with
//     store.OpsApplier wrapped in RecordingApplier, and a small HTTP API
//     (Server);
//   - the process harness: Build compiles the binary once per test process,
//     Start launches a Node (own process group, Pdeathsig so a dying test
//     leaks nothing) that can be Killed (SIGKILL), Stopped (SIGTERM),
//     Paused/Resumed (SIGSTOP/SIGCONT), Restarted and wiped (WipeData); a
//     Cluster is N nodes of one room with WaitPrimary and WaitConverged;
//   - the checker: Load runs proposers that record every outcome in a
//     History; Check reads every node's /dump and verifies the history
//     against it (nothing acknowledged lost, nothing applied twice, one entry
//     per index on every node, non-decreasing epochs; for proposals with a
//     request id, exactly once — see "Request ids" below). ReadLog and
//     LogRecorder read the room's log back from ZooKeeper for it.
//
// A failover test reads:
//
//	ens := zkensemble.ForTest(t, zkensemble.Options{Servers: 3})
//	c := testnode.ClusterForTest(t, testnode.ClusterOptions{ZK: ens.Addrs(),
//	    Node: testnode.NodeOptions{SessionTimeout: 2 * time.Second}})
//	h := &testnode.History{}
//	l := testnode.StartLoad(ctx, c, h, testnode.LoadOptions{Workers: 4})
//	p, err := c.WaitPrimary(ctx)
//	err = p.Kill()                      // kill -9
//	_, err = c.WaitPrimary(ctx)         // a standby leads
//	err = p.Restart(ctx)                // back as a standby
//	l.Stop()
//	_, err = c.WaitConverged(ctx)       // same hash at the same index everywhere
//	res, err := testnode.Check(ctx, c.Live(), h)
//	require.NoError(t, res.Err())       // nothing lost, duplicated or divergent
//
// # The record every node keeps (RecordingApplier)
//
// For every entry it applies, a node writes, in the same store batch as the
// entry's own effects (so state and record move together):
//
//	key   RecordPrefix ("\xfftestnode/applied/") || uint64be(index)
//	value uint64be(epoch) || uint32be(count) || uint32be(len(entry)) || sha256(entry)
//	      || request id (16 bytes, zero: none)
//
// entry is what the Applier sees (store.Entry.Data): for an entry that came
// in a request envelope, the payload, and the request id is the envelope's
// (store.Entry.RequestID). count is 1 plus the count already stored at that
// key: it is 2 only if an index was applied twice. The record depends only
// on the entry and the state, so it is deterministic and part of the state
// hash; a node that bootstraps from a peer's checkpoint receives the peer's
// records of the indexes the checkpoint covers. Entries must not write
// under RecordPrefix. This is format 2 (64 bytes); format 1 (48 bytes, no
// request id) is not read any more: records live only in the stores of
// one test run's nodes, all built from the same source.
//
// An entry whose request id the store finds already applied (a
// deduplicated copy) never reaches the Applier: its index has no record on
// any node.
//
// # HTTP API (all answers JSON)
//
//	POST /propose            body = raw entry bytes; optional header
//	                         Roomlog-Request-Id: 32 lowercase hex chars (not
//	                         all zero): replica.ProposeRequest instead of
//	                         Propose
//	                         200 {"index":N,"response":"<base64>","duplicate":D}
//	                         (D: the id was already applied; N and the
//	                         response are the original application's)
//	GET  /status             200 StatusJSON (replica.Status, role as a string, observer, pid)
//	GET  /hash?min_index=N   waits until applied >= N; 200 {"hash":"…","index":N}
//	GET  /runhash?index=N    200 {"index":N,"found":F,"base":B,"sum":"<hex>","applied":A}:
//	                         the running state hash at N if the store still
//	                         keeps it (replica.Replica.RunHashAt: the last
//	                         16384 entries applied since the launch), of a
//	                         chain started at index B
//	POST /barrier            200 {"index":N} (linearizable read point, applied)
//	POST /stepdown           200 {}
//	POST /transfer?to=ID     200 {} once ID is primary
//	POST /checkpoint         200 {} (the primary also rotates and deletes)
//	GET  /dump?from=&to=&limit=
//	                         200 {"applied":N,"records":[Record…],"more":bool}
//	                         (one consistent store view; limit default 10000,
//	                         at most 100000; page on from = last index + 1)
//	GET  /get?key=K&barrier=1
//	                         200 {"key":K,"found":bool,"value":"<base64>",
//	                         "index":N,"barrier":B,"role":…,"epoch":E}: K in
//	                         one store view at applied index N. barrier=1:
//	                         replica.Barrier first (B), so the read is
//	                         linearizable on every member, the primary and a
//	                         deposed primary still answering included (fresh
//	                         data or an error, never its stale state: the
//	                         replica has no safe barrier-free read on a
//	                         primary). barrier=0: a plain local read, no
//	                         recency guarantee anywhere
//	GET  replica.CheckpointPath(room)…   the replica's CheckpointHandler
//	POST /fault/disk?stall=true|false
//	                         200 {}: stalls or resumes every write of the
//	                         store's file system (only with --disk-faults:
//	                         internal/infra/faultfs; --disk-stall-timeout
//	                         sets store.Options.DiskStallTimeout)
//
// Every call that waits takes ?timeout=<Go duration> (default 30s); Client
// passes 90% of its context's remaining time. Errors are
// {"error":code,"message":…,"primary_id":…,"primary_addr":…,"index":N} with
// codes not_primary (409), fenced (409), transfer_failed (409),
// request_conflict (409: the request id was used with another entry;
// errors.Is replica.ErrRequestConflict), queue_full (429), entry_too_large
// (413), room_full (507), canceled (504: the propose timed out before
// sending), outcome_unknown (504; index set when known committed),
// no_response (202: committed at index, response lost; "duplicate":true
// when the index is the original application's), closed/failed/starting
// (503), timeout (504), bad_request (400), bad_request_id (400: a malformed
// Roomlog-Request-Id; nothing sent) and internal (500). On the client side an *APIError matches replica's and
// logroom's sentinels with errors.Is (replica.ErrNotPrimary, …); transport
// failures are ErrUnreachable, plus ErrNotSent when the connection was
// refused (nothing reached the node).
//
// # Request ids (exactly once)
//
// A proposal sent with Client.ProposeRequest (a replica.RequestID; Load
// with RetryUnknown, the chaos proposers) may be resent after any error
// with the same id and payload: the replicas apply it at most once. A
// resend can still reach the log as a second copy (it raced the original
// through another primary, or was appended before the original was
// applied); the store skips that copy, so its index has no record
// anywhere. Proposal.RequestID, Attempts, Unknowns (attempts of unknown
// outcome) and Duplicate (the final answer was a duplicate) record it.
// CheckDumpsLog (and Check, through RequestIndex) adds these rules:
//
//   - an index without a record below a node's applied index is allowed
//     only when the log read back shows a copy there: an entry carrying a
//     request id that some node's records show applied, with the same
//     payload, at an earlier index, and that no node applied; any other
//     index without a record (a plain entry, a request not applied
//     before it, an index the log read back does not cover) is a gap;
//   - every request id is applied (has a record) at most once, on every
//     node and over all of them;
//   - an acknowledged or committed proposal with an id has it applied
//     exactly once, at the index its answer reported (for a Duplicate
//     answer the original's); a committed answer without a response may
//     report a copy's index instead, which the log must show holding the
//     same id and payload, after the one application.
//
// Log entries are compared as LogEntry: the envelope decoded
// (store.DecodeRequest), SHA-256 and size of the payload, the id in hex.
// Check reads the log back (ReadLog) only when some node lacks a record,
// and sees only what ZooKeeper still holds: a copy in a channel deleted by
// then counts as a gap. A LogRecorder started with the load reads every
// entry as it is committed (reporting the ranges it missed, Skipped);
// pass its entries to CheckDumpsLog for full coverage.
//
// # Node lifecycle
//
//  1. Start(ctx, NodeOptions): build if needed, launch with
//     --addr-file Dir/addr, wait for the file, then until GET /status
//     answers 200 (the replica is open). Logs of every launch are appended
//     to Dir/node.log; errors carry the launch's log tail.
//  2. Break it: Kill (SIGKILL, waits for the reap), Stop (SIGTERM: the
//     node leaves the room, a primary handing its role to a standby first,
//     replica.Shutdown), Pause/Resume (wait until
//     every thread is stopped/running according to /proc).
//  3. Restart(ctx): Stop if running, launch again with the same data and the
//     same API address if it is still free. WipeData (not running) empties
//     the replica's data dir first, for an empty-disk rejoin.
//  4. Close kills it and ends the harness thread. ClusterForTest prints
//     every node's log tail when the test failed.
//
// # Invariants
//
//   - A Node never leaves a process behind: Close kills it, and the test
//     process dying kills it (Pdeathsig from a thread locked for the Node's
//     life).
//   - Load never sends a payload again after an outcome other than "surely
//     not committed", so the checker may demand every payload at most once
//     — unless LoadOptions.RetryUnknown: then every proposal carries a
//     request id and an unknown outcome is resent with the same payload
//     and id (at most MaxUnknownAttempts attempts, default 20, with a
//     backoff from 50 ms doubling to 1 s, following the primary), which
//     the replicas apply at most once; the checker demands the same. With
//     LoadOptions.NoResendNotCommitted a first definite failure is final
//     too: the proposal is recorded as not committed and never resent
//     (the chaos suite's "phantom" rule relies on it).
//   - Build caches the binary per process (the package's one mutable
//     variable); RemoveBuilds deletes it.
package testnode

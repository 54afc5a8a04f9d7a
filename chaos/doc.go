// Command chaos runs roomlog under a long, seeded, reproducible schedule of
// faults and then proves that nothing acknowledged was lost, nothing was
// applied twice and every replica holds the same log and state.
//
// Usage:
//
//	go run ./chaos [-seed N] [-duration 10m] [-faults N] [-replicas 3] [-observers 1] [-workers 4] [-lifecycle] [-tls] [-force kind,…] [-v] [-keep]
//	make chaos CHAOSFLAGS="-duration 30m -seed 42"
//
// The world is a 3-server ZooKeeper ensemble (internal/infra/zkensemble, tickTime
// 200 ms) and -replicas replicas of one room, each a separate OS process
// (internal/harness/testnode's roomlog-testnode, session timeout 2 s, a checkpoint
// every 300 entries, a channel rotation every 20 batches, so checkpoints,
// rotations and channel deletions happen all the time), plus -observers
// observer processes (ids o0, …; replica.Config.Observer: they apply,
// serve reads and checkpoints, and must never lead), under -workers
// concurrent proposers. The observer is a fourth process rather than one
// of the three replicas turned observer: that would leave two candidates,
// so a kill-standby held across a kill-primary would leave no member able
// to lead (a stall by design, not a finding), and every failover would
// have one possible successor. A fourth process costs one more applier on
// the 2 cores; TestChaosShort's time barely moves. The first line printed
// is the seed; every fault is printed as it starts (time since start, kind, target) and
// what came of it on the lines below; the last line is the summary:
//
//	CHAOS seed=… faults=… acked=… lost=0 duplicated=0 divergent=0 unknown=… …
//	      ids_applied_twice=0 acked_ids_not_once=0 retried=… dedup=…
//	      unknown_resolved_by_retry=… dedup_copies=… …
//	      observers=1 observer_samples=… observer_violations=0 …
//
// preceded by one VIOLATION (or ANOMALY) line per problem found. Exit
// status: 0 clean, 1 a violation, a stall, a crash or no convergence, 2 the
// run could not be completed (flags, ZooKeeper missing, interrupted). On
// failure (or with -keep) the work dir with every node's and ZooKeeper
// server's log is kept and named.
//
// # The schedule
//
// Schedule draws faults from a PCG generator seeded with -seed; nothing
// observed while running feeds back into the draws, so the same seed gives
// the same sequence of faults (kinds, durations, which standby or follower,
// how long to heal) on every run. Which process "the primary" is, is
// resolved when a fault starts. Faults run one after another; each undoes
// itself, then the system heals for the drawn pause (0.5–3 s) and the
// runner waits (at most 60 s, else a stall) until one primary leads every
// live replica and proposals are acknowledged again. Kinds (weights):
//
//	kill-primary (3)        kill -9; wait for the new primary (failover time
//	                        recorded); restart it 0–4 s after the kill
//	kill-standby (3)        kill -9 a standby; restart it 0.5–8 s later, or
//	                        (one time in four) after the next fault: a
//	                        kill-primary then leaves a single live replica
//	pause-primary-long (2)  SIGSTOP the primary until a new primary leads and
//	                        its session timeout plus 0.2–3 s has passed; SIGCONT
//	pause-primary-short (2) SIGSTOP the primary for 0.1 s–60% of its session; SIGCONT
//	pause-standby (1)       SIGSTOP a standby for 0.2 s–2 sessions; SIGCONT
//	kill-zk-leader (2)      kill -9 the ZooKeeper leader, restart it 1–8 s later,
//	kill-zk-follower (2)    or a follower; one time in three the server stays
//	                        down across the next fault. Never a second server:
//	                        the quorum is kept.
//	wipe-standby (2)        kill -9 a standby, delete its data dir, usually ask
//	                        the primary to checkpoint (rotate, delete covered
//	                        channels) meanwhile, restart it: it bootstraps from a
//	                        peer's checkpoint if its log is gone
//	checkpoint (3)          on-demand checkpoint on the primary (2/3) or a standby
//	transfer (1)            graceful leadership transfer to a standby
//
// "A standby" is drawn among every live member but the primary, the
// observers included (they are killed, paused, wiped and checkpointed like
// standbys), except for a transfer, whose target is never an observer.
//
// Network faults run on internal/infra/faultnet proxies: every replica reaches
// each ZooKeeper server through its own link ("n0->zk1"), and peers reach
// its checkpoint port through another ("peers->n0", which it advertises).
// The processes keep running:
//
//	partition-primary-long (2)  blackhole every link of the primary to ZooKeeper
//	                            for two session timeouts plus 0.2–3 s: a new
//	                            primary must lead while the old one still runs;
//	                            an old primary still reporting role primary by
//	                            then is printed as SLOW STEP-DOWN (counted in
//	                            slow_stepdowns; not a violation: it acknowledges
//	                            nothing while disconnected)
//	partition-primary-short (2) the same for 0.1 s–60% of a session
//	partition-link (1)          blackhole one replica's link to one ZooKeeper
//	                            server for 0.5–2 sessions
//	drop-replies-primary (2)    the primary's requests reach ZooKeeper, every
//	                            answer is lost for 0.3 s–1.5 sessions (the
//	                            ambiguous outcome); then its connections reset
//	stall-checkpoint (1)        kill and wipe a standby, checkpoint on the
//	                            primary, cap the peers' checkpoint links at
//	                            32 KiB/s, restart the standby and blackhole the
//	                            source it streams from mid-stream for longer
//	                            than the fetch idle timeout (-fetch-idle, 2 s):
//	                            it must fall back to another source
//	partition-zk-leader (2)     blackhole the ZooKeeper leader's quorum and
//	                            election links for 3–8 s (zkensemble FaultNet;
//	                            past syncLimit, about 4 s, the others elect a
//	                            new leader): it still accepts clients; never while a
//	                            server is down
//
// A disk fault, made by internal/infra/faultfs inside the node process
// (every node runs with --disk-faults and a --disk-stall-timeout of three
// sessions plus 4 s, longer than any pause above, since a process paused
// across a disk write sees it stalled when it resumes):
//
//	stall-disk-primary (1)      every disk write of the primary's store blocks:
//	                            it must report role failed, naming the stalled
//	                            disk, within its DiskStallTimeout + 7 s (else a
//	                            stall is counted); it is then killed, a standby
//	                            must lead, and it restarts 0–4 s later on a
//	                            healthy disk
//
// -latency D delays every link (replicas to ZooKeeper and to peers, and the
// ensemble's client, quorum and election links) by D ± D/2 for the whole run; -force k1,k2
// runs those kinds first (the bounded run in make test forces a long
// partition, a stall, lost replies, a ZooKeeper leader partition and a stalled
// primary disk, with 2 ms of latency). The summary
// line ends with the count of faults by kind (kinds=…).
//
// After the last fault every process is healed, proposals run until 50 more
// are acknowledged, the proposers stop (every outcome is then final), the
// replicas must converge (same applied index and StateHash, 3 minutes at
// most), and the checker runs.
//
// # What is recorded
//
// Every proposal has a unique payload (an OpsApplier set of a unique key to
// a value holding a run tag) and a request id of its own
// (replica.NewRequestID), sent with POST /propose and the
// Roomlog-Request-Id header (replica.ProposeRequest) to the replica
// believed primary (following not_primary hints), and is recorded in a
// testnode.History with its final outcome (testnode.Classify): acknowledged
// at an index (or committed at a known index without a response),
// definitely failed (not_primary, fenced, queue full, canceled before
// sending, a refused connection…), or outcome unknown (timeouts, a replica
// killed or paused mid-request, lost replies).
//
// The retry policy: a first attempt that fails definitely is never resent,
// so a definite failure the replicas claim must never show up in the log.
// An attempt of unknown outcome is resent with the same payload and the
// same id, after a backoff (50 ms doubling to 1 s), to the next live
// replica or the hinted primary, until an attempt is acknowledged (possibly
// as a duplicate: the id was applied by an earlier attempt, and the answer
// carries the original index) or shows the proposal committed; a resend
// that fails definitely proves nothing about the attempts before it and
// is resent too. At most 20 attempts (about 16 s of backoff, more than a
// failover); when they run out, or the run stops (the proposers stop after
// the final heal), the proposal stays unknown. The history records each
// proposal's request id, attempts, attempts of unknown outcome and whether
// the final answer was a duplicate. The proposers are testnode's load
// generator (testnode.StartLoad with RetryUnknown and NoResendNotCommitted:
// a proposal whose first answer is surely not committed is recorded so and
// never resent, which keeps the phantom rule sharp).
//
// Each replica's RecordingApplier stores, in the same batch as the entry's
// effects, (index, epoch, sha256 and size of the entry's payload, its
// request id, times applied) under a reserved key; /dump returns them. A
// copy of a request that the store deduplicates (a resend that reached the
// log although an earlier attempt had been applied) reaches no applier and
// has no record anywhere. A testnode.LogRecorder follows the log in
// ZooKeeper from index 1 during the whole run (each entry's epoch, request
// id and payload hash, the request envelope decoded), so that the checker
// can tell such copies even after checkpoints deleted their channels; it
// prints how many entries it read and the ranges it missed, if any.
//
// # The checker's rules (Check)
//
// Records are part of the state, so a checkpoint carries them: a replica
// that bootstrapped from a peer's checkpoint holds the peer's records for
// every index the checkpoint covers (evidence of the peer's application,
// not its own), and its own records after that. Hence:
//
//  1. Each replica: one record per index, each applied once (count 1),
//     contiguous up to its applied index, epochs non-decreasing by index.
//     Its records start at index 1, unless it restored a checkpoint during
//     the run (wiped, or its status showed a bootstrap): only then may a
//     prefix be missing (a checkpoint that did not carry records). An
//     index that holds a deduplicated copy (rule 9) has no record on any
//     replica and is no gap; any other missing index is one.
//  2. Replicas agree: an index that two replicas hold has the same entry
//     (sha256, size) and epoch on both ("divergent" otherwise).
//  3. Coverage: every index from 1 to the highest applied index is held by
//     at least one replica. Indexes a replica lacks below its checkpoint
//     are judged on the replicas that hold them, and that replica's state
//     is tied to theirs by rule 5 (its StateHash covers what the
//     checkpoint brought). An index nobody holds is a gap, unless it is a
//     deduplicated copy (rule 9): nothing could prove what was applied
//     there.
//  4. Epochs: along the merged log (every index's entry), no index holds
//     an older epoch than an earlier index (a deposed primary's write
//     landing after its successor's first entry).
//  5. Final state: every replica applied the same index and reports the
//     same StateHash at it.
//  6. Proposals: an acknowledged one is at its index on every replica that
//     holds that index (and at least one does), and every replica applied
//     that far ("lost" otherwise); its payload is at no other index
//     ("duplicated"); an outcome-unknown one is at one index or none; a
//     definitely failed one is nowhere ("phantom"); every entry in the
//     replicas' records is some proposal's payload ("foreign" otherwise).
//     A payload may sit at several log indexes only as deduplicated copies
//     of its one request id, which no replica records.
//  7. ZooKeeper: the log read back — what the recorder read during the run
//     and what ZooKeeper still holds at the end (oldest channel to the
//     committed end, read through logroom) — equals the replicas' records
//     (epoch, payload sha256, request id) at every index both show, the
//     two reads agree where they overlap, and the committed end is the
//     replicas' applied index. Log entries are request envelopes: they
//     are decoded (store.DecodeRequest) and compared by their payload.
//  8. Reads (reads.go): while the proposers run, two readers read keys
//     they proposed (half the picks among the 8 newest proposals, in flight
//     or just acknowledged, the rest among older ones) on a random live
//     replica with GET /get?barrier=1: replica.Barrier, then a local read.
//     Standbys and the primary alike: a primary's role is only its own
//     belief, and the replica has no barrier-free read that is safe on a
//     primary being deposed, so the primary reads through Barrier too (a
//     deposed one answers fresh data or an error). Each read's invoke and
//     return times, node and result are recorded; a read without an
//     answer (error, timeout) changed nothing and is left out. porcupine
//     (v1.3.1) then checks, key by key, that one order of the writes and
//     the answered reads that respects real time explains every read:
//     an acknowledged or committed proposal is a write from its start to
//     its answer; an outcome-unknown one a write that never returns (it
//     may take effect any time after its start, or never) unless no
//     replica's records hold it and every index is accounted for by a
//     record or a deduplicated copy (then it never happened, as a
//     definitely failed one). A proposal resent after an unknown outcome
//     is one write, from its first attempt's start to its last answer. A key without such an order is a violation ("not
//     linearizable: key …" with its operations; porcupine's HTML
//     visualization goes to reads-linearizability.html in the kept work
//     dir). The check is bounded (60 s): past it the verdict is unknown,
//     which is no violation. The summary line carries reads= (answered
//     reads checked), reads_failed= and
//     reads_linearizable=true|false|unknown; reads_test.go proves the check
//     fails on stale reads, values never written and reads going back.
//  9. Request ids (exactly once): every request id is applied (has a
//     record) at most once, on each replica and over all of them
//     ("ids_applied_twice"); every acknowledged or committed proposal's id
//     is applied exactly once, at the index its answer reported — for a
//     duplicate answer the original index; an answer without a response
//     may name the index of a deduplicated copy instead, which the log
//     must show ("acked_ids_not_once"); and an index without a record is
//     allowed only as a deduplicated copy: the log read back shows there
//     an entry carrying a request id that the records show applied, with
//     the same payload, at an earlier index, and no replica applied that
//     index. Anything else — a plain entry, a request not applied before
//     it, an index neither read of the log covers — is a gap (rules 1, 3).
//     The summary line counts, besides the violations: retried (proposals
//     sent more than once), dedup (final answers that were duplicates),
//     unknown_resolved_by_retry (proposals with an attempt of unknown
//     outcome that a resend acknowledged or showed committed), unknown
//     (those left unknown at the end: out of attempts, or cut by the
//     stop) and dedup_copies (indexes holding a deduplicated copy).
//  10. Observers (observer.go): an observer never leads. Two sources, read
//     from the first primary to the final checks: each observer's status,
//     sampled every 100 ms while it runs, must never show role takeover
//     or primary and must say it is an observer (else the run proved
//     nothing; a run with no sample answered fails too); and the room's
//     epoch znode, read after every change (an exists watch), must never
//     name an observer as the owner of an epoch (the owner is the member
//     id of the writer that set it). At the end each observer must hold
//     the other replicas' applied index and state hash ("observer
//     state"). Epochs of the log whose owner the watch did not read
//     (two changes inside one watch round trip) are counted
//     (unseen_epochs), not violations. The run prints one line of it:
//     the samples, the epochs and their owners.
//
// Besides violations the run reports anomalies, which also fail it: a
// stall (no primary or no acknowledged proposal within 60 s after a fault),
// a crash (a replica process exiting, or reporting role failed, without a
// fault telling it to), no convergence.
//
// # Lifecycle operations (-lifecycle)
//
// With -lifecycle the schedule also draws what an operator does to a
// running room (lifecycle.go), interleaved with the faults above and
// drawn from the same seed (without -lifecycle their weights are zero
// and a seed draws the sequence it always drew). Each runs to its end
// before heal, and is printed and counted in kinds= like a fault. One
// step in four but the ZooKeeper losses and restore-check has the
// ZooKeeper leader killed as it begins and restarted as it ends
// (mid=kill-zk-leader). Every member of a lifecycle run is given the
// room's continuous archive (replica.Config.Archive; the testnode's
// --archive), one directory under the work dir (<work>/archive) shared
// by all of them as an operator configures it; a replica on the
// previous release runs without it (it has no archive: as primary it
// deletes channels unarchived, a gap restores report):
//
//	replace-member (3)      stop a member (any: the primary, a standby
//	                        or an observer; one time in four kill -9
//	                        instead), delete its data dir, start it: it
//	                        bootstraps from a peer under load; the step
//	                        lasts until it applied what the primary had
//	observer-join (3)       start a new observer process (o<n>, a new id,
//	observer-leave          an empty disk), or stop one (SIGTERM: it
//	                        leaves the room) and drop it from the run; the
//	                        schedule joins while fewer than two run (never
//	                        more than 3) and otherwise picks either
//	room-version-raise (3)  set the room's target (replica.SetRoomVersionTarget,
//	room-version-lower      as `roomlog room-version --set` does) to 2, or
//	                        back to 1 when it is at 2, only when every live
//	                        member advertises the version (else it is
//	                        counted in room_version_refused, not set), and
//	                        wait (2 min at most, else a stall) until
//	                        replica.ReadRoomVersion says the room is there
//	                        and the move complete, asking the primary for
//	                        a checkpoint every 5 s meanwhile
//	zk-wipe-reseed (2)      heal whatever is held down, then stop every
//	zk-rollback-reseed (2)  ZooKeeper server, wipe its data (or put back
//	                        the copy zkensemble.CopyData took earlier:
//	                        after the first proposals, after the first heal
//	                        of each incarnation and at every sixth heal;
//	                        one loss in two keeps the copy it had, so a
//	                        later rollback may restore the tree of an
//	                        earlier incarnation: keep-copy=true),
//	                        start them again; every member must then report
//	                        role failed with logroom.ErrRoomLost (two
//	                        sessions plus 20 s at most; else not_refused),
//	                        and no proposal may be acknowledged from the
//	                        moment ZooKeeper serves again until the members
//	                        are stopped (acked_while_lost); then what
//	                        docs/disaster-recovery.md says: stop every
//	                        member, re-seed from every data dir
//	                        (replica.Reseed, the library of `roomlog
//	                        reseed`), start the seed's member first, then
//	                        the others. The log recorder and the observer
//	                        watch start again in the new incarnation (the
//	                        recorder at the seed's index + 1; entries it
//	                        read past the seed in the lost one are
//	                        dropped: no member applied them). When a
//	                        replica ran the previous release since the
//	                        room was created or last re-seeded (it writes
//	                        no history records) and the re-seed refuses
//	                        survivors that "cannot be compared", the
//	                        harness does what the guide says: re-seeds
//	                        trusting the survivor of the highest epoch and
//	                        index, and wipes the data dirs of those left
//	                        out (they bootstrap; reseeds_trusted counts
//	                        it). A failed re-seed is counted
//	                        (reseed_failures) and ends the schedule; a replica on the previous release
//	                        is not asked to refuse by name (it predates
//	                        ErrRoomLost) and is started on this tree after
//	                        the re-seed (the previous release cannot open a
//	                        re-seeded room)
//	downgrade (3)           stop a replica (one time in four kill -9), start
//	upgrade                 it on the same data dir with the previous
//	                        release's roomlog-testnode (RELEASES names its
//	                        commit; BuildPrevious extracts it with git
//	                        archive and builds it, as compat/ does), or back
//	                        on this tree's; observers never move (the
//	                        previous testnode has no --observer). The
//	                        schedule downgrades while no replica is on the
//	                        previous release and upgrades when all are. A
//	                        downgrade lowers the room version first when
//	                        it is above 1 (a room-version-lower step). After
//	                        a re-seed the previous release must refuse to
//	                        start (counted in downgrades_refused) and the
//	                        replica goes back to this tree. A
//	                        room-version-raise while a replica runs the
//	                        previous release sets the target all the same:
//	                        for 3 s the room must stay where it is, saying
//	                        why (room_version_violations otherwise), then
//	                        the target is set back (room_version_refused)
//	restore-check (2)       what `roomlog restore` does (archive.Restore,
//	                        its library, with the members' Applier:
//	                        testnode.RecordingApplier over
//	                        store.OpsApplier), into <work>/restores, at
//	                        acknowledged indexes of the incarnation in
//	                        service, named explicitly (--incarnation
//	                        0x<czxid>/<epoch znode>, read from the room:
//	                        the archive holds every incarnation since the
//	                        run began, as docs/disaster-recovery.md warns):
//	                        two at random among those acknowledged after
//	                        its re-seed that the archive's listing covers,
//	                        within 12,000 below the newest it covers
//	                        (members keep their last 16,384 running
//	                        hashes), and one acknowledged above that, which
//	                        the restore must refuse (archive.ErrNotCovered);
//	                        when nothing acknowledged is archived yet (a
//	                        re-seed just began the incarnation), the
//	                        primary is asked for a checkpoint first (it
//	                        seals the open channel) and the archive waited
//	                        for (10 s at most). The restored store's running
//	                        hash (store.RunHash) is compared with every
//	                        live member's at that index (the testnode's GET
//	                        /runhash: replica.Replica.RunHashAt) whose
//	                        chain has the same base: equal counts in
//	                        restores, different in restore_mismatch (a
//	                        failure, named in an ANOMALY line); an index the
//	                        archive does not cover yet, or whose hash no
//	                        member keeps in a chain of the same base (a
//	                        member restarted since, or one whose chain
//	                        restarted on the previous release) is skipped
//	                        (restore_skipped); a restore that fails
//	                        otherwise (a corrupt or foreign item, an
//	                        incarnation it cannot pick) counts in
//	                        restore_failures (a failure). A step that
//	                        compared none tries the three newest archived
//	                        acknowledged indexes, and if still none, says
//	                        so (restore_steps_uncompared, not a failure).
//	                        No gap is measured: it changes nothing in the
//	                        room. -perturb-restore-hash (a test hook)
//	                        flips a bit of every restored hash before it is
//	                        compared: every comparison must then report a
//	                        mismatch and the run fail
//
// The checker spans incarnations unchanged: every acknowledged entry is
// at its index on every member that stays (members replaced or behind
// the seed are marked as restored from a checkpoint, rule 1), so a
// re-seed that lost an entry some stopped member held is "lost"; the
// epochs along the merged log never go back; the final state is one.
// The summary line adds max_lifecycle_gap (the longest stretch without an
// acknowledged proposal during any replace-member, observer,
// room-version, upgrade, downgrade, rotate-cert or rotate-ca step: from
// its start to the first acknowledgement after its end; a step that
// killed a member with kill -9 instead of stopping it, cut it from
// ZooKeeper (rotate-cert) or during which the ZooKeeper leader was
// killed, counts apart, in max_faulted_step_gap: a killed primary costs
// a failover by design), lifecycle_gaps (the same per kind), and apart
// from them
// max_reseed_gap (from the start of a ZooKeeper loss to the first
// acknowledgement after its re-seed), acked_while_lost, not_refused,
// reseed_failures, room_version_refused, room_version_violations,
// downgrades_refused, reseeds_trusted, and restore-check's restores,
// restore_mismatch, restore_skipped, restore_failures and
// restore_steps_uncompared. Any of acked_while_lost, not_refused,
// reseed_failures, room_version_violations, restore_mismatch and
// restore_failures fails the run. A lifecycle run prints
// each step's gap before the summary; rerun one with
// `go run ./chaos -lifecycle -seed N -duration D` (the first line prints
// it).
//
// # TLS (-tls)
//
// With -tls the ensemble serves a TLS client port (zkensemble
// TLSOptions: client certificates of its CA required, quorum and
// election links TLS too) and every member connects to it through its
// faultnet links with a client certificate of that CA
// (replica.Config.ZooKeeperTLS): a replica's subject is CN=<id>, every
// observer's CN=observer (observers join under new ids; the room's ACL
// is fixed when a znode is created), the harness's own CN=operator (its
// log recorder, observer watch, room version steps, re-seeds and final
// read). The room's ACL grants those x509 identities and nothing else
// (replica.Config.ACLIdentities, replica.ReseedConfig). Members talk to
// each other with mutual TLS (replica.Config.PeerTLS) on a checkpoint
// port of their own, behind their "peers-><id>" link, with certificates
// of a second CA, the members' CA (tls.go; files under <work>/tls/<id>).
// The ZooKeeper CA is fixed for the run (a server reads its trust store
// at start); the members' CA rotates. Upgrade and downgrade are not drawn
// (the previous release's testnode has no TLS); with -lifecycle two kinds
// are (weights):
//
//	rotate-cert (3)  replace one live member's (any) certificate and key
//	                 files in place, both its ZooKeeper client certificate
//	                 (same subject) and its peer certificate (certificate
//	                 first, then key); one time in four the member is cut
//	                 from ZooKeeper meanwhile (half a session; faulted).
//	                 Its ZooKeeper connections are then reset (not a
//	                 primary's unless cut: a rotation alone never makes a
//	                 primary reconnect), so it reconnects with the new
//	                 certificate; within 15 s its checkpoint port must
//	                 present the new certificate, and it must catch up
//	rotate-ca (2)    a new members' CA, as an operator rolls one: every
//	                 member's CA file (stopped members' too) holds old and
//	                 new, and every live member must accept a client of
//	                 the new CA; every member's certificate is re-issued
//	                 by the new CA, and every live member must present
//	                 it; every CA file holds the new CA only, and every
//	                 live member must refuse a client of the old one
//
// A check that fails within 15 s (members look at their files at most
// once a second) is counted in tls_violations, which fails the run. The
// summary line adds tls=true tls_violations=N; the steps count in
// lifecycle_gaps and max_lifecycle_gap like the other lifecycle kinds.
//
// # Tests
//
// chaos_test.go runs a bounded subset in `go test` (a fixed seed and a
// random one, printed, sharing one ensemble; and TestChaosLifecycle,
// one schedule of every lifecycle kind on an ensemble of its own, the
// previous release built from the repository's history), asserts rule 9 by name (no
// id applied twice, every acknowledged id exactly once, and some resends
// whenever an outcome was unknown) and rule 10 (one observer, sampled,
// never led, same final state), and proves that the checker detects
// each kind of violation in synthetic histories (checker_test.go,
// TestCheckerRequests for rule 9). restorecheck_test.go: restore-check's
// index picking, its comparison (a perturbed hash mismatches every member
// and fails the run) and its reading of the archive's coverage. tls_test.go: TestChaosTLS, a bounded
// -lifecycle -tls run (both rotations and a replaced member, on a TLS
// ensemble of its own); TestProbeTLS, the rotation checks against a
// tlsfiles server without ZooKeeper; TestScheduleTLS.
package main

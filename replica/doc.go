// Package replica is the embeddable master of roomlog: it ties a logroom
// room (the replicated log on ZooKeeper), a store (local Pebble state) and
// package checkpoint into primary and standby roles that survive a killed
// or paused primary, a ZooKeeper leader crash and members that lose their
// disk or fall behind compaction (package failover's doc lists each failure
// and the test that inflicts it on real processes; "Invariants" below says
// what holds throughout).
//
// A DFS metadata master embeds one Replica per room:
//
//	r, err := replica.Open(ctx, replica.Config{
//	    Servers: []string{"zk1:2181", "zk2:2181", "zk3:2181"},
//	    Room: "ns1", ID: "master-a", DataDir: "/var/lib/master",
//	    AdvertiseAddr: "10.0.0.5:8080", Applier: myNamespace,
//	})
//	mux.Handle(replica.CheckpointPath("ns1"), r.CheckpointHandler())
//	res, err := r.Propose(ctx, edit)      // primary: durable + applied
//	idx, err := r.Barrier(ctx)            // any member: linearizable read point
//	v, err := r.Get(key)                  // read local state
//
// Store and Room hand out the read sides of the local store (a
// store.Reader that follows the replica across bootstraps) and of the room
// (RoomReader); writing to either is the replica's alone.
//
// Each member's ZooKeeper client connects to the ensemble's leader when it
// can (logroom's "Connecting: the leader first"), so that whichever member
// becomes primary writes without a follower's forwarding hop;
// Config.AnyServer keeps go-zookeeper's shuffled order instead.
//
// # Roles
//
// Exactly one member at a time is the accepting primary (it holds the
// room's newest epoch and its writer is the only one whose writes land: the
// fence is inside every write, a Multi with a version check on the epoch
// znode, never a matter of timing). The others are standbys that tail the log
// and apply it.
//
// The role decisions live in one pure state machine, core (core.go, in the
// shape of etcd-io/raft's RawNode): it consumes events — session state, a
// watch fired, an election read, a takeover's end, the standby tail
// stopped, a writer fenced or stopped, a step-down or transfer request, the
// transfer record written, the apply goroutine's exit, a failure, our
// member id held by another session, a resignation done, the term found
// deposed, a link probe answered, a cut-off probe's result, a read of the
// room version, a room-version move ended, a tick — and returns actions
// (announce a role, stop accepting, end the term, start, abort or drop a
// takeover, requeue, lead, start or stop the tail, write or clear the
// transfer record, reply, fail, mark the room lost, resign, send a link
// probe, serve or refuse reads that need ZooKeeper, probe the room with a
// new session, publish and record the room version, say why it is not where
// it is going, move it). It has no goroutines, locks, clock reads or I/O;
// the time is a field of the events that need one. The run loop (loop.go)
// is its one owner: it selects over session events, watch events, the
// takeover's and the applier's ends, API requests, writer failures, the
// ZooKeeper worker's results, a term's end and a tick, feeds each to the
// core, and carries out the actions (an action whose outcome the core needs
// is answered by a later event). The running loop does not wait for
// ZooKeeper (only failing and closing, both final, wait for what is in
// flight, bounded): its ZooKeeper work runs in two worker lanes, one job at
// a time per lane in the order queued, each bounded by its own context
// (300 ms; 1 s for the election; 2 s per step of a resignation; 3 s to mark
// the room lost), and its result is applied on the loop. Lane 0 keeps the
// order of member data, election reads, re-queue, the room's lost mark,
// resignation, term watch and transfer record; lane 1 runs the long reads
// that need no order with them (the channel figures and the log audit), so
// an election read or a hand-off's catch-up publish does not wait behind
// them; an election read that started before a reconnect, a new session, a
// re-queue or a resignation is dropped. A term ends off the loop too (the
// writer's close waits for its in-flight Multis, then the primary applier
// drains). The loop publishes one immutable status snapshot (role, epoch,
// members, foreign znodes, connection) through an atomic pointer; each
// snapshot's channel is closed when the next replaces it. Status, the
// metrics, Propose's connection gate and TransferLeadership read it. The
// replica has two locks: storeMu (the store, swapped by a bootstrap) and
// propMu (the proposal bookkeeping: waiters, responses, request ids in
// flight, each term's door and the commit queue).
//
// The core's choices use pure functions of a snapshot (decide.go):
// decideElection (step down, abort, retry later, requeue behind a
// transfer, behind compaction, or behind a live candidate that applied
// more than TakeoverLagBound entries more unless a transfer names us,
// take over), decideTakeover (lead, fail,
// requeue, retry; ErrCorrupt fatal when confirmed three times in a row),
// and, outside the core, decidePublish (when member data is rewritten),
// decideDeletions (which sealed channels go after a checkpoint) and
// classifyAppend (what an append's result means for the proposal and the
// term: only a committed append is acknowledged).
//
// Tests of the decisions need no server: table tests (decide_test.go);
// scenario scripts (testdata/core/*.txt, run by TestCoreScenarios with
// cockroachdb/datadriven: one event per command, the actions as output);
// and a randomized simulation (sim_test.go) of 3–5 cores against an
// in-memory model of the room (simzk_test.go: sessions, ephemeral and
// sequential nodes, versions, Multi) with lost replies, expiries,
// disconnections, events handled in any order (session events among
// themselves in order), terms that end off the loop, checkpoints,
// deletions (decideDeletions, with the holds the real decideHold counts,
// carried out one write at a time as logroom's fenced deletion does it: the
// oldest channel only, each write a Multi behind the deciding writer's
// fence — its epoch znode version and its token — and the channels znode's
// version the previous write left, never retried across a lost reply; a
// deletion outlives the term that decided it, as the checkpointer does) and
// bootstraps whose fetches stall or fail, wrong depositions, re-seeds,
// silent links and sessions every server refuses, room versions (targets,
// binaries swapped, moves decided on a stale view and rechecked when they
// land), and, in every third seed, ZooKeeper restored from an older copy
// (the model's tree and log as copied at the end of a calm stretch,
// restored as a 3-server ensemble to which every member reconnects: every
// session expires, every member reconnects at once and audits at its own
// pace, at its next reconcile; the case of an ensemble that refuses the
// sessions, found by the cut-off probe, is not modelled; a deletion under
// way loses its reply or sends its next write to the restored tree; the
// members that applied past the copy fail and mark the room lost when they
// audit; the next calm stretch runs the lost room 30 rounds, then the
// operator re-seeds from the survivors' data dirs, trusting the finder's
// history — the most of the history before the restore any member applied
// — when a member applied another, and the calm stretch goes on; rollbacks
// come more often while a deletion is under way) drawn from a seed, checking
// after every step: one writer per epoch, no acknowledgement after a fence,
// each member's applied entries a prefix of the committed history, no
// deletion without a live member serving a covering checkpoint, no hole in
// the channel chain (the deleted channels a prefix, followed by at most one
// being deleted), no deletion write landing after its writer's epoch was
// superseded (the fence it was decided behind moved, re-seeded or restored
// past), no member leading in a session that was replaced or after being
// cut off for a session timeout, no term ended with its door open, no
// takeover without a standby tail, no lead from a position other than the
// writer's start, no deposed or fenced primary acting on, no channel
// deleted that a progressing bootstrap hold needs, no reads served with a
// link probe out past its bound, no member failed as refused unless refused
// for a session timeout, no room-version move past a live member, no member
// running on channels beyond its room versions, nothing acknowledged and no
// append landing in a room marked lost until the re-seed (the mark fences
// the primary elected in the finder's window), nothing acknowledged after
// a connected member reached the verdict that the log lost what it applied
// (unless that member's mark did not land: it marks again markRetryPause
// later, which the simulation checks), no member resigning while its
// mark is out or of unknown outcome, no append
// acknowledged before a rollback missing from the re-seeded log, and the
// core's own invariants; after every calm stretch,
// exactly one member leads, in the room's epoch, and every connected member
// serves reads. Appends acknowledged after a lossy rollback and before the
// mark (the finder's window, a limit stated under "Disaster recovery") are
// counted and reported with those the trusted re-seed discards, not
// failed. A failing seed prints a trace and the command that replays it.
// TestSimulationFindsPlantedBugs plants bugs in the decisions the
// simulation applies (acknowledge a fenced append, delete without a served
// checkpoint or under a live hold, call a progressing hold stalled, no term
// watch, a re-seed reusing the fence, a room-version move landed without
// deciding again; delete any covered channel, not only the oldest, going on
// after a lost reply; delete without the epoch fence; retry a deletion
// write across a lost reply on the channels znode's version read again) and
// in the core (keep leading after expiry, after a session timeout cut off,
// when fenced or deposed; take over with no tail; end a term with its door
// open; serve reads with a link probe unanswered; call a session refused
// early; two room-version moves at once; run on channels beyond our room
// versions; fail on a lost log without marking the room lost, after which
// a member whose state the older copy holds takes over and acknowledges at
// the lost indexes after the finder's verdict; and a mark that does not
// fence the sitting writer, whose primary goes on acknowledging in a room
// marked lost) and requires the simulation to find each. The
// simulation still models the loop's executor rather than running loop.go
// (it covers the core and the pure decisions, not the loop's I/O).
// TestSimZKConformance runs the same random operation sequences on the
// model and on real ZooKeeper and requires equal results.
//
// The whole-replica simulation (simreplica_test.go) runs the real code
// instead: three replicas (Open, the loop and its workers, the election,
// logroom's writer and readers, checkpoints served and fetched over HTTP,
// liveness, archive, operator requests, metrics) against internal/simzk,
// an in-memory ZooKeeper that speaks the client protocol (its own
// conformance test runs the same sequences on ZooKeeper 3.8), each member
// behind its own TCP proxy, with faults drawn from a seed: lost requests
// and replies, dropped connections, expired sessions, partitions that hold
// bytes, crashes (sessions expired at once or left to linger) with and
// without the data directory, closes and shutdowns, transfers, step-downs,
// checkpoints, room-version targets, operator requests; and, in
// TestSimulationReplicasLoseTheRoom, ZooKeeper restored from an older copy
// or wiped, then the operator's re-seed. Checked: nothing acknowledged is
// lost (across the re-seed too); one entry per index; no entry applied
// whose every proposal was answered as not committed; no acknowledged
// request applied twice; members settle on one applied index and one
// state hash; no two members say primary for longer than the session
// timeout and 1.5 s; no member fails or cannot open, except that every
// member must refuse a lost room with ErrRoomLost or ErrSessionRefused;
// the room serves again after healing. Goroutines interleave as the Go
// scheduler decides: a seed replays its fault schedule, not its run.
// TestSimulationReplicasFindsPlantedBugs plants a wrong decision in every
// member (the core calling a session refused on the first probe; an append
// of unknown outcome reported as never sent) and requires a violation.
//
//	standby ──(lowest candidate)──▶ takingover ──(writer + caught up)──▶ primary
//	   ▲                                │                                   │
//	   └──── session expired / fenced / step down / transfer / lost lowest ─┘
//
// Observers (Config.Observer) are members that must never lead: a read
// replica, or a checkpoint producer in another rack (HDFS's Observer
// NameNode, etcd's learners). An observer joins the membership and does
// what a standby does — it tails and applies the log, serves reads
// (WaitApplied, Barrier, Store), makes checkpoints by policy and on
// demand, serves them to bootstrapping peers, counts for deletion's
// served-checkpoint rule and takes part in the integrity vote — and its
// member data says observer: true beside role "standby" (which members
// that predate observers read). It never holds an election candidate:
// Open does not enter the election, the run loop never reads it (the
// core's election simply stays due; nothing polls it), and the election
// refuses to enter, evaluate or requeue for an observer, so no re-queue,
// session expiry or reconnect can create a candidate for it. Its role
// stays standby until it fails or closes, also when it is the last
// member left (the room then has no primary until a candidate joins).
// Candidates decide on the line only (decideElection), so an observer
// neither holds up nor steers a failover; TransferLeadership refuses it
// as a target (ErrTransfer). Status().Observer, MemberStatus.Observer and
// roomlog_replica_observer show it.
//
// # Znodes (owned by this package, under the room /<base>/<room>)
//
//	members/<id>         EPHEMERAL. msgpack {v:1, id, addr, role ("standby",
//	                     "takeover", "primary"), epoch, applied, ckpt
//	                     [, catch_up] [, hash, hash_at, hash_base,
//	                     hash_agree], rv_min, rv_max [, observer]
//	                     [, hold, hold_prog]}: a live
//	                     member, its advertised
//	                     address, role, the epoch it leads (primary) or last
//	                     applied, its applied index (published on role
//	                     change at once; while it moves at most twice per
//	                     MemberUpdateInterval: once per interval, and once
//	                     more when it settles for 20ms; at once when the
//	                     primary's catch_up asks for an index it reached),
//	                     the index of its newest local checkpoint (0: none),
//	                     and, on a primary handing leadership over only,
//	                     catch_up: the index it waits for (omitted when 0);
//	                     hash: its running state hash at index hash_at of
//	                     a chain started at hash_base (see "Integrity";
//	                     omitted before it applied anything), published
//	                     with its applied index, and hash_agree: the peers
//	                     whose latest hash it found equal to its own,
//	                     each with the index and hash it agreed at;
//	                     rv_min..rv_max: the room versions it supports
//	                     (see "Room version"; absent in a v0.1.0 member's
//	                     data, which counts as 1..1); observer: true for
//	                     an observer (Config.Observer; omitted
//	                     otherwise), whose role stays "standby" and
//	                     which holds no election node; hold, hold_prog:
//	                     a bootstrap's hold and its progress counter (see
//	                     "Bootstrap holds"; omitted when 0, and ignored by
//	                     v0.1.0 primaries, which do not honour them). Fields are added
//	                     only where a reader that ignores them stays right
//	                     (msgpack maps: every release ignores unknown
//	                     keys); anything else raises v, which makes the
//	                     node foreign to older members.
//	                     Readers other than TransferLeadership (Status,
//	                     metrics, deletion) see an applied index up to one
//	                     interval old.
//	election/c-<guid>-<seq>
//	                     EPHEMERAL_SEQUENTIAL, the election recipe's format
//	                     (package recipe/election owns it): msgpack
//	                     {v:1, id, data}, data = the member's AdvertiseAddr.
//	                     guid: 32 hex chars, random per Replica; seq:
//	                     ZooKeeper's 10-digit suffix, parsed as an integer.
//	                     Lowest wins. (Until 2026-11-24, before release
//	                     v0.1.0, the data was {v:1, id, addr}.)
//	transfer             EPHEMERAL (of the handing-over primary). msgpack
//	                     {v:1, from, to, epoch, deadline (unix ms)}.
//	checkpoints          PERSISTENT. msgpack {v:1, index, epoch, id, addr,
//	                     created (unix ms)}: the newest checkpoint the primary
//	                     made after rotating (informational: bootstrap picks
//	                     its source from member data).
//	version              PERSISTENT. msgpack {v:1, target, set (unix ms)}:
//	                     the room version an operator asked for
//	                     (SetRoomVersionTarget, roomlog room-version --set);
//	                     absent: none (the room stays where it is).
//	operator             PERSISTENT, with the room znode's ACL. msgpack
//	                     {v:1, id, kind ("transfer" | "checkpoint"), to,
//	                     epoch, created (unix ms), state ("" pending |
//	                     "running" | "done" | "failed"), by, err, index,
//	                     new_primary, took_ms}: an operator's request to
//	                     the primary of epoch and its answer (see
//	                     "Operator requests"); absent: none.
//
// Member data also carries ids (omitted when empty): the identities the
// member's ZooKeeper session is authenticated as ("digest:USER:HASH",
// "x509:SUBJECT"; informational), so a tool changing the room's ACL can
// tell which entry each live member needs.
//
// Acceptance (trust boundary): a members/ or election/ child counts only if
// it is ephemeral (Stat.EphemeralOwner != 0), readable, and its data passes
// a bounded msgpack check (one value, nesting <= 4, every length within the
// input) and decodes as format v1 with a valid member id (Config.ID rules)
// and an address that is empty or parses as Config.AdvertiseAddr does
// (host:port or an http(s) URL). A member's node name must equal its id; a
// candidate's name must be c-<32 hex>-<seq> with seq ZooKeeper's 10-digit
// suffix of a non-negative 32-bit counter (a negative one, e.g.
// "c-<guid>--000000001", is forged), and a node with our guid held by
// another session is foreign (the guid is random per Replica). The
// membership and election recipes apply these rules (their Accept hooks
// are acceptMember and acceptCandidate, so the reasons are the replica's);
// a view (ReadRoomView) applies the same. Anything else is foreign: ignored for every
// decision (election order and predecessor watch, the primary's id and
// address and so every redirect, the committed hint, deletion's and
// bootstrap's view of members, transfer and compaction checks), logged
// once (Warn, with its path and reason) and listed in Status().Foreign.
// Nothing foreign is ever deleted by a replica: an operator removes it
// (cmd/roomlog members and verify show it). A forged ephemeral node that
// follows every rule, held by a live foreign session, cannot be told from
// a member: keep the room's ACL (Config.Auth) to the masters.
//
// Read-only views: ReadRoomView reads these znodes through a
// logroom.Client, without a Replica and without writing, and classifies
// them with the replicas' own decoding and acceptance rules: every
// members/ child (MemberView: its data, or why it is foreign), the
// accepted candidates in election order, the foreign children with their
// reasons, the transfer and checkpoint records (or why one is malformed).
// DescribeMemberZnode classifies one member znode read some other way.
// cmd/roomlog shows rooms through them.
//
// On disk: DataDir/store (Pebble, package store), DataDir/store.old (the
// store a bootstrap replaced, deleted once the new one opens),
// DataDir/checkpoints (package checkpoint's root) and
// DataDir/roomlog-member.json, JSON {Base, Room, RoomCzxid}: the room
// incarnation (the zxid that created the room znode) the state belongs to.
// Open refuses (ErrWrongDataDir) a non-empty store of another room or of an
// earlier room of the same name, whose indexes would not match the log. Checkpoints are served at
// URL path CheckpointPath(room) = "/roomlog/checkpoint/<room>/" (GET: tar
// stream of the newest; GET …/manifest: its manifest), fetched from
// "http://" + AdvertiseAddr + that path.
//
// # Invariants
//
//  1. At most one accepting primary per epoch; a write of an older epoch
//     never lands (logroom fences every Multi).
//  2. A primary accepts proposals only after applying everything before
//     its writer's StartIndex, and only while its session is connected.
//  3. One goroutine at a time writes the store: the standby tail, or the
//     primary's commit feed (Writer OnCommit), never both; the loop stops
//     one (and waits) before it starts the other. Every entry is applied
//     once, in index order (store.Apply rejects gaps).
//  4. Propose returns success only for an entry that is committed in a
//     ZooKeeper quorum AND applied locally.
//  5. A sealed channel is deleted only if its last index is <= the
//     primary's durable local checkpoint AND <= a checkpoint a live member
//     (the primary included) demonstrably serves — its manifest, fetched
//     from the member's AdvertiseAddr within Config.CheckpointFetch's
//     bounds, records this room's incarnation and an index covering the
//     channel; advertised member data alone does not count — AND <= the
//     applied index of every live member; or, past the retention limit
//     (room bytes above RetainRoomBytes), if those two checkpoints cover it.
//     Without a served covering checkpoint nothing is deleted, retention
//     limit included: the room grows until the writer's MaxRoomBytes
//     answers ErrRoomFull, a clear and recoverable state (a member that
//     serves a checkpoint ends it). Deletion goes from the oldest channel
//     on, never leaving a hole. Never, retention limit included, a
//     channel holding an index a live member's bootstrap holds while that
//     hold makes progress ("Bootstrap holds").
//  6. A member never skips entries: if the log it needs was deleted it
//     restores a peer's checkpoint that covers the gap, then tails.
//
// # Protocols
//
// Open:
//
//  1. Validate the Config (every bad field named at once).
//  2. Recover an interrupted restore (store.old without store is put
//     back; store.old beside store and .tmp-restore-* are removed); open
//     DataDir/store; clean checkpoint temp dirs; delete local checkpoints
//     that are junk, of another origin or of the old manifest format.
//  3. logroom.Dial (one Client, one session); Subscribe to session events;
//     OpenRoom; create members/ and election/ if absent.
//  4. Serve the checkpoint handler if ListenAddr is set (HTTPS only, with
//     client certificates required, when PeerTLS is set).
//  5. Join membership (recipe/membership Join, then Watch with data
//     watches): create members/<id>. If it exists and belongs to another
//     session, wait up to 1.5 session timeouts + 1s for it to go (our own
//     killed previous incarnation); still there → ErrDuplicateID; a
//     persistent node there → ErrDuplicateID at once. From then on the
//     registration's keeper re-creates the node with our latest data after
//     an expiry or a deletion, and the loop fails the replica
//     (ErrDuplicateID) if another session holds our id for longer than
//     that bound. The watcher's view, diffed listing against listing,
//     wakes the loop, which reloads it (members, the primary's applied
//     index as the committed hint, a primary's catch_up).
//  6. Create the election candidate (protected, see Election); an
//     observer skips this step and never holds one.
//  7. Start the checkpointer and the run loop (which starts the standby
//     tail from applied+1 and evaluates the election, unless an observer).
//
// Election (run loop, never on an observer; steps 1–3 are the election
// recipe's Line, step 4 the replica's policy, decideElection; every step
// bounded by 1 s, the tick retries what failed):
//
//  1. Create election/c-<guid>-<seq> (EPHEMERAL_SEQUENTIAL). If the create
//     fails with a connection loss, its fate is unknown: before creating
//     again, list the children and adopt a node carrying our guid. Any other
//     node with our guid (a create that ran later in a new session) is
//     deleted: we hold exactly one.
//  2. List the children (after a Sync when the session changed), sort by
//     the parsed sequence number. Our node missing: go to 1.
//  3. Not lowest: ExistsW on the predecessor only (no herd). If it is gone
//     already, go to 2. When the watch fires, go to 2.
//  4. Lowest: read transfer. If it is fresh (deadline not passed, its epoch
//     is the room's current epoch) and names another live candidate,
//     re-queue (delete our node, create a new one: back of the line) and go
//     to 2. Also re-queue if our next entry lies in a deleted channel (we
//     would first have to bootstrap) while another live candidate's applied
//     index does not. Otherwise take over.
//
// Takeover (a goroutine owned by the loop, role "takeover"):
//
//  1. Log matching (see "Trust boundary"): the log must still hold the
//     batch we applied last. Then room.NewWriter with WriterConfig.Applied
//     = our applied index: check the channel chain, CAS an epoch above
//     every recorded one (fences every older writer), find the log end —
//     below our applied index → ErrDiverged, nothing sealed or opened —
//     seal the last channel there, open the next.
//  2. Wait until the standby tail has applied StartIndex-1.
//  3. Loop: stop the standby tail; if applied > StartIndex-1 a newer
//     primary wrote while we caught up (our session expired meanwhile):
//     close the writer and re-queue as a standby. Else start the
//     primary applier on the writer's OnCommit feed; accept proposals;
//     publish role "primary"; delete a transfer record naming us.
//  4. A takeover that fails with ErrDiverged fails the replica; with
//     logroom.ErrCorrupt (a broken chain, an epoch znode that does not
//     decode or would overflow) three times in a row, too; ErrFenced
//     re-queues; anything else retries.
//
// Propose (caller's goroutine, primary):
//
//  1. Take one of MaxPendingProposals slots (else ErrQueueFull) and enter
//     the term (else ErrNotPrimary naming the primary).
//  2. Wait while disconnected (bounded by ctx).
//  3. Writer.Append → index. OnCommit hands the committed entries, in
//     order, to the primary applier, which applies them and hands each
//     response to the waiting Propose (or keeps it in a bounded ring if the
//     Propose has not registered yet).
//  4. Wait until applied >= index; wait until connected; return
//     Result{Index, Response}.
//
// ProposeRequest (caller's goroutine; exactly-once retries):
//
//  1. On a member that is not primary: look the request id up in the
//     store's request table (replicated state, see package store "Request
//     table"): found with the same entry → the original Result, Duplicate
//     set, nothing appended; with another entry → ErrRequestConflict. The
//     primary skips this read (it misses for every fresh id); its retries
//     are skipped at apply time (3).
//  2. The same id in flight on this replica → wait for it (bounded by ctx)
//     and return its outcome.
//  3. Otherwise Propose the entry in a request envelope stamped with this
//     replica's clock (log time) and its RequestTTL / RequestWindow. If the
//     id was already applied (a retry of a request that succeeded, or one
//     that raced the original through another primary), every replica
//     skips this copy at apply time — the store's decision depends only on
//     the log — and the original Result comes back, Duplicate set.
//
// A retry is therefore safe after any error (ErrOutcomeUnknown,
// ErrNoResponse, ErrNotPrimary, a timeout, a lost connection, a crash of
// the caller's primary), as long as it comes within the request's TTL and
// window; after that the id is forgotten and a retry applies again.
// Propose (no id) keeps at-least-once-if-retried semantics, and wraps an
// entry that happens to start like an envelope so that it reaches the
// Applier unchanged.
//
// Session events (run loop):
//
//   - Disconnected (SUSPENDED): proposals neither sent nor acknowledged;
//     watches survive. Reads that cannot be served are refused at once:
//     WaitApplied for an index not yet applied and Barrier return
//     ErrUnavailable (since when, how far behind), and a WaitApplied
//     already waiting is released with it the moment the loss is seen;
//     what was applied is still served (Get, Store, WaitApplied of an
//     applied index), and Status().Suspended says for how long. A
//     disconnection that heals within milliseconds (a server restart, a
//     reset connection) refuses such reads for that long too.
//   - A silent partition (the link holds bytes, no RST) looks connected to
//     go-zookeeper until its read timeout, two thirds of a session. The
//     link check sees it sooner: while connected, the member reads the
//     room znode on its own session every 100 ms, and one read unanswered
//     for Config.LinkProbeBound (400 ms) refuses the reads above, as a
//     disconnection does, without touching the session or the role; the
//     next answer (or a reconnect) serves them again. When to probe and
//     what an unanswered probe means are the core's decisions (linkDue,
//     onLinkProbed in core.go, covered by the simulation).
//   - After a whole SessionTimeout disconnected, the primary ends its term
//     (its session is gone on the servers' side): role standby at once,
//     then the writer closes. A primary cut off by a
//     partition thus notices within go-zookeeper's read timeout (2/3 of a
//     session) and steps down one session later. The loop stays free to
//     do so: its ZooKeeper work runs in the worker, queued only while the
//     session is live, each job bounded by its context (a raw go-zookeeper
//     call inside one runs on a goroutine of its own so that the context
//     bounds the wait), and logroom caps go-zookeeper's session handshake
//     (ten read timeouts) at two.
//   - Our member node found held by another session: waited out for 1.5
//     session timeouts + 1 s (our previous session's node, or a server
//     behind); still held → ErrDuplicateID (a persistent node: at once).
//   - Expired (LOST) — seen as StateExpired or as a new session id: end the
//     term (close the writer: in-flight appends get their outcome,
//     ErrOutcomeUnknown where it cannot be learned; queued ones were never
//     sent), drain committed entries into the store, restart the standby
//     tail from applied+1, recreate the member node and the candidate (at
//     the back), re-arm every watch. Events of watches armed in the old
//     session are ignored.
//   - A writer error ErrFenced (another member took a newer epoch, e.g.
//     after we were SIGSTOPped past our session): end the term, re-queue.
//
// StepDown: stop accepting, wait for in-flight proposals and their apply,
// then (loop) close the writer, delete our candidate and create a new one.
//
// TransferLeadership(to):
//
//  1. to must be a live member. Stop accepting; drain as in StepDown.
//  2. Wait until to's member data shows role standby and applied >= the
//     last committed index. Our member data asks for that index
//     (CatchUp), published at once (not at the loop's next tick); a
//     standby asked publishes the moment its applied index reaches it
//     (its loop waits on the applied index while asked, not on the tick).
//  3. Loop: write transfer {from, to, epoch, deadline = now +
//     TransferTimeout} (ephemeral), step down (re-queue).
//  4. Candidates that become lowest re-queue behind to (Election 4); to
//     takes over and deletes the record.
//  5. Wait until to's member data shows role primary with a newer epoch.
//
// Shutdown(ctx) (shutdown.go): a primary transfers to the live standby
// (not an observer) that applied the most, bounded by ctx, then Close; a
// standby, or a primary without one, just closes. A failed hand-off is
// returned (ErrTransfer) after Close all the same: the election then
// picks the next primary as after Close. Embedders stop with it (the
// demo's serve does, --handoff-timeout) so an upgrade's primary step
// costs one transfer, not an election.
//
// Operator requests (operator.go; roomlog transfer, roomlog checkpoint):
//
//  1. A tool writes operator {id, kind, to, epoch = the room's epoch}
//     (SubmitRequest) with the room znode's ACL.
//  2. The primary's request goroutine (one per non-observer member,
//     active while it leads) reads it with a watch, re-read every 2 s.
//     Every write of the record below is a Multi behind the term's fence
//     (logroom.Writer.FenceOps) checked against the version read: a
//     deposed primary writes nothing, of two claimers one wins. A request
//     for a later epoch is answered failed ("above the room's epoch") —
//     that answer lands only if we still lead, else the newer primary
//     takes it. For an earlier epoch: failed ("stale"). Created more than
//     a minute in the future, or more than 10 minutes ago: failed, not
//     carried out. Malformed but pending: failed, naming why. Bytes that
//     do not decode, or a state no writer uses, are left alone (logged
//     once per version) and are an error naming the znode for every
//     reader (ReadRequest, SubmitRequest: "delete it").
//  3. It claims the request (state "running", by, claim_epoch = its
//     epoch), carries it out through its own calls (TransferLeadership
//     to "to", or to the live standby that applied the most; Checkpoint,
//     bounded by 10 minutes) and records the outcome (behind the fence
//     while the term lasts; after a transfer ended it, checked against
//     its claim's version only). The term remembers
//     what it carried out, so a request is carried out at most once per
//     term and a lost answer is written again. A request found "running"
//     by this primary in this term but not carried out (the claim's reply
//     was lost) is carried out then; one "running" by a claimer that is
//     no live member (its term ended before it answered, or a forgery)
//     is answered failed, "outcome unknown", instead of stalling.
//  4. The tool reads the answer (ReadRequest) and deletes the znode
//     (ClearRequest). A request neither answered nor cleared 10 minutes
//     after it was written (or dated more than a minute in the future)
//     may be replaced.
//
// Checkpoints and deletion (checkpointer goroutine):
//
//  1. Trigger: CheckpointEveryEntries entries or CheckpointEveryBytes
//     bytes applied since the last checkpoint, or Checkpoint(ctx). Every
//     member checkpoints locally on the same policy, so any live member can
//     serve a bootstrap.
//  2. Primary only: Writer.Rotate (seal the open channel), wait until its
//     last index is applied.
//  3. Prune the local checkpoints to KeepCheckpoints-1 (the newest stay),
//     checkpoint.Create, checkpoint.Retain(KeepCheckpoints) (so at most
//     KeepCheckpoints exist at any moment, but for KeepCheckpoints 1 while
//     the new one is made, or a bootstrap fetch overlapping a checkpoint);
//     publish the index in member data.
//  4. Primary only: record it in checkpoints; delete channels as
//     invariant 5 allows, using a fresh read of every member's applied
//     index. The same deletion is retried every 2s, as lagging members
//     catch up.
//
// Bootstrap (standby tail, which owns store writes):
//
//  1. Trigger: Tail/Next returns logroom.ErrCompacted (the position lies in
//     a deleted channel — also an empty disk when channel 1 is gone).
//  2. need = oldest channel's FirstIndex - 1. Sources: the live members
//     (not us; only accepted member znodes) advertising a checkpoint >=
//     need with an address, best (highest index) first. None →
//     ErrNoCheckpointSource, retried with backoff.
//  3. checkpoint.Fetch into our checkpoint root, bounded by
//     Config.CheckpointFetch (connect, header and idle timeouts, no
//     redirects, every file and the total capped by the manifest and
//     MaxBytes) and checked for our origin (room and room czxid). A
//     failed, refused or stalled source → the next one; all failed →
//     ErrNoCheckpointSource naming each and why.
//  4. Under the store lock: close the store, move DataDir/store to
//     store.old (fsynced), checkpoint.Restore (our origin only),
//     store.Open; on failure put the old store back and delete the
//     checkpoint if it is unusable (never kept or advertised). Proposals
//     waiting on skipped indexes get ErrNoResponse.
//  5. Tail from applied+1 (after log matching).
//
// Step 3 is incremental and resumable (package checkpoint): files our
// store (FetchOptions.Local), our own checkpoints or an interrupted fetch
// already hold with the manifest's name, size and CRC are linked, not
// fetched; Status().LastBootstrap and the bootstrap_fetched/reused byte
// counters say what was sent and what was reused.
//
// # Bootstrap holds
//
// A bootstrap must not be outrun: a member fetching a checkpoint at index
// C needs the log from C+1 once it is installed, and a primary over
// RetainRoomBytes would otherwise delete those channels meanwhile, making
// the member bootstrap again, and again (hashicorp/raft#212).
//
//  1. Before its fetch the member publishes hold = C'+1 (C' the source's
//     advertised index, <= the checkpoint it is served) in its member
//     data and waits (at most 5s) to see it published, then checks the
//     log still starts at or before C'+1 (else the next source);
//     hold_prog, a counter that only grows during the bootstrap (bytes
//     received while files transfer; a heartbeat every 500ms while it
//     verifies local files before the transfer and while it installs;
//     then entries applied), is published with the applied index (at
//     most once per MemberUpdateInterval). A failed attempt keeps the
//     hold (the lower of its sources').
//  2. Once installed, the hold becomes applied+1 and follows the applied
//     index until it reaches the highest applied index another member
//     published right after the install (the primary's); then it is 0.
//  3. The primary, at each deletion check, reads every member's data
//     (decideHold): a hold counts while its hold, hold_prog or applied
//     index grew within Config.BootstrapHoldStall (default 30s) by the
//     primary's own clock, or was just seen, for at most
//     Config.BootstrapHoldMax (default 30m) since it was first seen, and
//     while it is not below the first index the log holds (such a
//     bootstrap is outrun already). A forced deletion (over the
//     retention bound) reads the members again right before it deletes.
//     decideDeletions then deletes
//     no channel whose last index is >= the lowest counting hold, not
//     even over RetainRoomBytes: appends get ErrRoomFull, as with any
//     retention that cannot be met. Status().HeldByBootstrap and
//     roomlog_replica_deletion_held_by_bootstrap show it.
//  4. A hold that stops growing for BootstrapHoldStall (a stuck transfer,
//     a source that keeps failing), that held for BootstrapHoldMax, or
//     that the log moved past lapses: logged, counted
//     (roomlog_replica_bootstrap_holds_lapsed_total), no longer kept. If
//     its log is then deleted, the member's tail finds its position
//     compacted after it installed its checkpoint, while it still holds:
//     ErrBootstrapOutrun, counted (roomlog_replica_bootstrap_outruns_total),
//     and it bootstraps again; after 3 outruns in a row it fails with
//     ErrBootstrapOutrun. A fetch that fails is not an outrun: the member
//     tries again with its hold, however often.
//
// Limits: the hold is published asynchronously; a deletion check that
// read the members just before it appeared may still delete (the member
// then finds the log moved past its source before it fetches, or, after
// its install, counts an outrun). The catch-up target is another
// member's published applied index, which a forged member node could
// inflate (bounded by BootstrapHoldMax).
//
// The simulation checks that no channel a live, progressing hold needs
// is ever deleted; a primary of a release before holds (v0.1.0) ignores
// them (CHANGELOG).
//
// Close: stop the loop (end the term, close the writer, stop the applier,
// delete our candidate and member nodes), stop every goroutine and wait for
// it (bounded on a stalled disk), close the client and the store. One
// kind is not waited for: a link probe's read on a silently cut link ends
// only when go-zookeeper's read timeout fires or the client is closed, so
// it ends right after Close closes the client. Idempotent.
//
// # Integrity
//
// Members compare their state continuously, not only when someone asks.
// The store folds every applied entry's index and the writes its Applier
// made, in order, into a chained SHA-256 (store.RunHash, stored in the
// same Pebble batch as the state and carried by checkpoints; O(1) per
// entry) and keeps the last 16384 entries' hashes in memory. Each member
// publishes its hash with its applied index (member data: hash, hash_at,
// hash_base) and, every loop tick, compares each peer's newest
// publication at an index it has applied and still holds the hash of
// (chains of another base, from a store written without the running hash,
// do not compare). The chain is cumulative: a member that agrees at an
// index agrees at every earlier one, and once two members differ they
// differ at every later index.
//
// A difference is decided by a vote (hashCheck). Our group is this member
// and the peers whose latest comparable hash equals ours; the peers whose
// latest hash differs form the other groups. Two of them join only on a
// comparison this member can check: one published (member data
// hash_agree: each peer it agrees with, with the index and hash of that
// comparison) that the other's hash equalled its own at an index where
// that hash is not ours — both then differ from us there and share one
// history; an agreement from before the divergence proves nothing. Peers
// with nothing comparable yet (behind, another chain base) are undecided;
// a publication seen ahead of our applied index is kept and compared once
// we get there, so a member that lags behind every publication still
// compares. This member fails with ErrDiverged, naming both members, the
// index and both hashes, only when another group is larger than ours would
// be even if every undecided peer joined it: a lone divergent member of
// three or more, once the others have compared with each other. A tie
// goes to the primary's side: a member that is not the primary also fails
// when the group the primary is in is at least as large as ours would be
// with every undecided peer joined to it (the log cannot say which state
// is right; the primary's is what clients read). That covers two live
// members that disagree (the standby fails), and a divergent member of
// four facing the primary and a standby that agree while the fourth is
// stuck behind the divergence (a member that cannot bootstrap stays
// undecided for good: before this rule the divergent one waited for it
// forever). A tie's verdict is not recorded in the data dir (a member
// that is only away, or still undecided, may change the count), unless
// most live members disagree with this one (the others' agreement among
// themselves not yet published, or a third history): that is an outvote,
// and recorded. Anything
// else — a peer in the minority, members still undecided, no primary, the
// primary on the smaller side, or no majority at all (three members,
// three histories) — is reported (Status().HashReport, a Warn log,
// roomlog_replica_hash_mismatches_total) and re-evaluated as publications
// arrive.
// Detection follows the later member's publication of the index (members
// publish their applied index at most twice per MemberUpdateInterval, and
// at once when the set of peers they agree with changes). A failed member
// gets out of the way (below) and never leads. When it was outvoted it
// also records the verdict in DataDir (roomlog-diverged.txt, synced), so
// Open on that data dir refuses with ErrDiverged until the operator
// replaces it (moves it away; the member then bootstraps from a peer's
// checkpoint). A peer that comes back on a healthy chain (a repaired
// member) counts by its latest comparison; a peer that leaves no longer
// votes. A peer whose store was replaced without a departure this member
// saw (a bootstrap in place, a quick restart) is on a new chain of the
// same base, and what was compared with its old one is dropped (the peer
// is undecided until its new chain is compared) when its publication goes
// back to a lower index or carries another hash at the same index (also
// a publication kept from when it was ahead of us), or when it publishes
// an agreement (hash_agree, with any peer), at or past the index where it
// disagreed with us, whose hash is ours at that index: the chain is
// cumulative, so the chain that made that agreement equals ours through
// the disagreement and is not the one compared. Only a chain equal to
// ours there carries our hash past it, so a divergent peer cannot clear
// a real disagreement this way (an agreement from before it is our hash
// too and does not count); dropping one can delay a verdict, never cause
// one, and a chain that still differs is compared again at its next
// publication we reach. Known limits: a member that bootstraps from a
// divergent member's checkpoint inherits its chain and then agrees with
// it, so it votes with it as if it were an independent witness; and a
// peer repaired in place whose new chain this member cannot check (its
// publications and agreements past the disagreement all 16384 entries or
// more behind our applied index) keeps the old chain's disagreement
// until one it can check arrives; and a publication kept from when the
// peer was ahead is compared when we reach it unless the peer's current
// publication proves its chain replaced at or past that index (an
// agreement carrying our hash there): proof only from below it cannot
// tell the two chains apart. A member publishes agreements only for the
// store its hash comes from (none between a bootstrap and its first
// comparison).
//
// What it catches: members whose Applier made different writes for the
// same entry — an Applier that is not deterministic (a map iteration, a
// clock read, a version skew between members), or one that read state
// that differs (bit rot or a bug under it) and wrote something else
// because of it. It does not read the stored state: data the Applier
// never reads again, corrupted at rest, or state that arrived in a
// checkpoint image, is not re-hashed (StateHash, a full scan, compares
// that on demand). Status() shows the member's Hash, HashIndex, HashBase,
// how many peer hashes it compared and how many differed; cmd/roomlog
// verify compares the members' published hashes at equal indexes. Chains
// of different bases (members whose stores were written by a version
// without the running hash, until they bootstrap from one another) do not
// compare; verify warns about them.
//
// The log is audited too: every 3 s, and at once when its once-a-second
// read of the channels shows a channel that lost a batch, a running member
// (primary or standby) runs logroom.Room.Audit (a sync, the chain, one
// batch read; bounded at 1 s, retried at the next interval, a Warn after
// five in a row did not complete; Status().Audited says when one last
// completed): its last applied batch
// must still be in the log (ErrDiverged otherwise), the channel chain must
// still hold, and no channel that is not being deleted may have lost a
// batch (a channel znode's child version counts deletes; an open channel
// carrying a deletion mark is forged). An acknowledged batch deleted by
// another client, which no reader would read again, fails every member
// with ErrCorrupt within about a second: the primary stops acknowledging
// instead of carrying on until the next takeover.
//
// # Failover timeline
//
// How fast the next primary leads depends on what the old one's end
// proves:
//
//   - It stops (Close, StepDown, TransferLeadership): it resigns its
//     candidate itself; the next in line leads at once (tens of ms).
//   - Its process dies (kill -9, a crash, the OOM killer): the next in line
//     holds a liveness stream to it (its checkpoint endpoint, path
//     "liveness": a response that never ends while it leads, a byte a
//     second, naming its election guid). The kernel closes that connection
//     and refuses new ones (or a proxy in front accepts and hangs up, or
//     another process answers with another guid): that proves the process
//     holding the candidate node is gone. The next in line deletes exactly
//     that node (a version-0 delete of the node it watched: one re-created
//     or already gone is left alone), its own predecessor watch fires and
//     the line moves on before the session expires: about 0.1 s from kill
//     to the first acknowledged proposal (TestKillPrimaryBeforeSessionExpiry,
//     the bench's failover-kill row). The deposition is counted
//     (Status().Depositions, roomlog_replica_depositions_total) and logged
//     with its evidence; the deposed session's member node is then looked
//     up every half second, and if it is still live twice the session
//     timeout later the evidence was wrong (DepositionsWrong,
//     roomlog_replica_depositions_wrong_total):
//     an unneeded takeover, never a safety issue, since every write is
//     fenced by the epoch, not by the session. A primary deposed wrongly
//     learns it without writing: while it leads, it watches its own
//     candidate node and its epoch znode (the term watch), and when the
//     node is deleted, the epoch znode moves past its writer's fence or
//     goes (the room was replaced), the core ends the term (evDeposed:
//     role standby, reason "deposed: …", re-queued) within a round trip
//     of the change, about 0.1 s (TestWronglyDeposedPrimaryStepsDown),
//     instead of at its next write; it then follows the new primary.
//     What counts as proof: after the stream broke, one bounded probe of
//     the address that is refused, accepted and hung up before any
//     answer (a TCP proxy in front of a dead process), or answered by
//     another process (another guid: the member restarted on the same
//     address). A network that actively rejects or resets connections
//     between the two members (a REJECT rule, a restarting proxy) looks
//     the same: that costs an unneeded takeover, counted as wrong, never
//     safety. The probe never follows a redirect.
//   - It pauses (SIGSTOP, a long GC), or its host or network goes silent:
//     nothing breaks, nothing is proven (silence on the stream is no
//     evidence, a probe that times out neither), and the session decides:
//     a pause shorter than the session costs no takeover; past it,
//     ZooKeeper expires the session and deletes the candidate (about
//     SessionTimeout).
//
// Which candidate leads: the lowest, unless another live candidate has
// applied more than TakeoverLagBound entries more (decideElection's
// lagging rule: it requeues behind it; a transfer naming it wins), so
// failover does not include a long catch-up. Known limit: a candidate
// that died while far ahead counts until its session expires (only the
// primary is watched), so then the failover waits for that session.
// Observers hold no candidate and never lead; they learn the primary from
// the members' data. A primary restarted on the same address answers its
// liveness endpoint with a new guid, which proves its old process gone.
//
// # Room version
//
// A room version (package version) names every format a writer in the
// room may use. The room meta records it (logroom, "Room version"), each
// channel records the version it was opened under, members advertise the
// versions they support (member data rv_min, rv_max: the binary's range,
// capped by Config.MaxRoomVersion; 1..1 for a member without them, a
// v0.1.0 binary), and an operator records a target (the version znode).
//
// Decisions (decideRoomVersion, table-tested): once a second every member
// reads the room version and the target with the channels. A member whose
// range excludes the room's version fails with ErrUnsupportedVersion
// (Open refuses before it applies anything; logroom's readers refuse a
// channel or batch beyond the binary at once). The primary moves the room
// to the target only when every live member's range holds it, one move at
// a time: a checkpoint whose rotation is Writer.RotateToVersion, so one
// fenced Multi seals the open channel, opens the next at the new version
// and rewrites the room meta; the checkpoint then covers everything
// written under the old version, and channel deletion (invariant 6)
// removes those channels as for any checkpoint. Otherwise every member's
// Status().RoomVersionBlocked (and ReadRoomVersion's Blocked) names the
// members that do not support it. Nothing moves the room without a
// target: after a rolling upgrade it stays at the old version until the
// operator raises it (so a rollback needs no downgrade until then).
//
// The core decides (evRoomVersion, once a second with the channel read) on
// the loop's cached view of the members; right before the
// rotation the primary decides again on fresh reads (room meta, target,
// channels, every member's data after a sync), so only a member that
// joins within that last round trip can be moved past. Such a member of
// this release or later meets the new version at its next once-a-second
// read, or a channel above its range in its reader (a member capped by
// MaxRoomVersion reads through a capped room), and fails with
// ErrUnsupportedVersion without applying anything of it. A v0.1.0 binary
// knows none of this: if zstd is in use it stops at the first zstd batch
// with a corruption error (after its usual confirmations), and applies
// nothing of it either. A room meta that disagrees with the newest
// channel (no rotation wrote it) is not obeyed: members report it in
// RoomVersionBlocked, and the next takeover refuses it as ErrCorrupt.
//
// Downgrade: set the lower target (every live member supports it). The
// primary's rotation opens the next channel at 1 and writes the room
// meta as record 2 at room version 1 (Lowering: still refused by v0.1.0),
// and writes only room version 1's formats from then on. Once no channel
// of a higher version remains (the change's checkpoint lets channel
// deletion remove them, invariant 6) and every live member has applied
// past the change, the primary rotates once more to write room meta
// record 1, which v0.1.0 opens: the downgrade is Complete
// (ReadRoomVersion). From then on a binary that supports only room
// version 1 can join, on its own data dir (it reads from its applied
// index, past the change) or from a checkpoint (taken at or after it).
// Room version 2 to 1 is the one downgrade there is (every store,
// manifest and member format is shared); v0.1.0 binaries then join
// again.
//
// # Disaster recovery
//
// The log lives in ZooKeeper, the state on the members; ZooKeeper can
// lose data (an ensemble restored from an older copy, a wiped data
// directory, a client that deleted the room). What a member sees, and
// does:
//
//   - ZooKeeper restored from an older copy, or wiped, under running
//     members: every server refuses a session that has seen a newer zxid
//     than it holds, so go-zookeeper reconnects forever and the member is
//     merely disconnected. A member disconnected for SessionTimeout/4
//     probes, every SessionTimeout/4, with a new session (last zxid 0,
//     accepted), reading without writing: the room missing, another
//     incarnation (another czxid), or a log that ends below or holds
//     another batch at an index the member applied (logroom MatchLog)
//     fails the member with ErrRoomLost naming what was found and saying
//     to run `roomlog reseed`. Measured (TestZooKeeperDataLoss): 0.26–0.44 s
//     after ZooKeeper serves again with the older copy, 0.06–1.04 s after
//     it serves again empty. A probe that finds the room intact while the
//     member's own session stays refused for a whole session timeout and
//     two of go-zookeeper's reconnect pauses (a client renewing an expired
//     session needs up to that: it learns the expiry on one connection and
//     opens a session on the next, a second apart with one server) fails
//     it with ErrSessionRefused ("restart the member"): never suspended
//     forever with nothing said. A probe that cannot reach ZooKeeper is
//     no verdict (a partition: the member stays disconnected, and says so).
//
//   - The room deleted (or re-created) under live sessions: the log audit
//     (every 3 s, and at once when a channel read shows a lost batch)
//     checks the room znode's czxid after its sync, and batches deleted
//     from a channel that is not being compacted (logroom
//     ErrEntriesRemoved): ErrRoomLost, 1.8 s after the deletion in the
//     test. The membership keeper and the election line never re-create
//     the room's directories (KeepDir), so a deleted room stays deleted.
//
//   - A member that knows an index was committed (its own applies, and
//     the primary's published applied index) refuses a log that ends
//     below it, in the probe, the audit and before a takeover: a standby
//     that lagged the primary when ZooKeeper was restored from an older
//     copy still finds its own last batch in the log, but must not take
//     over and write the lost indexes again with other entries. (Restored
//     3-server ensembles elect a leader in a new ZooKeeper epoch, whose
//     zxids pass every old one, so there the members reconnect instead of
//     being refused; they audit at once on every reconnect.)
//
//   - Restarted on its data dir: a member holding state never creates the
//     room (logroom.RoomOptions.NoCreate). Open refuses with ErrRoomLost
//     when the room is missing, is another incarnation (not a re-seed of
//     ours at our position), or its log no longer holds the last batch the
//     member applied, before it joins or writes anything.
//
//   - Tombstone: a member that finds the room missing writes a persistent
//     znode in its place (logroom.WriteTombstone: text saying who found
//     what, when, and how to recover). logroom.OpenRoom refuses it with
//     ErrRoomLost, so a member started on an empty disk after a wipe
//     cannot begin a new history at index 1 in the lost room's place.
//     Reseed replaces it; deleting it by hand discards the room.
//
//   - Marked lost: a member whose verdict is that the log lost what it
//     applied (logLost: the audit, a barrier, a takeover, the probe, Open)
//     marks the room lost (logroom.MarkLost): <room>/<epoch znode>/lost
//     with what it found, created in one Multi with a write of the epoch
//     znode, so the sitting writer is fenced, every takeover after it is
//     refused (decideTakeover: fail), OpenRoom refuses (an empty member,
//     or one restarted on a data dir the older log still holds), and
//     running members fail at their next audit (checkRoomIdentity).
//     Without it a member that had just bootstrapped from a peer's
//     checkpoint below the copy's end took over in the rolled-back room
//     (chaos seed 696214916). Reseed reads and replaces a marked room like
//     any room of ours. The decision is
//     the core's: a failure that is such a verdict emits aMarkLost, the
//     loop marks through its session and answers evMarked, and only a
//     mark in place (or one no retry can make: the room gone, a refusal)
//     lets the core emit aResign, so the marker is in place before the
//     member's candidate goes (the probe marks at once through its own
//     session, since ours is refused; Open at once). One step is out at a
//     time; a mark whose outcome is unknown is tried again markRetryPause
//     (1 s) after its answer. The simulation's rollbacks exercise it, the
//     finder auditing at its own pace after the restore and a mark's
//     request or reply lost one time in four; without the mark (a planted
//     bug) a member whose state the older copy holds takes over and
//     acknowledges at the lost indexes after the finder's verdict, and a
//     core that resigns before its mark's answer (another) is named.
//
// A failed member acknowledges nothing more (a disconnected or failed
// primary stops accepting), so every acknowledged entry is on some
// member's disk. Limits: when no member that applied past what an
// ensemble restored from an older copy holds runs to find it (and mark
// the room), a member whose state is within the copy cannot tell, nor can
// a standby whose last news of the primary's applied index is older than
// the copy (the primary publishes it about every MemberUpdateInterval);
// and the mark comes after the finding: a finder that is cut off or slow
// after the restore (its audit runs on reconnect, its mark before it
// resigns) leaves a window in which a member whose state is within the
// copy may be elected and acknowledge at lost indexes (the mark then
// fences it). A wipe under a room whose members were all down leaves no
// tombstone. When the mark's outcome is unknown (a connection loss, its
// bound), the finder keeps its candidate (it does not resign) and tries
// again a second later, until it marks, its session ends or it is
// closed (Close marks first too); an error no retry mends (no access, a
// corrupt room znode) is logged and the resignation goes ahead, and a
// room gone meanwhile gets a tombstone. Keep every member of the room
// stopped from the first ErrRoomLost until the re-seed.
//
// Re-seed (Reseed; `roomlog reseed ROOM --from DIR,DIR…`): with every
// member stopped, from their data dirs (opened read-only):
//
//  1. The seed is the survivor with the highest (epoch, applied index);
//     every other must be a prefix of its history: the seed's store
//     history record (store.PointAt) at the other's applied index must
//     hold the same epoch and batch identity, and the same running hash
//     when both chains share a base. A survivor that disagrees, or that is
//     more than store.HistoryWindow entries behind (cannot be compared),
//     makes Reseed refuse (ErrReseedRefused, naming both and the index)
//     unless ReseedConfig.Trust names the seed; those that disagree with
//     it are then left out. A survivor ahead of a trusted seed is refused
//     too (its entries would be lost). A data dir that the integrity check
//     condemned (roomlog-diverged.txt) is refused.
//  2. What ZooKeeper still holds under the name: ephemeral nodes under
//     members/ and election/ must go (sessions of the dead members expire;
//     waited for up to two session timeouts, else refused naming them);
//     the survivors' incarnation that still holds the seed's position is
//     refused (ZooKeeper lost nothing: start the members; Force overrides);
//     another incarnation holding entries is refused (they would be lost;
//     Force). The highest epoch it records is read.
//  3. The room is deleted (children first; a Multi per directory, so a
//     node re-created meanwhile is caught) and created anew in one Multi
//     (logroom.SeedRoom): room meta (the old room's version, else 1),
//     epoch znode at E = 1 + the highest epoch any survivor applied or the
//     old room recorded, channels/, and an open channel 1 whose first index
//     is seed + 1. Indexes are never reused; the first writer takes E + 1.
//  4. <room>/reseed records the seed (msgpack {v:1, prev: the survivors'
//     incarnation czxid, index, epoch, first, count, crc, hash, hash_base,
//     from, new_epoch, at}).
//  5. The survivors' markers (roomlog-member.json) are rewritten, fsynced,
//     to the new incarnation: the seed and those at its position resume
//     there; those behind need index < seed + 1, below the log, so they
//     bootstrap from a peer's checkpoint (the seed's member, started
//     first, drops its old-incarnation checkpoints and takes a new one;
//     and any member whose store holds the log's start takes one when no
//     live member serves a checkpoint covering it, offerCheckpoint: the
//     seed's member may be a standby while a member behind it is elected,
//     and that member cannot take over before it bootstraps).
//     The request table travels in the store and in checkpoints, so
//     exactly-once holds across the recovery. A data dir left out, or not
//     given, is refused at Open (ErrRoomLost and ErrWrongDataDir, naming
//     the re-seed) unless it is at exactly the seed's position: move it
//     away to let the member bootstrap.
//
// An interrupted re-seed is run again: the room missing or half-deleted
// is created; a room this seed already created (its reseed record names
// the survivors' incarnation and the seed's position) only gets the
// markers rewritten. Guarantee: every entry any given survivor applied
// (and therefore every acknowledged entry any of them holds) is in the
// re-seeded room's state, and the members converge on one state hash.
//
// # Errors
//
// ErrNotPrimary (as *NotPrimaryError), ErrOutcomeUnknown, ErrNoResponse,
// ErrFenced, ErrQueueFull, ErrRequestConflict, ErrClosed, ErrFailed, ErrTransfer,
// ErrDuplicateID, ErrWrongDataDir, ErrRoomLost, ErrSessionRefused,
// ErrReseedRefused, ErrInvalidConfig,
// ErrNoCheckpointSource (a source that failed for a TLS reason wraps
// ErrPeerTLS), ErrUnsupportedVersion (= logroom's),
// ErrDiverged (= logroom.ErrDiverged); logroom's
// ErrEntryTooLarge, ErrRoomFull and ErrCorrupt pass through (wrapped).
//
// # Trust boundary
//
// ZooKeeper's contents and peers' answers are input, not truth:
//
//   - Log matching. The store keeps, in the same Pebble batch as the
//     state, the identity (epoch, first, count, CRC) of the last log batch
//     applied. Before the standby tail starts (at Open and every restart)
//     and before a takeover writes anything, logroom.Room.MatchLog checks
//     that the log still holds that batch at that index and reaches our
//     applied index. Anything else is ErrDiverged: the replica fails
//     (stops applying and writing, keeps its state, Status().Err names the
//     room, channel, znode and both identities). roomlog detects this; it
//     cannot repair it. The operator compares the named batch with the
//     other members' state (StateHash at the same index) and decides which
//     history is right; starting a fresh member or re-creating channels
//     does not help (the chain check refuses a re-created channel).
//   - The channel chain, the epoch rule and corrupt batches are checked by
//     logroom (see its doc); a room that fails them is ErrCorrupt, confirmed
//     by repeated attempts, then fatal.
//   - Only accepted member and candidate znodes count (see "Znodes").
//   - Checkpoints carry their origin and are fetched with bounds (see
//     Bootstrap).
//   - With Config.PeerTLS (peertls.go) the checkpoint endpoint and the
//     liveness stream are HTTPS with mutual TLS: a peer's certificate must
//     be signed by the CA file (and name the address the peer
//     advertises) on both sides, the member advertises https://, refuses
//     to fetch from, probe or follow a plain http peer, and every TLS
//     failure (untrusted, expired, plain against TLS) is ErrPeerTLS with
//     the reason, at once. The bearer token then never crosses the
//     network in clear. Rotated certificate files reach the next
//     connection; peer connections are not kept alive between fetches.
//   - A failed replica gets out of the way: it deletes its candidate and
//     member znodes (retried each tick until done, so failover proceeds),
//     answers waiting proposals (ErrNoResponse wrapping ErrFailed), wakes
//     WaitApplied and Barrier callers, serves no checkpoint (503) and keeps
//     reporting Status() with role "failed" and the cause.
//   - The local disk is bounded too: a store operation still running after
//     StoreOptions.DiskStallTimeout (default 20 s; see store, "Disk
//     stalls") fails the replica with store.ErrDiskStalled, and it gets out
//     of the way as above: a primary whose disk hangs is replaced within
//     about DiskStallTimeout + 2 s + a takeover (failover's
//     TestPrimaryDiskStall). Waits for goroutines that may be stuck on
//     that disk end when the stall is declared, and 10 s after
//     DiskStallTimeout at the latest (a restore or directory swap no store watches:
//     the goroutine is then presumed stuck and the replica fails the same
//     way); Close returns ErrDiskStalled without them. A failed replica
//     stays failed: restart the process once the disk is fixed.
//
// # Observability
//
// Status() reports everything without touching ZooKeeper: role, epoch,
// applied, committed seen, lag, whether it is an observer, members (id,
// addr, role, observer, applied, checkpoint), primary id/addr, connection state, open channel, room bytes,
// local checkpoint, bootstraps. RoleChanges() delivers role changes on a
// buffered channel that drops the oldest when the consumer lags.
//
// # Metrics
//
// With Config.Registerer, the replica registers the collectors below and
// logroom's (writer, reader, room: logroom's doc, "Metrics"), all labelled
// room and member; Close unregisters them. Gauges marked (scrape) are read
// from Status when scraped and cost nothing between scrapes.
//
//	roomlog_replica_role{role}                 gauge (scrape) 1 for the current role: who leads, is anyone failed?
//	roomlog_replica_observer                   gauge (scrape) 1 for an observer (Config.Observer: never leads)
//	roomlog_replica_epoch                      gauge (scrape) did a failover happen (it grows)?
//	roomlog_replica_applied_index              gauge (scrape) how far has this member applied?
//	roomlog_replica_committed_index            gauge (scrape) how far is the log committed, as seen here?
//	roomlog_replica_apply_lag_entries          gauge (scrape) is my standby keeping up? (committed - applied)
//	roomlog_replica_apply_lag_seconds          histogram      standby: request stamp to apply here (ProposeRequest entries only; two clocks)
//	roomlog_replica_member_applied_delta{peer} gauge (scrape) primary: how far behind is each member (published at most every MemberUpdateInterval)?
//	roomlog_replica_members                    gauge (scrape) how many members are live?
//	roomlog_replica_hash_compared_total        counter (scrape) peers' running hashes compared with ours (integrity)
//	roomlog_replica_hash_mismatches_total      counter (scrape) of those, how many differed: any is a divergence somewhere
//	roomlog_replica_diverged                   gauge (scrape) 1 when this member stopped with ErrDiverged
//	roomlog_replica_room_lost                  gauge (scrape) 1 when this member stopped with ErrRoomLost
//	roomlog_replica_room_version_blocked       gauge (scrape) 1 while a target room version is set and not reached
//	roomlog_replica_tls_cert_not_after_seconds{link} gauge (scrape) when the certificate in use expires (zookeeper, peer)
//	roomlog_replica_tls_files_error{link}      gauge (scrape) 1 while the link's TLS files are refused (tlsfiles.Source.Err)
//	roomlog_replica_foreign_znodes             gauge (scrape) has someone forged znodes in the room?
//	roomlog_replica_leader_changes_total       counter        how often does leadership move?
//	roomlog_replica_takeover_seconds           histogram      how long from winning the election to accepting proposals?
//	roomlog_replica_zk_connected               gauge (scrape) is the ZooKeeper session usable now?
//	roomlog_replica_zk_suspended_seconds       gauge (scrape) for how long has it been down?
//	roomlog_replica_zk_session_expiries_total  counter        how often did the session expire?
//	roomlog_replica_proposals_total{outcome}   counter        ok, duplicate, not_primary, queue_full, fenced, outcome_unknown, no_response, conflict, rejected, closed, canceled
//	roomlog_replica_propose_seconds            histogram      how long does a successful proposal take?
//	roomlog_replica_proposals_pending          gauge (scrape) how many proposals are in flight?
//	roomlog_replica_checkpoint_seconds         histogram      how long do checkpoints take?
//	roomlog_replica_checkpoint_bytes           gauge          how big is the newest checkpoint?
//	roomlog_replica_checkpoint_failures_total  counter        are checkpoints failing?
//	roomlog_replica_checkpoint_index           gauge (scrape) how recent is the newest local checkpoint?
//	roomlog_replica_bootstrap_bytes_total      counter        how much state did bootstraps restore?
//	roomlog_replica_bootstrap_fetched_bytes_total counter     how much of it came over the network?
//	roomlog_replica_bootstrap_reused_bytes_total counter      how much was linked locally or kept from an interrupted fetch?
//	roomlog_replica_bootstrap_hold             gauge (scrape) the first index our bootstrap still needs (0: none)
//	roomlog_replica_bootstrap_outruns_total    counter (scrape) bootstraps whose log was deleted first (ErrBootstrapOutrun)
//	roomlog_replica_deletion_held_by_bootstrap gauge (scrape) primary: the hold its last deletion check kept (0: none)
//	roomlog_replica_bootstrap_holds_lapsed_total counter (scrape) primary: holds dropped for making no progress
//	roomlog_replica_bootstrap_seconds          histogram      how long did bootstraps take?
//	roomlog_replica_bootstraps                 gauge (scrape) how many since Open?
//	roomlog_replica_room_bytes                 gauge (scrape) data bytes of the room's batch znodes, open channel included
//	roomlog_replica_room_charged_bytes         gauge (scrape) what the bound counts (bytes + 480 per znode): is the room near it?
//	roomlog_replica_room_max_bytes             gauge (scrape) the bound (Config.Writer.MaxRoomBytes)
//	roomlog_replica_room_channels              gauge (scrape) are channels being deleted?
package replica

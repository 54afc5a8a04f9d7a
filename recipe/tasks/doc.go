// Package tasks is the seed's state-aware master–worker recipe on
// ZooKeeper: clients submit tasks, one fenced assigner (the master) gives
// each to a live worker, workers report results, and clients wait for
// them. A worker's loss (its membership node gone) moves its unfinished
// tasks to another worker; a new assigner resumes from what is in
// ZooKeeper; every assignment is a Multi behind the assigner's election
// term or lock lease, so a deposed assigner that wakes up cannot assign.
//
//	// client
//	err := tasks.Submit(ctx, client, "/dfs/rerepl", "blk-42", spec)   // idempotent per id
//	res, err := tasks.WaitResult(ctx, client, "/dfs/rerepl", "blk-42")
//	err = tasks.DeleteResult(ctx, client, "/dfs/rerepl", "blk-42")
//
//	// worker (a chunk server)
//	w, err := tasks.JoinWorker(ctx, client, "/dfs/rerepl", "cs-7", tasks.WorkerOptions{})
//	for a := range w.Assignments() {
//	    out, err := execute(a.Data, a.Token)            // a.Attempt counts reassignments
//	    _ = w.Report(ctx, a, err == nil, out)          // ErrReassigned: it is no longer ours
//	}
//	w.Close()
//
//	// master, for each term it wins
//	term, err := participant.Await(ctx)
//	a, err := tasks.NewAssigner(tasks.AssignerConfig{Client: client, Dir: "/dfs/rerepl", Fence: term})
//	err = a.Run(ctx)                                   // ErrFenced once the term ends
//
// # Znode layout
//
// Under the recipe's directory D (every directory created on demand,
// PERSISTENT, empty data, the client's ACL):
//
//	D/tasks                   data: empty, or the byte total the assigner
//	                          published (below). Same for D/results.
//	D/tasks/t-<id>            PERSISTENT: submitted, not yet assigned.
//	                          msgpack {v: 1, id, data, submitted}.
//	D/assign/<worker>         PERSISTENT, created by the worker before it
//	                          joins (and by the assigner before it assigns).
//	D/assign/<worker>/t-<id>  PERSISTENT: assigned. msgpack {v: 1, id,
//	                          data, worker, token, attempt, submitted}.
//	                          Never written after creation (version 0).
//	D/reports/<worker>/r-<id> PERSISTENT, per-worker ACLs only (below): a
//	                          result the worker reported, as
//	                          D/results/t-<id>; the assigner moves it.
//	D/workers/<worker>        EPHEMERAL: the worker's membership node
//	                          (package membership; data: WorkerOptions.Data).
//	D/results/t-<id>          PERSISTENT: finished. msgpack {v: 1, id,
//	                          worker, attempt, ok, result, at, sum}; sum is
//	                          the first 16 bytes of SHA-256 of the task's
//	                          data (Submit compares it).
//
// A byte total is msgpack {v: 1, bytes, cversion, max}: the cost of the
// directory's children as the assigner listed them at child version
// (Stat.Cversion) cversion — for each child, its name and data lengths
// plus 400 bytes, what a znode costs ZooKeeper's heap — and the bound
// Submit enforces (AssignerConfig.MaxWaitingBytes, MaxFinishedBytes).
// Children are never written after creation and every create or delete
// under the directory moves its cversion by one, so the directory's
// cost now is at most bytes + (Cversion now − cversion) × the largest
// cost one child can have (a task of MaxDataBytes, a result of
// MaxResultBytes, with the longest names). An empty or undecodable
// total counts as none: a directory of an earlier release, or one no
// assigner of this release has listed yet.
//
// id is a task id: a valid znode name of at most MaxIDLen bytes; worker
// is a valid znode name. submitted and at are the writer's clock in Unix
// milliseconds, informational only: no decision reads a clock of another
// machine. token is the assigner's fencing token (Fence.Token when the
// Fence has one: a term's or lease's czxid, growing with every term);
// attempt is 1 at the first assignment and +1 at each reassignment. A
// task lives in exactly one of tasks/, assign/<worker>/ and results/ at a
// time, moved by one Multi each step, always forward: tasks → assign →
// (assign of another worker)* → results → deleted.
//
// Acceptance (trust boundary): a task, assignment or result node counts
// only if its name is t-<valid id>, it is persistent, its data passes the
// bounded msgpack check and decodes as v1 with the id of its name (an
// assignment: with the worker of its directory and an attempt >= 1; a
// result: a valid worker, attempt >= 1, a 16-byte sum), and its payload
// is within MaxDataBytes / MaxResultBytes. Anything else is foreign:
// ignored, logged once and listed by Assigner.Foreign (and, for a
// worker's own directory, Worker.Foreign); never assigned, never
// delivered, never deleted — except that a result node whose name parses
// is deleted once ResultTTL passed, by name, without its data being read. Submit and ReadResult of an id whose node is
// foreign return ErrMalformed naming it. A worker counts as live only by
// its membership node (ephemeral, valid name): an assignment under the
// directory of a worker that is not a member is reassigned. Nothing
// panics on hostile data; decoding allocates in proportion to the input.
// A well-formed node forged by a client that may write D cannot be told
// from a real one: keep D's ACL to the recipe's clients
// (zkx.DialConfig.Auth, or ACLIdentities with TLS).
//
// # ACLs
//
// By default every node gets its creator's ACL (the client's): anyone
// the masters' ACL names may act as any worker. With
// AssignerConfig.WorkerACL (each worker's own identity, x509 or
// digest) and WorkerIdentities, each worker is granted only its part.
// ZooKeeper checks an ACL per znode, never inherited, and checks CREATE
// and DELETE on the parent, for any child name; exists needs no
// permission. So:
//
//	D, D/tasks, D/results, D/assign   the client's ACL (masters, clients):
//	                                  workers get nothing there
//	D/workers                         + every worker: CREATE, DELETE
//	D/reports                         the client's ACL
//	D/assign/<w>                      + w: READ
//	D/assign/<w>/t-<id>               + w: READ
//	D/reports/<w>                     + w: READ, CREATE
//	D/reports/<w>/r-<id>              the worker's client ACL (its creator)
//	D/results/t-<id> (moved from w)   + w: READ
//
// The assigner creates D/workers (when missing), D/reports, and each
// live worker's two directories (a worker may not create them:
// JoinWorker goes on and its loop lists its directory once there).
// Only the assigner creates or deletes in D/assign/<w>: every
// assignment there is the assigner's. A worker cannot create in
// D/results, so its Report writes r-<id> in D/reports/<w>, in a Multi
// that checks its assignment node (Worker 3), and the assigner moves
// it (Assigner 2a) only when it matches an assignment of that worker
// read in the same round: D/assign/<w>/t-<id>, of the same worker,
// attempt and data sum. Anything else in D/reports/<w> (a bad name,
// bad data, a task not assigned to w, another attempt) is deleted,
// fenced, and listed by Assigner.Foreign (the last 16 per worker). So
// a result comes only from the worker holding the task's attempt, and
// D/reports/<w> holds at most one report per assignment; a worker that
// puts more than MaxOpen + 64 nodes there is not listed (its reports
// wait for an operator). What a worker cannot do: read, list, create,
// write or delete anything under another worker's directories, create
// or delete assignments (inject a task, hijack or drop one), report a
// task it does not hold, submit or delete tasks or results, write the
// published totals, create or delete worker directories, write another
// member's node.
// What it can, as ZooKeeper cannot restrict a CREATE or DELETE to one
// child name: create or delete membership nodes of other worker ids in
// D/workers — register as a worker that is away (its tasks then wait
// until that node goes) or make a live worker look gone (its tasks are
// reassigned; its Reports are refused). That is liveness, not the
// integrity of tasks or results. Nodes created before WorkerACL was set
// keep their ACL (zkx.SetACLTree brings a tree in line); so do
// directories a worker created itself because it started before any
// assigner (start the assigner first, or create D beforehand).
//
// # Protocol
//
// Submit (client):
//
//  1. Look for the id along the way a task moves, in that order:
//     D/tasks/t-<id>, then D/assign/*/t-<id>, then D/results/t-<id>. A
//     task moving meanwhile is found further on. Found with the same data
//     (for a result: the same sum): nil, nothing written. With other
//     data: ErrConflict.
//  2. Caps, from one getData of D/tasks and one of D/results: either
//     holding DefaultMaxOpen children (Stat.NumChildren): ErrTooMany.
//     Where a byte total is published: the estimate above plus the
//     task's node passing D/tasks' max, or the estimate plus the
//     largest result passing D/results' max: ErrFull, naming the
//     directory, the estimate and the bound. Without a total, nodes
//     are counted only, as before.
//  3. Create D/tasks/t-<id>. A connection loss is retried; a retry that
//     finds the node (NodeExists: our lost create, or a racing Submit)
//     goes back to 1, which compares.
//
// Worker:
//
//  1. JoinWorker: create D/assign/<worker> (the seed's order: before the
//     membership node; refused with ErrNoAuth under per-worker ACLs, it
//     goes on: the assigner creates it), then join D/workers (package
//     membership keeps the ephemeral node, re-creating it after a
//     session expiry).
//  2. A goroutine lists D/assign/<worker> with a child watch (ChildrenW,
//     re-armed only once it fired), reads each child not yet read in the
//     current session, and delivers the accepted ones on Assignments in
//     creation order, each once. A child gone before it was received is
//     not delivered. After a session expiry (a new session id) it Syncs
//     and delivers again every assignment still there: a worker whose
//     session was lost cannot tell what the assigner did meanwhile. Its
//     directory found deleted (by an operator, or by the assigner while
//     the worker was not a member: Assigner 5), it creates it again and
//     lists it again, arming a new watch.
//  3. Report: check that the assignment node is still the one delivered
//     (its czxid), then one Multi: delete it at the version delivered,
//     create D/results/t-<id>. The node gone or re-created (the task was
//     reassigned: the worker's session was lost) is ErrReassigned,
//     nothing written. A connection loss: Sync, then read back — the
//     result ours (same worker and attempt) is nil, the assignment still
//     there is sent again. Refused (ErrNoAuth) the delete or the create
//     in D/results (per-worker ACLs): from then on the Multi checks the
//     assignment at the version delivered, leaving it in place, and
//     creates D/reports/<worker>/r-<id>; reading back looks there and in
//     D/results. Its report directory missing: wait (backoff) for the
//     assigner to create it.
//
// Assigner (one Run per term or lease; the seed's master):
//
//  1. Create the directories; watch D/workers (package membership: joins
//     and leaves, rebuilt after a session expiry).
//  2. Round: Sync if the session changed, then read everything it acts
//     on — the members, D/assign and each worker directory in it, D/results
//     (child watch) and D/tasks (child watch) — reading each node once
//     while it stays listed. This is the recovery: a new assigner starts
//     with a round, and every round after a failure is one. The
//     listings of D/tasks and D/results carry their Stat: the cost of
//     their children (each task node's size from its read, each
//     result's from one exists, both once while it stays listed; all
//     read again when the cversion moved by more than the names that
//     came and went: a node deleted and created again unseen) is
//     published, fenced, in each directory's data when it differs
//     from what this Run published last. The round's own moves are
//     published by the next round, which their child watch starts.
//     Each worker directory is listed with a child watch (re-armed
//     once it fired); with per-worker ACLs so are D/reports and each
//     D/reports/<w>: a worker's report there starts a round.
//     2a. Per-worker ACLs: move each D/reports/<w>/r-<id> that matches
//     an assignment D/assign/<w>/t-<id> read in this round (same id,
//     worker, attempt and data sum) to D/results/t-<id>, same data, in
//     one fenced Multi that deletes it and the assignment, each at the
//     version read. Delete, fenced, every other node there ("ACLs"). A
//     task node waiting with that id waits for the next round, which
//     compares it with the result (3).
//  3. Duplicates: a task node whose id is also assigned or finished (a
//     Submit that raced a move, or the seed's half-done assignment, when
//     the create and the delete were two steps) is deleted, fenced, if
//     its data is the same, in a Multi that checks the open node is still
//     there (the assignment at the version read, the result by its
//     existence): read earlier in the round, it may have finished and
//     its result been deleted since, and the task node be a new
//     submission, which then waits for the next round. With other data
//     it is reported and waits until the open one's result is deleted.
//     A foreign node at D/results/t-<id> (its name parses, its data does
//     not) is reported with the task node, which waits until that node is
//     gone (ResultTTL, step 7, or an operator): its worker could not
//     report there.
//  4. Reassign every assignment of a worker that is not a member: one
//     fenced Multi deletes it (at the version read) and creates it under
//     the picked worker with attempt+1. Workers offered: members with
//     fewer than MaxOpen assignments, room for the task's data within
//     MaxOpenBytes, and no node of the task's name in their directory (a
//     foreign one), least loaded first. No worker: it waits under the
//     old one.
//  5. Delete, fenced, the empty directory of every worker that is not a
//     member (a Submit reads every directory). A worker that joins
//     meanwhile creates it again (Worker 2), and so does the assigner
//     before it assigns, and for every live worker without one.
//  6. Assign every waiting task, in creation order, to a worker offered
//     as in 4: one fenced Multi creates D/assign/<w>/t-<id> (attempt 1)
//     and deletes D/tasks/t-<id> (at the version read). Not while the
//     results listed cost MaxFinishedBytes or more: the tasks wait
//     until results are deleted (their child watch starts a round).
//  7. Expire the results first seen by this Run more than ResultTTL ago
//     (fenced delete).
//  8. Wait for a child watch, a membership change, the next expiry, a
//     session event or a retry; go to 2. A round that failed, or whose
//     write found the state changed under it, is retried after a backoff
//     (20 ms doubling to 1 s, reset by a round that did not fail), or at
//     the first change: a node the recipe cannot consume costs a round
//     per delay, never a busy loop (Stats.Rounds counts them).
//
// Every write of the assigner consumes the node it moves: it deletes it
// at the version read, in the same Multi as the create. So a Multi whose
// outcome was lost and a retry of it cannot both land, and a task is
// never under two workers at once, whatever the timing. The fence (the
// Fence's guard ops, first in every Multi) makes each commit only while
// the assigner leads: a deposed assigner's Multi fails as a whole, and Run
// returns ErrFenced. When the Fence has Done (a Term, a Lease), Run also
// stops as soon as it closes, and sends nothing once its Err is set.
//
// # Disconnection and expiry
//
//   - Client (Submit, ReadResult, WaitResult, DeleteResult): requests wait
//     for the session within ctx; reads and deletes are retried on
//     connection loss; Submit's create is resolved by reading back.
//     WaitResult re-arms its exists watch after every event, an expiry's
//     included: a result created meanwhile is found by the re-arming read.
//   - Worker, disconnected (SUSPENDED): deliveries stop; its session and
//     nodes may still be alive. Reconnected in the same session: the
//     watch fires for what changed; nothing is delivered twice. Expired
//     (LOST): the membership node is gone, and the assigner, once it sees
//     that, reassigns the worker's tasks; the worker re-joins in the new
//     session and is delivered again whatever is still in its directory.
//     A Report of an attempt moved away is ErrReassigned: the worker must
//     not consider its side effects accepted (use Token and Attempt for
//     systems outside ZooKeeper).
//   - Assigner: a term or lease ends at a disconnection beyond its grace
//     (0 by default) or at expiry; Run returns ErrFenced. Without a Done
//     (a Guard-only Fence), a disconnected assigner's writes wait for the
//     session, and ZooKeeper refuses them once the fence node is gone.
//     Any other connection loss ends a round; the next round reads
//     everything again before it writes (the seed's "check before
//     re-creating").
//
// # Bounds
//
//   - D/tasks and D/results: Submit refuses at DefaultMaxOpen children
//     (ErrTooMany) and, once an assigner published their byte totals,
//     at MaxWaitingBytes and MaxFinishedBytes (ErrFull; defaults
//     DefaultMaxWaitingBytes and DefaultMaxFinishedBytes, 64 MiB each),
//     soft by the number of concurrent submitters (each checks before
//     it creates). Changes since the last total are charged at the
//     largest node: while no assigner publishes (none runs, or one of
//     an earlier release), Submit refuses after about max / 66 KiB
//     changes, which bounds the directory too; a directory whose total
//     an operator empties counts nodes only again. D/results beyond
//     Submit's check grows by the tasks waiting and assigned then, and
//     no more once the assigner holds new assignments at the bound
//     (Assigner 6): at most MaxFinishedBytes plus one result per
//     assignment open. A client that may write D can set any node's
//     data: the bounds hold for the recipe's own writers.
//   - D/reports/<worker> (per-worker ACLs): at most one report per
//     assignment of the worker, each within MaxResultBytes; anything
//     else is deleted by the next round; past MaxOpen + 64 nodes it is
//     not listed.
//   - D/assign/<worker>: at most MaxOpen (AssignerConfig, default
//     DefaultMaxOpen, at most MaxOpenLimit) assignments holding at most
//     MaxOpenBytes (default DefaultMaxOpenBytes) of task data; tasks wait
//     in D/tasks beyond that. Each node cap keeps a getChildren reply
//     well under ZooKeeper's 1 MiB packet limit.
//   - Results are deleted by DeleteResult, or by the assigner ResultTTL
//     after it first saw them (a new assigner counts again: a result may
//     live up to ResultTTL after each failover).
//   - Task data and results: MaxDataBytes, MaxResultBytes.
//   - D/assign holds the directories of the members and of the workers
//     that still have assignments (or foreign nodes): a running assigner
//     deletes the others once empty.
//
// Cost: a Submit is about 4 + W reads (W worker directories) and one
// create. An assigner round lists D/tasks, D/results, D/assign and each
// of its W directories, reads each new node once (a new result: one
// exists), writes the byte totals that changed, and one Multi per task
// moved: rounds coalesce bursts of changes.
//
// # Guarantees
//
//   - A task is under at most one worker at a time (each move deletes the
//     node it moves, in the Multi that creates the next one).
//   - Each task has at most one result, and only the worker holding the
//     attempt delivered to it can create it; an attempt moved away cannot
//     be reported.
//   - No task is lost: it stays in ZooKeeper (waiting, assigned, or as a
//     result) through the loss of any session — the client's, a worker's
//     or the assigner's — until its result is deleted.
//   - No write of a deposed assigner lands.
//   - Each assignment attempt is delivered at most once per session of
//     its worker.
//
// # Non-guarantees
//
//   - Exactly-once execution: a worker whose session expired may still be
//     running an attempt that was moved to another worker (its Report is
//     refused); a worker may get an attempt again after its own expiry.
//     Side effects outside ZooKeeper are fenced by Token and Attempt.
//   - A reassignment happens only once the assigner sees the worker's
//     membership node gone: after the worker's session timeout.
//   - A Submit that races a task moving between two workers' directories
//     may miss it and create the task node again: the assigner deletes
//     that node if its data is the same; with other data the second
//     submission was accepted (nil) and runs after the first's result is
//     deleted.
//   - A task that comes back to the same worker (it left, re-joined and
//     was picked again) is a new node: Report refuses the older attempt.
//
// # Errors
//
// ErrBadConfig, ErrConflict, ErrTooMany, ErrFull, ErrFenced, ErrReassigned,
// ErrMalformed, ErrClosed (wrapped); context errors; errors wrapping
// zkx.ErrClosed once the client is closed.
package tasks

// Package election is leader election on ZooKeeper: ephemeral sequential
// candidates, the lowest leads, each candidate watches only its
// predecessor, creates are protected against a lost answer, and every term
// carries a fencing token and a guard for writes.
//
//	p, err := election.Join(ctx, election.Config{Client: client, Dir: "/dfs/election", ID: "master-a", Data: addr})
//	for {
//	    term, err := p.Await(ctx)          // blocks until this participant leads
//	    if err != nil { ... }
//	    lead(term)                          // act only while term.Active(); stop at <-term.Done()
//	}
//	...
//	obs, err := election.Observe(ctx, client, "/dfs/election", election.ObserveOptions{})
//	leader, ok := obs.Leader()             // the seed's "master cache"
//
// # Znode layout
//
//	<dir>                       PERSISTENT, created if missing.
//	<dir>/c-<guid>-<seq>        EPHEMERAL_SEQUENTIAL, one per participant.
//	                            guid: 32 lowercase hex, one per Participant
//	                            (Config.GUID, default random); seq:
//	                            ZooKeeper's 10-digit suffix, parsed as an
//	                            integer (never compared as text). Data:
//	                            msgpack {v: 1, id, data}.
//	<dir>/designation           EPHEMERAL, of the leader that wrote it (see
//	                            Designate). Data: msgpack {v: 1, from,
//	                            from_guid, to, to_guid}.
//
// Acceptance (trust boundary): a candidate counts only if its name is
// c-<32 hex>-<10 digits> with a non-negative 32-bit sequence, it is
// ephemeral, and its data passes a bounded msgpack check and decodes as v1
// with a valid id. A node whose ACL denies this client READ (a candidate
// of a client with other credentials, in a directory both may write)
// counts on the Stat that Exists returns without any permission, as
// Candidate.Unreadable with no ID or Data: ignoring it would let two
// candidates each lead. ZooKeeper fires no watch of a client on a node it
// may not read, so a candidate behind such a node watches the directory's
// children instead of its predecessor (step 3). A LineConfig.Accept that
// refuses an Unreadable candidate makes it foreign: that caller then
// needs one set of credentials for every candidate. A designation record counts only if it is
// ephemeral and decodes as v1 with a valid to_guid. Anything else is
// foreign: ignored for every decision (line order, predecessor watch,
// leader, designation), logged once and listed by Foreign; never deleted.
// A node carrying our guid counts as ours only if our session holds it;
// with a random guid (Config.GUID unset) one held by another session is
// foreign (no other process can hold that guid: a forgery, or an expired
// session's node a lagging server still shows), while a configured guid's
// node held by another session is a candidate like any other (most likely
// our previous process, whose session has not ended).
//
// # Protocol (one goroutine per Participant owns steps 1–5)
//
//  1. Create c-<guid>-<seq> (EPHEMERAL_SEQUENTIAL; the directory is created
//     when the create says it is missing). If the create fails with a
//     connection loss, its fate is unknown: before creating again, Sync,
//     list, and adopt the lowest node with our guid held by our session,
//     deleting any other (Curator's protection mode; also at Join when
//     Config.GUID is set). A create that lands after its caller gave up
//     (ctx ended while it was in flight) is deleted as soon as its answer
//     comes, as the lock and membership do: nobody holds it, and left in
//     the shared client's session it would block the line for as long as
//     that client lives. A Join that fails waits for that answer and
//     sweeps our guid (at most one session timeout more), so it leaves no
//     node behind.
//  2. List the children (after a Sync when the session changed); delete
//     duplicates of ours; sort the accepted candidates by sequence. If our
//     node is missing (deleted, or its session expired), end any term and
//     go to 1: we re-enter at the back.
//  3. Not the lowest: watch only the predecessor (ExistsW, no herd effect;
//     ChildrenW on the directory when it is Unreadable) and our own node;
//     when either fires, or the session changes, go to 2.
//  4. Lowest, no term yet: read the designation record. If it names another
//     live candidate and we first saw it less than DesignationTTL ago
//     (local monotonic clock), step behind: delete our node, go to 1.
//     Otherwise start a term (Await returns it) and delete any spent
//     record (naming us, a gone candidate, or past its TTL).
//  5. Leading: wait until the term ends or a request (StepDown, Designate)
//     comes; then go to 2.
//
// StepDown ends the term (Done closes before anything else happens),
// deletes our node and re-enters at the back (1). Designate(id) writes the
// designation record for the lowest live candidate of that id — guarded by
// the term, so only a leader can — then steps down; each candidate that
// becomes the lowest steps behind the designated one (4), which leads next
// and deletes the record. The record is ephemeral to the designating
// leader, so it vanishes with that session; a designated candidate that
// dies is no longer live, and the line resumes. Resign stops the
// participant for good and deletes its node.
//
// # Line: the mechanism without the policy
//
// Steps 1–3 are a Line's (NewLine): Enter (step 1), Read (step 2: the
// accepted candidates in order and our index, -1 when our node is gone),
// WatchPredecessor (step 3), Requeue and Leave. Participant is a Line plus
// the policy of steps 4–5. A caller with its own policy drives a Line from
// one goroutine; package replica does (its lowest candidate takes over a
// log under a new epoch, and hands leadership over with its own transfer
// record). LineConfig.Accept adds a check of the caller's (its error is
// the foreign reason). ReadLine reads a directory's line once, for tools,
// classifying children exactly as a Line with the same Accept does.
//
// # When a leader must stop acting
//
// A Term lasts from step 4 until one of:
//
//   - StepDown, Designate or Resign (Err wraps ErrSteppedDown);
//   - its node is deleted, by anyone (ErrLeadershipLost, "node deleted");
//   - its node's Stat changes — a data version other than 0, another
//     ctime or ephemeral owner: someone wrote it, and every guarded write
//     would now fail (ErrLeadershipLost, "node changed by someone else");
//     the participant then deletes that node and enters again at the
//     back, rather than stay Active while nothing it writes can land;
//   - its session expires (Curator's LOST; ErrLeadershipLost, "session
//     expired"), seen as StateExpired, a new session id, or the watch on
//     the node invalidated;
//   - the client stays disconnected (Curator's SUSPENDED) longer than
//     Config.SuspendGrace — by default 0, so at the first disconnection
//     (ErrLeadershipLost, "disconnected longer than the grace period").
//
// Done closes then, from the term's own goroutine, which follows the
// session and the node independently of the participant's loop (a loop
// blocked on a request to a disconnected server cannot delay it).
//
// Within a term the leader may act only while Active() — not ended, and
// connected in the session that holds the node. While disconnected it
// cannot know whether it still leads: its session may have expired on
// the servers and another candidate may lead already. So it pauses at the
// first disconnection, resumes if the same session comes back within the
// grace, and stops for good at Done. SuspendGrace must stay below a third
// of the client's session timeout (Config.Validate refuses it otherwise,
// naming both): go-zookeeper notices a silent connection only after two
// thirds of it (its read timeout), and the servers can elect another
// leader only once the session expired, a whole timeout after they last
// heard from it; so the term ends before another can begin. The term's
// goroutine alone reads its session events, in order (guarded writes and
// watches waiting for the session follow the client's state instead), so
// a reconnection within the grace always stops the grace timer, however
// many writes wait meanwhile. After a term ended by the grace, a
// participant whose session survived and whose node is still the lowest
// starts a new Term with the same token.
//
// None of this is timing-proof (a process can pause between checking
// Active and writing). Writes that must not land after the term use
// Term.Multi (or Term.Guard), which puts a CheckVersionRequest on the
// leader's node in the same ZooKeeper transaction: once the node is gone
// the write cannot land, whatever the leader believes. Elsewhere, pass
// Term.Token (the node's czxid, larger for every later leader) and have
// the other side refuse lower tokens.
//
// # Guarantees
//
//   - At most one accepted candidate is the lowest at any time; a term
//     starts only on the lowest node, so two terms whose nodes both exist
//     never overlap in ZooKeeper's order; a later term has a larger token.
//   - A term's Done closes before its node is deleted by StepDown,
//     Designate or Resign, so the next leader is elected only after it.
//   - A guarded write of a term lands only while the term's node exists.
//   - Each participant holds at most one candidate node of its session,
//     even when creates' answers are lost.
//
// # Non-guarantees
//
//   - Two processes may each believe they lead, for as long as a paused or
//     partitioned old leader has not yet noticed (between checking Active
//     and acting): only guarded writes and tokens fence it.
//   - The Observer's leader is the lowest candidate: the leader, or one
//     about to take over, or about to step behind a designated candidate.
//   - Designation is advice to the line, bounded by DesignationTTL and by
//     the designated candidate staying live; a forged record (by a client
//     with write access) can move leadership, never create two leaders.
//   - Candidate data is fixed at Join.
//
// # Errors
//
// ErrBadConfig, ErrNotLeader, ErrLeadershipLost, ErrSteppedDown,
// ErrNoCandidate, ErrResigned (wrapped); context errors; errors wrapping
// zkx.ErrClosed (logroom.ErrClosed is the same value) once the client is
// closed.
package election

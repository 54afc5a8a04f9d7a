// Package lock is a fenced distributed mutex on ZooKeeper: contenders queue
// as ephemeral sequential nodes, each watches only its predecessor, the
// lowest holds the lock, and every lease carries a fencing token and a
// guard that makes ZooKeeper writes conditional on still holding it.
//
//	m, err := lock.New(ctx, lock.Config{Client: client, Dir: "/dfs/locks/ns1", ID: "master-a"})
//	l, err := m.Lock(ctx)
//	// Writes to ZooKeeper that must not land once the lock is lost:
//	_, err = l.Multi(ctx, &zk.SetDataRequest{Path: "/dfs/ns1/state", Data: b, Version: -1})
//	// Writes elsewhere carry the token; the other side refuses lower ones:
//	store.Put(key, value, l.Token())
//	err = l.Unlock(ctx)
//
// Curator's InterProcessMutex stops at mutual exclusion "as long as
// everyone's clock and network behave": a holder paused past its session
// (GC, SIGSTOP, a partition) resumes believing it holds the lock and
// writes. Here the lease's node is the fence: Lease.Multi checks it in the
// same ZooKeeper transaction, and Lease.Token (the node's czxid) grows
// with every acquisition, for systems outside ZooKeeper.
//
// # Znode layout
//
//	<dir>                   PERSISTENT, created if missing (by New, and
//	                        again by a Lock that finds it deleted).
//	<dir>/l-<guid>-<seq>    EPHEMERAL_SEQUENTIAL, one per waiting or holding
//	                        contender. guid: 32 lowercase hex, random per
//	                        Mutex; seq: ZooKeeper's 10-digit suffix, parsed
//	                        as an integer. Data: msgpack {v: 1, id}
//	                        (informational: Holder reports it). Never
//	                        written after creation: its version stays 0.
//
// Acceptance (trust boundary): a child counts as a contender if its name
// is l-<32 hex>-<10 digits> with a non-negative 32-bit sequence and it is
// ephemeral; its data is informational and not checked (a live contender
// is never ignored for its data: that could grant the lock twice). A node
// whose ACL denies this client READ (a contender of a client with other
// credentials, in a directory both may write) counts too, on the Stat
// that Exists returns without any permission: ignoring it would let both
// clients hold the lock. ZooKeeper fires no watch of a client on a node it
// may not read, so a waiter behind such a node watches the directory's
// children instead of its predecessor. Persistent nodes (a persistent node
// never holds the lock: no session ends it) and bad names are foreign:
// ignored, logged once and listed by Foreign; never deleted.
//
// # Protocol
//
// Lock:
//
//  1. Take the Mutex's local slot (one lease per Mutex at a time; other
//     goroutines queue locally, ctx-bounded).
//  2. If an earlier create's fate was unknown, delete every node of our
//     guid held by our session (the sweep).
//  3. Create l-<guid>-<seq> (EPHEMERAL_SEQUENTIAL; NoNode: the directory
//     was deleted, create it again and retry). On a connection loss,
//     Sync, list, and adopt the lowest node of our guid held by our
//     session (deleting the others of ours); create only if there is none.
//  4. List (after a Sync when the session changed), keep the accepted
//     contenders up to ours. Ours missing (its session expired, or it was
//     deleted): go to 3, at the back. Ours the lowest: the lock is held —
//     the lease starts, its token is our node's czxid. Otherwise watch the
//     predecessor only (ExistsW, or ChildrenW on the directory when the
//     predecessor is unreadable; gone already: go to 4) and wait for it,
//     for a session change, or for ctx. On ctx's end our node is handed to
//     the Mutex's janitor goroutine, which deletes it: a contender that
//     gives up never blocks the others.
//
// Unlock: end the lease (Done closes), delete its node at version 0 (retried
// across connection loss within ctx; handed to the janitor otherwise),
// sweep if a create's fate was unknown, release the local slot.
//
// A create that lands after its caller gave up is deleted as soon as its
// answer arrives; a node of ours whose fate stayed unknown is swept by the
// next Lock, Unlock or Close of the Mutex, and in any case goes with the
// session.
//
// # Fencing tokens
//
// Contenders are granted the lock in sequence order, which is their nodes'
// creation order; a node is created only after every lower one, so a lease
// granted later has a node created later: a larger czxid, since zxids grow
// across the ensemble. Hence tokens strictly increase across acquisitions,
// by every holder.
//
// # Session events, and when a holder must stop
//
// A lease ends (Done closes, Err wraps ErrLockLost) when its node is
// deleted, its node's Stat changes (a data version other than 0, another
// ctime or ephemeral owner: someone wrote it, so every guarded write would
// fail; "node changed by someone else" — the lease ends rather than stay
// Active while nothing it writes can land), its session expires
// (Curator's LOST; the node is gone), or the client stays disconnected (Curator's SUSPENDED) longer than
// Config.SuspendGrace — 0 by default: a disconnected holder cannot know it
// still holds the lock (its session may have expired on the servers and
// another contender may hold it). Its own goroutine follows the node and
// the session. After a disconnection the node may well still exist: the
// holder must still Unlock (which deletes it; Unlock then reports
// ErrLockLost, since exclusion was not assured throughout). SuspendGrace
// must stay below a third of the client's session timeout (Config.Validate
// refuses it otherwise, naming both; go-zookeeper notices a silent
// connection after two thirds of it). The lease's goroutine alone reads
// its session events, in order (guarded writes waiting for the session
// follow the client's state instead), so a reconnection within the grace
// always keeps the lease, however many writes wait meanwhile.
//
// Active reports whether the lease lasts and the client is connected in
// its session; it is advice. Lease.Multi (or Lease.Guard with zk.Conn's
// Multi) is the check that cannot be wrong: ZooKeeper applies the writes
// only if the lease's node still exists at version 0, all or nothing. A
// paused holder whose session expired while it slept, and whose requests
// go-zookeeper then sends in a new session, gets zk.ErrNoNode from the
// server, and Lease.Multi turns it into ErrLockLost; nothing is written.
//
// # Guarantees
//
//   - At most one accepted contender node is the lowest at a time, so at
//     most one lease's guarded writes can land at a time, and none after
//     its node is gone.
//   - Tokens strictly increase across acquisitions.
//   - A Mutex holds at most one contender node of its session, even when
//     creates' answers are lost.
//
// # Non-guarantees
//
//   - Two processes may each believe they hold the lock while a paused
//     holder has not noticed; unguarded side effects are not fenced (use
//     the token).
//   - Not reentrant: a second Lock on the same Mutex waits for Unlock.
//   - No fairness across a session expiry: a contender whose session
//     expired re-queues at the back.
//
// # Errors
//
// ErrBadConfig, ErrLockLost, ErrNotLocked, ErrClosed (wrapped); context
// errors; errors wrapping zkx.ErrClosed (logroom.ErrClosed is the same
// value) once the client is closed.
package lock

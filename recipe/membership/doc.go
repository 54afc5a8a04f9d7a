// Package membership is heartbeat and service discovery on ZooKeeper: each
// live process holds an ephemeral node in a directory, and watchers keep a
// view of the directory that reports every join and leave.
//
//	reg, err := membership.Join(ctx, client, "/dfs/masters", "10.0.0.5:8080", addrData, membership.JoinOptions{})
//	w, err := membership.Watch(ctx, client, "/dfs/masters", membership.WatchOptions{
//	    OnJoin:  func(m membership.Member) { ... },  // the seed's onConn
//	    OnLeave: func(m membership.Member) { ... },  // the seed's onDisConn
//	})
//	mates := w.Members()                           // the seed's GetOriginMates
//	...
//	w.Close(); reg.Leave(ctx)
//
// The connection is a *logroom.Client (logroom.Dial): recipes share its
// session, its digest credentials and its ACL, and follow its session
// events through logroom's non-blocking subscription.
//
// # Znode layout
//
//	<dir>                PERSISTENT, created if missing (empty data, the
//	                     client's ACL).
//	<dir>/<id>           EPHEMERAL, one per live member. Data: the caller's
//	                     bytes, at most MaxDataBytes, never interpreted.
//
// id is a valid znode name: 1..128 bytes of printable UTF-8 without spaces
// or '/', not "." or ".." (an address such as "10.0.0.5:8080" is fine).
//
// Acceptance (trust boundary): a child counts as a member only if its name
// is a valid id, it is readable, it is ephemeral (Stat.EphemeralOwner !=
// 0: a persistent node is never a live member) and WatchOptions.Accept,
// when set, accepts it. Anything else is foreign: ignored, logged once
// (Warn) and listed by Watcher.Foreign. Nothing foreign is ever deleted.
// An ephemeral node forged by a live foreign session with a valid name
// cannot be told from a member: keep the directory's ACL to the members
// (logroom.DialConfig.Auth).
//
// # Protocol
//
// Join:
//
//  1. Create <dir>/<id> (EPHEMERAL). A create whose fate is unknown
//     (connection loss) is simply retried: the next one answers NodeExists
//     if it landed.
//  2. On NodeExists: Sync, then Exists. Held by our session: adopt it (a
//     create whose answer was lost). Persistent: ErrIDInUse at once (no
//     expiry removes it; an operator must). Held by another session: watch
//     it and wait (until Join's ctx ends: ErrIDInUse) — most likely our
//     own previous process, whose session has not expired yet.
//  3. A goroutine then keeps the node: it watches it (ExistsW) and
//     follows the session. When the node is deleted, or the session that
//     holds it expires (a new session id, or StateExpired), it goes back to
//     1 in the current session (the rebuild), retrying with backoff until
//     Leave.
//  4. Leave stops that goroutine, waits for it, and deletes the node if our
//     session holds it.
//
// Watch:
//
//  1. ChildrenW(<dir>): the listing and the re-armed watch come from one
//     request, so a change after the listing always fires the watch.
//  2. Get every child (data and Stat) and keep the accepted ones: that is
//     the view (Members). Every child is read on every listing, so a
//     member deleted and re-created between two listings is seen as a new
//     incarnation (another Czxid). Cost: one getChildren plus one getData
//     per child per change of the directory, per watcher.
//  3. Wake the dispatcher; wait for the watch or a session event; go to 1.
//     If <dir> is gone, the view is empty and an ExistsW waits for it.
//  4. The dispatcher (one goroutine per watcher) compares the newest view
//     with the last one it delivered: a member missing, or present with
//     another Czxid, is a leave; a new one, or a new incarnation, is a
//     join. Leaves are delivered before joins, each in id order.
//
// Joins and leaves are thus differences between listings, as in the seed:
// nothing that happens between a trigger and the re-arm is missed, because
// the next listing is compared with the previous one, not with the event.
//
// # Callbacks
//
// Callbacks never run on go-zookeeper's goroutines: watch events reach the
// watcher's loop through go-zookeeper's one-shot watch channels and its
// session events through logroom's buffered subscription, and the loop only
// wakes the dispatcher through a coalescing signal. A slow callback delays
// only later callbacks of the same watcher; the view (Members) keeps
// moving, and the next diff covers everything that changed meanwhile: a
// member that came and went while a callback was running is never
// reported, one that was re-created is reported as a leave and a join.
// Every OnLeave follows the OnJoin of the same incarnation. Close waits for
// a callback in progress; nothing is delivered after Close returns.
//
// # Session events
//
//   - Disconnected (Curator's SUSPENDED): the watcher reports Suspended
//     and Stale() is true; Members keeps the last view, which may be out
//     of date (members may have left, and our own session may be expiring
//     on the servers). The registration does nothing: its node lives as
//     long as the session.
//   - Reconnected in the same session: Reconnected. go-zookeeper re-sends
//     the watches, and the servers fire those whose nodes changed
//     meanwhile, so the view catches up.
//   - Expired (Curator's LOST): the servers deleted our member node and
//     dropped our watches; go-zookeeper opens a new session on the same
//     connection. The registration re-creates the node in the new session
//     (Rebuilds counts it); the watcher reports Lost, Syncs (the new
//     session may read from a server behind what we saw) and lists again;
//     the differences are delivered as leaves and joins (our own member, at
//     least, is a leave and a join: a new incarnation).
//
// # Guarantees
//
//   - A member's node exists exactly while its session lives (or until
//     Leave), and is re-created after an expiry or a deletion.
//   - Every change of the set of members is reflected in the view by the
//     next listing; no change between a watch's trigger and its re-arm is
//     missed.
//   - Callbacks describe a sequence of views: per id, joins and leaves
//     alternate, starting with a join.
//
// # Non-guarantees
//
//   - Membership is not agreement: two watchers may see a change at
//     different times, and a view is stale as soon as it is read.
//   - A member whose process hangs keeps its node while its session lives;
//     a member whose client is partitioned stays in others' views until its
//     session expires on the servers (the session timeout), and may see
//     itself as a member after the others no longer do.
//   - Transient members (joined and left between two listings) may never
//     be reported.
//   - Data is fixed at Join: to change it, Leave and Join again.
//
// # Errors
//
// ErrBadName, ErrIDInUse and ErrDataTooLarge, wrapped; context errors from
// ctx; errors wrapping logroom.ErrClosed once the client is closed.
package membership

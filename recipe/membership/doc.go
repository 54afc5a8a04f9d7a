// Package membership is heartbeat and service discovery on ZooKeeper: each
// live process holds an ephemeral node in a directory, and watchers keep a
// view of the directory that reports every join and leave.
//
//	reg, err := membership.Join(ctx, client, "/dfs/masters", "10.0.0.5:8080", addrData, membership.JoinOptions{})
//	w, err := membership.Watch(ctx, client, "/dfs/masters", membership.WatchOptions{
//	    OnJoin:   func(m membership.Member) { ... },  // the seed's onConn
//	    OnLeave:  func(m membership.Member) { ... },  // the seed's onDisConn
//	    OnUpdate: func(old, cur membership.Member) { ... }, // optional: data changes
//	})
//	mates := w.Mates()                             // the seed's GetOriginMates: the others
//	all := w.Members()                             // every member, ourselves included
//	err = reg.Update(ctx, newData)                 // republish this member's data
//	...
//	w.Close(); reg.Leave(ctx)
//
// The connection is a *zkx.Client (zkx.Dial, or logroom.Dial, which is
// the same): recipes share its session, its digest credentials and its
// ACL, and follow its session events through its non-blocking
// subscription (Client.Subscribe).
//
// # Znode layout
//
//	<dir>                PERSISTENT, created if missing (empty data, the
//	                     client's ACL), by Join, by Watch, and again by
//	                     the rebuild if someone deleted it.
//	<dir>/<id>           EPHEMERAL, one per live member. Data: the caller's
//	                     bytes (Join's, then the last Update's), at most
//	                     MaxDataBytes, never interpreted. Stat.Czxid names
//	                     the incarnation, Stat.Version counts the writes
//	                     within it (Member.Czxid, Member.Version).
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
// (zkx.DialConfig.Auth, or ACLIdentities with TLS).
//
// # Protocol
//
// Join:
//
//  1. Create <dir>/<id> (EPHEMERAL). A create whose fate is unknown
//     (connection loss) is simply retried: the next one answers NodeExists
//     if it landed. NoNode: the directory was deleted; create it again and
//     retry.
//  2. On NodeExists: Sync, then Exists. Held by our session: adopt it (a
//     create whose answer was lost). Persistent: ErrIDInUse at once (no
//     expiry removes it; an operator must). Held by another session: watch
//     it and wait (until Join's ctx ends: ErrIDInUse) — most likely our
//     own previous process, whose session has not expired yet.
//  3. A goroutine (the keeper) then keeps the node: it watches it
//     (ExistsW, re-armed only once it fired) and follows the session. When
//     the node is deleted, or the session that holds it expires (a new
//     session id, or StateExpired), it goes back to 1 in the current
//     session (the rebuild), creating the node with the latest data,
//     retrying with backoff until Leave. Its session events queue while
//     it writes or rebuilds, so it judges each by the current session id,
//     not by the event alone: an expiry read after the node was rebuilt in
//     the new session is about the old one, and changes nothing.
//  4. Leave stops that goroutine, waits for it, and deletes the node if our
//     session holds it. If the delete cannot be done within Leave's ctx,
//     Leave says so and the node stays (until the session ends, or until
//     a later Leave, which tries the delete again).
//
// Update (the registration's data is a generation-numbered value; the
// keeper alone writes the node):
//
//  1. Check the size (ErrDataTooLarge: nothing recorded), record the data
//     as the registration's (Data) with the next generation, and wake the
//     keeper. Equal data records nothing new.
//  2. The keeper, holding the node in the current session, reads it
//     (getData): another Czxid or owner, or no node, means it is lost (go
//     to Join's step 1: the rebuild creates it with the latest data); the
//     same bytes mean it is done (a write whose answer was lost landed).
//     Otherwise setData(data, the version read). BadVersion (a concurrent
//     writer) or a connection loss: read again (backoff on connection
//     loss). The node's data version is then known, so a write by anyone
//     else (the ExistsW fires, or a Stat shows another version) is
//     detected and undone the same way.
//  3. Update returns nil once the node holds its generation or a later
//     one — by that setData, or by the rebuild's create when the node was
//     missing — or ctx's error (the data stays recorded and is written at
//     the next reconnection or rebuild), or ErrLeft after Leave.
//
// Cost of an Update: one getData and one setData, plus the keeper's
// re-armed ExistsW; each watcher with data watches then re-lists (one
// getChildren, one getData per child).
//
// Watch:
//
//  1. ChildrenW(<dir>): the listing and the re-armed watch come from one
//     request, so a change after the listing always fires the watch.
//  2. Get every child (data and Stat) and keep the accepted ones: that is
//     the view (Members: every member, ours included; Mates: without the
//     members our client's session holds). Every child is read on every listing, so a
//     member deleted and re-created between two listings is seen as a new
//     incarnation (another Czxid). Cost: one getChildren plus one getData
//     per child per change of the directory, per watcher.
//     With data watches (WatchOptions.OnUpdate or WatchData) the read of a
//     child is a getData that arms a data watch (GetW), unless the data
//     watch armed on it by an earlier listing has not fired yet (then a
//     plain getData: that watch still fires at the next write, and arming
//     another would only pile up channels in go-zookeeper, which keeps
//     every one until the node changes). Cost: per member, one data watch
//     held on the servers and one getData per refresh; and every write of
//     any member's data is a refresh. Without data watches, nothing is
//     armed on the members, and their Data is re-read only when the set of
//     children changes.
//  3. Wake the dispatcher; wait for the children watch, any data watch or
//     a new session (step 5); go to 1. A data watch seen firing is
//     forgotten, so that the next listing re-arms it. If <dir> is gone, the view is
//     empty and an ExistsW waits for it.
//  4. The dispatcher (one goroutine per watcher) compares the newest view
//     with the last one it delivered: a member missing, or present with
//     another Czxid, is a leave; a new one, or a new incarnation, is a
//     join; the same incarnation with another Version is an update.
//     Leaves are delivered first, then joins, then updates, each in id
//     order.
//  5. The session goroutine (one per watcher) follows the session events
//     (see Session events) and wakes the loop when a new session began.
//
// Joins, leaves and updates are thus differences between listings, as in
// the seed: nothing that happens between a trigger and the re-arm is
// missed, because the next listing is compared with the previous one, not
// with the event, and every data watch that fires leads to a listing that
// re-reads (and re-arms) it. Updates coalesce: several writes between two
// listings, or while a callback runs, are one OnUpdate carrying the latest
// data (old is the member as last delivered), never an intermediate one
// out of order; the last data is always delivered. A re-created member is
// never an update, whatever its data: it is a leave and a join.
//
// # Callbacks
//
// Callbacks never run on go-zookeeper's goroutines: watch events reach the
// watcher's loop through go-zookeeper's one-shot watch channels and its
// session events reach its session goroutine through the client's buffered
// subscription; both only wake the dispatcher through a coalescing signal. A slow callback delays
// only later callbacks of the same watcher; the view (Members) keeps
// moving, and the next diff covers everything that changed meanwhile: a
// member that came and went while a callback was running is never
// reported, one that was re-created is reported as a leave and a join.
// Every OnLeave follows the OnJoin of the same incarnation. Close waits for
// a callback in progress; nothing is delivered after Close returns.
//
// # Session events
//
// A watcher's session goroutine alone reads its session events and
// follows them in order, whatever the loop is doing; the loop's requests
// waiting for the session follow the client's state instead. So a
// disconnection is reported as soon as the client sees it, even when it
// begins while the loop re-reads the directory (a request in flight fails,
// and the loop waits for the session): Suspended and Stale() at once,
// Reconnected (or Lost) after. One that begins and ends before its events
// are read is still reported, Suspended then Reconnected. A new session is
// recognised by its id, which no dropped event can hide.
//
//   - Disconnected (Curator's SUSPENDED): the watcher reports Suspended
//     and Stale() is true; Members keeps the last view, which may be out
//     of date (members may have left, and our own session may be expiring
//     on the servers). The registration does nothing: its node lives as
//     long as the session.
//     An Update meanwhile is recorded and written once the session is back
//     (or by the rebuild, if it does not come back); Update waits (ctx).
//   - Reconnected in the same session: Reconnected. go-zookeeper re-sends
//     the watches (children and data watches alike), and the servers fire
//     those whose nodes changed meanwhile, so the view catches up.
//   - Expired (Curator's LOST): the servers deleted our member node and
//     dropped our watches; go-zookeeper opens a new session on the same
//     connection. The registration re-creates the node in the new session
//     (Rebuilds counts it) with the latest data, Updates made while the
//     session was gone included (an Update waiting for it returns then);
//     the watcher reports Lost, Syncs (the new session may read from a
//     server behind what we saw), forgets its data watches (go-zookeeper
//     fired them with NotWatching) and lists again, re-arming them
//     (Stale() stays true until that listing is published); the
//     differences are delivered as leaves and joins (our own member, at
//     least, is a leave and a join: a new incarnation).
//
// # Guarantees
//
//   - A member's node exists exactly while its session lives (or until
//     Leave), and is re-created after an expiry or a deletion.
//   - Every change of the set of members is reflected in the view by the
//     next listing; no change between a watch's trigger and its re-arm is
//     missed. With data watches, the same holds for every member's data:
//     the view ends with each member's latest data.
//   - The node holds the registration's latest data (Data) once the
//     Update that recorded it returned nil; a rebuild always writes the
//     latest data.
//   - Callbacks describe a sequence of views: per id, joins and leaves
//     alternate, starting with a join; updates of an incarnation come
//     between its join and its leave, in increasing Version.
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
//   - Not every write is an OnUpdate: writes coalesce (see Watch).
//   - Data and membership are not one atomic step: a watcher may see a
//     member join with data already newer than another watcher's last
//     update of it.
//   - A watcher's data watches (like its children watch) stay armed on
//     the shared client's session after Close, until they fire: the
//     servers keep them, and go-zookeeper keeps one channel per watch on
//     the client (and re-sends them at every reconnect) until the node
//     changes. go-zookeeper 1.0.4 cannot remove a watch, so open
//     long-lived watchers, not one per request, when members' data rarely
//     changes.
//   - One Registration per id and client: a second Join of the same
//     path through the same client gets ErrIDInUse until the first has
//     left (two keepers would take each other's writes for foreign ones).
//
// # Errors
//
// ErrBadName, ErrIDInUse, ErrDataTooLarge and ErrLeft, wrapped; context
// errors from ctx; errors wrapping zkx.ErrClosed (logroom.ErrClosed is the
// same value) once the client is closed.
package membership

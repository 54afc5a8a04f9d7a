// Package simzk is an in-process ZooKeeper for whole-replica simulations:
// it serves ZooKeeper's client protocol on 127.0.0.1, so an unchanged
// go-zookeeper client (third_party/zk, and so zkx.Dial, logroom and
// replica.Open with Config.Servers = []string{srv.Addr()}) runs against
// it, and it lets a test inject faults that a real ensemble makes hard to
// reproduce: a lost request, a lost reply, a dropped connection, a
// partition without RST, a session expiry at a chosen moment, a
// ZooKeeper restored from an older copy of its data, or wiped.
//
// # What it models
//
// One standalone server (srvr and stat answer "Mode: standalone"; ruok
// answers "imok"). State lives under one mutex; each connection has a
// reader goroutine that processes its requests in order and a writer
// goroutine that sends its replies and watch events in the order they
// were queued. A watch event caused by a transaction is queued on every
// watching connection before the transaction's reply and before the
// reply to any request processed after it, as ZooKeeper guarantees.
//
//  1. Handshake: a connect request with session id 0 opens a session
//     (a transaction: it takes a zxid); one with a live session's id and
//     password re-attaches it (an older connection of that session is
//     closed); any other is answered with session id 0 and timeout 0,
//     which the client reports as StateExpired. The timeout granted is
//     the one asked for clamped to [MinSessionTimeout, MaxSessionTimeout].
//     A client that has seen a zxid newer than the server's is refused
//     (the connection is closed), as ZooKeeper does; after Restore or
//     Wipe this keeps an old client out until the zxid catches up, unless
//     Options.AcceptStaleClients.
//  2. Requests: create (persistent, ephemeral, sequential; create2, which
//     go-zookeeper v1.0.4 never sends and the conformance test does not
//     cover),
//     delete, exists, getData, setData, getACL, setACL, getChildren,
//     getChildren2, sync, multi (create, delete, setData, check),
//     setAuth, setWatches, closeSession and ping. Each write request is
//     one transaction and takes one zxid even when it fails (ZooKeeper
//     logs an error transaction); a multi is one transaction. Reads and
//     pings answer with the last zxid.
//  3. Znodes: Stat's czxid, mzxid, pzxid, ctime, mtime, version,
//     cversion, aversion, ephemeralOwner, dataLength and numChildren kept
//     as ZooKeeper keeps them: cversion counts the creates and the deletes
//     under a znode, but a sequential name is the path followed by the
//     number of earlier creates under the parent (every create counts,
//     sequential or not, and a failed multi none), %010d; a delete moves
//     the parent's pzxid. Data keeps nil and empty apart. "/zookeeper"
//     (cversion -2, as 3.8 leaves it), "/zookeeper/config" and
//     "/zookeeper/quota" exist and cannot be deleted. Errors and their
//     order of precedence are PrepRequestProcessor's: BadArguments for an
//     invalid or special path, InvalidACL, NoNode, NoAuth, NodeExists,
//     NoChildrenForEphemerals, BadVersion, NotEmpty.
//  4. ACLs: validated as ZooKeeper's fixupACL does (an empty list, an
//     unknown scheme, world with an id other than anyone, and "auth"
//     without an authenticated id are InvalidACL; "auth" stands for the
//     session's digest ids) and enforced as checkACL does: create needs
//     CREATE on the parent, delete DELETE on the parent, setData WRITE,
//     getData, getChildren and a multi's check READ, setACL ADMIN, getACL
//     READ or ADMIN (without ADMIN digest hashes read "user:x"); exists
//     and sync need nothing. A session's ids are the digest ids it added
//     with setAuth plus ip:127.0.0.1; the "super" digest, x509 and sasl
//     identities are not modelled (an ACL naming them grants nothing).
//  5. Multi: the ops apply in order, each seeing the earlier ones; on the
//     first failure nothing is applied and every op's result is an error
//     result: 0 (ok) for the ops before, the failure's code for the
//     failing op, RuntimeInconsistency for the ops after; the reply
//     header's error is 0 and the client reports the first op error.
//  6. Watches (one-shot, per connection, as ZooKeeper's server keeps
//     them): exists and getData set a data watch (exists also on a
//     missing node, fired by its create); getChildren sets a child watch;
//     getData and getChildren on a missing node set none. A create fires
//     NodeCreated on the path and NodeChildrenChanged on the parent; a
//     setData fires NodeDataChanged; a delete fires NodeDeleted (once per
//     connection even with both a data and a child watch) and
//     NodeChildrenChanged on the parent. A connection's watches end with
//     it; setWatches re-arms them with ZooKeeper's rules (a data watch
//     fires NodeDeleted if the node is gone, NodeDataChanged if its mzxid
//     is past the client's relative zxid; an exist watch fires
//     NodeCreated if the node exists; a child watch fires NodeDeleted or,
//     if the pzxid moved, NodeChildrenChanged; otherwise the watch is set).
//  7. Sessions: a session expires when nothing (ping or request) was
//     heard from it for its timeout, checked every Tick; closeSession
//     ends it at once. The end of a session is one transaction that
//     deletes its ephemeral znodes (their watches fire) and closes its
//     connection.
//
// Every rule above was checked against ZooKeeper 3.8 by
// TestConformance, which runs the same operation sequences through a
// real zk.Conn on a real server and on this one and compares the
// results (Stat fields, zxids relative to the scenario's first
// transaction, multi results, watch events at every client), and the
// stale-client refusal after a restore by TestConformanceRestore. Planted
// bugs (deviations switched on by the tests only) show that the tests
// catch a deviation: see the "planted" subtests, TestEventBeforeLaterReply
// and TestSetWatchesRules.
//
// # What it does not model
//
// No quorum, followers, leader election or observers (use
// internal/infra/zkensemble for those); no persistence (Snapshot and
// Restore stand in for it). setAuth always succeeds (a digest without a
// colon is ignored rather than failing the session). No TLS, SASL, quotas, containers,
// TTL nodes, persistent or recursive watches (addWatch), removeWatches,
// reconfig, multiRead, getEphemerals, or four-letter words other than
// ruok, srvr and stat. Children are listed in name order (ZooKeeper's
// order is unspecified). Session expiry is checked every Tick rather
// than in ZooKeeper's tick-aligned buckets, so a session may expire up
// to one Tick later than its timeout. Packets longer than 0xfffff bytes
// (jute.maxbuffer's default) close the connection.
//
// # Faults
//
// Expire, Disconnect and Hold act on a session; Options.Intercept sees
// every request (not pings) before it is applied and may lose it
// (DropBefore), lose its reply (DropAfter) or hold it up (Delay);
// Snapshot, Restore and Wipe act on the tree. All are safe to call
// concurrently, from Intercept too.
package simzk

// Package zkx is roomlog's ZooKeeper boundary: the one client and the
// small pieces every package that talks to ZooKeeper needs, which must
// behave the same everywhere. logroom, replica and the recipes sit on it;
// zkx imports no roomlog package, so every one of them may import it
// (internal/floors_test.go holds that).
//
// # What it owns
//
//   - Client and Dial (DialConfig, Digest): one *zk.Conn and its session,
//     with session events fanned out to subscribers (Client.Subscribe)
//     from go-zookeeper's event callback, never blocking it; the
//     leader-first host provider (below); connections whose handshake is
//     bounded, so a server that accepts and says nothing is left quickly.
//   - TLS and certificate ACLs (DialConfig.TLS, TLSServerName,
//     ACLIdentities; below).
//   - Requester and the requests on it: Get, Exists, ExistsW, Children,
//     ChildrenW, Sync and EnsurePath, each retried on connection loss. A
//     *Client is a Requester (between attempts it waits for the session;
//     once closed it gives up with ErrClosed); so is a recipe's session
//     (recipe/internal/zkr, which bounds every request by its ctx), and
//     Plain wraps a bare go-zookeeper connection (the bench's raw client).
//   - IsConnLoss: which go-zookeeper errors leave a request's fate unknown
//     (connection or session gone, raw transport errors), as opposed to
//     definite answers and the caller's own context ending; Translate
//     turns them into the sentinels ErrUnavailable and ErrClosed.
//   - Backoff (20 ms doubling to 1 s unless set otherwise), Retry and
//     RetryValue: running an idempotent request again after a connection
//     loss, with an optional Gate between attempts.
//   - CheckMsgpack and Decode: bounded msgpack decoding of znode data
//     (input, not truth), so that no foreign or corrupt znode can make a
//     decoder allocate more than O(len(data)) or recurse deeply.
//   - ValidName and ValidComponent (znode name rules), ForeignSet (znodes
//     that break their directory's rules, logged once) and Signal (a
//     coalescing, never-blocking wake-up).
//
// This is the only place these live. logroom keeps its public names as
// aliases or one-line delegations (logroom.Client, logroom.Dial,
// logroom.DialConfig, logroom.IsConnLoss, logroom.CheckMsgpack; its
// ErrClosed, ErrBadConfig and ErrUnavailable are the same values as
// zkx's). Do not add another copy elsewhere; change it here.
//
// # Invariants
//
//   - Nothing here blocks go-zookeeper's event callback: it takes one
//     mutex, never held while blocking, and sends without blocking (a full
//     subscription drops its oldest event). Subscribers decide on State
//     and SessionID, with events only as wake-ups.
//   - A request is retried only after a connection loss, and only where it
//     is idempotent (reads, Sync, and creates whose ErrNodeExists means
//     success). A write that is not idempotent is never retried here: its
//     caller resolves the outcome by reading back.
//   - EnsurePath never creates a component that exists: it asks Exists
//     first (which needs no permission), so a client under digest
//     credentials passes through a shared parent whose ACL denies it
//     CREATE; every create uses the Requester's ACL.
//
// # Protocol: a request through a Requester
//
//  1. Send the request. An answer, or an error that is not a connection
//     loss, is the result.
//  2. On a connection loss, run the gate: a Client waits for its session
//     (or returns ErrClosed once closed); a recipe session waits until
//     connected.
//  3. Back off (20 ms doubling to 1 s) and go to 1, until ctx ends: the
//     error then wraps ctx's and the last connection error.
//
// # TLS and certificate identities
//
// With DialConfig.TLS every connection (the first, and each reconnect)
// dials TCP within go-zookeeper's connect timeout and then runs a TLS
// handshake bounded by the same deadline (at least 1 s): it asks TLS for
// a config for the server name (TLSServerName, or the host as Servers
// writes it: both host providers remember which configured host each
// resolved address came from, so "zk1:2281" is verified as zk1, not as
// the IP it resolved to; an IP address in Servers as that IP), so a
// TLSConfig that re-reads its files (*tlsfiles.Source) hands a rotated
// certificate to the next connection while the session goes on.
// ZooKeeper must listen with secureClientPort (Netty) and Servers must
// name those ports. The leader probe speaks srvr over TLS
// as well. A handshake that fails (the server refused this certificate,
// or this client refused the server's: untrusted CA, wrong name) fails
// that connection attempt; go-zookeeper tries the next server, and a
// Dial that gets no session before its ctx ends returns the last
// attempt's error in its chain (ErrTLS; *tlsfiles.VerifyError names the
// CA file and the name checked).
//
// ZooKeeper's X509AuthenticationProvider (authProvider.x509) gives a TLS
// session the id x509:<subject of its certificate, RFC 2253 as Java
// writes it> (tlsfiles.SubjectName computes it; the tests check it on a
// real server). ACLIdentities puts one x509 entry with all permissions
// per identity on every znode the client creates, after Auth's digest
// entry when both are set; with neither, a client presenting a client
// certificate creates with x509:<its own identity> (Identified; taken at
// Dial), and only one with no certificate (or without TLS) and no Auth
// creates with world:anyone, so a tool given TLS files but no ACL never
// leaves world-open znodes in an x509 room. A client whose identity no
// entry names gets zk.ErrNoAuth, a definite answer that is never
// retried. Every member of a room must list the same identities (its own
// included), or members cannot read each other's znodes. ACLIdentities
// needs TLS or Auth (else the client could not read what it creates).
//
// Changing identities (aclcheck.go): an existing tree's ACL is checked
// with CheckACL against the configured ACL and the entries that name the
// client (Client.Self): every entry must name a configured identity with
// no more permissions than configured, and one entry naming the client
// must grant it all. A rotation adds the new identity to every member's
// configuration, then sets the tree to it (SetACL on the base,
// SetACLTree on the room); a removal sets the tree first, then drops the
// identity from the configurations.
//
// Nothing else changes over TLS: the same requests, sessions and
// reconnects; only the bytes on the wire are encrypted, and a digest
// credential (Auth) sent over TLS travels inside it.
//
// # Connecting: the leader first
//
// Every ZooKeeper write is ordered by the leader: sent to a follower it is
// forwarded there, and the reply comes back the same way. So a Client
// prefers the leader (DialConfig.AnyServer keeps go-zookeeper's own host
// provider and its shuffled order). Its host provider resolves the
// servers' names once, at Dial, into one address per record, shuffled (as
// go-zookeeper's does; a name that does not resolve fails Dial at once).
// At the start of every pass over the servers (the first connection, each
// reconnect after a connected session, each further pass while none
// connects) it asks every server at once for its role with the srvr
// four-letter word, reading at most 16 KiB of each reply within
// LeaderProbeTimeout (250 ms), and orders the pass: servers whose reply
// says "Mode: leader", then the others that answered, then the silent
// ones, each group starting after the server of the last connection, so a
// server that just dropped or went silent (a partition that accepts and
// says nothing) is tried last of its group, not first again. A standalone
// server in a list of several is not taken for a leader. What the probe
// reads only orders the servers: no answer (srvr not in
// 4lw.commands.whitelist, a paused or silent server, not ZooKeeper at all),
// several servers claiming to lead or a forged reply cost at most a
// follower's extra hop, a later try and the probe's bound, never
// correctness; the session, fencing and every check of the packages above
// are the same on any server. A session stays on its server while its connection lasts,
// and go-zookeeper calls the provider under its server lock, so
// Conn.Server may wait up to the probe's bound. Known limit: a client that
// reconnects while the ensemble elects (no server says leader yet) lands
// on whichever server answers first and stays there until its next
// reconnect, so after a leader change some clients write through a
// follower for a while.
package zkx

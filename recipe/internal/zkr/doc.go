// Package zkr is the recipe kit the recipes (membership, election, lock)
// share on top of package zkx, as etcd's client/v3/concurrency is for
// etcd: a Session per recipe object over a shared *zkx.Client, requests
// bounded by a context (Do), guarded Multis, holds (a term or a lease tied
// to one ephemeral node), sequential-node names and listings, and the
// recipes' msgpack codec. Connection-loss classification, backoff, retry,
// the reads, Sync, EnsurePath, the foreign set, the signal, name rules and
// the msgpack bounds are zkx's; a Session is a zkx.Requester, so zkx's
// requests run on it through Do.
//
// Every recipe object owns one Session, and one goroutine reads its
// events (a Hold has a Session of its own): Do and WaitConnected wait on
// the client's state, never on those events, so no waiting request takes
// an event its reader needs. A request made through Do runs on
// its own goroutine so that the caller's ctx bounds the wait; when ctx ends
// first the request may still land, and Do hands its late result to a hook
// the caller supplies (a create that lands after its caller gave up is
// deleted there). Session.Close waits for those goroutines, which
// go-zookeeper answers within its own bounds (a read timeout on a live
// connection; ErrNoServer once it has tried every server; ErrClosing when
// the client closes).
package zkr

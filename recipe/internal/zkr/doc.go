// Package zkr is the ZooKeeper helper layer the recipes (membership,
// election, lock) share: a session tracker over a *logroom.Client, requests
// bounded by a context, retry on connection loss, name validation and
// sequential-node parsing, a set of foreign znodes, a coalescing signal,
// bounded msgpack decoding and guarded Multis. Connection-loss
// classification, backoff, the retry loop, the signal and the msgpack
// bounds are package zkx's (shared with logroom and replica); zkr only
// binds them to a Session.
//
// Every recipe object owns one Session. A request made through Do runs on
// its own goroutine so that the caller's ctx bounds the wait; when ctx ends
// first the request may still land, and Do hands its late result to a hook
// the caller supplies (a create that lands after its caller gave up is
// deleted there). Session.Close waits for those goroutines, which
// go-zookeeper answers within its own bounds (a read timeout on a live
// connection; ErrNoServer once it has tried every server; ErrClosing when
// the client closes).
package zkr

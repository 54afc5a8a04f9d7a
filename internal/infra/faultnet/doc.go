// Package faultnet is a userspace TCP fault proxy for roomlog's tests and
// chaos harness: one Proxy per link, put between a client and the servers
// it dials, breaks that link on demand at run time — reset, silence, lost
// requests, lost replies, latency with jitter, a bandwidth cap — without
// root, kernel modules, netem or iptables.
//
// # Using it
//
//  1. p, err := faultnet.New(faultnet.Config{Targets: []string{zkAddr}});
//     defer p.Close(). In a test, register p.Close with t.Cleanup.
//  2. Point the client at p.Addr() instead of the target. Each accepted
//     connection is forwarded to the next target in round robin.
//  3. Break the link: p.Cut(), p.Reset(), p.Blackhole(), p.DropRequests(),
//     p.DropReplies(), p.Delay(d, jitter), p.Bandwidth(bytesPerSecond).
//     Each call takes effect before it returns and may be made at any time,
//     from any goroutine, in any combination.
//  4. p.Heal() ends Cut, Blackhole, DropRequests and DropReplies. Delay and
//     Bandwidth are properties of the link, not outages: they stay until
//     set to zero (Delay(0, 0), Bandwidth(0)), so a partition healed during
//     a run with "1–5 ms on every link" keeps its latency.
//  5. p.Stats() snapshots the counters: connections accepted, refused and
//     reset, bytes delivered and bytes discarded per direction.
//     p.Record() makes the proxy keep every byte it reads from then on
//     (both directions, every connection): p.Contains(b) tells a test
//     whether an eavesdropper on the link would have seen b.
//  6. p.Close() resets every connection, stops the proxy and returns once
//     every goroutine it started has returned, whatever fault is on.
//
// A Net holds many proxies by name, one per directed link ("m1->zk2" by
// convention: the client side, "->", the server side), with helpers to
// select links (From, To) and to cut, partition, heal or delay many of them
// at once. Each link's jitter seed derives from the Net's seed and the
// link's name, so a chaos run with the same seed draws the same sequence on
// each link whatever order the links were added in.
//
// # Directions
//
// "Up" is client to server: the bytes written to the proxy's accepted
// connection, the requests. "Down" is server to client: the replies. Each
// connection has two independent halves, one per direction. A half reads a
// chunk (at most 32 KiB) from its source, stamps it with a release time and
// queues it; a second goroutine delivers queued chunks in order to the
// other socket when they are due. The queue holds at most 128 chunks (4 MiB
// at most): beyond that the proxy stops reading and TCP flow control pushes
// back on the sender, as a slow or long link would.
//
// # What each fault does on the wire
//
//   - Cut: every current connection is reset (SO_LINGER 0, so both the
//     client and the server see an RST: ECONNRESET on their next read or
//     write, a blocked read returns at once). Until Heal, every new
//     connection is accepted by the kernel and reset at once by the proxy:
//     the client's connect fails with ECONNRESET, or succeeds and its
//     first read fails with it, whichever the client sees first. No target
//     is dialed. Bytes queued in the proxy are discarded with their
//     connection.
//   - Reset: one shot. Every current connection is reset as by Cut; new
//     connections are forwarded as before. No state is kept, Heal is not
//     needed. Blackhole then Reset is a freeze: every connection gone and
//     every reconnection held, as a client silenced past its session
//     timeout sees it.
//   - Blackhole: a partition. Nothing is delivered in either direction and
//     nothing is lost: bytes are held (in the proxy's queue, then in the
//     kernel buffers once the queue is full) and a connection accepted
//     during the blackhole is held too, undialed, so the target sees no
//     connection at all. Connections are not closed: each side sees
//     silence and decides itself when to give up (a ZooKeeper client
//     times out and reconnects, into another held connection; the server
//     expires the session). On Heal, held connections are dialed and every
//     held byte, FIN included, is delivered in order, as TCP does when a
//     partition heals before its retransmissions give up.
//   - DropRequests: up bytes are read and discarded, counted in
//     Stats.DroppedUp; down bytes are delivered. The server never sees the
//     requests sent meanwhile.
//   - DropReplies: up bytes are delivered, down bytes are read and
//     discarded, counted in Stats.DroppedDown: requests land, their answers
//     are lost (the ambiguous outcome).
//   - Delay(d, jitter): each chunk is delivered no earlier than its read
//     time plus d plus a uniform draw from [-jitter, +jitter] (clamped at
//     0), in each direction: a round trip through the proxy takes at least
//     2(d-jitter) more. A chunk is never delivered before an earlier chunk
//     of its half, so jitter delays but never reorders; a burst of chunks
//     sees less jitter than isolated ones. The draws come from a PCG seeded
//     with Config.Seed, owned by the proxy (no global rand state); which
//     chunk gets which draw depends on goroutine scheduling. A new Delay
//     applies to chunks read after the call; queued chunks keep the
//     release time they were stamped with.
//   - Bandwidth(r): each half delivers at most r bytes per second,
//     store-and-forward: a piece of n bytes (at most r/100, so about 10 ms
//     of transfer) is delivered n/r after the previous piece, or after its
//     release time if later. Transferring N bytes one way takes at least
//     N/r. Combined with Delay, latency and transfer time add up.
//
// Drops are decided when a chunk is due for delivery, not when it is read:
// after DropReplies returns, no reply byte is delivered, including those
// already queued; after Heal, bytes queued and not yet due are delivered.
// Cut takes precedence over everything, Blackhole over the drops. The one
// exception to "takes effect before the call returns" is a chunk whose
// socket write is already in progress (the destination is not reading):
// that write completes.
//
// # Ordering and integrity
//
// Within one connection and one direction, bytes are delivered in the
// order they were read, never duplicated, and only lost by DropRequests or
// DropReplies (a gap in the stream: a framed protocol such as ZooKeeper's
// cannot resync over it, so reset the connection after healing a drop when
// that matters) or by a reset. A FIN (a half-close, io.EOF at the proxy) is
// passed on after every byte before it. A reset or read error on one side
// resets both sides. Nothing is ordered across connections.
//
// # What a connection sees after Heal
//
//   - established during a Cut: none survives, each was reset on accept;
//   - held by a Blackhole: dialed on Heal, then carries on with nothing lost
//     (the peers may already have given up on it);
//   - carried through DropRequests/DropReplies: carries on, with a gap where
//     the dropped bytes were.
//
// # Invariants
//
//   - The accept loop never waits on a connection: dialing, holding and
//     copying run on each connection's own goroutines.
//   - Every wait (a held dial, a due time, a full queue, a blocked socket
//     read or write) ends when the connection is reset or the proxy is
//     closed: Close returns promptly during any fault, and after it returns
//     no goroutine of the proxy is left.
//   - Fault setters take effect under the proxy's mutex and wake every
//     waiting half, so Blackhole, the drops, Bandwidth and Heal apply to
//     queued chunks at once.
//   - Bad caller input is an error (Config.Validate names every bad field)
//     or clamped as documented, never a panic.
package faultnet

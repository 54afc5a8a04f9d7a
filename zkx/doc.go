// Package zkx is roomlog's ZooKeeper boundary: the small pieces every
// package that talks to ZooKeeper needs and that must behave the same
// everywhere. It owns
//
//   - IsConnLoss: which go-zookeeper errors leave a request's fate unknown
//     (connection or session gone, raw transport errors), as opposed to
//     definite answers and the caller's own context ending;
//   - Backoff: the capped exponential retry delay (20 ms doubling to 1 s
//     unless set otherwise);
//   - Retry and RetryValue: running an idempotent request again after a
//     connection loss, backing off in between, with an optional gate (wait
//     for the session, give up when the client is closed);
//   - CheckMsgpack and Decode: bounded msgpack decoding of znode data
//     (input, not truth), so that no foreign or corrupt znode can make a
//     decoder allocate more than O(len(data)) or recurse deeply;
//   - Signal: a coalescing, never-blocking wake-up.
//
// This is the only place these live: logroom, replica and the recipes
// (through recipe/internal/zkr) use them, keeping at most one-line
// wrappers of their own (logroom.IsConnLoss and logroom.CheckMsgpack
// remain as public delegations). Do not add another copy elsewhere;
// change it here.
//
// zkx imports no roomlog package, so that every one of them may import it.
package zkx

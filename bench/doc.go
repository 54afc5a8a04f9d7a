// Command bench measures roomlog on the machine it runs on, side by side
// with what ZooKeeper itself allows in the same run, so that the ratio
// between the two means something on any machine.
//
//	go run ./bench                      # full run, 3-server ensemble
//	go run ./bench -quick               # smoke run, under 2 minutes
//	go run ./bench -servers 1 -json out.json -plot out.svg
//	go run ./bench -scenarios raw,append -duration 10s
//	go run ./bench -from-json out.json -plot out.svg   # redraw a saved run
//
// It starts its own ZooKeeper ensemble through internal/infra/zkensemble (so it
// needs ZooKeeper and Java: scripts/install-zookeeper.sh) and otherwise uses
// only roomlog's public API (logroom, replica, store, checkpoint) and a
// plain go-zookeeper client for the raw ceiling. Before the first row it
// warms the fresh ensemble up (-zk-warmup, 30 s of pipelined creates): a
// JVM still compiling ZooKeeper's request path ran sequential creates at
// half a warm server's rate (bench/README.md, issue 44).
//
// Every client connects where logroom's clients do by default: to the
// ensemble's leader (logroom's "Connecting: the leader first"), the raw
// client included, so that roomlog and raw ZooKeeper pay the same hops.
// -any-server makes every client (raw and roomlog) connect in go-zookeeper's
// shuffled order instead; the header says which ("clients connect:").
//
// # Scenarios
//
//  1. raw: persistent-sequential creates with go-zookeeper: 256 B one at a
//     time, 256 B with 64 in flight, and znodes of logroom's default batch
//     size (256 KiB) with 64 in flight, the "raw batched ceiling". Znodes
//     are deleted in bulk (Multi) between segments of at most 128 MiB, off
//     the clock, so ZooKeeper's heap stays bounded.
//
//  2. append, bulk: a fresh room per row, a logroom Writer with default
//     configuration (-writer-inflight, -writer-linger change it), N
//     proposer goroutines calling Append in a loop. Each row runs in a child
//     process (the bench binary re-executed with the hidden first argument
//     -append-row, printing its row as JSON): a panic or a hang in the
//     writer fails that row, reported under errors, not the run. A
//     janitor deletes sealed channels as the run goes (the writer rotates on
//     its own) so the room stays under its byte bound; the room is deleted
//     after the row. Each row has a warm-up (a quarter of -duration, at most
//     1 s); a call counts when it completes inside the measured window.
//
//  3. propose, lag, checkpoint, footprint, bootstrap: in-process replicas
//     (package replica, OpsApplier entries of one OpSet, 256 B), each with
//     its own ZooKeeper session and an HTTP server for its checkpoint
//     handler. "propose" is the closed-loop maximum of a lone primary; lag
//     and checkpoint run paced at half of it. checkpoint alternates three
//     windows without and three with back-to-back checkpoints and pools
//     each side (checkpointRounds).
//
//  4. rooms: 100 rooms x 3 in-process members (small Pebble caches) on the
//     one ensemble: ZooKeeper writes/s at rest (the leader's zxid), znodes,
//     watches, sessions and live heap per room (mntr, jcmd), and the
//     aggregate Propose rate with every room writing.
//
//  5. failover: three replica processes started through internal/harness/testnode
//     (the roomlog-testnode binary, built with go build at the start of the
//     scenario, so it needs the source tree); kill -9 of the primary's
//     process, then the first
//     acknowledged proposal on any survivor; graceful TransferLeadership,
//     then the first acknowledged proposal on the target; and
//     (failover-handoff, three in-process replicas) replica.Shutdown of
//     the primary, then the first acknowledged proposal on another member.
//
// # Figures
//
// Latencies are per call (one Create, one Append) and come from a
// log-linear histogram (1.6% resolution, see hist.go). MB/s counts entry
// payload bytes, 1 MB = 10^6 bytes. ratio_to_raw is a row's MB/s over the
// raw batched ceiling's MB/s measured earlier in the same run.
//
// # Output
//
// Progress goes to stderr; the table and the targets of issues 14 and 7 (met/missed)
// to stdout; -json writes every figure with stable keys (Result, Report);
// -plot draws throughput (x, log) against p99 latency (y, log), one line per
// entry size, by hand as SVG (plot.go).
package main

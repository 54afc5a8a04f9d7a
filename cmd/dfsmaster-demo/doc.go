// Command dfsmaster-demo is a small DFS metadata master built on roomlog: a
// namespace of directories and files with blocks (package namespace, the
// replicated state machine), kept by an embedded replica.Replica and served
// over an HTTP JSON API (package api), with a command-line client (ctl, over
// package client) and a one-command demo of a primary/standby pair that
// survives kill -9 (pair).
//
// It uses only roomlog's public packages (replica, logroom, store), plus
// internal/infra/zkensemble in pair, to start a local ZooKeeper (and
// go-zookeeper's zk.ErrNoAuth for pair's ACL check).
//
// # Quick start
//
//	make demo                                 # installs ZooKeeper if missing, then runs the pair demo
//	go run ./cmd/dfsmaster-demo pair          # the same, ZooKeeper already installed
//	go run ./cmd/dfsmaster-demo pair --zk-servers 1 --phase 2s   # lighter and shorter
//	make demo DEMOFLAGS='--keep'              # keep data dirs and the masters' logs
//	go run ./cmd/dfsmaster-demo pair --acl    # every znode of the room with a digest ACL
//
// The demo needs ZooKeeper 3.8 and Java. When they are missing, pair says
// so and how to get them: run scripts/install-zookeeper.sh (Debian/Ubuntu:
// apt-get install zookeeper default-jre-headless), or pass --zk with the
// addresses of running servers.
//
// Running masters by hand (three terminals, ZooKeeper at 127.0.0.1:2181):
//
//	dfsmaster-demo serve --zk 127.0.0.1:2181 --room ns1 --id m1 --data /tmp/m1 --http 127.0.0.1:8081
//	dfsmaster-demo serve --zk 127.0.0.1:2181 --room ns1 --id m2 --data /tmp/m2 --http 127.0.0.1:8082
//	dfsmaster-demo ctl --addr 127.0.0.1:8082 mkdir -p /a/b    # on the standby: follows the 307
//	dfsmaster-demo ctl --addr 127.0.0.1:8082 ls --min-index 1 /a
//
// and open http://127.0.0.1:8081/ for the status page (each member's lag
// behind the primary, this master's last role changes, a failed master's
// reason) and http://127.0.0.1:8081/metrics for Prometheus.
//
// # serve
//
//	dfsmaster-demo serve --zk host:port[,...] --id ID --data DIR [--room NAME] [--http ADDR]
//	    [--advertise ADDR] [--session-timeout D] [--checkpoint-every N]
//	    [--request-ttl D] [--request-window N] [--exit-on-failure] [--log-level L]
//	    [--zk-digest-file FILE] [--checkpoint-token-file FILE] [--disk-stall-timeout D]
//	    [--observer] [--tls-ca FILE --tls-cert FILE --tls-key FILE]
//	    [--zk-tls-ca FILE [--zk-tls-cert FILE --zk-tls-key FILE] [--zk-tls-server-name NAME]]
//	    [--zk-acl-x509 SUBJECT|self ...]
//	    [--zk-acl-x509-workers SUBJECT ... | --zk-acl-x509-worker ID=SUBJECT ...]
//
// --observer makes the master an observer (replica.Config.Observer): it
// applies the log and serves reads and checkpoints but never becomes
// primary; /v1/status says "observer": true and a stopping primary never
// hands its role to it.
//
// One master: replica.Open with namespace.Applier, AdvertiseAddr = the HTTP
// address (what a standby's 307 points at and where peers fetch
// checkpoints), and one HTTP server carrying the API (package api), the
// replica's CheckpointHandler at replica.CheckpointPath(room) and
// Prometheus metrics at /metrics. The server routes exact paths itself
// (no http.ServeMux, whose plain-text redirects of unclean paths would
// bypass the API's JSON errors): /metrics, the room's checkpoint path and
// below, and everything else to the API (unknown paths: its JSON 404). It
// sets MaxHeaderBytes to api.MaxHeaderBytes (16 KiB). --http
// with port 0 picks a free port; --advertise defaults to the bound address
// (the host name when listening on every interface). Once it serves, serve
// prints one line on stdout,
//
//	dfsmaster-demo: serving http://127.0.0.1:40771 id=m2 room=ns1
//
// and logs (log/slog text) to stderr, role changes included.
//
// Mutations with an Idempotency-Key header (package api, "Retries and
// Idempotency-Key") go through replica.ProposeRequest with
// api.RequestIDForKey(key) — replica.RequestIDFromKey of the key in the
// API's scope, the key alone: one key names one request room-wide — so a
// retry is applied at most once, across failovers, restarts and bootstraps:
// the replicated request table answers it with the original's index and
// response, from which the API rebuilds the original status and body
// (Idempotent-Replayed: true). --request-ttl (default 10m, log time) and
// --request-window (default 2^20 entries) set how long a key is remembered
// (replica.Config.RequestTTL and RequestWindow; the policy travels in the
// log with each request, so masters with different settings still agree
// on what is remembered).
//
// The adapter from *replica.Replica to api.Master (master.go) maps the
// replica's errors onto the API's: *replica.NotPrimaryError ->
// *api.NotPrimaryError (307 to the primary's advertised address, or 503
// no_primary when none is known); ErrOutcomeUnknown and ErrNoResponse ->
// outcome_unknown; ErrQueueFull and logroom.ErrRoomFull -> overloaded;
// ErrClosed, ErrFenced -> unavailable; ErrFailed -> failed;
// ErrRequestConflict -> api.ErrRequestConflict (422
// idempotency_key_reused); context errors unchanged.
// Status never touches ZooKeeper: the channel list it shows is refreshed
// every second by a goroutine the adapter owns.
//
// A failed replica (replica.Status().Err set, role "failed": a broken
// applier, corruption, divergence from the log) no longer takes part in the
// room, but serve keeps running so the failure is visible where operators
// and supervisors look: /v1/status and the status page show role "failed"
// and the reason, GET /v1/health answers 503 {"error":"failed"} with the
// reason (200 in every other state but two: 503 disconnected while cut off
// from ZooKeeper, 503 unavailable while shutting down),
// and commands and reads answer 503 failed — never a 307 to the primary the
// failed master last knew, and no stale reads (its state may be the side
// that diverged). The checkpoint handler answers 503 too, so no peer
// bootstraps from it. The failure is logged once, with the reason; the
// master stays failed until it is restarted, which an operator should do
// only after finding the cause (see package replica). --exit-on-failure
// makes serve exit as soon as the replica fails instead (with the
// failure's class, "Exit codes"), for a supervisor that restarts or alerts
// on exit (the behaviour before this flag existed). A local disk that hangs is
// such a failure: a store write or sync still running after
// --disk-stall-timeout (default 20s) fails the master, so that a standby
// replaces a primary whose disk stopped answering.
//
// # Metrics
//
// GET /metrics on every master (serve, and so both masters of pair) is
// promhttp over the master's own prometheus.NewRegistry(), never the
// global registry:
//
//   - the replica's and its logroom writer's and reader's metrics
//     (replica.Config.Registerer; see packages replica and logroom,
//     "Metrics"), labelled room and member: roomlog_replica_role{role},
//     roomlog_replica_applied_index, roomlog_replica_committed_index,
//     roomlog_replica_epoch, roomlog_replica_member_applied_delta{peer},
//     roomlog_replica_proposals_total{outcome}, roomlog_writer_*,
//     roomlog_reader_*, roomlog_room_*, ...;
//   - the API's (package api, "Metrics"), labelled room and member too:
//     roomlog_demo_http_requests_total{route,code} and
//     roomlog_demo_http_request_duration_seconds{route}, where route is an
//     endpoint's fixed path, "checkpoint" (the checkpoint handler: a 401
//     there is a peer or a client without the token), "/metrics", or
//     "other" for any unknown path, so the label's values stay bounded;
//   - roomlog_build_info{release,commit,goversion}, always 1: the binary's
//     release, commit (40 hex digits, "+dirty" for a modified tree,
//     "unknown" when it is not known: see "version") and Go version, without
//     the room and member labels (it describes the process);
//   - Go runtime (go_*) and process (process_*) collectors, and promhttp's
//     own promhttp_metric_handler_*.
//
// Example queries: roomlog_replica_applied_index{room="ns1"} (each
// member's applied index), roomlog_replica_role{role="primary"} == 1 (who
// is primary), rate(roomlog_demo_http_requests_total{code=~"5.."}[5m]),
// count by (release) (roomlog_build_info) (how far a rolling upgrade got).
// /metrics needs no credentials and shows no secrets; the
// TestServeMetricsPrometheus test checks the bodies with promtool and
// queries a real Prometheus scraping a pair.
//
// # Credentials
//
// Secrets never go on a command line (where ps and shell history show
// them): serve reads them from files named by flags or, when a flag is not
// given, by environment variables. The flags and variables carry paths,
// not secrets.
//
// Environment variables follow the ROOMLOG_* scheme of cmd/roomlog
// (internal/cli): ROOMLOG_ZK (--zk of serve and chunkserver),
// ROOMLOG_ZK_DIGEST_FILE (--zk-digest-file) and
// ROOMLOG_CHECKPOINT_TOKEN_FILE (--checkpoint-token-file), each read only
// when its flag is not given. The older names ZK, DFSMASTER_ZK_DIGEST_FILE
// and DFSMASTER_CHECKPOINT_TOKEN_FILE still work, with a deprecation
// warning on stderr; the new name wins when both are set. ctl's
// DFSMASTER_ADDR names a master of this demo, not a roomlog setting, and
// stays.
//
//   - --zk-digest-file FILE (env ROOMLOG_ZK_DIGEST_FILE): ZooKeeper
//     digest credentials, one line user:password (logroom.LoadDigestFile: a
//     regular file of at most 4 KiB, one trailing newline allowed; errors
//     never show the password). The replica authenticates with them and
//     creates every znode with a digest ACL for that user only
//     (replica.Config.Auth), so a client without them can neither read nor
//     change the room (zk.ErrNoAuth). Every master of the room, and
//     cmd/roomlog (its own --zk-digest-file), needs the same credentials: a
//     room created without an ACL cannot be opened with credentials
//     (logroom.ErrForeignACL), and a master without them is refused by a
//     room that has one (zk.ErrNoAuth).
//   - --checkpoint-token-file FILE (env ROOMLOG_CHECKPOINT_TOKEN_FILE):
//     the checkpoint bearer token (replica.Config.CheckpointToken): one line
//     of 1 to 4096 bytes of visible ASCII (0x21-0x7e), one trailing newline
//     ("\n" or "\r\n") removed; an empty or larger file, or any other byte,
//     is refused with a usage error (exit 2) that does not show the token.
//     The checkpoint endpoint then answers 401 (WWW-Authenticate: Bearer)
//     and serves nothing to a request without "Authorization: Bearer
//     <token>", and the master sends the token when it fetches a peer's
//     checkpoint (bootstrap) or manifest (the primary's check before it
//     deletes channels). Every master of the room needs the same token: a
//     master with another one can neither bootstrap from its peers nor
//     serve them a checkpoint.
//
// ctl talks only to the HTTP API, never to ZooKeeper or the checkpoint
// endpoint, so it has neither flag.
//
// # TLS
//
// --tls-ca, --tls-cert and --tls-key (PEM files, all three) make serve's
// one HTTP server (API, status page, /metrics, checkpoint endpoint) HTTPS
// only, with mutual TLS: a client must present a certificate the CA file
// signed (tls.RequireAndVerifyClientCert) and the master's certificate
// must name the host it advertises. The master advertises
// https://host:port, which is what a standby's 307 points at and where
// its peers fetch checkpoints; the replica gets the same files as
// replica.Config.PeerTLS, so its own fetches, manifest probes and
// liveness stream present its certificate. A plain HTTP request is
// answered 400 and nothing else; a client without a certificate or with
// another CA's is refused in the handshake. The files are re-read when
// they change (tlsfiles): new connections use the new certificate within
// a second, without a restart; refused files are logged and the last good
// ones stay in use. ctl takes the same three flags (then host:port means
// https://host:port); the Go client's client.HTTPS(src, timeout) does the
// same for programs.
//
// TLS to ZooKeeper takes cmd/roomlog's flags, in serve and chunkserver:
// --zk-tls-ca (connect to the servers' secureClientPort, --zk naming those
// ports, and verify them against this CA), --zk-tls-cert and --zk-tls-key
// (the certificate ZooKeeper's x509 provider knows the process by),
// --zk-tls-server-name, and --zk-acl-x509 SUBJECT (repeatable; "self" is
// the certificate's subject): the identities every znode the process
// creates grants, instead of or beside the digest of --zk-digest-file
// (replica.Config.ZooKeeperTLS, ZooKeeperTLSServerName, ACLIdentities).
// Every master and chunk server of a room lists the same identities.
//
// The chunk servers' task directory (recipe/tasks, "Chunk servers") gets
// the masters' identities too, and one of two ways for the chunk
// servers. --zk-acl-x509-workers SUBJECT (repeatable) adds identities
// with all permissions on every task znode, never the room's: any of
// them can act as any chunk server. --zk-acl-x509-worker ID=SUBJECT
// (repeatable, one per chunk server; its --id and its certificate's
// subject, e.g. cs1=CN=cs1,O=dfs) gives each chunk server a certificate
// of its own instead: the assigner's per-worker ACLs
// (tasks.AssignerConfig.WorkerACL, WorkerIdentities; recipe/tasks doc,
// "ACLs"). A chunk server then reads and reports only through its own
// directory <dir>/assign/<id> (the assigner moves its results) and is
// refused (NoAuth) reading or changing another's, the waiting tasks, the
// results and the room; a chunk server not listed gets no tasks. It can
// still create or delete membership nodes of other ids in <dir>/workers
// (ZooKeeper cannot limit a create or delete to one child name): that
// can delay or misdirect tasks, not forge a result. A value that is not
// ID=SUBJECT, an id given twice or a subject given to two ids is refused
// naming it; the flag needs --zk-acl-x509 and excludes
// --zk-acl-x509-workers. A chunk server lists the masters and itself
// (--zk-acl-x509 self) for the znodes it creates (membership, reports).
// A chunk server waits until the primary's assigner created
// <dir>/workers before it joins: one joining first would create the
// directory with its own ACL and grant itself all of it.
//
// Shutdown (SIGINT/SIGTERM): 1. replica.Close — in-flight proposals get
// their outcome and the election candidate is deleted, so a standby takes
// over at once rather than after a session timeout; 2. HTTP shutdown,
// forcing connections still open after 2 s closed. Exit status: 0 after a
// clean shutdown; the failure's class ("Exit codes": 3 ZooKeeper
// unreachable, 4 the room not found or lost, 5 access denied, else 1) when
// the master could not open or the replica failed (at once with
// --exit-on-failure, else when stopped); 1 when the HTTP server stopped by
// itself or the shutdown reported an error; 2 for a bad command line.
//
// # pair
//
//	dfsmaster-demo pair [--zk host:port,...] [--zk-servers 1|3] [--session-timeout 2s]
//	    [--phase 4s] [--workers 4] [--checkpoint-every 500] [--room NAME] [--keep]
//	    [--acl | --zk-digest-file FILE] [--chunkservers 4] [--tls]
//
// Protocol:
//
//  0. Secrets, in the demo's temp dir (mode 0600): always a checkpoint
//     bearer token (random, file checkpoint-token); with --acl also ZooKeeper
//     digest credentials (user "dfsmaster", random password, file
//     zk-digest). --zk-digest-file FILE (or ROOMLOG_ZK_DIGEST_FILE) uses
//     the operator's credentials instead, e.g. for --zk servers whose rooms
//     need them; --acl and --zk-digest-file exclude each other (--acl
//     overrides the environment variable).
//     With --tls, a CA and certificates for m1, m2, each chunk server
//     (cs1, cs2, ...: one identity each) and the demo's own client
//     (internal/infra/testpki) in <temp dir>/tls.
//  1. ZooKeeper: with no --zk, start a local ensemble (3 servers by
//     default) through internal/infra/zkensemble in a temp dir.
//  2. Start m1, then m2, as separate processes: this binary (os.Executable)
//     running serve --checkpoint-token-file (and --zk-digest-file with
//     credentials), each with its own data dir, log file and HTTP port on
//     127.0.0.1, each serving /metrics. Wait until m1 is primary and m2 a
//     standby that names it. With credentials, check with an
//     unauthenticated ZooKeeper client that the room's znode and m1's
//     member znode refuse it (zk.ErrNoAuth); anything else ends the demo.
//     With --tls the masters run with --tls-* and the demo checks that m1
//     answers a plain HTTP request with 400 and refuses an HTTPS client
//     without a certificate; every request of the demo presents its own.
//     With ZooKeeper over TLS it checks that a client of the same CA with
//     another identity, a plain client and (with chunk servers) cs1's
//     certificate each get zk.ErrNoAuth reading the room and on every
//     write a master makes:
//     setting the epoch znode (under the name the room meta records) and
//     creating a writer token under it, a candidate in the election node
//     and the next batch in the newest channel (each write a Multi that
//     ends with a check no write passes, so nothing of it lands).
//  3. Workload: --workers writers, each in its own subtree /w<k>, issue
//     mkdir, create, addblock, rename, delete and delete -r through the Go
//     client, each operation with its own Idempotency-Key, and record every
//     acknowledged operation in a model of their subtree. A progress line
//     per second shows acked ops, the rate, the operations resolved by
//     retry (and how many of those were replayed) and each master's role
//     and applied index.
//     With --chunkservers N (default 4; 0: none), before the workload: the
//     masters run serve --chunkservers; the room's version target is set
//     to 2 and the demo waits for the primary to move the room (block
//     placements are commands only room version 2 allows); N chunk-server
//     processes (this binary's chunkserver) join; a block writer adds
//     blocks to files /chunks/f<k> (replication 3), each placed on 3 live
//     chunk servers at random. With --tls and a local ensemble, the
//     masters map each chunk server to its certificate
//     (--zk-acl-x509-worker csN=SUBJECT) and, once cs1 and cs2 joined,
//     the demo checks with cs1's certificate that it lists its own task
//     directory but gets zk.ErrNoAuth listing, creating and deleting in
//     cs2's, writing or deleting cs2's directory, creating in
//     <dir>/results and writing or deleting under the room; anything else
//     ends the demo. Half a --phase into the workload, chunk
//     server cs2 is killed with kill -9: the primary declares it lost and
//     re-replicates its blocks (see "Chunk servers").
//  4. After --phase, kill -9 the primary's process group.
//  5. Takeover: the writers retry on the standby. The takeover time is from
//     the kill to the first acknowledgement of a request sent after it
//     that is not a replay (only the new primary can have served that; a
//     replay may come from a standby's request table).
//  6. After another --phase, restart the killed master with the same id and
//     data dir; it rejoins as a standby (restoring a checkpoint from its
//     peer if the channels it missed were deleted meanwhile). The workload
//     goes on for one more --phase, then stops.
//  7. With chunk servers, stop the block writer and wait (up to 45 s)
//     until the primary's placements (GET /v1/placements) have no block
//     under its replication factor and none on the killed server. Then
//     converge: wait until both masters report the same applied index, at
//     least the highest acknowledged one, with one primary.
//  8. Check: /v1/hash of both at that index must be equal, and every
//     acknowledged operation must be visible on both (stat/ls, min_index =
//     that index): each live file with exactly its acknowledged blocks (ids
//     and sizes, in order) and replication, each directory with exactly the
//     expected children, each renamed or deleted path gone.
//  9. Print a summary and, as the last line, RESULT {json}. Exit 0 only when
//     nothing acknowledged was lost, nothing unexplained was found, no
//     operation was left with an unknown outcome, the hashes are equal and
//     the takeover was measured.
//
// Outcomes of a writer's request: acknowledged (recorded; must survive);
// retried (503 no_primary, overloaded or unavailable, or a connection that
// could not even be made: nothing was applied); unknown (connection reset
// after sending — the requests in flight to the killed primary —, 503
// outcome_unknown, 504). Every attempt of an operation carries the same
// Idempotency-Key, so an unknown outcome is resolved by simply sending the
// operation again (the client first retries on the same master, then the
// writer on the next one): if the lost attempt had been applied, the answer
// is the original's, replayed (Idempotent-Replayed) and nothing is applied
// twice; if not, the retry applies it. Nothing is read back. Requests in
// flight at the kill usually did land (their batch reached ZooKeeper before
// the process died), so their retries are typically replays, often answered
// by the standby from its own request table before it even takes over.
//
// A master that reports itself failed (serve keeps serving its status) ends
// the demo at once with its reason; the progress lines show it as FAILED.
//
// RESULT fields: ok, ops_acked, ops_lost (acknowledged operations whose
// effect is missing on a master), ops_unknown (operations abandoned with an
// attempt's outcome unknown: only when a writer stops mid-retry, so 0 in a
// passing run), ops_resolved_by_retry (operations with an unknown attempt
// that a retry with the same key answered), ops_replayed (those answered
// with the original's answer: the lost attempt had been applied and the
// retry was deduplicated; the rest were applied by the retry),
// mismatches (state no operation explains: a duplicate, a phantom entry),
// failover_ms, killed_node, takeover_node, replicas, hashes_equal, hash,
// applied_index, epoch (2 when the forced failover was the only one),
// bootstraps (checkpoint restores of the restarted master), checks,
// duration_ms, session_timeout_ms, zk_servers, acl (the masters ran with
// digest credentials), tls, zk_tls, zk_worker_acls (each chunk server had
// its own certificate and per-worker ACLs, and the check above passed),
// chunkservers, chunkservers_killed, blocks_placed,
// rereplication_tasks (re-replication tasks the chunk servers reported
// done), tasks_done_twice (task ids reported done by more than one chunk
// server, or twice by one), blocks_under_replicated (at the end), error.
// With chunk servers, ok also needs tasks_done_twice 0,
// blocks_under_replicated 0 and at least one re-replication task.
//
// # Chunk servers
//
//	dfsmaster-demo chunkserver --zk host:port[,...] --room NAME --id ID
//	    [--zk-digest-file FILE] [--session-timeout 2s] [--copy-time 20ms]
//	    [--zk-tls-ca FILE --zk-tls-cert FILE --zk-tls-key FILE] [--zk-acl-x509 SUBJECT|self ...]
//	dfsmaster-demo serve ... --chunkservers [--chunk-grace 2s]
//	    [--zk-acl-x509-worker ID=SUBJECT ...]
//
// A chunk server is a worker of the recipe/tasks directory
// /dfsmaster-demo/<room>/chunk (its membership is its ZooKeeper session):
// for each task assigned to it ("copy block B, held by these servers") it
// waits --copy-time (the simulated copy) and reports success; it prints
// "dfsmaster-demo: chunk task done <task> attempt=<n> ok=<bool>" per report.
// The namespace records each placed block's servers (namespace.Placement:
// rf, servers, gen). A master with --chunkservers runs, while it is primary
// and holds the lock <dir>/assigner (recipe/lock), a tasks.Assigner fenced
// by that lease and, every 200 ms: (1) each accepted task result becomes
// addreplica(block, worker, expect = the task's generation + 1) through
// ProposeRequest keyed by the task id (a result applied by a master that
// died before deleting it is a duplicate for the next, within the request
// table's window; a result of a task made from a stale view finds the
// placement at another generation and is not recorded), then the result
// is deleted; (2) a server named in a placement whose membership node (an
// ephemeral node: a persistent one is forged and ignored) has been absent
// for --chunk-grace, counted from the term's start at the earliest, is
// lost: loseserver(server) removes it from every placement where it is not
// the last holder (a block's only copy stays listed: there is nothing to
// copy from); (3) each under-replicated block with a live holder and a
// live server not holding it gets the task rr-<block>-<gen> (gen: the
// placement's change count), so every master derives the same ids and one
// missing replica is one task; the assigner gives it to the least loaded
// live server not holding the block. Nothing is proposed below room
// version 2, and a submit is skipped once the master's lease or role is
// gone. GET /v1/placements lists the placements and counts the
// under-replicated. A chunk server absent longer than the grace (a slow
// reconnect) counts as lost: its blocks are copied elsewhere, and it is
// not added back (a real DFS would re-register its blocks through a block
// report). A chunk server retries a failed Report until it lands, the
// task was reassigned, or it closes.
//
// Why a 2 s session timeout: a kill -9'd primary cannot say goodbye; the
// standby takes over only when ZooKeeper expires the dead primary's session,
// so the takeover takes about one session timeout plus an election and the
// log catch-up (measured here: 2.2–3.2 s). 2 s keeps the demo short while
// staying well above what the servers allow (2 ticks = 400 ms with
// zkensemble's 200 ms tick) and above client pauses on a loaded machine;
// production masters should use more (replica's default is 4 s), since a
// session that expires under a long GC or CPU starvation costs a needless
// failover. If that happens during the demo (the summary notes an epoch
// above 2), correctness still holds and is checked the same way.
//
// Cleanup: every serve runs in its own process group with
// Pdeathsig=SIGKILL, forked from one locked OS thread, so the masters die
// with the demo even if the demo is SIGKILLed; ZooKeeper servers likewise
// (zkensemble). On success, failure or Ctrl-C (SIGINT/SIGTERM) the demo
// stops the writers, SIGTERMs the masters (SIGKILL after 10 s), stops
// ZooKeeper and removes its temp dir, secrets included (unless --keep). After a failure it
// prints the tail of each master's log to stderr. The whole demo takes
// about 25 s with the defaults.
//
// # ctl
//
//	dfsmaster-demo ctl [--addr host:port[,host:port...]] [--timeout d] [--idempotency-key KEY] <command> [flags] [args]
//
// ctl's commands: mkdir [-p] PATH, create [-r N] PATH, addblock PATH SIZE,
// rename SRC DST, delete [-r] PATH, ls [--min-index N] PATH,
// stat [--min-index N] PATH, status, health, hash [--min-index N]. status
// shows a failed master's reason ("failure"); health exits 1 with it. The
// address defaults to $DFSMASTER_ADDR, else 127.0.0.1:8080. Answers are
// printed as indented JSON; a failure prints "dfsmaster-demo ctl
// <command>: <code>: <message>" to stderr and exits 1; a bad command line
// exits 2.
//
// Every command uses every --addr (a client.Pool). Reads (ls, stat, hash),
// status and health go to the masters in turn and move on from one that
// cannot serve (cut off from ZooKeeper, failed, shutting down, behind,
// unreachable); health succeeds once one master is healthy. Mutations go
// to the masters in the order given, under one Idempotency-Key, and move
// on from one that cannot take them (unreachable, 503 no_primary,
// overloaded, unavailable, disconnected or failed, 500, or the outcome
// unknown there): a dead master listed first does not fail a mutation
// while another is primary, and the key keeps it applied at most once. A
// 4xx is an answer and ends the command. When no master took it in a
// round (every one unreachable or without a primary, or a standby
// redirecting to a primary that does not answer: right after a kill -9,
// until the standby takes over), ctl sends it again, round after round
// with the same key and a backoff up to 1 s, for at most --wait-primary
// (default 20s, within --timeout; 0: one round), saying from 2 s on every
// 3 s what it waits for (client.Pool.PrimaryWait, OnRetry).
//
// A mutation is sent with an Idempotency-Key: --idempotency-key's (only
// with a mutation), else a random one. The client re-sends it with that key
// while its outcome is unknown, within --timeout (package client). If ctl
// still gives up with the outcome unknown, it prints the key; re-running the
// same command with --idempotency-key KEY (within the masters' request TTL,
// 10 minutes by default) applies it at most once and prints the original
// answer with "replayed": true if the first run had been applied. The same
// key with another command is refused (422 idempotency_key_reused).
//
// # version
//
//	dfsmaster-demo version [--json]   (or dfsmaster-demo --version)
//
// prints one line (with --json the object roomlog version --json prints,
// internal/cli.Version), exit 0: the release, the commit the binary was built
// from (12 hex digits, "+dirty" for a modified tree; from the toolchain's
// VCS stamping, else the one 'make build' stamps with -ldflags -X, so
// "unknown" only for a plain go build with VCS stamping off or outside a
// checkout), the Go version and the room versions it reads and
// writes (package version), e.g. "v0.2.0 (commit cf602c2c9d9e, go1.26.8,
// room versions 1..2)". A running master shows the same in /v1/status
// ("version", "commit", "room_version_min", "room_version_max") and on
// /metrics (roomlog_build_info).
//
// # Help and exit codes
//
// -h, --help and help print the usage, with the exit codes, to stdout and
// exit 0; so does every command's -h (and help COMMAND), and every ctl
// command's (ctl mkdir -h). No command at all is a usage error on stderr.
//
// # Progress
//
// A master bootstrapping from a peer's checkpoint shows the fetch
// (replica.Config.CheckpointFetch.Progress, bootprogress.go): on a terminal a
// bar the log lines do not break; otherwise, from 2 s on, a log line every 3 s
// with the MiB received, the total and the rate, and one when the checkpoint
// is verified. restore shows entries applied of the target the same way.
//
// # JSON
//
// Every command that prints a result takes --json, as roomlog's do: ctl
// (before or after its command) and restore print JSON with or without it;
// version prints its line, or with --json an object; pair prints its
// progress and the RESULT {json} line on stdout, or with --json the
// progress on stderr and only the result, one object, on stdout.
//
// # Exit codes
//
// By class, as roomlog's (package internal/cli):
//
//	0  ok
//	1  a failure of no class below (ctl: a failed request)
//	2  usage: a bad command line
//	3  ZooKeeper unreachable
//	4  room not found, or lost (deleted or replaced under a master that
//	   holds its state: recover with roomlog reseed)
//	5  access denied (the room's ACL grants the master nothing, or a
//	   foreign ACL)
//
// Subcommands are listed in subcommands() (main.go); the master plugs into
// package api through its Master interface.
package main

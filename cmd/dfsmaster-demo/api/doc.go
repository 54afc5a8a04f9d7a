// Package api is the HTTP JSON interface of the dfsmaster demo: namespace
// mutations go through the replicated log, reads come from the local store,
// and a standby sends writers to the primary.
//
// It is written against the small Master interface rather than a concrete
// replica, so it can be served by the embedded replica (through an adapter in
// the serve command) and tested with an in-process fake over a real store.
//
// # Endpoints
//
//	POST /v1/mkdir     {"path":"/a/b","parents":true}      -> {"index":N}
//	POST /v1/create    {"path":"/a/f","replication":3}     -> {"index":N}   (replication defaults to 3)
//	POST /v1/addblock  {"path":"/a/f","size":134217728}    -> {"index":N,"block_id":B}
//	                   (optional "servers":["cs1",...]: the block's placement; room version 2 or more)
//	POST /v1/rename    {"src":"/a/f","dst":"/b/f"}         -> {"index":N}
//	POST /v1/delete    {"path":"/a","recursive":true}      -> {"index":N}
//	GET  /v1/ls        ?path=/a[&min_index=N]              -> {"index":N,"entries":[{"name","type","size","replication","blocks"}...]}
//	GET  /v1/stat      ?path=/a/f[&min_index=N]            -> {"index":N,"path","type","size","replication","blocks","block_list":[{"id","size"}...]}
//	GET  /v1/status                                        -> Status (members with their lag, role_changes, versions)
//	GET  /v1/hash      [?min_index=N]                      -> {"applied_index":N,"hash":"..."}
//	GET  /v1/placements [?min_index=N]                     -> {"index":N,"placements":[{"block","rf","servers","gen"}...],"under_replicated":K}
//	GET  /v1/health                                        -> {"status":"ok","id","role","applied_index"}, or 503 (below)
//	GET  /                                                 -> HTML status page, refreshes itself
//
// Status (/v1/status, and the page) includes each member's lag behind the
// primary ("members": [{"id","addr","role","observer","applied_index","lag"}]: the
// primary's applied index minus the member's, from the replica's member
// list, which each member refreshes at most every 50 ms) and this master's
// last MaxRoleChanges role changes, newest first ("role_changes":
// [{"at","role","epoch","reason"}]); a failed master's reason stays in
// "failure" and on the page. "observer" is true for a master started with
// serve --observer (replica.Config.Observer), in Status and in its row of
// "members": it applies the log and serves reads and checkpoints like a
// standby, but never becomes primary (its "role" stays "standby"); the
// page marks it "observer".
//
// Status also names this master's binary and the room version (replica
// package doc, "Room version"), so an operator follows a rolling upgrade
// from any member:
//
//	"version"               this master's release ("v0.2.0")
//	"commit"                the commit it was built from: 40 hex digits, "+dirty" when
//	                        built from a modified tree, "unknown" when not built from a checkout
//	"room_version"          the room's version as this master sees it
//	"room_version_since"    the first index written under it (0: since the room began)
//	"room_version_target"   the version an operator asked for (0: none set)
//	"room_version_blocked"  why this master, as primary, does not move the room to the
//	                        target: the members that do not support it ("" when at the
//	                        target, or not primary)
//	"room_version_min", "room_version_max"
//	                        the room versions this master reads and writes
//
// and each member of "members" has "room_version_min" and
// "room_version_max", the range it advertises (1..1 for a member whose
// binary predates room versions, v0.1.0). The page shows the same.
//
// "index" is the log index the answer reflects: for a mutation, the index of
// its entry; for a read, the applied index of the consistent view it read.
// min_index makes a read wait (at most Config.ReadWait) until the local store
// has applied that index: a client that passes the index of its last write
// reads its own writes on any master. A master cut off from ZooKeeper that
// has not applied min_index cannot know when it will: it answers 503
// disconnected at once (Retry-After: 1, the reason and how far behind), and
// a read already waiting gets that answer the moment the master sees the
// loss; the client reads from another master.
//
// # Retries and Idempotency-Key
//
// Every mutation accepts an Idempotency-Key header (the convention of Stripe
// and of the IETF httpapi draft): 1 to 255 bytes of printable ASCII
// (0x20-0x7e), taken verbatim (no unquoting), at most one header. A key
// makes the mutation safe to retry: it is proposed with
// Master.ProposeRequest under RequestIDForKey(key) (replica.RequestIDFromKey
// of the key prefixed with this API's scope) and the replica applies it at
// most once, whatever happens between the attempts (a lost connection, 503
// outcome_unknown, 504, a failover, a restart, a bootstrap from a
// checkpoint).
//
//	Idempotency-Key: 3f6c0a...            any mutation; reads ignore the header
//	-> first time: the answer, as without a key
//	-> again, same key, same request: the original's status and body, byte for byte,
//	   plus "Idempotent-Replayed: true"; nothing applied again (rejections too:
//	   a replayed 409 carries the original's index)
//	-> same key, another endpoint or body: 422 idempotency_key_reused, nothing applied
//	-> malformed key: 400 invalid_idempotency_key, before the body is read
//
// Scope: the key alone, room-wide. Every endpoint, master and client of the
// room shares one key space, so a key names one request; reusing it for
// another request is the client's mistake (422), never a second request.
// "The same request" means the same command: the body is compared after
// decoding (JSON spacing, field order and a defaulted replication do not
// matter). A retry may go to any master: a standby that has applied the
// original answers it from its own request table (200 replayed, no 307);
// otherwise it redirects as usual (a client following the 307 must re-send
// the header; Go's net/http does). A retry that
// arrives while the original is still in flight on the same master waits
// for it and gets its answer.
//
// Limits: the key is remembered for the replica's request TTL and window
// (replica.Config.RequestTTL / RequestWindow, default 10 minutes of log
// time and 2^20 entries; serve --request-ttl / --request-window), whichever
// ends first; a retry after that is a new request and is applied again. A
// request refused before reaching the log (a 4xx other than a namespace
// rejection, 307, 503 no_primary, overloaded, unavailable or failed) leaves
// no record: retrying it is simply trying again.
//
// Without a key nothing changes: a retry after an unknown outcome may apply
// the command twice, so read before retrying.
//
// # Strictness
//
// A mutation's body is exactly one JSON object, at most
// Config.MaxBodyBytes, whose keys are exactly the documented names:
//
//   - keys are case-sensitive: {"PATH":"/a"} or {"Path":"/a"} is 400
//     bad_request naming the key ("JSON keys are case-sensitive; did you
//     mean "path"?"), although encoding/json alone would accept them;
//   - a key given twice is 400 bad_request (encoding/json would keep the
//     last one), also when only the case differs;
//   - unknown keys, trailing data, wrong types: 400 bad_request.
//
// These are checked by a token-level scan of the body's top-level object
// before it is decoded (linear in the body, which MaxBodyBytes bounds).
//
// Paths (the body's "path", "src" and "dst", and ls's and stat's path
// parameter) must be valid UTF-8 without control characters: 400
// invalid_path for bytes that are not UTF-8 or a \u escape of an unpaired
// UTF-16 surrogate (encoding/json would turn both into U+FFFD silently),
// and for any C0 or C1 control character or DEL (NUL, tab, newline, ESC,
// U+0085, ...), escaped or not. These checks are the API's, stricter than
// the log format's (namespace.ValidatePath rejects only invalid UTF-8 and
// NUL), so a path with, say, a newline that an older version put in the
// log is still applied the same way everywhere, but can no longer be
// created, read or changed through the API.
//
// "rename" with src "/" and "delete" of "/" are refused before the log:
// 400 invalid_path (the code the applier would answer), without an index,
// and with an Idempotency-Key nothing is recorded. Other operations on the
// root (mkdir, create, addblock, rename onto "/") still reach the log and
// are rejected there (409 already_exists, is_a_directory) with an index.
//
// # Errors
//
// Every failure is JSON {"error":code,"message":text} (plus "index" when a
// command reached the log and was rejected there, and "primary" on a
// redirect), except the few that net/http writes itself (below). Client
// mistakes are 4xx and change nothing:
//
//	400 invalid_path     bad path syntax, invalid UTF-8 or a control character in a path,
//	                     rename or delete of the root (before the log), or an impossible move
//	                     (a directory into itself)
//	400 bad_request      malformed JSON, unknown fields (keys are case-sensitive), duplicate keys,
//	                     unknown query parameters, trailing data, wrong types,
//	                     negative or out-of-range numbers, unknown endpoint (404), wrong method (405),
//	                     body over Config.MaxBodyBytes (413)
//	400 invalid_idempotency_key  empty, longer than 255 bytes, not printable ASCII, or repeated
//	422 idempotency_key_reused   the key was used for another request (endpoint or body)
//	404 not_found        the path or a parent does not exist
//	409 already_exists, not_empty, not_a_directory, is_a_directory
//
// The master's own state gives:
//
//	307 (Location: the primary's same path; https:// when this master serves TLS) a mutation on a standby that knows the primary
//	503 no_primary       a mutation while no primary is known (or during an election)
//	503 outcome_unknown  the command may or may not have committed: with a key, retry with it;
//	                     without, read before retrying
//	503 overloaded       nothing was sent (queue or room full): retry later (Retry-After)
//	503 unavailable      the master is shutting down or was deposed; nothing was committed
//	503 disconnected     cut off from ZooKeeper: a read whose min_index it has not applied
//	                     (at once, Retry-After), and /v1/health; use another master
//	503 behind           a standby whose tail cannot reach its room's state (no checkpoint
//	                     to fetch, say; status "tail_error" says why): every read, and
//	                     /v1/health (Retry-After); use another master
//	503 failed           the master failed (below); the message gives the reason
//	504 timeout          min_index not applied within Config.ReadWait, or a proposal
//	                     that did not finish within Config.ProposeTimeout (outcome unknown,
//	                     as for 503 outcome_unknown)
//	500 internal         a bug or a storage failure, never a client mistake
//
// # Errors net/http writes itself
//
// Some requests are answered by Go's HTTP server before any handler runs,
// not in the JSON shape above; no handler can change that. Each closes
// the connection:
//
//	400 Bad Request          malformed request line or header, missing Host (HTTP/1.1)
//	431 Request Header Fields Too Large
//	                         headers over the server's MaxHeaderBytes (the serve command
//	                         sets MaxHeaderBytes, 16 KiB; net/http allows 4 KiB on top)
//	501 Not Implemented      an unsupported Transfer-Encoding
//	505 HTTP Version Not Supported
//	417 Expectation Failed   an Expect header other than 100-continue (empty body)
//
// All but 417 are Content-Type: text/plain; charset=utf-8 with the status
// line as the body, sometimes followed by ": <detail>" (e.g. "431 Request
// Header Fields Too Large", "400 Bad Request: missing required Host
// header").
//
// Clients should treat any non-JSON 4xx or 5xx as such a protocol error.
// Every request net/http accepts reaches a handler: unknown and unclean
// paths ("//v1/status", "/v1/../v1/ls") get the API's JSON 404, since the
// serve command routes without an http.ServeMux, whose redirects of
// unclean paths would be plain text. Requests net/http answered itself are
// not counted in the metrics.
//
// # A failed master
//
// A master whose replica failed (an unrecoverable error: a broken applier,
// corruption, divergence from the log; Master.Status().Error says which)
// no longer takes part in the room. Its API stays up so the failure is
// visible:
//
//	GET /v1/status, GET /      200, role "failed" and "failure": the reason
//	GET /v1/health             503 {"error":"failed","message":"... <reason> ..."}
//	mutations                  503 failed, checked before proposing: never a 307, since the
//	                           primary a failed master last knew is not verified
//	ls, stat, hash             503 failed, also with min_index
//
// Reads are refused rather than served stale: a failed master's state is
// frozen at its applied index and, after a divergence, may be the wrong
// side; clients read from another master. /v1/health answers 200 while
// the master takes part in the room connected to ZooKeeper (primary,
// standby, takeover), 503 disconnected while its connection is down (it
// recovers by itself, but a load balancer should send reads elsewhere
// meanwhile; /v1/status says "connected" and "disconnected_ms"), and 503
// unavailable while it shuts down (role "closed"). HEAD works on every GET
// endpoint, so a probe can use HEAD /v1/health.
//
// # Metrics
//
// With Config.Registerer, New registers two collectors there (a second
// New on the same registerer fails):
//
//   - roomlog_demo_http_requests_total{route,code} (counter): requests
//     answered, by route and status code;
//   - roomlog_demo_http_request_duration_seconds{route} (histogram,
//     500µs to 10s): handler time, from the request's arrival at the
//     handler to its return (a mutation's includes the proposal).
//
// route is the endpoint's fixed path ("/v1/mkdir", "/", ...), RouteOther
// ("other") for any path the API does not serve, or the name given to
// Server.Instrument for the embedding server's own endpoints (the serve
// command: "checkpoint" and "/metrics"): raw paths never become label
// values, so the series stay bounded (at most the routes times the status
// codes the API writes). The serve command wraps the registerer with its
// room and member labels and serves the registry at /metrics, which
// Config.MetricsPath makes the status page link to.
//
// # Protocol of a mutation
//
//  1. Check the Idempotency-Key header, if any (400 invalid_idempotency_key).
//  2. Decode the body strictly (see Strictness) and build a
//     namespace.Command; validate it, refuse the root for rename and
//     delete (syntax errors and these never reach the log).
//  3. A failed or closed master answers 503 failed / unavailable here.
//  4. Without a key, Master.Propose the encoded command; with one,
//     Master.ProposeRequest(RequestIDForKey(key), command). Map the error as
//     above (ErrFailed: 503 failed; ErrRequestConflict: 422).
//  5. Decode the applier's Response (for a duplicate: the original's, with
//     the original's index, and the Idempotent-Replayed header): success ->
//     200 with the index (and block id); a rejection -> its 4xx code with
//     the index of the rejected entry. This step reads nothing but the
//     index and the response, so a replay is byte for byte the original.
package api

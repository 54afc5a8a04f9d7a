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
//	POST /v1/rename    {"src":"/a/f","dst":"/b/f"}         -> {"index":N}
//	POST /v1/delete    {"path":"/a","recursive":true}      -> {"index":N}
//	GET  /v1/ls        ?path=/a[&min_index=N]              -> {"index":N,"entries":[{"name","type","size","replication","blocks"}...]}
//	GET  /v1/stat      ?path=/a/f[&min_index=N]            -> {"index":N,"path","type","size","replication","blocks","block_list":[{"id","size"}...]}
//	GET  /v1/status                                        -> Status
//	GET  /v1/hash      [?min_index=N]                      -> {"applied_index":N,"hash":"..."}
//	GET  /v1/health                                        -> {"status":"ok","id","role","applied_index"}, or 503 (below)
//	GET  /                                                 -> HTML status page, refreshes itself
//
// "index" is the log index the answer reflects: for a mutation, the index of
// its entry; for a read, the applied index of the consistent view it read.
// min_index makes a read wait (at most Config.ReadWait) until the local store
// has applied that index: a client that passes the index of its last write
// reads its own writes on any master.
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
// # Errors
//
// Every failure is JSON {"error":code,"message":text} (plus "index" when a
// command reached the log and was rejected there, and "primary" on a
// redirect). Client mistakes are 4xx and change nothing:
//
//	400 invalid_path     bad path syntax, or an impossible move (the root, a directory into itself)
//	400 bad_request      malformed JSON, unknown fields or query parameters, trailing data, wrong types,
//	                     negative or out-of-range numbers, unknown endpoint (404), wrong method (405),
//	                     body over Config.MaxBodyBytes (413)
//	400 invalid_idempotency_key  empty, longer than 255 bytes, not printable ASCII, or repeated
//	422 idempotency_key_reused   the key was used for another request (endpoint or body)
//	404 not_found        the path or a parent does not exist
//	409 already_exists, not_empty, not_a_directory, is_a_directory
//
// The master's own state gives:
//
//	307 (Location: the primary's same path) a mutation on a standby that knows the primary
//	503 no_primary       a mutation while no primary is known (or during an election)
//	503 outcome_unknown  the command may or may not have committed: with a key, retry with it;
//	                     without, read before retrying
//	503 overloaded       nothing was sent (queue or room full): retry later (Retry-After)
//	503 unavailable      the master is shutting down or was deposed; nothing was committed
//	503 failed           the master failed (below); the message gives the reason
//	504 timeout          min_index not applied within Config.ReadWait, or a proposal
//	                     that did not finish within Config.ProposeTimeout (outcome unknown,
//	                     as for 503 outcome_unknown)
//	500 internal         a bug or a storage failure, never a client mistake
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
// side; clients read from another master. /v1/health answers 200 in every
// other state (primary, standby, takeover, even with the ZooKeeper session
// down, which the master recovers from by itself) and 503 unavailable while
// the master shuts down (role "closed"). HEAD works on every GET endpoint,
// so a probe can use HEAD /v1/health.
//
// # Protocol of a mutation
//
//  1. Check the Idempotency-Key header, if any (400 invalid_idempotency_key).
//  2. Decode the body strictly and build a namespace.Command; validate it
//     (syntax errors never reach the log).
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

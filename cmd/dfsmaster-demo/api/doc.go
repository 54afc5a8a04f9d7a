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
//	GET  /                                                 -> HTML status page, refreshes itself
//
// "index" is the log index the answer reflects: for a mutation, the index of
// its entry; for a read, the applied index of the consistent view it read.
// min_index makes a read wait (at most Config.ReadWait) until the local store
// has applied that index: a client that passes the index of its last write
// reads its own writes on any master.
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
//	404 not_found        the path or a parent does not exist
//	409 already_exists, not_empty, not_a_directory, is_a_directory
//
// The master's own state gives:
//
//	307 (Location: the primary's same path) a mutation on a standby that knows the primary
//	503 no_primary       a mutation while no primary is known (or during an election)
//	503 outcome_unknown  the command may or may not have committed: read before retrying
//	503 overloaded       nothing was sent (queue or room full): retry later (Retry-After)
//	503 unavailable      the master is closed, failed or was deposed; nothing was committed
//	504 timeout          min_index not applied within Config.ReadWait, or a proposal
//	                     that did not finish within Config.ProposeTimeout (outcome unknown)
//	500 internal         a bug or a storage failure, never a client mistake
//
// # Protocol of a mutation
//
//  1. Decode the body strictly and build a namespace.Command; validate it
//     (syntax errors never reach the log).
//  2. Master.Propose the encoded command; map its error as above.
//  3. Decode the applier's Response: success -> 200 with the index (and block
//     id); a rejection -> its 4xx code with the index of the rejected entry.
package api

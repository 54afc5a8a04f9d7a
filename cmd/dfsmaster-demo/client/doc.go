// Package client is a Go client for the dfsmaster demo's HTTP JSON API (see
// package api for the endpoints and error codes).
//
// Every method takes a context and returns the decoded JSON answer or an
// error. A failed request is an *Error carrying the HTTP status, the API's
// error code and message; for the namespace's codes errors.Is works with
// namespace.ErrNotFound and the other namespace sentinels.
//
// Mutations sent to a standby come back as 307 redirects to the primary; the
// client follows them and re-sends the body and the Idempotency-Key (each
// request body is a *bytes.Reader, so net/http can replay it).
//
// # Idempotency keys and retries
//
// Every mutation call is one logical request with one Idempotency-Key:
// NewIdempotencyKey (hex of 16 random bytes) unless the caller passes its
// own with IdempotencyKey(key). Every attempt of the call sends that key, so
// the master applies the mutation at most once (see package api, "Retries
// and Idempotency-Key"). The client re-sends the same request, same key,
// when the outcome of an attempt is unknown:
//
//	503 outcome_unknown                  the master could not tell whether it committed
//	504 (any code)                       timeout: the proposal may have committed
//	a transport error once connected     reset, EOF, a body cut short: the request may have been sent
//
// at most Retry.MaxAttempts attempts in all (default 8), waiting
// Retry.MinBackoff (default 50ms) doubling up to Retry.MaxBackoff (default
// 2s), with jitter, between them, and never beyond the caller's context.
// Redirects are followed on every attempt. Not retried, returned as is:
// a success; any 4xx (an answer: the namespace's rejection, 422
// idempotency_key_reused, 400); 503 no_primary, overloaded, unavailable and
// failed, 500, and a connection that could not be made (nothing was
// applied, or retrying the same master does not help: the caller may go to
// another master, with the same key).
//
// MutationResult tells how the answer came: Key, Attempts, and Replayed
// (the master answered with the original's answer, Idempotent-Replayed:
// true: an earlier attempt had been applied and this one was not applied
// again). A replayed rejection is an *Error with Replayed set.
//
// When the client gives up while an attempt's outcome is unknown — the
// attempts or the context ran out, or a later attempt failed without an
// answer (503 no_primary, a refused connection to a master that died) — it
// returns an *UnknownOutcomeError: errors.Is(err, ErrOutcomeUnknown), its
// Key is the one to retry with (IdempotencyKey(e.Key), on any master of the
// room, within the master's deduplication window: replica.Config.RequestTTL
// and RequestWindow, default 10 minutes and 2^20 entries), and errors.As
// still finds the last attempt's error.
//
// net/http itself may re-send a request with an Idempotency-Key on a reused
// keep-alive connection that the server closed before answering (it treats
// the header as making the request replayable); with the same key that is
// harmless, and such re-sends are not counted in Attempts.
//
// A master that failed answers 503 "failed" (see package api): the *Error's
// Message carries the reason and errors.Is(err, api.ErrFailed) holds.
// Status still works on it (Status.Error is the reason); Health is the
// cheap check (nil error while the master takes part in the room and is
// connected to ZooKeeper; 503 "disconnected" while it is cut off).
//
// Masters served with TLS (serve --tls-ca, --tls-cert, --tls-key) require
// a client certificate: pass HTTPS(src, timeout), built from a
// tlsfiles.Source, as the *http.Client, and "https://host:port" addresses.
// It verifies each master's certificate against the CA file and the host
// it dials, redirects included, and uses rotated files for new
// connections. It never sends a request in clear: a redirect to http://
// (or an http:// address) fails with ErrPlainHTTP before anything is
// sent.
//
// A Client talks to one master. A Pool spreads reads (Ls, Stat, Hash) over
// several, one after the other, and moves on at once from a master that
// cannot serve a read: 503 "disconnected" (cut off from ZooKeeper and
// behind min_index: it refuses at once instead of holding the reader), 503
// "unavailable" or "failed", 504 "timeout", or unreachable. A master cut
// off by a silent partition refuses only once it noticed (two thirds of a
// session); until then it holds a read with min_index, so the Pool gives
// each master at most Pool.WaitAttempt (500 ms) per attempt and goes round
// again until the caller's context ends. Status and Health go round the
// same way (Health: nil error once one master is healthy). Mutations
// (Mkdir, Create, AddBlock, Rename, Delete) go to the masters in the order
// given, under one Idempotency-Key, and move on from one that cannot take
// them (unreachable, 503 no_primary, overloaded, unavailable, disconnected
// or failed, 500, or the outcome unknown there): a dead master listed first
// does not fail a mutation another master can serve, and the key keeps it
// applied at most once. ctl's --addr takes a comma-separated list for all
// of these.
package client

package api

import (
	"fmt"
	"net/http"

	"github.com/roomlog/roomlog/store"
)

// Idempotency-Key support (see doc.go, "Retries and Idempotency-Key").
const (
	// IdempotencyKeyHeader names the request header carrying a client's key
	// for a mutation.
	IdempotencyKeyHeader = "Idempotency-Key"
	// IdempotentReplayedHeader is "true" on an answer that is the original
	// request's, replayed from the request table (absent otherwise).
	IdempotentReplayedHeader = "Idempotent-Replayed"
	// MaxIdempotencyKeyLen bounds a key, in bytes.
	MaxIdempotencyKeyLen = 255
)

// Error codes of the Idempotency-Key.
const (
	CodeInvalidIdempotencyKey = "invalid_idempotency_key" // 400: malformed, empty, too long or repeated
	CodeIdempotencyKeyReused  = "idempotency_key_reused"  // 422: the key was used for another request
)

// requestKeyScope prefixes a key before it becomes a request id, so keys
// sent to this API can never collide with ids another proposer in the same
// room derives from its own keys.
const requestKeyScope = "dfsmaster-demo/v1 Idempotency-Key\x00"

// ValidIdempotencyKey reports whether key is acceptable as an
// Idempotency-Key: 1 to MaxIdempotencyKeyLen bytes of printable ASCII
// (0x20 to 0x7e). It is taken verbatim: "abc" and "\"abc\"" are two keys.
func ValidIdempotencyKey(key string) error {
	if len(key) == 0 || len(key) > MaxIdempotencyKeyLen {
		return fmt.Errorf("%s must be 1 to %d bytes, got %d", IdempotencyKeyHeader, MaxIdempotencyKeyLen, len(key))
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x20 || c > 0x7e {
			return fmt.Errorf("%s must be printable ASCII; byte %d is 0x%02x", IdempotencyKeyHeader, i, c)
		}
	}
	return nil
}

// RequestIDForKey is the request id a mutation with this Idempotency-Key
// is proposed under: replica.RequestIDFromKey (= store.RequestIDFromKey) of
// the key in this API's scope. The scope is the key alone: every endpoint,
// every master and every client of the room share it, so the same key with
// another endpoint or body is a conflict (422), never a second request.
func RequestIDForKey(key string) store.RequestID {
	return store.RequestIDFromKey(requestKeyScope + key)
}

// idempotencyKey reads a request's Idempotency-Key: "" when it has none,
// a 400 invalid_idempotency_key when the header is malformed or repeated.
func idempotencyKey(h http.Header) (string, *httpError) {
	vals := h.Values(IdempotencyKeyHeader)
	switch len(vals) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", &httpError{status: http.StatusBadRequest, code: CodeInvalidIdempotencyKey,
			msg: fmt.Sprintf("%s given %d times; send one", IdempotencyKeyHeader, len(vals))}
	}
	if err := ValidIdempotencyKey(vals[0]); err != nil {
		return "", &httpError{status: http.StatusBadRequest, code: CodeInvalidIdempotencyKey, msg: err.Error()}
	}
	return vals[0], nil
}

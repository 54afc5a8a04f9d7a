// Package client is a Go client for the dfsmaster demo's HTTP JSON API (see
// package api for the endpoints and error codes).
//
// Every method takes a context and returns the decoded JSON answer or an
// error. A failed request is an *Error carrying the HTTP status, the API's
// error code and message; for the namespace's codes errors.Is works with
// namespace.ErrNotFound and the other namespace sentinels.
//
// Mutations sent to a standby come back as 307 redirects to the primary; the
// client follows them and re-sends the body (each request body is a
// *bytes.Reader, so net/http can replay it). A 503 no_primary is returned as
// is: retrying is the caller's choice.
//
// A master that failed answers 503 "failed" (see package api): the *Error's
// Message carries the reason and errors.Is(err, api.ErrFailed) holds.
// Status still works on it (Status.Error is the reason); Health is the
// cheap check (nil error while the master takes part in the room).
package client

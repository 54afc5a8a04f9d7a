package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"regexp"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
)

// fault is what keyServer does with one request (numbered from 0).
type fault int

const (
	pass           fault = iota // process and answer
	dropAfter                   // process, then close the connection without answering
	dropBefore                  // close the connection without processing
	timeoutBefore               // 504 timeout without processing
	timeoutAfter                // process, then 504 timeout
	unknownAfter                // process, then 503 outcome_unknown
	rejectConflict              // 409 already_exists, processed (a namespace rejection)
	noPrimary                   // 503 no_primary, nothing processed
	internal                    // 500 internal, nothing processed
)

// keyServer is a master that deduplicates by Idempotency-Key the way the
// API does: a key it has applied is answered with the original's status
// and body plus Idempotent-Replayed. faults[i] is what happens to request i
// (pass when out of range).
type keyServer struct {
	*httptest.Server

	mu      sync.Mutex // guards the fields below
	faults  []fault
	n       int               // requests seen
	keys    []string          // the Idempotency-Key of every request, in order
	applied int               // mutations applied
	answers map[string]answer // by key: the original answer
}

type answer struct {
	status int
	body   []byte
}

func newKeyServer(t *testing.T, faults ...fault) *keyServer {
	s := &keyServer{faults: faults, answers: map[string]answer{}}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *keyServer) serve(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	s.mu.Lock()
	f := pass
	if s.n < len(s.faults) {
		f = s.faults[s.n]
	}
	s.n++
	key := r.Header.Get(api.IdempotencyKeyHeader)
	s.keys = append(s.keys, key)
	write := func(a answer, replayed bool) {
		if replayed {
			w.Header().Set(api.IdempotentReplayedHeader, "true")
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(a.status)
		w.Write(a.body)
	}
	errBody := func(status int, code string) answer {
		b, _ := json.Marshal(api.ErrorBody{Error: code, Message: code + " (test)"})
		return answer{status, b}
	}
	switch f {
	case dropBefore:
		s.mu.Unlock()
		hijackClose(w)
		return
	case timeoutBefore:
		s.mu.Unlock()
		write(errBody(http.StatusGatewayTimeout, api.CodeTimeout), false)
		return
	case noPrimary:
		s.mu.Unlock()
		write(errBody(http.StatusServiceUnavailable, api.CodeNoPrimary), false)
		return
	case internal:
		s.mu.Unlock()
		write(errBody(http.StatusInternalServerError, api.CodeInternal), false)
		return
	}
	// Process: the original answer, or a replay.
	a, seen := s.answers[key]
	if !seen {
		s.applied++
		if f == rejectConflict {
			b, _ := json.Marshal(api.ErrorBody{Error: "already_exists", Message: "exists", Index: uint64(s.applied)})
			a = answer{http.StatusConflict, b}
		} else {
			b, _ := json.Marshal(api.MutationResponse{Index: uint64(s.applied), BlockID: 40 + uint64(s.applied)})
			a = answer{http.StatusOK, b}
		}
		if key != "" {
			s.answers[key] = a
		}
	}
	s.mu.Unlock()
	switch f {
	case dropAfter:
		hijackClose(w)
	case timeoutAfter:
		write(errBody(http.StatusGatewayTimeout, api.CodeTimeout), false)
	case unknownAfter:
		write(errBody(http.StatusServiceUnavailable, api.CodeOutcomeUnknown), false)
	default:
		write(a, seen)
	}
}

// hijackClose drops the connection without an answer.
func hijackClose(w http.ResponseWriter) {
	conn, _, err := w.(http.Hijacker).Hijack()
	if err != nil {
		panic(err)
	}
	conn.Close()
}

func (s *keyServer) seen() (keys []string, applied int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.keys...), s.applied
}

// fastRetry keeps the tests quick.
var fastRetry = client.WithRetry(client.Retry{MaxAttempts: 4, MinBackoff: time.Millisecond, MaxBackoff: 5 * time.Millisecond})

// newClient talks to srv over a fresh transport (no connection reuse
// across tests, so every drop is seen by the client, not retried inside
// net/http).
func newClient(t *testing.T, addr string, opts ...client.Option) *client.Client {
	t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	t.Cleanup(tr.CloseIdleConnections)
	c, err := client.New(addr, &http.Client{Transport: tr}, append([]client.Option{fastRetry}, opts...)...)
	require.NoError(t, err)
	return c
}

var hexKey = regexp.MustCompile(`^[0-9a-f]{32}$`)

// TestRetryLostConnection: the master applies the mutation but the
// connection drops before the answer; the client re-sends it with the same
// key and gets the original's answer, replayed. Applied once.
func TestRetryLostConnection(t *testing.T) {
	srv := newKeyServer(t, dropAfter)
	c := newClient(t, srv.URL)
	res, err := c.AddBlock(context.Background(), "/f", 5)
	require.NoError(t, err)
	keys, applied := srv.seen()
	require.Equal(t, 1, applied)
	require.Len(t, keys, 2)
	require.Equal(t, keys[0], keys[1], "the retry must carry the same key")
	require.Regexp(t, hexKey, keys[0])
	require.Equal(t, keys[0], res.Key)
	require.True(t, res.Replayed)
	require.Equal(t, 2, res.Attempts)
	require.Equal(t, api.MutationResponse{Index: 1, BlockID: 41}, res.MutationResponse)

	// Dropped before it was processed: the retry applies it, not a replay.
	srv = newKeyServer(t, dropBefore)
	res, err = newClient(t, srv.URL).Mkdir(context.Background(), "/d", false)
	require.NoError(t, err)
	keys, applied = srv.seen()
	require.Equal(t, 1, applied)
	require.Equal(t, []string{res.Key, res.Key}, keys)
	require.False(t, res.Replayed)
	require.Equal(t, 2, res.Attempts)
}

// TestRetryUnknownStatus: 504 and 503 outcome_unknown are retried with the
// same key; the answer is the original's when the first attempt had been
// applied.
func TestRetryUnknownStatus(t *testing.T) {
	for _, tc := range []struct {
		name     string
		faults   []fault
		replayed bool
		attempts int
	}{
		{"504 before", []fault{timeoutBefore}, false, 2},
		{"504 after", []fault{timeoutAfter}, true, 2},
		{"503 outcome_unknown after", []fault{unknownAfter}, true, 2},
		// The drop happens on the connection the 504 left open: net/http
		// itself re-sends a request with an Idempotency-Key on a reused
		// connection that closed before answering, so the client may count
		// 2 attempts for the 3 requests.
		{"504 then lost connection", []fault{timeoutBefore, dropAfter}, true, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newKeyServer(t, tc.faults...)
			res, err := newClient(t, srv.URL).Create(context.Background(), "/f", 2)
			require.NoError(t, err)
			keys, applied := srv.seen()
			require.Equal(t, 1, applied)
			require.Len(t, keys, tc.attempts)
			for _, k := range keys {
				require.Equal(t, res.Key, k)
			}
			require.Equal(t, tc.replayed, res.Replayed)
			require.LessOrEqual(t, res.Attempts, tc.attempts)
			require.GreaterOrEqual(t, res.Attempts, 2)
			require.Equal(t, uint64(1), res.Index)
		})
	}
}

// TestNoRetry: a 4xx is an answer, 503 no_primary and 500 say nothing was
// applied (or a bug): none is retried by the client.
func TestNoRetry(t *testing.T) {
	for _, tc := range []struct {
		name   string
		f      fault
		status int
	}{
		{"409", rejectConflict, http.StatusConflict},
		{"503 no_primary", noPrimary, http.StatusServiceUnavailable},
		{"500", internal, http.StatusInternalServerError},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := newKeyServer(t, tc.f)
			_, err := newClient(t, srv.URL).Rename(context.Background(), "/a", "/b")
			var e *client.Error
			require.True(t, errors.As(err, &e), "%v", err)
			require.Equal(t, tc.status, e.Status)
			require.False(t, e.Replayed)
			require.NotErrorIs(t, err, client.ErrOutcomeUnknown)
			keys, _ := srv.seen()
			require.Len(t, keys, 1)
		})
	}

	// A rejection replayed after a lost answer: the original 409, marked.
	srv := newKeyServer(t, rejectConflict, dropAfter)
	c := newClient(t, srv.URL)
	_, err := c.Mkdir(context.Background(), "/a", false, client.IdempotencyKey("k-409"))
	require.ErrorIs(t, err, namespace.ErrAlreadyExists)
	_, err = c.Mkdir(context.Background(), "/a", false, client.IdempotencyKey("k-409"))
	var e *client.Error
	require.True(t, errors.As(err, &e), "%v", err)
	require.True(t, e.Replayed)
	require.Equal(t, uint64(1), e.Index)
	keys, applied := srv.seen()
	require.Equal(t, []string{"k-409", "k-409", "k-409"}, keys)
	require.Equal(t, 1, applied)

	// After an unknown outcome, a 503 no_primary does not settle it.
	srv = newKeyServer(t, dropAfter, noPrimary)
	_, err = newClient(t, srv.URL).Delete(context.Background(), "/a", true)
	require.ErrorIs(t, err, client.ErrOutcomeUnknown)
	require.True(t, errors.As(err, &e), "%v", err)
	require.Equal(t, api.CodeNoPrimary, e.Code)
}

// TestRetryBounded: attempts are bounded by Retry.MaxAttempts and by the
// caller's context; giving up after an unknown outcome says so and names
// the key to retry with.
func TestRetryBounded(t *testing.T) {
	always := make([]fault, 100)
	for i := range always {
		always[i] = timeoutAfter
	}
	srv := newKeyServer(t, always...)
	_, err := newClient(t, srv.URL).Mkdir(context.Background(), "/x", false)
	require.ErrorIs(t, err, client.ErrOutcomeUnknown)
	var ue *client.UnknownOutcomeError
	require.True(t, errors.As(err, &ue))
	require.Equal(t, 4, ue.Attempts)
	var e *client.Error
	require.True(t, errors.As(err, &e))
	require.Equal(t, http.StatusGatewayTimeout, e.Status)
	keys, applied := srv.seen()
	require.Len(t, keys, 4)
	require.Equal(t, ue.Key, keys[3])
	require.Equal(t, 1, applied)
	require.Contains(t, err.Error(), ue.Key)

	// The caller's context bounds the retries (backoff included).
	srv = newKeyServer(t, always...)
	slow := client.WithRetry(client.Retry{MaxAttempts: 100, MinBackoff: 50 * time.Millisecond, MaxBackoff: 50 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = newClient(t, srv.URL, slow).Mkdir(ctx, "/x", false)
	require.Less(t, time.Since(start), 2*time.Second)
	require.ErrorIs(t, err, client.ErrOutcomeUnknown)
	keys, _ = srv.seen()
	require.Greater(t, len(keys), 1)
	require.Less(t, len(keys), 100)

	// MaxAttempts 1: no retry at all.
	srv = newKeyServer(t, dropAfter)
	_, err = newClient(t, srv.URL, client.WithRetry(client.Retry{MaxAttempts: 1})).Mkdir(context.Background(), "/x", false)
	require.ErrorIs(t, err, client.ErrOutcomeUnknown)
	keys, _ = srv.seen()
	require.Len(t, keys, 1)
}

// TestKeys: every logical call has its own random key; a caller's key is
// sent as is and validated before anything is sent.
func TestKeys(t *testing.T) {
	srv := newKeyServer(t)
	c := newClient(t, srv.URL)
	ctx := context.Background()
	a, err := c.Mkdir(ctx, "/a", false)
	require.NoError(t, err)
	b, err := c.Mkdir(ctx, "/a", false) // the same body: another request
	require.NoError(t, err)
	require.NotEqual(t, a.Key, b.Key)
	require.False(t, b.Replayed)
	r, err := c.Mkdir(ctx, "/a", false, client.IdempotencyKey("mine"))
	require.NoError(t, err)
	require.Equal(t, "mine", r.Key)
	keys, applied := srv.seen()
	require.Equal(t, []string{a.Key, b.Key, "mine"}, keys)
	require.Equal(t, 3, applied)
	r, err = c.Mkdir(ctx, "/a", false, client.IdempotencyKey("mine"))
	require.NoError(t, err)
	require.True(t, r.Replayed)
	require.Equal(t, 1, r.Attempts)

	_, err = c.Mkdir(ctx, "/a", false, client.IdempotencyKey("bad\nkey"))
	require.Error(t, err)
	_, err = c.Mkdir(ctx, "/a", false, client.IdempotencyKey(""))
	require.Error(t, err)
	keys, _ = srv.seen()
	require.Len(t, keys, 4, "an invalid key is never sent")
	require.Regexp(t, hexKey, client.NewIdempotencyKey())

	// Reads carry no key.
	_, _ = c.Status(ctx)
	keys, _ = srv.seen()
	require.Equal(t, "", keys[len(keys)-1])
}

// TestRetryFollowsRedirect: a standby's 307 is followed with the key, and
// the retry after a lost answer goes through the redirect again.
func TestRetryFollowsRedirect(t *testing.T) {
	primary := newKeyServer(t, dropAfter)
	standby := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", primary.URL+r.URL.Path)
		w.WriteHeader(http.StatusTemporaryRedirect)
		fmt.Fprintf(w, `{"error":"not_primary","message":"standby","primary":%q}`, primary.URL)
	}))
	defer standby.Close()
	res, err := newClient(t, standby.URL).Mkdir(context.Background(), "/r", false)
	require.NoError(t, err)
	keys, applied := primary.seen()
	require.Equal(t, []string{res.Key, res.Key}, keys)
	require.Equal(t, 1, applied)
	require.True(t, res.Replayed)
}

// TestNoRetryWhenNothingSent: a connection that cannot be made is returned
// at once (nothing was sent): the caller may go to another master.
func TestNoRetryWhenNothingSent(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	ln.Close()
	start := time.Now()
	// A retry would wait at least half of MinBackoff (the jitter): 10 s,
	// far beyond the bound below, which leaves a busy machine its slack.
	_, err = newClient(t, addr, client.WithRetry(client.Retry{MaxAttempts: 8, MinBackoff: 20 * time.Second})).Mkdir(context.Background(), "/x", false)
	require.Error(t, err)
	require.NotErrorIs(t, err, client.ErrOutcomeUnknown)
	require.Less(t, time.Since(start), 5*time.Second, "returned at once, not after a retry's backoff")
}

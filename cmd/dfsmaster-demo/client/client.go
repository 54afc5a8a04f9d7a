package client

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
)

// maxResponseBytes bounds what the client reads of one response.
const maxResponseBytes = 64 << 20

// Client talks to one master. It is safe for concurrent use.
type Client struct {
	base  string       // "http://host:port", no trailing slash
	hc    *http.Client // follows redirects (net/http re-sends a bytes body on 307)
	retry Retry        // with defaults filled in
}

// Retry is the policy for re-sending a mutation whose outcome is unknown
// (see doc.go). Zero fields take the defaults.
type Retry struct {
	// MaxAttempts bounds the attempts of one mutation call, the first
	// included: 1 never retries. Default DefaultMaxAttempts.
	MaxAttempts int
	// MinBackoff is the wait before the first retry; it doubles with each
	// retry up to MaxBackoff, with jitter (a random half to all of it).
	// Defaults DefaultMinBackoff and DefaultMaxBackoff.
	MinBackoff, MaxBackoff time.Duration
}

// Retry defaults.
const (
	DefaultMaxAttempts = 8
	DefaultMinBackoff  = 50 * time.Millisecond
	DefaultMaxBackoff  = 2 * time.Second
)

func (r Retry) withDefaults() Retry {
	if r.MaxAttempts <= 0 {
		r.MaxAttempts = DefaultMaxAttempts
	}
	if r.MinBackoff <= 0 {
		r.MinBackoff = DefaultMinBackoff
	}
	if r.MaxBackoff <= 0 {
		r.MaxBackoff = DefaultMaxBackoff
	}
	r.MaxBackoff = max(r.MaxBackoff, r.MinBackoff)
	return r
}

// backoff is the wait after the given failed attempt (1-based).
func (r Retry) backoff(attempt int) time.Duration {
	d := r.MinBackoff
	for i := 1; i < attempt && d < r.MaxBackoff; i++ {
		d *= 2
	}
	d = min(d, r.MaxBackoff)
	return d/2 + mrand.N(d/2+1)
}

// Option configures New.
type Option func(*Client)

// WithRetry sets the retry policy of mutations.
func WithRetry(r Retry) Option { return func(c *Client) { c.retry = r.withDefaults() } }

// New returns a client for addr ("host:port" or a base URL). hc nil means
// http.DefaultClient.
func New(addr string, hc *http.Client, opts ...Option) (*Client, error) {
	raw := addr
	if !strings.Contains(raw, "://") {
		raw = "http://" + raw
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" ||
		(u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.User != nil {
		return nil, fmt.Errorf("client: address %q: want host:port or http(s)://host:port", addr)
	}
	if hc == nil {
		hc = http.DefaultClient
	}
	c := &Client{base: u.Scheme + "://" + u.Host, hc: hc, retry: Retry{}.withDefaults()}
	for _, o := range opts {
		o(c)
	}
	return c, nil
}

// Base returns the base URL the client talks to.
func (c *Client) Base() string { return c.base }

// Error is a request the master answered with a failure status.
// errors.Is(err, namespace.ErrNotFound) (and the other namespace sentinels)
// works for the namespace's codes.
type Error struct {
	Status  int    // HTTP status
	Code    string // e.g. "not_found", "no_primary", "timeout"
	Message string
	Index   uint64 // a command rejected by the log: its entry's index
	// Replayed: the answer is the original's, replayed by the master for a
	// retry of an Idempotency-Key it had already applied
	// (Idempotent-Replayed: true).
	Replayed bool
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (HTTP %d)", e.Code, e.Message, e.Status)
}

// Unwrap returns api.ErrFailed for a master that failed (code "failed"),
// api.ErrDisconnected for one cut off from ZooKeeper (code
// "disconnected"), else the namespace sentinel of Code, if it has one.
func (e *Error) Unwrap() error {
	switch e.Code {
	case api.CodeFailed:
		return api.ErrFailed
	case api.CodeDisconnected:
		return api.ErrDisconnected
	}
	return namespace.Sentinel(namespace.Code(e.Code))
}

// ErrOutcomeUnknown: a mutation may or may not have been applied. Errors
// that match it are *UnknownOutcomeError; retrying with their Key is safe.
var ErrOutcomeUnknown = errors.New("client: outcome unknown")

// UnknownOutcomeError is a mutation the client gave up on without learning
// whether it was applied: an attempt's outcome was unknown (503
// outcome_unknown, 504, the connection lost after the request may have been
// sent) and no later attempt answered for it before the attempts, the
// context or the reachable master ran out. errors.Is(err, ErrOutcomeUnknown)
// holds, and errors.As finds the last attempt's error (an *Error, a
// *url.Error, the context's error) too.
type UnknownOutcomeError struct {
	Key      string // the Idempotency-Key every attempt carried: retry with it
	Attempts int    // attempts made
	Err      error  // the last attempt's error
}

func (e *UnknownOutcomeError) Error() string {
	return fmt.Sprintf("client: outcome unknown after %d attempt(s) (retry with Idempotency-Key %s): %v", e.Attempts, e.Key, e.Err)
}

// Unwrap returns ErrOutcomeUnknown and the last attempt's error.
func (e *UnknownOutcomeError) Unwrap() []error { return []error{ErrOutcomeUnknown, e.Err} }

// MutationResult is a mutation's answer: the API's body, and how the
// client got it. As JSON it is the body plus "replayed" when true.
type MutationResult struct {
	api.MutationResponse
	// Key is the Idempotency-Key every attempt carried.
	Key string `json:"-"`
	// Replayed: the master answered from its request table
	// (Idempotent-Replayed: true): an earlier attempt with Key had been
	// applied, its answer is this one, and nothing was applied again.
	Replayed bool `json:"replayed,omitempty"`
	// Attempts is the number of attempts the client made (1: no retry).
	// Redirects, and net/http's own re-send of a request on a reused
	// connection the server had closed, are not counted.
	Attempts int `json:"-"`
}

// MutationOption configures one mutation call.
type MutationOption func(*mutationOpts)

type mutationOpts struct {
	key string
	set bool
}

// IdempotencyKey makes a mutation call send key (api.ValidIdempotencyKey:
// 1 to 255 bytes of printable ASCII) instead of a fresh random one: to
// retry a call that failed with an unknown outcome (UnknownOutcomeError.Key),
// possibly on another master or from another process.
func IdempotencyKey(key string) MutationOption {
	return func(o *mutationOpts) { o.key, o.set = key, true }
}

// NewIdempotencyKey returns a random key: the hex of 16 random bytes.
func NewIdempotencyKey() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand's contract since Go 1.24)
	return hex.EncodeToString(b[:])
}

// Mkdir creates a directory (and its missing parents with parents=true).
func (c *Client) Mkdir(ctx context.Context, path string, parents bool, opts ...MutationOption) (MutationResult, error) {
	return c.mutate(ctx, "/v1/mkdir", api.MkdirRequest{Path: path, Parents: parents}, opts)
}

// Create creates an empty file; replication 0 means the server's default.
func (c *Client) Create(ctx context.Context, path string, replication int, opts ...MutationOption) (MutationResult, error) {
	req := api.CreateRequest{Path: path}
	if replication != 0 {
		req.Replication = &replication
	}
	return c.mutate(ctx, "/v1/create", req, opts)
}

// AddBlock appends a block of size bytes to a file; the response carries its id.
func (c *Client) AddBlock(ctx context.Context, path string, size int64, opts ...MutationOption) (MutationResult, error) {
	return c.mutate(ctx, "/v1/addblock", api.AddBlockRequest{Path: path, Size: &size}, opts)
}

// AddBlockOn is AddBlock recording the chunk servers the block was
// written to (its placement; the room must be at room version 2 or more).
func (c *Client) AddBlockOn(ctx context.Context, path string, size int64, servers []string, opts ...MutationOption) (MutationResult, error) {
	return c.mutate(ctx, "/v1/addblock", api.AddBlockRequest{Path: path, Size: &size, Servers: servers}, opts)
}

// Placements returns the block placements (GET /v1/placements).
func (c *Client) Placements(ctx context.Context, minIndex uint64) (api.PlacementsResponse, error) {
	var out api.PlacementsResponse
	q := url.Values{}
	if minIndex > 0 {
		q.Set("min_index", strconv.FormatUint(minIndex, 10))
	}
	return out, c.do(ctx, http.MethodGet, "/v1/placements", q, nil, &out)
}

// Rename moves a file or a directory.
func (c *Client) Rename(ctx context.Context, src, dst string, opts ...MutationOption) (MutationResult, error) {
	return c.mutate(ctx, "/v1/rename", api.RenameRequest{Src: src, Dst: dst}, opts)
}

// Delete removes a file or a directory (with everything under it when recursive).
func (c *Client) Delete(ctx context.Context, path string, recursive bool, opts ...MutationOption) (MutationResult, error) {
	return c.mutate(ctx, "/v1/delete", api.DeleteRequest{Path: path, Recursive: recursive}, opts)
}

// Ls lists a directory once minIndex (0: no wait) is applied.
func (c *Client) Ls(ctx context.Context, path string, minIndex uint64) (api.LsResponse, error) {
	var out api.LsResponse
	err := c.do(ctx, http.MethodGet, "/v1/ls", readQuery(path, minIndex), nil, &out)
	return out, err
}

// Stat describes a path once minIndex (0: no wait) is applied.
func (c *Client) Stat(ctx context.Context, path string, minIndex uint64) (api.StatResponse, error) {
	var out api.StatResponse
	err := c.do(ctx, http.MethodGet, "/v1/stat", readQuery(path, minIndex), nil, &out)
	return out, err
}

// Status returns the master's status.
func (c *Client) Status(ctx context.Context) (api.Status, error) {
	var out api.Status
	err := c.do(ctx, http.MethodGet, "/v1/status", nil, nil, &out)
	return out, err
}

// Health returns the master's health: a healthy master's answer, or an
// *Error: 503 "failed" (errors.Is api.ErrFailed, the message gives the
// reason) for a master that failed, 503 "disconnected" (errors.Is
// api.ErrDisconnected) while it is cut off from ZooKeeper, 503
// "unavailable" while it shuts down.
func (c *Client) Health(ctx context.Context) (api.HealthResponse, error) {
	var out api.HealthResponse
	err := c.do(ctx, http.MethodGet, "/v1/health", nil, nil, &out)
	return out, err
}

// Hash returns the state hash once minIndex (0: no wait) is applied.
func (c *Client) Hash(ctx context.Context, minIndex uint64) (api.HashResponse, error) {
	var out api.HashResponse
	q := url.Values{}
	if minIndex > 0 {
		q.Set("min_index", strconv.FormatUint(minIndex, 10))
	}
	err := c.do(ctx, http.MethodGet, "/v1/hash", q, nil, &out)
	return out, err
}

func readQuery(path string, minIndex uint64) url.Values {
	q := url.Values{"path": {path}}
	if minIndex > 0 {
		q.Set("min_index", strconv.FormatUint(minIndex, 10))
	}
	return q
}

// mutate sends one logical mutation under one Idempotency-Key, re-sending
// it while its outcome is unknown (see Retry and doc.go).
func (c *Client) mutate(ctx context.Context, path string, body any, opts []MutationOption) (MutationResult, error) {
	var o mutationOpts
	for _, opt := range opts {
		opt(&o)
	}
	key := o.key
	if !o.set {
		key = NewIdempotencyKey()
	} else if err := api.ValidIdempotencyKey(key); err != nil {
		return MutationResult{}, fmt.Errorf("client: %s: %w", path, err)
	}
	b, err := json.Marshal(body)
	if err != nil {
		return MutationResult{}, fmt.Errorf("client: encode %s body: %w", path, err)
	}
	if err := ctx.Err(); err != nil {
		return MutationResult{}, fmt.Errorf("client: %s: %w", path, err) // nothing sent
	}
	unknown := false // some attempt's outcome is unknown
	for attempt := 1; ; attempt++ {
		var out api.MutationResponse
		replayed, err := c.send(ctx, http.MethodPost, path, nil, b, key, &out)
		if err == nil {
			return MutationResult{MutationResponse: out, Key: key, Replayed: replayed, Attempts: attempt}, nil
		}
		ambiguous := outcomeUnknown(err)
		switch {
		case !ambiguous && (!unknown || answered(err)):
			// A real answer (a 4xx: for this key, whatever earlier attempts
			// did), or nothing applied by the only attempts so far.
			return MutationResult{}, err
		case !ambiguous:
			return MutationResult{}, &UnknownOutcomeError{Key: key, Attempts: attempt, Err: err}
		}
		unknown = true
		if attempt >= c.retry.MaxAttempts || ctx.Err() != nil {
			return MutationResult{}, &UnknownOutcomeError{Key: key, Attempts: attempt, Err: err}
		}
		t := time.NewTimer(c.retry.backoff(attempt))
		select {
		case <-ctx.Done():
			t.Stop()
			return MutationResult{}, &UnknownOutcomeError{Key: key, Attempts: attempt, Err: fmt.Errorf("%w; then %w", err, ctx.Err())}
		case <-t.C:
		}
	}
}

// outcomeUnknown reports whether a failed attempt may have been applied:
// 503 outcome_unknown, any 504, or a transport failure once the connection
// was made (reset, EOF, the context ending while the request was in flight,
// a body cut short). A connection that could not be made sent nothing.
func outcomeUnknown(err error) bool {
	var e *Error
	if errors.As(err, &e) {
		return e.Status == http.StatusGatewayTimeout ||
			(e.Status == http.StatusServiceUnavailable && e.Code == api.CodeOutcomeUnknown)
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	var fin *finalError
	return !errors.As(err, &fin)
}

// answered reports whether err is the master's answer to the request
// itself (a 4xx), which settles the outcome of every attempt with its key.
func answered(err error) bool {
	var e *Error
	return errors.As(err, &e) && e.Status >= 400 && e.Status < 500
}

// finalError is a failure that settles the attempt without doubt: a 2xx
// whose body did not decode (an answer), or a request that could not be
// built (nothing sent). Never retried.
type finalError struct{ err error }

func (e *finalError) Error() string { return e.err.Error() }
func (e *finalError) Unwrap() error { return e.err }

// do sends one request without a key and decodes a 2xx JSON body into out.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	var b []byte
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return fmt.Errorf("client: encode %s body: %w", path, err)
		}
	}
	_, err := c.send(ctx, method, path, q, b, "", out)
	return err
}

// send sends one request (body nil: none; key "": no Idempotency-Key) and
// decodes a 2xx JSON body into out. replayed reports Idempotent-Replayed.
func (c *Client) send(ctx context.Context, method, path string, q url.Values, body []byte, key string, out any) (replayed bool, err error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		// A *bytes.Reader gives the request a GetBody, so a 307 re-sends it.
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return false, &finalError{fmt.Errorf("client: %s %s: %w", method, u, err)}
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if key != "" {
		// Redirects keep it (net/http copies the headers on a 307).
		req.Header.Set(api.IdempotencyKeyHeader, key)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return false, fmt.Errorf("client: %w", err) // *url.Error names the method and URL
	}
	defer resp.Body.Close()
	replayed = resp.Header.Get(api.IdempotentReplayedHeader) == "true"
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return false, fmt.Errorf("client: %s %s: read response: %w", method, u, err)
	}
	if resp.StatusCode/100 != 2 {
		var eb api.ErrorBody
		if err := json.Unmarshal(raw, &eb); err != nil || eb.Error == "" {
			return false, &Error{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode),
				Message: strings.TrimSpace(truncate(string(raw), 200)), Replayed: replayed}
		}
		return false, &Error{Status: resp.StatusCode, Code: eb.Error, Message: eb.Message, Index: eb.Index, Replayed: replayed}
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return false, &finalError{fmt.Errorf("client: %s %s: decode response: %w", method, u, err)}
	}
	return replayed, nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

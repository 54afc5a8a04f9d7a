package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
)

// maxResponseBytes bounds what the client reads of one response.
const maxResponseBytes = 64 << 20

// Client talks to one master. It is safe for concurrent use.
type Client struct {
	base string       // "http://host:port", no trailing slash
	hc   *http.Client // follows redirects (net/http re-sends a bytes body on 307)
}

// New returns a client for addr ("host:port" or a base URL). hc nil means
// http.DefaultClient.
func New(addr string, hc *http.Client) (*Client, error) {
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
	return &Client{base: u.Scheme + "://" + u.Host, hc: hc}, nil
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
}

func (e *Error) Error() string {
	return fmt.Sprintf("%s: %s (HTTP %d)", e.Code, e.Message, e.Status)
}

// Unwrap returns api.ErrFailed for a master that failed (code "failed"),
// else the namespace sentinel of Code, if it has one.
func (e *Error) Unwrap() error {
	if e.Code == api.CodeFailed {
		return api.ErrFailed
	}
	return namespace.Sentinel(namespace.Code(e.Code))
}

// Mkdir creates a directory (and its missing parents with parents=true).
func (c *Client) Mkdir(ctx context.Context, path string, parents bool) (api.MutationResponse, error) {
	return c.mutate(ctx, "/v1/mkdir", api.MkdirRequest{Path: path, Parents: parents})
}

// Create creates an empty file; replication 0 means the server's default.
func (c *Client) Create(ctx context.Context, path string, replication int) (api.MutationResponse, error) {
	req := api.CreateRequest{Path: path}
	if replication != 0 {
		req.Replication = &replication
	}
	return c.mutate(ctx, "/v1/create", req)
}

// AddBlock appends a block of size bytes to a file; the response carries its id.
func (c *Client) AddBlock(ctx context.Context, path string, size int64) (api.MutationResponse, error) {
	return c.mutate(ctx, "/v1/addblock", api.AddBlockRequest{Path: path, Size: &size})
}

// Rename moves a file or a directory.
func (c *Client) Rename(ctx context.Context, src, dst string) (api.MutationResponse, error) {
	return c.mutate(ctx, "/v1/rename", api.RenameRequest{Src: src, Dst: dst})
}

// Delete removes a file or a directory (with everything under it when recursive).
func (c *Client) Delete(ctx context.Context, path string, recursive bool) (api.MutationResponse, error) {
	return c.mutate(ctx, "/v1/delete", api.DeleteRequest{Path: path, Recursive: recursive})
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
// reason) for a master that failed, 503 "unavailable" while it shuts down.
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

func (c *Client) mutate(ctx context.Context, path string, body any) (api.MutationResponse, error) {
	var out api.MutationResponse
	err := c.do(ctx, http.MethodPost, path, nil, body, &out)
	return out, err
}

// do sends one request and decodes a 2xx JSON body into out.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body, out any) error {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("client: encode %s body: %w", path, err)
		}
		// A *bytes.Reader gives the request a GetBody, so a 307 re-sends it.
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("client: %s %s: %w", method, u, err)
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("client: %w", err) // *url.Error names the method and URL
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, maxResponseBytes))
	if err != nil {
		return fmt.Errorf("client: %s %s: read response: %w", method, u, err)
	}
	if resp.StatusCode/100 != 2 {
		var eb api.ErrorBody
		if err := json.Unmarshal(raw, &eb); err != nil || eb.Error == "" {
			return &Error{Status: resp.StatusCode, Code: "http_" + strconv.Itoa(resp.StatusCode),
				Message: strings.TrimSpace(truncate(string(raw), 200))}
		}
		return &Error{Status: resp.StatusCode, Code: eb.Error, Message: eb.Message, Index: eb.Index}
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("client: %s %s: decode response: %w", method, u, err)
	}
	return nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

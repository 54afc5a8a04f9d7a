package testnode

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"syscall"
	"time"

	"github.com/roomlog/roomlog/replica"
)

// Client is a typed client of one node's HTTP API. The zero value is not
// usable: use NewClient. Safe for concurrent use.
type Client struct {
	name string
	base string // "http://host:port"
	hc   *http.Client
}

// NewClient returns a client of the node API at addr ("host:port"). name
// labels its errors. hc nil: a client with its own transport.
func NewClient(name, addr string, hc *http.Client) *Client {
	if hc == nil {
		hc = &http.Client{Transport: &http.Transport{
			MaxIdleConnsPerHost: 64,
			IdleConnTimeout:     30 * time.Second,
		}}
	}
	return &Client{name: name, base: "http://" + addr, hc: hc}
}

// Addr returns the base URL.
func (c *Client) Addr() string { return c.base }

// CloseIdle closes idle connections.
func (c *Client) CloseIdle() { c.hc.CloseIdleConnections() }

// timeoutParam passes ctx's remaining time to the node, so the node gives
// up a little before the client does and still answers.
func timeoutParam(ctx context.Context, q url.Values) {
	if dl, ok := ctx.Deadline(); ok {
		d := time.Until(dl)
		d -= d / 10
		if d < time.Millisecond {
			d = time.Millisecond
		}
		q.Set("timeout", d.String())
	}
}

// do sends a request and decodes a 2xx JSON answer into out; non-2xx
// answers become *APIError, transport failures ErrUnreachable.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body []byte, out any) error {
	return c.doHeader(ctx, method, path, q, nil, body, out)
}

// doHeader is do with extra request headers (nil: none).
func (c *Client) doHeader(ctx context.Context, method, path string, q url.Values, hdr http.Header, body []byte, out any) error {
	if q == nil {
		q = url.Values{}
	}
	timeoutParam(ctx, q)
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, rd)
	if err != nil {
		return fmt.Errorf("testnode %s: %w", c.name, err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		if notSent(err) {
			return fmt.Errorf("testnode %s: %s %s: %w: %w: %w", c.name, method, path, ErrUnreachable, ErrNotSent, err)
		}
		return fmt.Errorf("testnode %s: %s %s: %w: %w", c.name, method, path, ErrUnreachable, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return fmt.Errorf("testnode %s: %s %s: read answer: %w: %w", c.name, method, path, ErrUnreachable, err)
	}
	if resp.StatusCode/100 != 2 || resp.StatusCode == http.StatusAccepted {
		ae := &APIError{Node: c.name, Status: resp.StatusCode}
		if err := json.Unmarshal(data, &ae.ErrorResponse); err != nil || ae.ErrorResponse.Error == "" {
			ae.ErrorResponse = ErrorResponse{Error: CodeInternal, Message: fmt.Sprintf("HTTP %d: %.200q", resp.StatusCode, data)}
		}
		return ae
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("testnode %s: %s %s: decode %.200q: %w", c.name, method, path, data, err)
	}
	return nil
}

// notSent reports whether a transport error means the request never
// reached the server (connection refused before anything was written).
func notSent(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	return errors.Is(err, syscall.ECONNREFUSED)
}

// Propose sends entry to the node's POST /propose. On success the entry is
// committed at the returned index and applied on that node. Errors:
// *APIError (errors.Is replica.ErrNotPrimary, replica.ErrOutcomeUnknown,
// replica.ErrNoResponse — then ProposeResponse.Index is valid —, …) or
// ErrUnreachable (outcome unknown unless also ErrNotSent).
func (c *Client) Propose(ctx context.Context, entry []byte) (ProposeResponse, error) {
	return c.propose(ctx, nil, entry)
}

// ProposeRequest is Propose with a request id (header RequestIDHeader): the
// node calls replica.ProposeRequest, so the same entry sent again with the
// same id — after any error, to any node — is applied at most once (within
// the replicas' deduplication window). A resend whose id was already
// applied answers with ProposeResponse.Duplicate set and the original's
// index and response. Errors are Propose's, plus *APIError
// request_conflict (errors.Is replica.ErrRequestConflict: the id was used
// with another entry; nothing sent) and bad_request_id (a zero id).
func (c *Client) ProposeRequest(ctx context.Context, id replica.RequestID, entry []byte) (ProposeResponse, error) {
	return c.propose(ctx, http.Header{RequestIDHeader: {id.String()}}, entry)
}

func (c *Client) propose(ctx context.Context, hdr http.Header, entry []byte) (ProposeResponse, error) {
	var out ProposeResponse
	err := c.doHeader(ctx, http.MethodPost, "/propose", nil, hdr, entry, &out)
	var ae *APIError
	if errors.As(err, &ae) && ae.Index != 0 {
		out.Index, out.Duplicate = ae.Index, ae.Duplicate
	}
	return out, err
}

// Status returns GET /status.
func (c *Client) Status(ctx context.Context) (StatusJSON, error) {
	var out StatusJSON
	err := c.do(ctx, http.MethodGet, "/status", nil, nil, &out)
	return out, err
}

// Hash returns the node's state hash once it has applied minIndex.
func (c *Client) Hash(ctx context.Context, minIndex uint64) (HashResponse, error) {
	var out HashResponse
	err := c.do(ctx, http.MethodGet, "/hash", url.Values{"min_index": {strconv.FormatUint(minIndex, 10)}}, nil, &out)
	return out, err
}

// RunHashAt returns the node's running state hash at index (GET
// /runhash), Found false when its store no longer keeps it.
func (c *Client) RunHashAt(ctx context.Context, index uint64) (RunHashResponse, error) {
	var out RunHashResponse
	err := c.do(ctx, http.MethodGet, "/runhash", url.Values{"index": {strconv.FormatUint(index, 10)}}, nil, &out)
	return out, err
}

// Barrier returns the node's linearizable read point (POST /barrier).
func (c *Client) Barrier(ctx context.Context) (uint64, error) {
	var out BarrierResponse
	err := c.do(ctx, http.MethodPost, "/barrier", nil, nil, &out)
	return out.Index, err
}

// Get reads key on the node (GET /get). With barrier the node first waits
// for replica.Barrier, which makes the read linearizable on any member (a
// deposed primary included: it answers fresh data or an error); without
// it the read is a plain local read, possibly stale on any member.
func (c *Client) Get(ctx context.Context, key string, barrier bool) (GetResponse, error) {
	q := url.Values{"key": {key}}
	if barrier {
		q.Set("barrier", "1")
	}
	var out GetResponse
	err := c.do(ctx, http.MethodGet, "/get", q, nil, &out)
	return out, err
}

// StepDown asks the primary to step down.
func (c *Client) StepDown(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/stepdown", nil, nil, nil)
}

// StallDisk stalls (true) or resumes (false) the writes of the node's store
// (a node started with --disk-faults).
func (c *Client) StallDisk(ctx context.Context, stall bool) error {
	return c.do(ctx, http.MethodPost, "/fault/disk", url.Values{"stall": {strconv.FormatBool(stall)}}, nil, nil)
}

// Transfer asks the primary to hand leadership to member toID.
func (c *Client) Transfer(ctx context.Context, toID string) error {
	return c.do(ctx, http.MethodPost, "/transfer", url.Values{"to": {toID}}, nil, nil)
}

// Checkpoint asks the node to checkpoint now (the primary also rotates and
// deletes what it may).
func (c *Client) Checkpoint(ctx context.Context) error {
	return c.do(ctx, http.MethodPost, "/checkpoint", nil, nil, nil)
}

// DumpPage returns one page of GET /dump (records of from..to, at most
// limit; 0: the node's default).
func (c *Client) DumpPage(ctx context.Context, from, to uint64, limit int) (DumpResponse, error) {
	q := url.Values{"from": {strconv.FormatUint(from, 10)}, "to": {strconv.FormatUint(to, 10)}}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var out DumpResponse
	err := c.do(ctx, http.MethodGet, "/dump", q, nil, &out)
	return out, err
}

// Dump returns every record of indexes from..to the node holds, following
// pages. Applied is the node's applied index when the first page was read.
func (c *Client) Dump(ctx context.Context, from, to uint64) (DumpResponse, error) {
	var all DumpResponse
	first := true
	for {
		page, err := c.DumpPage(ctx, from, to, MaxDumpLimit)
		if err != nil {
			return all, err
		}
		if first {
			all.Applied, first = page.Applied, false
		}
		all.Records = append(all.Records, page.Records...)
		if !page.More || len(page.Records) == 0 {
			if all.Records == nil {
				all.Records = []Record{}
			}
			return all, nil
		}
		last := page.Records[len(page.Records)-1].Index
		if last == ^uint64(0) || last >= to {
			return all, nil
		}
		from = last + 1
	}
}

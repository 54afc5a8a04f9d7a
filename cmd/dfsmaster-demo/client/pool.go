package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
)

// Pool reads from any of several masters. A read goes to the next master in
// turn; a master that cannot serve it — cut off from ZooKeeper (503
// disconnected), shutting down or deposed (503 unavailable), failed (503
// failed), too slow to reach min_index (504 timeout) or unreachable — is
// skipped for the next one, so one partitioned or failed master does not
// hold its readers. Any other answer (200, or a client mistake such as 404)
// is returned as it is. It is safe for concurrent use.
type Pool struct {
	cs   []*Client
	next atomic.Uint32
}

// NewPool returns a Pool over addrs (each as for New).
func NewPool(addrs []string, hc *http.Client, opts ...Option) (*Pool, error) {
	if len(addrs) == 0 {
		return nil, errors.New("client: pool: no master addresses")
	}
	p := &Pool{}
	for _, a := range addrs {
		c, err := New(a, hc, opts...)
		if err != nil {
			return nil, err
		}
		p.cs = append(p.cs, c)
	}
	return p, nil
}

// Clients returns the pool's clients, one per master, in the order given.
func (p *Pool) Clients() []*Client { return append([]*Client(nil), p.cs...) }

// Ls is Client.Ls on the first master that can serve it.
func (p *Pool) Ls(ctx context.Context, path string, minIndex uint64) (api.LsResponse, error) {
	return poolRead(ctx, p, func(c *Client) (api.LsResponse, error) { return c.Ls(ctx, path, minIndex) })
}

// Stat is Client.Stat on the first master that can serve it.
func (p *Pool) Stat(ctx context.Context, path string, minIndex uint64) (api.StatResponse, error) {
	return poolRead(ctx, p, func(c *Client) (api.StatResponse, error) { return c.Stat(ctx, path, minIndex) })
}

// Hash is Client.Hash on the first master that can serve it.
func (p *Pool) Hash(ctx context.Context, minIndex uint64) (api.HashResponse, error) {
	return poolRead(ctx, p, func(c *Client) (api.HashResponse, error) { return c.Hash(ctx, minIndex) })
}

// poolRead tries each master once, starting at the next in turn.
func poolRead[T any](ctx context.Context, p *Pool, read func(*Client) (T, error)) (T, error) {
	start := int(p.next.Add(1))
	var zero T
	var errs []error
	for i := range p.cs {
		c := p.cs[(start+i)%len(p.cs)]
		v, err := read(c)
		if err == nil || !tryAnother(err) {
			return v, err
		}
		errs = append(errs, fmt.Errorf("%s: %w", c.Base(), err))
		if ctx.Err() != nil {
			break
		}
	}
	return zero, fmt.Errorf("client: no master could serve the read: %w", errors.Join(errs...))
}

// tryAnother reports whether err means this master cannot serve the read
// now while another may.
func tryAnother(err error) bool {
	var he *Error
	if errors.As(err, &he) {
		switch he.Code {
		case api.CodeDisconnected, api.CodeUnavailable, api.CodeFailed, api.CodeTimeout:
			return true
		}
		return false
	}
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue)
}

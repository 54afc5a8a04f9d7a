package client

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
)

// Pool reads from any of several masters. A read goes to the next master in
// turn; a master that cannot serve it — cut off from ZooKeeper (503
// disconnected), shutting down or deposed (503 unavailable), failed (503
// failed), too slow to reach min_index (504 timeout) or unreachable — is
// skipped for the next one, so one partitioned or failed master does not
// hold its readers. Any other answer (200, or a client mistake such as 404)
// is returned as it is. It is safe for concurrent use.
//
// A master cut off by a silent partition refuses reads only once it has
// noticed (its ZooKeeper client's read timeout, two thirds of a session);
// until then a read with min_index waits there. So a read with min_index
// gets at most WaitAttempt on each master before the pool tries the next
// (rounds continue until ctx ends): one partitioned master holds a reader
// for WaitAttempt, not for the partition.
type Pool struct {
	cs []*Client
	// WaitAttempt bounds one attempt of a read with min_index on one
	// master (DefaultWaitAttempt; set before use).
	WaitAttempt time.Duration
	// MaxWait bounds a whole read with min_index, across rounds, as a
	// master's own ReadWait bounds a read on it (DefaultMaxWait; 0: only
	// the caller's context).
	MaxWait time.Duration
	next    atomic.Uint32
}

// Defaults of Pool.WaitAttempt and Pool.MaxWait.
const (
	DefaultWaitAttempt = 500 * time.Millisecond
	DefaultMaxWait     = 5 * time.Second
)

// NewPool returns a Pool over addrs (each as for New).
func NewPool(addrs []string, hc *http.Client, opts ...Option) (*Pool, error) {
	if len(addrs) == 0 {
		return nil, errors.New("client: pool: no master addresses")
	}
	p := &Pool{WaitAttempt: DefaultWaitAttempt, MaxWait: DefaultMaxWait}
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
	return poolRead(ctx, p, minIndex, func(ctx context.Context, c *Client) (api.LsResponse, error) { return c.Ls(ctx, path, minIndex) })
}

// Stat is Client.Stat on the first master that can serve it.
func (p *Pool) Stat(ctx context.Context, path string, minIndex uint64) (api.StatResponse, error) {
	return poolRead(ctx, p, minIndex, func(ctx context.Context, c *Client) (api.StatResponse, error) { return c.Stat(ctx, path, minIndex) })
}

// Hash is Client.Hash on the first master that can serve it.
func (p *Pool) Hash(ctx context.Context, minIndex uint64) (api.HashResponse, error) {
	return poolRead(ctx, p, minIndex, func(ctx context.Context, c *Client) (api.HashResponse, error) { return c.Hash(ctx, minIndex) })
}

// poolRead tries the masters in turn, starting at the next one. Each
// attempt of a read with minIndex is bounded by WaitAttempt; while some
// master ran out of its attempt (it may still catch up, or it is silently
// cut off), another round follows, for at most MaxWait (and ctx). When
// every master refused outright, the read fails at once.
func poolRead[T any](ctx context.Context, p *Pool, minIndex uint64, read func(context.Context, *Client) (T, error)) (T, error) {
	if minIndex > 0 && p.MaxWait > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, p.MaxWait)
		defer cancel()
	}
	start := int(p.next.Add(1)) - 1
	var zero T
	errs := make([]error, len(p.cs))
	for {
		waited := false
		for i := range p.cs {
			k := (start + i) % len(p.cs)
			c := p.cs[k]
			actx, cancel := ctx, context.CancelFunc(func() {})
			if minIndex > 0 && p.WaitAttempt > 0 {
				actx, cancel = context.WithTimeout(ctx, p.WaitAttempt)
			}
			v, err := read(actx, c)
			attemptEnded := err != nil && errors.Is(err, context.DeadlineExceeded) && actx.Err() != nil && ctx.Err() == nil
			cancel()
			if err == nil || (!tryAnother(err) && !attemptEnded) {
				return v, err
			}
			if attemptEnded {
				waited = true
				err = fmt.Errorf("min_index %d not reached within %v: %w", minIndex, p.WaitAttempt, err)
			}
			errs[k] = fmt.Errorf("%s: %w", c.Base(), err)
			if ctx.Err() != nil {
				return zero, fmt.Errorf("client: no master could serve the read: %w", errors.Join(errs...))
			}
		}
		if !waited {
			return zero, fmt.Errorf("client: no master could serve the read: %w", errors.Join(errs...))
		}
	}
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

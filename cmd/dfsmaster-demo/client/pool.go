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
	// PrimaryWait bounds how long a mutation that no master could take
	// (every one unreachable, without a primary, or redirecting to a
	// primary that does not answer: a primary just killed, its standby
	// still naming it until its session expires) is sent again, round
	// after round, under its one Idempotency-Key, waiting for a new
	// primary (0: one round). The caller's context bounds it too.
	PrimaryWait time.Duration
	// OnRetry, if set, is called before each further round with the time
	// since the mutation started and the last round's error.
	OnRetry func(waited time.Duration, err error)
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
		case api.CodeDisconnected, api.CodeUnavailable, api.CodeFailed, api.CodeTimeout, api.CodeBehind:
			return true
		}
		return false
	}
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue)
}

// Status is Client.Status on the first master that answers (see poolRead:
// one cut off, shutting down, failed or unreachable is skipped).
func (p *Pool) Status(ctx context.Context) (api.Status, error) {
	return poolRead(ctx, p, 0, func(ctx context.Context, c *Client) (api.Status, error) { return c.Status(ctx) })
}

// Health is Client.Health on the masters in turn: nil error once one is
// healthy; with every master unhealthy or unreachable, the error names
// each one's answer.
func (p *Pool) Health(ctx context.Context) (api.HealthResponse, error) {
	return poolRead(ctx, p, 0, func(ctx context.Context, c *Client) (api.HealthResponse, error) { return c.Health(ctx) })
}

// Mkdir is Client.Mkdir through the pool (see Pool.mutate).
func (p *Pool) Mkdir(ctx context.Context, path string, parents bool, opts ...MutationOption) (MutationResult, error) {
	return p.mutate(ctx, "/v1/mkdir", api.MkdirRequest{Path: path, Parents: parents}, opts)
}

// Create is Client.Create through the pool (see Pool.mutate).
func (p *Pool) Create(ctx context.Context, path string, replication int, opts ...MutationOption) (MutationResult, error) {
	req := api.CreateRequest{Path: path}
	if replication != 0 {
		req.Replication = &replication
	}
	return p.mutate(ctx, "/v1/create", req, opts)
}

// AddBlock is Client.AddBlock through the pool (see Pool.mutate).
func (p *Pool) AddBlock(ctx context.Context, path string, size int64, opts ...MutationOption) (MutationResult, error) {
	return p.mutate(ctx, "/v1/addblock", api.AddBlockRequest{Path: path, Size: &size}, opts)
}

// Rename is Client.Rename through the pool (see Pool.mutate).
func (p *Pool) Rename(ctx context.Context, src, dst string, opts ...MutationOption) (MutationResult, error) {
	return p.mutate(ctx, "/v1/rename", api.RenameRequest{Src: src, Dst: dst}, opts)
}

// Delete is Client.Delete through the pool (see Pool.mutate).
func (p *Pool) Delete(ctx context.Context, path string, recursive bool, opts ...MutationOption) (MutationResult, error) {
	return p.mutate(ctx, "/v1/delete", api.DeleteRequest{Path: path, Recursive: recursive}, opts)
}

// mutate sends one mutation, under one Idempotency-Key, to the masters in
// the order given (a standby redirects it to the primary). It moves on to
// the next master when one cannot take it — unreachable, 503 no_primary,
// overloaded, unavailable, disconnected or failed, a 500, or the outcome
// unknown there — so a dead master listed first does not fail a mutation
// another master can serve; the key makes it applied at most once across
// them all. A success or a 4xx (an answer for the key) is returned as it
// is. When no master answered and some attempt's outcome was unknown, the
// error is an *UnknownOutcomeError.
func (p *Pool) mutate(ctx context.Context, path string, body any, opts []MutationOption) (MutationResult, error) {
	var o mutationOpts
	for _, opt := range opts {
		opt(&o)
	}
	if !o.set {
		o.key = NewIdempotencyKey()
	}
	// Rounds (PrimaryWait): the same key every round, so the mutation is
	// applied at most once however many rounds it takes.
	start := time.Now()
	deadline := start.Add(p.PrimaryWait)
	pause := 100 * time.Millisecond
	var unknownBefore bool
	for round := 0; ; round++ {
		r, err, again := p.mutateRound(ctx, path, body, o.key)
		var ue *UnknownOutcomeError
		unknownBefore = unknownBefore || errors.As(err, &ue)
		if !again || !time.Now().Before(deadline) || ctx.Err() != nil {
			if again && round > 0 {
				err = fmt.Errorf("%w (no master took it within %v, %d rounds)", err, time.Since(start).Round(time.Millisecond), round+1)
				if unknownBefore && !errors.As(err, &ue) {
					err = &UnknownOutcomeError{Key: o.key, Err: err}
				}
			}
			return r, err
		}
		if p.OnRetry != nil {
			p.OnRetry(time.Since(start), err)
		}
		select {
		case <-ctx.Done():
			return r, err
		case <-time.After(min(pause, time.Until(deadline))):
		}
		pause = min(2*pause, time.Second)
	}
}

// mutateRound sends the mutation to each master once (mutate's doc);
// again reports that every master failed in a way another round may cure.
func (p *Pool) mutateRound(ctx context.Context, path string, body any, key string) (MutationResult, error, bool) {
	o := mutationOpts{key: key, set: true}
	var (
		errs     []error
		last     error
		unknown  bool
		attempts int
	)
	for _, c := range p.cs {
		r, err := c.mutate(ctx, path, body, []MutationOption{IdempotencyKey(o.key)})
		if err == nil || answered(err) {
			r.Attempts += attempts
			return r, err, false
		}
		var ue *UnknownOutcomeError
		if errors.As(err, &ue) {
			unknown = true
			attempts += ue.Attempts
		} else {
			attempts++
		}
		last = err
		errs = append(errs, fmt.Errorf("%s: %w", c.Base(), err))
		if !mutateAnother(err) || ctx.Err() != nil {
			return MutationResult{}, p.roundErr(errs, last, unknown, o.key, attempts), false
		}
	}
	return MutationResult{}, p.roundErr(errs, last, unknown, o.key, attempts), true
}

func (p *Pool) roundErr(errs []error, last error, unknown bool, key string, attempts int) error {
	if len(errs) == 1 {
		return last
	}
	err := fmt.Errorf("client: no master took the mutation: %w", errors.Join(errs...))
	if unknown {
		return &UnknownOutcomeError{Key: key, Attempts: attempts, Err: err}
	}
	return err
}

// mutateAnother reports whether a mutation that failed on one master with
// err may go to another with the same key.
func mutateAnother(err error) bool {
	if errors.Is(err, ErrOutcomeUnknown) {
		return true
	}
	var he *Error
	if errors.As(err, &he) {
		switch he.Code {
		case api.CodeNoPrimary, api.CodeOverloaded, api.CodeUnavailable, api.CodeDisconnected, api.CodeFailed:
			return true
		}
		return he.Status == http.StatusInternalServerError
	}
	var ne net.Error
	var ue *url.Error
	return errors.As(err, &ne) || errors.As(err, &ue)
}

package zkr

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/zkx"
)

// ErrClientClosed: the *zkx.Client was closed under a recipe. It wraps
// zkx.ErrClosed (logroom.ErrClosed is the same value).
var ErrClientClosed = fmt.Errorf("zookeeper client closed: %w", zkx.ErrClosed)

// Session is one recipe object's view of a shared *zkx.Client: a
// subscription to its session events and the requests in flight. Events
// arrive on a buffered channel fed by the client's event callback (it
// drops the oldest when full), never by blocking go-zookeeper. Expiry is
// detected by comparing session ids (ID), which no dropped event can hide.
// A Session is a zkx.Requester whose requests run through Do: zkx's reads,
// Sync and EnsurePath on it are bounded by their ctx.
type Session struct {
	c      *zkx.Client
	events <-chan zk.Event
	unsub  func()
	// gone ends at Close: it wakes requests waiting for the session.
	gone    context.Context
	setGone context.CancelFunc

	mu     sync.Mutex // guards closed, and orders calls.Add before calls.Wait
	closed bool
	calls  sync.WaitGroup // requests started by Do, abandoned ones included
}

// ErrSessionClosed: a request through a Session after its Close (the
// recipe object was closed).
var ErrSessionClosed = errors.New("recipe closed")

// NewSession subscribes to c's session events.
func NewSession(c *zkx.Client) *Session {
	ch, unsub := c.Subscribe()
	gone, setGone := context.WithCancel(context.Background())
	return &Session{c: c, events: ch, unsub: unsub, gone: gone, setGone: setGone}
}

// Client returns the shared client.
func (s *Session) Client() *zkx.Client { return s.c }

// Conn returns the client's connection.
func (s *Session) Conn() *zk.Conn { return s.c.Conn() }

// ACL returns the ACL every create must use.
func (s *Session) ACL() []zk.ACL { return s.c.ACL() }

// Events returns the session events (EventSession, EventNotWatching), in
// order. It is closed when the client closes. One goroutine reads it (the
// recipe object's loop, or a Hold's): nothing else of the Session reads
// it (WaitConnected and Do wait on the client's state instead), so that
// reader sees every event but those the buffer dropped when full.
func (s *Session) Events() <-chan zk.Event { return s.events }

// ID returns the current session id: 0 while none (after an expiry, until
// the next session), a new value after an expiry.
func (s *Session) ID() int64 { return s.c.SessionID() }

// Connected reports whether the client has a session right now.
func (s *Session) Connected() bool { return s.c.State() == zk.StateHasSession }

// WaitConnected waits until the client has a session, ctx ends, the
// Session is closed (ErrSessionClosed) or the client closes
// (ErrClientClosed). It follows the client's state, never the Session's
// events: any number of requests may wait at once without taking an
// event from the reader of Events.
func (s *Session) WaitConnected(ctx context.Context) error {
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(s.gone, cancel)
	defer stop()
	err := s.c.WaitSession(wctx)
	switch {
	case errors.Is(err, zkx.ErrClosed):
		return ErrClientClosed
	case err != nil && ctx.Err() == nil && s.gone.Err() != nil:
		return ErrSessionClosed
	}
	return err
}

// Settle waits for every request started by Do so far, abandoned ones
// included: when it returns, their late hooks have run. The caller must
// start no request meanwhile (it is for an owner giving up, before it
// cleans up and closes).
func (s *Session) Settle() { s.calls.Wait() }

// Close unsubscribes and waits for every request started by Do, abandoned
// ones included (go-zookeeper answers each within its own bounds).
func (s *Session) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.setGone()
	s.unsub()
	s.calls.Wait()
}

// Do runs op, one ZooKeeper request, once the client has a session,
// bounded by ctx. op runs on its own goroutine: if ctx ends first, Do
// returns ctx's error and late (when non-nil) later receives op's result
// on that goroutine, so that a create which lands after its caller gave up
// can be undone. late must not block for long.
func Do[T any](ctx context.Context, s *Session, op func() (T, error), late func(T, error)) (T, error) {
	var zero T
	if err := ctx.Err(); err != nil {
		return zero, err
	}
	if err := s.WaitConnected(ctx); err != nil {
		return zero, err
	}
	type result struct {
		v   T
		err error
	}
	// state: 0 running, 1 answered (result sent), 2 abandoned.
	var state atomic.Int32
	ch := make(chan result, 1)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return zero, ErrSessionClosed
	}
	s.calls.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.calls.Done()
		v, err := op()
		if state.CompareAndSwap(0, 1) {
			ch <- result{v, err}
			return
		}
		if late != nil {
			late(v, err)
		}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		if state.CompareAndSwap(0, 2) {
			return zero, ctx.Err()
		}
		r := <-ch // answered just now
		return r.v, r.err
	}
}

// Do0 is Do for a request without a result value.
func Do0(ctx context.Context, s *Session, op func() error, late func(error)) error {
	var l func(struct{}, error)
	if late != nil {
		l = func(_ struct{}, err error) { late(err) }
	}
	_, err := Do(ctx, s, func() (struct{}, error) { return struct{}{}, op() }, l)
	return err
}

// Retry runs an idempotent request through Do until it returns something
// other than a connection loss, backing off in between (zkx.RetryValue).
// It gives up when ctx ends (the error names the last connection error) or
// the client closes.
func Retry[T any](ctx context.Context, s *Session, op func() (T, error)) (T, error) {
	return zkx.RetryValue(ctx, nil, func() (T, error) { return Do(ctx, s, op, nil) })
}

// Retry0 is Retry for a request without a result value.
func Retry0(ctx context.Context, s *Session, op func() error) error {
	_, err := Retry(ctx, s, func() (struct{}, error) { return struct{}{}, op() })
	return err
}

// Run runs op through Do until it returns something other than a
// connection loss (Retry): it makes a Session a zkx.Requester.
func (s *Session) Run(ctx context.Context, op func() (any, error)) (any, error) {
	return Retry(ctx, s, op)
}

package zkr

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/go-zookeeper/zk"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/zkx"
)

// ErrClientClosed: the *logroom.Client was closed under a recipe. It
// wraps logroom.ErrClosed.
var ErrClientClosed = fmt.Errorf("zookeeper client closed: %w", logroom.ErrClosed)

// Session is one recipe object's view of a shared *logroom.Client: a
// subscription to its session events and the requests in flight. Events
// arrive on a buffered channel fed by logroom's event callback (it drops
// the oldest when full), never by blocking go-zookeeper. Expiry is
// detected by comparing session ids (ID), which no dropped event can hide.
type Session struct {
	c      *logroom.Client
	events <-chan zk.Event
	unsub  func()

	mu     sync.Mutex // guards closed, and orders calls.Add before calls.Wait
	closed bool
	calls  sync.WaitGroup // requests started by Do, abandoned ones included
}

// ErrSessionClosed: a request through a Session after its Close (the
// recipe object was closed).
var ErrSessionClosed = errors.New("recipe closed")

// NewSession subscribes to c's session events.
func NewSession(c *logroom.Client) *Session {
	ch, unsub := c.Subscribe()
	return &Session{c: c, events: ch, unsub: unsub}
}

// Client returns the shared client.
func (s *Session) Client() *logroom.Client { return s.c }

// Conn returns the client's connection.
func (s *Session) Conn() *zk.Conn { return s.c.Conn() }

// ACL returns the ACL every create must use.
func (s *Session) ACL() []zk.ACL { return s.c.ACL() }

// Events returns the session events (EventSession, EventNotWatching). It is
// closed when the client closes. A reader that also calls WaitConnected
// shares the stream: neither sees every event, so decisions must rest on
// State and ID, with events only as wake-ups.
func (s *Session) Events() <-chan zk.Event { return s.events }

// ID returns the current session id: 0 while none (after an expiry, until
// the next session), a new value after an expiry.
func (s *Session) ID() int64 { return s.c.SessionID() }

// Connected reports whether the client has a session right now.
func (s *Session) Connected() bool { return s.c.State() == zk.StateHasSession }

// WaitConnected waits until the client has a session, ctx ends or the
// client closes (ErrClientClosed).
func (s *Session) WaitConnected(ctx context.Context) error {
	for {
		if s.Connected() {
			return nil
		}
		select {
		case _, ok := <-s.events:
			if !ok {
				return ErrClientClosed
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// Close unsubscribes and waits for every request started by Do, abandoned
// ones included (go-zookeeper answers each within its own bounds).
func (s *Session) Close() {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
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

// IsConnLoss reports whether err leaves a request's fate unknown
// (zkx.IsConnLoss).
func IsConnLoss(err error) bool { return zkx.IsConnLoss(err) }

// Backoff is the exponential retry delay of zkx.Backoff: the zero value
// waits 20ms doubling to 1s.
type Backoff = zkx.Backoff

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

// EnsurePath creates every missing component of path (persistent, no data,
// the client's ACL), tolerating concurrent creators.
func EnsurePath(ctx context.Context, s *Session, path string) error {
	cur := ""
	for _, p := range splitPath(path) {
		cur += "/" + p
		p := cur
		// Exists first: a digest client may lack CREATE on a shared parent
		// it only needs to traverse.
		ok, err := Retry(ctx, s, func() (bool, error) {
			ok, _, err := s.Conn().Exists(p)
			return ok, err
		})
		if err != nil {
			return fmt.Errorf("exists %s: %w", p, err)
		}
		if ok {
			continue
		}
		err = Retry0(ctx, s, func() error {
			_, err := s.Conn().Create(p, nil, 0, s.ACL())
			return err
		})
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", p, err)
		}
	}
	return nil
}

func splitPath(path string) []string {
	var out []string
	start := 1
	for i := 1; i <= len(path); i++ {
		if i == len(path) || path[i] == '/' {
			if i > start {
				out = append(out, path[start:i])
			}
			start = i + 1
		}
	}
	return out
}

// Sync makes the server this session reads from catch up with the leader
// (after an expiry the new session may read from a follower behind what
// this process already saw).
func Sync(ctx context.Context, s *Session, path string) error {
	return Retry0(ctx, s, func() error {
		_, err := s.Conn().Sync(path)
		return err
	})
}

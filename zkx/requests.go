package zkx

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/roomlog/roomlog/third_party/zk"
)

// Requester is a connection the requests below run on: a *Client, a
// recipe's session (which bounds every request by its ctx), or Plain for a
// bare go-zookeeper connection.
type Requester interface {
	// Conn returns the connection requests are sent on.
	Conn() *zk.Conn
	// ACL returns the ACL every create must use.
	ACL() []zk.ACL
	// Run runs op, one idempotent request, until it returns something
	// other than a connection loss (IsConnLoss), backing off in between,
	// and returns op's last result; it gives up when ctx ends (the error
	// wraps ctx's and the last connection error) or the connection is
	// closed. An implementation may stop waiting for op when ctx ends
	// while op still runs to its end: op hands its results back only by
	// returning them.
	Run(ctx context.Context, op func() (any, error)) (any, error)
}

// run is Requester.Run with a typed result.
func run[T any](ctx context.Context, r Requester, op func() (T, error)) (T, error) {
	v, err := r.Run(ctx, func() (any, error) {
		v, err := op()
		return v, err
	})
	t, _ := v.(T)
	return t, err
}

// Run runs op on c, waiting for the session between attempts and giving
// up once c is closed (ErrClosed wrapping the last connection error).
func (c *Client) Run(ctx context.Context, op func() (any, error)) (any, error) {
	return RetryValue(ctx, c.retryGate, op)
}

// Retry is Run for a request without a result value.
func (c *Client) Retry(ctx context.Context, op func() error) error {
	return Retry(ctx, c.retryGate, op)
}

// retryGate runs between retries after the connection error err: it fails
// once the client is closed, else waits for the session.
func (c *Client) retryGate(ctx context.Context, err error) error {
	if c.isClosed() {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	if werr := c.WaitSession(ctx); werr != nil {
		return fmt.Errorf("%w (last error: %w)", werr, err)
	}
	return nil
}

// Plain returns a Requester over a bare go-zookeeper connection (no
// session tracking: a tool's own connection) whose creates use acl.
func Plain(conn *zk.Conn, acl []zk.ACL) Requester { return plain{conn, acl} }

type plain struct {
	conn *zk.Conn
	acl  []zk.ACL
}

func (p plain) Conn() *zk.Conn { return p.conn }
func (p plain) ACL() []zk.ACL  { return p.acl }
func (p plain) Run(ctx context.Context, op func() (any, error)) (any, error) {
	return RetryValue(ctx, nil, op)
}

// Reads and watches through a Requester, retried on connection loss (each
// is idempotent). A watch armed by one of them fires once: a zk.Event of
// the node, or EventNotWatching when the session expires.

// Get reads path's data and Stat.
func Get(ctx context.Context, r Requester, path string) ([]byte, *zk.Stat, error) {
	type res struct {
		b  []byte
		st *zk.Stat
	}
	v, err := run(ctx, r, func() (res, error) {
		b, st, err := r.Conn().Get(path)
		return res{b, st}, err
	})
	return v.b, v.st, err
}

// Exists reports whether path exists, with its Stat.
func Exists(ctx context.Context, r Requester, path string) (bool, *zk.Stat, error) {
	type res struct {
		ok bool
		st *zk.Stat
	}
	v, err := run(ctx, r, func() (res, error) {
		ok, st, err := r.Conn().Exists(path)
		return res{ok, st}, err
	})
	return v.ok, v.st, err
}

// ExistsW is Exists that also arms a watch on path (creation, deletion,
// data change).
func ExistsW(ctx context.Context, r Requester, path string) (bool, *zk.Stat, <-chan zk.Event, error) {
	type res struct {
		ok bool
		st *zk.Stat
		ch <-chan zk.Event
	}
	v, err := run(ctx, r, func() (res, error) {
		ok, st, ch, err := r.Conn().ExistsW(path)
		return res{ok, st, ch}, err
	})
	return v.ok, v.st, v.ch, err
}

// Children lists path's children.
func Children(ctx context.Context, r Requester, path string) ([]string, error) {
	return run(ctx, r, func() ([]string, error) {
		names, _, err := r.Conn().Children(path)
		return names, err
	})
}

// ChildrenW lists path's children and arms a child watch in the same
// request: a change after this listing fires it, so a caller that diffs
// each listing against the previous one misses nothing.
func ChildrenW(ctx context.Context, r Requester, path string) ([]string, <-chan zk.Event, error) {
	type res struct {
		names []string
		ch    <-chan zk.Event
	}
	v, err := run(ctx, r, func() (res, error) {
		names, _, ch, err := r.Conn().ChildrenW(path)
		return res{names, ch}, err
	})
	return v.names, v.ch, err
}

// Sync makes the server r reads from catch up with the leader on path.
// After a session expiry go-zookeeper forgets the last zxid it saw, so the
// new session may read from a follower behind what this process already
// read: Sync before concluding that something is missing.
func Sync(ctx context.Context, r Requester, path string) error {
	_, err := run(ctx, r, func() (struct{}, error) {
		_, err := r.Conn().Sync(path)
		return struct{}{}, err
	})
	return err
}

// EnsurePath creates every missing component of path as a persistent znode
// with no data and r's ACL, tolerating concurrent creators; empty
// components are skipped and "/" needs nothing. It is correct under digest
// ACLs: each component is first checked with Exists (which needs no
// permission), so a component that exists is never created again, and a
// client that only traverses a shared parent whose ACL denies it CREATE
// (another user's digest) succeeds. A create refused with ErrNoAuth is
// checked once more with Exists (a concurrent creator may have won the
// race under such a parent) before the refusal is returned. A create
// retried after a connection loss may find its own first attempt landed
// (ErrNodeExists): that is success too.
func EnsurePath(ctx context.Context, r Requester, path string) error {
	cur := ""
	for _, p := range splitPath(path) {
		cur += "/" + p
		p := cur
		ok, _, err := Exists(ctx, r, p)
		if err != nil {
			return fmt.Errorf("exists %s: %w", p, err)
		}
		if ok {
			continue
		}
		_, err = run(ctx, r, func() (struct{}, error) {
			_, err := r.Conn().Create(p, nil, 0, r.ACL())
			return struct{}{}, err
		})
		if errors.Is(err, zk.ErrNoAuth) {
			if ok, _, eerr := Exists(ctx, r, p); eerr == nil && ok {
				continue
			}
		}
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return fmt.Errorf("create %s: %w", p, err)
		}
	}
	return nil
}

// splitPath returns the non-empty components of path.
func splitPath(path string) []string {
	var out []string
	for _, p := range strings.Split(path, "/") {
		if p != "" {
			out = append(out, p)
		}
	}
	return out
}

package logroom

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/roomlog/roomlog/zkx"
)

const (
	channelPrefix = "ch-"
	batchPrefix   = "b-"
	numDigits     = 20
)

func channelName(num uint64) string { return fmt.Sprintf("%s%0*d", channelPrefix, numDigits, num) }
func batchName(first uint64) string { return fmt.Sprintf("%s%0*d", batchPrefix, numDigits, first) }

// parseNum parses "<prefix>%020d"; ok is false for any other name.
func parseNum(name, prefix string) (uint64, bool) {
	if len(name) != len(prefix)+numDigits || !strings.HasPrefix(name, prefix) {
		return 0, false
	}
	n, err := strconv.ParseUint(name[len(prefix):], 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// backoff is the exponential retry delay of zkx.Backoff (20 ms doubling
// to 1 s); the zero value is ready.
type backoff struct{ zkx.Backoff }

// wait sleeps for the next delay or until ctx ends.
func (b *backoff) wait(ctx context.Context) error { return b.Wait(ctx) }

// retry runs an idempotent operation until it returns something other than
// a connection error, waiting for the session and backing off in between.
// It gives up when ctx ends or the client is closed.
func (c *Client) retry(ctx context.Context, op func() error) error {
	return zkx.Retry(ctx, c.retryGate, op)
}

// retryGate runs between retries after the connection error err: it fails
// once the client is closed, else waits for the session.
func (c *Client) retryGate(ctx context.Context, err error) error {
	if c.isClosed() {
		return fmt.Errorf("%w: %w", ErrClosed, err)
	}
	if werr := c.waitSession(ctx); werr != nil {
		return fmt.Errorf("%w (last error: %w)", werr, err)
	}
	return nil
}

// get is Get with retry on connection loss.
func (c *Client) get(ctx context.Context, path string) (data []byte, stat *zk.Stat, err error) {
	err = c.retry(ctx, func() error {
		var e error
		data, stat, e = c.conn.Get(path)
		return e
	})
	return data, stat, err
}

// children is Children with retry on connection loss.
func (c *Client) children(ctx context.Context, path string) (names []string, err error) {
	err = c.retry(ctx, func() error {
		var e error
		names, _, e = c.conn.Children(path)
		return e
	})
	return names, err
}

// sync is Sync with retry on connection loss.
func (c *Client) sync(ctx context.Context, path string) error {
	return c.retry(ctx, func() error {
		_, e := c.conn.Sync(path)
		return e
	})
}

// ensurePath creates every missing component of path (persistent, empty
// data), tolerating concurrent creators.
func (c *Client) ensurePath(ctx context.Context, path string) error {
	parts := strings.Split(strings.TrimPrefix(path, "/"), "/")
	cur := ""
	for _, p := range parts {
		cur += "/" + p
		err := c.retry(ctx, func() error {
			_, e := c.conn.Create(cur, nil, 0, c.acl)
			return e
		})
		if err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return zkError("logroom: create "+cur, err)
		}
	}
	return nil
}

// multiErr returns the index and error of the first failed op of a Multi.
func multiErr(res []zk.MultiResponse, err error) (int, error) {
	for i, r := range res {
		if r.Error != nil {
			return i, r.Error
		}
	}
	return -1, err
}

// parallel runs fn(i) for i in [0,n) with at most width calls at once and
// returns the first error (by index order).
func parallel(n, width int, fn func(i int) error) error {
	if n == 0 {
		return nil
	}
	if width > n {
		width = n
	}
	errs := make([]error, n)
	next := make(chan int)
	done := make(chan struct{})
	for w := 0; w < width; w++ {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range next {
				errs[i] = fn(i)
			}
		}()
	}
	for i := 0; i < n; i++ {
		next <- i
	}
	close(next)
	for w := 0; w < width; w++ {
		<-done
	}
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

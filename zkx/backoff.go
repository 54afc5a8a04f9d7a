package zkx

import (
	"context"
	"time"
)

// The delays of a zero Backoff.
const (
	DefaultBackoffMin = 20 * time.Millisecond
	DefaultBackoffMax = 1 * time.Second
)

// Backoff is a capped exponential retry delay: the first Wait sleeps Min,
// each further one twice the previous, at most Max. A zero Min or Max
// means DefaultBackoffMin or DefaultBackoffMax (so the zero value is
// ready: 20 ms doubling to 1 s); a Max below Min means Min. Not safe for
// concurrent use.
type Backoff struct {
	Min, Max time.Duration
	next     time.Duration // the next Wait's delay; 0 until the first Wait
}

// NewBackoff returns a backoff from min doubling to max.
func NewBackoff(min, max time.Duration) *Backoff { return &Backoff{Min: min, Max: max} }

func (b *Backoff) bounds() (lo, hi time.Duration) {
	lo, hi = b.Min, b.Max
	if lo <= 0 {
		lo = DefaultBackoffMin
	}
	if hi <= 0 {
		hi = DefaultBackoffMax
	}
	return lo, max(lo, hi)
}

// Next returns the delay the next Wait sleeps.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.bounds()
	return min(max(b.next, lo), hi)
}

// AtLeast makes the next Wait sleep at least d (but never more than Max).
func (b *Backoff) AtLeast(d time.Duration) { b.next = max(b.Next(), d) }

// Reset starts the next Wait at Min again.
func (b *Backoff) Reset() { b.next = 0 }

// Wait sleeps for the next delay, doubling the one after it, or until ctx
// ends: then it returns ctx's error.
func (b *Backoff) Wait(ctx context.Context) error {
	t := time.NewTimer(b.advance())
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// advance returns the next delay and doubles the one after it.
func (b *Backoff) advance() time.Duration {
	d := b.Next()
	_, hi := b.bounds()
	b.next = min(2*d, hi)
	return d
}

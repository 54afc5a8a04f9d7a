package zkx

import (
	"context"
	"fmt"
)

// Gate runs between the attempts of a retry, after a connection loss
// (lastErr) and before the backoff wait: it may wait for the session to
// come back. A non-nil result ends the retry and is returned as it is, so
// it should wrap lastErr (e.g. "%w (last error: %w)").
type Gate func(ctx context.Context, lastErr error) error

// Retry runs op, an idempotent request, until it returns something other
// than a connection loss (IsConnLoss), calling gate (when non-nil) and
// waiting on a zero Backoff between attempts. When ctx ends during a wait
// the error wraps both ctx's error and the last connection error.
func Retry(ctx context.Context, gate Gate, op func() error) error {
	_, err := RetryValue(ctx, gate, func() (struct{}, error) { return struct{}{}, op() })
	return err
}

// RetryValue is Retry for a request with a result: it returns the result
// of the last attempt.
func RetryValue[T any](ctx context.Context, gate Gate, op func() (T, error)) (T, error) {
	var bo Backoff
	for {
		v, err := op()
		if err == nil || !IsConnLoss(err) {
			return v, err
		}
		if gate != nil {
			if gerr := gate(ctx, err); gerr != nil {
				return v, gerr
			}
		}
		if werr := bo.Wait(ctx); werr != nil {
			return v, fmt.Errorf("%w (last error: %w)", werr, err)
		}
	}
}

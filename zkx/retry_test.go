package zkx

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
)

func TestRetry(t *testing.T) {
	ctx := context.Background()

	// Connection losses are retried until an answer.
	n := 0
	v, err := RetryValue(ctx, nil, func() (int, error) {
		if n++; n < 3 {
			return 0, zk.ErrConnectionClosed
		}
		return 42, nil
	})
	require.NoError(t, err)
	require.Equal(t, 42, v)
	require.Equal(t, 3, n)

	// A definite error is returned at once.
	n = 0
	err = Retry(ctx, nil, func() error { n++; return fmt.Errorf("get: %w", zk.ErrNoNode) })
	require.ErrorIs(t, err, zk.ErrNoNode)
	require.Equal(t, 1, n)

	// The gate sees every connection loss and may end the retry.
	errGone := errors.New("client closed")
	var seen []error
	err = Retry(ctx, func(_ context.Context, last error) error {
		seen = append(seen, last)
		if len(seen) == 2 {
			return fmt.Errorf("%w: %w", errGone, last)
		}
		return nil
	}, func() error { return zk.ErrNoServer })
	require.ErrorIs(t, err, errGone)
	require.ErrorIs(t, err, zk.ErrNoServer)
	require.Len(t, seen, 2)

	// ctx ending during the backoff ends it, naming the last loss.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Millisecond)
	defer cancel()
	err = Retry(cctx, nil, func() error { return zk.ErrSessionExpired })
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, zk.ErrSessionExpired)
}

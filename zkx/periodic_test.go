package zkx

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPeriodic(t *testing.T) {
	calls := make(chan time.Duration, 16)
	stop := Periodic(context.Background(), 10*time.Millisecond, 10*time.Millisecond, func(w time.Duration) { calls <- w })
	first := <-calls
	second := <-calls
	stop()
	require.GreaterOrEqual(t, first, 10*time.Millisecond)
	require.Greater(t, second, first)
	n := len(calls)
	time.Sleep(30 * time.Millisecond) // after stop: no more calls may come
	require.Equal(t, n, len(calls))
}

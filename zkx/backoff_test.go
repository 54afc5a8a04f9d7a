package zkx

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// delays returns the delays of n Waits without sleeping them.
func delays(b *Backoff, n int) []time.Duration {
	var out []time.Duration
	for range n {
		out = append(out, b.advance()) // what Wait sleeps
	}
	return out
}

func TestBackoffDelays(t *testing.T) {
	ms := time.Millisecond
	var zero Backoff
	require.Equal(t, []time.Duration{20 * ms, 40 * ms, 80 * ms, 160 * ms, 320 * ms, 640 * ms, time.Second, time.Second},
		delays(&zero, 8), "zero value: 20ms doubling to 1s")
	zero.Reset()
	require.Equal(t, 20*ms, zero.Next())

	b := NewBackoff(50*ms, 2*time.Second)
	require.Equal(t, []time.Duration{50 * ms, 100 * ms, 200 * ms, 400 * ms, 800 * ms, 1600 * ms, 2 * time.Second},
		delays(b, 7))
	b.Reset()
	b.AtLeast(500 * ms)
	require.Equal(t, 500*ms, b.Next())
	b.AtLeast(100 * ms) // never lowers
	require.Equal(t, 500*ms, b.Next())
	b.AtLeast(time.Hour) // capped at Max
	require.Equal(t, 2*time.Second, b.Next())

	inverted := NewBackoff(time.Second, 10*ms)
	require.Equal(t, []time.Duration{time.Second, time.Second}, delays(inverted, 2), "Max below Min means Min")
	onlyMin := Backoff{Min: 5 * ms}
	require.Equal(t, []time.Duration{5 * ms, 10 * ms}, delays(&onlyMin, 2))
}

func TestBackoffWait(t *testing.T) {
	b := NewBackoff(time.Millisecond, 4*time.Millisecond)
	for range 4 {
		require.NoError(t, b.Wait(context.Background()))
	}
	require.Equal(t, 4*time.Millisecond, b.Next())

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	slow := NewBackoff(time.Hour, time.Hour)
	start := time.Now()
	require.ErrorIs(t, slow.Wait(ctx), context.Canceled)
	require.Less(t, time.Since(start), time.Minute)
}

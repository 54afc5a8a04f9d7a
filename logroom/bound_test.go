package logroom

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/stretchr/testify/require"
)

// TestRoomByteBoundHeap fills a room to MaxRoomBytes with one-entry
// batches, the bound's worst case, on a 1 GiB server of its own, and
// measures the server's live heap (after a full GC, through jcmd) before
// and after: the room may cost at most 1.5 times its bound. Counting data
// bytes alone (ZnodeHeapBytes = 0) let such a room cost 16 times its bound
// (measured: 71,889 batches of 29 bytes in a 2 MiB bound, 32 MiB of heap).
func TestRoomByteBoundHeap(t *testing.T) {
	if testing.Short() {
		t.Skip("fills 16 MiB of one-entry batches")
	}
	zkensemble.RequireJcmd(t)
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 5*time.Minute)
	before, err := e.LiveHeap(ctx, 0)
	require.NoError(t, err)

	const bound = 16 << 20
	r := openRoom(t, c, "heap")
	w := newWriter(t, r, WriterConfig{MaxRoomBytes: bound, Compression: CompressionNone,
		MaxInFlight: 32, EagerInFlight: 32, maxBatchEntries: 1})
	t0 := time.Now()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var appended int
	var failure error
	for g := range 64 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				_, err := w.Append(ctx, payload(g<<20|i))
				mu.Lock()
				if err == nil {
					appended++
				} else if !errors.Is(err, ErrRoomFull) && failure == nil {
					failure = err
				}
				mu.Unlock()
				if err != nil {
					return
				}
			}
		}()
	}
	wg.Wait()
	require.NoError(t, failure)
	fill := time.Since(t0)

	u, err := r.Usage(ctx)
	require.NoError(t, err)
	require.Equal(t, appended+u.Channels, u.Znodes, "one batch znode per entry, plus the channels (rotated every 10000 batches)")
	require.LessOrEqual(t, u.Charged(), int64(bound))
	require.Greater(t, u.Charged(), int64(bound-64*(ZnodeHeapBytes+64)), "filled to the bound")

	after, err := e.LiveHeap(ctx, 0)
	require.NoError(t, err)
	grown := after - before
	ratio := float64(grown) / bound
	t.Logf("%d one-entry batches (%d data bytes, %.1f B each) filled %d MiB charged in %v; live heap %.1f -> %.1f MiB: %.0f B per batch znode, %.2f x MaxRoomBytes",
		appended, u.Bytes, float64(u.Bytes)/float64(appended), bound>>20, fill.Round(time.Millisecond),
		float64(before)/(1<<20), float64(after)/(1<<20), float64(grown)/float64(u.Znodes), ratio)
	require.LessOrEqual(t, ratio, 1.5, "the room's live heap exceeds 1.5 x MaxRoomBytes")
	require.Greater(t, ratio, 0.5, "the room is not in the measured heap: the measurement measures nothing")
}

package logroom

import (
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestAppendAndTail(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "basic")
	w := newWriter(t, r, WriterConfig{Owner: "a"})
	require.Equal(t, uint64(1), w.Epoch())
	require.Equal(t, uint64(1), w.StartIndex())
	ctx := testCtx(t, 60*time.Second)
	for i := 1; i <= 10; i++ {
		last, err := w.Append(ctx, payload(i))
		require.NoError(t, err)
		require.Equal(t, uint64(i), last)
	}
	last, err := w.Append(ctx, payload(11), payload(12), payload(13))
	require.NoError(t, err)
	require.Equal(t, uint64(13), last)
	require.Equal(t, uint64(13), w.LastCommitted())

	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	got := readN(t, ctx, rd, 13)
	for i, en := range got {
		require.Equal(t, uint64(i+1), en.Index)
		require.Equal(t, payload(i+1), en.Data)
		require.Equal(t, uint64(1), en.Epoch)
	}
	ci, err := r.CommittedIndex(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(13), ci)
	ci, err = r.CommittedIndex(ctx, 5)
	require.NoError(t, err)
	require.Equal(t, uint64(13), ci)
}

func TestLingerAndCommittedIndexHint(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "linger")
	w := newWriter(t, r, WriterConfig{Linger: 20 * time.Millisecond, MaxInFlight: 1})
	ctx := testCtx(t, 60*time.Second)
	// Concurrent appends within the linger share one batch.
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := w.Append(ctx, payload(i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	names, _, err := c.Conn().Children(r.channelPath(1))
	require.NoError(t, err)
	require.Less(t, len(names), 8, "lingering batched concurrent appends")
	_, err = w.Append(ctx, payload(8), payload(9), payload(10))
	require.NoError(t, err)

	// The hint may be any committed index, mid-batch included.
	for hint := uint64(0); hint <= 11; hint++ {
		ci, err := r.CommittedIndex(ctx, hint)
		require.NoError(t, err)
		require.Equal(t, uint64(11), ci, "hint %d", hint)
	}
}

// TestLingerOnlyWhileInFlight: Linger makes a batch wait for company only
// while another batch is in flight; a lone synchronous proposer (nothing
// in flight) is never held back, however long Linger is. The defaults:
// 0 is DefaultLinger, NoLinger is off.
func TestLingerOnlyWhileInFlight(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "linger-alone")
	w := newWriter(t, r, WriterConfig{Linger: time.Second})
	ctx := testCtx(t, 60*time.Second)
	for i := 0; i < 5; i++ {
		start := time.Now()
		_, err := w.Append(ctx, payload(i))
		require.NoError(t, err)
		require.Less(t, time.Since(start), 700*time.Millisecond, "append %d waited for the 1 s linger with nothing in flight", i)
	}

	require.Equal(t, DefaultLinger, WriterConfig{}.withDefaults().Linger)
	require.Equal(t, time.Duration(0), WriterConfig{Linger: NoLinger}.withDefaults().Linger)
	require.NoError(t, WriterConfig{Linger: NoLinger}.Validate())
	require.Error(t, WriterConfig{Linger: -2}.Validate())
	require.Error(t, WriterConfig{Linger: 2 * time.Second}.Validate())
}

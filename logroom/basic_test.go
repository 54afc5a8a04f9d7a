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

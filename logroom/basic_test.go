package logroom

import (
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

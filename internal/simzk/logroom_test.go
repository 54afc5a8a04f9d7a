package simzk_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/roomlog/roomlog/internal/simzk"
	"github.com/roomlog/roomlog/logroom"
	"github.com/stretchr/testify/require"
)

// TestLogroomOnSimZK runs the real logroom package on simzk: a writer
// appends 200 batches, a reader on another client reads them back in
// order; the writer's session is expired, a second writer takes over
// (fencing the first) and appends more; the first writer's next Append
// fails and leaves nothing in the log; the reader reads on across the
// takeover.
func TestLogroomOnSimZK(t *testing.T) {
	srv, err := simzk.Start(simzk.Options{Tick: 50 * time.Millisecond})
	require.NoError(t, err)
	t.Cleanup(srv.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	defer func() {
		if t.Failed() {
			t.Logf("simzk tree:\n%s", srv.Dump())
		}
	}()
	dial := func() *logroom.Client {
		c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: []string{srv.Addr()}})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	open := func(c *logroom.Client) *logroom.Room {
		room, err := logroom.OpenRoom(ctx, c, "simroom", logroom.RoomOptions{})
		require.NoError(t, err)
		return room
	}

	c1 := dial()
	w1, err := open(c1).NewWriter(ctx, logroom.WriterConfig{Owner: "w1"})
	require.NoError(t, err)
	var want [][]byte
	var last uint64
	for b := 0; b < 200; b++ {
		batch := [][]byte{[]byte(fmt.Sprintf("w1 batch %d entry 0", b)), []byte(fmt.Sprintf("w1 batch %d entry 1", b))}
		last, err = w1.Append(ctx, batch...)
		require.NoError(t, err)
		want = append(want, batch...)
	}
	require.Equal(t, uint64(len(want)), last)

	reader := open(dial())
	rd, err := reader.Tail(ctx, 1)
	require.NoError(t, err)
	defer rd.Close()
	var w1Epoch uint64
	readUpTo := func(end uint64) []logroom.Entry {
		var got []logroom.Entry
		for rd.Position() <= end {
			es, err := rd.Next(ctx)
			require.NoError(t, err)
			got = append(got, es...)
		}
		return got
	}
	got := readUpTo(last)
	require.Len(t, got, len(want))
	for i, e := range got {
		require.Equal(t, uint64(i+1), e.Index)
		require.Equal(t, string(want[i]), string(e.Data))
		if i == 0 {
			w1Epoch = e.Epoch
		}
		require.Equal(t, w1Epoch, e.Epoch)
	}

	// The first writer's session expires; a second writer takes over.
	sid := c1.SessionID()
	require.Contains(t, srv.Sessions(), sid)
	srv.Expire(sid)
	require.NotContains(t, srv.Sessions(), sid)
	w2, err := open(dial()).NewWriter(ctx, logroom.WriterConfig{Owner: "w2"})
	require.NoError(t, err)
	_, err = w1.Append(ctx, []byte("w1 after its session expired"))
	require.Error(t, err, "the deposed writer must not append")
	t.Logf("deposed writer's Append: %v", err)
	var more [][]byte
	for b := 0; b < 20; b++ {
		e := []byte(fmt.Sprintf("w2 batch %d", b))
		last, err = w2.Append(ctx, e)
		require.NoError(t, err)
		more = append(more, e)
	}
	require.Equal(t, uint64(len(want)+len(more)), last)
	got = readUpTo(last)
	require.Len(t, got, len(more))
	for i, e := range got {
		require.Equal(t, uint64(len(want)+i+1), e.Index)
		require.Equal(t, string(more[i]), string(e.Data))
		require.Greater(t, e.Epoch, w1Epoch)
	}
}

package logroom

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
)

// TestSeedPlanRooms follows the seed test plan (测试/消息队列): 10 rooms, each
// with 20 initial and 5 later-added channels, each channel with 5 initial
// and 20 later-added entries; every delivery is counted and the wait has a
// deadline. Here "initial" is written before the room's reader starts and
// "later-added" while it runs.
func TestSeedPlanRooms(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 120*time.Second)
	const rooms, initCh, laterCh, initEntries, laterEntries = 10, 20, 5, 5, 20
	total := initCh*initEntries + laterCh*laterEntries

	type roomState struct {
		r        *Room
		w        *Writer
		mu       sync.Mutex
		got      []Entry
		channels map[uint64]bool
	}
	states := make([]*roomState, rooms)
	for i := range states {
		r := openRoom(t, c, fmt.Sprintf("room-%02d", i))
		states[i] = &roomState{r: r, w: newWriter(t, r, WriterConfig{}), channels: map[uint64]bool{}}
	}
	write := func(s *roomState, room, chans, entries int, tag string) error {
		for ch := 0; ch < chans; ch++ {
			for k := 0; k < entries; k++ {
				if _, err := s.w.Append(ctx, []byte(fmt.Sprintf("%s-r%d-c%d-e%d", tag, room, ch, k))); err != nil {
					return err
				}
			}
			if _, err := s.w.Rotate(ctx); err != nil {
				return err
			}
		}
		return nil
	}
	for i, s := range states {
		require.NoError(t, write(s, i, initCh, initEntries, "init"))
	}

	var delivered sync.WaitGroup
	delivered.Add(rooms * total)
	readCtx, stopReaders := context.WithCancel(ctx)
	defer stopReaders()
	var readers sync.WaitGroup
	for _, s := range states {
		rd, err := s.r.Tail(ctx, 1)
		require.NoError(t, err)
		readers.Add(1)
		go func() {
			defer readers.Done()
			for {
				es, err := rd.Next(readCtx)
				if err != nil {
					return
				}
				s.mu.Lock()
				for _, en := range es {
					s.got = append(s.got, en)
					s.channels[rd.ch] = true
					delivered.Done() // panics on a surplus delivery
				}
				s.mu.Unlock()
			}
		}()
	}
	var writers sync.WaitGroup
	for i, s := range states {
		writers.Add(1)
		go func() {
			defer writers.Done()
			if err := write(s, i, laterCh, laterEntries, "later"); err != nil {
				t.Errorf("room %d: %v", i, err)
			}
		}()
	}
	writers.Wait()
	done := make(chan struct{})
	go func() { delivered.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		for i, s := range states {
			s.mu.Lock()
			t.Logf("room %d: %d of %d delivered", i, len(s.got), total)
			s.mu.Unlock()
		}
		t.Fatal("deadline passed before every entry was delivered")
	}
	stopReaders()
	readers.Wait()
	for i, s := range states {
		require.Len(t, s.got, total)
		n := 0
		for ch := 0; ch < initCh+laterCh; ch++ {
			tag, per := "init", initEntries
			if ch >= initCh {
				tag, per = "later", laterEntries
			}
			for k := 0; k < per; k++ {
				require.Equal(t, uint64(n+1), s.got[n].Index)
				require.Equal(t, fmt.Sprintf("%s-r%d-c%d-e%d", tag, i, ch%initCh, k), string(s.got[n].Data))
				n++
			}
		}
		require.Len(t, s.channels, initCh+laterCh, "room %d: entries from every channel", i)
		chs, err := s.r.Channels(ctx)
		require.NoError(t, err)
		require.Len(t, chs, initCh+laterCh+1, "sealed channels plus the open one")
	}
}

func TestReaderResume(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "resume")
	w := newWriter(t, r, WriterConfig{})
	ctx := testCtx(t, 60*time.Second)
	// Batches of 10 entries each (one append each), 3 channels.
	for b := 0; b < 12; b++ {
		es := make([][]byte, 10)
		for k := range es {
			es[k] = payload(b*10 + k + 1)
		}
		_, err := w.Append(ctx, es...)
		require.NoError(t, err)
		if b%4 == 3 {
			_, err := w.Rotate(ctx)
			require.NoError(t, err)
		}
	}
	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	first := readN(t, ctx, rd, 40)
	require.Equal(t, uint64(41), rd.Position())
	require.NoError(t, rd.Close())
	_, err = rd.Next(ctx)
	require.ErrorIs(t, err, ErrClosed)

	for _, from := range []uint64{41, 45, 50, 55, 81, 120} {
		t.Run(fmt.Sprint(from), func(t *testing.T) {
			rd, err := r.Tail(ctx, from)
			require.NoError(t, err)
			require.Equal(t, from, rd.Position())
			got := readN(t, ctx, rd, int(121-from))
			require.Equal(t, from, got[0].Index)
			for _, en := range got {
				require.Equal(t, payload(int(en.Index)), en.Data)
			}
		})
	}
	require.Equal(t, payload(40), first[39].Data)

	// A reader at the end waits for the next append, across a rotation.
	rd, err = r.Tail(ctx, 121)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = rd.Next(short)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = w.Rotate(ctx)
	require.NoError(t, err)
	_, err = w.Append(ctx, payload(121))
	require.NoError(t, err)
	got := readN(t, ctx, rd, 1)
	require.Equal(t, uint64(121), got[0].Index)
}

// TestReaderBeforeFirstChannel starts a reader on a room without channels.
func TestReaderBeforeFirstChannel(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "empty")
	ctx := testCtx(t, 30*time.Second)
	rd, err := r.Tail(ctx, 0)
	require.NoError(t, err)
	got := make(chan []Entry, 1)
	go func() {
		es, err := rd.Next(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- es
	}()
	w := newWriter(t, r, WriterConfig{})
	_, err = w.Append(ctx, []byte("first"))
	require.NoError(t, err)
	es := <-got
	require.Len(t, es, 1)
	require.NotZero(t, es[0].Batch.CRC)
	require.Equal(t, []Entry{{Index: 1, Epoch: 1, Data: []byte("first"),
		Batch: BatchID{Epoch: 1, First: 1, Count: 1, CRC: es[0].Batch.CRC}}}, es)
}

// plant writes data at the batch name first of the room's open channel.
func plant(t *testing.T, c *Client, r *Room, ch, first uint64, data []byte) string {
	t.Helper()
	path := r.batchPath(ch, first)
	_, err := c.Conn().Create(path, data, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	return path
}

func TestReaderCorruption(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 60*time.Second)
	good := func(epoch, first uint64, n int) []byte {
		es := make([][]byte, n)
		for i := range es {
			es[i] = payload(int(first) + i)
		}
		d, err := EncodeBatch(epoch, first, es)
		require.NoError(t, err)
		return d
	}
	cases := []struct {
		name   string
		data   func() []byte
		reason string
	}{
		{"garbage", func() []byte { return []byte("garbage, not msgpack") }, ""},
		{"flipped crc", func() []byte {
			d := good(1, 6, 2)
			d[len(d)-3] ^= 0x10
			return d
		}, "checksum"},
		{"wrong first", func() []byte { return good(1, 7, 2) }, "expected 6"},
		{"older epoch", func() []byte { return good(0, 6, 2) }, "epoch 0 below"},
		{"foreign epoch", func() []byte { return good(7, 6, 2) }, "epoch 7 is not its channel's epoch 1"},
		{"unknown version", func() []byte { return []byte{0x96, 0x02, 0, 0, 0, 0, 0xc4, 0} }, "version 2"},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := openRoom(t, c, fmt.Sprintf("corrupt-%d", i))
			w := newWriter(t, r, WriterConfig{})
			for k := 1; k <= 5; k++ {
				_, err := w.Append(ctx, payload(k))
				require.NoError(t, err)
			}
			rd, err := r.Tail(ctx, 1)
			require.NoError(t, err)
			readN(t, ctx, rd, 5)
			path := plant(t, c, r, 1, 6, tc.data())
			// The writer's next batch meets the planted node: it must not
			// acknowledge it (another writer's bytes means fenced).
			_, err = w.Append(ctx, payload(6))
			require.Error(t, err)
			require.NotErrorIs(t, err, ErrCorrupt)
			// A later valid batch must never be delivered either.
			plant(t, c, r, 1, 8, good(1, 8, 1))

			_, err = rd.Next(ctx)
			require.ErrorIs(t, err, ErrCorrupt)
			msg := err.Error()
			require.Contains(t, msg, path)
			require.Contains(t, msg, fmt.Sprintf("%q", r.Name()))
			require.Contains(t, msg, "channel 1")
			require.Contains(t, msg, tc.reason)
			require.Equal(t, uint64(6), rd.Position(), "nothing of the bad batch delivered")
			_, err = rd.Next(ctx)
			require.ErrorIs(t, err, ErrCorrupt, "sticky")
			// A new writer refuses to take over a corrupt chain.
			_, err = r.NewWriter(ctx, WriterConfig{})
			require.ErrorIs(t, err, ErrCorrupt)
			require.True(t, strings.Contains(err.Error(), path), err.Error())
		})
	}
}

func TestReaderChannelSuccessorCorrupt(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "successor")
	w := newWriter(t, r, WriterConfig{})
	ctx := testCtx(t, 30*time.Second)
	_, err := w.Append(ctx, payload(1), payload(2))
	require.NoError(t, err)
	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	_, err = w.Rotate(ctx)
	require.NoError(t, err)
	// Rewrite channel 2's first index so it no longer follows channel 1.
	bad := encodeMeta(channelMeta{Version: channelFormatVersion, First: 5, Epoch: 1})
	_, err = c.Conn().Set(r.channelPath(2), bad, -1)
	require.NoError(t, err)
	// A reader already in channel 1 stops when it reaches the bad link.
	readN(t, ctx, rd, 2)
	_, err = rd.Next(ctx)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), r.channelPath(2))
	// A new reader (and a new writer) refuse the broken chain at once.
	_, err = r.Tail(ctx, 1)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), r.channelPath(2))
	_, err = r.NewWriter(ctx, WriterConfig{})
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), r.channelPath(2))
}

// TestReaderOpenChannelWithSuccessor: a channel whose meta says open while
// the next channel exists is damaged (seal and open are one Multi); the
// reader at its end reports ErrCorrupt naming it instead of waiting forever.
func TestReaderOpenChannelWithSuccessor(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "opensucc")
	w := newWriter(t, r, WriterConfig{})
	ctx := testCtx(t, 30*time.Second)
	_, err := w.Append(ctx, payload(1), payload(2))
	require.NoError(t, err)
	_, err = w.Rotate(ctx)
	require.NoError(t, err)
	_, err = w.Append(ctx, payload(3))
	require.NoError(t, err)
	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	defer rd.Close()
	// Unseal channel 1 although channel 2 follows it.
	_, err = c.Conn().Set(r.channelPath(1), encodeMeta(channelMeta{Version: channelFormatVersion, First: 1, Epoch: 1}), -1)
	require.NoError(t, err)
	_, err = r.Tail(ctx, 1)
	require.ErrorIs(t, err, ErrCorrupt, "a new reader refuses the chain at once")
	require.Contains(t, err.Error(), r.channelPath(1))
	readN(t, ctx, rd, 2)
	nctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = rd.Next(nctx)
	require.ErrorIs(t, err, ErrCorrupt, "a reader waiting forever would end with the deadline instead")
	require.Contains(t, err.Error(), r.channelPath(1))
}

// TestReaderCatchUp reads a long backlog across channels; a reader that is
// behind lists the channel once and reads ahead concurrently.
func TestReaderCatchUp(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "catchup")
	w := newWriter(t, r, WriterConfig{MaxInFlight: 16})
	ctx := testCtx(t, 60*time.Second)
	const n = 400
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g; i < n; i += 4 {
				if _, err := w.Append(ctx, payload(i)); err != nil {
					t.Error(err)
					return
				}
				if i == n/2 {
					if _, err := w.Rotate(ctx); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	names, _, err := c.Conn().Children(r.channelPath(1))
	require.NoError(t, err)
	require.Greater(t, len(names), 50, "many small batches")
	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	log := readN(t, ctx, rd, n)
	seen := map[string]bool{}
	for _, en := range log {
		require.False(t, seen[string(en.Data)])
		seen[string(en.Data)] = true
	}
	require.Greater(t, rd.prefetched, len(names)/2, "the backlog was read ahead")
	// Caught up, it waits on watches again.
	_, err = w.Append(ctx, []byte("tail"))
	require.NoError(t, err)
	got := readN(t, ctx, rd, 1)
	require.Equal(t, "tail", string(got[0].Data))
}

// TestReaderMissingBatch: a batch missing from a sealed channel is
// corruption, unless the channel is being deleted (compaction).
func TestReaderMissingBatch(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 30*time.Second)
	for _, deleting := range []bool{false, true} {
		t.Run(fmt.Sprintf("deleting=%v", deleting), func(t *testing.T) {
			r := openRoom(t, c, fmt.Sprintf("missing-%v", deleting))
			w := newWriter(t, r, WriterConfig{})
			for i := 1; i <= 3; i++ {
				_, err := w.Append(ctx, payload(i))
				require.NoError(t, err)
			}
			_, err := w.Rotate(ctx)
			require.NoError(t, err)
			rd, err := r.Tail(ctx, 1)
			require.NoError(t, err)
			readN(t, ctx, rd, 1)
			if deleting {
				m, ver, err := r.readChannel(ctx, 1)
				require.NoError(t, err)
				m.Deleting = true
				_, err = c.Conn().Set(r.channelPath(1), encodeMeta(m), ver)
				require.NoError(t, err)
			}
			require.NoError(t, c.Conn().Delete(r.batchPath(1, 2), -1))
			_, err = rd.Next(ctx)
			if deleting {
				require.ErrorIs(t, err, ErrCompacted)
				require.NoError(t, r.DeleteChannel(ctx, 1), "finishes a deletion in progress")
				chs, err := r.Channels(ctx)
				require.NoError(t, err)
				require.Len(t, chs, 1)
			} else {
				require.ErrorIs(t, err, ErrCorrupt)
				require.Contains(t, err.Error(), r.batchPath(1, 2))
			}
		})
	}
}

// TestReaderPipelinesWatchAndRead: a reader woken by a watch that finds the
// next batch already written reads it in the round trip that would have
// armed its watch (Get beside ExistsW), not in a second one after it.
func TestReaderPipelinesWatchAndRead(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "pipelined")
	ctx := testCtx(t, 30*time.Second)
	w := newWriter(t, r, WriterConfig{})
	_, err := w.Append(ctx, payload(1))
	require.NoError(t, err)
	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	defer rd.Close()
	readN(t, ctx, rd, 1)

	// Caught up: the next read waits on the watch for batch 2.
	got := make(chan []Entry, 1)
	go func() {
		es, err := rd.Next(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- es
	}()
	time.Sleep(100 * time.Millisecond) // let it arm the watch and wait
	_, err = w.Append(ctx, payload(2))
	require.NoError(t, err)
	select {
	case es := <-got:
		require.Equal(t, payload(2), es[0].Data)
	case <-ctx.Done():
		t.Fatal("the watch on batch 2 never woke the reader")
	}
	require.Zero(t, rd.pipelined, "batch 2 came through its watch")

	// Batch 3 exists before the reader asks for it: one round trip.
	_, err = w.Append(ctx, payload(3))
	require.NoError(t, err)
	es := readN(t, ctx, rd, 1)
	require.Equal(t, payload(3), es[0].Data)
	require.Equal(t, 1, rd.pipelined, "batch 3 was read beside the ExistsW that found it")

	// And a batch that is not there yet is still waited for by watch.
	go func() {
		time.Sleep(100 * time.Millisecond)
		if _, err := w.Append(ctx, payload(4)); err != nil {
			t.Error(err)
		}
	}()
	es = readN(t, ctx, rd, 1)
	require.Equal(t, payload(4), es[0].Data)
}

package logroom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// acked records what appenders were told, by entry payload.
type acked struct {
	mu      sync.Mutex
	ok      map[string]uint64 // payload -> index
	fenced  map[string]bool
	unknown map[string]bool
	stopped map[string]bool // ErrWriterStopped: nothing sent
}

func newAcked() *acked {
	return &acked{ok: map[string]uint64{}, fenced: map[string]bool{}, unknown: map[string]bool{}, stopped: map[string]bool{}}
}

func (a *acked) record(t testing.TB, entries [][]byte, last uint64, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case err == nil:
		for i, e := range entries {
			a.ok[string(e)] = last - uint64(len(entries)-1-i)
		}
	case errors.Is(err, ErrFenced):
		for _, e := range entries {
			a.fenced[string(e)] = true
		}
	case errors.Is(err, ErrWriterStopped):
		// Definite: never sent, so never in the log (checkLog treats them
		// as fenced).
		for _, e := range entries {
			a.stopped[string(e)] = true
		}
	case errors.Is(err, ErrOutcomeUnknown):
		for _, e := range entries {
			a.unknown[string(e)] = true
		}
	default:
		t.Errorf("unexpected append error: %v", err)
	}
}

// readAll tails the room from 1 up to and including index end.
func readAll(t testing.TB, ctx context.Context, r *Room, end uint64) []Entry {
	t.Helper()
	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	defer rd.Close()
	return readN(t, ctx, rd, int(end))
}

// checkLog verifies that every acknowledged entry is in the log exactly
// once at its acknowledged index, that fenced ones are absent, and that
// no payload appears twice.
func checkLog(t testing.TB, log []Entry, a *acked) {
	t.Helper()
	seen := map[string]uint64{}
	for i, e := range log {
		require.Equal(t, uint64(i+1), e.Index)
		prev, dup := seen[string(e.Data)]
		require.False(t, dup, "payload %q at %d and %d", e.Data, prev, e.Index)
		seen[string(e.Data)] = e.Index
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for p, idx := range a.ok {
		got, ok := seen[p]
		require.True(t, ok, "acknowledged %q (index %d) missing", p, idx)
		require.Equal(t, idx, got, "acknowledged %q at another index", p)
	}
	for p := range a.fenced {
		_, ok := seen[p]
		require.False(t, ok, "fenced %q is in the log", p)
	}
	for p := range a.stopped {
		_, ok := seen[p]
		require.False(t, ok, "%q got ErrWriterStopped (nothing sent) but is in the log", p)
	}
}

func TestConcurrentAppenders(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "concurrent")
	var commits []Entry
	w := newWriter(t, r, WriterConfig{MaxInFlight: 4, OnCommit: func(es []Entry) {
		commits = append(commits, es...) // one goroutine: no lock needed
	}})
	ctx := testCtx(t, 90*time.Second)

	// A reader tails concurrently with the writers.
	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	const goroutines, perG = 32, 40
	a := newAcked()
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < perG; i++ {
				n := 1 + i%3 // some multi-entry appends
				entries := make([][]byte, n)
				for k := range entries {
					entries[k] = []byte(fmt.Sprintf("g%02d-i%03d-k%d", g, i, k))
				}
				last, err := w.Append(ctx, entries...)
				a.record(t, entries, last, err)
			}
		}()
	}
	total := 0
	for i := 0; i < perG; i++ {
		total += goroutines * (1 + i%3)
	}
	log := readN(t, ctx, rd, total)
	wg.Wait()
	require.Len(t, a.ok, total)
	require.Equal(t, uint64(total), w.LastCommitted())
	checkLog(t, log, a)
	// One append's entries are contiguous.
	for p, idx := range a.ok {
		if p[len(p)-1] == '1' {
			prev := []byte(p[:len(p)-1] + "0")
			require.True(t, bytes.Equal(prev, log[idx-2].Data), "%s not right after its predecessor", p)
		}
	}
	// OnCommit saw every entry in order (read after Close: the loop is done).
	require.NoError(t, w.Close())
	require.Len(t, commits, total)
	for i, en := range commits {
		require.Equal(t, log[i], en)
	}
	ci, err := r.CommittedIndex(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(total), ci)
}

func TestFencing(t *testing.T) {
	e := sharedZK(t)
	c1 := dial(t, e.Addrs())
	c2 := dial(t, e.Addrs())
	r1 := openRoom(t, c1, "fence")
	r2 := openRoom(t, c2, "fence")
	ctx := testCtx(t, 90*time.Second)
	old := newWriter(t, r1, WriterConfig{Owner: "old", MaxInFlight: 8, EagerInFlight: 8})
	require.Equal(t, uint64(1), old.Epoch())

	// The old writer appends continuously from 8 goroutines while the new
	// one takes over.
	a := newAcked()
	var stop atomic.Bool
	var wg sync.WaitGroup
	var okCount atomic.Int64
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				en := []byte(fmt.Sprintf("old-%d-%d", g, i))
				last, err := old.Append(ctx, en)
				a.record(t, [][]byte{en}, last, err)
				if err == nil {
					okCount.Add(1)
				}
				if errors.Is(err, ErrFenced) {
					return
				}
			}
		}()
	}
	require.Eventually(t, func() bool { return okCount.Load() >= 200 }, 30*time.Second, 10*time.Millisecond, "old writer progress")
	nw := newWriter(t, r2, WriterConfig{Owner: "new"})
	require.Equal(t, uint64(2), nw.Epoch())
	for i := 0; i < 50; i++ {
		en := []byte(fmt.Sprintf("new-%d", i))
		last, err := nw.Append(ctx, en)
		a.record(t, [][]byte{en}, last, err)
		require.NoError(t, err)
	}
	stop.Store(true)
	wg.Wait()
	_, err := old.Append(ctx, []byte("late"))
	require.ErrorIs(t, err, ErrFenced)
	_, err = old.Rotate(ctx)
	require.ErrorIs(t, err, ErrFenced)
	require.NotEmpty(t, a.fenced, "the old writer must have been fenced mid-stream")

	end := nw.LastCommitted()
	log := readAll(t, ctx, r2, end)
	checkLog(t, log, a)
	firstNew := -1
	for i, en := range log {
		if en.Epoch == 2 {
			if firstNew < 0 {
				firstNew = i
			}
		} else {
			require.Equal(t, uint64(1), en.Epoch)
			require.Less(t, firstNew, 0, "epoch-1 entry %q at %d after the first epoch-2 entry", en.Data, en.Index)
		}
	}
	require.Equal(t, int(nw.StartIndex()-1), firstNew)
	// The reader saw the old writer's channel sealed where the new one began.
	chs, err := r2.Channels(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(chs), 2)
	require.True(t, chs[0].Sealed)
	require.Equal(t, nw.StartIndex()-1, chs[0].LastIndex)
	require.Equal(t, nw.StartIndex(), chs[1].FirstIndex)
}

func TestEntryTooLarge(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "large")
	w := newWriter(t, r, WriterConfig{MaxBatchBytes: 4096, Compression: CompressionNone})
	ctx := testCtx(t, 30*time.Second)
	max := MaxEntryBytes(4096)
	_, err := w.Append(ctx, []byte("small"), make([]byte, max+1))
	require.ErrorIs(t, err, ErrEntryTooLarge)
	names, _, err := c.Conn().Children(r.channelPath(1))
	require.NoError(t, err)
	require.Empty(t, names, "nothing may be written")
	require.Zero(t, w.LastCommitted())

	// The largest entry fits; an append bigger than a batch spans several.
	last, err := w.Append(ctx, make([]byte, max))
	require.NoError(t, err)
	require.Equal(t, uint64(1), last)
	many := make([][]byte, 10)
	for i := range many {
		many[i] = bytes.Repeat([]byte{byte(i)}, 1500)
	}
	last, err = w.Append(ctx, many...)
	require.NoError(t, err)
	require.Equal(t, uint64(11), last)
	names, _, err = c.Conn().Children(r.channelPath(1))
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(names), 5, "10 entries of 1.5 KB need >= 4 batches of 4 KB")
	log := readAll(t, ctx, r, 11)
	for i := range many {
		require.Equal(t, many[i], log[i+1].Data)
	}
}

func TestRoomFullAndDelete(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "full")
	const bound = 64 << 10
	w := newWriter(t, r, WriterConfig{MaxRoomBytes: bound, MaxBatchBytes: 8 << 10, Compression: CompressionNone})
	ctx := testCtx(t, 60*time.Second)
	entry := make([]byte, 1000)
	var last uint64
	var err error
	for i := 0; ; i++ {
		require.Less(t, i, 200, "never hit the bound")
		var l uint64
		l, err = w.Append(ctx, entry)
		if err != nil {
			break
		}
		last = l
	}
	require.ErrorIs(t, err, ErrRoomFull)
	require.Equal(t, last, w.LastCommitted())
	u, err := r.Usage(ctx)
	require.NoError(t, err)
	require.LessOrEqual(t, u.Charged(), int64(bound))
	require.Greater(t, u.Charged(), int64(bound-3000))
	require.Equal(t, int(last)+1, u.Znodes, "one batch per append, one channel")
	n, err := r.Bytes(ctx)
	require.NoError(t, err)
	require.Equal(t, u.Bytes, n)
	ci, err := r.CommittedIndex(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, last, ci, "nothing of the refused append was written")

	// The open channel cannot be deleted; after a rotation the sealed one can,
	// and appends succeed again.
	err = r.DeleteChannel(ctx, 1)
	require.ErrorIs(t, err, ErrChannelOpen)
	sealed, err := w.Rotate(ctx)
	require.NoError(t, err)
	require.Equal(t, ChannelInfo{Num: 1, FirstIndex: 1, LastIndex: last, Epoch: 1, Sealed: true,
		Bytes: sealed.Bytes, Batches: sealed.Batches, RoomVersion: 1}, sealed)
	require.Equal(t, n, sealed.Bytes)
	_, err = w.Append(ctx, entry)
	require.ErrorIs(t, err, ErrRoomFull, "rotation frees nothing")

	// A reader inside channel 1 when it is deleted gets ErrCompacted.
	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	_, err = rd.Next(ctx)
	require.NoError(t, err)

	require.NoError(t, r.DeleteChannel(ctx, 1))
	require.NoError(t, r.DeleteChannel(ctx, 1), "idempotent")
	n, err = r.Bytes(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	l, err := w.Append(ctx, entry)
	require.NoError(t, err)
	require.Equal(t, last+1, l)

	for {
		_, err = rd.Next(ctx)
		if err != nil {
			break
		}
	}
	require.ErrorIs(t, err, ErrCompacted)
	_, err = rd.Next(ctx)
	require.ErrorIs(t, err, ErrCompacted, "sticky")

	_, err = r.Tail(ctx, 1)
	require.ErrorIs(t, err, ErrCompacted)
	_, err = r.Tail(ctx, last)
	require.ErrorIs(t, err, ErrCompacted)
	rd2, err := r.Tail(ctx, last+1)
	require.NoError(t, err)
	got := readN(t, ctx, rd2, 1)
	require.Equal(t, last+1, got[0].Index)
	chs, err := r.Channels(ctx)
	require.NoError(t, err)
	require.Len(t, chs, 1)
	require.Equal(t, uint64(2), chs[0].Num)
}

func TestRotateUnderConcurrentAppends(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "rotate")
	w := newWriter(t, r, WriterConfig{MaxChannelBatches: 25, EagerInFlight: 8})
	ctx := testCtx(t, 90*time.Second)
	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)

	a := newAcked()
	var wg sync.WaitGroup
	var stop atomic.Bool
	for g := 0; g < 16; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				en := []byte(fmt.Sprintf("g%d-%d", g, i))
				last, err := w.Append(ctx, en)
				a.record(t, [][]byte{en}, last, err)
			}
		}()
	}
	var sealed []ChannelInfo
	for i := 0; i < 6; i++ {
		require.Eventually(t, func() bool { return w.LastCommitted() >= uint64(100*(i+1)) }, 30*time.Second, 10*time.Millisecond, "progress")
		ci, err := w.Rotate(ctx)
		require.NoError(t, err)
		sealed = append(sealed, ci)
	}
	stop.Store(true)
	wg.Wait()
	end := w.LastCommitted()
	log := readN(t, ctx, rd, int(end))
	checkLog(t, log, a)
	require.Len(t, a.ok, int(end))

	chs, err := r.Channels(ctx)
	require.NoError(t, err)
	require.Greater(t, len(chs), 6, "explicit and automatic rotations")
	for i := 1; i < len(chs); i++ {
		require.True(t, chs[i-1].Sealed)
		require.Equal(t, chs[i-1].LastIndex+1, chs[i].FirstIndex)
		require.LessOrEqual(t, chs[i-1].Batches, 25)
	}
	require.False(t, chs[len(chs)-1].Sealed)
	for _, s := range sealed {
		require.Equal(t, chs[s.Num-1], s)
	}
	t.Logf("%d channels, %d sealed with batches in flight", len(chs), w.stats.earlySeals.Load())
	require.Positive(t, w.stats.earlySeals.Load(), "seals sent while batches were in flight")
}

// TestWriterBatchFullOfOtherRequests: concurrent appends of entries so large
// that the next request often does not fit what is left of a batch. Found by
// the benchmark (4 KiB x 256 proposers): the writer panicked with "queued
// request in state 1". Every append must succeed with dense indexes.
func TestWriterBatchFullOfOtherRequests(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	for _, comp := range []Compression{CompressionNone, CompressionS2} {
		t.Run(comp.String(), func(t *testing.T) {
			r := openRoom(t, c, "batchfull-"+comp.String())
			w := newWriter(t, r, WriterConfig{MaxBatchBytes: 4 << 10, MaxInFlight: 1, EagerInFlight: 1, Compression: comp})
			ctx := testCtx(t, 60*time.Second)
			a := newAcked()
			var wg sync.WaitGroup
			for g := 0; g < 32; g++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := 0; i < 10; i++ {
						en := append([]byte(fmt.Sprintf("g%d-%d-", g, i)), make([]byte, 1500)...)
						last, err := w.Append(ctx, en)
						a.record(t, [][]byte{en}, last, err)
						require.NoError(t, err)
					}
				}()
			}
			wg.Wait()
			require.Len(t, a.ok, 320)
			checkLog(t, readAll(t, ctx, r, w.LastCommitted()), a)
		})
	}
}

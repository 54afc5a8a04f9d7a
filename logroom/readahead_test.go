package logroom

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// appendBatches appends entries from..to one at a time: one batch each.
func appendBatches(t *testing.T, ctx context.Context, w *Writer, from, to int) {
	t.Helper()
	for i := from; i <= to; i++ {
		_, err := w.Append(ctx, payload(i))
		require.NoError(t, err)
	}
}

// checkDense checks that es are entries first, first+1, … with the
// payloads appendBatches wrote.
func checkDense(t *testing.T, es []Entry, first int) {
	t.Helper()
	for i, e := range es {
		require.Equal(t, uint64(first+i), e.Index)
		require.Equal(t, payload(first+i), e.Data)
	}
}

// readUntilErr reads until Next fails and returns what it delivered and the
// error.
func readUntilErr(t *testing.T, ctx context.Context, rd *Reader) ([]Entry, error) {
	t.Helper()
	var out []Entry
	for {
		es, err := rd.Next(ctx)
		if err != nil {
			return out, err
		}
		out = append(out, es...)
	}
}

// TestReaderReadsAheadAcrossChannels: a reader behind reads ahead by
// listing (a window of reads in flight, each batch delivered as it comes),
// follows the seal into the next channel and reads ahead there too, and
// delivers every entry once, in order.
func TestReaderReadsAheadAcrossChannels(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "aheadswitch")
	ctx := testCtx(t, 60*time.Second)
	w := newWriter(t, r, WriterConfig{})
	appendBatches(t, ctx, w, 1, 60)
	_, err := w.Rotate(ctx)
	require.NoError(t, err)
	appendBatches(t, ctx, w, 61, 120)

	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	defer rd.Close()
	got := readN(t, ctx, rd, 60)
	checkDense(t, got, 1)
	require.Equal(t, uint64(1), rd.ch, "the seal is not passed before entry 61 is asked for")
	inFirst, listsFirst := rd.prefetched, rd.listings
	require.GreaterOrEqual(t, listsFirst, 1, "a reader behind lists the channel")
	require.GreaterOrEqual(t, inFirst, 60-listAfter-1, "the batches past the listing were read ahead")

	got = readN(t, ctx, rd, 60)
	checkDense(t, got, 61)
	require.Equal(t, uint64(2), rd.ch)
	require.Greater(t, rd.listings, listsFirst, "the next channel is listed too")
	require.GreaterOrEqual(t, rd.prefetched-inFirst, 60-listAfter-1, "and read ahead")

	// Caught up: the next entry comes through the watch.
	go func() {
		time.Sleep(50 * time.Millisecond)
		if _, err := w.Append(ctx, payload(121)); err != nil {
			t.Error(err)
		}
	}()
	checkDense(t, readN(t, ctx, rd, 1), 121)
}

// TestReaderReadAheadChannelDeleted: a channel compacted while a reader
// reads it ahead (names listed, reads in flight or done) ends the reader
// with ErrCompacted, never ErrCorrupt, after delivering only entries of
// the log, once and in order.
func TestReaderReadAheadChannelDeleted(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "aheaddeleted")
	ctx := testCtx(t, 60*time.Second)
	w := newWriter(t, r, WriterConfig{})
	appendBatches(t, ctx, w, 1, 60)
	_, err := w.Rotate(ctx)
	require.NoError(t, err)
	appendBatches(t, ctx, w, 61, 70)

	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	defer rd.Close()
	got := readN(t, ctx, rd, listAfter+2)
	require.GreaterOrEqual(t, rd.listings, 1)
	require.NotEmpty(t, rd.ahead, "listed names beyond the window are left to read")
	require.NoError(t, w.DeleteChannel(ctx, 1))

	rest, err := readUntilErr(t, ctx, rd)
	require.ErrorIs(t, err, ErrCompacted)
	require.NotErrorIs(t, err, ErrCorrupt)
	got = append(got, rest...)
	checkDense(t, got, 1)
	require.Less(t, len(got), 60, "the reads still to go found the channel gone")
}

// TestReaderReadAheadNameMissing: a listed batch that is gone when the
// reader reaches it, in a sealed channel nobody is deleting, is
// corruption named by its znode; everything before it is delivered,
// nothing after it.
func TestReaderReadAheadNameMissing(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "aheadmissing")
	ctx := testCtx(t, 60*time.Second)
	w := newWriter(t, r, WriterConfig{})
	appendBatches(t, ctx, w, 1, 60)
	_, err := w.Rotate(ctx)
	require.NoError(t, err)

	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	defer rd.Close()
	got := readN(t, ctx, rd, listAfter+2)
	require.Contains(t, rd.ahead, uint64(50), "b-50 is listed, not read yet")
	require.NoError(t, c.Conn().Delete(r.batchPath(1, 50), -1))

	rest, err := readUntilErr(t, ctx, rd)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), r.batchPath(1, 50))
	got = append(got, rest...)
	checkDense(t, got, 1)
	require.Len(t, got, 49, "everything before the hole, nothing after it")
	// Sticky.
	_, err = rd.Next(ctx)
	require.ErrorIs(t, err, ErrCorrupt)
}

// TestReaderReadAheadFromMidChannel: a reader that starts inside a channel
// (a standby's restart) reads ahead from its position, not from the
// channel's first batch.
func TestReaderReadAheadFromMidChannel(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "aheadmid")
	ctx := testCtx(t, 60*time.Second)
	w := newWriter(t, r, WriterConfig{})
	appendBatches(t, ctx, w, 1, 80)

	rd, err := r.Tail(ctx, 21)
	require.NoError(t, err)
	defer rd.Close()
	got := readN(t, ctx, rd, 60)
	checkDense(t, got, 21)
	require.GreaterOrEqual(t, rd.listings, 1)
	require.GreaterOrEqual(t, rd.prefetched, 60-listAfter-1)
	require.LessOrEqual(t, rd.prefetched, 60, "nothing before the start position is read ahead")
}

// TestReaderListsAgainAfterFruitlessListing: a listing that found nothing
// past the next batch does not keep a reader from listing again later in
// the same run of batches found without waiting (it did: such a reader
// read one batch per round trip for as long as it stayed behind).
func TestReaderListsAgainAfterFruitlessListing(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "aheadrelist")
	ctx := testCtx(t, 60*time.Second)
	w := newWriter(t, r, WriterConfig{})
	appendBatches(t, ctx, w, 1, listAfter+1)

	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	defer rd.Close()
	checkDense(t, readN(t, ctx, rd, listAfter+1), 1)
	require.Equal(t, 1, rd.listings, "listed after %d batches in a row", listAfter)
	require.Zero(t, rd.prefetched, "nothing past the next batch to read ahead")

	// The writer gets well ahead while the run goes on.
	const more = 40
	appendBatches(t, ctx, w, listAfter+2, listAfter+1+more)
	checkDense(t, readN(t, ctx, rd, more), listAfter+2)
	require.GreaterOrEqual(t, rd.listings, 2, "listed again listAfter batches after the fruitless listing")
	require.GreaterOrEqual(t, rd.prefetched, more-listAfter-1)
}

// TestReaderReadAheadChannelDeletedWindowEnd: the channel deleted while
// every name the last listing found is already being read, so that the
// reader lists again: the listing's NoNode is the channel gone, which
// reads as ErrCompacted (the reading protocol), never as a bare error.
func TestReaderReadAheadChannelDeletedWindowEnd(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "aheaddeletedend")
	ctx := testCtx(t, 60*time.Second)
	w := newWriter(t, r, WriterConfig{})
	appendBatches(t, ctx, w, 1, 30)
	_, err := w.Rotate(ctx)
	require.NoError(t, err)
	appendBatches(t, ctx, w, 31, 40)

	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	defer rd.Close()
	got := readN(t, ctx, rd, listAfter+1)
	require.NoError(t, w.DeleteChannel(ctx, 1))

	rest, err := readUntilErr(t, ctx, rd)
	require.ErrorIs(t, err, ErrCompacted)
	got = append(got, rest...)
	checkDense(t, got, 1)
}

package logroom

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Tests of the trust boundary: what a foreign ZooKeeper client (or an
// operator's mistake) can do to a room, and the named refusal each case
// must end in. Every forgery is made for real with a second client.

// deleteChannelRaw deletes a channel and its batches the way a foreign
// client would: no "deleting" mark, no seal check.
func deleteChannelRaw(t *testing.T, c *Client, r *Room, num uint64) {
	t.Helper()
	path := r.channelPath(num)
	names, _, err := c.Conn().Children(path)
	require.NoError(t, err)
	for _, n := range names {
		require.NoError(t, c.Conn().Delete(path+"/"+n, -1))
	}
	require.NoError(t, c.Conn().Delete(path, -1))
}

// appendN appends n entries one at a time and returns the last entries'
// batch identity as a reader delivers it.
func appendN(t *testing.T, ctx context.Context, w *Writer, from, n int) {
	t.Helper()
	for i := from; i < from+n; i++ {
		_, err := w.Append(ctx, payload(i))
		require.NoError(t, err)
	}
}

func lastBatch(t *testing.T, ctx context.Context, r *Room, n int) BatchID {
	t.Helper()
	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	defer rd.Close()
	es := readN(t, ctx, rd, n)
	return es[len(es)-1].Batch
}

// TestDeletedOpenChannel: the open channel deleted by a foreign client.
// Before this check, a new writer sealed nothing, re-created the channel at
// the old channel's first index and acknowledged new entries at indexes
// that readers had already applied from the deleted history.
func TestDeletedOpenChannel(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	foreign := dial(t, e.Addrs())
	ctx := testCtx(t, 60*time.Second)
	r := openRoom(t, c, "delopen")
	w := newWriter(t, r, WriterConfig{})
	appendN(t, ctx, w, 1, 3)
	_, err := w.Rotate(ctx)
	require.NoError(t, err)
	appendN(t, ctx, w, 4, 3) // channel 2 holds 4..6
	id := lastBatch(t, ctx, r, 6)
	require.Equal(t, uint64(6), id.First)
	require.NoError(t, r.MatchLog(ctx, id, 6))

	// A reader inside the open channel, caught up and waiting.
	rd, err := r.Tail(ctx, 7)
	require.NoError(t, err)
	defer rd.Close()
	fr := &Room{c: foreign, name: r.name, root: r.root, log: r.log}
	deleteChannelRaw(t, foreign, fr, 2)
	w.Close()

	// The waiting reader: corruption, not "compacted" (which would send a
	// replica to bootstrap from a checkpoint and carry on).
	nctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	_, err = rd.Next(nctx)
	require.ErrorIs(t, err, ErrCorrupt)
	require.NotErrorIs(t, err, ErrCompacted)
	require.Contains(t, err.Error(), r.channelPath(2))

	// A new writer refuses, naming the missing channel; nothing is written.
	epochBefore, err := r.Epoch(ctx)
	require.NoError(t, err)
	_, err = r.NewWriter(ctx, WriterConfig{})
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "open channel was deleted")
	require.Contains(t, err.Error(), r.channelPath(1))
	ok, _, err := c.Conn().Exists(r.channelPath(2))
	require.NoError(t, err)
	require.False(t, ok, "the deleted channel must not be re-created")
	epochAfter, err := r.Epoch(ctx)
	require.NoError(t, err)
	require.Equal(t, epochBefore, epochAfter, "a refused takeover takes no epoch")
	// So does a new reader, and log matching.
	_, err = r.Tail(ctx, 1)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorIs(t, r.MatchLog(ctx, id, 6), ErrCorrupt)

	// The operator "repairs" it by re-creating channel 2 open at the old
	// first index (what the old error message invited): the chain looks
	// whole again, but the channels znode's child version shows a channel
	// deleted and created again. Nobody may write a new history there.
	meta := encodeMeta(channelMeta{Version: channelFormatVersion, First: 4, Epoch: 1})
	_, err = foreign.Conn().Create(r.channelPath(2), meta, 0, c.ACL())
	require.NoError(t, err)
	_, err = r.NewWriter(ctx, WriterConfig{})
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "re-created")
	_, err = r.Tail(ctx, 1)
	require.ErrorIs(t, err, ErrCorrupt)
	require.ErrorIs(t, r.MatchLog(ctx, id, 6), ErrCorrupt)
	names, _, err := c.Conn().Children(r.channelPath(2))
	require.NoError(t, err)
	require.Empty(t, names, "nothing written into the re-created channel")
}

// TestEpochZnodeForged: the epoch znode set to the largest value, to 0,
// or to bytes that do not decode.
func TestEpochZnodeForged(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 60*time.Second)
	r := openRoom(t, c, "epochs")
	for i := 0; i < 3; i++ { // epochs 1, 2, 3
		w := newWriter(t, r, WriterConfig{})
		appendN(t, ctx, w, i, 1)
		w.Close()
	}
	setEpoch := func(data []byte) {
		_, err := c.Conn().Set(r.Path(epochNode), data, -1)
		require.NoError(t, err)
	}

	// Reset to 0: the next writer still goes past every recorded epoch.
	setEpoch(encodeMeta(epochMeta{Version: epochFormatVersion, Epoch: 0}))
	w := newWriter(t, r, WriterConfig{})
	require.Equal(t, uint64(4), w.Epoch(), "a new epoch exceeds the channels' epochs, not just the znode's")
	appendN(t, ctx, w, 10, 1)
	w.Close()
	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	es := readN(t, ctx, rd, 4)
	require.Equal(t, uint64(4), es[3].Epoch)

	// The largest epoch: refused, nothing written (no wrap to 0).
	setEpoch(encodeMeta(epochMeta{Version: epochFormatVersion, Epoch: math.MaxUint64}))
	_, st0, err := c.Conn().Get(r.Path(epochNode))
	require.NoError(t, err)
	_, err = r.NewWriter(ctx, WriterConfig{})
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "overflow")
	_, st1, err := c.Conn().Get(r.Path(epochNode))
	require.NoError(t, err)
	require.Equal(t, st0.Version, st1.Version, "the epoch znode was not written")

	// Bytes that do not decode: a named corruption, not a quiet retry.
	setEpoch([]byte("\xc1 not msgpack"))
	_, err = r.NewWriter(ctx, WriterConfig{})
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), r.Path(epochNode))
	_, err = r.Epoch(ctx)
	require.ErrorIs(t, err, ErrCorrupt)
}

// TestChannelChainForged: channels created out of sequence by a foreign
// client are refused by takeover, readers and log matching.
func TestChannelChainForged(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 60*time.Second)
	cases := []struct {
		name   string
		forge  func(r *Room)
		reason string
		path   func(r *Room) string
	}{
		{"gap in numbers", func(r *Room) {
			// Seal channel 2 at 4 and create channel 4 (no 3).
			sealRaw(t, c, r, 2, 4)
			createRaw(t, c, r, 4, channelMeta{Version: channelFormatVersion, First: 5, Epoch: 9})
		}, "channel 3 is missing", func(r *Room) string { return r.channelPath(4) }},
		{"first leaves a gap", func(r *Room) {
			sealRaw(t, c, r, 2, 4)
			createRaw(t, c, r, 3, channelMeta{Version: channelFormatVersion, First: 7, Epoch: 9})
		}, "first index 7, previous channel 2 sealed at 4", func(r *Room) string { return r.channelPath(3) }},
		{"first overlaps", func(r *Room) {
			sealRaw(t, c, r, 2, 4)
			createRaw(t, c, r, 3, channelMeta{Version: channelFormatVersion, First: 3, Epoch: 9})
		}, "first index 3, previous channel 2 sealed at 4", func(r *Room) string { return r.channelPath(3) }},
		{"open channel followed by another", func(r *Room) {
			createRaw(t, c, r, 3, channelMeta{Version: channelFormatVersion, First: 5, Epoch: 9})
		}, "open but channel 3 follows", func(r *Room) string { return r.channelPath(2) }},
		{"every channel deleted", func(r *Room) {
			fr := r
			deleteChannelRaw(t, c, fr, 2)
			deleteChannelRaw(t, c, fr, 1)
		}, "every channel was deleted", func(r *Room) string { return r.Path(channelsNode) }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := openRoom(t, c, "chain-"+tc.name)
			w := newWriter(t, r, WriterConfig{})
			appendN(t, ctx, w, 1, 2)
			_, err := w.Rotate(ctx)
			require.NoError(t, err)
			appendN(t, ctx, w, 3, 2) // channel 2 holds 3..4
			w.Close()
			epoch, err := r.Epoch(ctx)
			require.NoError(t, err)
			tc.forge(r)
			check := func(what string, err error) {
				t.Helper()
				require.ErrorIs(t, err, ErrCorrupt, what)
				require.Contains(t, err.Error(), tc.reason, what)
				require.Contains(t, err.Error(), tc.path(r), what)
			}
			_, err = r.NewWriter(ctx, WriterConfig{})
			check("takeover", err)
			_, err = r.Tail(ctx, 1)
			check("reader", err)
			check("log matching", r.MatchLog(ctx, BatchID{}, 4))
			after, err := r.Epoch(ctx)
			require.NoError(t, err)
			require.Equal(t, epoch, after, "a refused takeover takes no epoch")
		})
	}
}

func sealRaw(t *testing.T, c *Client, r *Room, num, last uint64) {
	t.Helper()
	m, ver, err := r.readChannel(context.Background(), num)
	require.NoError(t, err)
	m.Sealed, m.Last = true, last
	_, err = c.Conn().Set(r.channelPath(num), encodeMeta(m), ver)
	require.NoError(t, err)
}

func createRaw(t *testing.T, c *Client, r *Room, num uint64, m channelMeta) {
	t.Helper()
	_, err := c.Conn().Create(r.channelPath(num), encodeMeta(m), 0, c.ACL())
	require.NoError(t, err)
}

// TestMatchLog covers log matching case by case on one room.
func TestMatchLog(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 60*time.Second)
	r := openRoom(t, c, "match")
	w := newWriter(t, r, WriterConfig{})
	appendN(t, ctx, w, 1, 2)
	_, err := w.Append(ctx, payload(3), payload(4), payload(5)) // one batch 3..5
	require.NoError(t, err)
	_, err = w.Rotate(ctx)
	require.NoError(t, err)
	appendN(t, ctx, w, 6, 2) // channel 2: 6, 7
	id5 := lastBatch(t, ctx, r, 5)
	require.Equal(t, BatchID{Epoch: 1, First: 3, Count: 3, CRC: id5.CRC}, id5)
	id7 := lastBatch(t, ctx, r, 7)

	require.NoError(t, r.MatchLog(ctx, BatchID{}, 0), "nothing applied")
	require.NoError(t, r.MatchLog(ctx, id5, 5))
	require.NoError(t, r.MatchLog(ctx, id5, 4), "applied in the middle of the batch")
	require.NoError(t, r.MatchLog(ctx, id7, 7), "in the open channel")
	require.NoError(t, r.MatchLog(ctx, BatchID{}, 7), "no identity recorded: the log reaches 7")

	for _, tc := range []struct {
		name    string
		id      BatchID
		applied uint64
		want    string
	}{
		{"other crc", BatchID{Epoch: 1, First: 3, Count: 3, CRC: id5.CRC ^ 1}, 5, "the log holds batch"},
		{"other epoch", BatchID{Epoch: 7, First: 3, Count: 3, CRC: id5.CRC}, 5, "the log holds batch"},
		{"past the seal", BatchID{Epoch: 1, First: 5, Count: 2, CRC: 1}, 6, "sealed at index 5"},
		{"beyond the log end", BatchID{Epoch: 1, First: 8, Count: 2, CRC: 1}, 9, "the log ends at 7"},
		{"no identity, beyond the end", BatchID{}, 9, "the log ends at 7"},
		{"applied outside its batch", BatchID{Epoch: 1, First: 3, Count: 3, CRC: id5.CRC}, 6, "does not hold that index"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := r.MatchLog(ctx, tc.id, tc.applied)
			require.ErrorIs(t, err, ErrDiverged)
			require.Contains(t, err.Error(), tc.want)
			require.Contains(t, err.Error(), `"match"`)
		})
	}

	// Another valid batch at the same name (a foreign client replaced it).
	require.NoError(t, c.Conn().Delete(r.batchPath(2, 7), -1))
	other, err := EncodeBatch(1, 7, [][]byte{[]byte("not what was applied")})
	require.NoError(t, err)
	_, err = c.Conn().Create(r.batchPath(2, 7), other, 0, c.ACL())
	require.NoError(t, err)
	err = r.MatchLog(ctx, id7, 7)
	require.ErrorIs(t, err, ErrDiverged)
	require.Contains(t, err.Error(), r.batchPath(2, 7))
	require.Contains(t, err.Error(), id7.String())

	// A batch missing from a sealed channel that is not being deleted.
	require.NoError(t, c.Conn().Delete(r.batchPath(1, 3), -1))
	err = r.MatchLog(ctx, id5, 5)
	require.ErrorIs(t, err, ErrDiverged)
	require.Contains(t, err.Error(), r.batchPath(1, 3))
	// Compaction: channel 1 deleted properly; what it held cannot be
	// checked any more, but the open channel still shows the batch deleted
	// (and re-created) above: the room is refused as tampered with.
	require.NoError(t, r.DeleteChannel(ctx, 1))
	err = r.MatchLog(ctx, id5, 5)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "1 batch znode(s) deleted from the open channel")
	require.ErrorIs(t, r.MatchLog(ctx, id7, 7), ErrDiverged, "the replaced batch is still in the log")
	w.Close()
}

// TestTakeoverBelowApplied: a writer whose owner applied more than the log
// holds refuses before sealing or opening anything (and the check is not
// fooled by orphans past the chain's end).
func TestTakeoverBelowApplied(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 60*time.Second)
	r := openRoom(t, c, "below")
	w := newWriter(t, r, WriterConfig{})
	appendN(t, ctx, w, 1, 3)
	w.Close()
	before, err := r.Channels(ctx)
	require.NoError(t, err)
	_, err = r.NewWriter(ctx, WriterConfig{Applied: 4, Owner: "m1"})
	require.ErrorIs(t, err, ErrDiverged)
	require.Contains(t, err.Error(), "the log ends at index 3")
	require.Contains(t, err.Error(), `"m1"`)
	after, err := r.Channels(ctx)
	require.NoError(t, err)
	require.Equal(t, before, after, "nothing sealed or opened")
	// Applied == the end is fine.
	w2, err := r.NewWriter(ctx, WriterConfig{Applied: 3})
	require.NoError(t, err)
	require.Equal(t, uint64(4), w2.StartIndex())
	w2.Close()
}

// TestDeletedAcknowledgedBatch: a foreign client deletes an acknowledged
// batch of the open channel (and, in a second room, of a sealed channel
// that is not being deleted). Nothing reads those batches again, so the
// only evidence is the channel znode's child history: ZooKeeper counts
// every create and delete of a child (cversion), and only DeleteChannel,
// after marking the channel, ever deletes a batch. CheckChain (and so
// MatchLog, which a running replica calls periodically) refuses the room by
// name; a channel being deleted by DeleteChannel still passes.
func TestDeletedAcknowledgedBatch(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	foreign := dial(t, e.Addrs())
	ctx := testCtx(t, 60*time.Second)

	t.Run("open", func(t *testing.T) {
		r := openRoom(t, c, "delbatch-open")
		w := newWriter(t, r, WriterConfig{})
		appendN(t, ctx, w, 1, 5)
		id := lastBatch(t, ctx, r, 5)
		require.NoError(t, r.MatchLog(ctx, id, 5))
		require.NoError(t, foreign.Conn().Delete(r.batchPath(1, 2), -1))
		_, err := r.CheckChain(ctx)
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "channel 1")
		require.Contains(t, err.Error(), "deleted")
		err = r.MatchLog(ctx, id, 5)
		require.ErrorIs(t, err, ErrCorrupt)
		t.Log(err)
	})
	t.Run("sealed", func(t *testing.T) {
		r := openRoom(t, c, "delbatch-sealed")
		w := newWriter(t, r, WriterConfig{})
		appendN(t, ctx, w, 1, 3)
		_, err := w.Rotate(ctx)
		require.NoError(t, err)
		appendN(t, ctx, w, 4, 2)
		_, err = r.CheckChain(ctx)
		require.NoError(t, err)
		require.NoError(t, foreign.Conn().Delete(r.batchPath(1, 3), -1))
		_, err = r.CheckChain(ctx)
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "channel 1")
	})
	t.Run("forged deletion mark on the open channel", func(t *testing.T) {
		// The mark would exempt the channel's deletions from the check;
		// DeleteChannel never marks the open channel, so it is refused.
		r := openRoom(t, c, "delbatch-forgedmark")
		w := newWriter(t, r, WriterConfig{})
		appendN(t, ctx, w, 1, 3)
		data, stat, err := foreign.Conn().Get(r.channelPath(1))
		require.NoError(t, err)
		m, err := decodeChannelMeta(data)
		require.NoError(t, err)
		m.Deleting = true
		_, err = foreign.Conn().Set(r.channelPath(1), encodeMeta(m), stat.Version)
		require.NoError(t, err)
		require.NoError(t, foreign.Conn().Delete(r.batchPath(1, 2), -1))
		_, err = r.CheckChain(ctx)
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "open channel (first index 1) is marked for deletion")
	})
	t.Run("compaction passes", func(t *testing.T) {
		r := openRoom(t, c, "delbatch-compact")
		w := newWriter(t, r, WriterConfig{})
		appendN(t, ctx, w, 1, 3)
		_, err := w.Rotate(ctx)
		require.NoError(t, err)
		appendN(t, ctx, w, 4, 2)
		// A compaction that stopped half-way (marked, one batch gone).
		data, stat, err := c.Conn().Get(r.channelPath(1))
		require.NoError(t, err)
		m, err := decodeChannelMeta(data)
		require.NoError(t, err)
		m.Deleting = true
		_, err = c.Conn().Set(r.channelPath(1), encodeMeta(m), stat.Version)
		require.NoError(t, err)
		require.NoError(t, c.Conn().Delete(r.batchPath(1, 1), -1))
		_, err = r.CheckChain(ctx)
		require.NoError(t, err)
		require.NoError(t, r.DeleteChannel(ctx, 1))
		_, err = r.CheckChain(ctx)
		require.NoError(t, err)
	})
}

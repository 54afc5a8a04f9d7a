package logroom

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/roomlog/roomlog/version"
)

// TestRoomVersionRotation: a zstd writer stores S2 at room version 1,
// zstd after RotateToVersion(2) and S2 again after RotateToVersion(1);
// each change is one rotation recorded in the room meta (record version 2
// at room version 2, 1 at 1) and in the new channel's meta; readers read
// the whole mixed log; a writer taking over a room at version 2 writes
// zstd at once.
func TestRoomVersionRotation(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 60*time.Second)
	r := openRoom(t, c, "rv-rotate")
	a := newAcked()
	w := newWriter(t, r, WriterConfig{Compression: CompressionZstd, MaxBatchBytes: 8 << 10})
	require.Equal(t, 1, w.RoomVersion())
	entries := dfsEntries("rv", 900)
	appendPart := func(w *Writer, es [][]byte) {
		last, err := w.Append(ctx, es...)
		a.record(t, es, last, err)
		require.NoError(t, err)
	}
	appendPart(w, entries[:300])

	info, err := w.RotateToVersion(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, 2, w.RoomVersion())
	rv, err := r.RoomVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, RoomVersion{Version: 2, Since: info.LastIndex + 1, Epoch: w.Epoch()}, rv)
	raw, _, err := c.Conn().Get(r.root)
	require.NoError(t, err)
	var meta map[string]any
	require.NoError(t, msgpack.Unmarshal(raw, &meta))
	require.EqualValues(t, 2, meta["v"], "room version 2 is room meta record version 2, which v0.1.0 refuses to open")
	appendPart(w, entries[300:600])

	info2, err := w.RotateToVersion(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, 1, w.RoomVersion())
	raw, _, err = c.Conn().Get(r.root)
	require.NoError(t, err)
	meta = nil
	require.NoError(t, msgpack.Unmarshal(raw, &meta))
	require.EqualValues(t, 2, meta["v"], "lowering: the meta stays record version 2 (v0.1.0 stays out) while channels of room version 2 remain")
	rv, err = r.RoomVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, RoomVersion{Version: 1, Since: info2.LastIndex + 1, Epoch: w.Epoch(), Lowering: true}, rv)
	appendPart(w, entries[600:])

	// The caller (package replica) saw the channels of room version 2
	// deleted: RotateToVersion(1) ends the downgrade with record version 1.
	_, err = w.RotateToVersion(ctx, 1)
	require.NoError(t, err)
	raw, _, err = c.Conn().Get(r.root)
	require.NoError(t, err)
	meta = nil
	require.NoError(t, msgpack.Unmarshal(raw, &meta))
	require.EqualValues(t, 1, meta["v"], "the downgrade ended: record version 1, which v0.1.0 opens")
	require.NotContains(t, meta, "room")
	rv, err = r.RoomVersion(ctx)
	require.NoError(t, err)
	require.Equal(t, RoomVersion{Version: 1, Since: info2.LastIndex + 1, Epoch: w.Epoch()}, rv, "since stays where the version changed")

	log := readAll(t, ctx, r, w.LastCommitted())
	checkLog(t, log, a)

	// Every batch's codec is the one its channel's room version allows.
	infos, err := r.Channels(ctx)
	require.NoError(t, err)
	perChannel := map[uint64]map[string]int{}
	s2After := 0
	for _, sb := range storedBatches(t, ctx, c, r) {
		num, _ := ParseChannelName(sb.path[len(r.Path(channelsNode))+1 : len(r.Path(channelsNode))+1+len(channelName(1))])
		if perChannel[num] == nil {
			perChannel[num] = map[string]int{}
		}
		perChannel[num][sb.b.Codec.String()]++
	}
	for _, ci := range infos {
		m, _, err := r.readChannel(ctx, ci.Num)
		require.NoError(t, err)
		switch {
		case ci.LastIndex <= info.LastIndex && ci.Sealed:
			require.Equal(t, 1, m.roomVersion())
			require.Zero(t, perChannel[ci.Num]["zstd"], "channel %d", ci.Num)
		case ci.FirstIndex > info.LastIndex && ci.LastIndex <= info2.LastIndex && ci.Sealed:
			require.Equal(t, 2, m.roomVersion())
			require.Positive(t, perChannel[ci.Num]["zstd"], "channel %d at room version 2 holds zstd batches", ci.Num)
			require.Zero(t, perChannel[ci.Num]["s2"], "channel %d", ci.Num)
		case ci.FirstIndex > info2.LastIndex:
			require.Equal(t, 1, m.roomVersion())
			require.Zero(t, perChannel[ci.Num]["zstd"], "channel %d", ci.Num)
			s2After += perChannel[ci.Num]["s2"]
		}
	}
	require.Positive(t, s2After, "back at room version 1 the writer stores S2")
	t.Logf("codecs per channel: %v", perChannel)

	// Back to 2, then a new writer takes over: it reads the room version
	// under its fence and writes zstd at once.
	_, err = w.RotateToVersion(ctx, 2)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	w2 := newWriter(t, r, WriterConfig{Compression: CompressionZstd})
	require.Equal(t, 2, w2.RoomVersion())
	last, err := w2.Append(ctx, entries[:200]...)
	require.NoError(t, err)
	bs := storedBatches(t, ctx, c, r)
	require.Equal(t, CodecZstd, bs[len(bs)-1].b.Codec)
	require.Equal(t, last, bs[len(bs)-1].b.Last())

	// A writer capped at room version 1 refuses the room by name.
	require.NoError(t, w2.Close())
	_, err = r.NewWriter(ctx, WriterConfig{MaxRoomVersion: 1})
	require.ErrorIs(t, err, ErrUnsupportedVersion)
	require.Contains(t, err.Error(), "room version 2")
}

// TestRoomVersionRefusals: a room meta or channel meta from a newer
// binary is refused with ErrUnsupportedVersion naming the znode, not as
// corruption; a zstd batch in a channel of room version 1 is refused as
// corrupt, naming the batch znode.
func TestRoomVersionRefusals(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 60*time.Second)

	t.Run("room meta", func(t *testing.T) {
		for _, m := range []roomMeta{
			{Version: 2, Room: version.RoomMax + 1},
			{Version: 3, Room: 2},
		} {
			r := openRoom(t, c, "rv-newer")
			_, err := c.Conn().Set(r.root, encodeMeta(m), -1)
			require.NoError(t, err)
			_, err = OpenRoom(ctx, c, "rv-newer", RoomOptions{Base: testBase(t)})
			require.ErrorIs(t, err, ErrUnsupportedVersion, "%+v", m)
			require.NotErrorIs(t, err, ErrCorrupt)
			require.Contains(t, err.Error(), r.root)
			_, err = ReadRoomInfo(ctx, c, testBase(t), "rv-newer")
			require.ErrorIs(t, err, ErrUnsupportedVersion)
			_, err = r.NewWriter(ctx, WriterConfig{})
			require.ErrorIs(t, err, ErrUnsupportedVersion)
			_, err = c.Conn().Set(r.root, encodeMeta(roomMeta{Version: 1}), -1)
			require.NoError(t, err)
		}
		// Record version 2 without a room version is nobody's format.
		r := openRoom(t, c, "rv-bad")
		_, err := c.Conn().Set(r.root, encodeMeta(roomMeta{Version: 2}), -1)
		require.NoError(t, err)
		_, err = OpenRoom(ctx, c, "rv-bad", RoomOptions{Base: testBase(t)})
		require.ErrorIs(t, err, ErrCorrupt)
	})

	t.Run("channel meta", func(t *testing.T) {
		r := openRoom(t, c, "rv-channel")
		w := newWriter(t, r, WriterConfig{})
		_, err := w.Append(ctx, []byte("one"))
		require.NoError(t, err)
		require.NoError(t, w.Close())
		infos, err := r.Channels(ctx)
		require.NoError(t, err)
		p := r.channelPath(infos[len(infos)-1].Num)
		m, ver, err := r.readChannel(ctx, infos[len(infos)-1].Num)
		require.NoError(t, err)
		m.Room = version.RoomMax + 1
		_, err = c.Conn().Set(p, encodeMeta(m), ver)
		require.NoError(t, err)
		rd, err := r.Tail(ctx, 1)
		if err == nil {
			defer rd.Close()
			_, err = rd.Next(ctx)
		}
		require.ErrorIs(t, err, ErrUnsupportedVersion)
		require.Contains(t, err.Error(), p)
	})

	t.Run("forged room meta", func(t *testing.T) {
		r := openRoom(t, c, "rv-forged-meta")
		w := newWriter(t, r, WriterConfig{})
		_, err := w.Append(ctx, []byte("one"))
		require.NoError(t, err)
		// Another client raises the room meta behind the writer's back:
		// the writer's next change of it (its compare-and-set) fails,
		// named, as corruption.
		forged := encodeMeta(roomMeta{Version: 2, Room: 2, Created: 1})
		_, err = c.Conn().Set(r.root, forged, -1)
		require.NoError(t, err)
		_, err = w.RotateToVersion(ctx, 2)
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), r.root)
		require.Contains(t, err.Error(), "changed by another client")
		// The next writer does not adopt it: the newest channel was
		// opened at room version 1.
		_, err = r.NewWriter(ctx, WriterConfig{})
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "records room version 2")
	})

	t.Run("capped reader", func(t *testing.T) {
		r := openRoom(t, c, "rv-capped")
		w := newWriter(t, r, WriterConfig{})
		_, err := w.Append(ctx, []byte("one"))
		require.NoError(t, err)
		_, err = w.RotateToVersion(ctx, 2)
		require.NoError(t, err)
		_, err = w.Append(ctx, []byte("two"))
		require.NoError(t, err)
		capped, err := OpenRoom(ctx, c, "rv-capped", RoomOptions{Base: testBase(t), MaxRoomVersion: 1})
		require.NoError(t, err)
		rd, err := capped.Tail(ctx, 1)
		require.NoError(t, err)
		defer rd.Close()
		es, err := rd.Next(ctx)
		require.NoError(t, err)
		require.Len(t, es, 1)
		require.Equal(t, "one", string(es[0].Data))
		_, err = rd.Next(ctx)
		require.ErrorIs(t, err, ErrUnsupportedVersion, "a reader capped at 1 refuses the channel of room version 2")
		require.Contains(t, err.Error(), "capped at 1")
		_, err = capped.Tail(ctx, 2)
		require.ErrorIs(t, err, ErrUnsupportedVersion)
	})

	t.Run("newer record versions", func(t *testing.T) {
		r := openRoom(t, c, "rv-records")
		w := newWriter(t, r, WriterConfig{})
		_, err := w.Append(ctx, []byte("one"))
		require.NoError(t, err)
		require.NoError(t, w.Close())
		// A channel meta of record version 2 (with a field we do not know).
		infos, err := r.Channels(ctx)
		require.NoError(t, err)
		num := infos[len(infos)-1].Num
		var cm map[string]any
		raw, _, err := c.Conn().Get(r.channelPath(num))
		require.NoError(t, err)
		require.NoError(t, msgpack.Unmarshal(raw, &cm))
		cm["v"], cm["extents"] = 2, []int{1, 2}
		b, err := msgpack.Marshal(cm)
		require.NoError(t, err)
		_, err = c.Conn().Set(r.channelPath(num), b, -1)
		require.NoError(t, err)
		_, err = ReadChannel(ctx, c, testBase(t), "rv-records", num)
		require.ErrorIs(t, err, ErrUnsupportedVersion)
		require.Contains(t, err.Error(), r.channelPath(num))
		// An epoch znode of record version 2.
		_, err = c.Conn().Set(r.Path(epochNode), encodeMeta(epochMeta{Version: 2, Epoch: 9}), -1)
		require.NoError(t, err)
		_, err = ReadEpoch(ctx, c, testBase(t), "rv-records")
		require.ErrorIs(t, err, ErrUnsupportedVersion)
		_, err = r.NewWriter(ctx, WriterConfig{})
		require.ErrorIs(t, err, ErrUnsupportedVersion)
		require.Contains(t, err.Error(), r.Path(epochNode))
		// Unknown fields in a record of a known version are ignored (what
		// v0.1.0 does with the fields room version 2 adds).
		cm["v"] = 1
		b, err = msgpack.Marshal(cm)
		require.NoError(t, err)
		_, err = c.Conn().Set(r.channelPath(num), b, -1)
		require.NoError(t, err)
		ch, err := ReadChannel(ctx, c, testBase(t), "rv-records", num)
		require.NoError(t, err)
		require.Equal(t, uint64(1), ch.FirstIndex)
	})

	t.Run("zstd batch at room version 1", func(t *testing.T) {
		r := openRoom(t, c, "rv-forged")
		w := newWriter(t, r, WriterConfig{})
		_, err := w.Append(ctx, []byte("one"))
		require.NoError(t, err)
		ep := w.Epoch()
		require.NoError(t, w.Close())
		infos, err := r.Channels(ctx)
		require.NoError(t, err)
		num := infos[len(infos)-1].Num
		data, err := encodeBatchCodec(ep, 2, [][]byte{[]byte("forged zstd entry")}, CodecZstd)
		require.NoError(t, err)
		path := r.batchPath(num, 2)
		_, err = c.Conn().Create(path, data, 0, c.ACL())
		require.NoError(t, err)
		rd, err := r.Tail(ctx, 1)
		require.NoError(t, err)
		defer rd.Close()
		_, err = rd.Next(ctx)
		require.NoError(t, err)
		_, err = rd.Next(ctx)
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), path)
		require.Contains(t, err.Error(), "needs room version 2")
	})
}

// TestDecodeBatchNewerFormats: a checksum-valid batch of an unknown codec,
// and a batch of an unknown format version, are ErrUnsupportedVersion (a
// newer writer's), while the zstd codec round-trips and a zstd frame that
// does not announce its raw length is corrupt.
func TestDecodeBatchNewerFormats(t *testing.T) {
	entries := [][]byte{[]byte("alpha"), []byte("beta")}
	var raw []byte
	for _, e := range entries {
		raw = binary.AppendUvarint(raw, uint64(len(e)))
		raw = append(raw, e...)
	}
	data, _ := encodeBatchV2(3, 7, 2, Codec(9), len(raw), raw)
	_, err := DecodeBatch(data)
	require.ErrorIs(t, err, ErrUnsupportedVersion)
	require.NotErrorIs(t, err, ErrCorrupt)

	v3, err := msgpack.Marshal([]any{3, 3, 7, 2, 0, raw})
	require.NoError(t, err)
	_, err = DecodeBatch(v3)
	require.ErrorIs(t, err, ErrUnsupportedVersion)

	z, err := encodeBatchCodec(3, 7, entries, CodecZstd)
	require.NoError(t, err)
	b, err := DecodeBatch(z)
	require.NoError(t, err)
	require.Equal(t, CodecZstd, b.Codec)
	require.Equal(t, entries, b.Entries)

	// A frame without a content size: refused before inflating.
	var buf bytes.Buffer
	zw, err := zstd.NewWriter(&buf)
	require.NoError(t, err)
	_, err = zw.Write(raw)
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	noFCS := buf.Bytes()
	data, _ = encodeBatchV2(3, 7, 2, CodecZstd, len(raw), noFCS)
	_, err = DecodeBatch(data)
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "zstd payload announces")

	// A frame announcing its size but inflating to more: refused.
	big := append(append([]byte{}, raw...), raw...)
	zb := zstdEncode(nil, big)
	data, _ = encodeBatchV2(3, 7, 2, CodecZstd, len(raw), zb)
	_, err = DecodeBatch(data)
	require.ErrorIs(t, err, ErrCorrupt)
}

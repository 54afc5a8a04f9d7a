package logroom

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

// TestReadViews: the read-only views report what the room's own API
// reports (Channels, Epoch, Path), through a writer's takeover, a rotation,
// a foreign child among the channels, a deleting mark and a deletion, and
// they never create anything.
func TestReadViews(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	conn := c.Conn()
	base := testBase(t)
	ctx := testCtx(t, 60*time.Second)
	before := time.Now().UnixMilli()
	r := openRoom(t, c, "v")

	info, err := ReadRoomInfo(ctx, c, base, "v")
	require.NoError(t, err)
	_, st, err := conn.Get(r.Path())
	require.NoError(t, err)
	require.Equal(t, RoomInfo{Name: "v", Path: r.Path(), Created: info.Created, Czxid: st.Czxid, RoomVersion: RoomVersion{Version: 1}, EpochZnode: EpochZnode}, info)
	require.GreaterOrEqual(t, info.Created, before-1000)
	require.LessOrEqual(t, info.Created, time.Now().UnixMilli()+1000)
	require.Equal(t, RoomPath(base, "v"), r.Path())

	ep, err := ReadEpoch(ctx, c, base, "v")
	require.NoError(t, err)
	require.Equal(t, EpochInfo{Path: RoomPath(base, "v", EpochZnode)}, ep, "no writer yet")
	l, err := ListChannels(ctx, c, base, "v")
	require.NoError(t, err)
	require.Empty(t, l.Nums)
	require.Empty(t, l.Foreign)
	require.Zero(t, l.Cversion)

	w := newWriter(t, r, WriterConfig{Owner: "w1"})
	for i := 0; i < 5; i++ {
		_, err := w.Append(ctx, payload(i))
		require.NoError(t, err)
	}
	_, err = w.Rotate(ctx)
	require.NoError(t, err)
	_, err = w.Append(ctx, payload(5))
	require.NoError(t, err)
	require.NoError(t, w.Close())
	w2 := newWriter(t, r, WriterConfig{Owner: "w2"}) // seals channel 2, opens 3
	_, err = w2.Append(ctx, payload(6), payload(7))
	require.NoError(t, err)
	require.NoError(t, w2.Close())

	ep, err = ReadEpoch(ctx, c, base, "v")
	require.NoError(t, err)
	_, st, err = conn.Get(r.Path(EpochZnode))
	require.NoError(t, err)
	epoch, err := r.Epoch(ctx)
	require.NoError(t, err)
	require.Equal(t, EpochInfo{Epoch: epoch, Owner: "w2", Version: st.Version, Path: RoomPath(base, "v", EpochZnode)}, ep)
	require.Equal(t, uint64(2), ep.Epoch)

	create := func(p string, data []byte) {
		_, err := conn.Create(p, data, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err, p)
	}
	create(r.Path(ChannelsZnode, "lock"), nil)
	l, err = ListChannels(ctx, c, base, "v")
	require.NoError(t, err)
	require.Equal(t, []uint64{1, 2, 3}, l.Nums)
	require.Equal(t, []string{"lock"}, l.Foreign)
	require.Equal(t, int32(3+(1-1)+1), l.Cversion, "last + (first-1) + foreign (doc.go, the channel chain)")

	infos, err := r.Channels(ctx)
	require.NoError(t, err)
	require.Len(t, infos, 3)
	for _, ci := range infos {
		v, err := ReadChannel(ctx, c, base, "v", ci.Num)
		require.NoError(t, err)
		require.Equal(t, ChannelView{ChannelInfo: ci}, v, "channel %d", ci.Num)
		names, _, err := conn.Children(r.Path(ChannelsZnode, ChannelName(ci.Num)))
		require.NoError(t, err)
		for _, n := range names {
			first, ok := ParseBatchName(n)
			require.True(t, ok, n)
			require.Equal(t, n, BatchName(first))
		}
		num, ok := ParseChannelName(ChannelName(ci.Num))
		require.True(t, ok)
		require.Equal(t, ci.Num, num)
	}
	require.True(t, infos[0].Sealed)
	require.Equal(t, uint64(5), infos[0].LastIndex)
	require.False(t, infos[2].Sealed)

	// A deleting mark (an interrupted DeleteChannel) shows; a deleted
	// channel is ErrNoRoom.
	data, st, err := conn.Get(r.Path(ChannelsZnode, ChannelName(1)))
	require.NoError(t, err)
	m, err := decodeChannelMeta(data)
	require.NoError(t, err)
	m.Deleting = true
	_, err = conn.Set(r.Path(ChannelsZnode, ChannelName(1)), encodeMeta(m), st.Version)
	require.NoError(t, err)
	v, err := ReadChannel(ctx, c, base, "v", 1)
	require.NoError(t, err)
	want := infos[0]
	want.Deleting = true
	require.Equal(t, ChannelView{ChannelInfo: want}, v)
	require.NoError(t, r.DeleteChannel(ctx, 1))
	_, err = ReadChannel(ctx, c, base, "v", 1)
	require.ErrorIs(t, err, ErrNoRoom)

	// Missing rooms and bases: ErrNoRoom, nothing created.
	for _, b := range []string{base, base + "_nobase"} {
		_, err = ReadRoomInfo(ctx, c, b, "nosuch")
		require.ErrorIs(t, err, ErrNoRoom)
		_, err = ReadEpoch(ctx, c, b, "nosuch")
		require.ErrorIs(t, err, ErrNoRoom)
		_, err = ListChannels(ctx, c, b, "nosuch")
		require.ErrorIs(t, err, ErrNoRoom)
		_, err = ReadChannel(ctx, c, b, "nosuch", 1)
		require.ErrorIs(t, err, ErrNoRoom)
	}
	ok, _, err := conn.Exists(base + "_nobase")
	require.NoError(t, err)
	require.False(t, ok, "a view created the base")
	ok, _, err = conn.Exists(base + "/nosuch")
	require.NoError(t, err)
	require.False(t, ok, "a view created the room")

	// Bad names are refused before any read.
	_, err = ReadRoomInfo(ctx, c, base, "a/b")
	require.ErrorIs(t, err, ErrBadName)
	_, err = ReadChannel(ctx, c, "relative", "v", 1)
	require.ErrorIs(t, err, ErrBadName)
}

// TestCorruptZnodeView: room, epoch and channel znodes a foreign client
// rewrote are refused by the views with a *CorruptZnodeError naming room,
// channel and znode, as the library's own reads refuse them.
func TestCorruptZnodeView(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	conn := c.Conn()
	base := testBase(t)
	ctx := testCtx(t, 60*time.Second)
	pack := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		require.NoError(t, err)
		return b
	}
	bad := map[string][]byte{
		"garbage":      []byte("garbage"),
		"empty":        {},
		"version 0":    pack(map[string]any{"v": 0, "first": 1, "epoch": 1, "created": 1}),
		"huge string":  {0x81, 0xa5, 'o', 'w', 'n', 'e', 'r', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'},
		"deep nesting": append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 64)...),
		"trailing":     append(pack(map[string]any{"v": 1, "first": 1}), 0xc0),
	}
	i := 0
	for what, data := range bad {
		i++
		name := "c" + string(rune('a'+i))
		t.Run(what, func(t *testing.T) {
			r, err := OpenRoom(ctx, c, name, RoomOptions{Base: base})
			require.NoError(t, err)
			w := newWriter(t, r, WriterConfig{})
			_, err = w.Append(ctx, payload(1))
			require.NoError(t, err)
			require.NoError(t, w.Close())
			for _, z := range []struct {
				path    string
				channel uint64
				read    func() error
				format  string
			}{
				{r.Path(), 0, func() error { _, err := ReadRoomInfo(ctx, c, base, name); return err }, "room meta: "},
				{r.Path(EpochZnode), 0, func() error { _, err := ReadEpoch(ctx, c, base, name); return err }, "epoch znode: "},
				{r.Path(ChannelsZnode, ChannelName(1)), 1, func() error { _, err := ReadChannel(ctx, c, base, name, 1); return err }, "channel meta: "},
			} {
				orig, _, err := conn.Get(z.path)
				require.NoError(t, err)
				_, err = conn.Set(z.path, data, -1)
				require.NoError(t, err)
				err = z.read()
				require.ErrorIs(t, err, ErrCorrupt, z.path)
				var ce *CorruptZnodeError
				require.ErrorAs(t, err, &ce)
				require.Equal(t, name, ce.Room)
				require.Equal(t, z.channel, ce.Channel)
				require.Equal(t, z.path, ce.Znode)
				require.True(t, strings.HasPrefix(ce.Problem, z.format), ce.Problem)
				require.Contains(t, err.Error(), "znode "+z.path+": "+z.format)
				_, err = conn.Set(z.path, orig, -1)
				require.NoError(t, err)
			}
			// The library's own reads agree.
			_, err = conn.Set(r.Path(ChannelsZnode, ChannelName(1)), data, -1)
			require.NoError(t, err)
			_, err = r.Channels(ctx)
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}

	// Values the decoder refuses, and a sealed channel recording negative
	// bytes or batches (which no writer records).
	r := openRoom(t, c, "values")
	w := newWriter(t, r, WriterConfig{})
	_, err := w.Append(ctx, payload(1))
	require.NoError(t, err)
	_, err = w.Rotate(ctx)
	require.NoError(t, err)
	require.NoError(t, w.Close())
	p := r.Path(ChannelsZnode, ChannelName(1))
	data, _, err := conn.Get(p)
	require.NoError(t, err)
	good, err := decodeChannelMeta(data)
	require.NoError(t, err)
	require.True(t, good.Sealed)
	for _, tc := range []struct {
		edit    func(*channelMeta)
		problem string
	}{
		{func(m *channelMeta) { m.First = 0 }, "channel meta: first 0"},
		{func(m *channelMeta) { m.First, m.Last = 5, 2 }, "channel meta: first 5 last 2 sealed true"},
		{func(m *channelMeta) { m.Bytes = -1 }, "channel meta: sealed with -1 bytes, 1 batches"},
		{func(m *channelMeta) { m.Batches = -3 }, "channel meta: sealed with"},
	} {
		m := good
		tc.edit(&m)
		_, err = conn.Set(p, encodeMeta(m), -1)
		require.NoError(t, err)
		_, err = ReadChannel(ctx, c, base, "values", 1)
		var ce *CorruptZnodeError
		require.ErrorAs(t, err, &ce, "%+v", m)
		require.True(t, strings.HasPrefix(ce.Problem, tc.problem), ce.Problem)
	}
}

// TestMetaViewHostile: the channel view's decoding refuses inputs whose
// headers promise far more than they carry and deep nesting, allocating
// memory linear in the input only; the room and epoch views use the
// decoders fuzzed by fuzz_meta_test.go, checked here the same way.
func TestMetaViewHostile(t *testing.T) {
	inputs := map[string][]byte{
		"hugeString":  {0x81, 0xa2, 'i', 'd', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'},
		"hugeBin":     {0x81, 0xa1, 'x', 0xc6, 0xff, 0xff, 0xff, 0xff, 'x'},
		"hugeExt":     {0x81, 0xa1, 'x', 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01, 'x'},
		"hugeMap":     {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 0x01},
		"hugeArray":   {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01},
		"nestedMap":   {0x81, 0xa1, 'x', 0x81, 0xa1, 'y', 0x01},
		"trailing":    append(encodeMeta(channelMeta{Version: 1, First: 1}), 0xc0),
		"deepNesting": append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 1<<20)...),
	}
	decoders := map[string]func([]byte) error{
		"channel": func(b []byte) error { _, err := channelView(1, b); return err },
		"epoch":   func(b []byte) error { _, err := decodeEpochMeta(b); return err },
		"room":    func(b []byte) error { _, err := decodeRoomMeta(b); return err },
	}
	for iname, input := range inputs {
		for dname, decode := range decoders {
			t.Run(dname+"/"+iname, func(t *testing.T) {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				err := decode(input)
				runtime.ReadMemStats(&after)
				require.ErrorIs(t, err, ErrCorrupt)
				allocated := after.TotalAlloc - before.TotalAlloc
				require.Less(t, allocated, uint64(64<<10+16*len(input)), "%d input bytes allocated %d", len(input), allocated)
			})
		}
	}
	// What the library writes passes.
	v, err := channelView(4, encodeMeta(channelMeta{Version: 1, First: 7, Epoch: 2, Sealed: true, Last: 9, Bytes: 1 << 33, Batches: 3, Deleting: true}))
	require.NoError(t, err)
	require.Equal(t, ChannelView{ChannelInfo: ChannelInfo{Num: 4, FirstIndex: 7, LastIndex: 9, Epoch: 2, Sealed: true, Bytes: 1 << 33, Batches: 3, Deleting: true, RoomVersion: 1}}, v)
	v, err = channelView(5, encodeMeta(channelMeta{Version: 1, First: 10, Epoch: 3}))
	require.NoError(t, err)
	require.Equal(t, ChannelView{ChannelInfo: ChannelInfo{Num: 5, FirstIndex: 10, LastIndex: 9, Epoch: 3, RoomVersion: 1}}, v)
}

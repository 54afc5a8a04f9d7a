package zkx

import (
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func TestCheckMsgpack(t *testing.T) {
	enc := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		require.NoError(t, err)
		return b
	}
	ok := [][]byte{
		enc(map[string]any{"v": 1, "first": 3, "sealed": true, "bytes": -1}),
		enc(map[string]any{"a": []any{1.5, float32(2), nil, true, []byte("b"), int8(-3), -70000, uint64(1) << 63}}),
		enc("x"), enc(0), enc([]any{}), enc(map[string]any{}),
		{0xd4, 0x01, 0x02},       // fixext1
		{0xc7, 0x02, 0x01, 1, 2}, // ext8
	}
	for i, d := range ok {
		require.NoError(t, CheckMsgpack(d, 4), "case %d %x", i, d)
	}
	bad := [][]byte{
		{}, {0xc1}, {0x81, 0xa1}, {0xdb, 0xff, 0xff, 0xff, 0xff, 'x'}, {0xc9, 0xff, 0xff, 0xff, 0xff, 1, 'x'},
		{0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 1}, {0x91, 0x91, 0x91, 0x91, 0x91, 0x01}, {0x01, 0x02},
		{0xd8, 0x01}, {0xcf, 0, 0}, {0xdc, 0x00},
	}
	for i, d := range bad {
		require.Error(t, CheckMsgpack(d, 4), "case %d %x", i, d)
	}
	// Depth: four nested arrays pass at 4, fail at 3.
	deep := []byte{0x91, 0x91, 0x91, 0x91, 0x01}
	require.NoError(t, CheckMsgpack(deep, 4))
	require.Error(t, CheckMsgpack(deep, 3))
}

func TestDecode(t *testing.T) {
	type rec struct {
		V  int    `msgpack:"v"`
		ID string `msgpack:"id"`
	}
	b, err := msgpack.Marshal(rec{V: 1, ID: "a"})
	require.NoError(t, err)
	var r rec
	require.NoError(t, Decode(b, &r, 4))
	require.Equal(t, rec{V: 1, ID: "a"}, r)

	// Declares a 4 GiB map in a few bytes: refused before any allocation.
	require.Error(t, Decode([]byte{0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 1}, &r, 4))
	// Too deep for the bound.
	require.Error(t, Decode([]byte{0x81, 0xa1, 'v', 0x91, 0x91, 0x91, 0x91, 0x01}, &map[string]any{}, 4))
	// Passes the check but not the type.
	require.Error(t, Decode([]byte{0xa1, 'x'}, &r, 4))
}

package namespace

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func TestCommandRoundTrip(t *testing.T) {
	for _, c := range []Command{
		cmdMkdir("/a/b", true),
		cmdMkdir("/a", false),
		cmdCreate("/a/f", 3),
		cmdAddBlock("/a/f", 134217728),
		cmdAddBlock("/a/f", 0),
		cmdRename("/a/f", "/b/g"),
		cmdDelete("/a", true),
		cmdDelete("/a", false),
	} {
		t.Run(c.Op.String(), func(t *testing.T) {
			b, err := EncodeCommand(c)
			require.NoError(t, err)
			require.Equal(t, CommandVersion, b[0])
			got, err := DecodeCommand(b)
			require.NoError(t, err)
			require.Equal(t, c, got)
		})
	}
}

func TestCommandValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Command
		want error
	}{
		{"unknown op", Command{Op: 9, Path: "/a"}, ErrBadRequest},
		{"zero op", Command{Path: "/a"}, ErrBadRequest},
		{"bad path", cmdMkdir("a", false), ErrInvalidPath},
		{"bad dst", cmdRename("/a", "/b/"), ErrInvalidPath},
		{"empty dst", cmdRename("/a", ""), ErrInvalidPath},
		{"replication 0", cmdCreate("/f", 0), ErrBadRequest},
		{"replication negative", cmdCreate("/f", -1), ErrBadRequest},
		{"replication too high", cmdCreate("/f", MaxReplication+1), ErrBadRequest},
		{"negative size", cmdAddBlock("/f", -1), ErrBadRequest},
		{"size too big", cmdAddBlock("/f", MaxBlockSize+1), ErrBadRequest},
		{"stray dst", Command{Op: OpMkdir, Path: "/a", Dst: "/b"}, ErrBadRequest},
		{"stray parents", Command{Op: OpCreate, Path: "/a", Replication: 1, Parents: true}, ErrBadRequest},
		{"stray recursive", Command{Op: OpAddBlock, Path: "/a", Recursive: true}, ErrBadRequest},
		{"stray replication", Command{Op: OpDelete, Path: "/a", Replication: 3}, ErrBadRequest},
		{"stray size", Command{Op: OpRename, Path: "/a", Dst: "/b", Size: 1}, ErrBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.ErrorIs(t, tc.c.Validate(), tc.want)
			_, err := EncodeCommand(tc.c)
			require.ErrorIs(t, err, tc.want)
			_, err = DecodeCommand(encodeRaw(t, tc.c))
			require.ErrorIs(t, err, tc.want)
		})
	}
	require.NoError(t, cmdCreate("/f", MaxReplication).Validate())
	require.NoError(t, cmdAddBlock("/f", MaxBlockSize).Validate())
}

func TestDecodeCommandMalformed(t *testing.T) {
	good, err := EncodeCommand(cmdMkdir("/a", false))
	require.NoError(t, err)
	unknownField, err := msgpack.Marshal(map[string]any{"op": 1, "path": "/a", "mode": 0755})
	require.NoError(t, err)
	wrongType, err := msgpack.Marshal(map[string]any{"op": "mkdir", "path": "/a"})
	require.NoError(t, err)
	for name, entry := range map[string][]byte{
		"empty":          nil,
		"version only":   {CommandVersion},
		"future version": append([]byte{CommandVersion + 1}, good[1:]...),
		"version zero":   append([]byte{0}, good[1:]...),
		"truncated":      good[:len(good)-2],
		"trailing bytes": append(bytes.Clone(good), 0xc0),
		"garbage":        {CommandVersion, 0xff, 0x00, 0x13},
		"unknown field":  append([]byte{CommandVersion}, unknownField...),
		"wrong type":     append([]byte{CommandVersion}, wrongType...),
		"not a map":      {CommandVersion, 0x93, 1, 2, 3},
		"huge string":    {CommandVersion, 0x81, 0xa4, 'p', 'a', 't', 'h', 0xdb, 0xff, 0xff, 0xff, 0xff},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeCommand(entry)
			require.ErrorIs(t, err, ErrBadRequest)
		})
	}
}

func TestResponseRoundTrip(t *testing.T) {
	for _, r := range []Response{
		{},
		{BlockID: 42},
		{Code: CodeNotFound, Message: "create /a/f: parent directory /a does not exist"},
	} {
		b, err := EncodeResponse(r)
		require.NoError(t, err)
		got, err := DecodeResponse(b)
		require.NoError(t, err)
		require.Equal(t, r, got)
	}
	r := Response{Code: CodeNotEmpty, Message: "delete /a: directory not empty"}
	require.ErrorIs(t, r.Err(), ErrNotEmpty)
	require.EqualError(t, r.Err(), r.Message)
	code, ok := CodeOf(r.Err())
	require.True(t, ok)
	require.Equal(t, CodeNotEmpty, code)

	future := Response{Code: "some_new_code", Message: "x"}
	require.ErrorIs(t, future.Err(), ErrBadRequest)

	_, err := DecodeResponse(nil)
	require.Error(t, err)
	_, err = DecodeResponse([]byte{ResponseVersion, 0xff})
	require.Error(t, err)
}

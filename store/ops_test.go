package store

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
)

func TestOpsRoundTrip(t *testing.T) {
	ops := []Op{
		{Kind: OpSet, Key: []byte("a"), Value: []byte("1")},
		{Kind: OpSet, Key: []byte("empty"), Value: nil},
		{Kind: OpDelete, Key: []byte("b")},
		{Kind: OpDeleteRange, Key: []byte("c"), End: []byte("d")},
		{Kind: OpSet, Key: bytes.Repeat([]byte{0xff}, 300), Value: bytes.Repeat([]byte("v"), 70000)},
	}
	b, err := EncodeOps(ops)
	require.NoError(t, err)
	got, err := DecodeOps(b)
	require.NoError(t, err)
	require.Len(t, got, len(ops))
	for i := range ops {
		require.Equal(t, ops[i].Kind, got[i].Kind)
		require.Equal(t, ops[i].Key, got[i].Key)
		require.Equal(t, string(ops[i].Value), string(got[i].Value))
		require.Equal(t, ops[i].End, got[i].End)
	}
	require.NotNil(t, got[1].Value, "set with an empty value decodes to an empty value")

	empty, err := EncodeOps(nil)
	require.NoError(t, err)
	got, err = DecodeOps(empty)
	require.NoError(t, err)
	require.Empty(t, got)
}

func TestEncodeOpsValidates(t *testing.T) {
	for _, op := range []Op{
		{Kind: OpSet},
		{Kind: OpDelete, Key: []byte{}},
		{Kind: OpDeleteRange, Key: []byte("b"), End: []byte("a")},
		{Kind: OpDeleteRange, Key: []byte("a"), End: []byte("a")},
		{Kind: OpDeleteRange, End: []byte("a")},
		{Kind: 0, Key: []byte("a")},
		{Kind: 99, Key: []byte("a")},
	} {
		_, err := EncodeOps([]Op{op})
		require.ErrorIs(t, err, ErrInvalid, "%+v", op)
	}
}

func TestDecodeOpsRejectsGarbage(t *testing.T) {
	good, err := EncodeOps([]Op{{Kind: OpSet, Key: []byte("k"), Value: []byte("v")}})
	require.NoError(t, err)
	mp := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		require.NoError(t, err)
		return b
	}
	cases := map[string][]byte{
		"nil":            nil,
		"empty":          {},
		"garbage":        []byte("not msgpack at all"),
		"truncated":      good[:len(good)-1],
		"trailing":       append(append([]byte{}, good...), 0),
		"wrong version":  mp([]any{2, []any{}}),
		"not an array":   mp(map[string]int{"a": 1}),
		"three elements": mp([]any{1, []any{}, 3}),
		"huge count":     {0x92, 0x01, 0xdd, 0xff, 0xff, 0xff, 0xff},
		"huge bytes":     {0x92, 0x01, 0x91, 0x93, 0x01, 0xc6, 0x7f, 0xff, 0xff, 0xff},
		"bad kind":       mp([]any{1, []any{[]any{7, []byte("k"), nil}}}),
		"huge kind":      mp([]any{1, []any{[]any{uint64(1 << 40), []byte("k"), nil}}}),
		"empty key":      mp([]any{1, []any{[]any{1, []byte{}, []byte("v")}}}),
		"delete w/ arg":  mp([]any{1, []any{[]any{2, []byte("k"), []byte("v")}}}),
		"range reversed": mp([]any{1, []any{[]any{3, []byte("z"), []byte("a")}}}),
		"op too short":   mp([]any{1, []any{[]any{1, []byte("k")}}}),
	}
	for name, b := range cases {
		t.Run(name, func(t *testing.T) {
			ops, err := DecodeOps(b)
			require.ErrorIs(t, err, ErrInvalid)
			require.Nil(t, ops)
		})
	}
}

func TestOpsApplierRejectsMalformedEntry(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	resp, err := s.Apply([]Entry{
		{Index: 1, Data: mustOps(t, set("a", "1"))},
		{Index: 2, Data: []byte("garbage")},
		{Index: 3, Data: mustOps(t, set("b", "2"))},
	})
	require.NoError(t, err)
	require.NoError(t, OpsResult(resp[0]))
	require.ErrorIs(t, OpsResult(resp[1]), ErrRejected)
	require.Contains(t, string(resp[1]), "rejected: ")
	require.NoError(t, OpsResult(resp[2]))
	require.EqualValues(t, 3, s.AppliedIndex())
	require.Equal(t, []string{"a", "b"}, userKeys(t, s.Scan))

	strict := openTest(t, t.TempDir(), &Options{Applier: OpsApplier{Strict: true}})
	_, err = strict.Apply([]Entry{{Index: 1, Data: mustOps(t, set("a", "1"))}, {Index: 2, Data: []byte("garbage")}})
	require.ErrorIs(t, err, ErrApply)
	require.ErrorIs(t, err, ErrInvalid)
	require.EqualValues(t, 0, strict.AppliedIndex())
	require.Empty(t, userKeys(t, strict.Scan))
}

func FuzzDecodeOps(f *testing.F) {
	for _, ops := range [][]Op{
		nil,
		{{Kind: OpSet, Key: []byte("k"), Value: []byte("v")}},
		{{Kind: OpDelete, Key: []byte("k")}, {Kind: OpDeleteRange, Key: []byte("a"), End: []byte("b")}},
	} {
		b, err := EncodeOps(ops)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{0x92, 0x01, 0xdd, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		ops, err := DecodeOps(b)
		if err != nil {
			if ops != nil {
				t.Fatal("ops returned with an error")
			}
			return
		}
		// Whatever decodes must be valid and re-encode to the same bytes.
		for _, op := range ops {
			if err := op.Validate(); err != nil {
				t.Fatalf("decoded an invalid op: %v", err)
			}
		}
		again, err := EncodeOps(ops)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		ops2, err := DecodeOps(again)
		if err != nil || len(ops2) != len(ops) {
			t.Fatalf("round trip: %v", err)
		}
	})
}

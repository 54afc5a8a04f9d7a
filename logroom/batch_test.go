package logroom

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestBatchRoundTrip(t *testing.T) {
	cases := [][][]byte{
		{[]byte("a")},
		{{}, []byte("x"), {}},
		{bytes.Repeat([]byte{7}, 300), []byte("tail")},
	}
	for i, entries := range cases {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			data, err := EncodeBatch(9, 100, entries)
			require.NoError(t, err)
			b, err := DecodeBatch(data)
			require.NoError(t, err)
			require.Equal(t, BatchFormatVersion, b.Version)
			require.Equal(t, uint64(9), b.Epoch)
			require.Equal(t, uint64(100), b.First)
			require.Equal(t, len(entries), b.Count)
			require.Equal(t, uint64(100+len(entries)-1), b.Last())
			require.Len(t, b.Entries, len(entries))
			for j := range entries {
				require.Equal(t, entries[j], b.Entries[j])
			}
		})
	}
}

func TestBatchCorruption(t *testing.T) {
	good, err := EncodeBatch(3, 10, [][]byte{[]byte("hello"), []byte("world")})
	require.NoError(t, err)
	flip := func(i int) []byte {
		d := bytes.Clone(good)
		d[i] ^= 0x01
		return d
	}
	cases := map[string][]byte{
		"empty":          nil,
		"garbage":        []byte("not a batch at all"),
		"truncated":      good[:len(good)-1],
		"trailing":       append(bytes.Clone(good), 0),
		"payload bit":    flip(len(good) - 1),
		"epoch bit":      flip(2),
		"first bit":      flip(3),
		"count bit":      flip(4),
		"version":        flip(1),
		"other array":    {0x93, 0x01, 0x02, 0x03},
		"huge count":     mustHeader(t, 1, 1, 1<<40, 0, nil),
		"count mismatch": mustHeader(t, 1, 1, 3, batchCRC(1, 1, 3, []byte{1, 'a'}), []byte{1, 'a'}),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeBatch(data)
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}
}

// mustHeader builds a batch with an arbitrary header over payload.
func mustHeader(t *testing.T, epoch, first, count uint64, crc uint32, payload []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.Write([]byte{0x96, 0x01})
	for _, v := range []uint64{epoch, first, count, uint64(crc)} {
		buf.WriteByte(0xcf)
		for s := 56; s >= 0; s -= 8 {
			buf.WriteByte(byte(v >> s))
		}
	}
	buf.Write([]byte{0xc6, 0, 0, 0, byte(len(payload))})
	buf.Write(payload)
	return buf.Bytes()
}

func TestMaxEntryBytesFits(t *testing.T) {
	for _, max := range []int{minBatchBytes, 64 << 10, DefaultMaxBatchBytes, HardMaxBatchBytes} {
		n := MaxEntryBytes(max)
		data, err := EncodeBatch(1<<62, 1<<62, [][]byte{make([]byte, n)})
		require.NoError(t, err)
		require.LessOrEqual(t, len(data), max, "max %d", max)
	}
}

func FuzzDecodeBatch(f *testing.F) {
	seeds, _ := filepath.Glob("testdata/fuzz/FuzzDecodeBatch/*")
	if len(seeds) == 0 {
		for _, es := range [][][]byte{{[]byte("a")}, {{}, []byte("bc")}} {
			d, _ := EncodeBatch(1, 1, es)
			f.Add(d)
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBatch(data)
		if err != nil {
			return
		}
		// A batch that decodes re-encodes to the same bytes' meaning.
		again, err := EncodeBatch(b.Epoch, b.First, b.Entries)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		b2, err := DecodeBatch(again)
		if err != nil || b2.Count != b.Count || b2.First != b.First || b2.Epoch != b.Epoch {
			t.Fatalf("round trip: %v %+v %+v", err, b, b2)
		}
		total := 0
		for _, e := range b.Entries {
			total += len(e)
		}
		if total > len(data) {
			t.Fatalf("entries hold %d bytes, input %d", total, len(data))
		}
	})
}

// TestWriteFuzzSeeds regenerates the seed corpus when LOGROOM_WRITE_SEEDS=1.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("LOGROOM_WRITE_SEEDS") != "1" {
		t.Skip("set LOGROOM_WRITE_SEEDS=1 to regenerate testdata/fuzz/FuzzDecodeBatch")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeBatch")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	one, _ := EncodeBatch(1, 1, [][]byte{[]byte("a")})
	many, _ := EncodeBatch(7, 1000, [][]byte{{}, []byte("bc"), bytes.Repeat([]byte("z"), 200)})
	seeds := map[string][]byte{
		"one":       one,
		"many":      many,
		"truncated": many[:len(many)/2],
		"garbage":   []byte("garbage"),
		"empty":     {},
		"hugecount": mustHeader(t, 1, 1, 1<<40, 0, nil),
	}
	for name, d := range seeds {
		content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", d)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644))
	}
}

func BenchmarkEncodeBatch(b *testing.B) {
	entries := make([][]byte, 1000)
	for i := range entries {
		entries[i] = bytes.Repeat([]byte{byte(i)}, 256)
	}
	b.SetBytes(256 * 1000)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := EncodeBatch(1, 1, entries); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDecodeBatch(b *testing.B) {
	entries := make([][]byte, 1000)
	for i := range entries {
		entries[i] = bytes.Repeat([]byte{byte(i)}, 256)
	}
	data, _ := EncodeBatch(1, 1, entries)
	b.SetBytes(int64(len(data)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := DecodeBatch(data); err != nil {
			b.Fatal(err)
		}
	}
}

func TestCheckMsgpack(t *testing.T) {
	ok := [][]byte{
		encodeMeta(channelMeta{Version: 1, First: 3, Sealed: true, Last: 9, Bytes: -1}),
		encodeMeta(epochMeta{Version: 1, Owner: "x", Nonce: 1 << 63}),
		encodeMeta(map[string]any{"a": []any{1.5, float32(2), nil, true, []byte("b"), int8(-3), -70000}}),
		{0xd4, 0x01, 0x02},       // fixext1
		{0xc7, 0x02, 0x01, 1, 2}, // ext8
	}
	for i, d := range ok {
		require.NoError(t, checkMsgpack(d, 4), "case %d %x", i, d)
	}
	bad := [][]byte{
		{}, {0xc1}, {0x81, 0xa1}, {0xdb, 0xff, 0xff, 0xff, 0xff, 'x'}, {0xc9, 0xff, 0xff, 0xff, 0xff, 1, 'x'},
		{0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 1}, {0x91, 0x91, 0x91, 0x91, 0x91, 0x01}, {0x01, 0x02},
		{0xd8, 0x01}, {0xcf, 0, 0},
	}
	for i, d := range bad {
		require.Error(t, checkMsgpack(d, 4), "case %d %x", i, d)
	}
}

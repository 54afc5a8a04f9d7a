package logroom

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/klauspost/compress/s2"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"
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
func mustHeader(t testing.TB, epoch, first, count uint64, crc uint32, payload []byte) []byte {
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

// mustHeaderV2 builds a version-2 batch with an arbitrary header over
// stored, with a valid checksum.
func mustHeaderV2(t testing.TB, epoch, first, count uint64, codec Codec, rawLen uint64, stored []byte) []byte {
	t.Helper()
	return mustHeaderV2CRC(t, epoch, first, count, codec, rawLen,
		batchCRC2(epoch, first, int(count), codec, int(rawLen), stored), stored)
}

func mustHeaderV2CRC(t testing.TB, epoch, first, count uint64, codec Codec, rawLen uint64, crc uint32, stored []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.Write([]byte{0x98, 0x02})
	for _, v := range []uint64{epoch, first, count, uint64(crc)} {
		buf.WriteByte(0xcf)
		buf.Write(binary.BigEndian.AppendUint64(nil, v))
	}
	buf.WriteByte(byte(codec)) // positive fixint
	buf.WriteByte(0xcf)
	buf.Write(binary.BigEndian.AppendUint64(nil, rawLen))
	buf.WriteByte(0xc6)
	buf.Write(binary.BigEndian.AppendUint32(nil, uint32(len(stored))))
	buf.Write(stored)
	return buf.Bytes()
}

// compressible returns n entries that S2 shrinks a lot: DFS-like commands.
func compressible(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `{"op":"create","path":"/user/alice/data/part-%05d","replication":3,"block":%d}`, i, 1<<30+i)
	}
	return out
}

func TestBatchV2RoundTrip(t *testing.T) {
	random := make([]byte, 300)
	_, _ = rand.Read(random)
	cases := map[string][][]byte{
		"none":         nil,
		"one":          {[]byte("a")},
		"empties":      {{}, []byte("x"), {}},
		"random":       {random, []byte("tail")},
		"compressible": compressible(500),
	}
	for name, entries := range cases {
		for _, codec := range []Codec{CodecNone, CodecS2} {
			t.Run(name+"/"+codec.String(), func(t *testing.T) {
				data, err := encodeBatchCodec(9, 100, entries, codec)
				require.NoError(t, err)
				b, err := DecodeBatch(data)
				require.NoError(t, err)
				require.Equal(t, BatchFormatVersion2, b.Version)
				require.Equal(t, codec, b.Codec)
				require.Equal(t, uint64(9), b.Epoch)
				require.Equal(t, uint64(100), b.First)
				require.Equal(t, len(entries), b.Count)
				raw := 0
				for _, e := range entries {
					raw += EntrySize(len(e))
				}
				require.Equal(t, raw, b.RawBytes)
				require.Len(t, b.Entries, len(entries))
				for j := range entries {
					require.Equal(t, entries[j], b.Entries[j])
				}
				v1, err := EncodeBatch(9, 100, entries)
				require.NoError(t, err)
				b1, err := DecodeBatch(v1)
				require.NoError(t, err)
				require.NotEqual(t, b1.CRC, b.CRC, "the version-2 checksum covers the codec and raw length too")
				if name == "compressible" && codec == CodecS2 {
					require.Less(t, b.StoredBytes*4, b.RawBytes, "S2 shrinks these at least 4-fold")
					require.Less(t, len(data)*4, len(v1))
				} else if codec == CodecNone {
					require.Equal(t, b.RawBytes, b.StoredBytes)
				}
			})
		}
	}
}

func TestBatchV2Corruption(t *testing.T) {
	good, err := encodeBatchCodec(3, 10, compressible(50), CodecS2)
	require.NoError(t, err)
	goodNone, err := encodeBatchCodec(3, 10, [][]byte{[]byte("hello"), []byte("world")}, CodecNone)
	require.NoError(t, err)
	// Header layout of an encoding of these small numbers: 0x98, version,
	// epoch, first, count (fixints), crc (uint32: 5 bytes), codec, rawLen
	// (uint16: 3 bytes), bin header, payload.
	const codecAt, rawLenAt = 10, 11
	require.Equal(t, byte(CodecS2), good[codecAt])
	flip := func(d []byte, i int) []byte {
		d = bytes.Clone(d)
		d[i] ^= 0x01
		return d
	}
	raw := []byte{1, 'a'}
	cases := map[string][]byte{
		"truncated":           good[:len(good)-1],
		"trailing":            append(bytes.Clone(good), 0),
		"version to 3":        flip(good, 1),
		"epoch bit":           flip(good, 2),
		"first bit":           flip(good, 3),
		"count bit":           flip(good, 4),
		"crc bit":             flip(good, 6),
		"codec bit":           flip(good, codecAt),
		"rawLen bit":          flip(good, rawLenAt+2),
		"compressed payload":  flip(good, len(good)-5),
		"compressed first":    flip(good, len(good)-len(good)/2),
		"none payload":        flip(goodNone, len(goodNone)-1),
		"six fields":          append([]byte{0x96}, good[1:]...),
		"zstd garbage":        mustHeaderV2(t, 1, 1, 1, CodecZstd, 2, raw),
		"none rawLen short":   mustHeaderV2(t, 1, 1, 1, CodecNone, 1, raw),
		"none rawLen long":    mustHeaderV2(t, 1, 1, 1, CodecNone, 3, raw),
		"count over rawLen":   mustHeaderV2(t, 1, 1, 3, CodecNone, 2, raw),
		"count over max":      mustHeaderV2(t, 1, 1, MaxBatchEntries+1, CodecNone, 2, raw),
		"first zero":          mustHeaderV2(t, 1, 0, 1, CodecNone, 2, raw),
		"bad crc":             mustHeaderV2CRC(t, 1, 1, 1, CodecNone, 2, 12345, raw),
		"s2 garbage":          mustHeaderV2(t, 1, 1, 1, CodecS2, 2, []byte{2, 0xff, 0xff}),
		"s2 entries trailing": mustHeaderV2(t, 1, 1, 1, CodecS2, 3, s2.Encode(nil, []byte{1, 'a', 'b'})),
		"s2 entry overruns":   mustHeaderV2(t, 1, 1, 1, CodecS2, 2, s2.Encode(nil, []byte{5, 'a'})),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeBatch(data)
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}
}

// allocated returns the bytes f allocates, averaged over runs.
func allocated(runs int, f func()) uint64 {
	f() // warm up (lazy initialisation)
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return (after.TotalAlloc - before.TotalAlloc) / uint64(runs)
}

// TestBatchV2RawLenBound: a CRC-valid batch claiming more than
// MaxBatchRawBytes, or whose S2 block announces another length than
// rawLen, is refused with ErrCorrupt before anything is inflated: the
// decode allocates next to nothing although the claim is megabytes.
func TestBatchV2RawLenBound(t *testing.T) {
	block := s2.Encode(nil, bytes.Repeat([]byte{0}, 1<<20)) // 1 MiB of empty entries
	require.Less(t, len(block), 1<<10)
	cases := map[string][]byte{
		"rawLen over the bound": mustHeaderV2(t, 1, 1, 1, CodecS2, MaxBatchRawBytes+1, block),
		"rawLen over the bound, s2 agrees": mustHeaderV2(t, 1, 1, 1, CodecS2, MaxBatchRawBytes+1,
			s2.Encode(nil, bytes.Repeat([]byte{0}, MaxBatchRawBytes+1))),
		"rawLen 2^40":                   mustHeaderV2(t, 1, 1, 1, CodecS2, 1<<40, block),
		"rawLen 2^64-1":                 mustHeaderV2(t, 1, 1, 1, CodecS2, 1<<64-1, block),
		"s2 announces more than rawLen": mustHeaderV2(t, 1, 1, 1, CodecS2, MaxBatchRawBytes, s2.Encode(nil, bytes.Repeat([]byte{0}, MaxBatchRawBytes+1))),
		"s2 announces less than rawLen": mustHeaderV2(t, 1, 1, 1, CodecS2, MaxBatchRawBytes, block),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := DecodeBatch(data)
			require.ErrorIs(t, err, ErrCorrupt)
			n := allocated(5, func() { _, _ = DecodeBatch(data) })
			require.Less(t, n, uint64(16<<10), "refusing must not inflate: %d bytes allocated", n)
		})
	}
	// The control: at the bound it decodes, allocating rawLen.
	ok := mustHeaderV2(t, 1, 1, MaxBatchEntries, CodecS2, MaxBatchRawBytes, s2.Encode(nil, bytes.Repeat([]byte{0}, MaxBatchRawBytes)))
	_, err := DecodeBatch(ok)
	require.ErrorIs(t, err, ErrCorrupt, "count below the entries present: trailing bytes")
	exact := make([]byte, MaxBatchRawBytes)
	for i := 0; i < MaxBatchEntries; i++ {
		// MaxBatchEntries entries of 63 bytes: 64 framed each = 16 MiB.
		exact[i*64] = 63
	}
	ok = mustHeaderV2(t, 1, 1, MaxBatchEntries, CodecS2, MaxBatchRawBytes, s2.Encode(nil, exact))
	b, err := DecodeBatch(ok)
	require.NoError(t, err)
	require.Equal(t, MaxBatchEntries, b.Count)
	require.Equal(t, MaxBatchRawBytes, b.RawBytes)
	n := allocated(2, func() { _, _ = DecodeBatch(ok) })
	require.Less(t, n, uint64(MaxBatchRawBytes+32*MaxBatchEntries), "bounded by rawLen and the count")
	require.Greater(t, n, uint64(MaxBatchRawBytes), "a compressed batch is inflated into its own buffer")
}

// TestBatchV2InflateMismatch: a batch whose checksum is right but whose
// compressed payload inflates to another length than rawLen is corrupt.
func TestBatchV2InflateMismatch(t *testing.T) {
	raw := []byte{3, 'a', 'b', 'c', 2, 'd', 'e'}
	block := s2.Encode(nil, raw)
	// The control: correct rawLen decodes.
	b, err := DecodeBatch(mustHeaderV2(t, 1, 1, 2, CodecS2, uint64(len(raw)), block))
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("abc"), []byte("de")}, b.Entries)
	for _, rawLen := range []uint64{0, 1, uint64(len(raw)) - 1, uint64(len(raw)) + 1, 1 << 20} {
		_, err := DecodeBatch(mustHeaderV2(t, 1, 1, 0, CodecS2, rawLen, block))
		require.ErrorIs(t, err, ErrCorrupt, "rawLen %d", rawLen)
	}
	// The block's own length prefix says rawLen, its body decodes to less.
	lying := append([]byte{byte(len(raw) + 5)}, block[1:]...)
	_, err = DecodeBatch(mustHeaderV2(t, 1, 1, 2, CodecS2, uint64(len(raw)+5), lying))
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "inflate")
}

// TestBatchPaddedLengthPrefix: an entry length prefix in more bytes than
// its minimal uvarint (0x8a 0x00 for 10) is corrupt, checksum or not: no
// writer makes one, and a batch decodes from one encoding only (found by
// FuzzDecodeBatchBody: it decoded, and re-encoded to other bytes).
func TestBatchPaddedLengthPrefix(t *testing.T) {
	padded := append([]byte{0x8a, 0x00}, bytes.Repeat([]byte("0"), 10)...)
	v1, _ := encodeBatchParts(1, 77, 1, len(padded), padded)
	for name, d := range map[string][]byte{
		"v1":      v1,
		"v2-none": mustHeaderV2(t, 1, 77, 1, CodecNone, uint64(len(padded)), padded),
		"v2-s2":   mustHeaderV2(t, 1, 77, 1, CodecS2, uint64(len(padded)), s2.Encode(nil, padded)),
	} {
		_, err := DecodeBatch(d)
		require.ErrorIs(t, err, ErrCorrupt, name)
		require.Contains(t, err.Error(), "length prefix of 2 bytes for 10", name)
	}
	minimal := append([]byte{0x0a}, bytes.Repeat([]byte("0"), 10)...)
	ok, _ := encodeBatchParts(1, 77, 1, len(minimal), minimal)
	b, err := DecodeBatch(ok)
	require.NoError(t, err)
	require.Equal(t, [][]byte{bytes.Repeat([]byte("0"), 10)}, b.Entries)
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
		for _, d := range fuzzSeeds(f) {
			f.Add(d)
		}
	}
	f.Fuzz(checkDecodeBatch)
}

// FuzzDecodeBatchBody fuzzes what lies behind the checksum. Mutations of a
// whole batch (FuzzDecodeBatch) almost never keep its CRC32C right, so
// DecodeBatch stops at the checksum and the S2 inflation and the entry
// framing never see them; here the batch is built around the fuzzed header
// fields and stored payload with the checksum computed over them. The
// seeds are the fields of real encoded batches, compressed and not.
func FuzzDecodeBatchBody(f *testing.F) {
	for _, d := range fuzzSeeds(f) {
		if b, err := DecodeBatch(d); err == nil {
			f.Add(uint8(b.Version), b.Epoch, b.First, uint64(b.Count), uint8(b.Codec), uint64(b.RawBytes), d[len(d)-b.StoredBytes:])
		}
	}
	for _, entries := range [][][]byte{compressible(40), {bytes.Repeat([]byte{0}, 5000)}, {{}, {}, {}}} {
		raw := framed(entries...)
		block := s2.Encode(nil, raw)
		n := uint64(len(entries))
		f.Add(uint8(BatchFormatVersion), uint64(3), uint64(77), n, uint8(CodecNone), uint64(len(raw)), raw)
		f.Add(uint8(BatchFormatVersion2), uint64(3), uint64(77), n, uint8(CodecNone), uint64(len(raw)), raw)
		f.Add(uint8(BatchFormatVersion2), uint64(3), uint64(77), n, uint8(CodecS2), uint64(len(raw)), block)
	}
	f.Fuzz(func(t *testing.T, version uint8, epoch, first, count uint64, codec uint8, rawLen uint64, stored []byte) {
		var data []byte
		if version == BatchFormatVersion {
			data, _ = encodeBatchParts(epoch, first, int(count), len(stored), stored)
		} else {
			data, _ = encodeBatchV2(epoch, first, int(count), Codec(codec), int(rawLen), stored)
		}
		checkDecodeBatch(t, data)
	})
}

// framed returns entries framed as a batch payload (uvarint length, bytes).
func framed(entries ...[]byte) []byte {
	var raw []byte
	for _, e := range entries {
		raw = binary.AppendUvarint(raw, uint64(len(e)))
		raw = append(raw, e...)
	}
	return raw
}

// claimedV2 returns the rawLen and count fields of a version-2 batch
// header in data, each capped at its bound (MaxBatchRawBytes,
// MaxBatchEntries), or zeros when data has no such header. DecodeBatch
// sizes its allocations for inflation and entries from them, on its error
// paths too (an S2 block that fails to inflate, a framing error after
// inflation), and only after checking them against those bounds.
func claimedV2(data []byte) (rawLen, count uint64) {
	dec := msgpack.NewDecoder(bytes.NewReader(data))
	if n, err := dec.DecodeArrayLen(); err != nil || n != batchFieldsV2 {
		return 0, 0
	}
	var h [7]uint64 // version, epoch, first, count, crc, codec, rawLen
	for i := range h {
		v, err := dec.DecodeUint64()
		if err != nil {
			return 0, 0
		}
		h[i] = v
	}
	if h[0] != BatchFormatVersion2 {
		return 0, 0
	}
	return min(h[6], MaxBatchRawBytes), min(h[3], MaxBatchEntries)
}

// checkDecodeBatch decodes data and checks what holds for any input: no
// panic, an allocation bounded by the input and the format's bounds, and,
// when it decodes, a batch within the bounds that re-encodes to the same
// entries.
func checkDecodeBatch(t *testing.T, data []byte) {
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	b, err := DecodeBatch(data)
	runtime.ReadMemStats(&after)
	// Bounded allocation: O(len(data)) for an uncompressed batch, and
	// for a version-2 one also O(rawLen) for inflation and O(count) for
	// the entries, whether the decode then succeeds or not, with rawLen
	// and count within their bounds (slack for the decoder's own small
	// allocations).
	rawLen, count := claimedV2(data)
	limit := 32*uint64(len(data)) + 64<<10 + 2*rawLen + 32*min(count, rawLen)
	if got := after.TotalAlloc - before.TotalAlloc; got > limit {
		t.Fatalf("decoding %d bytes allocated %d (limit %d, err %v)", len(data), got, limit, err)
	}
	if err != nil {
		return
	}
	if b.Version == BatchFormatVersion2 && (b.RawBytes > MaxBatchRawBytes || b.Count > MaxBatchEntries) {
		t.Fatalf("version-2 batch beyond the bounds: %d raw bytes, %d entries", b.RawBytes, b.Count)
	}
	// A batch that decodes re-encodes to the same bytes' meaning, in
	// version 1 and with its own codec.
	again, err := EncodeBatch(b.Epoch, b.First, b.Entries)
	if err != nil {
		t.Fatalf("re-encode: %v", err)
	}
	reencoded := [][]byte{again}
	if b.Count <= MaxBatchEntries && b.RawBytes <= MaxBatchRawBytes { // a version-1 batch may exceed them
		again2, err := encodeBatchCodec(b.Epoch, b.First, b.Entries, b.Codec)
		if err != nil {
			t.Fatalf("re-encode with %v: %v", b.Codec, err)
		}
		reencoded = append(reencoded, again2)
	}
	for _, d := range reencoded {
		b2, err := DecodeBatch(d)
		if err != nil || b2.Count != b.Count || b2.First != b.First || b2.Epoch != b.Epoch || b2.RawBytes != b.RawBytes {
			t.Fatalf("round trip: %v %+v %+v", err, b, b2)
		}
		for i := range b.Entries {
			if !bytes.Equal(b.Entries[i], b2.Entries[i]) {
				t.Fatalf("round trip: entry %d differs", i)
			}
		}
	}
	total := 0
	for _, e := range b.Entries {
		total += len(e)
	}
	if total > b.RawBytes || (b.Codec == CodecNone && total > len(data)) {
		t.Fatalf("entries hold %d bytes, input %d, raw %d", total, len(data), b.RawBytes)
	}
}

// fuzzSeeds are FuzzDecodeBatch's seeds: valid batches of both versions
// and every codec, and broken ones.
func fuzzSeeds(t testing.TB) map[string][]byte {
	one, _ := EncodeBatch(1, 1, [][]byte{[]byte("a")})
	many, _ := EncodeBatch(7, 1000, [][]byte{{}, []byte("bc"), bytes.Repeat([]byte("z"), 200)})
	text := [][]byte{{}, []byte("bc"), bytes.Repeat([]byte("zy"), 150), []byte("/user/alice/data/part-00042")}
	v2none, err := encodeBatchCodec(7, 1000, text, CodecNone)
	require.NoError(t, err)
	v2s2, err := encodeBatchCodec(7, 1000, text, CodecS2)
	require.NoError(t, err)
	v2empty, err := encodeBatchCodec(3, 5, nil, CodecS2)
	require.NoError(t, err)
	return map[string][]byte{
		"one":               one,
		"many":              many,
		"truncated":         many[:len(many)/2],
		"garbage":           []byte("garbage"),
		"empty":             {},
		"hugecount":         mustHeader(t, 1, 1, 1<<40, 0, nil),
		"v2-none":           v2none,
		"v2-s2":             v2s2,
		"v2-s2-empty-batch": v2empty,
		"v2-s2-truncated":   v2s2[:len(v2s2)-3],
		// CRC-valid, claiming more than MaxBatchRawBytes.
		"v2-s2-bomb": mustHeaderV2(t, 1, 1, 1, CodecS2, MaxBatchRawBytes+1, s2.Encode(nil, []byte{0})),
		// CRC-valid, the S2 block inflating to one byte more than rawLen.
		"v2-s2-rawlen-mismatch": mustHeaderV2(t, 1, 1, 1, CodecS2, 2, s2.Encode(nil, []byte{2, 'a', 'b'})),
		"v2-unknown-codec":      mustHeaderV2(t, 1, 1, 1, 9, 2, []byte{1, 'a'}),
	}
}

// TestWriteFuzzSeeds regenerates the seed corpus when LOGROOM_WRITE_SEEDS=1.
func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("LOGROOM_WRITE_SEEDS") != "1" {
		t.Skip("set LOGROOM_WRITE_SEEDS=1 to regenerate testdata/fuzz/FuzzDecodeBatch")
	}
	dir := filepath.Join("testdata", "fuzz", "FuzzDecodeBatch")
	require.NoError(t, os.MkdirAll(dir, 0o755))
	for name, d := range fuzzSeeds(t) {
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

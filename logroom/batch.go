package logroom

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"
	"sync"

	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
	"github.com/vmihailenco/msgpack/v5"

	vers "github.com/roomlog/roomlog/version"
)

// Batch format versions. This package reads both; a batch with another
// version is corrupt to this reader. See "Batch format" in the package doc.
const (
	// BatchFormatVersion is the uncompressed format every release of this
	// package reads: EncodeBatch writes it, and a Writer stores every batch
	// that compression does not shrink in it.
	BatchFormatVersion = 1
	// BatchFormatVersion2 adds a codec and the uncompressed payload length
	// (a Writer's compressed batches). Readers before it refuse it as
	// corrupt.
	BatchFormatVersion2 = 2
)

// Codec is the codec field of a version-2 batch: how its payload is
// stored. The values are part of the format: never renumber.
type Codec uint8

const (
	// CodecNone: the payload is stored as is (rawLen == its length).
	CodecNone Codec = 0
	// CodecS2: the payload is one S2 block (github.com/klauspost/compress/s2,
	// s2.Encode), whose decoded length prefix must equal rawLen.
	CodecS2 Codec = 1
	// CodecZstd: the payload is one zstd frame
	// (github.com/klauspost/compress/zstd) announcing its content size,
	// which must equal rawLen. Room version 2 and later only: a batch in a
	// channel opened at room version 1 that uses it is refused, and readers
	// from before room version 2 refuse it as an unknown codec.
	CodecZstd Codec = 2
)

// minRoomVersion is the room version that first allows codec c.
func (c Codec) minRoomVersion() int {
	if c == CodecZstd {
		return 2
	}
	return 1
}

// zstd coders shared by every Writer and reader of the process: EncodeAll
// and DecodeAll are safe for concurrent use. The decoder inflates into a
// buffer of exactly rawLen bytes and never past it (DecodeAllCapLimit),
// with a window no larger than MaxBatchRawBytes.
var (
	zstdOnce sync.Once
	zstdEnc  *zstd.Encoder
	zstdDec  *zstd.Decoder
)

func zstdCoders() (*zstd.Encoder, *zstd.Decoder) {
	zstdOnce.Do(func() {
		var err error
		zstdEnc, err = zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderCRC(false),
			zstd.WithSingleSegment(true), zstd.WithEncoderConcurrency(2), zstd.WithLowerEncoderMem(true))
		if err != nil {
			panic(fmt.Sprintf("logroom: zstd encoder: %v", err))
		}
		zstdDec, err = zstd.NewReader(nil, zstd.WithDecodeAllCapLimit(true), zstd.WithDecoderConcurrency(0),
			zstd.WithDecoderMaxWindow(MaxBatchRawBytes), zstd.WithDecoderMaxMemory(MaxBatchRawBytes))
		if err != nil {
			panic(fmt.Sprintf("logroom: zstd decoder: %v", err))
		}
	})
	return zstdEnc, zstdDec
}

// zstdEncode appends raw's zstd frame to dst.
func zstdEncode(dst, raw []byte) []byte {
	enc, _ := zstdCoders()
	return enc.EncodeAll(raw, dst)
}

func (c Codec) String() string {
	switch c {
	case CodecNone:
		return "none"
	case CodecS2:
		return "s2"
	case CodecZstd:
		return "zstd"
	}
	return fmt.Sprintf("codec(%d)", uint8(c))
}

// Bounds of a version-2 batch, checked by DecodeBatch before it allocates
// anything for the payload (decompression bombs) and respected by Writer.
const (
	// MaxBatchRawBytes bounds a version-2 batch's uncompressed payload
	// (rawLen): what one DecodeBatch may inflate. A fixed bound rather than
	// a ratio to the stored size: S2 legitimately compresses repetitive
	// entries more than 100-fold, so a ratio bound would refuse batches a
	// writer can produce, while this one caps what a decode allocates.
	MaxBatchRawBytes = 16 << 20
	// MaxBatchEntries bounds a version-2 batch's entry count (each decoded
	// entry costs a slice header): at most 6 MiB of entry slices per decode.
	MaxBatchEntries = 1 << 18
)

const (
	// HardMaxBatchBytes is the largest encoded batch a Writer may produce: a
	// batch travels in one Multi that must stay below ZooKeeper's default
	// jute.maxbuffer (1 MiB), with margin for the path and the fence op.
	HardMaxBatchBytes = 900 << 10

	// batchOverhead bounds the encoded size of everything but the entries:
	// array header 1 + version 1 + epoch 9 + first 9 + count 9 + crc 5 +
	// bin32 header 5 = 39, rounded up. Version 2 adds codec 1 + rawLen 5
	// (rawLen <= MaxBatchRawBytes < 2^32): 45, still below.
	batchOverhead = 48

	batchFields   = 6
	batchFieldsV2 = 8
)

// castagnoli is immutable after initialisation (a lookup table), not mutable
// package state.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Batch is one decoded batch znode.
type Batch struct {
	Version int
	Epoch   uint64
	First   uint64
	Count   int
	// CRC is the stored checksum (over what the znode holds: for version 2
	// the compressed payload).
	CRC uint32
	// Codec is the payload's codec (CodecNone for version 1).
	Codec Codec
	// RawBytes is the uncompressed payload length (the framed entries),
	// StoredBytes the payload as stored; equal unless compressed.
	RawBytes, StoredBytes int
	// Entries alias the decoded input when the payload is stored
	// uncompressed (valid as long as the input is), else a buffer of
	// RawBytes that DecodeBatch allocated.
	Entries [][]byte
}

// Last returns the index of the batch's last entry (First-1 when empty).
func (b Batch) Last() uint64 { return b.First + uint64(b.Count) - 1 }

// EntrySize is the number of payload bytes an entry of n data bytes takes in
// a batch (its uvarint length prefix plus the data).
func EntrySize(n int) int { return uvarintLen(uint64(n)) + n }

// MaxEntryBytes returns the largest entry that fits in one batch of at most
// maxBatchBytes encoded bytes.
func MaxEntryBytes(maxBatchBytes int) int {
	room := maxBatchBytes - batchOverhead
	n := room - uvarintLen(uint64(room))
	if n < 0 {
		return 0
	}
	return n
}

func uvarintLen(x uint64) int {
	n := 1
	for x >= 0x80 {
		x >>= 7
		n++
	}
	return n
}

// batchCRC is the checksum a batch carries: CRC32C (Castagnoli) over the
// epoch, first index and entry count (8 bytes big-endian each) followed by the
// payload. Covering the header fields means a flipped bit anywhere but the
// version is caught by the checksum, not only by the reader's position checks.
func batchCRC(epoch, first uint64, count int, payload ...[]byte) uint32 {
	var hdr [24]byte
	binary.BigEndian.PutUint64(hdr[0:], epoch)
	binary.BigEndian.PutUint64(hdr[8:], first)
	binary.BigEndian.PutUint64(hdr[16:], uint64(count))
	crc := crc32.Update(0, castagnoli, hdr[:])
	for _, p := range payload {
		crc = crc32.Update(crc, castagnoli, p)
	}
	return crc
}

// batchCRC2 is a version-2 batch's checksum: CRC32C over version, epoch,
// first, count, codec and rawLen (8 bytes big-endian each) followed by the
// stored payload. It covers what is stored, so a corrupt compressed payload
// is caught before it is inflated.
func batchCRC2(epoch, first uint64, count int, codec Codec, rawLen int, stored []byte) uint32 {
	var hdr [48]byte
	binary.BigEndian.PutUint64(hdr[0:], BatchFormatVersion2)
	binary.BigEndian.PutUint64(hdr[8:], epoch)
	binary.BigEndian.PutUint64(hdr[16:], first)
	binary.BigEndian.PutUint64(hdr[24:], uint64(count))
	binary.BigEndian.PutUint64(hdr[32:], uint64(codec))
	binary.BigEndian.PutUint64(hdr[40:], uint64(rawLen))
	crc := crc32.Update(0, castagnoli, hdr[:])
	return crc32.Update(crc, castagnoli, stored)
}

// encodeBatchCodec encodes entries as one version-2 batch znode, its
// payload stored with codec (even when that does not make it smaller: the
// Writer's policy of storing such batches as version 1 is its own). The
// framed payload may hold at most MaxBatchRawBytes and MaxBatchEntries
// entries (ErrEntryTooLarge). The result is not checked against any
// ZooKeeper limit.
func encodeBatchCodec(epoch, first uint64, entries [][]byte, codec Codec) ([]byte, error) {
	if first == 0 {
		return nil, fmt.Errorf("logroom: encode batch: first index must be >= 1")
	}
	if codec != CodecNone && codec != CodecS2 && codec != CodecZstd {
		return nil, fmt.Errorf("logroom: encode batch: unknown codec %v", codec)
	}
	size := 0
	for _, e := range entries {
		size += EntrySize(len(e))
		if size > MaxBatchRawBytes {
			break
		}
	}
	if size > MaxBatchRawBytes || len(entries) > MaxBatchEntries || first+uint64(len(entries)) < first {
		return nil, fmt.Errorf("%w: version-2 batch of %d entries, more than %d payload bytes or %d entries",
			ErrEntryTooLarge, len(entries), MaxBatchRawBytes, MaxBatchEntries)
	}
	raw := make([]byte, 0, size)
	for _, e := range entries {
		raw = binary.AppendUvarint(raw, uint64(len(e)))
		raw = append(raw, e...)
	}
	stored := raw
	switch codec {
	case CodecS2:
		stored = s2.Encode(nil, raw)
	case CodecZstd:
		stored = zstdEncode(nil, raw)
	}
	out, _ := encodeBatchV2(epoch, first, len(entries), codec, len(raw), stored)
	return out, nil
}

// zstdInflate decodes a zstd frame that must announce and inflate to
// exactly rawLen bytes (rawLen already checked against MaxBatchRawBytes).
func zstdInflate(stored []byte, rawLen int) ([]byte, error) {
	var hdr zstd.Header
	if err := hdr.Decode(stored); err != nil || !hdr.HasFCS || hdr.FrameContentSize != uint64(rawLen) {
		return nil, fmt.Errorf("%w: zstd payload announces %d bytes (content size known: %v, %v), raw length %d",
			ErrCorrupt, hdr.FrameContentSize, hdr.HasFCS, err, rawLen)
	}
	_, dec := zstdCoders()
	buf := make([]byte, 0, rawLen)
	out, err := dec.DecodeAll(stored, buf)
	if err != nil || len(out) != rawLen || (rawLen > 0 && &out[0] != &buf[:1][0]) {
		return nil, fmt.Errorf("%w: zstd payload does not inflate to its %d raw bytes: %v", ErrCorrupt, rawLen, err)
	}
	return out, nil
}

// encodeBatchV2 encodes a version-2 batch of count entries whose framed
// payload of rawLen bytes is stored (already encoded with codec). It
// returns the encoding (a new buffer of exactly its size) and its checksum.
func encodeBatchV2(epoch, first uint64, count int, codec Codec, rawLen int, stored []byte) ([]byte, uint32) {
	crc := batchCRC2(epoch, first, count, codec, rawLen, stored)
	buf := bytes.NewBuffer(make([]byte, 0, len(stored)+batchOverhead))
	enc := msgpack.NewEncoder(buf)
	// Writes to a bytes.Buffer cannot fail.
	_ = enc.EncodeArrayLen(batchFieldsV2)
	_ = enc.EncodeUint(BatchFormatVersion2)
	_ = enc.EncodeUint(epoch)
	_ = enc.EncodeUint(first)
	_ = enc.EncodeUint(uint64(count))
	_ = enc.EncodeUint(uint64(crc))
	_ = enc.EncodeUint(uint64(codec))
	_ = enc.EncodeUint(uint64(rawLen))
	_ = enc.EncodeBytesLen(len(stored))
	out := append(buf.Bytes(), stored...)
	return out[:len(out):len(out)], crc
}

// EncodeBatch encodes entries as one version-1 (uncompressed) batch znode:
// a msgpack array [version, epoch, first, count, crc32c, payload] where
// payload is one bin holding each entry as uvarint(len) followed by its
// bytes.
func EncodeBatch(epoch, first uint64, entries [][]byte) ([]byte, error) {
	if first == 0 {
		return nil, fmt.Errorf("logroom: encode batch: first index must be >= 1")
	}
	size := 0
	for _, e := range entries {
		size += EntrySize(len(e))
	}
	if size > math.MaxUint32 || first+uint64(len(entries)) < first {
		return nil, fmt.Errorf("%w: batch of %d payload bytes", ErrEntryTooLarge, size)
	}
	// One pass for the checksum, one to write: no intermediate payload copy.
	var hdr [24]byte
	binary.BigEndian.PutUint64(hdr[0:], epoch)
	binary.BigEndian.PutUint64(hdr[8:], first)
	binary.BigEndian.PutUint64(hdr[16:], uint64(len(entries)))
	crc := crc32.Update(0, castagnoli, hdr[:])
	var pfx [binary.MaxVarintLen64]byte
	for _, e := range entries {
		n := binary.PutUvarint(pfx[:], uint64(len(e)))
		crc = crc32.Update(crc, castagnoli, pfx[:n])
		crc = crc32.Update(crc, castagnoli, e)
	}
	out := encodeHeader(epoch, first, len(entries), size, crc)
	for _, e := range entries {
		out = binary.AppendUvarint(out, uint64(len(e)))
		out = append(out, e...)
	}
	return out, nil
}

// encodeHeader returns a buffer with room for size payload bytes holding
// the msgpack header up to and including the payload's bin length.
func encodeHeader(epoch, first uint64, count, size int, crc uint32) []byte {
	buf := bytes.NewBuffer(make([]byte, 0, size+batchOverhead))
	enc := msgpack.NewEncoder(buf)
	// Writes to a bytes.Buffer cannot fail.
	_ = enc.EncodeArrayLen(batchFields)
	_ = enc.EncodeUint(BatchFormatVersion)
	_ = enc.EncodeUint(epoch)
	_ = enc.EncodeUint(first)
	_ = enc.EncodeUint(uint64(count))
	_ = enc.EncodeUint(uint64(crc))
	_ = enc.EncodeBytesLen(size)
	return buf.Bytes()
}

// encodeBatchParts encodes a batch whose payload is the concatenation of
// parts (already uvarint-framed), size bytes in total, count entries. It
// returns the encoding and the batch's checksum.
func encodeBatchParts(epoch, first uint64, count, size int, parts ...[]byte) ([]byte, uint32) {
	crc := batchCRC(epoch, first, count, parts...)
	out := encodeHeader(epoch, first, count, size, crc)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out, crc
}

// DecodeBatch decodes and verifies one batch znode of version 1 or 2. Any
// problem (malformed msgpack, unknown version or codec, count or length
// mismatch, checksum mismatch, a payload that does not inflate to exactly
// rawLen bytes, an entry length prefix longer than its minimal uvarint
// encoding) yields an error wrapping ErrCorrupt. It never panics, and
// it allocates O(len(data)) for an uncompressed batch (the entry slice is
// only allocated after the count has been checked against the payload
// length, and entries alias data) and O(rawLen) for a compressed one, after
// rawLen has been checked against MaxBatchRawBytes, the count against
// MaxBatchEntries and rawLen, and the checksum over the stored bytes: no
// inflating allocation happens before those checks pass.
func DecodeBatch(data []byte) (Batch, error) {
	var b Batch
	rd := bytes.NewReader(data)
	dec := msgpack.NewDecoder(rd)
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return b, fmt.Errorf("%w: batch header: %v", ErrCorrupt, err)
	}
	if n < 1 {
		return b, fmt.Errorf("%w: batch header: array of %d fields", ErrCorrupt, n)
	}
	version, err := dec.DecodeUint64()
	if err != nil {
		return b, fmt.Errorf("%w: batch version: %v", ErrCorrupt, err)
	}
	want := 0
	switch version {
	case BatchFormatVersion:
		want = batchFields
	case BatchFormatVersion2:
		want = batchFieldsV2
	case 0:
		return b, fmt.Errorf("%w: unknown batch format version %d", ErrCorrupt, version)
	default:
		// Nothing after the version can be checked (its fields are not
		// known): it is either, and the error says both.
		return b, fmt.Errorf("%w: %w: batch format version %d (a newer writer's, or corrupt); this binary (%s) reads versions 1 and 2",
			ErrUnsupportedVersion, ErrCorrupt, version, vers.Release)
	}
	if n != want {
		return b, fmt.Errorf("%w: batch header: %d fields, want %d for version %d", ErrCorrupt, n, want, version)
	}
	b.Version = int(version)
	if b.Epoch, err = dec.DecodeUint64(); err != nil {
		return b, fmt.Errorf("%w: batch epoch: %v", ErrCorrupt, err)
	}
	if b.First, err = dec.DecodeUint64(); err != nil {
		return b, fmt.Errorf("%w: batch first index: %v", ErrCorrupt, err)
	}
	count, err := dec.DecodeUint64()
	if err != nil {
		return b, fmt.Errorf("%w: batch count: %v", ErrCorrupt, err)
	}
	crc, err := dec.DecodeUint64()
	if err != nil {
		return b, fmt.Errorf("%w: batch crc: %v", ErrCorrupt, err)
	}
	var codec, rawLen uint64
	if b.Version == BatchFormatVersion2 {
		if codec, err = dec.DecodeUint64(); err != nil {
			return b, fmt.Errorf("%w: batch codec: %v", ErrCorrupt, err)
		}
		if rawLen, err = dec.DecodeUint64(); err != nil {
			return b, fmt.Errorf("%w: batch raw length: %v", ErrCorrupt, err)
		}
	}
	plen, err := dec.DecodeBytesLen()
	if err != nil {
		return b, fmt.Errorf("%w: batch payload: %v", ErrCorrupt, err)
	}
	if plen < 0 || plen != rd.Len() {
		return b, fmt.Errorf("%w: batch payload of %d bytes, %d present", ErrCorrupt, plen, rd.Len())
	}
	stored := data[len(data)-plen:]
	if b.Version == BatchFormatVersion {
		rawLen = uint64(plen)
	}
	switch {
	case codec > 255:
		return b, fmt.Errorf("%w: unknown batch codec %d", ErrCorrupt, codec)
	case rawLen > MaxBatchRawBytes && b.Version == BatchFormatVersion2:
		return b, fmt.Errorf("%w: batch raw length %d exceeds %d", ErrCorrupt, rawLen, MaxBatchRawBytes)
	case codec == uint64(CodecNone) && rawLen != uint64(plen):
		return b, fmt.Errorf("%w: uncompressed batch payload of %d bytes, raw length %d", ErrCorrupt, plen, rawLen)
	case b.Version == BatchFormatVersion2 && count > MaxBatchEntries:
		return b, fmt.Errorf("%w: batch count %d exceeds %d", ErrCorrupt, count, MaxBatchEntries)
	}
	// Every entry takes at least one byte (its length prefix): this bounds
	// the allocation below by the payload size.
	if count > rawLen {
		return b, fmt.Errorf("%w: batch count %d exceeds payload of %d bytes", ErrCorrupt, count, rawLen)
	}
	if b.First == 0 || b.First+count < b.First {
		return b, fmt.Errorf("%w: batch first index %d with %d entries out of range", ErrCorrupt, b.First, count)
	}
	b.Count = int(count)
	b.Codec = Codec(codec)
	b.RawBytes, b.StoredBytes = int(rawLen), plen
	var sum uint32
	if b.Version == BatchFormatVersion {
		sum = batchCRC(b.Epoch, b.First, b.Count, stored)
	} else {
		sum = batchCRC2(b.Epoch, b.First, b.Count, b.Codec, b.RawBytes, stored)
	}
	if crc > math.MaxUint32 || uint32(crc) != sum {
		return b, fmt.Errorf("%w: batch checksum mismatch", ErrCorrupt)
	}
	b.CRC = uint32(crc)
	if b.Codec > CodecZstd {
		// The checksum holds: a newer writer's codec, not corruption.
		return Batch{}, fmt.Errorf("%w: batch codec %d; this binary (%s) reads codecs none, s2 and zstd",
			ErrUnsupportedVersion, codec, vers.Release)
	}
	payload := stored
	if b.Codec == CodecZstd {
		buf, err := zstdInflate(stored, b.RawBytes)
		if err != nil {
			return Batch{}, err
		}
		payload = buf
	}
	if b.Codec == CodecS2 {
		// The block's own length prefix must announce exactly rawLen before
		// anything is allocated; s2.Decode then fills exactly that buffer
		// (it fails unless the block decodes to its announced length).
		if dl, err := s2.DecodedLen(stored); err != nil || dl != b.RawBytes {
			return Batch{}, fmt.Errorf("%w: s2 payload announces %d bytes (%v), raw length %d", ErrCorrupt, dl, err, b.RawBytes)
		}
		buf := make([]byte, b.RawBytes)
		out, err := s2.Decode(buf, stored)
		if err != nil || len(out) != b.RawBytes || (len(out) > 0 && &out[0] != &buf[0]) {
			return Batch{}, fmt.Errorf("%w: s2 payload does not inflate to its %d raw bytes: %v", ErrCorrupt, b.RawBytes, err)
		}
		payload = buf
	}
	entries := make([][]byte, 0, b.Count)
	p := payload
	for i := 0; i < b.Count; i++ {
		l, k := binary.Uvarint(p)
		if k <= 0 || l > uint64(len(p)-k) {
			return Batch{}, fmt.Errorf("%w: batch entry %d: bad length", ErrCorrupt, i)
		}
		if k != uvarintLen(l) {
			// binary.Uvarint takes padded prefixes (0x8a 0x00 for 10);
			// no writer makes them, and a batch must have one encoding.
			return Batch{}, fmt.Errorf("%w: batch entry %d: length prefix of %d bytes for %d", ErrCorrupt, i, k, l)
		}
		entries = append(entries, p[k:k+int(l):k+int(l)])
		p = p[k+int(l):]
	}
	if len(p) != 0 {
		return Batch{}, fmt.Errorf("%w: batch has %d trailing payload bytes after %d entries", ErrCorrupt, len(p), b.Count)
	}
	b.Entries = entries
	return b, nil
}

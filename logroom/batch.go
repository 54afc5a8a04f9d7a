package logroom

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"math"

	"github.com/vmihailenco/msgpack/v5"
)

// BatchFormatVersion is the only batch format version this package writes
// and reads. A batch with another version is corrupt to this reader.
const BatchFormatVersion = 1

const (
	// HardMaxBatchBytes is the largest encoded batch a Writer may produce: a
	// batch travels in one Multi that must stay below ZooKeeper's default
	// jute.maxbuffer (1 MiB), with margin for the path and the fence op.
	HardMaxBatchBytes = 900 << 10

	// batchOverhead bounds the encoded size of everything but the entries:
	// array header 1 + version 1 + epoch 9 + first 9 + count 9 + crc 5 +
	// bin32 header 5 = 39, rounded up.
	batchOverhead = 48

	batchFields = 6
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
	CRC     uint32
	// Entries alias the decoded input; they are valid as long as it is.
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

// EncodeBatch encodes entries as one batch znode: a msgpack array
// [version, epoch, first, count, crc32c, payload] where payload is one bin
// holding each entry as uvarint(len) followed by its bytes.
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

// DecodeBatch decodes and verifies one batch znode. Any problem (malformed
// msgpack, unknown version, count or length mismatch, checksum mismatch)
// yields an error wrapping ErrCorrupt. It never panics, and it allocates
// O(len(data)) at most: the entry slice is only allocated after the count
// has been checked against the payload length, and entries alias data.
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
	if version != BatchFormatVersion {
		return b, fmt.Errorf("%w: unknown batch format version %d", ErrCorrupt, version)
	}
	if n != batchFields {
		return b, fmt.Errorf("%w: batch header: %d fields, want %d", ErrCorrupt, n, batchFields)
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
	plen, err := dec.DecodeBytesLen()
	if err != nil {
		return b, fmt.Errorf("%w: batch payload: %v", ErrCorrupt, err)
	}
	if plen < 0 || plen != rd.Len() {
		return b, fmt.Errorf("%w: batch payload of %d bytes, %d present", ErrCorrupt, plen, rd.Len())
	}
	payload := data[len(data)-plen:]
	// Every entry takes at least one byte (its length prefix): this bounds
	// the allocation below by the input size.
	if count > uint64(plen) {
		return b, fmt.Errorf("%w: batch count %d exceeds payload of %d bytes", ErrCorrupt, count, plen)
	}
	if b.First == 0 || b.First+count < b.First {
		return b, fmt.Errorf("%w: batch first index %d with %d entries out of range", ErrCorrupt, b.First, count)
	}
	b.Count = int(count)
	if crc > math.MaxUint32 || uint32(crc) != batchCRC(b.Epoch, b.First, b.Count, payload) {
		return b, fmt.Errorf("%w: batch checksum mismatch", ErrCorrupt)
	}
	b.CRC = uint32(crc)
	entries := make([][]byte, 0, b.Count)
	p := payload
	for i := 0; i < b.Count; i++ {
		l, k := binary.Uvarint(p)
		if k <= 0 || l > uint64(len(p)-k) {
			return Batch{}, fmt.Errorf("%w: batch entry %d: bad length", ErrCorrupt, i)
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

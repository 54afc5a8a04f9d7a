package archive

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/roomlog/roomlog/logroom"
)

// Channel item file (doc.go, "Channel items"):
//
//	magic "RLARCH01"
//	u32 header length, header JSON (channelHeader)
//	u32 meta length, meta bytes
//	per batch: i64 ctime, u32 length, data
//	magic "RLAREND1", 32-byte SHA-256 of every byte before it
//
// Integers are big-endian.
var (
	chanMagic = []byte("RLARCH01")
	endMagic  = []byte("RLAREND1")
)

const (
	channelFormat = 1
	// Limits that keep a corrupt length from allocating much.
	maxHeaderBytes = 1 << 20
	maxMetaBytes   = 1 << 20
	maxBatchBytes  = 64 << 20
	maxBatches     = 1 << 22
)

// channelHeader is the JSON header of a channel item.
type channelHeader struct {
	Format    int
	Room      string
	RoomCzxid int64
	// Fence is the incarnation's epoch znode name, omitted for "epoch"
	// (so such items are v0.1.0's, byte for byte).
	Fence       string `json:",omitempty"`
	Channel     uint64
	First, Last uint64
	Epoch       uint64
	RoomVersion int
	Batches     int
	Bytes       int64 // batch data bytes
	// FirstTime and LastTime are the first and last batch's Ctime (unix
	// ms; 0 for a channel without batches).
	FirstTime, LastTime int64
	// Content is the hex SHA-256 of what identifies the channel's content
	// (contentSum): origin, range, epoch and every batch with its ctime,
	// but not the meta bytes (DeleteChannel's mark changes those). Two
	// puts under one key are the same item iff their Content matches.
	Content string
}

// contentSum is channelHeader.Content for ch.
func contentSum(ch Channel) string {
	h := sha256.New()
	var b [8]byte
	put := func(v uint64) { binary.BigEndian.PutUint64(b[:], v); h.Write(b[:]) }
	h.Write([]byte(ch.Origin.Room))
	put(uint64(ch.Origin.RoomCzxid))
	if f := fenceField(ch.Origin.Fence); f != "" { // "epoch": v0.1.0's sum
		put(uint64(len(f)))
		h.Write([]byte(f))
	}
	put(ch.Num)
	put(ch.First)
	put(ch.Last)
	put(ch.Epoch)
	put(uint64(len(ch.Batches)))
	for _, bt := range ch.Batches {
		put(uint64(bt.Ctime))
		put(uint64(len(bt.Data)))
		h.Write(bt.Data)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// checkChannel checks that ch's batches decode and run from First to Last
// without gap, in non-decreasing epochs. It returns an error wrapping
// ErrCorrupt that names the batch.
func checkChannel(ch Channel) error {
	if ch.First == 0 || ch.Last+1 < ch.First {
		return fmt.Errorf("%w: channel %d: range %d..%d", ErrCorrupt, ch.Num, ch.First, ch.Last)
	}
	if len(ch.Batches) > maxBatches {
		return fmt.Errorf("%w: channel %d: %d batches, limit %d", ErrCorrupt, ch.Num, len(ch.Batches), maxBatches)
	}
	next := ch.First
	var epoch uint64
	for i, bt := range ch.Batches {
		b, err := logroom.DecodeBatch(bt.Data)
		switch {
		case err != nil:
		case b.First != next:
			err = fmt.Errorf("first index %d, expected %d", b.First, next)
		case b.Count == 0:
			err = errors.New("empty batch")
		case b.Epoch < epoch:
			err = fmt.Errorf("epoch %d below the previous batch's %d", b.Epoch, epoch)
		case b.Last() > ch.Last:
			err = fmt.Errorf("ends at %d, past the channel's last index %d", b.Last(), ch.Last)
		}
		if err != nil {
			return fmt.Errorf("%w: channel %d batch %d (%s): %v", ErrCorrupt, ch.Num, i, logroom.BatchName(next), err)
		}
		epoch = b.Epoch
		next = b.Last() + 1
	}
	if next != ch.Last+1 {
		return fmt.Errorf("%w: channel %d: batches end at %d, the channel at %d", ErrCorrupt, ch.Num, next-1, ch.Last)
	}
	return nil
}

// encodeChannel encodes a checked channel as an item file.
func encodeChannel(ch Channel) ([]byte, channelHeader, error) {
	h := channelHeader{Format: channelFormat, Room: ch.Origin.Room, RoomCzxid: ch.Origin.RoomCzxid, Fence: fenceField(ch.Origin.Fence),
		Channel: ch.Num, First: ch.First, Last: ch.Last, Epoch: ch.Epoch, RoomVersion: ch.RoomVersion,
		Batches: len(ch.Batches), Content: contentSum(ch)}
	size := len(chanMagic) + 8 + len(ch.Meta) + len(endMagic) + sha256.Size + 1024
	for _, b := range ch.Batches {
		h.Bytes += int64(len(b.Data))
		size += 12 + len(b.Data)
	}
	if n := len(ch.Batches); n > 0 {
		h.FirstTime, h.LastTime = ch.Batches[0].Ctime, ch.Batches[n-1].Ctime
	}
	hb, err := json.Marshal(h)
	if err != nil {
		return nil, h, fmt.Errorf("archive: encode channel header: %w", err)
	}
	if len(ch.Meta) > maxMetaBytes {
		return nil, h, fmt.Errorf("archive: channel %d meta of %d bytes, limit %d", ch.Num, len(ch.Meta), maxMetaBytes)
	}
	out := make([]byte, 0, size+len(hb))
	out = append(out, chanMagic...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(hb)))
	out = append(out, hb...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(ch.Meta)))
	out = append(out, ch.Meta...)
	for _, b := range ch.Batches {
		if len(b.Data) > maxBatchBytes {
			return nil, h, fmt.Errorf("archive: channel %d: a batch of %d bytes, limit %d", ch.Num, len(b.Data), maxBatchBytes)
		}
		out = binary.BigEndian.AppendUint64(out, uint64(b.Ctime))
		out = binary.BigEndian.AppendUint32(out, uint32(len(b.Data)))
		out = append(out, b.Data...)
	}
	out = append(out, endMagic...)
	sum := sha256.Sum256(out)
	return append(out, sum[:]...), h, nil
}

// decodeChannel parses and verifies an item file read from path. Every
// failure wraps ErrCorrupt and names path. It never panics and allocates
// in proportion to data.
func decodeChannel(path string, data []byte) (Channel, channelHeader, error) {
	bad := func(format string, args ...any) (Channel, channelHeader, error) {
		return Channel{}, channelHeader{}, fmt.Errorf("%w: %s: %s", ErrCorrupt, path, fmt.Sprintf(format, args...))
	}
	trailer := len(endMagic) + sha256.Size
	if len(data) < len(chanMagic)+trailer || !bytes.Equal(data[:len(chanMagic)], chanMagic) {
		return bad("not a channel item (%d bytes; truncated, or no magic)", len(data))
	}
	body, tail := data[:len(data)-sha256.Size], data[len(data)-sha256.Size:]
	if !bytes.Equal(body[len(body)-len(endMagic):], endMagic) {
		return bad("no end marker: truncated")
	}
	if sum := sha256.Sum256(body); !bytes.Equal(sum[:], tail) {
		return bad("sha256 %x, the item records %x", sum[:8], tail[:8])
	}
	p := body[len(chanMagic) : len(body)-len(endMagic)]
	take := func(n int) ([]byte, bool) {
		if n < 0 || n > len(p) {
			return nil, false
		}
		b := p[:n]
		p = p[n:]
		return b, true
	}
	u32 := func() (int, bool) {
		b, ok := take(4)
		if !ok {
			return 0, false
		}
		return int(binary.BigEndian.Uint32(b)), true
	}
	n, ok := u32()
	if !ok || n > maxHeaderBytes {
		return bad("bad header length")
	}
	hb, ok := take(n)
	if !ok {
		return bad("header truncated")
	}
	var h channelHeader
	dec := json.NewDecoder(bytes.NewReader(hb))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&h); err != nil {
		return bad("header: %v", err)
	}
	if h.Format != channelFormat {
		return bad("format %d, this binary reads %d", h.Format, channelFormat)
	}
	if !validFenceField(h.Fence) {
		return bad("epoch znode name %q", h.Fence)
	}
	if h.Batches < 0 || h.Batches > maxBatches || h.Batches > len(p)/12 {
		return bad("header says %d batches", h.Batches)
	}
	if n, ok = u32(); !ok || n > maxMetaBytes {
		return bad("bad meta length")
	}
	meta, ok := take(n)
	if !ok {
		return bad("meta truncated")
	}
	ch := Channel{Origin: Origin{Room: h.Room, RoomCzxid: h.RoomCzxid, Fence: fenceOf(h.Fence)}, Num: h.Channel, First: h.First, Last: h.Last,
		Epoch: h.Epoch, RoomVersion: h.RoomVersion, Meta: meta, Batches: make([]Batch, 0, h.Batches)}
	var total int64
	for i := 0; i < h.Batches; i++ {
		tb, ok := take(8)
		if !ok {
			return bad("batch %d truncated", i)
		}
		n, ok := u32()
		if !ok || n > maxBatchBytes {
			return bad("batch %d: bad length", i)
		}
		d, ok := take(n)
		if !ok {
			return bad("batch %d truncated", i)
		}
		total += int64(n)
		ch.Batches = append(ch.Batches, Batch{Data: d, Ctime: int64(binary.BigEndian.Uint64(tb))})
	}
	if len(p) != 0 {
		return bad("%d bytes after the last batch", len(p))
	}
	if total != h.Bytes {
		return bad("batches hold %d bytes, the header says %d", total, h.Bytes)
	}
	if err := checkChannel(ch); err != nil {
		return Channel{}, channelHeader{}, fmt.Errorf("%s: %w", path, err)
	}
	if c := contentSum(ch); c != h.Content {
		return bad("content sum %.16s, the header says %.16s", c, h.Content)
	}
	return ch, h, nil
}

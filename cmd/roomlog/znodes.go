package main

import (
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/vmihailenco/msgpack/v5"
)

// The znode formats below are read, never written. logroom and replica keep
// their meta structs unexported; these mirror the formats their doc.go files
// specify (logroom: room, epoch, channel; replica: members, election,
// transfer, checkpoints). A format version other than 1 is refused.

// Names under a room (logroom/doc.go, replica/doc.go).
const (
	epochNode       = "epoch"
	channelsNode    = "channels"
	membersNode     = "members"
	electionNode    = "election"
	transferNode    = "transfer"
	checkpointsNode = "checkpoints"

	channelPrefix   = "ch-"
	batchPrefix     = "b-"
	candidatePrefix = "c-"
	numDigits       = 20
	guidHexLen      = 32

	formatVersion = 1
)

// errFormat marks znode data that does not decode as its documented format.
var errFormat = errors.New("malformed znode data")

// roomMeta is <base>/R: msgpack {v: 1, created: unix ms}.
type roomMeta struct {
	V       int   `msgpack:"v"`
	Created int64 `msgpack:"created"`
}

// epochMeta is <base>/R/epoch: msgpack {v: 1, epoch, owner, nonce}.
type epochMeta struct {
	V     int    `msgpack:"v"`
	Epoch uint64 `msgpack:"epoch"`
	Owner string `msgpack:"owner"`
	Nonce uint64 `msgpack:"nonce"`
}

// channelMeta is <base>/R/channels/ch-N: msgpack {v: 1, first, epoch,
// sealed, last, bytes, batches, deleting}. Last, Bytes and Batches are set
// when sealed; Deleting (omitted unless set) marks a sealed channel whose
// batches DeleteChannel is removing.
type channelMeta struct {
	V        int    `msgpack:"v"`
	First    uint64 `msgpack:"first"`
	Epoch    uint64 `msgpack:"epoch"`
	Sealed   bool   `msgpack:"sealed"`
	Last     uint64 `msgpack:"last"`
	Bytes    int64  `msgpack:"bytes"`
	Batches  int    `msgpack:"batches"`
	Deleting bool   `msgpack:"deleting,omitempty"`
}

// memberData is <base>/R/members/<id> (EPHEMERAL): msgpack {v: 1, id,
// addr, role, epoch, applied, ckpt}.
type memberData struct {
	V          int    `msgpack:"v"`
	ID         string `msgpack:"id"`
	Addr       string `msgpack:"addr"`
	Role       string `msgpack:"role"`
	Epoch      uint64 `msgpack:"epoch"`
	Applied    uint64 `msgpack:"applied"`
	Checkpoint uint64 `msgpack:"ckpt"`
}

// candidateData is <base>/R/election/c-<guid>-<seq>: msgpack {v: 1, id, addr}.
type candidateData struct {
	V    int    `msgpack:"v"`
	ID   string `msgpack:"id"`
	Addr string `msgpack:"addr"`
}

// transferRecord is <base>/R/transfer (EPHEMERAL): msgpack {v: 1, from, to,
// epoch, deadline (unix ms)}.
type transferRecord struct {
	V        int    `msgpack:"v"`
	From     string `msgpack:"from"`
	To       string `msgpack:"to"`
	Epoch    uint64 `msgpack:"epoch"`
	Deadline int64  `msgpack:"deadline"`
}

// checkpointRecord is <base>/R/checkpoints: msgpack {v: 1, index, epoch, id,
// addr, created (unix ms)}, the newest checkpoint the primary recorded.
type checkpointRecord struct {
	V       int    `msgpack:"v"`
	Index   uint64 `msgpack:"index"`
	Epoch   uint64 `msgpack:"epoch"`
	ID      string `msgpack:"id"`
	Addr    string `msgpack:"addr"`
	Created int64  `msgpack:"created"`
}

// maxMetaFields bounds the entries of a meta map (the formats have <= 8).
const maxMetaFields = 64

// checkFlatMap verifies that data is exactly one msgpack map of at most
// maxMetaFields entries whose keys and values are scalars (nil, bool,
// numbers, str, bin) whose lengths fit in the input. Every format the tool
// reads is such a map, and decoding one that passes allocates O(len(data))
// without recursion; msgpack/v5 alone would allocate up to 1 MiB per
// declared length, a few MiB for a 10-byte header, and recurse once per
// nesting level of an unknown field.
func checkFlatMap(data []byte) error {
	if len(data) == 0 {
		return errors.New("empty")
	}
	p := 1
	var n uint64
	switch c := data[0]; {
	case c >= 0x80 && c <= 0x8f:
		n = uint64(c & 0x0f)
	case c == 0xde && len(data) >= 3:
		n, p = uint64(data[1])<<8|uint64(data[2]), 3
	case c == 0xdf && len(data) >= 5:
		n, p = uint64(data[1])<<24|uint64(data[2])<<16|uint64(data[3])<<8|uint64(data[4]), 5
	default:
		return fmt.Errorf("not a msgpack map (type byte 0x%02x)", c)
	}
	if n > maxMetaFields {
		return fmt.Errorf("map of %d entries, at most %d", n, maxMetaFields)
	}
	be := func(b []byte) uint64 {
		var v uint64
		for _, x := range b {
			v = v<<8 | uint64(x)
		}
		return v
	}
	for i := uint64(0); i < 2*n; i++ {
		if p >= len(data) {
			return fmt.Errorf("truncated at byte %d", p)
		}
		c := data[p]
		var size uint64 // bytes of the value after its type byte
		w := 0          // width of a str/bin length
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c == 0xcc || c == 0xd0:
			size = 1
		case c == 0xcd || c == 0xd1:
			size = 2
		case c == 0xce || c == 0xd2 || c == 0xca:
			size = 4
		case c == 0xcf || c == 0xd3 || c == 0xcb:
			size = 8
		case c >= 0xa0 && c <= 0xbf:
			size = uint64(c & 0x1f)
		case c == 0xd9 || c == 0xc4:
			w = 1
		case c == 0xda || c == 0xc5:
			w = 2
		case c == 0xdb || c == 0xc6:
			w = 4
		default:
			return fmt.Errorf("unexpected msgpack type byte 0x%02x at byte %d (not a scalar)", c, p)
		}
		if w > 0 {
			if p+1+w > len(data) {
				return fmt.Errorf("truncated at byte %d", p)
			}
			size = uint64(w) + be(data[p+1:p+1+w])
		}
		if size > uint64(len(data)-p-1) {
			return fmt.Errorf("value at byte %d claims %d bytes, %d remain", p, size, len(data)-p-1)
		}
		p += 1 + int(size)
	}
	if p != len(data) {
		return fmt.Errorf("%d trailing bytes", len(data)-p)
	}
	return nil
}

// decodeVersioned unmarshals data into v and checks its format version.
// what names the format in the error.
func decodeVersioned(data []byte, v any, version func() int, what string) error {
	if err := checkFlatMap(data); err != nil {
		return fmt.Errorf("%w: %s: %v", errFormat, what, err)
	}
	if err := msgpack.Unmarshal(data, v); err != nil {
		return fmt.Errorf("%w: %s: %v", errFormat, what, err)
	}
	if got := version(); got != formatVersion {
		return fmt.Errorf("%w: %s: unknown format version %d", errFormat, what, got)
	}
	return nil
}

func decodeRoomMeta(data []byte) (roomMeta, error) {
	var m roomMeta
	err := decodeVersioned(data, &m, func() int { return m.V }, "room meta")
	return m, err
}

func decodeEpochMeta(data []byte) (epochMeta, error) {
	var m epochMeta
	err := decodeVersioned(data, &m, func() int { return m.V }, "epoch meta")
	return m, err
}

// decodeChannelMeta also checks the bounds logroom enforces: first >= 1 and,
// when sealed, last >= first-1.
func decodeChannelMeta(data []byte) (channelMeta, error) {
	var m channelMeta
	if err := decodeVersioned(data, &m, func() int { return m.V }, "channel meta"); err != nil {
		return m, err
	}
	if m.First == 0 || (m.Sealed && m.Last+1 < m.First) {
		return m, fmt.Errorf("%w: channel meta: first %d last %d sealed %v", errFormat, m.First, m.Last, m.Sealed)
	}
	if m.Sealed && (m.Bytes < 0 || m.Batches < 0) {
		return m, fmt.Errorf("%w: channel meta: %d bytes, %d batches", errFormat, m.Bytes, m.Batches)
	}
	return m, nil
}

func decodeMember(data []byte) (memberData, error) {
	var m memberData
	err := decodeVersioned(data, &m, func() int { return m.V }, "member data")
	return m, err
}

func decodeCandidate(data []byte) (candidateData, error) {
	var m candidateData
	err := decodeVersioned(data, &m, func() int { return m.V }, "election candidate")
	return m, err
}

func decodeTransfer(data []byte) (transferRecord, error) {
	var m transferRecord
	err := decodeVersioned(data, &m, func() int { return m.V }, "transfer record")
	return m, err
}

func decodeCheckpointRecord(data []byte) (checkpointRecord, error) {
	var m checkpointRecord
	err := decodeVersioned(data, &m, func() int { return m.V }, "checkpoint record")
	return m, err
}

func channelName(num uint64) string { return fmt.Sprintf("%s%0*d", channelPrefix, numDigits, num) }
func batchName(first uint64) string { return fmt.Sprintf("%s%0*d", batchPrefix, numDigits, first) }

// parseNum parses "<prefix>%020d"; ok is false for any other name.
func parseNum(name, prefix string) (uint64, bool) {
	if len(name) != len(prefix)+numDigits || !strings.HasPrefix(name, prefix) {
		return 0, false
	}
	digits := name[len(prefix):]
	for i := 0; i < len(digits); i++ {
		if digits[i] < '0' || digits[i] > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, false
	}
	return n, true
}

// parseCandidateSeq parses an election child "c-<32 hex>-<seq>" and returns
// its sequence number (ZooKeeper's suffix, parsed as an integer).
func parseCandidateSeq(name string) (int64, bool) {
	rest, ok := strings.CutPrefix(name, candidatePrefix)
	if !ok || len(rest) < guidHexLen+2 || rest[guidHexLen] != '-' {
		return 0, false
	}
	for _, r := range rest[:guidHexLen] {
		if !strings.ContainsRune("0123456789abcdefABCDEF", r) {
			return 0, false
		}
	}
	seq, err := strconv.ParseInt(rest[guidHexLen+1:], 10, 64)
	if err != nil {
		return 0, false
	}
	return seq, true
}

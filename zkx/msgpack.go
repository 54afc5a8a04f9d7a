package zkx

import (
	"encoding/binary"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Decode unmarshals msgpack data read from a znode (input, not truth) into
// v after CheckMsgpack(data, maxDepth) passed, so that decoding allocates
// O(len(data)) and cannot recurse deeply whatever the input. The error
// says what is wrong with data and wraps no sentinel: callers wrap it in
// their own (e.g. "%w: %v" with their malformed-data error).
func Decode(data []byte, v any, maxDepth int) error {
	if err := CheckMsgpack(data, maxDepth); err != nil {
		return err
	}
	return msgpack.Unmarshal(data, v)
}

// CheckMsgpack verifies that data holds exactly one msgpack value, nested at
// most maxDepth deep, whose every declared length (string, bin, ext, array,
// map) fits in the bytes that remain. Decoding a value that passes it
// allocates O(len(data)) and cannot recurse deeply, whatever the input: run
// it on znode data (input, not truth) before msgpack.Unmarshal.
func CheckMsgpack(data []byte, maxDepth int) error {
	// pending[i] counts the values still expected at nesting level i.
	pending := []uint64{1}
	p := 0
	for len(pending) > 0 {
		top := len(pending) - 1
		if pending[top] == 0 {
			pending = pending[:top]
			continue
		}
		pending[top]--
		if p >= len(data) {
			return fmt.Errorf("truncated msgpack at byte %d", p)
		}
		rest := uint64(len(data) - p - 1)
		c := data[p]
		p++
		var skip, n uint64 // bytes to skip; elements of a container
		container := false
		switch {
		case c <= 0x7f || c >= 0xe0 || c == 0xc0 || c == 0xc2 || c == 0xc3:
		case c >= 0x80 && c <= 0x8f:
			n, container = 2*uint64(c&0x0f), true
		case c >= 0x90 && c <= 0x9f:
			n, container = uint64(c&0x0f), true
		case c >= 0xa0 && c <= 0xbf:
			skip = uint64(c & 0x1f)
		default:
			var w int // width of a length field
			switch c {
			case 0xc4, 0xc7, 0xd9:
				w = 1
			case 0xc5, 0xc8, 0xda, 0xdc, 0xde:
				w = 2
			case 0xc6, 0xc9, 0xdb, 0xdd, 0xdf:
				w = 4
			case 0xcc, 0xd0:
				skip = 1
			case 0xcd, 0xd1:
				skip = 2
			case 0xca, 0xce, 0xd2:
				skip = 4
			case 0xcb, 0xcf, 0xd3:
				skip = 8
			case 0xd4, 0xd5, 0xd6, 0xd7, 0xd8:
				skip = 1 + 1<<(c-0xd4) // type byte + 1, 2, 4, 8 or 16 data bytes
			default:
				return fmt.Errorf("invalid msgpack code %#x at byte %d", c, p-1)
			}
			if w > 0 {
				if uint64(w) > rest {
					return fmt.Errorf("truncated msgpack length at byte %d", p)
				}
				var l uint64
				switch w {
				case 1:
					l = uint64(data[p])
				case 2:
					l = uint64(binary.BigEndian.Uint16(data[p:]))
				case 4:
					l = uint64(binary.BigEndian.Uint32(data[p:]))
				}
				p += w
				rest -= uint64(w)
				switch c {
				case 0xdc, 0xdd:
					n, container = l, true
				case 0xde, 0xdf:
					n, container = 2*l, true
				case 0xc7, 0xc8, 0xc9:
					skip = 1 + l // ext type byte + data
				default:
					skip = l
				}
			}
		}
		if container {
			// Every element takes at least one byte.
			if n > rest {
				return fmt.Errorf("msgpack container of %d values at byte %d, %d bytes remain", n, p, rest)
			}
			if len(pending) > maxDepth {
				return fmt.Errorf("msgpack nested deeper than %d", maxDepth)
			}
			pending = append(pending, n)
			continue
		}
		if skip > uint64(len(data)-p) {
			return fmt.Errorf("msgpack value of %d bytes at byte %d, %d remain", skip, p, len(data)-p)
		}
		p += int(skip)
	}
	if p != len(data) {
		return fmt.Errorf("%d trailing bytes after the msgpack value", len(data)-p)
	}
	return nil
}

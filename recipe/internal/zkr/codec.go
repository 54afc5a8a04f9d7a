package zkr

import (
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/roomlog/roomlog/zkx"
)

// MaxDepth bounds the msgpack nesting of recipe znode data: every format is
// a flat map.
const MaxDepth = 4

// ErrBadData: znode data that does not decode.
var ErrBadData = errors.New("malformed znode data")

// Encode marshals a recipe record (fixed, encodable structs only).
func Encode(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("zkr: msgpack encode %T: %v", v, err))
	}
	return b
}

// Decode unmarshals znode data (input, not truth) with zkx.Decode: it
// first checks that b holds exactly one msgpack value, nested at most
// MaxDepth deep, whose every declared length fits in b, so decoding
// allocates O(len(b)).
func Decode(b []byte, v any) error {
	if err := zkx.Decode(b, v, MaxDepth); err != nil {
		return fmt.Errorf("%w: %v", ErrBadData, err)
	}
	return nil
}

package zkr

import (
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"

	"github.com/roomlog/roomlog/logroom"
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

// Decode unmarshals znode data (input, not truth) after checking that it
// holds exactly one msgpack value, nested at most MaxDepth deep, whose
// every declared length fits in b: decoding then allocates O(len(b)).
func Decode(b []byte, v any) error {
	if err := logroom.CheckMsgpack(b, MaxDepth); err != nil {
		return fmt.Errorf("%w: %v", ErrBadData, err)
	}
	if err := msgpack.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%w: %v", ErrBadData, err)
	}
	return nil
}

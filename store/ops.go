package store

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// OpKind is the kind of one operation of the built-in ops model.
type OpKind uint8

// The operations of the built-in model. The numeric values are part of the
// encoding (see EncodeOps) and never change.
const (
	OpSet         OpKind = 1 // set Key to Value
	OpDelete      OpKind = 2 // delete Key (absent: no-op)
	OpDeleteRange OpKind = 3 // delete every key in [Key, End)
)

// String returns the name of the kind.
func (k OpKind) String() string {
	switch k {
	case OpSet:
		return "set"
	case OpDelete:
		return "delete"
	case OpDeleteRange:
		return "delete-range"
	default:
		return fmt.Sprintf("OpKind(%d)", uint8(k))
	}
}

// Op is one operation on the user keyspace. Value is used by OpSet only,
// End by OpDeleteRange only.
type Op struct {
	Kind  OpKind
	Key   []byte
	Value []byte
	End   []byte
}

// opsFormatVersion is the first element of every encoded ops entry.
const opsFormatVersion = 1

// Validate reports why op cannot be applied (ErrInvalid), or nil.
func (op Op) Validate() error {
	switch op.Kind {
	case OpSet, OpDelete:
		if len(op.Key) == 0 {
			return fmt.Errorf("%w: %s with an empty key", ErrInvalid, op.Kind)
		}
	case OpDeleteRange:
		if len(op.Key) == 0 {
			return fmt.Errorf("%w: delete-range with an empty start key", ErrInvalid)
		}
		if bytes.Compare(op.Key, op.End) >= 0 {
			return fmt.Errorf("%w: delete-range start %q >= end %q", ErrInvalid, op.Key, op.End)
		}
	default:
		return fmt.Errorf("%w: unknown op kind %d", ErrInvalid, uint8(op.Kind))
	}
	return nil
}

// EncodeOps encodes ops as one entry of the built-in model:
//
//	msgpack array [formatVersion=1, [op, op, ...]]
//	op = msgpack array [kind uint, key bin, arg bin|nil]
//
// where arg is Value for OpSet, End for OpDeleteRange and nil for OpDelete.
// Every op is validated first (ErrInvalid).
func EncodeOps(ops []Op) ([]byte, error) {
	size := 8
	for i, op := range ops {
		if err := op.Validate(); err != nil {
			return nil, fmt.Errorf("store: op %d: %w", i, err)
		}
		size += 16 + len(op.Key) + len(op.Value) + len(op.End)
	}
	var buf bytes.Buffer
	buf.Grow(size)
	enc := msgpack.NewEncoder(&buf)
	// Writes to a bytes.Buffer cannot fail; the encoder's errors are still checked.
	err := enc.EncodeArrayLen(2)
	err = errors.Join(err, enc.EncodeUint(opsFormatVersion), enc.EncodeArrayLen(len(ops)))
	for _, op := range ops {
		err = errors.Join(err, enc.EncodeArrayLen(3), enc.EncodeUint(uint64(op.Kind)), enc.EncodeBytes(op.Key))
		switch op.Kind {
		case OpSet:
			v := op.Value
			if v == nil {
				v = []byte{}
			}
			err = errors.Join(err, enc.EncodeBytes(v))
		case OpDeleteRange:
			err = errors.Join(err, enc.EncodeBytes(op.End))
		default:
			err = errors.Join(err, enc.EncodeNil())
		}
	}
	if err != nil {
		return nil, fmt.Errorf("store: encode ops: %w", err)
	}
	return buf.Bytes(), nil
}

// DecodeOps decodes an entry written by EncodeOps. Malformed input (wrong
// version, truncation, trailing bytes, invalid ops) returns an error wrapping
// ErrInvalid; it never panics, and allocation is bounded by len(b).
func DecodeOps(b []byte) ([]Op, error) {
	ops, err := decodeOps(b)
	if err != nil {
		return nil, fmt.Errorf("store: decode ops: %w: %w", ErrInvalid, err)
	}
	return ops, nil
}

func decodeOps(b []byte) ([]Op, error) {
	r := bytes.NewReader(b)
	dec := msgpack.NewDecoder(r)
	n, err := dec.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	if n != 2 {
		return nil, fmt.Errorf("top-level array has %d elements, want 2", n)
	}
	ver, err := dec.DecodeUint64()
	if err != nil {
		return nil, err
	}
	if ver != opsFormatVersion {
		return nil, fmt.Errorf("unknown format version %d", ver)
	}
	count, err := dec.DecodeArrayLen()
	if err != nil {
		return nil, err
	}
	// Every op takes at least 4 bytes (array header, kind, key, arg), so a
	// count beyond that is a lie: refuse it before allocating.
	if count < 0 || count > r.Len()/4 {
		return nil, fmt.Errorf("op count %d exceeds the %d bytes left", count, r.Len())
	}
	ops := make([]Op, 0, count)
	for i := 0; i < count; i++ {
		if l, err := dec.DecodeArrayLen(); err != nil {
			return nil, fmt.Errorf("op %d: %w", i, err)
		} else if l != 3 {
			return nil, fmt.Errorf("op %d has %d elements, want 3", i, l)
		}
		kind, err := dec.DecodeUint64()
		if err != nil {
			return nil, fmt.Errorf("op %d kind: %w", i, err)
		}
		if kind > 255 {
			return nil, fmt.Errorf("op %d: unknown kind %d", i, kind)
		}
		op := Op{Kind: OpKind(kind)}
		if op.Key, err = decodeBin(dec, r); err != nil {
			return nil, fmt.Errorf("op %d key: %w", i, err)
		}
		arg, err := decodeBin(dec, r)
		if err != nil {
			return nil, fmt.Errorf("op %d arg: %w", i, err)
		}
		switch op.Kind {
		case OpSet:
			if arg == nil {
				arg = []byte{}
			}
			op.Value = arg
		case OpDeleteRange:
			op.End = arg
		case OpDelete:
			if arg != nil {
				return nil, fmt.Errorf("op %d: delete with an argument", i)
			}
		}
		if err := op.Validate(); err != nil {
			return nil, fmt.Errorf("op %d: %w", i, err)
		}
		ops = append(ops, op)
	}
	if r.Len() != 0 {
		return nil, fmt.Errorf("%d trailing bytes", r.Len())
	}
	return ops, nil
}

// decodeBin decodes a msgpack bin/str (nil: nil) whose declared length must
// fit in what is left of r, so a lying length allocates nothing. dec reads
// r directly (a bytes.Reader is an io.ByteScanner: the decoder does not
// buffer ahead), so r.Len() is exactly what is left.
func decodeBin(dec *msgpack.Decoder, r *bytes.Reader) ([]byte, error) {
	n, err := dec.DecodeBytesLen()
	if err != nil {
		return nil, err
	}
	if n == -1 {
		return nil, nil
	}
	if n < 0 || n > r.Len() {
		return nil, fmt.Errorf("byte string of %d bytes, %d left", n, r.Len())
	}
	b := make([]byte, n)
	if err := dec.ReadFull(b); err != nil {
		return nil, err
	}
	return b, nil
}

// OpsApplier is the built-in Applier: every entry's Data is EncodeOps output.
//
// An entry that does not decode, or holds an invalid op, is a deterministic
// rejection: nothing of it is written, and its response is the text
// "rejected: <reason>" (see OpsResult). With Strict set, such an entry is an
// error instead, which aborts the Apply call (and stops a replica).
// A valid entry's response is empty.
type OpsApplier struct {
	// Strict turns a malformed entry into an Apply error instead of a rejection.
	Strict bool
}

// opsRejectedPrefix starts the response of a rejected entry.
const opsRejectedPrefix = "rejected: "

// Apply implements Applier.
func (a OpsApplier) Apply(b Batch, e Entry) ([]byte, error) {
	ops, err := DecodeOps(e.Data)
	if err != nil {
		if a.Strict {
			return nil, err
		}
		return []byte(opsRejectedPrefix + err.Error()), nil
	}
	for i, op := range ops {
		switch op.Kind {
		case OpSet:
			err = b.Set(op.Key, op.Value)
		case OpDelete:
			err = b.Delete(op.Key)
		case OpDeleteRange:
			err = b.DeleteRange(op.Key, op.End)
		}
		if err != nil {
			// DecodeOps validated every op, so this is not a rejection.
			return nil, fmt.Errorf("op %d (%s): %w", i, op.Kind, err)
		}
	}
	return nil, nil
}

// OpsResult interprets a response of OpsApplier: nil when the entry was
// applied, an error wrapping ErrRejected when it was rejected.
func OpsResult(response []byte) error {
	if len(response) == 0 {
		return nil
	}
	msg := string(response)
	if len(msg) > len(opsRejectedPrefix) && msg[:len(opsRejectedPrefix)] == opsRejectedPrefix {
		msg = msg[len(opsRejectedPrefix):]
	}
	return fmt.Errorf("%w: %s", ErrRejected, msg)
}

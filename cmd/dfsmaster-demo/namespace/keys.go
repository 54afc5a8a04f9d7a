package namespace

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// RootID is the inode id of "/". It has no directory entry of its own.
const RootID uint64 = 1

// Key prefixes; see the key layout in doc.go.
var (
	keyNextInode = []byte("ns/m/next_inode")
	keyNextBlock = []byte("ns/m/next_block")
	prefixDirent = []byte("ns/d/")
	prefixBlock  = []byte("ns/b/")
)

// Prefix is the first byte string of every key the namespace writes: a
// caller sharing the store keeps its own keys outside it.
const Prefix = "ns/"

// recordVersion is the first byte of a directory-entry value.
const recordVersion byte = 1

// Type is the kind of an inode.
type Type uint8

// Inode types. Values are part of the stored format: never renumber.
const (
	TypeDir  Type = 1
	TypeFile Type = 2
)

func (t Type) String() string {
	switch t {
	case TypeDir:
		return "dir"
	case TypeFile:
		return "file"
	}
	return fmt.Sprintf("type(%d)", uint8(t))
}

// record is the value of a directory entry: everything about the child
// except its name (the key) and its blocks (their own keys).
type record struct {
	ID          uint64 `msgpack:"id"`
	Type        Type   `msgpack:"type"`
	Replication int    `msgpack:"replication,omitempty"` // files
	Size        int64  `msgpack:"size,omitempty"`        // files: sum of block sizes
	Blocks      int    `msgpack:"blocks,omitempty"`      // files: number of blocks
}

var rootRecord = record{ID: RootID, Type: TypeDir}

// ErrCorrupt marks a stored namespace record that cannot be decoded. It is a
// storage failure, not a rejection: the applier returns it as an error.
var ErrCorrupt = errors.New("namespace: corrupt record")

func encodeRecord(r record) ([]byte, error) {
	b, err := marshal(r)
	if err != nil {
		return nil, fmt.Errorf("namespace: encode record: %w", err)
	}
	return append([]byte{recordVersion}, b...), nil
}

func decodeRecord(key, val []byte) (record, error) {
	if len(val) == 0 || val[0] != recordVersion {
		return record{}, fmt.Errorf("%w: key %q: value of %d bytes without version %d", ErrCorrupt, key, len(val), recordVersion)
	}
	var r record
	if err := decodeStrict(val[1:], &r); err != nil {
		return record{}, fmt.Errorf("%w: key %q: %v", ErrCorrupt, key, err)
	}
	if (r.Type != TypeDir && r.Type != TypeFile) || r.ID <= RootID {
		return record{}, fmt.Errorf("%w: key %q: type %d id %d", ErrCorrupt, key, r.Type, r.ID)
	}
	return r, nil
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// direntKey is ns/d/<parent><name>.
func direntKey(parent uint64, name string) []byte {
	k := make([]byte, 0, len(prefixDirent)+8+len(name))
	k = append(k, prefixDirent...)
	k = binary.BigEndian.AppendUint64(k, parent)
	return append(k, name...)
}

// childrenRange is [lower, upper) holding every directory entry of dir.
func childrenRange(dir uint64) (lower, upper []byte) {
	return direntKey(dir, ""), direntKey(dir+1, "")
}

// nameOf returns the child name of a directory entry key of dir.
func nameOf(key []byte) string { return string(key[len(prefixDirent)+8:]) }

// blockKey is ns/b/<file><seq>.
func blockKey(file, seq uint64) []byte {
	k := make([]byte, 0, len(prefixBlock)+16)
	k = append(k, prefixBlock...)
	k = binary.BigEndian.AppendUint64(k, file)
	return binary.BigEndian.AppendUint64(k, seq)
}

// blocksRange is [lower, upper) holding every block of file.
func blocksRange(file uint64) (lower, upper []byte) {
	return blockKey(file, 0), blockKey(file+1, 0)
}

// Block is one block of a file.
type Block struct {
	ID   uint64 `json:"id"`
	Size int64  `json:"size"`
}

func encodeBlock(b Block) []byte {
	v := binary.BigEndian.AppendUint64(nil, b.ID)
	return binary.BigEndian.AppendUint64(v, uint64(b.Size))
}

func decodeBlock(key, val []byte) (Block, error) {
	if len(val) != 16 {
		return Block{}, fmt.Errorf("%w: block key %q: value of %d bytes (want 16)", ErrCorrupt, key, len(val))
	}
	return Block{ID: binary.BigEndian.Uint64(val), Size: int64(binary.BigEndian.Uint64(val[8:]))}, nil
}

package namespace

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/vmihailenco/msgpack/v5"
)

// Reader is what reads need from the store: a consistent view (store.View),
// the store itself, or an applier's batch. Get returns an error satisfying
// IsNotFound for a missing key; Scan visits [lower, upper) in key order and
// stops with fn's error.
type Reader interface {
	Get(key []byte) ([]byte, error)
	Scan(lower, upper []byte, fn func(key, value []byte) error) error
}

// Batch is the subset of store.Batch the applier writes through: reads see
// the batch's own earlier writes.
type Batch interface {
	Reader
	Set(key, value []byte) error
	Delete(key []byte) error
	DeleteRange(start, end []byte) error
}

// errStop ends a Scan early; it never leaves this package.
var errStop = errors.New("namespace: stop scan")

func marshal(v any) ([]byte, error) { return msgpack.Marshal(v) }

// lookup reads the directory entry name of dir.
func lookup(r Reader, dir uint64, name string) (rec record, ok bool, err error) {
	key := direntKey(dir, name)
	val, err := r.Get(key)
	if IsNotFound(err) {
		return record{}, false, nil
	}
	if err != nil {
		return record{}, false, fmt.Errorf("namespace: get %q: %w", key, err)
	}
	rec, err = decodeRecord(key, val)
	if err != nil {
		return record{}, false, err
	}
	return rec, true, nil
}

// hasChildren reports whether dir has at least one entry.
func hasChildren(r Reader, dir uint64) (bool, error) {
	lo, hi := childrenRange(dir)
	err := r.Scan(lo, hi, func(_, _ []byte) error { return errStop })
	switch {
	case errors.Is(err, errStop):
		return true, nil
	case err != nil:
		return false, fmt.Errorf("namespace: scan children of inode %d: %w", dir, err)
	}
	return false, nil
}

// counter reads a uint64 counter key, def when absent.
func counter(r Reader, key []byte, def uint64) (uint64, error) {
	val, err := r.Get(key)
	if IsNotFound(err) {
		return def, nil
	}
	if err != nil {
		return 0, fmt.Errorf("namespace: get %q: %w", key, err)
	}
	if len(val) != 8 {
		return 0, fmt.Errorf("%w: counter %q: value of %d bytes (want 8)", ErrCorrupt, key, len(val))
	}
	return binary.BigEndian.Uint64(val), nil
}

func setRecord(b Batch, dir uint64, name string, rec record) error {
	val, err := encodeRecord(rec)
	if err != nil {
		return err
	}
	key := direntKey(dir, name)
	if err := b.Set(key, val); err != nil {
		return fmt.Errorf("namespace: set %q: %w", key, err)
	}
	return nil
}

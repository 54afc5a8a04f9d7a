package testnode

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/roomlog/roomlog/store"
)

// RecordPrefix starts every key the RecordingApplier writes. Entries that
// tests propose must not touch keys with this prefix (OpsApplier entries on
// keys such as "p/..." never do).
const RecordPrefix = "\xfftestnode/applied/"

// recordLen is the encoded size of a record value (format 2):
// epoch (8) | count (4) | size (4) | sha256 (32) | request id (16, zero: none).
// Format 1 (48 bytes, without the request id) is not read any more: records
// live only in the stores of one test run's nodes, all built from the same
// source, so no store holds both formats. A record of another length is an
// error.
const recordLen = 8 + 4 + 4 + sha256.Size + len(store.RequestID{})

// Record is what the RecordingApplier stored for one applied index.
type Record struct {
	Index uint64 `json:"index"`
	Epoch uint64 `json:"epoch"`
	// Count is how many times an entry with this index was applied to this
	// store's state: 1, unless an entry was applied twice.
	Count uint32 `json:"count"`
	// Size is the entry's length in bytes.
	Size uint32 `json:"size"`
	// SHA256 is the lowercase hex SHA-256 of the entry's bytes: of the
	// payload (store.Entry.Data) for an entry in a request envelope.
	SHA256 string `json:"sha256"`
	// RequestID is the entry's request id (store.Entry.RequestID) in
	// lowercase hex, "" for an entry without one. An entry whose id was
	// already applied is deduplicated by the store and never reaches the
	// applier: its index has no record.
	RequestID string `json:"request_id,omitempty"`
}

// RecordingApplier wraps another Applier and, in the same batch as the
// wrapped applier's writes, stores a Record of the entry at key
// RecordKey(index). It is deterministic: the record depends only on the
// entry and on the state (the previous record of the same index, which
// exists only if an index is applied twice).
type RecordingApplier struct {
	// Inner produces the entry's effects and response. nil: store.OpsApplier{}.
	Inner store.Applier
}

// RecordKey is the key under which the record of index is stored.
func RecordKey(index uint64) []byte {
	k := make([]byte, len(RecordPrefix)+8)
	copy(k, RecordPrefix)
	binary.BigEndian.PutUint64(k[len(RecordPrefix):], index)
	return k
}

// EntrySHA is the hex SHA-256 that a Record holds for data.
func EntrySHA(data []byte) string {
	s := sha256.Sum256(data)
	return hex.EncodeToString(s[:])
}

// Apply implements store.Applier.
func (a RecordingApplier) Apply(b store.Batch, e store.Entry) ([]byte, error) {
	inner := a.Inner
	if inner == nil {
		inner = store.OpsApplier{}
	}
	resp, err := inner.Apply(b, e)
	if err != nil {
		return nil, err
	}
	key := RecordKey(e.Index)
	var count uint32
	old, err := b.Get(key)
	switch {
	case err == nil:
		rec, derr := decodeRecord(e.Index, old)
		if derr != nil {
			return nil, derr
		}
		count = rec.Count
	case errors.Is(err, store.ErrNotFound):
	default:
		return nil, err
	}
	v := make([]byte, recordLen)
	binary.BigEndian.PutUint64(v[0:8], e.Epoch)
	binary.BigEndian.PutUint32(v[8:12], count+1)
	binary.BigEndian.PutUint32(v[12:16], uint32(min(len(e.Data), 1<<32-1)))
	s := sha256.Sum256(e.Data)
	copy(v[16:16+sha256.Size], s[:])
	copy(v[16+sha256.Size:], e.RequestID[:])
	if err := b.Set(key, v); err != nil {
		return nil, err
	}
	return resp, nil
}

// decodeRecord decodes a record value stored at RecordKey(index).
func decodeRecord(index uint64, v []byte) (Record, error) {
	if len(v) != recordLen {
		return Record{}, fmt.Errorf("testnode: record of index %d has %d bytes, want %d", index, len(v), recordLen)
	}
	rec := Record{
		Index:  index,
		Epoch:  binary.BigEndian.Uint64(v[0:8]),
		Count:  binary.BigEndian.Uint32(v[8:12]),
		Size:   binary.BigEndian.Uint32(v[12:16]),
		SHA256: hex.EncodeToString(v[16 : 16+sha256.Size]),
	}
	if id := store.RequestID(v[16+sha256.Size:]); !id.IsZero() {
		rec.RequestID = id.String()
	}
	return rec, nil
}

// scanner is what ReadRecords needs of a store or a view.
type scanner interface {
	Scan(lower, upper []byte, fn func(k, v []byte) error) error
}

// ReadRecords returns the records of indexes from..to (inclusive) found in
// s, in index order, at most limit of them (limit <= 0: no limit).
func ReadRecords(s scanner, from, to uint64, limit int) ([]Record, error) {
	if to < from {
		return nil, nil
	}
	lower := RecordKey(from)
	var upper []byte
	if to == ^uint64(0) {
		upper = append([]byte(RecordPrefix[:len(RecordPrefix)-1]), RecordPrefix[len(RecordPrefix)-1]+1)
	} else {
		upper = RecordKey(to + 1)
	}
	var out []Record
	errLimit := errors.New("limit")
	err := s.Scan(lower, upper, func(k, v []byte) error {
		if len(k) != len(RecordPrefix)+8 {
			return fmt.Errorf("testnode: unexpected key %q under the record prefix", k)
		}
		rec, err := decodeRecord(binary.BigEndian.Uint64(k[len(RecordPrefix):]), v)
		if err != nil {
			return err
		}
		out = append(out, rec)
		if limit > 0 && len(out) >= limit {
			return errLimit
		}
		return nil
	})
	if err != nil && !errors.Is(err, errLimit) {
		return nil, err
	}
	return out, nil
}

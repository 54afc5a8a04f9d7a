package store

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Point is what a store records about one applied position: the index,
// the epoch and batch of the entry there, and the running hash after it.
// Two stores that record the same Point at an index applied the same log
// up to it (as far as the running hash can tell: same Base, same Sum).
type Point struct {
	Index uint64
	Epoch uint64
	Batch BatchRef
	Hash  RunHash
}

// HistoryWindow is how many indexes below the applied one the store keeps
// history records for (doc.go, "History"): one record per batch end, so
// a store behind another by less than this can be compared with it
// (PointAt) after both stopped, without ZooKeeper.
const HistoryWindow = 1 << 17

// histPruneEvery: the records below the window are deleted (one range
// deletion) each time the applied index crosses a multiple of it.
const histPruneEvery = 1 << 12

var histPrefix = []byte(internalPrefix + "hist/") // + 8-byte big-endian index

const histVersion = 1

func histKey(index uint64) []byte {
	k := make([]byte, len(histPrefix)+8)
	copy(k, histPrefix)
	binary.BigEndian.PutUint64(k[len(histPrefix):], index)
	return k
}

// encodeHist: 1-byte version (1), 8-byte epoch, BatchRef (8-byte first,
// 4-byte count, 4-byte CRC), then the running hash record (encodeRunHash).
func encodeHist(p Point) []byte {
	b := make([]byte, 25, 25+49)
	b[0] = histVersion
	binary.BigEndian.PutUint64(b[1:], p.Epoch)
	binary.BigEndian.PutUint64(b[9:], p.Batch.First)
	binary.BigEndian.PutUint32(b[17:], p.Batch.Count)
	binary.BigEndian.PutUint32(b[21:], p.Batch.CRC)
	return append(b, encodeRunHash(p.Hash)...)
}

func decodeHist(index uint64, v []byte) (Point, error) {
	if len(v) != 25+49 || v[0] != histVersion {
		return Point{}, fmt.Errorf("%w: history record at index %d is %d bytes (version %d), want %d (version %d)",
			ErrCorrupt, index, len(v), firstByte(v), 25+49, histVersion)
	}
	p := Point{Index: index, Epoch: binary.BigEndian.Uint64(v[1:]),
		Batch: BatchRef{First: binary.BigEndian.Uint64(v[9:]), Count: binary.BigEndian.Uint32(v[17:]), CRC: binary.BigEndian.Uint32(v[21:])}}
	h, err := decodeRunHash(v[25:])
	if err != nil {
		return Point{}, fmt.Errorf("history record at index %d: %w", index, err)
	}
	if h.Index != index {
		return Point{}, fmt.Errorf("%w: history record at index %d holds a running hash at index %d", ErrCorrupt, index, h.Index)
	}
	p.Hash = h
	return p, nil
}

// batchEnd reports whether e is the last entry of its log batch.
func batchEnd(e Entry) bool {
	return e.Batch.Count > 0 && e.Index == e.Batch.First+uint64(e.Batch.Count)-1
}

// writeHistory adds the history records of an Apply (its entries and the
// running hashes after each) to pb, and prunes the records that fell out
// of the window when the applied index crossed a multiple of
// histPruneEvery.
func writeHistory(pb *pebble.Batch, entries []Entry, hashes []RunHash, applied uint64) error {
	for i, e := range entries {
		if !batchEnd(e) {
			continue
		}
		p := Point{Index: e.Index, Epoch: e.Epoch, Batch: e.Batch, Hash: hashes[i]}
		if err := pb.Set(histKey(e.Index), encodeHist(p), nil); err != nil {
			return err
		}
	}
	last := entries[len(entries)-1].Index
	if last/histPruneEvery != applied/histPruneEvery && last > HistoryWindow {
		if err := pb.DeleteRange(histKey(0), histKey(last-HistoryWindow), nil); err != nil {
			return err
		}
	}
	return nil
}

// Position is the store's applied position as a Point: the index, epoch
// and batch of the last applied entry and the running hash there.
func (s *Store) Position() Point {
	idx, ep, b := s.AppliedPosition()
	return Point{Index: idx, Epoch: ep, Batch: b, Hash: s.RunHash()}
}

// PointAt returns the history record at index: ok is false when the store
// holds none there (index is not the end of a batch it applied, is below
// HistoryWindow of its applied index, or was applied by a version that
// kept no history). The applied position itself is always known
// (Position).
func (s *Store) PointAt(index uint64) (p Point, ok bool, err error) {
	if !s.gate.enter() {
		return Point{}, false, ErrClosed
	}
	defer s.gate.leave()
	if cur := s.Position(); cur.Index == index && index != 0 {
		return cur, true, nil
	}
	v, closer, err := s.db.Get(histKey(index))
	if errors.Is(err, pebble.ErrNotFound) {
		return Point{}, false, nil
	}
	if err != nil {
		return Point{}, false, fmt.Errorf("store: read history at %d: %w", index, err)
	}
	defer closer.Close()
	p, err = decodeHist(index, v)
	if err != nil {
		return Point{}, false, err
	}
	return p, true, nil
}

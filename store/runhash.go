package store

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"sync"

	"github.com/cockroachdb/pebble/v2"
)

// RunHash is the store's running state hash (doc.go, "Running hash"): a
// chain that folds every applied entry's index and the writes its Applier
// made, in order. Two stores whose chains start at the same Base and that
// applied the same entries with the same effects hold the same Sum at the
// same Index; one differing write anywhere makes every later Sum differ.
type RunHash struct {
	// Index is the applied index the hash is at.
	Index uint64
	// Base is the applied index the chain started from: 0 for a store that
	// hashed every entry it applied; the applied index at the time for a
	// store written by a version without the running hash (or one that
	// applied entries without it since). Only chains with the same Base
	// compare.
	Base uint64
	Sum  [32]byte
}

// String is the hash's first 16 bytes in hex, as members publish it.
func (h RunHash) String() string { return hex.EncodeToString(h.Sum[:16]) }

// runHashHistory is how many of the newest entries' hashes a store keeps
// (RunHashAt) in memory, so a member can compare a peer's hash at an
// index it applied a while ago.
const runHashHistory = 1 << 14

var keyRunHash = []byte(internalPrefix + "runhash") // value: see encodeRunHash

const runHashVersion = 1

// encodeRunHash: 1-byte version (1), 8-byte big-endian index, 8-byte
// big-endian base, 32-byte sum.
func encodeRunHash(h RunHash) []byte {
	b := make([]byte, 49)
	b[0] = runHashVersion
	binary.BigEndian.PutUint64(b[1:], h.Index)
	binary.BigEndian.PutUint64(b[9:], h.Base)
	copy(b[17:], h.Sum[:])
	return b
}

// maxRunHashVersion bounds the record versions a later release may write
// (a first byte at or past it is corruption, not a newer record).
const maxRunHashVersion = 16

func decodeRunHash(v []byte) (RunHash, error) {
	if len(v) != 49 || v[0] != runHashVersion {
		return RunHash{}, fmt.Errorf("%w: running hash is %d bytes (version %d), want 49 (version %d)", ErrCorrupt, len(v), firstByte(v), runHashVersion)
	}
	h := RunHash{Index: binary.BigEndian.Uint64(v[1:]), Base: binary.BigEndian.Uint64(v[9:])}
	copy(h.Sum[:], v[17:])
	return h, nil
}

func firstByte(v []byte) int {
	if len(v) == 0 {
		return -1
	}
	return int(v[0])
}

// loadRunHash reads the stored running hash for a store at applied. A
// store without one, or with one at another index (entries applied by a
// version without it), starts a new chain at applied.
func loadRunHash(r reader, applied uint64) (h RunHash, restarted bool, err error) {
	v, closer, err := r.Get(keyRunHash)
	if errors.Is(err, pebble.ErrNotFound) {
		return RunHash{Index: applied, Base: applied}, applied != 0, nil
	}
	if err != nil {
		return RunHash{}, false, fmt.Errorf("store: read running hash: %w", err)
	}
	if len(v) > 0 && v[0] > runHashVersion && v[0] < maxRunHashVersion {
		// A newer release's record (derived data, like one from before the
		// running hash): start a new chain rather than refuse the store.
		// Bytes past the versions releases may use are corruption.
		closer.Close()
		return RunHash{Index: applied, Base: applied}, true, nil
	}
	h, err = decodeRunHash(v)
	closer.Close()
	if err != nil {
		return RunHash{}, false, err
	}
	if h.Index != applied {
		return RunHash{Index: applied, Base: applied}, true, nil
	}
	return h, false, nil
}

// runHashes keeps the current running hash and the newest entries' hashes.
type runHashes struct {
	mu   sync.Mutex
	cur  RunHash
	ring []RunHash // by Index % len; Index 0 never stored
}

func (rh *runHashes) init(h RunHash) {
	rh.mu.Lock()
	defer rh.mu.Unlock()
	rh.cur = h
	rh.ring = make([]RunHash, runHashHistory)
	if h.Index != 0 {
		rh.ring[h.Index%runHashHistory] = h
	}
}

func (rh *runHashes) get() RunHash {
	rh.mu.Lock()
	defer rh.mu.Unlock()
	return rh.cur
}

func (rh *runHashes) at(index uint64) (RunHash, bool) {
	rh.mu.Lock()
	defer rh.mu.Unlock()
	if index == rh.cur.Index {
		return rh.cur, true
	}
	if index == 0 || len(rh.ring) == 0 {
		return RunHash{}, false
	}
	h := rh.ring[index%runHashHistory]
	return h, h.Index == index
}

func (rh *runHashes) add(hs []RunHash) {
	if len(hs) == 0 {
		return
	}
	rh.mu.Lock()
	defer rh.mu.Unlock()
	if rh.ring == nil {
		rh.ring = make([]RunHash, runHashHistory)
	}
	for _, h := range hs {
		rh.ring[h.Index%runHashHistory] = h
	}
	rh.cur = hs[len(hs)-1]
}

// RunHash returns the running hash at the applied index.
func (s *Store) RunHash() RunHash { return s.run.get() }

// RunHashAt returns the running hash at index if the store still has it
// (the current one, or one of the last 16384 entries applied since Open).
func (s *Store) RunHashAt(index uint64) (RunHash, bool) { return s.run.at(index) }

// entryHasher folds one entry into the chain: the previous sum, the
// entry's index, then each write as the Applier makes it, then the
// request table's outcome (a deduplicated or conflicting request).
type entryHasher struct {
	h     hash.Hash
	buf   []byte
	sum32 [32]byte // scratch for the previous and the new sum (no escape per call)
}

func newEntryHasher() *entryHasher { return &entryHasher{h: sha256.New()} }

func (eh *entryHasher) begin(prev [32]byte, index uint64) {
	eh.h.Reset()
	eh.sum32 = prev
	eh.h.Write(eh.sum32[:])
	eh.buf = binary.BigEndian.AppendUint64(eh.buf[:0], index)
	eh.h.Write(eh.buf)
}

// op writes one operation: its tag and each argument (one or two; b nil:
// one) length-prefixed.
func (eh *entryHasher) op(tag byte, a, b []byte, two bool) {
	eh.buf = append(eh.buf[:0], tag)
	eh.arg(a)
	if two {
		eh.arg(b)
	}
	eh.h.Write(eh.buf)
}

// arg appends one length-prefixed argument, writing a long one straight
// through (it is not copied).
func (eh *entryHasher) arg(a []byte) {
	eh.buf = binary.AppendUvarint(eh.buf, uint64(len(a)))
	if len(a) <= 256 {
		eh.buf = append(eh.buf, a...)
		return
	}
	eh.h.Write(eh.buf)
	eh.h.Write(a)
	eh.buf = eh.buf[:0]
}

func (eh *entryHasher) outcome(o Outcome) {
	switch {
	case o.Conflict:
		eh.buf = binary.AppendUvarint(append(eh.buf[:0], 'C'), o.Index)
	case o.Duplicate:
		eh.buf = binary.AppendUvarint(append(eh.buf[:0], 'D'), o.Index)
	default:
		return
	}
	eh.h.Write(eh.buf)
}

func (eh *entryHasher) sum() [32]byte {
	eh.h.Sum(eh.sum32[:0])
	return eh.sum32
}

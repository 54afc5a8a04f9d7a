package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// reader is what Store reads and View reads have in common.
type reader interface {
	Get(key []byte) ([]byte, io.Closer, error)
	NewIter(o *pebble.IterOptions) (*pebble.Iterator, error)
}

var (
	_ reader = (*pebble.DB)(nil)
	_ reader = (*pebble.Snapshot)(nil)
)

func get(r reader, key []byte) ([]byte, error) {
	if len(key) == 0 {
		return nil, fmt.Errorf("%w: get with an empty key", ErrInvalid)
	}
	v, closer, err := r.Get(appendUserKey(nil, key))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("store: get: %w", err)
	}
	out := bytes.Clone(v)
	if out == nil {
		out = []byte{}
	}
	closer.Close()
	return out, nil
}

func scan(r reader, lower, upper []byte, fn func(k, v []byte) error) error {
	if lower != nil && upper != nil && bytes.Compare(lower, upper) > 0 {
		return fmt.Errorf("%w: scan lower %q > upper %q", ErrInvalid, lower, upper)
	}
	lo, hi := userBounds(lower, upper)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lo, UpperBound: hi})
	if err != nil {
		return fmt.Errorf("store: scan: %w", err)
	}
	return iterate(it, fn)
}

func scanPrefix(r reader, prefix []byte, fn func(k, v []byte) error) error {
	lower := prefix
	if len(lower) == 0 {
		lower = nil
	}
	return scan(r, lower, prefixEnd(prefix), fn)
}

// readPosition reads the applied index and epoch through r.
func readPosition(r reader) (index, epoch uint64, err error) {
	v, closer, err := r.Get(keyApplied)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, 0, fmt.Errorf("%w: applied position missing", ErrCorrupt)
	}
	if err != nil {
		return 0, 0, fmt.Errorf("store: read applied position: %w", err)
	}
	defer closer.Close()
	p, err := decodeApplied(v)
	return p.index, p.epoch, err
}

// stateHash is the hex SHA-256 over every user key and value in key order,
// each written as an 8-byte big-endian length followed by the bytes
// (key, then value).
func stateHash(r reader) (string, error) {
	h := sha256.New()
	var lb [8]byte
	err := scan(r, nil, nil, func(k, v []byte) error {
		binary.BigEndian.PutUint64(lb[:], uint64(len(k)))
		h.Write(lb[:])
		h.Write(k)
		binary.BigEndian.PutUint64(lb[:], uint64(len(v)))
		h.Write(lb[:])
		h.Write(v)
		return nil
	})
	if err != nil {
		return "", err
	}
	if err := hashRequests(r, h); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// Get returns a copy of key's value, or ErrNotFound.
func (s *Store) Get(key []byte) ([]byte, error) {
	if !s.gate.enter() {
		return nil, ErrClosed
	}
	defer s.gate.leave()
	return get(s.db, key)
}

// Scan calls fn for every user key in [lower, upper) in key order (nil bound:
// unbounded). k and v are valid only until fn returns. An error from fn stops
// the scan and is returned as is. Scan reads the live database: use a View
// for a consistent picture across calls. fn must not call Close.
func (s *Store) Scan(lower, upper []byte, fn func(k, v []byte) error) error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.leave()
	return scan(s.db, lower, upper, fn)
}

// ScanPrefix is Scan over every user key that starts with prefix (empty: all).
func (s *Store) ScanPrefix(prefix []byte, fn func(k, v []byte) error) error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.leave()
	return scanPrefix(s.db, prefix, fn)
}

// StateHash returns the hex SHA-256 of the user state (see doc.go for the
// exact definition) and the applied index it reflects, both read from one
// Pebble snapshot.
func (s *Store) StateHash() (hash string, index uint64, err error) {
	if !s.gate.enter() {
		return "", 0, ErrClosed
	}
	defer s.gate.leave()
	snap := s.db.NewSnapshot()
	defer snap.Close()
	index, _, err = readPosition(snap)
	if err != nil {
		return "", 0, err
	}
	hash, err = stateHash(snap)
	if err != nil {
		return "", 0, err
	}
	return hash, index, nil
}

// Checkpoint writes a Pebble checkpoint of the store into destDir (which
// must not exist) and returns the applied index and epoch it holds. Apply
// is never held off: Pebble's checkpoint is consistent by itself (the
// current version's sstables are linked, the MANIFEST copied up to the
// length that describes them, the WAL copied as it stands, a torn tail
// being dropped on replay at the store's pinned Pebble format; the store
// ingests nothing), and the position returned is the one stored
// inside the checkpoint, read back from its newest WAL when that holds an
// Apply (walPosition, reading the WAL files as Pebble's recovery does)
// and otherwise by opening it read-only, so the checkpoint's state is
// exactly that of the returned index. When the live
// WAL holds Options.CheckpointFlushBytes or more, the memtable is flushed
// first (Apply continues meanwhile), so the WAL copied holds only what was
// applied since; below that the live WAL files are copied as they are
// (whole files: a recycled WAL file keeps an old tail that replay ignores,
// so the copy can exceed the live bytes) and replayed when the checkpoint
// is opened. The WAL is flushed and synced before
// the copy, so under SyncGroup too the checkpoint holds what was applied
// before the call. Pebble links the sstables (same filesystem) and copies
// the WAL and MANIFEST, and syncs what it writes. When the position comes
// from the WAL the image is not opened here (package checkpoint's Restore
// and fetch open it and compare index and epoch with the manifest before
// use). A ReadOnly store cannot checkpoint (ErrReadOnly): syncing the WAL
// first is a write.
func (s *Store) Checkpoint(destDir string) (index, epoch uint64, err error) {
	if !s.gate.enter() {
		return 0, 0, ErrClosed
	}
	defer s.gate.leave()
	if err := s.stall.stalled(); err != nil {
		return 0, 0, err
	}
	if s.opts.ReadOnly {
		// Checkpoint syncs the WAL first (pebble.WithFlushedWAL): a write.
		return 0, 0, fmt.Errorf("store: checkpoint: %w", ErrReadOnly)
	}
	// Pebble v2.1.7 copies the live WAL as it stands. From
	// FormatWALSyncChunks on, a copy racing an append can read as
	// corruption (cockroachdb/pebble#5142), so a store at that format is
	// not checkpointed while Apply runs (Open pins the format below it).
	if v := s.db.FormatMajorVersion(); v >= pebble.FormatWALSyncChunks {
		return 0, 0, fmt.Errorf("store: checkpoint: Pebble format %v is not supported (the store checkpoints only below %v)", v, pebble.FormatWALSyncChunks)
	}
	t0 := time.Now()
	// A small WAL is cheaper to copy than to flush (Options.CheckpointFlushBytes).
	walBytes := s.db.Metrics().WAL.Size
	flushed := walBytes >= uint64(s.opts.CheckpointFlushBytes)
	if flushed {
		if err := s.db.Flush(); err != nil {
			return 0, 0, fmt.Errorf("store: checkpoint: flush: %w", err)
		}
	}
	t1 := time.Now()
	if err := s.db.Checkpoint(destDir, pebble.WithFlushedWAL()); err != nil {
		return 0, 0, fmt.Errorf("store: checkpoint to %s: %w", destDir, err)
	}
	t2 := time.Now()
	// The position it holds: read from its WAL when that can vouch for it
	// (walPosition), else by opening it read-only.
	from := "wal"
	p, why := walPosition(s.fs, destDir)
	if why == "" {
		index, epoch = p.index, p.epoch
		s.ckptPosWAL.Add(1)
	} else {
		from = "open"
		index, epoch, err = checkpointPosition(s.fs, destDir, s.opts.Logger)
		if err != nil {
			return 0, 0, errors.Join(fmt.Errorf("store: checkpoint to %s: %w", destDir, err), s.fs.RemoveAll(destDir))
		}
		s.ckptPosOpen.Add(1)
	}
	s.log.Debug("checkpoint taken", "index", index, "dir", destDir, "wal_bytes", walBytes, "flushed", flushed,
		"flush", t1.Sub(t0), "checkpoint", t2.Sub(t1), "read_position", time.Since(t2), "position_from", from, "why_not_wal", why)
	return index, epoch, nil
}

// checkpointPosition opens the Pebble checkpoint in dir read-only and
// returns the applied position it holds. Pebble leaves a LOCK file behind
// even read-only; it is removed again, so dir holds what Checkpoint wrote.
func checkpointPosition(fs vfs.FS, dir string, logger *slog.Logger) (index, epoch uint64, err error) {
	lock := fs.PathJoin(dir, "LOCK")
	_, statErr := fs.Stat(lock)
	hadLock := statErr == nil
	db, err := pebble.Open(dir, &pebble.Options{ReadOnly: true, Logger: pebbleLogger{logger}, FS: fs})
	if err != nil {
		return 0, 0, fmt.Errorf("open read-only: %w", err)
	}
	index, epoch, err = readPosition(db)
	err = errors.Join(err, db.Close())
	if !hadLock {
		err = errors.Join(err, fs.Remove(lock))
	}
	return index, epoch, err
}

// View is a consistent, read-only picture of the store at one applied index
// (a Pebble snapshot). Close it when done; Store.Close closes the views left
// open. Safe for concurrent use.
type View struct {
	s     *Store
	snap  *pebble.Snapshot
	index uint64
	epoch uint64
	gate  gate
}

// View returns a consistent read view of the current state.
func (s *Store) View() (*View, error) {
	if !s.gate.enter() {
		return nil, ErrClosed
	}
	defer s.gate.leave()
	snap := s.db.NewSnapshot()
	index, epoch, err := readPosition(snap)
	if err != nil {
		snap.Close()
		return nil, err
	}
	v := &View{s: s, snap: snap, index: index, epoch: epoch}
	v.gate.init()
	s.viewsMu.Lock()
	s.views[v] = struct{}{}
	s.viewsMu.Unlock()
	return v, nil
}

// Index returns the applied index the view reflects.
func (v *View) Index() uint64 { return v.index }

// Epoch returns the applied epoch the view reflects.
func (v *View) Epoch() uint64 { return v.epoch }

// enter holds both the store and the view open; call the returned func when done.
func (v *View) enter() (func(), error) {
	if !v.s.gate.enter() {
		return nil, ErrClosed
	}
	if !v.gate.enter() {
		v.s.gate.leave()
		return nil, ErrClosed
	}
	return func() { v.gate.leave(); v.s.gate.leave() }, nil
}

// Get returns a copy of key's value in the view, or ErrNotFound.
func (v *View) Get(key []byte) ([]byte, error) {
	done, err := v.enter()
	if err != nil {
		return nil, err
	}
	defer done()
	return get(v.snap, key)
}

// Scan is Store.Scan on the view.
func (v *View) Scan(lower, upper []byte, fn func(k, v []byte) error) error {
	done, err := v.enter()
	if err != nil {
		return err
	}
	defer done()
	return scan(v.snap, lower, upper, fn)
}

// ScanPrefix is Store.ScanPrefix on the view.
func (v *View) ScanPrefix(prefix []byte, fn func(k, v []byte) error) error {
	done, err := v.enter()
	if err != nil {
		return err
	}
	defer done()
	return scanPrefix(v.snap, prefix, fn)
}

// StateHash returns the state hash of the view (see Store.StateHash).
func (v *View) StateHash() (string, error) {
	done, err := v.enter()
	if err != nil {
		return "", err
	}
	defer done()
	return stateHash(v.snap)
}

// Close releases the view. Idempotent.
func (v *View) Close() error {
	if !v.s.gate.enter() {
		return nil // the store closed (or is closing) every view
	}
	defer v.s.gate.leave()
	if !v.gate.close() {
		return nil
	}
	v.s.viewsMu.Lock()
	_, open := v.s.views[v]
	delete(v.s.views, v)
	v.s.viewsMu.Unlock()
	if !open {
		return nil
	}
	if err := v.snap.Close(); err != nil {
		return fmt.Errorf("store: close view: %w", err)
	}
	return nil
}

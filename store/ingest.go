package store

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// IngestStats says what one IngestSorted call wrote.
type IngestStats struct {
	Keys       int64 // key/value pairs ingested
	KeyBytes   int64 // their user keys' bytes
	ValueBytes int64 // their values' bytes
	Files      int   // sstables written and ingested
	FileBytes  int64 // the sstables' size on disk (after compression)
	// Write is the time spent building and syncing the sstables (next
	// included); Ingest the time of Pebble's Ingest (link, version edit).
	Write, Ingest time.Duration
}

// Ingest bounds.
const (
	// DefaultIngestFileBytes is IngestSorted's sstable size when
	// targetFileBytes is 0.
	DefaultIngestFileBytes = 64 << 20
	minIngestFileBytes     = 64 << 10
	maxIngestFileBytes     = 4 << 30
	// ingestTmpPrefix names IngestSorted's work directories under the
	// store directory (Pebble ignores names it does not own).
	ingestTmpPrefix = ".roomlog-ingest-"
)

// IngestSorted is an offline bulk loader: it writes the user key/value
// pairs that next yields, which must come in strictly increasing key order,
// as sstables of the store's own key encoding (each key prefixed as Apply's
// OpSet writes it) into a work directory under the store's directory, cut
// at about targetFileBytes each (0: DefaultIngestFileBytes), and hands them
// to Pebble's Ingest, which links them into the LSM (at the lowest level no
// existing data overlaps). A key that already has a value gets the
// ingested one, as a Set would. next returns ok false at the end; the key
// and value it returns are copied before the next call.
//
// The ingested pairs are state, not log entries: the applied index and
// epoch, the running hash (RunHash), the history and the request table are
// left exactly as they were. StateHash covers the new keys; checkpoints
// taken afterwards carry them. See the package doc ("Bulk ingest") for
// when a store may be given to it: never a store that a replica, an Apply
// or a Checkpoint is using.
//
// On an error (a key out of order or empty: ErrInvalid; ctx; the disk)
// nothing is ingested and the work directory is removed. Work directories
// an interrupted call left behind are removed by the next call.
func IngestSorted(ctx context.Context, s *Store, next func() (key, value []byte, ok bool), targetFileBytes int64) (st IngestStats, err error) {
	if s == nil || next == nil {
		return st, fmt.Errorf("%w: IngestSorted needs a store and a next function", ErrInvalid)
	}
	if targetFileBytes == 0 {
		targetFileBytes = DefaultIngestFileBytes
	}
	if targetFileBytes < minIngestFileBytes || targetFileBytes > maxIngestFileBytes {
		return st, fmt.Errorf("%w: IngestSorted targetFileBytes %d: must be 0 (default %d) or in [%d, %d]",
			ErrInvalid, targetFileBytes, DefaultIngestFileBytes, minIngestFileBytes, maxIngestFileBytes)
	}
	if !s.gate.enter() {
		return st, ErrClosed
	}
	defer s.gate.leave()
	if err := s.stall.stalled(); err != nil {
		return st, err
	}
	if s.opts.ReadOnly {
		return st, fmt.Errorf("store: ingest: %w", ErrReadOnly)
	}
	// No Apply meanwhile: the position stays the one it was.
	s.applyMu.Lock()
	defer s.applyMu.Unlock()

	if err := s.removeIngestLeftovers(); err != nil {
		return st, err
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	tmp := s.fs.PathJoin(s.dir, ingestTmpPrefix+hex.EncodeToString(rnd[:]))
	if err := s.fs.MkdirAll(tmp, 0o755); err != nil {
		return st, fmt.Errorf("store: ingest: %w", err)
	}
	defer func() {
		if rerr := s.fs.RemoveAll(tmp); rerr != nil && err == nil {
			err = fmt.Errorf("store: ingest: remove %s: %w", tmp, rerr)
		}
	}()

	t0 := time.Now()
	paths, err := s.writeIngestTables(ctx, tmp, next, targetFileBytes, &st)
	st.Write = time.Since(t0)
	if err != nil {
		return st, err
	}
	if len(paths) == 0 {
		return st, nil
	}
	// The memtable holds only internal keys and the user keys of earlier
	// Applies; flushing it first lets Pebble apply the ingest directly to
	// the LSM (no flushable ingest in the WAL), so checkpoints taken later
	// need nothing but the sstables and a WAL without ingest records.
	t1 := time.Now()
	if err := s.db.Flush(); err != nil {
		return st, fmt.Errorf("store: ingest: flush: %w", err)
	}
	if err := s.db.Ingest(ctx, paths); err != nil {
		return st, fmt.Errorf("store: ingest %d sstables: %w", len(paths), err)
	}
	st.Ingest = time.Since(t1)
	s.log.Info("store: ingested sorted sstables", "files", st.Files, "keys", st.Keys, "file_bytes", st.FileBytes,
		"write", st.Write, "ingest", st.Ingest, "applied", s.applied.Load())
	return st, nil
}

// writeIngestTables writes next's pairs into sstables under tmp, cutting
// at targetFileBytes, and returns their paths (synced and closed).
func (s *Store) writeIngestTables(ctx context.Context, tmp string, next func() (key, value []byte, ok bool),
	targetFileBytes int64, st *IngestStats) ([]string, error) {
	wopts := s.ingestWriterOptions()
	var (
		paths   []string
		w       *sstable.Writer
		prev    []byte
		skey    []byte
		written int64
	)
	abort := func(err error) ([]string, error) {
		if w != nil {
			_ = w.Close()
		}
		return nil, err
	}
	finish := func() error {
		if w == nil {
			return nil
		}
		err := w.Close()
		w = nil
		if err != nil {
			return fmt.Errorf("store: ingest: write %s: %w", paths[len(paths)-1], err)
		}
		fi, err := s.fs.Stat(paths[len(paths)-1])
		if err != nil {
			return fmt.Errorf("store: ingest: %w", err)
		}
		st.Files++
		st.FileBytes += fi.Size()
		return nil
	}
	for n := 0; ; n++ {
		if n%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return abort(err)
			}
		}
		key, value, ok := next()
		if !ok {
			break
		}
		if len(key) == 0 {
			return abort(fmt.Errorf("%w: ingest: empty key after %d keys", ErrInvalid, st.Keys))
		}
		if prev != nil && bytes.Compare(prev, key) >= 0 {
			return abort(fmt.Errorf("%w: ingest: key %q does not follow %q (keys must be strictly increasing)", ErrInvalid, key, prev))
		}
		prev = append(prev[:0], key...)
		if w == nil {
			path := s.fs.PathJoin(tmp, fmt.Sprintf("%06d.sst", len(paths)))
			f, err := s.fs.Create(path, vfs.WriteCategoryUnspecified)
			if err != nil {
				return abort(fmt.Errorf("store: ingest: %w", err))
			}
			paths = append(paths, path)
			w = sstable.NewWriter(objstorageprovider.NewFileWritable(f), wopts)
		}
		skey = appendUserKey(skey[:0], key)
		if err := w.Set(skey, value); err != nil {
			return abort(fmt.Errorf("store: ingest: write %s: %w", paths[len(paths)-1], err))
		}
		st.Keys++
		st.KeyBytes += int64(len(key))
		st.ValueBytes += int64(len(value))
		written += int64(len(skey) + len(value))
		// EstimatedSize is cheap but not free: look every 64 KiB of input.
		if written >= 64<<10 {
			written = 0
			if int64(w.Raw().EstimatedSize()) >= targetFileBytes {
				if err := finish(); err != nil {
					return abort(err)
				}
			}
		}
	}
	if err := finish(); err != nil {
		return abort(err)
	}
	return paths, nil
}

// ingestWriterOptions are the sstable writer options Pebble itself would
// use for the bottom level of this store: its table format and comparer,
// the store's bloom filter, Pebble's default block sizes and compression.
func (s *Store) ingestWriterOptions() sstable.WriterOptions {
	var o pebble.Options
	for i := range o.Levels {
		o.Levels[i].FilterPolicy = bloom.FilterPolicy(10) // as open sets them
	}
	o.EnsureDefaults()
	last := len(o.Levels) - 1
	return o.MakeWriterOptions(last, s.db.FormatMajorVersion().MaxTableFormat())
}

// removeIngestLeftovers removes work directories of interrupted ingests.
func (s *Store) removeIngestLeftovers() error {
	names, err := s.fs.List(s.dir)
	if err != nil {
		return fmt.Errorf("store: ingest: %w", err)
	}
	var errs []error
	for _, n := range names {
		if strings.HasPrefix(n, ingestTmpPrefix) {
			errs = append(errs, s.fs.RemoveAll(s.fs.PathJoin(s.dir, n)))
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("store: ingest: remove leftovers: %w", err)
	}
	return nil
}

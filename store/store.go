package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/bloom"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Sentinel errors. Check them with errors.Is.
var (
	// ErrNotFound: the key does not exist.
	ErrNotFound = errors.New("store: not found")
	// ErrIndexGap: Apply was given entries that do not start at
	// AppliedIndex()+1 or are not contiguous. Nothing was applied.
	ErrIndexGap = errors.New("store: entries are not contiguous with the applied index")
	// ErrClosed: the Store (or View) is closed.
	ErrClosed = errors.New("store: closed")
	// ErrCorrupt: the directory holds something that is not a valid store
	// (missing or malformed internal keys, unknown format, foreign keys).
	ErrCorrupt = errors.New("store: corrupt")
	// ErrUnsupportedVersion: the directory holds a store of a newer format
	// than this binary reads (a newer roomlog wrote it). Nothing was
	// changed; run a binary that reads it.
	ErrUnsupportedVersion = errors.New("store: unsupported store format")
	// ErrInvalid: a caller's argument is invalid (empty key, start >= end,
	// bad options, malformed ops entry).
	ErrInvalid = errors.New("store: invalid argument")
	// ErrApply: the Applier returned an error (or panicked); the whole Apply
	// call was aborted and nothing of it was written. The Applier's error is
	// wrapped too.
	ErrApply = errors.New("store: applier failed")
	// ErrRejected: OpsResult's error for an entry OpsApplier rejected.
	ErrRejected = errors.New("store: entry rejected")
	// ErrReadOnly: a write on a store opened with Options.ReadOnly.
	ErrReadOnly = errors.New("store: read-only")
)

// Entry is one log entry to apply: the same shape as logroom.Entry.
type Entry struct {
	Index, Epoch uint64
	Data         []byte
	// Batch identifies the log batch the entry came from. The store keeps
	// the Batch of the last entry applied, in the same Pebble batch as the
	// state (AppliedPosition), so that the replica can check on restart that
	// the log still holds it (log matching). The zero value is allowed.
	Batch BatchRef
	// RequestID is set by the store for an entry that came in a request
	// envelope (see EncodeRequest); the Applier sees the payload in Data.
	// Zero for plain entries. Applier must not make its effects depend on
	// it beyond what Data would (it may, e.g., log it).
	RequestID RequestID
}

// BatchRef identifies the log batch that held an entry: the batch's first
// index, entry count and checksum (its epoch is the entry's). It is opaque
// to the store.
type BatchRef struct {
	First uint64
	Count uint32
	CRC   uint32
}

// Batch is what an Applier writes through. It addresses the user keyspace
// only (internal keys are out of its reach), and its reads (Get, Scan) see
// the writes made earlier in the same Apply call, including those of earlier
// entries of the run. Methods validate their input and return ErrInvalid; a
// Batch must not be used after the Applier returns (ErrClosed), nor from
// several goroutines at once.
type Batch interface {
	Get(key []byte) ([]byte, error) // ErrNotFound
	Set(key, value []byte) error
	Delete(key []byte) error
	DeleteRange(start, end []byte) error                              // [start, end)
	Scan(lower, upper []byte, fn func(key, value []byte) error) error // sees the batch's own writes
}

// Applier turns one entry into operations on a Batch.
//
// Apply must be deterministic: the same state and the same entry must give
// the same writes and the same response on every replica, every time. It
// must not read clocks, random numbers, map iteration order, the environment
// or local configuration, nor depend on anything outside the Batch and the
// Entry. A deterministic rejection of a command is a response, not an error;
// a returned error aborts the whole Apply call (nothing of it is written) and
// stops a replica, because every replica would fail the same way or, worse,
// not. Apply is called from one goroutine at a time, in index order.
type Applier interface {
	Apply(b Batch, e Entry) (response []byte, err error)
}

// SyncPolicy says when applied batches reach the disk.
type SyncPolicy int

const (
	// SyncEveryBatch (the default): every Apply call is fsynced (pebble.Sync)
	// before it returns. A crash loses nothing that Apply returned for.
	SyncEveryBatch SyncPolicy = iota
	// SyncGroup: Apply commits without waiting for the disk; a background
	// goroutine fsyncs the WAL every GroupSyncInterval. A crash — of the
	// process (Pebble buffers unsynced WAL writes in memory) or of the
	// machine — may lose the batches committed since the last completed
	// group sync, i.e. about GroupSyncInterval plus one fsync's duration of
	// the most recent batches: always whole batches, never part of one
	// (Pebble's WAL records are checksummed and replay stops at the first
	// torn record), and the stored index always matches the stored state.
	// A replica recovers by re-applying from the log, which still holds
	// those entries. Sync and Close force a sync.
	SyncGroup
)

// String names the policy.
func (p SyncPolicy) String() string {
	switch p {
	case SyncEveryBatch:
		return "sync-every-batch"
	case SyncGroup:
		return "sync-group"
	default:
		return fmt.Sprintf("SyncPolicy(%d)", int(p))
	}
}

// Options configure Open. The zero value (or nil) is valid.
type Options struct {
	// Applier turns entries into writes. Default OpsApplier{}.
	Applier Applier
	// Sync is the durability policy. Default SyncEveryBatch.
	Sync SyncPolicy
	// GroupSyncInterval is the background fsync period under SyncGroup.
	// Default 10ms. Must be 0 or between 1ms and 10s.
	GroupSyncInterval time.Duration
	// Logger receives the store's and Pebble's logs. Default: discard.
	Logger *slog.Logger
	// ReadOnly opens the store without writing anything to dir (no format
	// initialisation, Apply returns ErrReadOnly). The directory must hold a
	// store already.
	ReadOnly bool

	// Pebble tunables.

	// CacheSize is Pebble's block cache in bytes, on top of the memtables:
	// Pebble charges its memtables to the same cache, so the store sizes
	// Pebble's cache at CacheSize + 2 × MemTableSize (the mutable memtable
	// and the one being flushed or kept for reuse; more are charged while
	// an open iterator pins an old memtable). Default 32 MiB.
	CacheSize int64
	// MemTableSize is Pebble's memtable size in bytes. Default 32 MiB.
	MemTableSize uint64
	// CheckpointFlushBytes: Checkpoint flushes the memtable first only
	// when Pebble's live WAL holds at least this many bytes; below it the
	// checkpoint carries the WAL instead (Pebble copies it; Open replays
	// it). Every flush adds an L0 sstable and, soon after, a compaction
	// that rewrites the overlapping part of the level below, so flushing
	// for every checkpoint made frequent checkpoints cost compactions far
	// larger than the data they flushed (bench/README.md: Propose p99 with
	// checkpoints back to back went from 1.3-1.8x to 0.9-1.2x the baseline
	// in isolated runs, 2.0-2.5x to 1.8-1.9x in full ones, at 4 MiB; with
	// alternated windows on a warmed ensemble 1.42-1.56x at 4 MiB, 1.14-
	// 1.38x at 16 MiB, 1.70x at 1 MiB, 1.30x at 32 MiB). Default 16 MiB
	// (at most MemTableSize); 1 flushes before every checkpoint (any WAL
	// data at all); must be 0 or in [1, MemTableSize].
	CheckpointFlushBytes int64

	// Disk.

	// DiskStallTimeout bounds every disk write, sync and file operation of
	// the store (Pebble's WAL, flushes, compactions, manifest, checkpoints,
	// Open): one still running after this long fails the store with
	// ErrDiskStalled, detected within about 2 s more, and calls
	// OnDiskStall. Default 20 s (CockroachDB's max_sync_duration); must be
	// 0 or in [100ms, 1h].
	DiskStallTimeout time.Duration
	// OnDiskStall, if set, is called once, on a goroutine of its own, with
	// the ErrDiskStalled error.
	OnDiskStall func(error)
	// FS is the file system Pebble uses. Default: the operating system's.
	// Tests inject disk faults through it (internal/infra/faultfs).
	FS vfs.FS
}

// Defaults.
const (
	DefaultGroupSyncInterval = 10 * time.Millisecond
	DefaultCacheSize         = 32 << 20
	DefaultMemTableSize      = 32 << 20
	// DefaultCheckpointFlushBytes is Options.CheckpointFlushBytes' default.
	DefaultCheckpointFlushBytes = 16 << 20

	maxCacheSize = 1 << 40
)

// Validate reports every bad field at once (ErrInvalid), or nil.
func (o *Options) Validate() error {
	if o == nil {
		return nil
	}
	var errs []error
	if o.Sync != SyncEveryBatch && o.Sync != SyncGroup {
		errs = append(errs, fmt.Errorf("Sync: unknown policy %d", int(o.Sync)))
	}
	if o.GroupSyncInterval != 0 && (o.GroupSyncInterval < time.Millisecond || o.GroupSyncInterval > 10*time.Second) {
		errs = append(errs, fmt.Errorf("GroupSyncInterval %v: must be 0 (default) or in [1ms, 10s]", o.GroupSyncInterval))
	}
	if o.CacheSize < 0 || o.CacheSize > maxCacheSize {
		errs = append(errs, fmt.Errorf("CacheSize %d: must be in [0 (default), 1 TiB]", o.CacheSize))
	}
	if o.MemTableSize != 0 && (o.MemTableSize < 1<<20 || o.MemTableSize > 1<<30) {
		errs = append(errs, fmt.Errorf("MemTableSize %d: must be 0 (default) or in [1 MiB, 1 GiB]", o.MemTableSize))
	}
	memtable := int64(o.MemTableSize)
	if memtable == 0 {
		memtable = DefaultMemTableSize
	}
	if o.CheckpointFlushBytes < 0 || o.CheckpointFlushBytes > memtable {
		errs = append(errs, fmt.Errorf("CheckpointFlushBytes %d: must be 0 (default) or in [1, MemTableSize %d]", o.CheckpointFlushBytes, memtable))
	}
	if o.DiskStallTimeout != 0 && (o.DiskStallTimeout < minDiskStallTimeout || o.DiskStallTimeout > maxDiskStallTimeout) {
		errs = append(errs, fmt.Errorf("DiskStallTimeout %v: must be 0 (default) or in [%v, %v]", o.DiskStallTimeout, minDiskStallTimeout, maxDiskStallTimeout))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: store options: %w", ErrInvalid, errors.Join(errs...))
}

func (o *Options) withDefaults() Options {
	var c Options
	if o != nil {
		c = *o
	}
	if c.Applier == nil {
		c.Applier = OpsApplier{}
	}
	if c.GroupSyncInterval == 0 {
		c.GroupSyncInterval = DefaultGroupSyncInterval
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.CacheSize == 0 {
		c.CacheSize = DefaultCacheSize
	}
	if c.MemTableSize == 0 {
		c.MemTableSize = DefaultMemTableSize
	}
	if c.CheckpointFlushBytes == 0 {
		c.CheckpointFlushBytes = min(DefaultCheckpointFlushBytes, int64(c.MemTableSize))
	}
	if c.DiskStallTimeout == 0 {
		c.DiskStallTimeout = DefaultDiskStallTimeout
	}
	if c.FS == nil {
		c.FS = vfs.Default
	}
	return c
}

// Key layout (see doc.go). internalPrefix and userPrefix never overlap:
// every internal key starts with 0x00, every user key with 0x01.
const (
	internalPrefix = "\x00roomlog/"
	userPrefixByte = 0x01
	formatVersion  = 1
)

var (
	keyFormat  = []byte(internalPrefix + "format")  // value: uvarint format version
	keyApplied = []byte(internalPrefix + "applied") // value: see encodeApplied
	userLower  = []byte{userPrefixByte}             // first possible user key (inclusive)
	userUpper  = []byte{userPrefixByte + 1}         // end of the user range (exclusive)
)

// position is what the applied key holds.
type position struct {
	index, epoch uint64
	batch        BatchRef
}

// encodeApplied encodes the applied key's value: 8-byte big-endian index,
// 8-byte big-endian epoch, then (since the log-matching change) the batch
// reference: 8-byte first, 4-byte count, 4-byte CRC. 16-byte values
// written before it decode with a zero BatchRef.
func encodeApplied(p position) []byte {
	var b [32]byte
	binary.BigEndian.PutUint64(b[0:], p.index)
	binary.BigEndian.PutUint64(b[8:], p.epoch)
	binary.BigEndian.PutUint64(b[16:], p.batch.First)
	binary.BigEndian.PutUint32(b[24:], p.batch.Count)
	binary.BigEndian.PutUint32(b[28:], p.batch.CRC)
	return b[:]
}

func decodeApplied(v []byte) (position, error) {
	if len(v) != 16 && len(v) != 32 {
		return position{}, fmt.Errorf("%w: applied position is %d bytes, want 16 or 32", ErrCorrupt, len(v))
	}
	p := position{index: binary.BigEndian.Uint64(v[:8]), epoch: binary.BigEndian.Uint64(v[8:16])}
	if len(v) == 32 {
		p.batch = BatchRef{First: binary.BigEndian.Uint64(v[16:]), Count: binary.BigEndian.Uint32(v[24:]),
			CRC: binary.BigEndian.Uint32(v[28:])}
	}
	return p, nil
}

// appendUserKey appends the storage form of a user key to dst.
func appendUserKey(dst, key []byte) []byte {
	dst = append(dst, userPrefixByte)
	return append(dst, key...)
}

// userBounds maps user bounds (nil = unbounded) to storage bounds.
func userBounds(lower, upper []byte) (lo, hi []byte) {
	lo, hi = userLower, userUpper
	if lower != nil {
		lo = appendUserKey(nil, lower)
	}
	if upper != nil {
		hi = appendUserKey(nil, upper)
	}
	return lo, hi
}

// prefixEnd returns the smallest key greater than every key with prefix p,
// or nil when there is none (p empty or all 0xff).
func prefixEnd(p []byte) []byte {
	end := bytes.Clone(p)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// Store is a replica's state: a Pebble database plus the applied position.
// All methods are safe for concurrent use. Apply calls are serialised.
type Store struct {
	db        *pebble.DB
	dir       string
	opts      Options
	log       *slog.Logger
	writeOpts *pebble.WriteOptions

	// applyMu serialises Applies (Checkpoint does not take it: it reads
	// the position stored in the image it took).
	applyMu sync.Mutex
	// applied and epoch mirror the stored applied key. Written only with
	// applyMu held, after the batch holding them committed.
	// Invariant: applied == stored applied index whenever applyMu is free.
	applied atomic.Uint64
	epoch   atomic.Uint64
	// pos is the whole stored position (index, epoch, batch) in one
	// pointer, so AppliedPosition never mixes two Applies.
	pos atomic.Pointer[position]
	// reqQ caches the request table's expiry queue; applyMu guards it.
	reqQ reqQueue
	// run is the running hash and its recent history; hasher folds entries
	// into it (applyMu guards hasher).
	run    runHashes
	hasher *entryHasher

	gate gate // every operation that touches db holds a reference

	viewsMu sync.Mutex
	views   map[*View]struct{} // open views; guarded by viewsMu

	stopSync chan struct{} // closed by Close to stop the group-sync goroutine
	syncDone chan struct{} // closed by the group-sync goroutine when it exits

	// fs is Pebble's file system with disk health checks reporting to
	// stall; fsCloser stops their monitoring (after the DB closed).
	fs       vfs.FS
	fsCloser io.Closer
	stall    *stallWatch

	// ckptPosWAL and ckptPosOpen count the checkpoints whose position was
	// read from the WAL and by opening them (tests read them).
	ckptPosWAL, ckptPosOpen atomic.Int64

	closeOnce sync.Once
	closeDone chan struct{} // closed when the close (run by the first Close) ended
	closeErr  error         // set before closeDone is closed
}

// Open opens (creating if needed) the store in dir. It is bounded by
// DiskStallTimeout like every disk operation of the store: on a disk that
// stalls it returns ErrDiskStalled (and the store opened late, if ever, is
// closed again).
func Open(dir string, opts *Options) (*Store, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	o := opts.withDefaults()
	watch := newStallWatch(o.DiskStallTimeout, o.Logger.With("store", dir), o.OnDiskStall)
	fs, fsCloser := watch.wrap(o.FS)
	type opened struct {
		s   *Store
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		s, err := open(dir, o, watch, fs, fsCloser)
		ch <- opened{s, err}
	}()
	select {
	case res := <-ch:
		return res.s, res.err
	case <-watch.ch:
		go func() {
			if res := <-ch; res.s != nil {
				_ = res.s.Close()
			}
		}()
		return nil, fmt.Errorf("store: open %s: %w", dir, watch.stalled())
	}
}

// open is Open once the options are checked. It closes fsCloser when it
// fails.
func open(dir string, o Options, watch *stallWatch, fs vfs.FS, fsCloser io.Closer) (*Store, error) {
	// Pebble reserves each memtable's size in the block cache; a cache no
	// larger than the memtables leaves no room for blocks, and every read
	// (the request table's lookups at apply above all) then reads filter,
	// index and data blocks from the file again.
	cache := pebble.NewCache(o.CacheSize + 2*int64(o.MemTableSize))
	defer cache.Unref()
	popts := &pebble.Options{
		Cache:        cache,
		MemTableSize: o.MemTableSize,
		ReadOnly:     o.ReadOnly,
		Logger:       pebbleLogger{o.Logger},
		// Pinned: Checkpoint copies the live WAL while Apply runs, which
		// is safe only below FormatWALSyncChunks (see Checkpoint). Every
		// roomlog store so far was created at this format (Pebble's
		// minimum, its default).
		FormatMajorVersion: pebble.FormatFlushableIngest,
		FS:                 fs,
	}
	// Bloom filters (10 bits per key, ~1% false positives) on every level:
	// request-table lookups are mostly misses (a fresh id), and without a
	// filter a miss reads index and data blocks of every overlapping
	// sstable. Pebble's default is no filter.
	for i := range popts.Levels {
		popts.Levels[i].FilterPolicy = bloom.FilterPolicy(10)
	}
	// Compactions wait until Open has returned (see gatedScheduler).
	sched := newGatedScheduler()
	popts.Experimental.CompactionScheduler = sched
	db, err := pebble.Open(dir, popts)
	if err != nil {
		sched.stop()
		return nil, errors.Join(fmt.Errorf("store: open %s: %w", dir, err), fsCloser.Close())
	}
	if testHookPebbleOpened != nil {
		testHookPebbleOpened(db)
	}
	sched.release()
	s := &Store{
		db:        db,
		dir:       dir,
		opts:      o,
		log:       o.Logger.With("store", dir),
		writeOpts: pebble.Sync,
		views:     make(map[*View]struct{}),
		fs:        fs,
		fsCloser:  fsCloser,
		stall:     watch,
		closeDone: make(chan struct{}),
	}
	s.gate.init()
	if o.Sync == SyncGroup {
		s.writeOpts = pebble.NoSync
	}
	if err := s.loadPosition(); err != nil {
		return nil, errors.Join(err, db.Close(), fsCloser.Close())
	}
	if o.Sync == SyncGroup && !o.ReadOnly {
		s.stopSync = make(chan struct{})
		s.syncDone = make(chan struct{})
		go s.groupSync(o.GroupSyncInterval)
	}
	s.log.Debug("store opened", "applied", s.applied.Load(), "epoch", s.epoch.Load(), "sync", o.Sync)
	return s, nil
}

// testHookPebbleOpened, when set by a test, sees the DB as pebble.Open
// returned it, before compactions are released.
var testHookPebbleOpened func(*pebble.DB)

// loadPosition reads (or, for a new store, writes) the internal keys.
func (s *Store) loadPosition() error {
	v, closer, err := s.db.Get(keyFormat)
	if errors.Is(err, pebble.ErrNotFound) {
		// A new store is empty; anything else is not ours.
		it, err := s.db.NewIter(nil)
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		empty := !it.First()
		err = errors.Join(it.Error(), it.Close())
		if err != nil {
			return fmt.Errorf("store: %w", err)
		}
		if !empty {
			return fmt.Errorf("%w: %s holds keys but no roomlog format marker (not a roomlog store)", ErrCorrupt, s.dir)
		}
		if s.opts.ReadOnly {
			return fmt.Errorf("%w: %s is empty and the store is read-only", ErrCorrupt, s.dir)
		}
		b := s.db.NewBatch()
		defer b.Close()
		err = errors.Join(
			b.Set(keyFormat, binary.AppendUvarint(nil, formatVersion), nil),
			b.Set(keyApplied, encodeApplied(position{}), nil))
		if err == nil {
			err = b.Commit(pebble.Sync)
		}
		if err != nil {
			return fmt.Errorf("store: initialise %s: %w", s.dir, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("store: read format: %w", err)
	}
	ver, n := binary.Uvarint(v)
	bad := n != len(v) || n <= 0
	closer.Close()
	if bad {
		return fmt.Errorf("%w: %s: malformed format marker", ErrCorrupt, s.dir)
	}
	if ver > formatVersion {
		return fmt.Errorf("%w: %s: store format version %d; this binary reads %d", ErrUnsupportedVersion, s.dir, ver, formatVersion)
	}
	if ver != formatVersion {
		return fmt.Errorf("%w: %s: unknown format version %d", ErrCorrupt, s.dir, ver)
	}
	v, closer, err = s.db.Get(keyApplied)
	if errors.Is(err, pebble.ErrNotFound) {
		return fmt.Errorf("%w: %s: applied position missing", ErrCorrupt, s.dir)
	}
	if err != nil {
		return fmt.Errorf("store: read applied position: %w", err)
	}
	p, err := decodeApplied(v)
	closer.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", s.dir, err)
	}
	s.applied.Store(p.index)
	s.epoch.Store(p.epoch)
	s.pos.Store(&p)
	rh, restarted, err := loadRunHash(s.db, p.index)
	if err != nil {
		return fmt.Errorf("%s: %w", s.dir, err)
	}
	if restarted {
		s.log.Info("store: running hash starts here (the store was written without it up to this index)", "dir", s.dir, "index", p.index)
	}
	s.run.init(rh)
	return nil
}

// groupSync fsyncs the WAL every interval until stopSync is closed.
func (s *Store) groupSync(interval time.Duration) {
	defer close(s.syncDone)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stopSync:
			return
		case <-t.C:
			if err := s.db.LogData(nil, pebble.Sync); err != nil {
				s.log.Error("group sync failed", "err", err)
			}
		}
	}
}

// Dir returns the directory the store was opened on.
func (s *Store) Dir() string { return s.dir }

// AppliedIndex returns the index of the last applied entry (0: none).
func (s *Store) AppliedIndex() uint64 { return s.applied.Load() }

// AppliedEpoch returns the epoch of the last applied entry (0: none).
func (s *Store) AppliedEpoch() uint64 { return s.epoch.Load() }

// AppliedPosition returns the applied index, epoch and batch of one and the
// same Apply (the three are published together).
func (s *Store) AppliedPosition() (index, epoch uint64, batch BatchRef) {
	if p := s.pos.Load(); p != nil {
		return p.index, p.epoch, p.batch
	}
	return 0, 0, BatchRef{}
}

// Sync makes every applied batch durable now (a WAL fsync). Under
// SyncEveryBatch it has nothing to do but is harmless.
func (s *Store) Sync() error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.leave()
	if err := s.stall.stalled(); err != nil {
		return err
	}
	if s.opts.ReadOnly {
		return nil
	}
	if err := s.db.LogData(nil, pebble.Sync); err != nil {
		return fmt.Errorf("store: sync: %w", err)
	}
	return nil
}

// Close waits for operations in progress, closes every open View, syncs the
// WAL and closes the database. Every method called after Close began
// returns ErrClosed. It is idempotent: a later call returns the close's
// result (or, while a stalled disk holds it, ErrDiskStalled). It must not
// be called from inside a Scan callback or an Applier (it would wait for
// itself). On a stalled disk it returns ErrDiskStalled after at most
// closeGrace without waiting for the operations stuck on the disk; the
// close then completes in the background if the disk recovers.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.gate.shut() // new operations fail from now on
		go func() {
			s.closeErr = s.close()
			close(s.closeDone)
		}()
	})
	select {
	case <-s.closeDone:
		return s.closeErr
	case <-s.stall.ch:
	}
	// Nothing may be stuck (a watched read that ended late): a short
	// grace lets such a close finish and release the directory.
	t := time.NewTimer(closeGrace)
	defer t.Stop()
	select {
	case <-s.closeDone:
		return s.closeErr
	case <-t.C:
		return fmt.Errorf("store: close %s: %w; operations still wait for the disk, and the close completes in the background if it recovers", s.dir, s.stall.stalled())
	}
}

// closeGrace is how long Close waits for the close of a stalled store.
const closeGrace = time.Second

func (s *Store) close() error {
	s.gate.wait() // shut by Close already
	if s.stopSync != nil {
		close(s.stopSync)
		<-s.syncDone
	}
	var errs []error
	s.viewsMu.Lock()
	for v := range s.views {
		v.gate.close()
		errs = append(errs, v.snap.Close())
		delete(s.views, v)
	}
	s.viewsMu.Unlock()
	if !s.opts.ReadOnly {
		errs = append(errs, s.db.LogData(nil, pebble.Sync))
	}
	errs = append(errs, s.db.Close(), s.fsCloser.Close())
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("store: close %s: %w", s.dir, err)
	}
	s.log.Debug("store closed", "applied", s.applied.Load())
	return nil
}

// gate counts operations in progress on a closable object. close marks it
// closed (new enters fail) and waits until every entered operation left.
type gate struct {
	mu     sync.Mutex
	cond   sync.Cond
	refs   int  // operations in progress; guarded by mu
	closed bool // guarded by mu
}

func (g *gate) init() { g.cond.L = &g.mu }

func (g *gate) enter() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.refs++
	return true
}

func (g *gate) leave() {
	g.mu.Lock()
	g.refs--
	if g.refs < 0 {
		panic(fmt.Sprintf("store: gate refs %d < 0", g.refs))
	}
	if g.refs == 0 && g.closed {
		g.cond.Broadcast()
	}
	g.mu.Unlock()
}

// close returns false if the gate was already closed; else it closes it
// and waits until every entered operation left.
func (g *gate) close() bool {
	if !g.shut() {
		return false
	}
	g.wait()
	return true
}

// wait waits until every entered operation left.
func (g *gate) wait() {
	g.mu.Lock()
	defer g.mu.Unlock()
	for g.refs > 0 {
		g.cond.Wait()
	}
}

// shut makes later enters fail, without waiting; false if already closed.
func (g *gate) shut() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.closed = true
	return true
}

// pebbleLogger sends Pebble's logs to slog.
type pebbleLogger struct{ l *slog.Logger }

func (p pebbleLogger) Infof(format string, args ...interface{}) {
	p.l.Debug(fmt.Sprintf(format, args...), "component", "pebble")
}
func (p pebbleLogger) Errorf(format string, args ...interface{}) {
	p.l.Error(fmt.Sprintf(format, args...), "component", "pebble")
}

// Fatalf is called by Pebble on unrecoverable internal errors; Pebble
// expects it not to return.
func (p pebbleLogger) Fatalf(format string, args ...interface{}) {
	msg := fmt.Sprintf(format, args...)
	p.l.Error(msg, "component", "pebble", "fatal", true)
	panic("pebble: " + msg)
}

var _ io.Closer = (*Store)(nil)

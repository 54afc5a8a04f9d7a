package logroom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"path"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/version"
	"github.com/roomlog/roomlog/zkx"
)

// Writer defaults and limits.
const (
	DefaultMaxBatchBytes = 256 << 10
	DefaultMaxInFlight   = 8
	// DefaultLinger is WriterConfig.Linger's default: chosen by a sweep
	// (bench/README.md, "Linger"): with batches in flight, waiting up to
	// 1 ms for more entries made batches bigger and fewer, +40% entries/s
	// at 16 proposers and +15% at 256 with lower p99, while a lone
	// proposer never waits (nothing in flight).
	DefaultLinger = time.Millisecond
	// NoLinger turns lingering off (WriterConfig.Linger): a batch goes
	// out as soon as an in-flight slot is free.
	NoLinger time.Duration = -1
	// maxLinger bounds WriterConfig.Linger.
	maxLinger                = time.Second
	DefaultEagerInFlight     = 2
	DefaultMaxQueuedBytes    = 64 << 20
	DefaultMaxChannelBatches = 10000
	DefaultMaxChannelBytes   = 64 << 20
	DefaultMaxRoomBytes      = 256 << 20

	// MaxChannelBatchesLimit keeps a channel's child list well inside a
	// getChildren reply.
	MaxChannelBatchesLimit = 50000
	minBatchBytes          = 1 << 10
	maxInFlightLimit       = 1024
)

// Entry is one committed log entry.
type Entry struct {
	Index, Epoch uint64
	Data         []byte
	// Batch identifies the batch znode that holds the entry (see MatchLog).
	Batch BatchID
}

// Compression is a Writer's policy for storing batches.
type Compression uint8

const (
	// CompressionDefault is DefaultCompression.
	CompressionDefault Compression = iota
	// CompressionNone stores every batch uncompressed (version 1).
	CompressionNone
	// CompressionS2 stores batches that S2 shrinks by at least 1/8 as
	// version-2 batches with CodecS2, the others uncompressed.
	CompressionS2
	// CompressionZstd is CompressionS2 with CodecZstd instead of S2 in
	// channels opened at room version 2 or later (S2 below: the room
	// version names what readers may be given). zstd stores about 40%
	// fewer bytes than S2 on realistic namespace commands, for about three
	// times the encoding CPU (BenchmarkCodec): for rooms where ZooKeeper's
	// heap and disk, not the primary's CPU, are the limit.
	CompressionZstd
)

// DefaultCompression is what CompressionDefault means: S2. It wins on
// realistic data (on the demo's namespace commands it stores about a fifth
// of the bytes for about 0.4-0.7 ms of CPU per uncompressed MB, encode and
// decode, and gives up on data it cannot shrink within 0.07 ms/MB; see
// bench/README.md), which means fewer bytes per ZooKeeper transaction,
// more entries per second and more history under the same heap.
// Rolling upgrade: readers from before batch format version 2 refuse
// compressed batches, so set CompressionNone until every member reads
// version 2.
const DefaultCompression = CompressionS2

func (c Compression) String() string {
	switch c {
	case CompressionDefault:
		return "default"
	case CompressionNone:
		return "none"
	case CompressionS2:
		return "s2"
	case CompressionZstd:
		return "zstd"
	}
	return fmt.Sprintf("compression(%d)", uint8(c))
}

// WriterConfig configures a Writer. Zero values take the documented defaults.
type WriterConfig struct {
	// Owner is recorded in the epoch znode (e.g. the member id).
	Owner string
	// MaxBatchBytes bounds an encoded batch znode as stored, compressed or
	// not (default 256 KiB, at most HardMaxBatchBytes = 900 KiB so one
	// Multi stays below jute.maxbuffer).
	MaxBatchBytes int
	// Compression selects how batches are stored (default
	// DefaultCompression: none). With CompressionS2 batches are formed by
	// their uncompressed size (MaxBatchBytes times the compression ratio
	// seen so far, at most 16 x MaxBatchBytes, MaxBatchRawBytes and
	// MaxQueuedBytes; at most MaxBatchEntries entries) and S2-compressed;
	// a batch that does not shrink by at least 1/8 is stored uncompressed
	// (version 1), and one whose compressed form still exceeds
	// MaxBatchBytes is split (its pieces all go out at once, so MaxInFlight
	// may be exceeded by them). MaxChannelBytes, MaxRoomBytes and
	// Room.Bytes count stored bytes; an Append is admitted against
	// MaxRoomBytes by its uncompressed size (the stored size is not known
	// yet). Readers before batch format version 2 cannot read compressed
	// batches: upgrade every reader before a writer compresses.
	Compression Compression
	// MaxRoomVersion caps the room versions this writer writes (0: this
	// binary's version.RoomMax). A room at a higher version is refused at
	// takeover with ErrUnsupportedVersion, as is RotateToVersion past it.
	MaxRoomVersion int
	// Linger lets a batch that is not full wait up to Linger for more
	// entries while another batch is in flight (with nothing in flight it
	// goes at once: a lone synchronous proposer never waits). 0:
	// DefaultLinger (1 ms); NoLinger: natural batching only (a batch is
	// sent as soon as an in-flight slot is free, with everything queued by
	// then). At most 1 s.
	Linger time.Duration
	// MaxInFlight bounds the batches sent but not yet acknowledged (default 8).
	MaxInFlight int
	// EagerInFlight is how many of those may be partly filled (default 2,
	// at most MaxInFlight): beyond it a batch is sent only when full. Small
	// entries then travel in fewer, larger Multis (ZooKeeper's cost is per
	// transaction), while large ones still use every slot.
	EagerInFlight int
	// MaxQueuedBytes bounds entry bytes waiting to be batched; beyond it
	// Append waits on its ctx (default 64 MiB).
	MaxQueuedBytes int
	// MaxChannelBatches / MaxChannelBytes trigger automatic rotation
	// (defaults 10000 batches, 64 MiB).
	MaxChannelBatches int
	MaxChannelBytes   int64
	// MaxRoomBytes bounds what all channels of the room cost ZooKeeper's
	// heap: their batch bytes plus ZnodeHeapBytes for each batch and
	// channel znode (Usage.Charged); beyond it Append fails with
	// ErrRoomFull (default 256 MiB). The live heap a full room of
	// one-entry batches holds is at most 1.5 times the bound (measured).
	MaxRoomBytes int64
	// Applied is the caller's applied index (a replica taking over). If the
	// log ends below it, NewWriter fails with ErrDiverged before it seals
	// or opens any channel: a writer never appends at an index at or below
	// one its caller already applied. (The epoch CAS, which only fences
	// older writers, has happened by then.)
	Applied uint64
	// OnCommit, if set, receives committed entries in index order, from one
	// goroutine (the writer's loop): it must not block long. Entry.Data must
	// not be modified.
	OnCommit func([]Entry)
	Logger   *slog.Logger
	// Metrics receives the writer's metrics (see NewMetrics); nil: the
	// room's (RoomOptions.Metrics), and none if that is nil too. Every
	// Writer of a room in a process should share one *Metrics: a Writer
	// registers nothing itself.
	Metrics *Metrics

	// maxBatchEntries, when > 0, caps the entries of a batch (tests: one
	// entry per batch, the byte bound's worst case).
	maxBatchEntries int
}

// Validate reports every invalid field at once (errors wrap ErrBadConfig).
func (c WriterConfig) Validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrBadConfig}, args...)...))
	}
	if c.MaxBatchBytes != 0 && (c.MaxBatchBytes < minBatchBytes || c.MaxBatchBytes > HardMaxBatchBytes) {
		bad("MaxBatchBytes %d not in [%d, %d]", c.MaxBatchBytes, minBatchBytes, HardMaxBatchBytes)
	}
	if c.MaxRoomVersion < 0 {
		bad("MaxRoomVersion %d is negative", c.MaxRoomVersion)
	}
	if c.Compression > CompressionZstd {
		bad("unknown Compression %v", c.Compression)
	}
	if (c.Linger < 0 && c.Linger != NoLinger) || c.Linger > maxLinger {
		bad("Linger %v not in [0, %v] nor NoLinger", c.Linger, maxLinger)
	}
	if c.MaxInFlight < 0 || c.MaxInFlight > maxInFlightLimit {
		bad("MaxInFlight %d not in [0, %d]", c.MaxInFlight, maxInFlightLimit)
	}
	maxInFlight := c.MaxInFlight
	if maxInFlight == 0 {
		maxInFlight = DefaultMaxInFlight
	}
	if c.EagerInFlight < 0 || c.EagerInFlight > maxInFlight {
		bad("EagerInFlight %d not in [0, MaxInFlight]", c.EagerInFlight)
	}
	if c.MaxQueuedBytes < 0 {
		bad("MaxQueuedBytes %d < 0", c.MaxQueuedBytes)
	}
	if c.MaxChannelBatches < 0 || c.MaxChannelBatches > MaxChannelBatchesLimit {
		bad("MaxChannelBatches %d not in [0, %d]", c.MaxChannelBatches, MaxChannelBatchesLimit)
	}
	if c.MaxChannelBytes < 0 {
		bad("MaxChannelBytes %d < 0", c.MaxChannelBytes)
	}
	if c.MaxRoomBytes < 0 {
		bad("MaxRoomBytes %d < 0", c.MaxRoomBytes)
	}
	return errors.Join(errs...)
}

func (c WriterConfig) withDefaults() WriterConfig {
	if c.MaxBatchBytes == 0 {
		c.MaxBatchBytes = DefaultMaxBatchBytes
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	switch c.Linger {
	case 0:
		c.Linger = DefaultLinger
	case NoLinger:
		c.Linger = 0
	}
	if c.EagerInFlight == 0 {
		c.EagerInFlight = min(DefaultEagerInFlight, c.MaxInFlight)
	}
	if c.MaxQueuedBytes == 0 {
		c.MaxQueuedBytes = DefaultMaxQueuedBytes
	}
	if c.MaxChannelBatches == 0 {
		c.MaxChannelBatches = DefaultMaxChannelBatches
	}
	if c.MaxChannelBytes == 0 {
		c.MaxChannelBytes = DefaultMaxChannelBytes
	}
	if c.MaxRoomBytes == 0 {
		c.MaxRoomBytes = DefaultMaxRoomBytes
	}
	if c.Compression == CompressionDefault {
		c.Compression = DefaultCompression
	}
	return c
}

// Writer is the single writer of a room for one epoch. Append is safe for
// many concurrent callers. See doc.go for the protocol.
type Writer struct {
	room      *Room
	c         *Client
	cfg       WriterConfig
	log       *slog.Logger
	epoch     uint64
	epochVer  int32 // the fence: the epoch znode version this writer set
	epochPath string
	// tokenPath is this writer's token, <epoch znode>/w-<nonce>, created in
	// the same Multi as its epoch CAS and checked (version 0) by every
	// write with the epoch version: a room deleted and created again
	// under the writer (whose epoch znode's version restarts at 0 and
	// comes back to ours) has no token of ours, so nothing of ours lands.
	tokenPath string
	start     uint64
	// skippedScan: batches of the channel it sealed at takeover that a
	// Reader of the Room had verified, so the takeover did not read them.
	skippedScan int
	maxEntry    int
	// maxRaw bounds a batch's uncompressed payload (= its stored payload
	// bound when not compressing); maxCount its entries.
	maxRaw, maxCount int

	lastCommitted atomic.Uint64
	// roomVer is the room version of the open channel; roomMetaVer the
	// room meta's znode version and roomCreated its creation time, for the
	// rotation that changes it (loop-owned after NewWriter).
	roomVer     atomic.Int32
	roomMetaVer int32
	roomCreated int64
	// roomSince is the room meta's since; lowering its Lowering.
	roomSince uint64
	lowering  bool
	stats     writerStats
	m         *Metrics // nil: no metrics

	// lifeCtx ends when Close is called; it bounds every wait of the loop.
	lifeCtx    context.Context
	cancelLife context.CancelFunc

	mu sync.Mutex // guards the fields below (the append queue)
	// queue holds requests not yet fully batched, in arrival order.
	queue []*appendReq
	// queuedBytes is the payload bytes of queue. Invariant: it equals the sum
	// of len(r.payload) over queue.
	queuedBytes int
	// spaceCh is closed and replaced when queuedBytes shrinks and
	// spaceWanted says an Append waits for space.
	spaceCh     chan struct{}
	spaceWanted bool
	// failErr, once set, is returned to every new Append (fenced, closed).
	failErr error

	kick     zkx.Signal       // new work for the loop
	rotateCh chan *rotateReq  // Rotate requests
	results  chan batchResult // in-flight Multi outcomes
	// sealResults carries the outcome of an early seal (buffered 1).
	sealResults chan sealResult
	stop        chan struct{} // closed by Close
	done        chan struct{} // closed when the loop has exited
	stopOnce    sync.Once
	ls          loopState // owned by the loop goroutine
}

// writerStats count resolution outcomes (for logs and tests).
type writerStats struct {
	resolutions atomic.Int64 // pipeline pauses to resolve lost replies
	readBack    atomic.Int64 // batches found landed by reading them back
	resent      atomic.Int64 // batches resent after being found absent
	earlySeals  atomic.Int64 // seals that went out with batches in flight and landed
	loops       atomic.Int64 // passes of the loop (a spinning loop shows here)
	splits      atomic.Int64 // compressed batches over MaxBatchBytes that were split
}

// reqState is the lifecycle of an append request; guarded by Writer.mu.
type reqState int

const (
	reqQueued reqState = iota
	reqTaken
	reqCancelled
)

type appendResult struct {
	last uint64
	err  error
}

// appendReq is one Append call. payload holds the entries uvarint-framed
// (copied from the caller, so the caller may reuse its buffers at once);
// ends[i] is the end offset of entry i in payload.
type appendReq struct {
	payload []byte
	ends    []int
	state   reqState // guarded by Writer.mu
	done    chan appendResult
	first   uint64 // loop-owned: index of the first entry once assigned
	last    uint64 // loop-owned: index of the last entry once assigned
}

type rotateReq struct {
	done chan rotateResult
	// roomVersion, when not 0, is the room version the rotation records
	// (in the room meta and the new channel's meta, in the same Multi).
	roomVersion int
}

type rotateResult struct {
	info ChannelInfo
	err  error
}

// NewWriter establishes epoch N+1 (a compare-and-set on the epoch znode's
// version), finds the end of the log (the first missing batch of the last
// channel), seals the last channel there and opens the next one in one
// fenced Multi (an open channel without any child is reused instead).
// From the CAS on, every writer of an older epoch is fenced.
func (r *Room) NewWriter(ctx context.Context, cfg WriterConfig) (*Writer, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if cfg.Metrics == nil {
		cfg.Metrics = r.metrics
	}
	w := &Writer{
		room:        r,
		c:           r.c,
		cfg:         cfg,
		m:           cfg.Metrics,
		epochPath:   r.epochPath(),
		maxEntry:    MaxEntryBytes(cfg.MaxBatchBytes),
		spaceCh:     make(chan struct{}),
		kick:        zkx.NewSignal(),
		rotateCh:    make(chan *rotateReq),
		results:     make(chan batchResult, cfg.MaxInFlight+1),
		sealResults: make(chan sealResult, 1),
		stop:        make(chan struct{}),
		done:        make(chan struct{}),
	}
	w.maxRaw, w.maxCount = cfg.MaxBatchBytes-batchOverhead, math.MaxInt
	w.ls.ratio = 1
	if cfg.Compression >= CompressionS2 {
		w.maxRaw = max(w.maxRaw, min(MaxBatchRawBytes, maxRawFactor*cfg.MaxBatchBytes, cfg.MaxQueuedBytes))
		w.maxCount = MaxBatchEntries
	}
	if cfg.maxBatchEntries > 0 {
		w.maxCount = min(w.maxCount, cfg.maxBatchEntries)
	}
	// Before the epoch CAS, three reads at once (none depends on another;
	// a takeover's time is the failover's): the room meta, for a room this
	// writer may not write is refused before the CAS, which would fence
	// the sitting primary for nothing (checked again after it, when
	// nothing else can change it); the epoch znode; and the channel chain,
	// checked before anything is written (the new epoch lies past every
	// epoch it records).
	var (
		rm          roomMeta
		em          epochMeta
		ever        int32
		infos       []ChannelInfo
		rmErr, eErr error
		chainErr    error
		lostErr     error
		rvErr       error
		afterInfos  []ChannelInfo
		afterErr    error
	)
	concurrently(
		func() { rm, _, rmErr = r.readRoomMeta(ctx) },
		func() { em, ever, eErr = r.readEpoch(ctx) },
		func() { infos, chainErr = r.CheckChain(ctx) })
	switch {
	case rmErr != nil:
		return nil, rmErr
	case cfg.checkRoomVersion(rm.roomVersion()) != nil:
		return nil, fmt.Errorf("logroom: room %q (%s): %w", r.name, r.root, cfg.checkRoomVersion(rm.roomVersion()))
	case eErr != nil:
		return nil, eErr
	case chainErr != nil:
		return nil, chainErr
	}
	if err := w.takeEpoch(ctx, em, ever, infos); err != nil {
		return nil, err
	}
	// After the CAS and a sync, three reads at once: a room marked lost is
	// refused (MarkLost sets the epoch znode in the Multi that creates the
	// marker, so either our CAS failed, or the marker is there now, or it
	// fences us later); the room version, read under our fence (from here
	// on only this writer changes it: a rotation's fenced Multi); and the
	// chain again (an older writer may have rotated before our CAS; from
	// here on nothing but us writes).
	if err := r.syncEpoch(ctx); err != nil {
		return nil, err
	}
	var tokens []string
	concurrently(
		func() { lostErr = r.refuseLost(ctx) },
		func() { rvErr = w.readRoomVersion(ctx) },
		func() { afterInfos, afterErr = r.CheckChain(ctx) },
		func() { tokens, _ = zkx.Children(ctx, r.c, w.epochPath) }) // for dropOldTokens; nil on error
	if lostErr != nil {
		return nil, lostErr
	}
	w.log = discardLogger(cfg.Logger).With("room", r.name, "epoch", w.epoch)
	if rvErr != nil {
		return nil, rvErr
	}
	if afterErr != nil {
		return nil, afterErr
	}
	if err := w.takeOver(ctx, afterInfos); err != nil {
		return nil, err
	}
	w.dropOldTokens(tokens)
	w.lastCommitted.Store(w.start - 1)
	w.ls.sessionID = w.c.SessionID()
	w.lifeCtx, w.cancelLife = context.WithCancel(context.Background())
	go w.run()
	return w, nil
}

// takeEpoch sets the epoch znode to epoch+1 with a version check.
// m and ver are the epoch znode as read, infos the checked channel chain:
// the new epoch lies past every epoch they record (a reset epoch znode
// must not make us reuse an epoch).
func (w *Writer) takeEpoch(ctx context.Context, m epochMeta, ver int32, infos []ChannelInfo) error {
	r := w.room
	nonce := rand.Uint64()
	epoch, err := r.nextEpoch(m.Epoch, infos)
	if err != nil {
		return err
	}
	next := epochMeta{Version: epochFormatVersion, Epoch: epoch, Owner: w.cfg.Owner, Nonce: nonce}
	data := encodeMeta(next)
	w.tokenPath = fmt.Sprintf("%s/%s%016x", w.epochPath, writerTokenPrefix, nonce)
	var bo zkx.Backoff
	for {
		res, err := r.c.Conn().Multi(
			&zk.SetDataRequest{Path: w.epochPath, Data: data, Version: ver},
			&zk.CreateRequest{Path: w.tokenPath, Acl: r.c.ACL()})
		i, err := multiErr(res, err)
		if err == nil {
			w.epoch, w.epochVer = next.Epoch, ver+1
			return nil
		}
		if i == 0 && errors.Is(err, zk.ErrBadVersion) {
			return fmt.Errorf("%w: room %q: another writer took epoch %d concurrently", ErrFenced, r.name, epoch)
		}
		if i == 0 && errors.Is(err, zk.ErrNoNode) {
			return fmt.Errorf("%w: %s (the room was deleted)", ErrNoRoom, w.epochPath)
		}
		if !isConnErr(err) {
			return zkError("logroom: set epoch", err)
		}
		// Unknown outcome: read back; our nonce tells whether it landed.
		// Sync first: a new session may read from a follower that has not
		// seen our Set yet (go-zookeeper resets its last zxid on expiry),
		// and the stale version would read as another writer's.
		if err := r.c.WaitSession(ctx); err != nil {
			return fmt.Errorf("logroom: set epoch: %w", err)
		}
		if err := bo.Wait(ctx); err != nil {
			return fmt.Errorf("logroom: set epoch: %w", err)
		}
		if err := zkx.Sync(ctx, r.c, w.epochPath); err != nil {
			return zkError("logroom: set epoch: sync before reading back", err)
		}
		cur, curVer, err := r.readEpoch(ctx)
		if err != nil {
			return err
		}
		switch {
		case cur == next && curVer == ver+1:
			w.epoch, w.epochVer = next.Epoch, curVer
			return nil
		case curVer != ver:
			return fmt.Errorf("%w: room %q: epoch znode changed to epoch %d", ErrFenced, r.name, cur.Epoch)
		}
	}
}

// readRoomVersion reads the room meta (the room version) after the epoch
// CAS, refusing a version this binary or MaxRoomVersion does not support.
func (w *Writer) readRoomVersion(ctx context.Context) error {
	m, ver, err := w.room.readRoomMeta(ctx)
	if err != nil {
		return err
	}
	if err := w.cfg.checkRoomVersion(m.roomVersion()); err != nil {
		return fmt.Errorf("logroom: room %q (%s): %w", w.room.name, w.room.root, err)
	}
	w.roomVer.Store(int32(m.roomVersion()))
	w.roomMetaVer, w.roomCreated = ver, m.Created
	w.roomSince, w.lowering = m.Since, m.info().Lowering
	return nil
}

// checkRoomChannel refuses a takeover whose room meta and newest channel
// disagree on the room version: only a rotation changes either, and it
// changes both in one Multi, so the meta (or the channel) was written by
// another client. Adopting it would write the formats of a version the
// members never agreed to.
func (w *Writer) checkRoomChannel(num uint64, path string, m channelMeta) error {
	if m.roomVersion() == w.RoomVersion() {
		return nil
	}
	return fmt.Errorf("%w: room %q: the room meta %s records room version %d, but channel %d (%s) was opened at room version %d: one of them was written by another client",
		ErrCorrupt, w.room.name, w.room.root, w.RoomVersion(), num, path, m.roomVersion())
}

// checkRoomVersion refuses a room version this binary does not write or
// MaxRoomVersion excludes.
func (c WriterConfig) checkRoomVersion(v int) error {
	hi := version.RoomMax
	if c.MaxRoomVersion > 0 {
		hi = min(hi, c.MaxRoomVersion)
	}
	if v < version.RoomMin || v > hi {
		return fmt.Errorf("%w: room version %d; this writer (%s) writes room versions %d..%d",
			ErrUnsupportedVersion, v, version.Release, version.RoomMin, hi)
	}
	return nil
}

// WatchFence tells, without writing, whether this writer is fenced: the
// epoch znode it checks (synced first) no longer has the version its CAS
// produced (a newer epoch took the room), or is gone (the room was
// deleted, or re-seeded: a new incarnation names its epoch znode anew).
// When it is not, watch fires at the next change or deletion of that
// znode (or when the session's watches end). A writer that writes learns
// of a fence at its next Multi; one that writes nothing (an idle primary)
// learns through this.
func (w *Writer) WatchFence(ctx context.Context) (fenced bool, watch <-chan zk.Event, err error) {
	if err := zkx.Sync(ctx, w.c, w.epochPath); err != nil {
		if errors.Is(err, zk.ErrNoNode) {
			return true, nil, nil
		}
		return false, nil, zkError("logroom: sync "+w.epochPath, err)
	}
	ok, st, ch, err := zkx.ExistsW(ctx, w.c, w.epochPath)
	if err != nil {
		return false, nil, zkError("logroom: watch "+w.epochPath, err)
	}
	if !ok || st.Version != w.epochVer {
		return true, nil, nil
	}
	// The version alone may have come back (the room deleted and created
	// again): our token says whether this is the znode we set.
	if ok, _, err := zkx.Exists(ctx, w.c, w.tokenPath); err != nil {
		return false, nil, zkError("logroom: read "+w.tokenPath, err)
	} else if !ok {
		return true, nil, nil
	}
	return false, ch, nil
}

// writerTokenPrefix starts the name of a writer's token under the epoch
// znode.
const writerTokenPrefix = "w-"

// fenceLen is how many ops fenceOps puts first in every write.
const fenceLen = 2

// fenceRefused reports whether a Multi whose first fenceLen ops are fenceOps
// failed on the fence: op i refused with BadVersion (a newer epoch) or
// NoNode (the room, or our token, is gone).
func fenceRefused(i int, err error) bool {
	return i >= 0 && i < fenceLen && (errors.Is(err, zk.ErrBadVersion) || errors.Is(err, zk.ErrNoNode))
}

// dropOldTokens deletes the tokens of earlier writers under the epoch
// znode (each takeover leaves one), in one Multi behind our fence, so a
// writer fenced meanwhile deletes nothing (in particular not the token of
// the writer that fenced it). Best effort: a failure leaves them for the
// next takeover.
//
// kids is the epoch znode's listing, read with the takeover's reads after
// the CAS (nil: it failed, nothing to do).
func (w *Writer) dropOldTokens(kids []string) {
	ops := w.fenceOps()
	own := path.Base(w.tokenPath)
	for _, k := range kids {
		if k != own && strings.HasPrefix(k, writerTokenPrefix) && len(ops) < 200 {
			ops = append(ops, &zk.DeleteRequest{Path: w.epochPath + "/" + k, Version: -1})
		}
	}
	if len(ops) == fenceLen {
		return
	}
	if _, err := multiErr(w.c.Conn().Multi(ops...)); err != nil {
		w.log.Debug("dropping earlier writers' tokens failed; the next takeover retries", "err", err)
	}
}

// fenceOps are the first ops of every write of this writer: the epoch
// znode at the version its CAS produced, and its token.
func (w *Writer) fenceOps() []interface{} {
	return []interface{}{
		&zk.CheckVersionRequest{Path: w.epochPath, Version: w.epochVer},
		&zk.CheckVersionRequest{Path: w.tokenPath, Version: 0},
	}
}

// fencedWrite runs a Multi whose first op is the fence, resolving a lost
// reply by reading back: verify reports whether the Multi's effect is in
// place. It returns nil once applied, an ErrFenced error when the fence
// failed, or another error.
func (w *Writer) fencedWrite(ctx context.Context, what string, verify func() (bool, error), ops ...interface{}) error {
	ops = append(w.fenceOps(), ops...)
	var bo zkx.Backoff
	for {
		i, err := multiErr(w.c.Conn().Multi(ops...))
		if err == nil {
			return nil
		}
		if fenceRefused(i, err) {
			return fmt.Errorf("%w: room %q: %s", ErrFenced, w.room.name, what)
		}
		if errors.Is(err, zk.ErrClosing) {
			return fmt.Errorf("logroom: %s: %w", what, ErrClosed)
		}
		if isConnErr(err) {
			if err := w.c.WaitSession(ctx); err != nil {
				return fmt.Errorf("logroom: %s: %w: %w", what, ErrOutcomeUnknown, err)
			}
			if err := zkx.Sync(ctx, w.c, w.epochPath); err != nil {
				return fmt.Errorf("logroom: %s: %w: %w", what, ErrOutcomeUnknown, err)
			}
		}
		ok, verr := verify()
		if verr != nil && !isConnErr(verr) {
			return verr
		}
		if ok {
			return nil
		}
		if !isConnErr(err) && verr == nil {
			// A definite failure that left nothing of ours in place.
			return zkError("logroom: "+what, err)
		}
		if err := bo.Wait(ctx); err != nil {
			return fmt.Errorf("logroom: %s: %w: %w", what, ErrOutcomeUnknown, err)
		}
	}
}

// hasData returns a verify func for fencedWrite: path holds exactly data.
func (w *Writer) hasData(path string, data []byte) func() (bool, error) {
	return func() (bool, error) {
		got, _, err := w.c.Conn().Get(path)
		if errors.Is(err, zk.ErrNoNode) {
			return false, nil
		}
		if err != nil {
			return false, err
		}
		return bytes.Equal(got, data), nil
	}
}

// takeOver finds the end of the log and opens this writer's channel;
// infos is the chain as checked after the epoch CAS.
func (w *Writer) takeOver(ctx context.Context, infos []ChannelInfo) error {
	r := w.room
	// Re-read after our CAS: an older writer may have rotated meanwhile;
	// from here on nothing but us can write.
	ls := &w.ls
	sealedBatches := 0 // for the metrics
	for _, ci := range infos {
		if ci.Sealed {
			ls.sealedBytes += ci.Bytes
			ls.sealedZnodes += ci.Batches + 1
			sealedBatches += ci.Batches
		}
	}
	ls.seenDeletions = r.deletions.Load()
	ls.lastRefresh = time.Now()
	// published sets the room gauges once the writer's channel is open
	// (chBytes and chBatches are 0 then).
	published := func(channels int, err error) error {
		if err == nil {
			w.m.roomMeasured(ls.sealedBytes, sealedBatches+channels, channels)
		}
		return err
	}
	if len(infos) == 0 {
		if err := w.checkApplied(0, 0, ""); err != nil {
			return err
		}
		meta := channelMeta{Version: channelFormatVersion, First: 1, Epoch: w.epoch, Room: roomField(w.RoomVersion())}
		return published(1, w.openChannel(ctx, 1, meta, 0, "create first channel",
			&zk.CreateRequest{Path: r.channelPath(1), Data: encodeMeta(meta), Acl: w.c.ACL()}))
	}
	last := infos[len(infos)-1]
	path := r.channelPath(last.Num)
	// The last channel's meta and its children at once: nothing but us
	// writes in the room any more, so their order does not matter.
	var (
		m            channelMeta
		st           *zk.Stat
		names        []string
		mErr, lstErr error
	)
	concurrently(
		func() { m, st, mErr = r.readChannelStat(ctx, last.Num) },
		func() { names, lstErr = zkx.Children(ctx, r.c, path) })
	if mErr != nil {
		return mErr
	}
	ver := st.Version
	// No channel can carry an epoch at or above ours: the CAS succeeded
	// on the epoch znode as read with the chain, so every writer that
	// opened a channel since took its epoch before that read. One that
	// does means a foreign write lowered the epoch znode meanwhile;
	// writing on would use its epoch twice. Fenced: the next takeover
	// picks an epoch past it.
	for _, ci := range infos {
		if ci.Epoch >= w.epoch {
			return fmt.Errorf("%w: room %q: channel %d records epoch %d, not below ours (%d): the epoch znode was lowered under a concurrent writer",
				ErrFenced, r.name, ci.Num, ci.Epoch, w.epoch)
		}
	}
	if m.Epoch >= w.epoch {
		return fmt.Errorf("%w: room %q: channel %d records epoch %d, not below ours (%d): the epoch znode was lowered under a concurrent writer",
			ErrFenced, r.name, last.Num, m.Epoch, w.epoch)
	}
	if err := w.checkRoomChannel(last.Num, path, m); err != nil {
		return err
	}
	if m.Sealed {
		// CheckChain saw it open; only a foreign write seals a channel
		// without opening its successor.
		return r.corrupt(last.Num, path, fmt.Errorf("%w: the last channel was sealed at index %d without a successor during takeover",
			ErrCorrupt, m.Last))
	}
	if lstErr != nil {
		return zkError("logroom: list channel "+path, lstErr)
	}
	if len(names) == 0 {
		if err := w.checkApplied(last.Num, m.First-1, path); err != nil {
			return err
		}
		// Open and without any child: reuse it under our epoch. No older
		// writer can add a child any more (fenced), so it stays empty.
		reuse := m
		reuse.Epoch, reuse.Room = w.epoch, roomField(w.RoomVersion())
		data := encodeMeta(reuse)
		err := w.openChannel(ctx, last.Num, reuse, ver+1, "reuse channel",
			&zk.SetDataRequest{Path: path, Data: data, Version: ver})
		if err != nil && errors.Is(err, zk.ErrBadVersion) {
			return fmt.Errorf("%w: room %q: channel %d changed during takeover", ErrFenced, r.name, last.Num)
		}
		return published(len(infos), err)
	}
	end, nbytes, nbatches, err := w.scanChain(ctx, last.Num, m, names, st)
	if err != nil {
		return err
	}
	if err := w.checkApplied(last.Num, end, path); err != nil {
		return err
	}
	sealed := m
	sealed.Sealed, sealed.Last, sealed.Bytes, sealed.Batches = true, end, nbytes, nbatches
	ls.sealedBytes += nbytes
	ls.sealedZnodes += nbatches + 1
	sealedBatches += nbatches
	next := channelMeta{Version: channelFormatVersion, First: end + 1, Epoch: w.epoch, Room: roomField(w.RoomVersion())}
	w.log.Info("sealing previous writer's channel", "channel", last.Num, "first", m.First, "last", end,
		"batches", nbatches, "orphans", len(names)-nbatches, "read_before", w.skippedScan)
	return published(len(infos)+1, w.openChannel(ctx, last.Num+1, next, 0, "seal channel and open next",
		&zk.SetDataRequest{Path: path, Data: encodeMeta(sealed), Version: ver},
		&zk.CreateRequest{Path: r.channelPath(last.Num + 1), Data: encodeMeta(next), Acl: w.c.ACL()}))
}

// checkApplied refuses a takeover whose log ends (at end, in channel num)
// below the caller's applied index: the writer would append at indexes the
// caller has already applied from another history.
func (w *Writer) checkApplied(num, end uint64, path string) error {
	if w.cfg.Applied <= end {
		return nil
	}
	if path == "" {
		path = w.room.Path(channelsNode)
	}
	return fmt.Errorf("%w: room %q channel %d znode %s: the log ends at index %d, below the %d entries the new writer's owner %q applied; refusing to write",
		ErrDiverged, w.room.name, num, path, end, w.cfg.Applied, w.cfg.Owner)
}

// openChannel applies ops (fenced) that leave channel num with meta at
// znode version ver, then makes it the writer's channel.
func (w *Writer) openChannel(ctx context.Context, num uint64, meta channelMeta, ver int32, what string, ops ...interface{}) error {
	path := w.room.channelPath(num)
	if err := w.fencedWrite(ctx, what, w.hasData(path, encodeMeta(meta)), ops...); err != nil {
		return err
	}
	ls := &w.ls
	ls.ch, ls.chPath, ls.chFirst, ls.chVersion = num, path, meta.First, ver
	ls.chBatches, ls.chBytes = 0, 0
	ls.next = meta.First
	w.start = meta.First
	w.log.Info("writer took over", "channel", num, "start", meta.First, "owner", w.cfg.Owner)
	return nil
}

// scanWindow is how many batch Gets a takeover keeps in flight.
const scanWindow = 16

// scanChain finds the end of the chain of channel num from first, given its
// child names: it reads the named batches in index order, scanWindow at a
// time, and stops at the first hole. Every batch of a channel carries the
// channel's epoch (a channel is written by the writer that opened or reused
// it only). Batches past the hole are orphans of a
// deposed writer (never acknowledged).
func (w *Writer) scanChain(ctx context.Context, num uint64, m channelMeta, names []string, st *zk.Stat) (end uint64, nbytes int64, nbatches int, err error) {
	r := w.room
	first := m.First
	firsts := make([]uint64, 0, len(names))
	for _, n := range names {
		if f, ok := parseNum(n, batchPrefix); ok && f >= first {
			firsts = append(firsts, f)
		}
	}
	slices.Sort(firsts)
	pos := first
	if p, ok := r.read.of(num, st.Czxid, first, m.Epoch); ok && childDeletes(st) == 0 {
		// A Reader of this Room delivered [first, p.next) of this channel
		// znode (the same czxid), each batch validated as below; the znode
		// never lost a child, and the listing names exactly those batches
		// below p.next. Read from p.next on. Otherwise (a name added or
		// gone in the prefix: a foreign write) scan it all, as before.
		i := 0
		for i < len(firsts) && firsts[i] < p.next {
			i++
		}
		if i == p.batches {
			pos, nbytes, nbatches = p.next, p.bytes, p.batches
			firsts = firsts[i:]
			w.skippedScan = p.batches
		}
	}
	for len(firsts) > 0 && firsts[0] == pos {
		n := min(len(firsts), scanWindow)
		datas := make([][]byte, n)
		err := parallel(n, n, func(i int) error {
			d, _, e := zkx.Get(ctx, r.c, r.batchPath(num, firsts[i]))
			if e != nil && !errors.Is(e, zk.ErrNoNode) {
				return zkError("logroom: read batch", e)
			}
			datas[i] = d
			return nil
		})
		if err != nil {
			return 0, 0, 0, err
		}
		for i := 0; i < n; i++ {
			if firsts[i] != pos || datas[i] == nil {
				return pos - 1, nbytes, nbatches, nil
			}
			path := r.batchPath(num, pos)
			b, err := DecodeBatch(datas[i])
			if errors.Is(err, ErrUnsupportedVersion) {
				// In a channel of a room version we read: forged or corrupt.
				err = fmt.Errorf("%w: a format room version %d does not have: %v", ErrCorrupt, m.roomVersion(), err)
			} else if err == nil && b.Codec.minRoomVersion() > m.roomVersion() {
				err = fmt.Errorf("%w: batch uses codec %v, which needs room version %d; the channel was opened at room version %d",
					ErrCorrupt, b.Codec, b.Codec.minRoomVersion(), m.roomVersion())
			}
			if err == nil && (b.First != pos || b.Count == 0 || b.Epoch != m.Epoch) {
				err = fmt.Errorf("%w: batch first %d count %d epoch %d, expected first %d epoch %d (the channel's)",
					ErrCorrupt, b.First, b.Count, b.Epoch, pos, m.Epoch)
			}
			if err != nil {
				return 0, 0, 0, r.corrupt(num, path, err)
			}
			pos += uint64(b.Count)
			nbytes += int64(len(datas[i]))
			nbatches++
		}
		firsts = firsts[n:]
	}
	return pos - 1, nbytes, nbatches, nil
}

// Epoch returns the writer's epoch.
func (w *Writer) Epoch() uint64 { return w.epoch }

// StartIndex returns the first index this writer assigns (log end at
// takeover + 1).
func (w *Writer) StartIndex() uint64 { return w.start }

// LastCommitted returns the highest acknowledged index (StartIndex-1 before
// the first acknowledgement).
func (w *Writer) LastCommitted() uint64 { return w.lastCommitted.Load() }

// Append appends entries and returns the index of the last one once it and
// every earlier entry are durable in ZooKeeper. Concurrent callers share
// batches. Errors: ErrEntryTooLarge / ErrRoomFull (nothing sent), ErrFenced
// (nothing of this call committed), ErrOutcomeUnknown (it may or may not be
// committed, e.g. ctx ended after it was handed to the pipeline), ErrClosed,
// or ctx's error when it ended before anything was handed over. Append with
// no entries returns LastCommitted().
func (w *Writer) Append(ctx context.Context, entries ...[]byte) (last uint64, err error) {
	if len(entries) == 0 {
		return w.LastCommitted(), nil
	}
	m := w.m
	if m == nil {
		return w.appendEntries(ctx, entries)
	}
	t0 := time.Now()
	last, err = w.appendEntries(ctx, entries)
	m.appendDone(t0, err)
	return last, err
}

// appendEntries is Append without metrics.
func (w *Writer) appendEntries(ctx context.Context, entries [][]byte) (last uint64, err error) {
	size := 0
	for i, e := range entries {
		if len(e) > w.maxEntry {
			return 0, fmt.Errorf("%w: entry %d of %d bytes, at most %d fit in a batch of %d bytes",
				ErrEntryTooLarge, i, len(e), w.maxEntry, w.cfg.MaxBatchBytes)
		}
		size += EntrySize(len(e))
	}
	if int64(size) > w.cfg.MaxRoomBytes {
		return 0, fmt.Errorf("%w: an append of %d bytes exceeds MaxRoomBytes %d", ErrRoomFull, size, w.cfg.MaxRoomBytes)
	}
	req := &appendReq{payload: make([]byte, 0, size), ends: make([]int, len(entries)), done: make(chan appendResult, 1)}
	for i, e := range entries {
		req.payload = appendUvarint(req.payload, uint64(len(e)))
		req.payload = append(req.payload, e...)
		req.ends[i] = len(req.payload)
	}
	if err := w.enqueue(ctx, req); err != nil {
		return 0, err
	}
	select {
	case res := <-req.done:
		return res.last, res.err
	case <-ctx.Done():
	}
	w.mu.Lock()
	if req.state == reqQueued {
		req.state = reqCancelled
		w.dequeueLocked(req)
		w.mu.Unlock()
		return 0, ctx.Err()
	}
	w.mu.Unlock()
	select {
	case res := <-req.done: // decided meanwhile
		return res.last, res.err
	default:
		return 0, fmt.Errorf("%w: %w", ErrOutcomeUnknown, ctx.Err())
	}
}

func appendUvarint(b []byte, x uint64) []byte {
	for x >= 0x80 {
		b = append(b, byte(x)|0x80)
		x >>= 7
	}
	return append(b, byte(x))
}

// enqueue adds req to the queue, waiting for space up to MaxQueuedBytes (a
// request larger than the bound is admitted alone into an empty queue).
func (w *Writer) enqueue(ctx context.Context, req *appendReq) error {
	w.mu.Lock()
	for {
		if w.failErr != nil {
			err := w.failErr
			w.mu.Unlock()
			return err
		}
		if w.queuedBytes == 0 || w.queuedBytes+len(req.payload) <= w.cfg.MaxQueuedBytes {
			break
		}
		space := w.spaceCh
		w.spaceWanted = true
		w.mu.Unlock()
		select {
		case <-space:
		case <-ctx.Done():
			return ctx.Err()
		case <-w.stop:
			return fmt.Errorf("%w: writer", ErrClosed)
		}
		w.mu.Lock()
	}
	w.queue = append(w.queue, req)
	w.queuedBytes += len(req.payload)
	w.m.queued(len(req.payload))
	w.mu.Unlock()
	w.kick.Notify()
	return nil
}

// dequeueLocked removes a queued request (w.mu held).
func (w *Writer) dequeueLocked(req *appendReq) {
	if i := slices.Index(w.queue, req); i >= 0 {
		w.queue = slices.Delete(w.queue, i, i+1)
		w.queuedBytes -= len(req.payload)
		w.m.queued(-len(req.payload))
		w.signalSpaceLocked()
	}
}

func (w *Writer) signalSpaceLocked() {
	if w.spaceWanted {
		w.spaceWanted = false
		close(w.spaceCh)
		w.spaceCh = make(chan struct{})
	}
}

// popLocked removes the head of the queue (w.mu held); the caller adjusts
// queuedBytes.
func (w *Writer) popLocked() {
	w.queue[0] = nil // let the request be collected
	w.queue = w.queue[1:]
}

// Rotate seals the open channel at the last assigned index and opens the
// next one, in one fenced Multi, after the batches in flight are
// acknowledged. Appends meanwhile wait about one round trip. It returns the
// sealed channel.
func (w *Writer) Rotate(ctx context.Context) (ChannelInfo, error) {
	return w.rotateReq(ctx, &rotateReq{done: make(chan rotateResult, 1)})
}

// RotateToVersion is Rotate that also moves the room to room version v:
// the same fenced Multi that seals the open channel and opens the next
// one sets the room meta to v (from the next channel's first index) and
// opens the next channel at v, so every batch of a channel uses the
// formats of one room version. The caller decides whether the room's
// members support v (package replica does); v must be one this binary
// and WriterConfig.MaxRoomVersion support (ErrUnsupportedVersion).
func (w *Writer) RotateToVersion(ctx context.Context, v int) (ChannelInfo, error) {
	if err := w.cfg.checkRoomVersion(v); err != nil {
		return ChannelInfo{}, fmt.Errorf("logroom: rotate: %w", err)
	}
	return w.rotateReq(ctx, &rotateReq{done: make(chan rotateResult, 1), roomVersion: v})
}

// RoomVersion is the room version of the writer's open channel: the
// formats it writes.
func (w *Writer) RoomVersion() int { return int(w.roomVer.Load()) }

func (w *Writer) rotateReq(ctx context.Context, req *rotateReq) (ChannelInfo, error) {
	select {
	case w.rotateCh <- req:
	case <-ctx.Done():
		return ChannelInfo{}, ctx.Err()
	case <-w.done:
		return ChannelInfo{}, w.terminalErr()
	}
	select {
	case res := <-req.done:
		return res.info, res.err
	case <-ctx.Done():
		return ChannelInfo{}, ctx.Err()
	}
}

func (w *Writer) terminalErr() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failErr != nil {
		return w.failErr
	}
	return fmt.Errorf("%w: writer", ErrClosed)
}

// Close stops the writer and waits for its loop. Queued appends get
// ErrClosed; appends whose batches were in flight get their outcome, or
// ErrOutcomeUnknown when it could not be learned. Close does not seal the
// channel: the next writer does that at takeover.
func (w *Writer) Close() error {
	w.stopOnce.Do(func() {
		w.mu.Lock()
		if w.failErr == nil {
			w.failErr = fmt.Errorf("%w: writer", ErrClosed)
		}
		w.mu.Unlock()
		close(w.stop)
		w.cancelLife()
	})
	<-w.done
	return nil
}

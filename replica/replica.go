package replica

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"

	"github.com/roomlog/roomlog/zkx"
)

// Replica is one member of a room: primary or standby. All methods are safe
// for concurrent use. See the package doc for the protocol.
type Replica struct {
	cfg      Config // with defaults applied; read-only after Open
	log      *slog.Logger
	client   *logroom.Client
	room     *logroom.Room
	conn     *zk.Conn
	acl      []zk.ACL
	storeDir string
	ckptRoot string
	baseURL  string // checkpoint base URL of AdvertiseAddr ("" when none)

	// bgCtx ends when Close starts (after the loop stopped): it bounds every
	// background goroutine; cancelBG ends it.
	bgCtx     context.Context
	cancelBG  context.CancelFunc
	wg        sync.WaitGroup // every goroutine but the loop
	stopc     chan struct{}  // closed by Close: the loop shuts down
	loopDone  chan struct{}  // closed when the loop has returned
	closing   atomic.Bool
	closeOnce sync.Once // Close runs once; later calls wait for it and return closeErr
	closeErr  error

	// storeMu guards st: bootstrap swaps the store under the write lock;
	// applying, checkpointing and reading hold the read lock.
	storeMu sync.RWMutex
	st      *store.Store
	// stRun is st, for the running hash only (Store.RunHash and RunHashAt
	// read memory, never the database, and work on a closed store), so
	// Status and the loop never wait for storeMu while a bootstrap swaps
	// the store.
	stRun atomic.Pointer[store.Store]

	// live is crash detection faster than the session (liveness.go).
	live *liveness

	// Apply progress. applied is the local applied index (== the store's
	// after every Apply); it only grows. propMu is the one lock of the
	// proposal bookkeeping: it guards waiters, resps and inflight, each
	// term's accepting, inflight, idle and handoff, and the commit queue,
	// and orders applied updates with waiter registration. Nothing that
	// holds it waits or takes another lock.
	applied atomic.Uint64
	// catchUp, on a primary handing leadership over, is the index it asks
	// the target to publish as soon as it has applied (0: not asking).
	catchUp atomic.Uint64
	// appliedEpoch is the epoch of the last applied entry (the loop reads
	// it instead of the store, which bootstrap may hold locked for long).
	appliedEpoch atomic.Uint64
	// tailErr is the standby tail's last error (nil while it progresses).
	tailErr   atomic.Pointer[error]
	propMu    sync.Mutex
	waiters   map[uint64]chan proposalOutcome  // index -> a Propose waiting for its response
	resps     *respRing                        // recent outcomes by index
	inflight  map[store.RequestID]*inflightReq // request ids being proposed on this replica
	appliedCh atomic.Pointer[chan struct{}]    // closed and replaced when applied advances

	// Checkpoint policy counters, written by the (single) apply goroutine
	// and reset by the checkpointer.
	sinceEntries atomic.Int64
	sinceBytes   atomic.Int64
	localCkpt    atomic.Uint64 // index of the newest local checkpoint
	roomCzxid    int64         // the room znode's czxid (set by checkDataDir in Open; read-only after)
	bootstraps   atomic.Int64
	// The bootstrap hold (memberData.Hold, HoldProgress), set by the apply
	// goroutine, published by the loop; holdPublished is the hold our
	// member node was last confirmed to hold (outrun.go).
	hold            atomic.Uint64
	holdProgress    atomic.Uint64
	holdPublished   atomic.Uint64
	holdTarget      atomic.Uint64 // the catch-up hold lasts until applied reaches it
	holdInstalled   atomic.Uint64 // the checkpoint index our catch-up hold started from (0: still fetching)
	lastBoot        atomic.Pointer[BootstrapReport]
	outrunsInARow   atomic.Int64
	outruns         atomic.Int64        // bootstraps outrun (ErrBootstrapOutrun)
	holdsSeen       map[string]bootHold // primary: the holds it saw (checkpointer goroutine only)
	holdsLapsed     atomic.Int64        // primary: holds that lapsed (no progress for BootstrapHoldStall)
	holdsLapsedPrev map[string]bool     // primary: members whose hold had lapsed at the last check (checkpointer goroutine only)
	heldByBoot      atomic.Uint64       // primary: the hold its last deletion check honoured (0: none)
	ckptTrig        zkx.Signal          // the policy asks for a checkpoint
	ckptReq         chan ckptRequest    // on-demand checkpoints
	ckptReady       zkx.Signal          // tells the loop to publish member data (a checkpoint, a transfer's CatchUp)
	committedHi     atomic.Uint64       // highest committed index seen
	archiver        *archiver           // Config.Archive's state (archive.go); nil without one
	fatalErr        atomic.Pointer[error]
	sem             chan struct{}      // proposal slots (MaxPendingProposals)
	roleCh          chan RoleChange    // buffered; the loop drops the oldest when full
	reqc            chan loopRequest   // API -> loop
	jobDone         chan jobResult     // the loop's ZooKeeper workers -> loop (one job per lane at a time: never blocks)
	watchc          chan watchEvent    // watch forwarders -> loop
	writerFailc     chan writerFailure // Propose/checkpointer -> loop: this term's writer is fenced or dead
	failc           chan error         // any goroutine -> loop: unrecoverable error
	events          <-chan zk.Event    // session events (Client.Subscribe)
	unsubscribe     func()

	// markerRV is the room version DataDir's marker records (set by
	// checkMarker in Open, then by the loop: recordRoomVersion).
	markerRV int

	// stalled is closed when a store of this replica declared its disk
	// stalled (store.ErrDiskStalled): waits for goroutines that may be
	// stuck on that disk end there.
	stalled   chan struct{}
	stallOnce sync.Once

	// term is the current primary term (nil unless primary and past
	// takeover). Only the loop sets it; Propose reads it.
	term atomic.Pointer[term]

	// snap is the one status snapshot the loop publishes (publishSnap) for
	// Status, the metrics, Propose's connection gate (connected) and the
	// waiters of TransferLeadership: immutable once published; each one's
	// changed channel is closed when the next replaces it.
	snap atomic.Pointer[statusSnap]

	// lp is the run loop's private state: only the loop goroutine (and Open,
	// before the loop starts) touches it.
	lp *loopState

	httpSrv  *http.Server
	listener net.Listener

	m *metrics // nil without Config.Registerer; set in Open before any goroutine
}

// statusSnap is what the loop publishes for Status (Replica.snap).
type statusSnap struct {
	changed     chan struct{} // closed when a newer snapshot replaces this one
	connected   bool          // the session is usable: Propose may send and acknowledge
	linkCut     bool          // a read on the session went unanswered (core's linkDue): reads that need ZooKeeper are refused
	role        Role
	epoch       uint64
	primaryID   string
	primaryAddr string
	members     []MemberStatus
	foreign     []ForeignZnode
	connState   zk.State
	sessionID   int64
	suspended   time.Time
	openChannel uint64
	channels    int
	roomBytes   int64
	roomCharged int64
	// hash: the integrity check's counts and its last report.
	hashCompared, hashMismatches uint64
	hashReport                   string
	audited                      time.Time // last completed log audit
	// The room version as last read, the operator's target and why the
	// room is not there ("" when it is).
	roomVersion, roomVersionTarget int
	roomVersionSince               uint64
	roomVersionBlocked             string
}

// Result is the outcome of a committed and applied proposal.
type Result struct {
	Index    uint64 // the entry's index in the log
	Response []byte // what the Applier returned for it
	// Duplicate: ProposeRequest found the request already applied (a retry
	// of a proposal that succeeded); Index and Response are the original's
	// and the entry was not applied again.
	Duplicate bool
}

// Open validates cfg, opens the local store, connects to ZooKeeper, joins
// the room's membership and election, and starts the replica as a standby
// (it becomes primary if it wins the election). It returns once the
// membership node and the election candidate exist. An observer
// (Config.Observer) joins the membership only: it never enters the
// election.
func Open(ctx context.Context, cfg Config) (_ *Replica, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if err := checkDiverged(cfg.DataDir); err != nil {
		return nil, err
	}
	r := &Replica{
		live:        newLiveness(),
		cfg:         cfg,
		archiver:    newArchiverFor(cfg.Archive),
		log:         cfg.Logger.With("room", cfg.Room, "member", cfg.ID),
		storeDir:    filepath.Join(cfg.DataDir, "store"),
		ckptRoot:    filepath.Join(cfg.DataDir, "checkpoints"),
		stopc:       make(chan struct{}),
		loopDone:    make(chan struct{}),
		waiters:     map[uint64]chan proposalOutcome{},
		resps:       newRespRing(2*cfg.MaxPendingProposals + 1024),
		inflight:    make(map[store.RequestID]*inflightReq),
		ckptTrig:    zkx.NewSignal(),
		ckptReq:     make(chan ckptRequest),
		ckptReady:   zkx.NewSignal(),
		sem:         make(chan struct{}, cfg.MaxPendingProposals),
		roleCh:      make(chan RoleChange, 16),
		reqc:        make(chan loopRequest),
		jobDone:     make(chan jobResult, 2),
		watchc:      make(chan watchEvent, 64),
		writerFailc: make(chan writerFailure, 1),
		failc:       make(chan error, 1),
		stalled:     make(chan struct{}),
	}
	appliedCh := make(chan struct{})
	r.appliedCh.Store(&appliedCh)
	r.snap.Store(&statusSnap{changed: make(chan struct{}), role: RoleStandby})
	if cfg.AdvertiseAddr != "" {
		r.baseURL, _ = checkpointBaseURL(cfg.AdvertiseAddr) // validated
	}
	if cfg.PeerTLS != nil {
		var check func([]*x509.Certificate) error
		if len(cfg.PeerIdentities) > 0 {
			check = cfg.peerIdentityOK
		}
		r.live.usePeerTLS(cfg.PeerTLS, check) // peertls.go
	}
	if cfg.Registerer != nil {
		reg := prometheus.WrapRegistererWith(prometheus.Labels{"room": cfg.Room, "member": cfg.ID}, cfg.Registerer)
		if r.m, err = newMetrics(reg, r); err != nil {
			return nil, fmt.Errorf("replica: register metrics: %w", err)
		}
	}
	r.bgCtx, r.cancelBG = context.WithCancel(context.Background())
	defer func() {
		if err != nil {
			r.cancelBG()
			if r.httpSrv != nil {
				r.httpSrv.Close()
			}
			r.waitGoroutines()
			r.closeResources()
		}
	}()

	if err := os.MkdirAll(r.ckptRoot, 0o755); err != nil {
		return nil, fmt.Errorf("replica: data dir: %w", err)
	}
	if err := checkpoint.CleanTemp(r.ckptRoot, 0); err != nil {
		r.log.Warn("checkpoint temp cleanup failed", "err", err)
	}
	if err := r.recoverInterruptedRestore(); err != nil {
		return nil, err
	}
	st, err := store.Open(r.storeDir, r.storeOptions())
	if err != nil {
		return nil, fmt.Errorf("replica: open store: %w", err)
	}
	r.setStore(st)
	r.applied.Store(st.AppliedIndex())
	r.appliedEpoch.Store(st.AppliedEpoch())
	r.committedHi.Store(st.AppliedIndex())
	if n, err := checkpoint.Newest(r.ckptRoot); err == nil {
		r.localCkpt.Store(n.Manifest.Index)
		if a := st.AppliedIndex(); a > n.Manifest.Index {
			r.sinceEntries.Store(int64(a - n.Manifest.Index))
		}
	} else {
		r.sinceEntries.Store(int64(st.AppliedIndex()))
	}

	r.client, err = logroom.Dial(ctx, cfg.zkDialConfig(cfg.Logger, cfg.AnyServer))
	if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	r.events, r.unsubscribe = r.client.Subscribe()
	r.conn, r.acl = r.client.Conn(), r.client.ACL()
	// A member holding state never creates the room: a room that vanished
	// is ZooKeeper's data loss, reported (package doc, "Disaster recovery").
	hasState := st.AppliedIndex() > 0
	if err := r.checkMarkerRoom(); err != nil {
		return nil, err
	}
	if hasState {
		if err := r.checkRoomAtOpen(ctx); err != nil {
			return nil, err
		}
	}
	r.room, err = logroom.OpenRoom(ctx, r.client, cfg.Room, logroom.RoomOptions{Base: cfg.Base, Logger: cfg.Logger, Metrics: r.m.roomMetrics(),
		MaxRoomVersion: cfg.MaxRoomVersion, NoCreate: hasState})
	if hasState && errors.Is(err, logroom.ErrNoRoom) {
		lost := r.roomGone("Open found")
		r.tombstone(ctx, r.client, lost)
		return nil, lost
	}
	if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	// Before anything is applied: the room's version must be one we
	// support (OpenRoom already refused one beyond this binary).
	rv, err := r.room.RoomVersion(ctx)
	if err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	if _, hi := r.roomVersions(); rv.Version > hi {
		return nil, r.unsupportedRoom(rv.Version)
	}
	r.publishSnap(func(s *statusSnap) { s.roomVersion, s.roomVersionSince = rv.Version, rv.Since })
	_, roomStat, err := r.conn.Exists(r.room.Path())
	if err != nil {
		return nil, fmt.Errorf("replica: stat room: %w", err)
	}
	if err := r.checkDataDir(ctx, roomStat.Czxid); err != nil {
		return nil, err
	}
	// Before joining: the log must still hold what we applied.
	if id, applied := r.appliedBatch(); applied > 0 {
		if err := r.room.MatchLog(ctx, id, applied); errors.Is(err, logroom.ErrDiverged) {
			lost := logLost("Open found", err)
			if m, _ := readMarker(r.cfg.DataDir); m != nil && m.EpochZnode == r.room.EpochZnode() {
				// Only when the data dir names this incarnation's epoch
				// znode: a marker from before they were recorded accepts a
				// room re-seeded under the same czxid.
				_ = r.markLost(ctx, r.client, lost)
			}
			return nil, lost
		} else if err != nil {
			return nil, fmt.Errorf("replica: check the log against the applied state: %w", err)
		}
	}
	for _, dir := range []string{r.room.Path(membersDir), r.room.Path(electionDir)} {
		// Only the leaf: the room znode above is never created here (a
		// room deleted meanwhile is reported, not re-created empty).
		_, err := zkx.RetryValue(ctx, nil, func() (string, error) { return r.conn.Create(dir, nil, 0, r.acl) })
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
		case errors.Is(err, zk.ErrNoNode):
			return nil, r.roomGone("Open found (creating " + dir + ")")
		default:
			return nil, fmt.Errorf("replica: create %s: %w", dir, err)
		}
	}

	if cfg.ListenAddr != "" {
		if err := r.serveHTTP(); err != nil {
			return nil, err
		}
	}
	if r.lp, err = newLoopState(r); err != nil {
		return nil, fmt.Errorf("replica: %w", err)
	}
	guid := r.lp.el.line.GUID() // what our liveness stream names
	r.live.guid.Store(&guid)
	// A node of our id may still be held by our own previous incarnation
	// (killed less than a session timeout ago): wait that long before
	// calling it a duplicate.
	wait := cfg.SessionTimeout*3/2 + time.Second
	if err := r.lp.mem.join(ctx, r.ownMemberData(), wait); err != nil {
		r.lp.el.close()
		return nil, fmt.Errorf("replica: join membership: %w", err)
	}
	if !cfg.Observer { // an observer never holds a candidate
		ectx, ecancel := context.WithTimeout(ctx, cfg.SessionTimeout)
		err := r.lp.el.ensure(ectx)
		ecancel()
		if err != nil {
			lctx, cancel := context.WithTimeout(context.Background(), time.Second)
			_ = r.lp.el.resign(lctx)
			r.lp.el.close()
			_ = r.lp.mem.close(lctx)
			cancel()
			return nil, fmt.Errorf("replica: enter election: %w", err)
		}
	}
	r.setConnected(r.client.State() == zk.StateHasSession)
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		r.runCheckpointer(r.bgCtx)
	}()
	if !cfg.Observer { // an observer never takes over: it watches no primary
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.runLiveness(r.bgCtx)
		}()
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.runOperatorRequests(r.bgCtx)
		}()
	}
	go r.run()
	return r, nil
}

func (r *Replica) storeOptions() *store.Options {
	var o store.Options
	if r.cfg.StoreOptions != nil {
		o = *r.cfg.StoreOptions
	}
	if r.cfg.Applier != nil {
		o.Applier = r.cfg.Applier
	}
	o.Logger = r.cfg.Logger
	user := o.OnDiskStall
	o.OnDiskStall = func(err error) {
		r.diskStalled(err)
		if user != nil {
			user(err)
		}
	}
	return &o
}

// diskStalled fails the replica on a stalled local disk (store.ErrDiskStalled):
// waits for goroutines that may be stuck on it end now (unlessStalled).
func (r *Replica) diskStalled(err error) {
	r.stallOnce.Do(func() { close(r.stalled) })
	select {
	case r.failc <- fmt.Errorf("local store: %w", err):
	default: // an earlier unrecoverable error is queued: it fails the replica
	}
}

// stopSlack is how much longer than DiskStallTimeout unlessStalled waits
// for a goroutine before it presumes it stuck on the disk (a variable for
// tests).
var stopSlack = 10 * time.Second

// unlessStalled waits for done, closed by a goroutine that may be stuck in
// a system call on the local disk that never returns. It waits until done
// is closed, a store of this replica declares its disk stalled, or
// DiskStallTimeout + stopSlack pass: then the goroutine (what) is presumed
// stuck on the disk and the replica fails with store.ErrDiskStalled. It
// reports whether done was closed.
func (r *Replica) unlessStalled(what string, done <-chan struct{}) bool {
	d := store.DefaultDiskStallTimeout
	if o := r.cfg.StoreOptions; o != nil && o.DiskStallTimeout != 0 {
		d = o.DiskStallTimeout
	}
	limit := time.NewTimer(d + stopSlack)
	defer limit.Stop()
	select {
	case <-done:
		return true
	case <-r.stalled:
	case <-limit.C:
		r.diskStalled(fmt.Errorf("%w: %s did not end within %v (DiskStallTimeout + %v): presumed stuck on the disk",
			store.ErrDiskStalled, what, d+stopSlack, stopSlack))
	}
	select {
	case <-done:
		return true
	default:
		return false
	}
}

// waitGoroutines waits for every goroutine but the loop, except those stuck
// on a stalled disk.
func (r *Replica) waitGoroutines() {
	done := make(chan struct{})
	go func() {
		r.wg.Wait()
		close(done)
	}()
	if !r.unlessStalled("the replica's goroutines", done) {
		r.log.Warn("close: goroutines stuck on the stalled disk are left behind")
	}
}

// Close leaves the room: it stops the loops, closes the writer (pending
// proposals get their outcome or ErrClosed/ErrOutcomeUnknown), deletes this
// member's ephemeral nodes, closes the ZooKeeper client and the store, and
// waits for every goroutine. Idempotent; later calls return the first
// result.
func (r *Replica) Close() error {
	r.closeOnce.Do(func() { r.closeErr = r.close() })
	return r.closeErr
}

func (r *Replica) close() error {
	// A primary first lets its in-flight proposals finish (bounded), so
	// that closing does not turn them into unknown outcomes.
	if t := r.currentTerm(); t != nil {
		ctx, cancel := context.WithTimeout(context.Background(), r.cfg.SessionTimeout)
		_ = r.drain(ctx, t)
		cancel()
	}
	r.closing.Store(true)
	close(r.stopc)
	if !r.unlessStalled("the replica's loop", r.loopDone) {
		r.log.Warn("close: the replica's loop is stuck on the stalled disk; left behind")
	}
	r.cancelBG()
	if r.httpSrv != nil {
		r.httpSrv.Close()
	}
	r.waitGoroutines()
	r.failWaiters(fmt.Errorf("%w: %w", ErrNoResponse, ErrClosed))
	return r.closeResources()
}

// closeResources closes the client and the store (Open's failure path and
// Close). On a stalled disk it returns without waiting for the store's lock
// (an Apply stuck on the disk holds it): the store is closed in the
// background once the lock is free.
func (r *Replica) closeResources() error {
	r.m.unregister()
	if r.unsubscribe != nil {
		r.unsubscribe()
	}
	if r.client != nil {
		r.client.Close()
	}
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		// A read lock: a writer waiting here behind an Apply stuck on the
		// disk would block every later reader (Get, Store, StateHash)
		// until the disk recovers. Store.Close is safe beside readers.
		r.storeMu.RLock()
		defer r.storeMu.RUnlock()
		if r.st != nil {
			err = r.st.Close()
			if errors.Is(err, store.ErrClosed) {
				err = nil
			}
		}
	}()
	// Not unlessStalled's limit: the store's Close is watched by the store
	// itself (Pebble's health checks), and Pebble's Close may legitimately
	// wait out a long compaction.
	select {
	case <-done:
		return err
	case <-r.stalled:
	}
	select {
	case <-done:
		return err
	default:
		return fmt.Errorf("replica: close store: %w (an operation is stuck on the disk; the store closes in the background if it recovers)", store.ErrDiskStalled)
	}
}

// usable returns ErrClosed / the fatal error when the replica cannot serve.
func (r *Replica) usable() error {
	if r.closing.Load() {
		return ErrClosed
	}
	if p := r.fatalErr.Load(); p != nil {
		return fmt.Errorf("%w: %w", ErrFailed, *p)
	}
	return nil
}

// Store returns the local store's read side (Get, View, StateHash,
// AppliedIndex, the request table); nothing reached through it writes. It
// follows the replica across bootstraps from a peer's checkpoint
// (Status().Bootstraps grows): each call reads the store current at that
// moment, so one Reader serves for the replica's lifetime. A View opened
// before a bootstrap returns store.ErrClosed after it: open a new one.
func (r *Replica) Store() store.Reader { return storeReader{r} }

// StateHash is the local store's StateHash, safe across bootstraps.
func (r *Replica) StateHash() (hash string, index uint64, err error) {
	r.storeMu.RLock()
	defer r.storeMu.RUnlock()
	return r.st.StateHash()
}

// RunHash returns the running state hash at the applied index (package
// doc, "Integrity"): the hash this member publishes and compares with its
// peers'.
func (r *Replica) RunHash() store.RunHash {
	if st := r.stRun.Load(); st != nil {
		return st.RunHash()
	}
	return store.RunHash{}
}

// RunHashAt returns the running hash at index if this member's store
// still keeps it: its applied index, or one of the last 16384 entries it
// applied since it opened (store.Store.RunHashAt). A store built at index
// from the room's archive (archive.Restore) holds the same hash when its
// chain has the same Base.
func (r *Replica) RunHashAt(index uint64) (store.RunHash, bool) { return r.runHashAt(index) }

// runHashAt is the running hash at index, if the store still keeps it.
func (r *Replica) runHashAt(index uint64) (store.RunHash, bool) {
	if st := r.stRun.Load(); st != nil {
		return st.RunHashAt(index)
	}
	return store.RunHash{}, false
}

// setStore makes st the replica's store (storeMu held for writing, or in
// Open before anything else runs).
func (r *Replica) setStore(st *store.Store) {
	r.st = st
	r.stRun.Store(st)
}

// Get reads key from the local store, safe across bootstraps.
func (r *Replica) Get(key []byte) ([]byte, error) {
	r.storeMu.RLock()
	defer r.storeMu.RUnlock()
	return r.st.Get(key)
}

// Room returns the read side of the replica's logroom room (Channels,
// Bytes, CommittedIndex, ...); writing to the room is the replica's alone.
func (r *Replica) Room() RoomReader { return RoomReader{r.room} }

// ID returns Config.ID.
func (r *Replica) ID() string { return r.cfg.ID }

// RoleChanges returns a channel that receives every role change of this
// replica. It is buffered; when the consumer falls behind, the oldest
// undelivered change is dropped (Status always has the current role), so a
// slow consumer never stalls the replica. It is never closed.
func (r *Replica) RoleChanges() <-chan RoleChange { return r.roleCh }

// Status returns a snapshot of this replica's view. It never blocks on
// ZooKeeper.
func (r *Replica) Status() Status {
	s := r.snap.Load()
	members := append([]MemberStatus(nil), s.members...)
	foreign := append([]ForeignZnode(nil), s.foreign...)
	applied := r.applied.Load()
	committed := max(r.committedHi.Load(), applied)
	st := Status{
		Archive: r.ArchiveStatus(),
		ID:      r.cfg.ID, Room: r.cfg.Room, Role: s.role, Epoch: s.epoch,
		Applied: applied, Committed: committed, Lag: committed - applied,
		Observer:  r.cfg.Observer,
		PrimaryID: s.primaryID, PrimaryAddr: s.primaryAddr, Members: members, Foreign: foreign,
		Connected: s.connState == zk.StateHasSession, ConnState: s.connState.String(), SessionID: s.sessionID,
		OpenChannel: s.openChannel, Channels: s.channels, RoomBytes: s.roomBytes,
		RoomCharged: s.roomCharged, MaxRoomBytes: r.cfg.Writer.MaxRoomBytes,
		CheckpointIndex: r.localCkpt.Load(), Bootstraps: int(r.bootstraps.Load()),
		BootstrapHold: r.hold.Load(), BootstrapOutruns: r.outruns.Load(), LastBootstrap: r.lastBoot.Load(),
		HeldByBootstrap: r.heldByBoot.Load(), BootstrapHoldsLapsed: r.holdsLapsed.Load(),
		Pending:      len(r.sem),
		HashCompared: s.hashCompared, HashMismatches: s.hashMismatches, HashReport: s.hashReport,
		Audited:     s.audited,
		RoomVersion: s.roomVersion, RoomVersionSince: s.roomVersionSince, RoomVersionTarget: s.roomVersionTarget,
		RoomVersionBlocked: s.roomVersionBlocked,
	}
	st.RoomVersionMin, st.RoomVersionMax = r.roomVersions()
	if st.MaxRoomBytes <= 0 {
		st.MaxRoomBytes = DefaultMaxRoomBytes // the writer's default
	}
	st.Depositions, st.DepositionsWrong = r.live.deposed.Load(), r.live.deposedWrong.Load()
	if ev := r.live.lastEvidence.Load(); ev != nil {
		st.LastDeposition = *ev
	}
	rh := r.RunHash()
	st.HashIndex, st.HashBase = rh.Index, rh.Base
	if rh.Index > 0 {
		st.Hash = rh.String()
	}
	if !s.suspended.IsZero() {
		st.Suspended = time.Since(s.suspended)
	}
	if p := r.fatalErr.Load(); p != nil {
		st.Err = *p
	}
	if p := r.tailErr.Load(); p != nil && s.role != RolePrimary {
		st.TailErr = *p
	}
	return st
}

// publishSnap publishes a copy of the status snapshot changed by f (the
// loop only, or Open before the loop starts) and wakes the waiters of the
// one it replaces.
func (r *Replica) publishSnap(f func(*statusSnap)) {
	old := r.snap.Load()
	n := *old
	f(&n)
	n.changed = make(chan struct{})
	r.snap.Store(&n)
	close(old.changed)
}

// setConnected publishes the connection state for Propose's gate.
func (r *Replica) setConnected(ok bool) {
	if ok == r.snap.Load().connected {
		return
	}
	r.publishSnap(func(s *statusSnap) { s.connected = ok })
}

// waitConnected returns once the ZooKeeper session is usable (nil), ctx
// ends, the replica closes, or done is closed (errTermEnded).
func (r *Replica) waitConnected(ctx context.Context, done <-chan struct{}) error {
	for {
		s := r.snap.Load()
		if s.connected {
			return nil
		}
		select {
		case <-s.changed:
		case <-done:
			return errTermEnded
		case <-ctx.Done():
			return ctx.Err()
		case <-r.stopc:
			return ErrClosed
		}
	}
}

var errTermEnded = errors.New("replica: primary term ended")

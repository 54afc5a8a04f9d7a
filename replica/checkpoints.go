package replica

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

type ckptRequest struct {
	ctx   context.Context
	reply chan error
}

// Checkpoint makes a local checkpoint now. On the primary it first rotates
// the log to a new channel, then records the checkpoint in the room and
// deletes the channels invariant 6 allows (see the package doc).
func (r *Replica) Checkpoint(ctx context.Context) error {
	if err := r.usable(); err != nil {
		return err
	}
	req := ckptRequest{ctx: ctx, reply: make(chan error, 1)}
	select {
	case r.ckptReq <- req:
	case <-ctx.Done():
		return ctx.Err()
	case <-r.stopc:
		return ErrClosed
	}
	select {
	case err := <-req.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	case <-r.stopc:
		return ErrClosed
	}
}

// runCheckpointer serialises checkpoints (policy and on demand) and, on the
// primary, channel deletion.
func (r *Replica) runCheckpointer(ctx context.Context) {
	sweep := time.NewTicker(2 * time.Second)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.ckptTrig:
			if err := r.doCheckpoint(ctx); err != nil && ctx.Err() == nil {
				r.log.Warn("policy checkpoint failed", "err", err)
			}
		case req := <-r.ckptReq:
			cctx, cancel := mergeCtx(ctx, req.ctx)
			req.reply <- r.doCheckpoint(cctx)
			cancel()
		case <-sweep.C:
			// Members may have caught up since the last checkpoint: retry
			// deletion (primary only).
			if t := r.currentTerm(); t != nil {
				if err := r.deleteChannels(ctx, r.localCkpt.Load()); err != nil && ctx.Err() == nil {
					r.log.Debug("channel deletion sweep failed", "err", err)
				}
			}
		}
	}
}

// mergeCtx ends when either ends.
func mergeCtx(a, b context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(a)
	stop := context.AfterFunc(b, cancel)
	return ctx, func() { stop(); cancel() }
}

func (r *Replica) doCheckpoint(ctx context.Context) error {
	if err := r.usable(); err != nil {
		return err
	}
	t := r.currentTerm()
	if t != nil {
		// Seal the open channel so the checkpoint covers whole channels.
		sealed, err := t.w.Rotate(ctx)
		switch {
		case err == nil:
			if err := r.waitApplied(ctx, sealed.LastIndex, t.done); err != nil && !errors.Is(err, errTermEnded) {
				return fmt.Errorf("replica: checkpoint: wait for sealed channel: %w", err)
			}
		case errors.Is(err, logroom.ErrFenced), errors.Is(err, logroom.ErrOutcomeUnknown), errors.Is(err, logroom.ErrClosed):
			r.writerFailed(t, err)
			t = nil
		default:
			r.log.Warn("checkpoint: rotate failed; checkpointing without it", "err", err)
		}
	}
	// The counters restart now: entries applied from here on count toward
	// the next checkpoint.
	r.sinceEntries.Store(0)
	r.sinceBytes.Store(0)
	r.storeMu.RLock()
	info, err := checkpoint.Create(ctx, r.st, r.ckptRoot, r.cfg.Room)
	r.storeMu.RUnlock()
	if err != nil {
		return fmt.Errorf("replica: checkpoint: %w", err)
	}
	if err := checkpoint.Retain(r.ckptRoot, r.cfg.KeepCheckpoints); err != nil {
		r.log.Warn("checkpoint retention failed", "err", err)
	}
	if info.Manifest.Index > r.localCkpt.Load() {
		r.localCkpt.Store(info.Manifest.Index)
	}
	select {
	case r.ckptReady <- struct{}{}:
	default:
	}
	r.log.Debug("checkpoint created", "index", info.Manifest.Index, "bytes", info.Bytes)
	if t == nil || r.currentTerm() != t {
		return nil
	}
	rec := checkpointRecord{V: formatVersion1, Index: info.Manifest.Index, Epoch: t.epoch, ID: r.cfg.ID,
		Addr: r.cfg.AdvertiseAddr, Created: time.Now().UnixMilli()}
	if err := r.recordCheckpoint(rec); err != nil {
		return fmt.Errorf("replica: record checkpoint: %w", err)
	}
	return r.deleteChannels(ctx, info.Manifest.Index)
}

// recordCheckpoint writes /<room>/checkpoints (persistent; newest wins).
func (r *Replica) recordCheckpoint(rec checkpointRecord) error {
	p := r.room.Path(checkpointsZ)
	data := encode(rec)
	_, err := r.conn.Set(p, data, -1)
	if errors.Is(err, zk.ErrNoNode) {
		_, err = r.conn.Create(p, data, 0, r.acl)
		if errors.Is(err, zk.ErrNodeExists) {
			_, err = r.conn.Set(p, data, -1)
		}
	}
	return err
}

// deleteChannels deletes sealed channels from the oldest on, as invariant
// 6 allows: a channel goes only when its last index is covered by a durable
// checkpoint that a member serves (ours: ckpt, if we advertise an address;
// or a live member's that advertises one) AND every live member has
// applied it — or, past the retention limit (room bytes above
// RetainRoomBytes), when such a served checkpoint covers it regardless of
// lagging members (they bootstrap from it). When no member serves
// checkpoints, only our own checkpoint counts and the retention limit does
// not apply (nobody could bootstrap). Never a channel in the middle: the
// log stays contiguous from the oldest.
func (r *Replica) deleteChannels(ctx context.Context, ckpt uint64) error {
	if ckpt == 0 {
		return nil
	}
	chans, err := r.room.Channels(ctx)
	if err != nil {
		return err
	}
	members, err := readMembers(r.conn, r.room.Path(membersDir))
	if err != nil {
		return err
	}
	minApplied := r.applied.Load()
	var served uint64
	if r.cfg.AdvertiseAddr != "" {
		served = ckpt
	}
	for _, m := range members {
		minApplied = min(minApplied, m.Applied)
		if m.Addr != "" && m.ID != r.cfg.ID {
			served = max(served, m.Checkpoint)
		}
	}
	retain := r.cfg.RetainRoomBytes
	if served == 0 {
		retain = -1
	} else {
		// Our own checkpoint covers what we apply; a served one covers
		// what a newcomer can restore.
		ckpt = min(ckpt, served)
	}
	var total int64
	for _, c := range chans {
		total += c.Bytes
	}
	for _, c := range chans {
		if !c.Sealed || c.LastIndex > ckpt {
			break
		}
		over := retain > 0 && total > retain
		if c.LastIndex > minApplied && !over {
			break
		}
		if err := r.room.DeleteChannel(ctx, c.Num); err != nil {
			return fmt.Errorf("delete channel %d: %w", c.Num, err)
		}
		total -= c.Bytes
		if c.LastIndex > minApplied {
			r.log.Warn("deleted a channel a live member has not applied (room over its retention bound); it will bootstrap",
				"channel", c.Num, "last", c.LastIndex, "min_applied", minApplied, "room_bytes", total+c.Bytes)
		} else {
			r.log.Debug("deleted channel", "channel", c.Num, "last", c.LastIndex)
		}
	}
	return nil
}

// bootstrap replaces the local store with the newest suitable checkpoint of
// a live member: one whose index covers everything before the oldest
// channel. Called by the standby apply goroutine (which owns store writes).
func (r *Replica) bootstrap(ctx context.Context) error {
	chans, err := r.room.Channels(ctx)
	if err != nil {
		return err
	}
	if len(chans) == 0 {
		return errors.New("bootstrap: the room has no channels")
	}
	need := chans[0].FirstIndex - 1
	applied := r.applied.Load()
	if applied >= need {
		return fmt.Errorf("bootstrap: applied %d already reaches the oldest channel (first %d); not compacted", applied, chans[0].FirstIndex)
	}
	members, err := readMembers(r.conn, r.room.Path(membersDir))
	if err != nil {
		return err
	}
	var src memberData
	for _, m := range members {
		if m.ID == r.cfg.ID || m.Addr == "" || m.Checkpoint < need || m.Checkpoint <= applied {
			continue
		}
		if m.Checkpoint > src.Checkpoint {
			src = m
		}
	}
	if src.ID == "" {
		return fmt.Errorf("%w: need index >= %d", ErrNoCheckpointSource, need)
	}
	base, err := checkpointBaseURL(src.Addr)
	if err != nil {
		return fmt.Errorf("bootstrap: member %q advertises %q: %w", src.ID, src.Addr, err)
	}
	url := base + CheckpointPath(r.cfg.Room)
	r.log.Info("bootstrap: fetching checkpoint", "from", src.ID, "url", url, "index", src.Checkpoint, "need", need)
	start := time.Now()
	info, err := checkpoint.Fetch(ctx, url, r.ckptRoot, checkpoint.FetchOptions{})
	if err != nil {
		return fmt.Errorf("bootstrap: fetch from %q: %w", src.ID, err)
	}
	if info.Manifest.Room != r.cfg.Room {
		_ = os.RemoveAll(info.Path)
		return fmt.Errorf("bootstrap: %q served a checkpoint of room %q", src.ID, info.Manifest.Room)
	}
	if info.Manifest.Index < need || info.Manifest.Index <= applied {
		return fmt.Errorf("bootstrap: %q served index %d, need >= %d", src.ID, info.Manifest.Index, need)
	}
	if err := r.installCheckpoint(ctx, info); err != nil {
		return err
	}
	r.bootstraps.Add(1)
	r.log.Info("bootstrap: restored checkpoint", "from", src.ID, "index", info.Manifest.Index, "bytes", info.Bytes, "took", time.Since(start))
	return nil
}

// installCheckpoint swaps the store for the checkpoint's image: close, move
// the old directory aside, restore, reopen; on failure the old store comes
// back. Only the standby apply goroutine calls it.
func (r *Replica) installCheckpoint(ctx context.Context, info checkpoint.Info) error {
	r.storeMu.Lock()
	defer r.storeMu.Unlock()
	aside := r.storeDir + ".old"
	if err := os.RemoveAll(aside); err != nil {
		return fmt.Errorf("bootstrap: remove %s: %w", aside, err)
	}
	if err := r.st.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
		r.log.Warn("bootstrap: closing the old store", "err", err)
	}
	reopenOld := func(cause error) error {
		_ = os.RemoveAll(r.storeDir)
		if err := os.Rename(aside, r.storeDir); err != nil {
			return fatal(fmt.Errorf("bootstrap failed (%v) and the old store could not be put back: %w", cause, err))
		}
		st, err := store.Open(r.storeDir, r.storeOptions())
		if err != nil {
			return fatal(fmt.Errorf("bootstrap failed (%v) and the old store does not reopen: %w", cause, err))
		}
		r.st = st
		return cause
	}
	if err := os.Rename(r.storeDir, aside); err != nil {
		st, oerr := store.Open(r.storeDir, r.storeOptions())
		if oerr != nil {
			return fatal(fmt.Errorf("bootstrap: move store aside: %v; reopen: %w", err, oerr))
		}
		r.st = st
		return fmt.Errorf("bootstrap: move store aside: %w", err)
	}
	if err := checkpoint.Restore(ctx, info.Path, r.storeDir); err != nil {
		return reopenOld(fmt.Errorf("bootstrap: restore: %w", err))
	}
	st, err := store.Open(r.storeDir, r.storeOptions())
	if err != nil {
		return reopenOld(fmt.Errorf("bootstrap: open restored store: %w", err))
	}
	r.st = st
	_ = os.RemoveAll(aside)
	idx := st.AppliedIndex()
	if idx > r.localCkpt.Load() {
		r.localCkpt.Store(idx)
	}
	r.sinceEntries.Store(0)
	r.sinceBytes.Store(0)
	r.appliedEpoch.Store(st.AppliedEpoch())
	r.jumpApplied(idx)
	select {
	case r.ckptReady <- struct{}{}:
	default:
	}
	return nil
}

// CheckpointHandler serves this member's newest checkpoint for peers that
// bootstrap. Mount it at CheckpointPath(room):
//
//	mux.Handle(replica.CheckpointPath(room), r.CheckpointHandler())
//
// GET <path> streams the checkpoint (tar), GET <path>manifest returns its
// manifest. When Config.ListenAddr is set the replica serves it itself.
func (r *Replica) CheckpointHandler() http.Handler {
	prefix := strings.TrimSuffix(CheckpointPath(r.cfg.Room), "/")
	return http.StripPrefix(prefix, checkpoint.Handler(r.ckptRoot))
}

// serveHTTP serves CheckpointHandler on Config.ListenAddr.
func (r *Replica) serveHTTP() error {
	ln, err := net.Listen("tcp", r.cfg.ListenAddr)
	if err != nil {
		return fmt.Errorf("replica: listen %s: %w", r.cfg.ListenAddr, err)
	}
	mux := http.NewServeMux()
	mux.Handle(CheckpointPath(r.cfg.Room), r.CheckpointHandler())
	r.listener = ln
	if r.cfg.AdvertiseAddr == "" {
		// Advertise what we listen on when that names a host.
		if host, _, err := net.SplitHostPort(ln.Addr().String()); err == nil {
			if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
				r.cfg.AdvertiseAddr = ln.Addr().String()
				r.baseURL = "http://" + r.cfg.AdvertiseAddr
			}
		}
	}
	r.httpSrv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		if err := r.httpSrv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			r.log.Warn("checkpoint server stopped", "err", err)
		}
	}()
	return nil
}

// ListenAddr returns the address the replica's own checkpoint server
// listens on ("" when Config.ListenAddr is empty).
func (r *Replica) ListenAddr() string {
	if r.listener == nil {
		return ""
	}
	return r.listener.Addr().String()
}

package replica

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

type ckptRequest struct {
	ctx   context.Context
	reply chan error
	// roomVersion, when not 0, moves the room to that room version with
	// the checkpoint's rotation (primary only).
	roomVersion int
}

// Checkpoint makes a local checkpoint now. On the primary it first rotates
// the log to a new channel, then records the checkpoint in the room and
// deletes the channels invariant 6 allows (see the package doc).
func (r *Replica) Checkpoint(ctx context.Context) error {
	return r.checkpointAt(ctx, 0)
}

// checkpointAt is Checkpoint whose rotation, when roomVersion is not 0,
// also moves the room to that room version (primary only).
func (r *Replica) checkpointAt(ctx context.Context, roomVersion int) error {
	if err := r.usable(); err != nil {
		return err
	}
	req := ckptRequest{ctx: ctx, reply: make(chan error, 1), roomVersion: roomVersion}
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
		case <-r.ckptTrig.C():
			if err := r.doCheckpoint(ctx, 0); err != nil && ctx.Err() == nil {
				r.log.Warn("policy checkpoint failed", "err", err)
			}
		case req := <-r.ckptReq:
			cctx, cancel := mergeCtx(ctx, req.ctx)
			req.reply <- r.doCheckpoint(cctx, req.roomVersion)
			cancel()
		case <-sweep.C:
			// What we advertise follows what is on disk (the handler moves
			// a broken checkpoint aside).
			r.refreshLocalCkpt()
			// Members may have caught up since the last checkpoint: retry
			// deletion (primary only).
			if t := r.currentTerm(); t != nil {
				if err := r.deleteChannels(ctx, t, r.localCkpt.Load(), true); err != nil && ctx.Err() == nil {
					r.log.Debug("channel deletion sweep failed", "err", err)
				}
			} else {
				r.forgetHolds()
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

func (r *Replica) doCheckpoint(ctx context.Context, roomVersion int) error {
	if err := r.usable(); err != nil {
		return err
	}
	start := time.Now()
	bytes, err := r.checkpointNow(ctx, roomVersion)
	r.m.checkpointed(time.Since(start), bytes, err)
	return err
}

// checkpointNow takes one checkpoint and returns its size. With
// roomVersion not 0 the primary's rotation moves the room to it (and a
// failed rotation fails the checkpoint; a member that is not primary
// refuses).
func (r *Replica) checkpointNow(ctx context.Context, roomVersion int) (int64, error) {
	t := r.currentTerm()
	if roomVersion != 0 && t == nil {
		return 0, fmt.Errorf("replica: move to room version %d: %w", roomVersion, ErrNotPrimary)
	}
	if t != nil {
		// Seal the open channel so the checkpoint covers whole channels.
		var sealed logroom.ChannelInfo
		var err error
		if roomVersion != 0 {
			// The loop decided on its cached view of the members, maybe a
			// policy checkpoint ago: decide again on fresh reads, so that
			// a member that joined meanwhile is not moved past.
			if err := r.recheckMove(ctx, roomVersion); err != nil {
				return 0, err
			}
			sealed, err = t.w.RotateToVersion(ctx, roomVersion)
		} else {
			sealed, err = t.w.Rotate(ctx)
		}
		switch {
		case err == nil:
			if err := r.waitApplied(ctx, sealed.LastIndex, t.done, false); err != nil && !errors.Is(err, errTermEnded) {
				return 0, fmt.Errorf("replica: checkpoint: wait for sealed channel: %w", err)
			}
		case errors.Is(err, logroom.ErrFenced), errors.Is(err, logroom.ErrOutcomeUnknown), errors.Is(err, logroom.ErrClosed):
			r.writerFailed(t, err)
			t = nil
		case roomVersion != 0:
			return 0, fmt.Errorf("replica: move to room version %d: %w", roomVersion, err)
		default:
			r.log.Warn("checkpoint: rotate failed; checkpointing without it", "err", err)
		}
		if roomVersion != 0 && t == nil {
			return 0, fmt.Errorf("replica: move to room version %d: the writer stopped", roomVersion)
		}
	}
	// The counters restart now: entries applied from here on count toward
	// the next checkpoint.
	r.sinceEntries.Store(0)
	r.sinceBytes.Store(0)
	// The store only moves forward: the new checkpoint's index is at least
	// what is applied now.
	r.makeRoomForCheckpoint(r.applied.Load())
	r.storeMu.RLock()
	info, err := checkpoint.Create(ctx, r.st, r.ckptRoot, r.origin())
	r.storeMu.RUnlock()
	if err != nil {
		return 0, fmt.Errorf("replica: checkpoint: %w", err)
	}
	r.retainCheckpoints()
	if info.Manifest.Index > r.localCkpt.Load() {
		r.localCkpt.Store(info.Manifest.Index)
	}
	r.ckptReady.Notify()
	r.log.Debug("checkpoint created", "index", info.Manifest.Index, "bytes", info.Bytes)
	if t == nil || r.currentTerm() != t {
		return info.Bytes, nil
	}
	rec := checkpointRecord{V: formatVersion1, Index: info.Manifest.Index, Epoch: t.epoch, ID: r.cfg.ID,
		Addr: r.cfg.AdvertiseAddr, Created: time.Now().UnixMilli()}
	if err := r.recordCheckpoint(ctx, rec); err != nil {
		return info.Bytes, fmt.Errorf("replica: record checkpoint: %w", err)
	}
	if err := r.deleteChannels(ctx, t, info.Manifest.Index, false); err != nil && ctx.Err() == nil {
		// The checkpoint is made and recorded: a deletion that did not
		// happen is not a failed checkpoint. The next sweep decides again
		// on a fresh listing (a fenced deletion must).
		lvl := slog.LevelWarn
		if errors.Is(err, logroom.ErrDeleteFenced) {
			lvl = slog.LevelInfo
		}
		r.log.Log(ctx, lvl, "checkpoint made; deleting the channels it covers failed, the next sweep decides again",
			"index", info.Manifest.Index, "err", err)
	}
	return info.Bytes, nil
}

// makeRoomForCheckpoint prunes the local checkpoints before a new one at
// an index of at least next is created or fetched into the checkpoint
// root: it keeps the newest KeepCheckpoints-1, so that with the new one
// there are never more than KeepCheckpoints on disk, not even between the
// new one's arrival and retainCheckpoints. It removes nothing when a
// checkpoint at or above next is already there (the new one may turn out
// to be that one, and nothing would replace what was removed), nor with
// KeepCheckpoints 1: the only checkpoint, advertised and served, stays
// until its successor is in place, so for that moment there are two. The
// checkpointer and a bootstrap's fetch run on different goroutines: when
// they overlap, one more may stand until the later one's retention.
func (r *Replica) makeRoomForCheckpoint(next uint64) {
	keep := r.cfg.KeepCheckpoints
	if keep < 2 {
		return
	}
	newest, err := checkpoint.Newest(r.ckptRoot)
	if err != nil || newest.Manifest.Index >= next {
		return // none (or an unreadable root: Retain reports it afterwards)
	}
	if err := checkpoint.Retain(r.ckptRoot, keep-1); err != nil {
		r.log.Warn("checkpoint retention failed", "err", err)
	}
}

// retainCheckpoints removes all local checkpoints but the newest
// KeepCheckpoints, once a new one is in place.
func (r *Replica) retainCheckpoints() {
	if err := checkpoint.Retain(r.ckptRoot, r.cfg.KeepCheckpoints); err != nil {
		r.log.Warn("checkpoint retention failed", "err", err)
	}
}

// refreshLocalCkpt sets the advertised checkpoint index to the newest
// checkpoint listed on disk (0: none), publishing a change. It may lower
// it: a checkpoint that was removed is no longer advertised.
func (r *Replica) refreshLocalCkpt() {
	old := r.localCkpt.Load()
	var idx uint64
	if n, err := checkpoint.Newest(r.ckptRoot); err == nil {
		idx = n.Manifest.Index
	} else if !errors.Is(err, checkpoint.ErrNoCheckpoint) {
		return
	}
	if idx != old && r.localCkpt.CompareAndSwap(old, idx) {
		r.ckptReady.Notify()
	}
}

// dropCheckpoint removes a local checkpoint that failed to restore or
// check (it must never be kept, advertised or served) and updates what we
// advertise.
func (r *Replica) dropCheckpoint(path string, why error) {
	r.log.Warn("removing a checkpoint that cannot be used", "path", path, "err", why)
	if err := checkpoint.Remove(path); err != nil {
		r.log.Error("removing a bad checkpoint failed; it stays on disk", "path", path, "err", err)
	}
	r.refreshLocalCkpt()
}

// fetchOptions are the options of every fetch and probe: the configured
// bounds, and our origin.
func (r *Replica) fetchOptions() checkpoint.FetchOptions {
	o := r.cfg.CheckpointFetch
	o.Origin = r.origin()
	if r.cfg.CheckpointToken != "" {
		o.BearerToken = r.cfg.CheckpointToken
	}
	return o
}

// recordCheckpoint writes rec to /<room>/checkpoints (persistent) unless
// the record there is newer (newerCheckpointRecord): the record never moves
// backwards, whoever writes last. A primary just deposed may still be
// finishing a checkpoint older than its successor's record. The write is a
// set at the version read (a create when there is none), so a record that
// changed in between is read and compared again; one that does not decode
// is replaced.
func (r *Replica) recordCheckpoint(ctx context.Context, rec checkpointRecord) error {
	p := r.room.Path(checkpointsZ)
	data := encode(rec)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		cur, st, err := r.conn.Get(p)
		if errors.Is(err, zk.ErrNoNode) {
			_, err = r.conn.Create(p, data, 0, r.acl)
			if errors.Is(err, zk.ErrNodeExists) {
				continue // created in between: compare with it
			}
			return err
		}
		if err != nil {
			return err
		}
		var old checkpointRecord
		if decode(cur, &old) == nil && !newerCheckpointRecord(rec, old) {
			return nil
		}
		_, err = r.conn.Set(p, data, st.Version)
		if errors.Is(err, zk.ErrBadVersion) {
			continue // changed in between: compare with what is there now
		}
		return err
	}
}

// newerCheckpointRecord reports whether rec replaces old: a higher index,
// or the same index recorded in a newer epoch.
func newerCheckpointRecord(rec, old checkpointRecord) bool {
	return rec.Index > old.Index || (rec.Index == old.Index && rec.Epoch > old.Epoch)
}

// deleteChannels deletes sealed channels from the oldest on, as invariant
// 5 allows: a channel goes only when its last index is covered by our
// durable checkpoint (ckpt) AND by a checkpoint a live member serves —
// proven by fetching that member's manifest (right origin, index), not
// taken from its member data — AND every live member has applied it; or,
// past the retention limit (room bytes above RetainRoomBytes), when both
// checkpoints cover it regardless of lagging members (they bootstrap from
// the served one). When no live member serves a covering checkpoint
// nothing is deleted: the room grows until the writer answers ErrRoomFull
// (logged at Warn unless sweep). Never a channel in the middle: the log
// stays contiguous from the oldest. Deletions go through t's writer, behind
// its epoch fence (logroom: Writer.DeleteChannel), so a term that ended
// deletes nothing.
func (r *Replica) deleteChannels(ctx context.Context, t *term, ckpt uint64, sweep bool) error {
	if ckpt == 0 && r.archiver == nil { // archive: sweeps run before the first checkpoint too
		return nil
	}
	chans, err := r.room.Channels(ctx)
	if err != nil {
		return err
	}
	// archive (issue 27): copy the sealed channels and our newest
	// checkpoint first; a channel goes only once archived (replica/archive.go).
	archived := r.archiveSweep(ctx, chans)
	if ckpt == 0 {
		return nil
	}
	if len(chans) == 0 || !chans[0].Sealed || chans[0].LastIndex > ckpt {
		return nil // nothing our checkpoint covers
	}
	members, err := readMembers(r.conn, r.room.Path(membersDir))
	if err != nil {
		return err
	}
	minApplied := r.applied.Load()
	for _, m := range members {
		minApplied = min(minApplied, m.Applied)
	}
	served, src, probeErrs := r.servedCheckpoint(ctx, members, chans[0].LastIndex)
	if served < chans[0].LastIndex {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		lvl := slog.LevelWarn
		if sweep {
			lvl = slog.LevelDebug
		}
		r.log.Log(ctx, lvl, "channel deletion held: no live member serves a checkpoint covering the oldest channel; the room grows until appends get ErrRoomFull",
			"channel", chans[0].Num, "last", chans[0].LastIndex, "served", served, "probes", errors.Join(probeErrs...))
		return nil
	}
	// Our own checkpoint covers what we apply; the served one covers what a
	// newcomer can restore (decideDeletions).
	hold := r.bootstrapHold(members, chans[0].FirstIndex)
	dels := decideDeletions(chans, ckpt, served, minApplied, hold, r.cfg.RetainRoomBytes)
	if len(dels) > 0 && dels[len(dels)-1].Forced {
		// Forced deletion ignores lagging members, not bootstraps: the
		// probes above may have taken seconds, so decide the holds again
		// on a fresh read (a member may have started a bootstrap, or
		// lowered its hold for another source, meanwhile).
		if members, err = readMembers(r.conn, r.room.Path(membersDir)); err != nil {
			return err
		}
		hold = r.bootstrapHold(members, chans[0].FirstIndex)
		dels = decideDeletions(chans, ckpt, served, minApplied, hold, r.cfg.RetainRoomBytes)
	}
	for _, d := range dels {
		if !channelArchived(chans, d.Num, archived) { // archive: deletion waits for it
			break
		}
		if err := t.w.DeleteChannel(ctx, d.Num); err != nil {
			return fmt.Errorf("delete channel %d: %w", d.Num, err)
		}
		if d.Forced {
			r.log.Warn("deleted a channel a live member has not applied (room over its retention bound); it will bootstrap",
				"channel", d.Num, "min_applied", minApplied, "retain_bytes", r.cfg.RetainRoomBytes, "served_by", src)
		} else {
			r.log.Debug("deleted channel", "channel", d.Num, "served_by", src)
		}
	}
	return nil
}

// ckptSource is a live member advertising a checkpoint.
type ckptSource struct {
	id    string
	addr  string
	index uint64 // advertised
}

// ckptSources returns the live members (and us, if self and we advertise
// an address) that advertise a checkpoint index >= need, best (highest
// index) first.
func (r *Replica) ckptSources(members map[string]memberData, need uint64, self bool) []ckptSource {
	var out []ckptSource
	for _, m := range members {
		if m.ID == r.cfg.ID || m.Addr == "" || m.Checkpoint < need || m.Checkpoint == 0 {
			continue
		}
		out = append(out, ckptSource{id: m.ID, addr: m.Addr, index: m.Checkpoint})
	}
	if self && r.cfg.AdvertiseAddr != "" {
		if own := r.localCkpt.Load(); own >= need && own > 0 {
			out = append(out, ckptSource{id: r.cfg.ID, addr: r.cfg.AdvertiseAddr, index: own})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].index != out[j].index {
			return out[i].index > out[j].index
		}
		return out[i].id < out[j].id
	})
	return out
}

// sourceURL is where src serves this room's checkpoint.
func (r *Replica) sourceURL(src ckptSource) (string, error) {
	base, err := r.peerBaseURL(src.addr) // peertls.go: with PeerTLS, https only
	if err != nil {
		return "", fmt.Errorf("member %q advertises %q: %w", src.id, src.addr, err)
	}
	return base + CheckpointPath(r.cfg.Room), nil
}

// probeTimeout bounds one manifest probe of the deletion check.
const probeTimeout = 5 * time.Second

// servedCheckpoint returns the index of the best checkpoint a live member
// (us included) demonstrably serves, covering at least need: its manifest,
// fetched over HTTP, parses and records our origin. Members are probed
// best first until one answers; 0 if none does.
func (r *Replica) servedCheckpoint(ctx context.Context, members map[string]memberData, need uint64) (uint64, string, []error) {
	var errs []error
	for _, src := range r.ckptSources(members, need, true) {
		url, err := r.sourceURL(src)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		pctx, cancel := context.WithTimeout(ctx, probeTimeout)
		m, err := checkpoint.FetchManifest(pctx, url, r.fetchOptionsFor(url))
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("member %q: %w", src.id, peerTLSError(err)))
			continue
		}
		if m.Index >= need {
			return m.Index, src.id, errs
		}
		errs = append(errs, fmt.Errorf("member %q advertises index %d but serves %d", src.id, src.index, m.Index))
	}
	return 0, "", errs
}

// bootstrap replaces the local store with a suitable checkpoint of a live
// member: one whose index covers everything before the oldest channel.
// Sources are tried best (highest advertised index) first; a failed,
// refused or stalled fetch (each bounded by Config.CheckpointFetch) falls
// back to the next one, and when all fail the error (wrapping
// ErrNoCheckpointSource) names every source and why it failed. Called by
// the standby apply goroutine (which owns store writes).
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
		return fmt.Errorf("%w: bootstrap: applied %d already reaches the oldest channel (first %d)", errNotCompacted, applied, chans[0].FirstIndex)
	}
	members, err := readMembers(r.conn, r.room.Path(membersDir))
	if err != nil {
		return err
	}
	sources := r.ckptSources(members, max(need, applied+1), false)
	if len(sources) == 0 {
		return fmt.Errorf("%w: need index >= %d", ErrNoCheckpointSource, need)
	}
	var failed []error
	for _, src := range sources {
		err := r.bootstrapFrom(ctx, src, need)
		if err == nil {
			return nil
		}
		if isFatal(err) || ctx.Err() != nil {
			return err
		}
		r.log.Warn("bootstrap: source failed; trying the next", "from", src.id, "addr", src.addr, "advertised", src.index, "err", err)
		failed = append(failed, fmt.Errorf("%q (index %d at %s): %w", src.id, src.index, src.addr, err))
	}
	// Our hold stays while we try again; without progress it lapses
	// (Config.BootstrapHoldStall).
	// The sources' errors stay inspectable (errors.Is, e.g.
	// checkpoint.ErrUnauthorized for a wrong CheckpointToken).
	return fmt.Errorf("%w: need index >= %d; all %d sources failed: %w", ErrNoCheckpointSource, need, len(sources), errors.Join(failed...))
}

// bootstrapFrom fetches src's checkpoint and installs it. A checkpoint
// that turns out unusable is removed.
func (r *Replica) bootstrapFrom(ctx context.Context, src ckptSource, need uint64) error {
	url, err := r.sourceURL(src)
	if err != nil {
		return err
	}
	r.log.Info("bootstrap: fetching checkpoint", "from", src.id, "url", url, "index", src.index, "need", need)
	start := time.Now()
	applied := r.applied.Load()
	// Never outrun (outrun.go): the log after the checkpoint is held for
	// us from before the fetch until we caught up. src serves a checkpoint
	// at its advertised index or newer, so src.index+1 holds enough.
	hold := src.index + 1
	if cur := r.hold.Load(); cur == 0 || hold < cur {
		r.setHold(hold)
	} else {
		hold = cur // an earlier attempt's hold, lower: it covers this one
	}
	if !r.awaitHoldPublished(ctx, hold) && ctx.Err() == nil {
		r.log.Warn("bootstrap: our hold is not published yet; fetching anyway (an outrun would be detected)", "hold", hold)
	}
	// The log may have moved past this source while we chose it (or
	// before our hold was seen): a checkpoint at src.index would be
	// outrun before we fetched a byte.
	if chans, err := r.room.Channels(ctx); err == nil && len(chans) > 0 && chans[0].FirstIndex > src.index+1 {
		return fmt.Errorf("the log now starts at %d, past what %q advertises (%d)", chans[0].FirstIndex, src.id, src.index)
	}
	// Progress for the hold (outrun.go): bytes received while files
	// transfer; a heartbeat while local files are verified (before the
	// first byte) and while the checkpoint is installed, phases with no
	// byte progress whose length grows with the state.
	var transferring atomic.Bool
	stopBeat := make(chan struct{})
	defer close(stopBeat)
	go r.holdHeartbeat(func() bool { return !transferring.Load() }, stopBeat)
	r.makeRoomForCheckpoint(max(need, applied+1))
	opts := r.fetchOptionsFor(url) // peertls.go: TLS for url's host
	// Incremental (issue 31): sstables our store already holds (a member
	// that was away, or that bootstrapped from this source before) are
	// hard-linked, not fetched; the fetch CRC-checks each against the
	// manifest. Our own checkpoints and partial fetches under ckptRoot
	// are used by Fetch itself.
	opts.Local = append(append([]string(nil), opts.Local...), r.storeDir)
	userProgress := opts.Progress
	var seen int64
	opts.Progress = func(p checkpoint.Progress) {
		if p.Stage == checkpoint.StageStreaming {
			transferring.Store(true)
		}
		if p.Bytes < seen {
			seen = 0 // a new round (the source moved on to a newer checkpoint)
		}
		if p.Bytes > seen {
			r.holdProgress.Add(uint64(p.Bytes - seen))
			seen = p.Bytes
		}
		if userProgress != nil {
			userProgress(p)
		}
	}
	info, err := checkpoint.Fetch(ctx, url, r.ckptRoot, opts)
	transferring.Store(false)
	if err != nil {
		return peerTLSError(err)
	}
	// What the fetch added counts toward KeepCheckpoints now, not at the
	// next checkpoint.
	defer r.retainCheckpoints()
	applied = r.applied.Load()
	if info.Manifest.Index < need || info.Manifest.Index <= applied {
		// A valid checkpoint of ours, just not far enough: retention
		// drops it once newer ones are in place.
		return fmt.Errorf("served index %d, need >= %d (and > applied %d)", info.Manifest.Index, need, applied)
	}
	if err := r.installCheckpoint(ctx, info); err != nil {
		if !isFatal(err) && (errors.Is(err, checkpoint.ErrCorrupt) || errors.Is(err, checkpoint.ErrForeign) || errors.Is(err, errStoreOpen)) {
			r.dropCheckpoint(info.Path, err)
		}
		return err
	}
	took := time.Since(start)
	r.m.bootstrapped(took, info.Bytes)
	r.m.bootstrapFetched(info.Fetch)
	r.lastBoot.Store(&BootstrapReport{From: src.id, Index: info.Manifest.Index, Bytes: info.Bytes, Took: took, Fetch: info.Fetch})
	r.holdUntilCaughtUp(info.Manifest.Index, r.primaryApplied(info.Manifest.Index))
	st := info.Fetch
	r.log.Info("bootstrap: restored checkpoint", "from", src.id, "index", info.Manifest.Index, "bytes", info.Bytes, "took", took,
		"fetched_bytes", st.FetchedBytes, "fetched_files", st.FetchedFiles, "linked_bytes", st.LinkedKnownBytes+st.LinkedLocalBytes,
		"linked_files", st.LinkedKnownFiles+st.LinkedLocalFiles, "resumed_bytes", st.ResumedBytes, "rounds", st.Rounds, "tar", st.Tar,
		"manifest", st.Manifest, "local_match", st.LocalMatch, "transfer", st.Transfer, "final", st.Final)
	return nil
}

// errStoreOpen marks a restored checkpoint that does not open as a store.
var errStoreOpen = errors.New("the restored checkpoint does not open as a store")

// installCheckpoint swaps the store for the checkpoint's image: close, move
// the old directory aside (DataDir/store.old), restore (of our origin
// only), reopen; on failure the old store comes back. Every step is a
// rename or leaves only temp names, so a crash anywhere leaves a state
// recoverInterruptedRestore resolves at Open. Only the standby apply
// goroutine calls it.
func (r *Replica) installCheckpoint(ctx context.Context, info checkpoint.Info) error {
	t0 := time.Now()
	r.storeMu.Lock()
	defer r.storeMu.Unlock()
	tLocked := time.Now()
	aside := r.storeDir + oldStoreSuffix
	if err := os.RemoveAll(aside); err != nil {
		return fmt.Errorf("bootstrap: remove %s: %w", aside, err)
	}
	if err := r.st.Close(); err != nil && !errors.Is(err, store.ErrClosed) {
		r.log.Warn("bootstrap: closing the old store", "err", err)
	}
	reopenOld := func(cause error) error {
		// Out of the way under a temp name first (a rename: a crash never
		// leaves a half-deleted store next to store.old).
		failed := filepath.Join(r.cfg.DataDir, fmt.Sprintf("%sfailed-%d", restoreTmpPrefix, time.Now().UnixNano()))
		if err := os.Rename(r.storeDir, failed); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fatal(fmt.Errorf("bootstrap failed (%v) and the failed store could not be moved away: %w", cause, err))
		}
		if err := os.Rename(aside, r.storeDir); err != nil {
			return fatal(fmt.Errorf("bootstrap failed (%v) and the old store could not be put back: %w", cause, err))
		}
		_ = fsyncDir(r.cfg.DataDir)
		_ = os.RemoveAll(failed)
		st, err := store.Open(r.storeDir, r.storeOptions())
		if err != nil {
			return fatal(fmt.Errorf("bootstrap failed (%v) and the old store does not reopen: %w", cause, err))
		}
		r.setStore(st)
		return cause
	}
	if err := os.Rename(r.storeDir, aside); err != nil {
		st, oerr := store.Open(r.storeDir, r.storeOptions())
		if oerr != nil {
			return fatal(fmt.Errorf("bootstrap: move store aside: %v; reopen: %w", err, oerr))
		}
		r.setStore(st)
		return fmt.Errorf("bootstrap: move store aside: %w", err)
	}
	// The move aside is durable before the restored store can appear.
	if err := fsyncDir(r.cfg.DataDir); err != nil {
		return reopenOld(fmt.Errorf("bootstrap: sync %s: %w", r.cfg.DataDir, err))
	}
	tAside := time.Now()
	if err := checkpoint.Restore(ctx, info.Path, r.storeDir, r.origin()); err != nil {
		return reopenOld(fmt.Errorf("bootstrap: restore: %w", err))
	}
	tRestored := time.Now()
	st, err := store.Open(r.storeDir, r.storeOptions())
	if err != nil {
		return reopenOld(fmt.Errorf("bootstrap: %w: %w", errStoreOpen, err))
	}
	r.setStore(st)
	tOpened := time.Now()
	_ = os.RemoveAll(aside)
	r.log.Info("bootstrap: store replaced", "lock_wait", tLocked.Sub(t0), "close_and_move_aside", tAside.Sub(tLocked),
		"restore", tRestored.Sub(tAside), "open", tOpened.Sub(tRestored), "remove_old", time.Since(tOpened))
	idx := st.AppliedIndex()
	if idx > r.localCkpt.Load() {
		r.localCkpt.Store(idx)
	}
	r.sinceEntries.Store(0)
	r.sinceBytes.Store(0)
	r.appliedEpoch.Store(st.AppliedEpoch())
	// Counted before the applied index moves: whoever sees the restored
	// index in Status also sees the bootstrap.
	r.bootstraps.Add(1)
	// The state is here: the tail error that sent us to bootstrap no
	// longer says this member cannot reach its room's state (the demo
	// refuses reads while one is set). Cleared before the applied index
	// moves, so whoever sees the restored index sees no stale error.
	r.tailErr.Store(nil)
	r.jumpApplied(idx)
	r.ckptReady.Notify()
	return nil
}

// fsyncDir fsyncs a directory, making renames in it durable.
func fsyncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// CheckpointHandler serves this member's newest checkpoint for peers that
// bootstrap. Mount it at CheckpointPath(room):
//
//	mux.Handle(replica.CheckpointPath(room), r.CheckpointHandler())
//
// GET <path> streams the checkpoint (tar), GET <path>manifest returns its
// manifest. When Config.ListenAddr is set the replica serves it itself.
// With Config.CheckpointToken, both require it as a bearer token (401
// otherwise).
//
// It works for every room name logroom.ValidateName accepts: the room's
// prefix is stripped from the decoded request path (http.StripPrefix
// compares its prefix with the decoded r.URL.Path, and with RawPath when
// that is set, so an escaped prefix never matches a name that escaping
// changes).
func (r *Replica) CheckpointHandler() http.Handler {
	ckpt := checkpoint.Handler(r.ckptRoot)
	var h http.Handler = http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.URL.Path == livenessPath {
			r.serveLiveness(w, req)
			return
		}
		ckpt.ServeHTTP(w, req)
	})
	if r.cfg.CheckpointToken != "" {
		h = checkpoint.RequireBearer(r.cfg.CheckpointToken, h)
	}
	h = r.cfg.requirePeerIdentity(h) // peertls.go: Config.PeerIdentities
	h = stripRoomPrefix(r.cfg.Room, h)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		// A failed replica may hold state of a diverged history: it
		// serves no checkpoint (it also left the membership, so no peer
		// picks it as a source).
		if p := r.fatalErr.Load(); p != nil {
			http.Error(w, fmt.Sprintf("replica %q failed; it serves no checkpoint: %v", r.cfg.ID, *p), http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, req)
	})
}

// stripRoomPrefix serves h below CheckpointPath(room): the decoded prefix
// is cut from r.URL.Path, the escaped one from r.URL.RawPath (dropped when
// it does not match: Path is what the checkpoint handler reads).
func stripRoomPrefix(room string, h http.Handler) http.Handler {
	escaped := strings.TrimSuffix(CheckpointPath(room), "/")
	decoded, err := url.PathUnescape(escaped)
	if err != nil { // (PathEscape's output always unescapes)
		decoded = escaped
	}
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		p, ok := strings.CutPrefix(req.URL.Path, decoded)
		if !ok || (p != "" && p[0] != '/') {
			http.NotFound(w, req)
			return
		}
		r2 := new(http.Request)
		*r2 = *req
		r2.URL = new(url.URL)
		*r2.URL = *req.URL
		r2.URL.Path = p
		r2.URL.RawPath = ""
		if rp, ok := strings.CutPrefix(req.URL.RawPath, escaped); ok {
			r2.URL.RawPath = rp
		}
		h.ServeHTTP(w, r2)
	})
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
	if r.cfg.PeerTLS != nil { // peertls.go: HTTPS only, client certificates required
		ln = tls.NewListener(ln, peerServerTLS(r.cfg.PeerTLS))
	}
	if r.cfg.AdvertiseAddr == "" {
		// Advertise what we listen on when that names a host.
		if host, _, err := net.SplitHostPort(ln.Addr().String()); err == nil {
			if ip := net.ParseIP(host); ip != nil && !ip.IsUnspecified() {
				r.cfg.AdvertiseAddr = peerAdvertise(ln.Addr().String(), r.cfg.PeerTLS)
				r.baseURL, _ = checkpointBaseURL(r.cfg.AdvertiseAddr)
			}
		}
	}
	r.httpSrv = newPeerServer(mux, r.cfg.peerConnMaxAge(), r.log) // peertls.go: bounded connection age
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

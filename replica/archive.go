package replica

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/roomlog/roomlog/archive"
	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/zkx"
)

// The continuous archive (issue 27 item 3; Config.Archive): the primary
// copies every sealed channel, oldest first, and every checkpoint it makes
// to the archive, and deletes a channel only once it is archived. It runs
// on the checkpointer goroutine (deleteChannels: after each checkpoint and
// every sweep), never on the Propose path: a slow or failing archive holds
// deletion, and the room grows until the writer's MaxRoomBytes answers
// ErrRoomFull, as when no member serves a covering checkpoint.

// ArchiveStatus is the archive's state on this member (Config.Archive).
type ArchiveStatus struct {
	// Enabled: Config.Archive is set. Only the primary archives; a
	// standby's fields are those of its last term as primary (zero if
	// none).
	Enabled bool
	// Index is the last index of the newest channel archived with every
	// older sealed channel the room holds (0: none yet).
	Index uint64
	// Checkpoint is the index of the newest checkpoint archived.
	Checkpoint uint64
	// BehindEntries and BehindBytes are what the room's sealed channels
	// hold that is not archived yet (bytes as MaxRoomBytes counts them,
	// logroom.ChannelInfo.Charged), as of the last sweep.
	BehindEntries uint64
	BehindBytes   int64
	// Bytes is what this member archived since it opened: channel batch
	// bytes and checkpoint sizes (tables the archive linked from an
	// earlier checkpoint item included).
	Bytes int64
	// Failures counts failed puts; LastErr is the last one's error (nil
	// once a later put succeeds), at LastErrAt.
	Failures  uint64
	LastErr   error
	LastErrAt time.Time
}

// archiver is the archive's state. mu guards st and lastLog; the
// checkpointer goroutine is the only writer, Status readers read.
type archiver struct {
	a       archive.Archive
	mu      sync.Mutex
	st      ArchiveStatus
	lastLog time.Time
	// done caches channel numbers known archived (by the checkpointer only).
	done map[uint64]bool
	// incDone: this incarnation's record (archive.Incarnation) is in the
	// archive; incWarned: a failure to write it was logged (checkpointer
	// only).
	incDone, incWarned bool
}

// newArchiverFor returns the archive's state, nil without an archive.
func newArchiverFor(a archive.Archive) *archiver {
	if a == nil {
		return nil
	}
	return newArchiver(a)
}

func newArchiver(a archive.Archive) *archiver {
	return &archiver{a: a, st: ArchiveStatus{Enabled: true}, done: map[uint64]bool{}}
}

// ArchiveStatus reports the archive's state (zero without Config.Archive).
func (r *Replica) ArchiveStatus() ArchiveStatus {
	ar := r.archiver
	if ar == nil {
		return ArchiveStatus{}
	}
	ar.mu.Lock()
	defer ar.mu.Unlock()
	return ar.st
}

// archiveOrigin is the incarnation the archive files this member's items
// under: the room's czxid and its epoch znode's name (a room re-seeded in
// a wiped ensemble may have the czxid a lost incarnation had; the name
// tells them apart).
func (r *Replica) archiveOrigin() archive.Origin {
	return archive.Origin{Room: r.cfg.Room, RoomCzxid: r.roomCzxid, Fence: r.room.EpochZnode()}
}

// archiveIncarnation records in the archive, once, how this incarnation
// began (archive.Incarnation): a room OpenRoom created (epoch znode
// "epoch") continues nothing; a re-seeded one continues the incarnation
// its re-seed record (<room>/reseed) names, from the seed's index. By
// these records a restore that names no incarnation picks the one in
// service (czxids cannot order incarnations). It never holds the archive
// or deletion: without the record a restore that names no incarnation is
// refused (archive.ErrAmbiguous), nothing worse; a failure is logged once
// and tried again at the next sweep.
func (r *Replica) archiveIncarnation(ctx context.Context, ar *archiver, origin archive.Origin) {
	if ar.incDone {
		return
	}
	warn := func(msg string, args ...any) {
		if !ar.incWarned && ctx.Err() == nil {
			ar.incWarned = true
			r.log.Warn("archive: "+msg+"; a restore that names no incarnation cannot tell this one is in service", args...)
		}
	}
	inc := archive.Incarnation{Origin: origin}
	if origin.Fence != logroom.EpochZnode {
		p := logroom.RoomPath(r.baseOrDefault(), r.cfg.Room, reseedZ)
		rec, ok, err := readReseed(ctx, r.room.Client(), p)
		if err != nil || !ok {
			if err == nil {
				err = fmt.Errorf("no re-seed record %s in a re-seeded room (epoch znode %s)", p, origin.Fence)
			}
			warn("cannot record which incarnation this one continues", "err", err)
			return
		}
		inc.Reseeded = time.UnixMilli(rec.At)
		if rec.Prev != 0 {
			inc.Prev = archive.Origin{Room: r.cfg.Room, RoomCzxid: rec.Prev, Fence: rec.PrevFence}
			inc.PrevIndex = rec.Index
		}
	}
	err := ar.a.PutIncarnation(ctx, inc)
	switch {
	case errors.Is(err, archive.ErrConflict):
		ar.incDone = true // the archive's record stands; restores list both
		r.log.Error("archive: the archive records this incarnation's beginning otherwise; keeping it", "err", err)
	case err != nil:
		warn("cannot record the incarnation", "err", err)
	default:
		ar.incDone = true
		r.log.Debug("archive: incarnation recorded", "incarnation", origin.ID(), "began", inc.String())
	}
}

// archiveLogEvery bounds how often an archive that keeps failing with the
// same error is logged at Error.
const archiveLogEvery = 30 * time.Second

// failed records a failed put.
func (ar *archiver) failed(r *Replica, what string, err error) {
	ar.mu.Lock()
	same := ar.st.LastErr != nil && ar.st.LastErr.Error() == err.Error()
	logIt := !same || time.Since(ar.lastLog) >= archiveLogEvery
	ar.st.Failures++
	ar.st.LastErr, ar.st.LastErrAt = err, time.Now()
	if logIt {
		ar.lastLog = time.Now()
	}
	ar.mu.Unlock()
	r.m.archiveFailed()
	if logIt {
		r.log.Error("archive failed: channel deletion waits for the archive; the room grows until appends get ErrRoomFull",
			"item", what, "err", err)
	}
}

func (ar *archiver) succeeded(r *Replica, bytes int64) {
	ar.mu.Lock()
	ar.st.LastErr = nil
	ar.st.Bytes += bytes
	ar.mu.Unlock()
	r.m.archived(bytes)
}

// archiveSweep archives the sealed channels of chans (the room's listing,
// oldest first) not archived yet, oldest first, stopping at the first
// failure, then this member's newest checkpoint if it is not archived. It
// returns the last index through which every listed sealed channel is
// archived (0: not even the oldest). Without Config.Archive it returns
// the maximum: deletion is not held.
func (r *Replica) archiveSweep(ctx context.Context, chans []logroom.ChannelInfo) uint64 {
	ar := r.archiver
	if ar == nil {
		return ^uint64(0)
	}
	origin := r.archiveOrigin()
	r.archiveIncarnation(ctx, ar, origin)
	var through uint64
	ok := true
	var behindEntries uint64
	var behindBytes int64
	for _, ci := range chans {
		if !ci.Sealed {
			break
		}
		if ok && !ar.done[ci.Num] {
			if err := r.archiveChannel(ctx, ar, origin, ci); err != nil {
				if ctx.Err() != nil {
					return through
				}
				ar.failed(r, fmt.Sprintf("channel %d (indexes %d..%d)", ci.Num, ci.FirstIndex, ci.LastIndex), err)
				ok = false
			} else {
				ar.done[ci.Num] = true
			}
		}
		if ok {
			through = ci.LastIndex
		} else {
			behindEntries += ci.LastIndex + 1 - ci.FirstIndex
			behindBytes += ci.Charged()
		}
	}
	// Forget channels no longer listed (deleted).
	for num := range ar.done {
		if !slices.ContainsFunc(chans, func(c logroom.ChannelInfo) bool { return c.Num == num }) {
			delete(ar.done, num)
		}
	}
	ar.mu.Lock()
	if through > ar.st.Index {
		ar.st.Index = through
	}
	ar.st.BehindEntries, ar.st.BehindBytes = behindEntries, behindBytes
	ckpt := ar.st.Checkpoint
	ar.mu.Unlock()
	if ok {
		r.archiveNewestCheckpoint(ctx, ar, origin, ckpt)
	}
	return through
}

// archiveChannel copies one sealed channel from ZooKeeper to the archive,
// unless the archive has it already.
func (r *Replica) archiveChannel(ctx context.Context, ar *archiver, origin archive.Origin, ci logroom.ChannelInfo) error {
	if ci.LastIndex < ci.FirstIndex {
		return nil // sealed empty: nothing to keep
	}
	// Archived already (by us before, or by an earlier primary): verified
	// before it counts; a corrupt one is put again (the put replaces it).
	if it, ok, err := ar.a.Lookup(ctx, origin, archive.KindChannel, ci.FirstIndex, ci.LastIndex); err != nil {
		return err
	} else if ok {
		_, err := ar.a.ReadChannel(ctx, it)
		if err == nil {
			return nil
		}
		if !errors.Is(err, archive.ErrCorrupt) {
			return err
		}
		r.log.Warn("archive: an archived channel is corrupt; archiving it again", "channel", ci.Num, "err", err)
	}
	if ci.Deleting {
		// Its deletion began before it was archived (a primary without
		// the archive, interrupted): its batches are partly gone and can
		// never be archived whole. Holding deletion for it would hold the
		// room for good: let it go, and leave the gap in the archive (a
		// restore across it is refused as not covered).
		r.log.Warn("archive: a channel whose deletion began before it was archived cannot be archived; the archive has a gap there",
			"channel", ci.Num, "first", ci.FirstIndex, "last", ci.LastIndex)
		return nil
	}
	ch, err := r.readChannelForArchive(ctx, origin, ci)
	if err != nil {
		return err
	}
	if _, err := ar.a.PutChannel(ctx, ch); err != nil {
		return err
	}
	var n int64
	for _, b := range ch.Batches {
		n += int64(len(b.Data))
	}
	ar.succeeded(r, n)
	r.log.Debug("archived channel", "channel", ci.Num, "first", ci.FirstIndex, "last", ci.LastIndex, "bytes", n)
	return nil
}

// archiveReadWidth is how many batch znodes one channel's copy reads at
// once.
const archiveReadWidth = 16

// readChannelForArchive reads a sealed channel's meta and the batch
// znodes (data and ctime) of its chain: b-First, then the batch named by
// the index after each batch's last, up to the channel's sealed last index,
// as logroom's readers follow it. Batch znodes off that chain are not
// copied: those past the sealed end are orphans of a deposed writer
// (pipelined batches past a hole, never acknowledged; logroom's doc), any
// other is foreign; both are logged. A chain that breaks before the sealed
// end (a missing batch, one that does not continue the previous) is an
// error naming the znode: the archive would hold less than the log did.
func (r *Replica) readChannelForArchive(ctx context.Context, origin archive.Origin, ci logroom.ChannelInfo) (archive.Channel, error) {
	c := r.room.Client()
	path := r.room.Path(logroom.ChannelsZnode, logroom.ChannelName(ci.Num))
	meta, _, err := zkx.Get(ctx, c, path)
	if err != nil {
		return archive.Channel{}, fmt.Errorf("read %s: %w", path, err)
	}
	names, err := zkx.Children(ctx, c, path)
	if err != nil {
		return archive.Channel{}, fmt.Errorf("list %s: %w", path, err)
	}
	// Only names within the sealed range can be on the chain.
	var firsts, orphans, foreign []uint64
	for _, n := range names {
		f, ok := logroom.ParseBatchName(n)
		switch {
		case !ok:
		case f > ci.LastIndex:
			orphans = append(orphans, f)
		case f < ci.FirstIndex:
			foreign = append(foreign, f)
		default:
			firsts = append(firsts, f)
		}
	}
	slices.Sort(firsts)
	datas := make([]archive.Batch, len(firsts))
	errs := make([]error, len(firsts))
	sem := make(chan struct{}, archiveReadWidth)
	var wg sync.WaitGroup
	for i, f := range firsts {
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			p := path + "/" + logroom.BatchName(f)
			d, st, err := zkx.Get(ctx, c, p)
			if err != nil {
				errs[i] = fmt.Errorf("read %s: %w", p, err)
				return
			}
			datas[i] = archive.Batch{Data: d, Ctime: st.Ctime}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return archive.Channel{}, err // the first: the others are alike
		}
	}
	ch := archive.Channel{Origin: origin, Num: ci.Num, First: ci.FirstIndex, Last: ci.LastIndex, Epoch: ci.Epoch,
		RoomVersion: ci.RoomVersion, Meta: meta}
	// Follow the chain; every batch read and not on it is foreign.
	next, i := ci.FirstIndex, 0
	for next <= ci.LastIndex {
		for i < len(firsts) && firsts[i] < next {
			foreign = append(foreign, firsts[i])
			i++
		}
		p := path + "/" + logroom.BatchName(next)
		if i == len(firsts) || firsts[i] != next {
			return archive.Channel{}, fmt.Errorf("%w: channel %d (indexes %d..%d): no batch znode %s on its chain",
				archive.ErrCorrupt, ci.Num, ci.FirstIndex, ci.LastIndex, p)
		}
		b, err := logroom.DecodeBatch(datas[i].Data)
		if err != nil {
			return archive.Channel{}, fmt.Errorf("%w: channel %d: %s: %w", archive.ErrCorrupt, ci.Num, p, err)
		}
		if b.First != next || b.Count == 0 {
			return archive.Channel{}, fmt.Errorf("%w: channel %d: %s holds first index %d count %d, expected first %d",
				archive.ErrCorrupt, ci.Num, p, b.First, b.Count, next)
		}
		ch.Batches = append(ch.Batches, datas[i])
		next = b.Last() + 1
		i++
	}
	foreign = append(foreign, firsts[i:]...)
	if len(orphans) > 0 {
		slices.Sort(orphans)
		r.log.Info("archive: batch znodes past the channel's sealed end are orphans of a deposed writer (never acknowledged); not archived",
			"channel", ci.Num, "last", ci.LastIndex, "orphans", len(orphans), "first_orphan", logroom.BatchName(orphans[0]))
	}
	if len(foreign) > 0 {
		slices.Sort(foreign)
		r.log.Warn("archive: batch znodes off the channel's chain (not written by its writer); not archived",
			"channel", ci.Num, "first", ci.FirstIndex, "last", ci.LastIndex, "foreign", len(foreign), "first_foreign", logroom.BatchName(foreign[0]))
	}
	return ch, nil
}

// archiveNewestCheckpoint archives this member's newest local checkpoint
// if it is newer than the newest archived (have). A checkpoint of the same
// index another primary archived first (ErrConflict: same state, other
// files) counts as archived.
func (r *Replica) archiveNewestCheckpoint(ctx context.Context, ar *archiver, origin archive.Origin, have uint64) {
	info, err := checkpoint.Newest(r.ckptRoot)
	if err != nil || info.Manifest.Index <= have {
		return
	}
	_, err = ar.a.PutCheckpoint(ctx, origin, info.Path)
	switch {
	case errors.Is(err, archive.ErrConflict):
		r.log.Info("archive: a checkpoint at this index is archived already (another primary's); keeping it", "index", info.Manifest.Index, "err", err)
	case err != nil:
		if ctx.Err() == nil {
			ar.failed(r, fmt.Sprintf("checkpoint at index %d", info.Manifest.Index), err)
		}
		return
	default:
		ar.succeeded(r, info.Bytes)
		r.log.Debug("archived checkpoint", "index", info.Manifest.Index, "bytes", info.Bytes)
	}
	ar.mu.Lock()
	ar.st.Checkpoint = max(ar.st.Checkpoint, info.Manifest.Index)
	ar.mu.Unlock()
}

// channelArchived reports whether channel num of chans ends at or below
// through (archiveSweep's answer).
func channelArchived(chans []logroom.ChannelInfo, num, through uint64) bool {
	for _, c := range chans {
		if c.Num == num {
			return c.LastIndex <= through
		}
	}
	return false
}

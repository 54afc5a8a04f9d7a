package logroom

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/zkx"
)

// Reader delivers a room's entries in index order, exactly once, across
// channels. It waits on watches (an ExistsW on the next batch name and one
// GetW on the current channel znode for the seal), never on a timer. A
// Reader is not safe for concurrent use.
type Reader struct {
	room *Room
	c    *Client
	log  *slog.Logger
	m    *Metrics // the room's; nil: none

	// bpos is the first index of the next batch to read (a batch name).
	bpos uint64
	// skipTo: entries below it are not delivered (Tail from mid-batch).
	// Position() == max(bpos, skipTo).
	skipTo uint64
	// located is false until the current channel is known.
	located bool
	ch      uint64      // current channel number
	chPath  string      // its znode path
	meta    channelMeta // its meta as last read
	// lastEpoch is the epoch of the last batch delivered.
	lastEpoch uint64
	// chWatch is the armed GetW watch on chPath (nil: none armed or fired).
	chWatch <-chan zk.Event
	// exWatch is the armed ExistsW watch on exPath (nil: none).
	exWatch <-chan zk.Event
	exPath  string
	// arm: we are caught up, so the next step arms the ExistsW watch first
	// instead of reading (two round trips per batch instead of three).
	arm bool
	// fired: a watch fired since the last read; read before waiting again.
	fired bool
	// err is sticky: ErrCorrupt or ErrCompacted.
	err    error
	closed bool

	// Catch-up: while behind, the channel is listed and the listed
	// batches are read ahead, prefetchWindow reads in flight at a time.
	// Batch znodes are immutable, so an early read is as good as a late
	// one; every batch is still validated in order when delivered.
	behind     int                      // consecutive batches found without waiting
	sinceList  int                      // of them, found since the last listing
	ahead      []uint64                 // listed batch names >= bpos not yet read, ascending
	listedOnce bool                     // the current channel was listed since we last waited
	fetched    map[uint64]*fetchedBatch // reads ahead (in flight or done) by first index
	// lastListed is how many new names past bpos the last listing found.
	lastListed int
	// prefetched counts batches read ahead, listings the listings (tests).
	prefetched int
	listings   int
	// pipelined counts batches read in the same round trip as the ExistsW
	// that would have armed their watch (tests).
	pipelined int
	// prefix: what this reader verified of the current channel from its
	// first batch on (Room.read; valid while prefix.num == ch and the
	// batches delivered started at the channel's first index).
	prefix readPrefix
}

// prefetchWindow is how many batch Gets a catching-up reader keeps in flight.
const prefetchWindow = 16

// listAfter is how many batches a reader reads in a row without waiting
// before it lists the channel to read ahead. A reader a few batches behind
// a busy writer catches up at one round trip per batch; listing a channel
// of thousands of batches every few batches (the bench's lag run listed
// 664 times for 3,143 batches at a threshold of 2) costs ZooKeeper and the
// reader more than it saves.
const listAfter = 16

// fetchedBatch is a read ahead: once done is closed, the batch's data
// and its znode's ctime (ZooKeeper's commit time, unix ms), or the read's
// error.
type fetchedBatch struct {
	done  chan struct{}
	data  []byte
	ctime int64
	err   error
}

// Tail returns a Reader whose first entry delivered has Index == from
// (from 0 means 1). from must not exceed the end of the log + 1 by more than
// what the writer will write (a replica's applied index + 1 always works).
// A from inside a deleted channel fails with ErrCompacted.
func (r *Room) Tail(ctx context.Context, from uint64) (*Reader, error) {
	if from == 0 {
		from = 1
	}
	rd := &Reader{room: r, c: r.c, log: r.log, m: r.metrics, bpos: from, skipTo: from}
	var bo zkx.Backoff
	for !rd.located {
		err := rd.locate(ctx, false)
		if err == nil || errors.Is(err, errNoChannel) {
			break // with no channel yet, Next waits for the first one
		}
		if !isConnErr(err) {
			return nil, err
		}
		if err := r.c.WaitSession(ctx); err != nil {
			return nil, err
		}
		if err := bo.Wait(ctx); err != nil {
			return nil, err
		}
	}
	return rd, nil
}

// Position returns the next index the reader will deliver.
func (rd *Reader) Position() uint64 { return max(rd.bpos, rd.skipTo) }

// Close marks the reader closed. Watches it armed fire into buffered
// channels nobody reads; go-zookeeper cannot cancel them.
func (rd *Reader) Close() error {
	rd.closed = true
	return nil
}

// Next blocks until at least one entry is available and returns the
// entries of the next batch (from Position()). Connection loss and session
// expiry are retried with backoff from the same position. ErrCorrupt and
// ErrCompacted are sticky; ctx's error is not.
func (rd *Reader) Next(ctx context.Context) ([]Entry, error) {
	if rd.closed {
		return nil, fmt.Errorf("%w: reader", ErrClosed)
	}
	if rd.err != nil {
		return nil, rd.err
	}
	var bo zkx.Backoff
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		es, err := rd.step(ctx)
		switch {
		case err == nil && len(es) > 0:
			return es, nil
		case err == nil:
			continue
		case isConnErr(err):
			rd.log.Debug("reader: zookeeper unavailable; retrying", "position", rd.Position(), "err", err)
			if werr := rd.c.WaitSession(ctx); werr != nil {
				return nil, werr
			}
			if werr := bo.Wait(ctx); werr != nil {
				return nil, werr
			}
			continue
		case errors.Is(err, zk.ErrClosing):
			return nil, fmt.Errorf("%w: client", ErrClosed)
		case ctx.Err() != nil:
			return nil, err
		case errors.Is(err, ErrCorrupt) || errors.Is(err, ErrCompacted):
			rd.err = err
			rd.log.Error("reader stopped", "err", err)
			return nil, err
		default:
			return nil, zkError("logroom: read", err)
		}
	}
}

// errNoChannel: the room has no channel yet (locate without waiting).
var errNoChannel = errors.New("logroom: no channel yet")

// locate finds the channel holding Position() and the batch boundary to
// read from. With no channel yet it waits for channel 1 when wait is set,
// else returns errNoChannel.
func (rd *Reader) locate(ctx context.Context, wait bool) error {
	r := rd.room
	pos := rd.skipTo
	// The channels must form a checked chain before we follow them.
	infos, err := r.CheckChain(ctx)
	if err != nil {
		return err
	}
	if len(infos) == 0 {
		if !wait {
			return errNoChannel
		}
		ok, _, ech, err := rd.c.Conn().ExistsW(r.channelPath(1))
		if err != nil {
			return err
		}
		if !ok {
			select {
			case <-ech:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		return nil
	}
	if pos < infos[0].FirstIndex {
		return fmt.Errorf("%w: room %q: index %d precedes the oldest channel %d (first index %d)",
			ErrCompacted, r.name, pos, infos[0].Num, infos[0].FirstIndex)
	}
	i := len(infos) - 1
	for infos[i].FirstIndex > pos {
		i--
	}
	m, st, err := r.readChannelStat(ctx, infos[i].Num)
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("%w: room %q: index %d (channel %d deleted)", ErrCompacted, r.name, pos, infos[i].Num)
	}
	if err == nil {
		err = r.checkCap(infos[i].Num, m)
	}
	if err != nil {
		return err
	}
	rd.setChannel(infos[i].Num, m, st.Czxid)
	rd.bpos = m.First
	if pos > m.First {
		if err := rd.seek(ctx, pos); err != nil {
			return err
		}
	}
	rd.located = true
	return nil
}

// seek sets bpos to the batch boundary at or before pos in the current
// channel: pos itself when b-pos exists, else (listing the channel once) the
// first of the batch holding pos, or the end of the batch before pos.
func (rd *Reader) seek(ctx context.Context, pos uint64) error {
	r := rd.room
	ok, _, err := rd.c.Conn().Exists(r.batchPath(rd.ch, pos))
	if err != nil {
		return err
	}
	if ok {
		rd.bpos = pos
		return nil
	}
	rd.m.listed()
	names, _, err := rd.c.Conn().Children(rd.chPath)
	if err != nil {
		return err
	}
	best := uint64(0)
	for _, n := range names {
		if f, ok := parseNum(n, batchPrefix); ok && f < pos && f >= rd.meta.First && f > best {
			best = f
		}
	}
	if best == 0 {
		return nil // nothing before pos: read from the channel's first batch
	}
	path := r.batchPath(rd.ch, best)
	data, _, err := rd.c.Conn().Get(path)
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("%w: room %q channel %d: batch %s vanished", ErrCompacted, r.name, rd.ch, path)
	}
	if err != nil {
		return err
	}
	b, err := DecodeBatch(data)
	if err == nil && (b.First != best || b.Count == 0) {
		err = fmt.Errorf("%w: batch first %d count %d, expected first %d", ErrCorrupt, b.First, b.Count, best)
	}
	if err != nil {
		return r.corrupt(rd.ch, path, err)
	}
	if b.Last() >= pos {
		rd.bpos = best
	} else {
		rd.bpos = b.First + uint64(b.Count)
	}
	return nil
}

func (rd *Reader) setChannel(num uint64, m channelMeta, czxid int64) {
	rd.ch, rd.chPath, rd.meta = num, rd.room.channelPath(num), m
	rd.prefix = readPrefix{num: num, czxid: czxid, first: m.First, next: m.First}
	rd.chWatch, rd.exWatch, rd.exPath = nil, nil, ""
	rd.ahead, rd.listedOnce, rd.fetched, rd.behind, rd.lastListed = nil, false, nil, 0, 0
}

// prefetch keeps up to prefetchWindow reads of listed batches from bpos
// on in flight while the reader is behind: a sliding window, in which
// each batch is delivered as soon as it is in (not when the whole window
// is) and a new read goes out for each one taken. It lists the channel
// first when needList says so.
func (rd *Reader) prefetch() error {
	rd.trimAhead()
	if rd.needList() {
		names, _, err := rd.c.Conn().Children(rd.chPath)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			// The channel is gone: say so as the ordinary read of the next
			// batch does (channelGone: ErrCompacted, or a hole), not with
			// the listing's bare error.
			rd.listed(nil)
		case err != nil:
			return err
		default:
			rd.listed(names)
		}
	}
	rd.topUp()
	return nil
}

// trimAhead drops listed names and reads ahead below bpos (not on the
// chain: never delivered).
func (rd *Reader) trimAhead() {
	for f := range rd.fetched {
		if f < rd.bpos {
			delete(rd.fetched, f)
		}
	}
	for len(rd.ahead) > 0 && rd.ahead[0] < rd.bpos {
		rd.ahead = rd.ahead[1:]
	}
}

// needList says whether to list the channel now: nothing listed is left,
// and either the last listing found at least two batches past the next
// one (the writer is well ahead: without a new listing we would read one
// batch per round trip while behind), or the reader has found listAfter
// batches without waiting since the run began or it last listed (a
// listing that found nothing does not stop it for the rest of the run).
func (rd *Reader) needList() bool {
	switch {
	case len(rd.ahead) > 0:
		return false
	case rd.listedOnce && rd.lastListed >= 2:
		return true // the last listing paid: the writer is well ahead
	default:
		return rd.sinceList >= listAfter
	}
}

// found counts a batch found without waiting.
func (rd *Reader) found() {
	rd.behind++
	rd.sinceList++
	if rd.behind == 1 {
		rd.sinceList = 1
	}
}

// topUp sends reads of the next listed names until prefetchWindow are in
// flight or done.
func (rd *Reader) topUp() {
	for len(rd.fetched) < prefetchWindow && len(rd.ahead) > 0 {
		f := rd.ahead[0]
		rd.ahead = rd.ahead[1:]
		if _, ok := rd.fetched[f]; ok || f < rd.bpos {
			continue
		}
		fb := &fetchedBatch{done: make(chan struct{})}
		if rd.fetched == nil {
			rd.fetched = make(map[uint64]*fetchedBatch, prefetchWindow)
		}
		rd.fetched[f] = fb
		rd.prefetched++
		rd.m.catchupReads(1)
		go func(path string) {
			defer close(fb.done)
			var st *zk.Stat
			fb.data, st, fb.err = rd.c.Conn().Get(path)
			if st != nil {
				fb.ctime = st.Ctime
			}
		}(rd.room.batchPath(rd.ch, f))
	}
}

// listed takes a listing of the current channel made at bpos: the batch
// names from bpos on (the next batch is read in the window too) go to
// rd.ahead; past a seal only orphans of a deposed writer, never read.
func (rd *Reader) listed(names []string) {
	rd.listedOnce = true
	rd.listings++
	rd.m.listed()
	rd.lastListed, rd.sinceList = 0, 0
	for _, n := range names {
		f, ok := parseNum(n, batchPrefix)
		if !ok || f < rd.bpos || rd.meta.Sealed && f > rd.meta.Last {
			continue
		}
		if _, done := rd.fetched[f]; !done {
			rd.ahead = append(rd.ahead, f)
			if f > rd.bpos {
				rd.lastListed++ // new names beyond the next batch
			}
		}
	}
	slices.Sort(rd.ahead)
}

// takeFetched waits for the read ahead of the batch at bpos, if one is in
// flight or done, and returns it (nil: none, or the batch was not there:
// read it the usual way). A failed read drops every read ahead (the
// connection is in trouble); Next retries from bpos.
func (rd *Reader) takeFetched(ctx context.Context) (*fetchedBatch, error) {
	fb, ok := rd.fetched[rd.bpos]
	if !ok {
		return nil, nil
	}
	select {
	case <-fb.done:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	delete(rd.fetched, rd.bpos)
	switch {
	case fb.err == nil:
		return fb, nil
	case errors.Is(fb.err, zk.ErrNoNode):
		return nil, nil
	default:
		rd.fetched, rd.ahead, rd.listedOnce = nil, nil, false
		return nil, fb.err
	}
}

// step makes one unit of progress: it returns entries, or nil after moving
// on (channel change, a watch fired), or an error.
func (rd *Reader) step(ctx context.Context) ([]Entry, error) {
	if !rd.located {
		return nil, rd.locate(ctx, true)
	}
	path := rd.room.batchPath(rd.ch, rd.bpos)
	if len(rd.fetched) > 0 {
		// Reading ahead: keep the window full (a listing it needs goes
		// out while the reads in flight come in).
		if err := rd.prefetch(); err != nil {
			return nil, err
		}
	}
	fb, err := rd.takeFetched(ctx)
	if err != nil {
		return nil, err
	}
	if fb != nil {
		rd.found()
		return rd.deliver(path, fb.data, fb.ctime)
	}
	if !rd.arm || rd.fired {
		viaWatch := rd.fired
		rd.fired = false
		rd.trimAhead()
		list := rd.needList()
		if !list {
			rd.topUp()
			if _, ok := rd.fetched[rd.bpos]; ok {
				return nil, nil // deliver from the reads ahead
			}
		}
		// A listing goes out beside the read of the next batch: the
		// batch need not wait a round trip for the listing.
		var (
			names []string
			lerr  error
			lwg   sync.WaitGroup
		)
		if list {
			lwg.Add(1)
			go func() {
				defer lwg.Done()
				names, _, lerr = rd.c.Conn().Children(rd.chPath)
			}()
		}
		data, st, err := rd.c.Conn().Get(path)
		lwg.Wait()
		if list && lerr == nil {
			rd.listed(names)
		}
		// A failed listing is made again at the next step (the read's
		// own outcome says what to do now).
		if err == nil {
			// Arrived through a watch: we are caught up, so the next batch
			// is most likely absent too; arm its watch instead of reading.
			rd.arm = viaWatch
			if viaWatch {
				rd.behind = 0
			} else {
				rd.found()
			}
			return rd.deliver(path, data, st.Ctime)
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return nil, err
		}
	}
	// Caught up: forget the catch-up state (a later lag lists afresh).
	rd.arm, rd.behind, rd.ahead, rd.listedOnce, rd.fetched, rd.lastListed = true, 0, nil, false, nil, 0
	// The next batch is absent (or we are caught up and have not armed its
	// watch yet). First make sure the channel is not finished.
	if rd.chWatch == nil {
		data, _, ech, err := rd.c.Conn().GetW(rd.chPath)
		if errors.Is(err, zk.ErrNoNode) {
			if rd.meta.Sealed && rd.bpos > rd.meta.Last {
				return nil, rd.nextChannel(ctx)
			}
			return nil, rd.channelGone(ctx)
		}
		if err != nil {
			return nil, err
		}
		m, err := decodeChannelMeta(data)
		if err != nil {
			return nil, rd.room.corrupt(rd.ch, rd.chPath, err)
		}
		if err := rd.room.checkCap(rd.ch, m); err != nil {
			return nil, err
		}
		if !m.Sealed {
			if m, err = rd.checkNoSuccessor(ctx, m); err != nil {
				return nil, err
			}
		}
		rd.meta, rd.chWatch = m, ech
	}
	if rd.meta.Sealed {
		if rd.bpos > rd.meta.Last {
			return nil, rd.nextChannel(ctx)
		}
		// Sealed before our read ended: the batch must be there now.
		data, st, err := rd.c.Conn().Get(path)
		if err == nil {
			return rd.deliver(path, data, st.Ctime)
		}
		if errors.Is(err, zk.ErrNoNode) {
			return nil, rd.missingInSealed(ctx, path)
		}
		return nil, err
	}
	if rd.exPath != path {
		// Arm the watch and read the batch at once: both requests share
		// one round trip (go-zookeeper pipelines a connection's calls), so
		// a reader whose writer is ahead gets the batch now instead of
		// after an ExistsW that only says it is there. Their order on the
		// wire does not matter: the watch is armed whatever the read
		// finds, and a batch the read missed but ExistsW saw is read next.
		var (
			data []byte
			st   *zk.Stat
			gerr error
			got  = make(chan struct{})
		)
		go func() {
			defer close(got)
			data, st, gerr = rd.c.Conn().Get(path)
		}()
		ok, _, ech, err := rd.c.Conn().ExistsW(path)
		<-got
		if err != nil {
			return nil, err
		}
		rd.exPath, rd.exWatch = path, ech
		if gerr == nil {
			// The writer is ahead: keep reading without watches while
			// behind. ExistsW left a data watch on an immutable node; it
			// fires when the channel is deleted.
			rd.arm = false
			rd.found()
			rd.pipelined++
			return rd.deliver(path, data, st.Ctime)
		}
		if !errors.Is(gerr, zk.ErrNoNode) {
			if ok {
				// The batch is there but its read failed (a connection
				// loss): read it again next, do not wait on a watch that
				// fires only when the immutable batch is deleted.
				rd.arm = false
			}
			return nil, gerr
		}
		if ok {
			// Created between the two requests: read it next.
			rd.arm = false
			return nil, nil
		}
	}
	select {
	case <-rd.exWatch:
		// Created (or, after session expiry, EventNotWatching): read, and
		// re-arm if still absent.
		rd.exWatch, rd.exPath, rd.fired = nil, "", true
	case ev := <-rd.chWatch:
		rd.chWatch, rd.fired = nil, true
		if ev.Type == zk.EventNotWatching {
			rd.exWatch, rd.exPath = nil, ""
		}
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return nil, nil
}

// channelGone explains the current channel's disappearance: compaction
// (ErrCompacted) if a later channel exists, since only sealed channels are
// deleted and a seal creates the successor; otherwise the open channel was
// deleted by someone else (ErrCorrupt).
func (rd *Reader) channelGone(ctx context.Context) error {
	// A server behind what we read (after a session expiry) may not have
	// the channel yet: sync and look again before any verdict (as
	// nextChannel does). Still there: step again.
	if err := zkx.Sync(ctx, rd.c, rd.room.Path(channelsNode)); err != nil {
		return err
	}
	if ok, _, err := rd.c.Conn().Exists(rd.chPath); err != nil {
		return err
	} else if ok {
		return nil
	}
	nums, err := rd.room.channelNums(ctx)
	if err != nil {
		return err
	}
	for _, n := range nums {
		if n > rd.ch {
			return fmt.Errorf("%w: room %q channel %d deleted while reading at index %d",
				ErrCompacted, rd.room.name, rd.ch, rd.Position())
		}
	}
	return rd.room.corrupt(rd.ch, rd.chPath, fmt.Errorf("%w: the open channel was deleted while reading at index %d (no later channel exists)",
		ErrCorrupt, rd.Position()))
}

// checkChannelEpoch re-reads the channel meta and returns an ErrCorrupt
// error unless the channel's epoch is epoch.
func (rd *Reader) checkChannelEpoch(epoch uint64) error {
	data, _, err := rd.c.Conn().Get(rd.chPath)
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("%w: room %q channel %d deleted while reading at index %d",
			ErrCompacted, rd.room.name, rd.ch, rd.Position())
	}
	if err != nil {
		return err
	}
	m, err := decodeChannelMeta(data)
	if err != nil {
		return err
	}
	if err := rd.room.checkCap(rd.ch, m); err != nil {
		return err
	}
	rd.meta = m
	if m.Epoch != epoch {
		return fmt.Errorf("%w: batch epoch %d is not its channel's epoch %d", ErrCorrupt, epoch, m.Epoch)
	}
	return nil
}

// missingInSealed explains a batch missing from a sealed channel: the
// channel is being deleted (ErrCompacted) or the log is corrupt.
func (rd *Reader) missingInSealed(ctx context.Context, path string) error {
	// After a session expiry go-zookeeper may read from a follower behind
	// what we already saw: sync, then look again before any verdict.
	if err := zkx.Sync(ctx, rd.c, rd.chPath); err != nil {
		return err
	}
	if ok, _, err := rd.c.Conn().Exists(path); err != nil || ok {
		return err // present after the sync: read it on the next step
	}
	data, _, err := rd.c.Conn().Get(rd.chPath)
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("%w: room %q channel %d deleted while reading at index %d",
			ErrCompacted, rd.room.name, rd.ch, rd.Position())
	}
	if err != nil {
		return err
	}
	m, err := decodeChannelMeta(data)
	if err != nil {
		return rd.room.corrupt(rd.ch, rd.chPath, err)
	}
	if m.Deleting {
		return fmt.Errorf("%w: room %q channel %d is being deleted (reading at index %d)",
			ErrCompacted, rd.room.name, rd.ch, rd.Position())
	}
	return rd.room.corrupt(rd.ch, path, fmt.Errorf("%w: batch missing in a channel sealed at index %d",
		ErrCorrupt, m.Last))
}

// checkNoSuccessor is called when the current channel's meta says open. A
// writer seals a channel and creates its successor in one Multi, so an open
// channel with a successor is damaged (waiting on it would wait forever). A
// rotation between our meta read and the check is told apart by reading the
// meta again: it is sealed by then. It returns the newest meta.
func (rd *Reader) checkNoSuccessor(ctx context.Context, m channelMeta) (channelMeta, error) {
	next := rd.room.channelPath(rd.ch + 1)
	ok, _, err := rd.c.Conn().Exists(next)
	if err != nil || !ok {
		return m, err
	}
	// Our meta read may come from a server behind the one that showed us
	// the successor (reads after a session expiry): sync, then re-read.
	if err := zkx.Sync(ctx, rd.c, rd.chPath); err != nil {
		return m, err
	}
	data, _, err := rd.c.Conn().Get(rd.chPath)
	if err != nil {
		return m, err
	}
	m2, err := decodeChannelMeta(data)
	if err != nil {
		return m, rd.room.corrupt(rd.ch, rd.chPath, err)
	}
	if !m2.Sealed {
		return m, rd.room.corrupt(rd.ch, rd.chPath, fmt.Errorf("%w: channel is not sealed but its successor %s exists",
			ErrCorrupt, next))
	}
	return m2, nil
}

// nextChannel moves from the sealed current channel to the next one, which
// must exist and start right after the seal.
func (rd *Reader) nextChannel(ctx context.Context) error {
	r := rd.room
	num := rd.ch + 1
	path := r.channelPath(num)
	data, st, err := rd.c.Conn().Get(path)
	if errors.Is(err, zk.ErrNoNode) {
		// The seal and the successor's create are one transaction, but a
		// server behind what we read (after a session expiry) may not
		// have it yet: sync and look again before any verdict.
		if serr := zkx.Sync(ctx, rd.c, r.Path(channelsNode)); serr != nil {
			return serr
		}
		data, st, err = rd.c.Conn().Get(path)
	}
	if errors.Is(err, zk.ErrNoNode) {
		nums, lerr := r.channelNums(ctx)
		if lerr != nil {
			return lerr
		}
		for _, n := range nums {
			if n > num {
				return fmt.Errorf("%w: room %q: channel %d deleted before the reader reached it", ErrCompacted, r.name, num)
			}
		}
		return r.corrupt(rd.ch, rd.chPath, fmt.Errorf("%w: channel sealed at index %d has no successor channel %d",
			ErrCorrupt, rd.meta.Last, num))
	}
	if err != nil {
		return err
	}
	m, err := decodeChannelMeta(data)
	if err != nil {
		return r.corrupt(num, path, err)
	}
	if err := r.checkCap(num, m); err != nil {
		return err
	}
	if m.First != rd.meta.Last+1 {
		return r.corrupt(num, path, fmt.Errorf("%w: channel first index %d, previous channel %d sealed at %d",
			ErrCorrupt, m.First, rd.ch, rd.meta.Last))
	}
	prev := rd.ch
	rd.setChannel(num, m, st.Czxid)
	if rd.bpos < m.First || rd.bpos > m.First {
		// bpos past the seal only after a Tail beyond the log end.
		rd.bpos = m.First
	}
	rd.arm = false
	rd.log.Debug("reader crossed channels", "from", prev, "to", num, "first", m.First)
	return nil
}

// deliver validates one batch read at path, whose znode was created at
// ctime (unix ms), and returns its entries from Position() on. Nothing of
// an invalid batch is delivered.
func (rd *Reader) deliver(path string, data []byte, ctime int64) ([]Entry, error) {
	b, err := DecodeBatch(data)
	switch {
	case errors.Is(err, ErrUnsupportedVersion):
		// The channel's meta names a room version this binary reads, and
		// no room version it reads has this format: not a newer writer's
		// batch, a forged or corrupt one.
		err = fmt.Errorf("%w: a format room version %d does not have (channel %d): %v", ErrCorrupt, rd.meta.roomVersion(), rd.ch, err)
	case err != nil:
	case b.First != rd.bpos:
		err = fmt.Errorf("%w: batch first index %d, expected %d", ErrCorrupt, b.First, rd.bpos)
	case b.Count == 0:
		err = fmt.Errorf("%w: empty batch", ErrCorrupt)
	case b.Epoch < rd.lastEpoch:
		err = fmt.Errorf("%w: batch epoch %d below the previous batch's epoch %d", ErrCorrupt, b.Epoch, rd.lastEpoch)
	case b.Epoch != rd.meta.Epoch:
		// Only the writer that opened (or reused) a channel writes in it. The
		// cached meta may predate a reuse (which happens while the channel
		// is empty): re-read it before judging.
		err = rd.checkChannelEpoch(b.Epoch)
		if err != nil && !errors.Is(err, ErrCorrupt) {
			return nil, err // connection trouble: Next retries this batch
		}
	}
	if err == nil && b.Codec.minRoomVersion() > rd.meta.roomVersion() {
		err = fmt.Errorf("%w: batch uses codec %v, which needs room version %d; channel %d was opened at room version %d",
			ErrCorrupt, b.Codec, b.Codec.minRoomVersion(), rd.ch, rd.meta.roomVersion())
	}
	if err == nil && rd.meta.Sealed && b.Last() > rd.meta.Last {
		err = fmt.Errorf("%w: batch ends at %d, past the channel's seal at %d", ErrCorrupt, b.Last(), rd.meta.Last)
	}
	if err != nil {
		return nil, rd.room.corrupt(rd.ch, path, err)
	}
	rd.lastEpoch = b.Epoch
	rd.bpos = b.First + uint64(b.Count)
	if p := &rd.prefix; p.num == rd.ch && p.next == b.First && (p.batches == 0 || p.epoch == b.Epoch) {
		// Contiguous from the channel's first batch: a Writer of this
		// Room taking over need not read these again.
		p.epoch, p.next = b.Epoch, rd.bpos
		p.bytes += int64(len(data))
		p.batches++
		rd.room.read.advance(*p)
	}
	out := make([]Entry, 0, b.Count)
	id := b.ID()
	for i, d := range b.Entries {
		idx := b.First + uint64(i)
		if idx >= rd.skipTo {
			out = append(out, Entry{Index: idx, Epoch: b.Epoch, Data: d, Batch: id})
		}
	}
	rd.m.batchDelivered(len(out), ctime)
	return out, nil
}

package logroom

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/zkx"
)

// BatchID identifies one batch of the log: its epoch, first index, entry
// count and checksum. A replica remembers the BatchID of the last batch it
// applied (Entry.Batch) and checks with MatchLog that the log still holds
// that batch before it resumes, tails or takes over (raft's (term, index)
// check, for this log). Batch znodes are immutable and named by their first
// index, so the same BatchID at the same name means the same entries.
type BatchID struct {
	Epoch, First uint64
	Count        int
	CRC          uint32
}

// Last returns the index of the batch's last entry.
func (b BatchID) Last() uint64 { return b.First + uint64(b.Count) - 1 }

// IsZero reports whether b identifies no batch.
func (b BatchID) IsZero() bool { return b == BatchID{} }

func (b BatchID) String() string {
	if b.IsZero() {
		return "none"
	}
	return fmt.Sprintf("{epoch %d, first %d, count %d, crc %08x}", b.Epoch, b.First, b.Count, b.CRC)
}

// ID returns the batch's identity.
func (b Batch) ID() BatchID {
	return BatchID{Epoch: b.Epoch, First: b.First, Count: b.Count, CRC: b.CRC}
}

// CheckChain lists the room's channels and checks that they form a chain:
// consecutive numbers, each channel's first index equal to the previous
// channel's last + 1, every channel but the last sealed, the last one open
// (a writer seals a channel and opens its successor in one Multi, and
// DeleteChannel never deletes the open channel), no batch ever deleted
// from a channel that is not marked for deletion (the channel znode's
// child version counts deletes; only DeleteChannel deletes batches, after
// marking the channel), no channel ever created if
// none is left, and no channel deleted and created again (see
// checkHistory). Anything else fails with ErrCorrupt naming the
// channel: the room was tampered with (a channel deleted or created by
// another client) and needs an operator. A check raced by a rotation or
// a compaction after its listing (the listing's own history is sound and
// the channels znode's child version moved since) is done again, up to
// 100 times in a row before CheckChain gives up with a transient
// ErrUnavailable; a break in the listing's history is reported at once,
// any other only after five looks with nothing created or deleted.
func (r *Room) CheckChain(ctx context.Context) ([]ChannelInfo, error) {
	infos, err := r.chain(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.checkRemoved(infos); err != nil {
		return nil, err
	}
	return infos, nil
}

// checkRemoved refuses a channel that lost a batch although it is not
// being deleted (ChannelInfo.Removed).
func (r *Room) checkRemoved(infos []ChannelInfo) error {
	for _, c := range infos {
		if !c.Tampered() {
			continue
		}
		if c.Deleting && !c.Sealed {
			// DeleteChannel refuses the open channel: the mark is forged
			// (and would exempt deletions from this check).
			return r.corrupt(c.Num, r.channelPath(c.Num), fmt.Errorf("%w: the open channel (first index %d) is marked for deletion, which DeleteChannel never does: "+
				"its meta was written by another client", ErrCorrupt, c.FirstIndex))
		}
		state := "open"
		if c.Sealed {
			state = "sealed"
		}
		return r.corrupt(c.Num, r.channelPath(c.Num), fmt.Errorf("%w (%w): %d batch znode(s) deleted from the %s channel (first index %d), which is not being deleted: "+
			"acknowledged entries were removed by another client", ErrCorrupt, ErrEntriesRemoved, c.Removed, state, c.FirstIndex))
	}
	return nil
}

// chain is CheckChain without the check of removed batches.
func (r *Room) chain(ctx context.Context) ([]ChannelInfo, error) {
	var infos []ChannelInfo
	var err error
	// The listing and its child version are one atomic read; the channels'
	// metadata is read afterwards. A rotation after the listing makes the
	// last listed channel look sealed without a successor; a deletion by
	// compaction after the listing drops a listed channel from the reads,
	// which looks like a gap. Neither shows in the listing's history
	// (checkHistory), and both move the child version: such a check is
	// done again (up to maxChainRaces times in a row, then a transient
	// ErrUnavailable, not corruption). A break the listing's own history
	// shows (a channel deleted out of order, the open one included) is
	// reported at once; a break seen while nothing is created or deleted
	// is reported after five such looks.
	races := 0
	for attempt := 0; attempt < 5; {
		var l channelListing
		l, err = r.listChannels(ctx)
		if err != nil {
			return nil, err
		}
		if testHookAfterListing != nil {
			testHookAfterListing()
		}
		infos, err = r.channelInfos(ctx, l.nums)
		if err != nil {
			return nil, err
		}
		// The structural checks first: their messages say more.
		herr := r.checkHistory(l)
		err = r.checkChain(infos, l)
		if err == nil {
			err = herr
		}
		if err == nil || herr != nil {
			break // sound, or broken in the listing itself
		}
		moved, serr := r.channelsChanged(ctx, l.cversion)
		if serr != nil {
			return nil, serr
		}
		if !moved {
			attempt++
			continue
		}
		if races++; races >= maxChainRaces {
			return nil, fmt.Errorf("%w: room %q: channels were created or deleted during each of %d checks of the chain; try again", ErrUnavailable, r.name, races)
		}
	}
	if err != nil {
		return nil, err
	}
	r.metrics.channelsListed(len(infos))
	return infos, nil
}

// maxChainRaces bounds CheckChain's checks raced by rotations.
const maxChainRaces = 100

// channelsChanged reports whether a channel was created or deleted since a
// listing that saw cversion.
func (r *Room) channelsChanged(ctx context.Context, cversion int32) (bool, error) {
	var stat *zk.Stat
	err := r.c.Retry(ctx, func() error {
		var e error
		_, stat, e = r.c.Conn().Exists(r.Path(channelsNode))
		return e
	})
	if err != nil {
		return false, zkError("logroom: stat channels", err)
	}
	return stat == nil || stat.Cversion != cversion, nil
}

// testHookAfterListing, set by a test, runs between CheckChain's listing
// and its reads of the listed channels.
var testHookAfterListing func()

// channelListing is one listing of the channels znode with its stat.
type channelListing struct {
	nums    []uint64 // channel numbers, ascending
	foreign int      // children that are not channel names
	// cversion counts every create and delete of a child of the channels
	// znode since the room was created.
	cversion int32
}

func (r *Room) listChannels(ctx context.Context) (channelListing, error) {
	var names []string
	var stat *zk.Stat
	err := r.c.Retry(ctx, func() error {
		var e error
		names, stat, e = r.c.Conn().Children(r.Path(channelsNode))
		return e
	})
	if errors.Is(err, zk.ErrNoNode) {
		return channelListing{}, fmt.Errorf("%w: %s", ErrNoRoom, r.root)
	}
	if err != nil {
		return channelListing{}, zkError("logroom: list channels", err)
	}
	l := channelListing{cversion: stat.Cversion}
	for _, n := range names {
		if num, ok := parseNum(n, channelPrefix); ok {
			l.nums = append(l.nums, num)
		} else {
			l.foreign++
		}
	}
	slices.Sort(l.nums)
	return l, nil
}

// checkHistory compares the channels znode's child version with the
// history the listed channels imply. Writers create channels 1, 2, 3… in
// order and compaction deletes the oldest, so a room listing channels a..b
// has seen exactly b creates and a-1 deletes (plus one create per foreign
// child present). More means a channel (or a foreign znode) was deleted and
// created again: the open channel deleted and re-created with a new
// history, for instance, which would look like a valid chain.
func (r *Room) checkHistory(l channelListing) error {
	want := int64(l.foreign)
	if len(l.nums) > 0 {
		want += int64(l.nums[len(l.nums)-1]) + int64(l.nums[0]) - 1
	}
	if int64(l.cversion) == want {
		return nil
	}
	what := "no channel"
	if len(l.nums) > 0 {
		what = fmt.Sprintf("channels %d..%d", l.nums[0], l.nums[len(l.nums)-1])
	}
	return fmt.Errorf("%w: room %q znode %s: %d child creates and deletes recorded, but %s (and %d foreign znodes) account for %d: "+
		"channels were deleted or re-created by another client",
		ErrCorrupt, r.name, r.Path(channelsNode), l.cversion, what, l.foreign, want)
}

func (r *Room) checkChain(infos []ChannelInfo, l channelListing) error {
	if len(infos) == 0 {
		// No channel: fine for a room no writer ever wrote in; corrupt if
		// channels existed (the parent's child version counts every create
		// and delete of a child).
		if int(l.cversion) > l.foreign {
			return fmt.Errorf("%w: room %q: znode %s has no channel left but had %d channel creates/deletes (every channel was deleted)",
				ErrCorrupt, r.name, r.Path(channelsNode), l.cversion)
		}
		return nil
	}
	for i, c := range infos {
		path := r.channelPath(c.Num)
		if i > 0 {
			p := infos[i-1]
			if c.Num != p.Num+1 {
				return r.corrupt(c.Num, path, fmt.Errorf("%w: channel %d follows channel %d (channel %d is missing)",
					ErrCorrupt, c.Num, p.Num, p.Num+1))
			}
			if c.FirstIndex != p.LastIndex+1 {
				return r.corrupt(c.Num, path, fmt.Errorf("%w: channel first index %d, previous channel %d sealed at %d",
					ErrCorrupt, c.FirstIndex, p.Num, p.LastIndex))
			}
		}
		if i < len(infos)-1 && !c.Sealed {
			return r.corrupt(c.Num, path, fmt.Errorf("%w: channel is open but channel %d follows it", ErrCorrupt, infos[i+1].Num))
		}
		if i == len(infos)-1 && c.Sealed {
			return r.corrupt(c.Num, path, fmt.Errorf("%w: last channel sealed at index %d and channel %d does not exist (the open channel was deleted)",
				ErrCorrupt, c.LastIndex, c.Num+1))
		}
	}
	return nil
}

// MatchLog checks that the log still holds the batch id, which the caller
// applied entries up to applied from (id.First <= applied <= id.Last()). A
// mismatch, a batch missing from a channel that is not being deleted, or a
// log that ends below applied is divergence: the error wraps ErrDiverged
// and names the room, channel, znode and both identities. A batch in a
// channel deleted by compaction cannot be checked and passes (the caller is
// behind the deleted log and must bootstrap anyway). applied == 0 always
// passes. A zero id (state written before batch identities were recorded)
// checks only that the log reaches applied. A broken channel chain fails
// with ErrCorrupt.
func (r *Room) MatchLog(ctx context.Context, id BatchID, applied uint64) error {
	if applied == 0 {
		return nil
	}
	_, err := r.Audit(ctx, id, applied)
	return err
}

// Audit is what a running member checks periodically: MatchLog (for
// applied > 0) and CheckChain, with the channels checked returned. The
// batch the caller applied is compared first (a batch replaced or missing
// is divergence, ErrDiverged naming our batch); a batch deleted from any
// channel that is not being deleted is corruption (ErrCorrupt), reported
// after.
func (r *Room) Audit(ctx context.Context, id BatchID, applied uint64) ([]ChannelInfo, error) {
	if applied == 0 {
		return r.CheckChain(ctx)
	}
	if !id.IsZero() && (id.Count <= 0 || id.First == 0 || applied < id.First || applied > id.Last()) {
		return nil, fmt.Errorf("%w: room %q: local state at index %d records batch %v, which does not hold that index",
			ErrDiverged, r.name, applied, id)
	}
	if err := zkx.Sync(ctx, r.c, r.Path(channelsNode)); err != nil {
		return nil, zkError("logroom: sync", err)
	}
	infos, err := r.chain(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.matchBatch(ctx, infos, id, applied); err != nil {
		return nil, err
	}
	if err := r.checkRemoved(infos); err != nil {
		return nil, err
	}
	return infos, nil
}

// matchBatch is MatchLog's comparison against the checked chain infos.
func (r *Room) matchBatch(ctx context.Context, infos []ChannelInfo, id BatchID, applied uint64) error {
	if len(infos) == 0 {
		return fmt.Errorf("%w: room %q: local state at index %d, but the room holds no channel", ErrDiverged, r.name, applied)
	}
	if applied < infos[0].FirstIndex-1 {
		return nil // behind the deleted log: nothing left to compare with
	}
	if id.IsZero() && applied < infos[len(infos)-1].FirstIndex {
		// The chain (checked above; its last channel is the open one)
		// reaches applied: a sealed channel ends at or past it, and no walk
		// of the open channel is needed.
		return nil
	}
	if id.IsZero() {
		end, err := r.CommittedIndex(ctx, 0)
		if err != nil {
			return err
		}
		if end < applied {
			return fmt.Errorf("%w: room %q: local state at index %d, but the log ends at %d", ErrDiverged, r.name, applied, end)
		}
		return nil
	}
	// The channel that must hold id.First.
	var ci ChannelInfo
	found := false
	for _, c := range infos {
		if c.FirstIndex <= id.First && (!c.Sealed || id.First <= c.LastIndex) {
			ci, found = c, true
		}
	}
	if !found {
		// Below the oldest channel (compacted), or in a gap the chain check
		// would have refused.
		return nil
	}
	path := r.batchPath(ci.Num, id.First)
	if ci.Sealed && id.Last() > ci.LastIndex {
		return fmt.Errorf("%w: room %q channel %d znode %s: local state applied batch %v, but the channel is sealed at index %d",
			ErrDiverged, r.name, ci.Num, path, id, ci.LastIndex)
	}
	data, _, err := zkx.Get(ctx, r.c, path)
	if errors.Is(err, zk.ErrNoNode) {
		m, _, merr := r.readChannel(ctx, ci.Num)
		if errors.Is(merr, zk.ErrNoNode) || (merr == nil && m.Deleting) {
			return nil // compacted under us
		}
		if merr != nil {
			return merr
		}
		if ci.Sealed {
			return fmt.Errorf("%w: room %q channel %d znode %s: local state applied batch %v, which is missing from the log",
				ErrDiverged, r.name, ci.Num, path, id)
		}
		end, err := r.CommittedIndex(ctx, 0)
		if err != nil {
			return err
		}
		return fmt.Errorf("%w: room %q channel %d znode %s: local state applied batch %v up to index %d, but the log ends at %d",
			ErrDiverged, r.name, ci.Num, path, id, applied, end)
	}
	if err != nil {
		return zkError("logroom: read "+path, err)
	}
	b, err := DecodeBatch(data)
	if err != nil {
		return r.corrupt(ci.Num, path, err)
	}
	if got := b.ID(); got != id {
		return fmt.Errorf("%w: room %q channel %d znode %s: the log holds batch %v, local state applied batch %v",
			ErrDiverged, r.name, ci.Num, path, got, id)
	}
	return nil
}

// nextEpoch returns the epoch a new writer takes: one more than the epoch
// znode's value and than every epoch the channels record (batches carry
// their channel's epoch, which readers and takeovers check), so a reset or
// lowered epoch znode never makes a writer reuse an epoch. An epoch that
// would overflow fails with ErrCorrupt.
func (r *Room) nextEpoch(cur uint64, infos []ChannelInfo) (uint64, error) {
	hi, from := cur, "the epoch znode"
	for _, c := range infos {
		if c.Epoch > hi {
			hi, from = c.Epoch, fmt.Sprintf("channel %d", c.Num)
		}
	}
	if hi == math.MaxUint64 {
		return 0, fmt.Errorf("%w: room %q: %s records epoch %d; a new epoch would overflow", ErrCorrupt, r.name, from, hi)
	}
	if hi > cur {
		r.log.Warn("a channel records a newer epoch than the epoch znode; skipping past it",
			"epoch_znode", cur, "newest", hi, "where", from)
	}
	return hi + 1, nil
}

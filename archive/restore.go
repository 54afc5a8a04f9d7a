package archive

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
	"github.com/roomlog/roomlog/version"
)

// StoreDirName is the store's directory under RestoreOptions.DataDir, as
// in a member's data dir (package replica: DataDir/store).
const StoreDirName = "store"

// RestoreOptions says what Restore builds.
type RestoreOptions struct {
	Archive Archive
	// Room is the room's name. Required.
	Room string
	// RoomCzxid and RoomFence pick the room incarnation: its room znode's
	// czxid and its epoch znode's name (Origin). RoomCzxid 0: the only
	// one the archive holds items of, or, when it holds several, the
	// newest of the re-seed chain it records (doc.go); when the chain
	// cannot tell, Restore refuses with ErrAmbiguous listing them (czxids
	// restart from zero in a wiped or new ensemble: the highest is not
	// the newest). RoomFence
	// "": the only incarnation of that czxid the archive holds; several
	// (a room re-seeded in a wiped ensemble at the czxid a lost one had)
	// are refused with ErrAmbiguous. RoomFence needs RoomCzxid.
	RoomCzxid int64
	RoomFence string
	// ToIndex is the index the store is built at (0 with ToTime zero: the
	// newest index the archive covers).
	ToIndex uint64
	// ToTime, when not zero, picks the index instead (ToIndex must be 0):
	// the last index of the last batch, in index order, whose ZooKeeper
	// commit time (Batch.Ctime) is at or before ToTime, stopping at the
	// first batch committed after it (doc.go, "Time"). A time past the
	// newest archived batch resolves to the newest archived index of which
	// the archive can tell it committed at or before ToTime: a checkpoint
	// above the last archived channel counts when it was made (its
	// manifest's Created, the member's clock) at or before ToTime.
	// Entries of channels not sealed and archived yet are not in the
	// archive: RestoreResult.Cut says so (RestoreResult.Time says when the
	// restored index was committed).
	ToTime time.Time
	// DataDir receives the store at DataDir/store (StoreDirName), which
	// must not exist or be empty. Required.
	DataDir string
	// Applier must be the Applier the room's members use (the state is
	// rebuilt by applying the archived entries again). Default
	// store.OpsApplier{}. An Applier error fails the restore naming the
	// entry's index and channel item; an Applier that rejects what it
	// cannot decode (a response, store.OpsApplier without Strict) builds
	// a store no member held if the room's members apply with another
	// Applier: give a strict one where that matters.
	Applier store.Applier
	// Progress, if set, is called after each archived channel applied.
	Progress func(applied, target uint64)
}

// RestoreResult is what Restore built.
type RestoreResult struct {
	Origin Origin
	// Chosen says why Origin was restored when the restore named no
	// incarnation and the archive holds several: the re-seed chain, from
	// Origin back (empty otherwise).
	Chosen string
	// Index is the restored store's applied index (== the target), Epoch
	// its applied epoch.
	Index, Epoch uint64
	// Checkpoint is the index of the archived checkpoint it started from
	// (0: from an empty store, the log's first channel).
	Checkpoint uint64
	// Skipped names the newer checkpoints at or below Index that failed
	// verification (damaged, with the items sharing a damaged file), each
	// with its error: the restore started from an older restore point.
	Skipped []string
	// Entries is how many archived entries were applied on top of it,
	// Channels from how many channel items.
	Entries  uint64
	Channels int
	// RunHash is the store's running hash at Index, StateHash its state
	// hash: a member at Index holds the same.
	RunHash   store.RunHash
	StateHash string
	// Time is the ZooKeeper commit time of the batch holding Index (zero
	// when Index is the checkpoint's and no archived batch says).
	Time time.Time
	// Cut is set when ToTime is later than every archived batch: Index is
	// the newest index the archive shows committed at or before ToTime,
	// and entries committed after it (in channels not sealed and archived
	// yet, or whose commit time the archive cannot tell) may be missing.
	// CutReason says what the archive holds and why Index stops there.
	Cut       bool
	CutReason string
	// RoomVersion is the room version the restored index was written
	// under: the room version of the archived channel holding it (else
	// of the nearest archived channel before it, else after it; 0: the
	// archive holds no channel of the incarnation). Restore records it in
	// DataDir (RestoreInfoName) so a re-seed from DataDir creates the
	// room at that version.
	RoomVersion int
	// StoreDir is where the store is.
	StoreDir string
	// Took is how long Restore took; Resolve the part spent choosing the
	// index (ToTime), CheckpointRestore the checkpoint's copy, Apply
	// reading and applying the channels.
	Took, Resolve, CheckpointRestore, Apply time.Duration
}

// Restore builds a store at exactly one index from the archive: the
// newest archived checkpoint at or below it, then the archived channels'
// entries after the checkpoint up to the index, applied in order through
// store.Apply with opts.Applier. It refuses, naming what is missing or
// wrong, an index the archive does not cover (ErrNotCovered), a corrupt
// item (ErrCorrupt) and an item of another incarnation (ErrForeign,
// checkpoint.ErrForeign). On failure it removes what it wrote at
// DataDir/store.
func Restore(ctx context.Context, opts RestoreOptions) (res RestoreResult, err error) {
	start := time.Now()
	if opts.Archive == nil || opts.Room == "" || opts.DataDir == "" {
		return res, errors.New("archive: restore: Archive, Room and DataDir are required")
	}
	if opts.ToIndex != 0 && !opts.ToTime.IsZero() {
		return res, errors.New("archive: restore: give ToIndex or ToTime, not both")
	}
	if opts.Applier == nil {
		opts.Applier = store.OpsApplier{}
	}
	if opts.RoomFence != "" && opts.RoomCzxid == 0 {
		return res, fmt.Errorf("archive: restore: RoomFence without RoomCzxid (epoch znode %q): name the incarnation by both", opts.RoomFence)
	}
	items, err := opts.Archive.List(ctx, opts.Room)
	if err != nil {
		return res, err
	}
	origin, chosen, err := pickOrigin(ctx, opts.Archive, items, opts.RoomCzxid, opts.RoomFence)
	if err != nil {
		return res, fmt.Errorf("archive: restore room %q: %w", opts.Room, err)
	}
	res.Chosen = chosen
	plan, err := planRestore(items, origin)
	if err != nil {
		return res, fmt.Errorf("archive: restore room %q: %w", opts.Room, err)
	}
	res.Origin = plan.origin
	target := opts.ToIndex
	var targetTime int64
	if !opts.ToTime.IsZero() {
		target, targetTime, res.CutReason, err = resolveTime(ctx, opts.Archive, plan, opts.ToTime)
		res.Cut = res.CutReason != ""
		if err != nil {
			return res, fmt.Errorf("archive: restore room %q: %w%s", opts.Room, err, chosenHint(res.Chosen))
		}
		res.Resolve = time.Since(start)
	} else if target == 0 {
		target = plan.newest()
	}
	storeDir := filepath.Join(opts.DataDir, StoreDirName)
	if err := checkEmptyDir(storeDir); err != nil {
		return res, err
	}
	wrote := false
	defer func() {
		if err != nil && wrote {
			_ = os.RemoveAll(storeDir)
			_ = os.Remove(filepath.Join(opts.DataDir, RestoreInfoName))
		}
	}()
	t0 := time.Now()
	// The newest checkpoint at or below the target that verifies: a
	// damaged one is skipped (reported) for the next older restore point.
	var chans []Item
	for {
		var ckpt *Item
		ckpt, chans, err = plan.cover(target)
		if err != nil {
			if len(res.Skipped) > 0 {
				err = fmt.Errorf("%w; damaged checkpoints skipped: %s", err, strings.Join(res.Skipped, "; "))
			}
			return res, fmt.Errorf("archive: restore room %q (%v) to index %d: %w%s", opts.Room, plan.origin, target, err, chosenHint(res.Chosen))
		}
		if ckpt == nil {
			break
		}
		dir, release, err := opts.Archive.OpenCheckpoint(ctx, *ckpt)
		if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrForeign) || errors.Is(err, ErrNotFound) {
			res.Skipped = append(res.Skipped, fmt.Sprintf("checkpoint at index %d: %v", ckpt.Last, err))
			plan.ckpts = slices.DeleteFunc(plan.ckpts, func(it Item) bool { return it.Path == ckpt.Path })
			continue
		}
		if err != nil {
			return res, err
		}
		wrote = true
		err = checkpoint.Restore(ctx, dir, storeDir, plan.origin.Checkpoint())
		release()
		if err != nil {
			return res, fmt.Errorf("archive: restore %v: %w", *ckpt, err)
		}
		res.Checkpoint = ckpt.Last
		break
	}
	res.CheckpointRestore = time.Since(t0)
	t1 := time.Now()
	wrote = true
	st, err := store.Open(storeDir, &store.Options{Applier: opts.Applier, Sync: store.SyncGroup})
	if err != nil {
		return res, fmt.Errorf("archive: restore: open the store at %s: %w", storeDir, err)
	}
	defer func() {
		if cerr := st.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("archive: restore: close the store: %w", cerr)
		}
	}()
	if got := st.AppliedIndex(); got != res.Checkpoint {
		return res, fmt.Errorf("%w: the store restored from the checkpoint at %d is at index %d", ErrCorrupt, res.Checkpoint, got)
	}
	var lastCtime int64
	for _, it := range chans {
		ch, err := opts.Archive.ReadChannel(ctx, it)
		if err != nil {
			return res, err
		}
		res.RoomVersion = ch.RoomVersion // the last one holds the target
		var batch []store.Entry
		for _, bt := range ch.Batches {
			b, err := logroom.DecodeBatch(bt.Data)
			if err != nil { // ReadChannel decoded it already
				return res, fmt.Errorf("%w: %s: %w", ErrCorrupt, it.Path, err)
			}
			if b.Last() <= res.Checkpoint || b.First > target {
				continue
			}
			for i, d := range b.Entries {
				idx := b.First + uint64(i)
				if idx <= res.Checkpoint || idx > target {
					continue
				}
				batch = append(batch, store.Entry{Index: idx, Epoch: b.Epoch, Data: d,
					Batch: store.BatchRef{First: b.First, Count: uint32(b.Count), CRC: b.CRC}})
			}
			lastCtime = bt.Ctime
			if len(batch) >= 1024 {
				if _, err := st.Apply(batch); err != nil {
					return res, fmt.Errorf("archive: restore: apply indexes %d..%d from channel %d (%s): %w", batch[0].Index, batch[len(batch)-1].Index, ch.Num, it.Path, err)
				}
				res.Entries += uint64(len(batch))
				batch = batch[:0]
			}
		}
		if len(batch) > 0 {
			if _, err := st.Apply(batch); err != nil {
				return res, fmt.Errorf("archive: restore: apply indexes %d..%d from channel %d (%s): %w", batch[0].Index, batch[len(batch)-1].Index, ch.Num, it.Path, err)
			}
			res.Entries += uint64(len(batch))
		}
		res.Channels++
		if opts.Progress != nil {
			opts.Progress(st.AppliedIndex(), target)
		}
	}
	if err := st.Sync(); err != nil {
		return res, fmt.Errorf("archive: restore: sync the store: %w", err)
	}
	res.Index, res.Epoch = st.AppliedIndex(), st.AppliedEpoch()
	if res.Index != target {
		panic(fmt.Sprintf("archive: restore: applied %d, planned %d (checkpoint %d, %d channels)", res.Index, target, res.Checkpoint, len(chans)))
	}
	res.RunHash = st.RunHash()
	if res.StateHash, _, err = st.StateHash(); err != nil {
		return res, fmt.Errorf("archive: restore: state hash: %w", err)
	}
	if len(chans) == 0 {
		if res.RoomVersion, err = plan.roomVersionAt(ctx, opts.Archive, target); err != nil {
			return res, err
		}
	}
	if err := writeRestoreInfo(opts.DataDir, RestoreInfo{Room: opts.Room, Origin: plan.origin.ID(),
		Index: res.Index, Epoch: res.Epoch, RoomVersion: res.RoomVersion}); err != nil {
		return res, err
	}
	if targetTime != 0 {
		lastCtime = targetTime
	}
	if lastCtime != 0 {
		res.Time = time.UnixMilli(lastCtime).UTC()
	}
	res.StoreDir = storeDir
	res.Apply = time.Since(t1)
	res.Took = time.Since(start)
	return res, nil
}

// RestoreInfoName is the file in RestoreOptions.DataDir in which Restore
// records what it built (RestoreInfo, JSON): a re-seed from that data dir
// (package replica, which has no member marker to read there) creates the
// room at the recorded room version instead of 1.
const RestoreInfoName = "roomlog-restore.json"

// RestoreInfo is what Restore records in DataDir (RestoreInfoName).
type RestoreInfo struct {
	Room   string
	Origin string // the incarnation restored (Origin.ID)
	Index  uint64
	Epoch  uint64
	// RoomVersion: RestoreResult.RoomVersion (0: unknown).
	RoomVersion int `json:",omitempty"`
}

// ReadRestoreInfo reads the record Restore left in dataDir (nil when there
// is none).
func ReadRestoreInfo(dataDir string) (*RestoreInfo, error) {
	path := filepath.Join(dataDir, RestoreInfoName)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("archive: read %s: %w", path, err)
	}
	var ri RestoreInfo
	if err := json.Unmarshal(b, &ri); err != nil {
		return nil, fmt.Errorf("archive: %s is malformed: %v", path, err)
	}
	if ri.RoomVersion < 0 || ri.RoomVersion > version.RoomMax {
		return nil, fmt.Errorf("archive: %s records room version %d: this binary knows room versions 1..%d (0: unknown)",
			path, ri.RoomVersion, version.RoomMax)
	}
	return &ri, nil
}

// writeRestoreInfo writes ri to dataDir (synced, then renamed in place).
func writeRestoreInfo(dataDir string, ri RestoreInfo) error {
	b, err := json.Marshal(ri)
	if err != nil {
		return err
	}
	path := filepath.Join(dataDir, RestoreInfoName)
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err == nil {
		_, err = f.Write(b)
		if err == nil {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("archive: restore: record %s: %w", path, err)
	}
	return nil
}

// roomVersionAt is the room version index was written under, when no
// channel was applied (the target is a checkpoint's index): the archived
// channel holding it, else the nearest one before it, else after it (0:
// none archived).
func (p plan) roomVersionAt(ctx context.Context, a Archive, index uint64) (int, error) {
	var pick *Item
	for i := range p.chans {
		c := &p.chans[i]
		if c.First <= index {
			pick = c // ascending: the last one starting at or before index
		} else if pick == nil {
			pick = c
		}
		if c.First > index {
			break
		}
	}
	if pick == nil {
		return 0, nil
	}
	ch, err := a.ReadChannel(ctx, *pick)
	if err != nil {
		return 0, fmt.Errorf("archive: restore: read %s for its room version: %w", pick.Path, err)
	}
	return ch.RoomVersion, nil
}

// chosenHint tells, for an error about the incarnation the re-seed chain
// chose (chosen: RestoreResult.Chosen), that an earlier one may hold what
// is missing.
func chosenHint(chosen string) string {
	if chosen == "" {
		return ""
	}
	return fmt.Sprintf(" (no incarnation named: restored %s; what it does not cover, an index before its seed or a time before its first batch, "+
		"is in an earlier incarnation's items: name it, RoomCzxid and RoomFence, --incarnation 0x<czxid>/<epoch znode>)", chosen)
}

// checkEmptyDir refuses a path that exists and is not an empty directory.
func checkEmptyDir(p string) error {
	ents, err := os.ReadDir(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("archive: restore: %w", err)
	}
	if len(ents) > 0 {
		return fmt.Errorf("archive: restore: %s is not empty; give a new data dir", p)
	}
	return nil
}

// plan is one incarnation's items, sorted by First.
type plan struct {
	origin Origin
	ckpts  []Item // ascending index
	chans  []Item // ascending First
}

// planRestore gathers the items of the incarnation origin.
func planRestore(items []Item, origin Origin) (plan, error) {
	p := plan{origin: origin}
	for _, it := range items {
		if it.Origin != origin {
			continue
		}
		if it.Kind == KindCheckpoint {
			p.ckpts = append(p.ckpts, it)
		} else {
			p.chans = append(p.chans, it)
		}
	}
	if len(p.ckpts)+len(p.chans) == 0 {
		return plan{}, fmt.Errorf("%w: nothing archived of incarnation %s", ErrNotCovered, origin.ID())
	}
	return p, nil
}

// origins lists the incarnations items belong to, in their order.
func origins(items []Item) []Origin {
	var out []Origin
	for _, it := range items {
		if len(out) == 0 || out[len(out)-1] != it.Origin {
			out = append(out, it.Origin) // sorted by origin
		}
	}
	return out
}

// pickOrigin picks the incarnation a restore rebuilds: the one named
// (czxid, and fence when given), else the only one archived, else the one
// in service by the re-seed chain (chosen says so). Several that fit and
// no chain to tell is ErrAmbiguous, listing them.
func pickOrigin(ctx context.Context, a Archive, items []Item, czxid int64, fence string) (o Origin, chosen string, err error) {
	all := origins(items)
	if len(all) == 0 {
		return Origin{}, "", fmt.Errorf("%w: nothing archived", ErrNotCovered)
	}
	if czxid == 0 {
		if len(all) == 1 {
			return all[0], "", nil
		}
		links, err := readChain(ctx, a, all)
		if err != nil {
			return Origin{}, "", err
		}
		head, ok, why := chainHead(all, links)
		if !ok {
			notes := map[Origin]string{}
			for i, o := range all {
				notes[o] = links[i].why
			}
			return Origin{}, "", ambiguous(ctx, a, items, all, notes, "a wiped or new ensemble counts zxids from zero, so the highest czxid need not be "+
				"the incarnation in service, and the re-seed chain cannot tell: "+why)
		}
		var b strings.Builder
		fmt.Fprintf(&b, "the newest of the re-seed chain the archive records:")
		for i := head; i >= 0; i = links[i].prev {
			fmt.Fprintf(&b, " %s %s;", all[i].ID(), links[i].why)
		}
		return all[head], strings.TrimSuffix(b.String(), ";"), nil
	}
	var fit []Origin
	for _, o := range all {
		if o.RoomCzxid == czxid && (fence == "" || o.Fence == fence) {
			fit = append(fit, o)
		}
	}
	switch {
	case len(fit) == 1:
		return fit[0], "", nil
	case len(fit) == 0:
		want := fmt.Sprintf("0x%x", czxid)
		if fence != "" {
			want += "/" + fence
		}
		ids := make([]string, len(all))
		for i, o := range all {
			ids[i] = o.ID()
		}
		return Origin{}, "", fmt.Errorf("%w: nothing archived of incarnation %s (archived: %s)", ErrNotCovered, want, strings.Join(ids, ", "))
	}
	return Origin{}, "", ambiguous(ctx, a, items, fit, nil, fmt.Sprintf(
		"several incarnations were created at zxid 0x%x (a room re-seeded in a wiped ensemble, whose zxids started again from zero); their epoch znodes tell them apart", czxid))
}

// newest is the highest index the archive holds (a channel's last or a
// checkpoint's).
func (p plan) newest() uint64 {
	var n uint64
	if len(p.chans) > 0 {
		n = p.chans[len(p.chans)-1].Last
	}
	if len(p.ckpts) > 0 {
		n = max(n, p.ckpts[len(p.ckpts)-1].Last)
	}
	return n
}

// cover picks the newest checkpoint at or below target (nil: start from
// an empty store, which needs the channel starting at index 1) and the
// channels that take it to target, or says what is missing.
func (p plan) cover(target uint64) (*Item, []Item, error) {
	if target == 0 {
		return nil, nil, fmt.Errorf("%w: index 0", ErrNotCovered)
	}
	if n := p.newest(); target > n {
		return nil, nil, fmt.Errorf("%w: the newest archived index is %d", ErrNotCovered, n)
	}
	var ckpt *Item
	for i := len(p.ckpts) - 1; i >= 0; i-- {
		if p.ckpts[i].Last <= target {
			ckpt = &p.ckpts[i]
			break
		}
	}
	from := uint64(0)
	if ckpt != nil {
		from = ckpt.Last
	}
	if ckpt == nil && (len(p.chans) == 0 || p.chans[0].First != 1) {
		oldest := "none"
		if len(p.ckpts) > 0 {
			oldest = fmt.Sprint(p.ckpts[0].Last)
		}
		return nil, nil, fmt.Errorf("%w: no archived checkpoint at or below it (oldest archived checkpoint: %s) and the log's first channel is not archived", ErrNotCovered, oldest)
	}
	var out []Item
	next := from + 1
	for _, c := range p.chans {
		if next > target {
			break
		}
		if c.Last < next {
			continue // before the checkpoint
		}
		if c.First > next {
			break // a gap: reported below
		}
		if len(out) > 0 && c.First != next {
			return nil, nil, fmt.Errorf("%w: archived channels overlap at %s and the previous one (ending %d)", ErrCorrupt, c.Path, next-1)
		}
		out = append(out, c)
		next = c.Last + 1
	}
	if next <= target {
		gapEnd := target
		for _, c := range p.chans {
			if c.First > next {
				gapEnd = min(target, c.First-1)
				break
			}
		}
		return nil, nil, fmt.Errorf("%w: indexes %d..%d are in no archived channel (starting from the checkpoint at %d)", ErrNotCovered, next, gapEnd, from)
	}
	return ckpt, out, nil
}

// resolveTime finds the last index whose batch committed at or before t:
// reading the incarnation's channels in order, it stops at the first batch
// committed after t. The index must be covered (a checkpoint at or below
// it, channels up to it); otherwise ErrNotCovered says what the archive
// can resolve. A t past every archived batch resolves to the newest
// checkpoint above them made at or before t (else the last batch's index),
// with a reason saying the result is cut back (RestoreResult.Cut).
func resolveTime(ctx context.Context, a Archive, p plan, t time.Time) (uint64, int64, string, error) {
	ms := t.UnixMilli()
	var idx uint64 // the last index of the last batch committed at or before t
	var at int64
	for _, it := range p.chans {
		ch, err := a.ReadChannel(ctx, it)
		if err != nil {
			return 0, 0, "", err
		}
		for _, bt := range ch.Batches {
			b, err := logroom.DecodeBatch(bt.Data)
			if err != nil {
				return 0, 0, "", fmt.Errorf("%w: %s: %w", ErrCorrupt, it.Path, err)
			}
			if bt.Ctime > ms {
				switch {
				case idx == 0:
					return 0, 0, "", fmt.Errorf("%w: %v is before the oldest archived batch (index %d, committed %v, in %s)",
						ErrNotCovered, t.UTC(), b.First, time.UnixMilli(bt.Ctime).UTC(), it.Path)
				case b.First != idx+1:
					return 0, 0, "", fmt.Errorf("%w: %v falls in indexes %d..%d, which are in no archived channel",
						ErrNotCovered, t.UTC(), idx+1, b.First-1)
				}
				return idx, at, "", nil
			}
			idx, at = b.Last(), bt.Ctime
		}
	}
	if idx == 0 {
		return 0, 0, "", fmt.Errorf("%w: no archived channel to resolve %v against", ErrNotCovered, t.UTC())
	}
	// t is past every archived batch: a checkpoint above them made at or
	// before t holds entries committed before t.
	why := fmt.Sprintf("%v is after the newest archived batch (index %d, committed %v)",
		t.UTC(), idx, time.UnixMilli(at).UTC())
	var later []string
	for i := len(p.ckpts) - 1; i >= 0 && p.ckpts[i].Last > idx; i-- {
		ck := p.ckpts[i]
		made, err := checkpointCreated(ctx, a, ck)
		if err != nil {
			if ctx.Err() != nil {
				return 0, 0, "", ctx.Err()
			}
			later = append(later, fmt.Sprintf("the checkpoint at index %d is unusable (%v)", ck.Last, err))
			continue
		}
		if made.After(t) {
			later = append(later, fmt.Sprintf("the checkpoint at index %d was made at %v (the member's clock), after it", ck.Last, made.UTC()))
			continue
		}
		return ck.Last, 0, fmt.Sprintf("%s; restored to the archived checkpoint at index %d, made at %v (the member's clock); "+
			"entries after index %d are in channels not sealed and archived yet", why, ck.Last, made.UTC(), ck.Last), nil
	}
	why += fmt.Sprintf("; restored to index %d; entries after it are in channels not sealed and archived yet", idx)
	if len(later) > 0 {
		why += " (" + strings.Join(later, "; ") + ")"
	}
	return idx, at, why, nil
}

// checkpointCreated is the creation time the manifest of checkpoint item
// it records (verifying the item).
func checkpointCreated(ctx context.Context, a Archive, it Item) (time.Time, error) {
	dir, release, err := a.OpenCheckpoint(ctx, it)
	if err != nil {
		return time.Time{}, err
	}
	defer release()
	mb, err := os.ReadFile(filepath.Join(dir, checkpoint.ManifestName))
	if err != nil {
		return time.Time{}, fmt.Errorf("archive: %w", err)
	}
	m, err := checkpoint.ParseManifest(mb)
	if err != nil {
		return time.Time{}, fmt.Errorf("%w: %s: %w", ErrCorrupt, it.Path, err)
	}
	return m.Created, nil
}

// ambiguous is ErrAmbiguous listing each incarnation of among: the
// indexes its channels and checkpoints cover, when its last archived
// batch committed (ZooKeeper time, read from its newest channel item) and
// its note (what the re-seed chain says of it), the newest first. why
// says why the archive cannot choose.
func ambiguous(ctx context.Context, a Archive, items []Item, among []Origin, notes map[Origin]string, why string) error {
	type inc struct {
		line string
		last int64
	}
	var incs []inc
	for _, o := range among {
		p, err := planRestore(items, o)
		if err != nil {
			return err
		}
		var b strings.Builder
		fmt.Fprintf(&b, "\n  incarnation %s:", o.ID())
		var last int64
		if n := len(p.chans); n > 0 {
			fmt.Fprintf(&b, " channels hold indexes %d..%d", p.chans[0].First, p.chans[n-1].Last)
			if gaps := n - 1 - contiguous(p.chans); gaps > 0 {
				fmt.Fprintf(&b, " (with %d gaps)", gaps)
			}
			ch, err := a.ReadChannel(ctx, p.chans[n-1])
			switch {
			case err != nil:
				fmt.Fprintf(&b, "; its newest channel item is unreadable (%v)", err)
			case len(ch.Batches) > 0:
				last = ch.Batches[len(ch.Batches)-1].Ctime
				fmt.Fprintf(&b, "; index %d committed %s (ZooKeeper time)", ch.Last, time.UnixMilli(last).UTC().Format(time.RFC3339))
			}
		} else {
			b.WriteString(" no channel")
		}
		switch n := len(p.ckpts); {
		case n == 1:
			fmt.Fprintf(&b, "; a checkpoint at index %d", p.ckpts[0].Last)
		case n > 1:
			fmt.Fprintf(&b, "; %d checkpoints, at indexes %d..%d", n, p.ckpts[0].Last, p.ckpts[n-1].Last)
		default:
			b.WriteString("; no checkpoint")
		}
		if n := notes[o]; n != "" {
			fmt.Fprintf(&b, "; %s", n)
		}
		incs = append(incs, inc{line: b.String(), last: last})
	}
	sort.SliceStable(incs, func(i, j int) bool { return incs[i].last > incs[j].last })
	var b strings.Builder
	for _, in := range incs {
		b.WriteString(in.line)
	}
	return fmt.Errorf("%w (RoomCzxid and RoomFence; --incarnation 0x<czxid>/<epoch znode>): %s:%s", ErrAmbiguous, why, b.String())
}

// contiguous counts the channel items of chans (ascending) that start
// right after the previous one ends.
func contiguous(chans []Item) int {
	n := 0
	for i := 1; i < len(chans); i++ {
		if chans[i].First == chans[i-1].Last+1 {
			n++
		}
	}
	return n
}

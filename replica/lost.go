package replica

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
	"github.com/roomlog/roomlog/zkx"
)

// reseedZ is the room's child recording the re-seed that created this
// incarnation (package doc, "Disaster recovery"); absent in a room that
// was never re-seeded.
const reseedZ = "reseed"

// reseedRecord is the data of <room>/reseed (msgpack).
type reseedRecord struct {
	V int `msgpack:"v"`
	// Prev is the czxid of the room incarnation the seed's data dir
	// belonged to (its marker; 0: a data dir without a marker, such as one
	// roomlog restore built).
	Prev int64 `msgpack:"prev"`
	// PrevFence is that incarnation's epoch znode name, as the seed's
	// marker recorded it (omitted: not recorded, a marker of an earlier
	// release). With Prev, the identity of the incarnation this one
	// continues (the archive's re-seed chain).
	PrevFence string `msgpack:"prev_fence,omitempty"`
	// The seed: the position of the survivor the room continues from.
	Index    uint64 `msgpack:"index"`
	Epoch    uint64 `msgpack:"epoch"`
	First    uint64 `msgpack:"first"` // its last batch: first index, count, CRC
	Count    uint32 `msgpack:"count"`
	CRC      uint32 `msgpack:"crc"`
	Hash     string `msgpack:"hash"` // running hash sum (64 hex digits)
	HashBase uint64 `msgpack:"hash_base"`
	// From names the survivor (its member id or data dir); NewEpoch is the
	// epoch the room was created at; At is when (unix ms).
	From     string `msgpack:"from"`
	NewEpoch uint64 `msgpack:"new_epoch"`
	At       int64  `msgpack:"at"`
}

func (rec reseedRecord) point() store.Point {
	p := store.Point{Index: rec.Index, Epoch: rec.Epoch,
		Batch: store.BatchRef{First: rec.First, Count: rec.Count, CRC: rec.CRC},
		Hash:  store.RunHash{Index: rec.Index, Base: rec.HashBase}}
	if b, err := hex.DecodeString(rec.Hash); err == nil && len(b) == 32 {
		copy(p.Hash.Sum[:], b)
	}
	return p
}

func recordFor(prev int64, prevFence string, seed store.Point, from string, newEpoch uint64) reseedRecord {
	return reseedRecord{V: formatVersion1, Prev: prev, PrevFence: prevFence, Index: seed.Index, Epoch: seed.Epoch,
		First: seed.Batch.First, Count: seed.Batch.Count, CRC: seed.Batch.CRC,
		Hash: hex.EncodeToString(seed.Hash.Sum[:]), HashBase: seed.Hash.Base,
		From: from, NewEpoch: newEpoch, At: time.Now().UnixMilli()}
}

func (rec reseedRecord) String() string {
	return fmt.Sprintf("re-seeded at index %d from %s on %s (previous incarnation created at zxid 0x%x)",
		rec.Index, rec.From, time.UnixMilli(rec.At).UTC().Format(time.RFC3339), rec.Prev)
}

// readReseed reads <room>/reseed: ok false when there is none.
func readReseed(ctx context.Context, c *logroom.Client, path string) (rec reseedRecord, ok bool, err error) {
	data, _, err := zkx.Get(ctx, c, path)
	if errors.Is(err, zk.ErrNoNode) {
		return reseedRecord{}, false, nil
	}
	if err != nil {
		return reseedRecord{}, false, fmt.Errorf("replica: read %s: %w", path, err)
	}
	if err := decode(data, &rec); err != nil {
		return reseedRecord{}, false, fmt.Errorf("replica: re-seed record %s: %w", path, err)
	}
	if rec.V != formatVersion1 || len(rec.Hash) != 64 {
		return reseedRecord{}, false, fmt.Errorf("replica: re-seed record %s: format %d: %w", path, rec.V, errBadZnodeData)
	}
	return rec, true, nil
}

// samePoint: two positions of one history (same index, batch, epoch and
// running hash of one chain).
func samePoint(a, b store.Point) bool {
	return a.Index == b.Index && a.Epoch == b.Epoch && a.Batch == b.Batch && a.Hash == b.Hash
}

// roomGone is ErrRoomLost for a room znode that does not exist.
func (r *Replica) roomGone(what string) error {
	return fmt.Errorf("%w: %s: ZooKeeper has no room %q (znode %s) although this member applied %d entries of it: "+
		"the ensemble was wiped or restored from a copy older than the room, or a client deleted the room; "+
		"nothing more is acknowledged; recover with `roomlog reseed` from the members' data dirs (replica package doc, \"Disaster recovery\")",
		ErrRoomLost, what, r.cfg.Room, logroom.RoomPath(r.baseOrDefault(), r.cfg.Room), r.applied.Load())
}

// roomReplaced is ErrRoomLost for a room znode of another incarnation.
func (r *Replica) roomReplaced(what string, czxid int64) error {
	return fmt.Errorf("%w: %s: room %q (znode %s) is another incarnation (created at zxid 0x%x; this member's state is of the one created at 0x%x): "+
		"the room was deleted and created again, or ZooKeeper was wiped and someone created it; "+
		"nothing more is acknowledged; recover with `roomlog reseed` from the members' data dirs (replica package doc, \"Disaster recovery\")",
		ErrRoomLost, what, r.cfg.Room, logroom.RoomPath(r.baseOrDefault(), r.cfg.Room), czxid, r.roomCzxid)
}

// fenceReplaced is ErrRoomLost for a room of our czxid whose epoch znode
// has another name: re-seeded in a wiped ensemble that gave the new room
// our room's czxid.
func (r *Replica) fenceReplaced(what, epochZnode string) error {
	return fmt.Errorf("%w: %s: room %q (znode %s) is another incarnation (its epoch znode is %q, this member's state is of the one whose epoch znode is %q): "+
		"it was re-seeded; nothing more is acknowledged; recover with `roomlog reseed` from the members' data dirs (replica package doc, \"Disaster recovery\")",
		ErrRoomLost, what, r.cfg.Room, logroom.RoomPath(r.baseOrDefault(), r.cfg.Room), epochZnode, r.room.EpochZnode())
}

// logLost is ErrRoomLost for a log that no longer holds what we applied
// (err wraps ErrDiverged and names the batch and indexes). It is a
// *logLostError: the member that finds it marks the room lost in
// ZooKeeper (markLost), since a member whose own state is within what an
// older copy holds cannot tell.
func logLost(what string, err error) error {
	return &logLostError{fmt.Errorf("%w: %s: ZooKeeper's log no longer holds what this member applied (restored from an older copy or rolled back?): %w; "+
		"nothing more is acknowledged; recover with `roomlog reseed` from the members' data dirs (replica package doc, \"Disaster recovery\")",
		ErrRoomLost, what, err)}
}

// logLostError is logLost's error.
type logLostError struct{ err error }

func (e *logLostError) Error() string { return e.err.Error() }
func (e *logLostError) Unwrap() error { return e.err }

// marksRoomLost reports whether err is a verdict that the room's log lost
// what this member applied, which the member records in ZooKeeper
// (markLost) before it resigns.
func marksRoomLost(err error) bool {
	var ll *logLostError
	return errors.As(err, &ll)
}

// markLost records found (the log lost what this member applied) in
// ZooKeeper through c (logroom.MarkLost), for the incarnation this member
// joined (its czxid and epoch znode name: a room re-seeded meanwhile is
// left alone): the room's writer is fenced and no member takes over or
// opens the room until a re-seed, not even one whose own state the
// rolled-back log still holds. It has its own bound (markLostWait, within
// the replica's life): the verdict's own context may be nearly spent (the
// probe's), and a member whose session ZooKeeper refuses never resigns.
// Not when our own state is inconsistent (the batch it records does not
// hold the applied index): that is not ZooKeeper's loss. A failure is
// logged (the verdict stands either way, and every member that finds the
// loss tries).
//
// The error is non-nil only when the mark may not be in place (the caller
// that resigns next must not: a member the older log satisfies could take
// over in its stead).
func (r *Replica) markLost(_ context.Context, c *logroom.Client, found error) error {
	if id, applied := r.appliedBatch(); !id.IsZero() && (id.Count <= 0 || id.First == 0 || applied < id.First || applied > id.Last()) {
		r.log.Warn("not marking the room lost: this member's own state is inconsistent", "applied", applied, "batch", id)
		return nil
	}
	ctx, cancel := context.WithTimeout(r.bgCtx, markLostWait)
	defer cancel()
	text := fmt.Sprintf("member %s, holding %d applied entries of this room, found at %s: %v. "+
		"To recover: stop every member of the room and run `roomlog reseed %s --from <their data dirs>` (it replaces the room). "+
		"If no ZooKeeper data was lost (a false finding), delete this znode to undo the mark.",
		r.cfg.ID, r.applied.Load(), time.Now().UTC().Format(time.RFC3339), found, r.cfg.Room)
	marked, err := logroom.MarkLost(ctx, c, r.baseOrDefault(), r.cfg.Room, r.roomCzxid, r.room.EpochZnode(), text)
	switch {
	case errors.Is(err, logroom.ErrNoRoom):
		// The room is gone meanwhile: a tombstone records that.
		r.tombstone(ctx, c, r.roomGone("marking the room lost found"))
		return nil
	case err != nil && (logroom.IsConnLoss(err) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)):
		r.log.Warn("could not mark the room lost in ZooKeeper (will try again): a member whose state the rolled-back log still holds could take over", "err", err)
		return err
	case err != nil:
		// Not one a retry mends (a corrupt room znode, no access): said
		// once, and the resignation goes ahead.
		r.log.Warn("could not mark the room lost in ZooKeeper: a member whose state the rolled-back log still holds could take over", "err", err)
		return nil
	case marked:
		r.log.Warn("the room is marked lost in ZooKeeper (its log lost what this member applied)", "room", r.cfg.Room)
	default:
		r.log.Info("not marking the room lost: ZooKeeper holds another incarnation (or a tombstone) under its name", "room", r.cfg.Room)
	}
	return nil
}

// markLostWait bounds markLost.
const markLostWait = 3 * time.Second

// markedLost is markLost returning found.
func (r *Replica) markedLost(ctx context.Context, c *logroom.Client, found error) error {
	_ = r.markLost(ctx, c, found)
	return found
}

func (r *Replica) baseOrDefault() string {
	if r.cfg.Base == "" {
		return DefaultBase
	}
	return r.cfg.Base
}

// adoptReseed decides, in Open, on a data dir whose marker names the
// incarnation czxid have while the room is another (now): accepted (nil)
// when the room was re-seeded from that incarnation at exactly this
// store's position; otherwise the refusal, naming the re-seed.
func (r *Replica) adoptReseed(ctx context.Context, haveM, nowM dirMarker) (err error) {
	have, now := haveM.RoomCzxid, nowM.RoomCzxid
	if have == now { // one czxid, two epoch znodes: name both
		haveS, nowS := haveM.incarnation(), nowM.incarnation()
		defer func() {
			if err != nil {
				err = fmt.Errorf("%w (the data dir's incarnation is %s, the room's %s: a room re-seeded in a wiped ensemble at the czxid a lost one had)", err, haveS, nowS)
			}
		}()
	}
	rec, ok, err := readReseed(ctx, r.client, logroom.RoomPath(r.baseOrDefault(), r.cfg.Room, reseedZ))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w (%w): %s holds the state (at index %d) of an earlier room %s/%s (created at zxid 0x%x; the room now was created at 0x%x and was not re-seeded from it): "+
			"if ZooKeeper lost the room, stop its members and re-seed it from their data dirs (`roomlog reseed`); otherwise move the directory away",
			ErrWrongDataDir, ErrRoomLost, r.cfg.DataDir, r.applied.Load(), r.baseOrDefault(), r.cfg.Room, have, now)
	}
	pos := r.st.Position()
	sameFence := rec.PrevFence == "" || haveM.EpochZnode == "" || rec.PrevFence == haveM.EpochZnode
	if rec.Prev == have && sameFence && samePoint(pos, rec.point()) {
		r.log.Warn("adopting the re-seeded room: this data dir is at the seed's position", "reseed", rec.String())
		return nil
	}
	return fmt.Errorf("%w (%w): %s holds the state (at index %d) of room %s/%s's incarnation created at zxid 0x%x; the room was %s and this data dir was not among those the re-seed checked: "+
		"move it away (the member then bootstraps from a peer's checkpoint), or stop the members and run `roomlog reseed` again with it among the survivors",
		ErrWrongDataDir, ErrRoomLost, r.cfg.DataDir, pos.Index, r.baseOrDefault(), r.cfg.Room, have, rec.String())
}

// Cut-off probe (package doc, "Disaster recovery"): a member whose
// session stays disconnected may be cut off by the network, or refused
// by every server because the ensemble lost data (a ZooKeeper restored
// from an older copy, or wiped, refuses every client that saw a newer
// zxid; go-zookeeper then sees only connections closed in the handshake
// and reconnects forever). A probe with a new session tells them apart;
// when to probe and what a result means are the core's decisions
// (probeDue, onProbed in core.go).
const (
	probeAfterFraction = 4 // first probe after SessionTimeout/4 disconnected
	probeBound         = 3 * time.Second
)

type probeResult struct {
	reached bool  // a new session reached the ensemble
	verdict error // ErrRoomLost found, or nil
}

// startProbe carries out the core's aProbe: a probe with a new session,
// off the loop, bounded; its result comes back as evProbed (run).
func (r *Replica) startProbe() {
	id, applied := r.appliedBatch()
	bound := min(probeBound, r.cfg.SessionTimeout)
	done := r.lp.probeDone
	r.wg.Add(1)
	go func() {
		defer r.wg.Done()
		ctx, cancel := context.WithTimeout(r.bgCtx, bound)
		defer cancel()
		done <- r.probe(ctx, id, applied) // buffered: one probe at a time (the core's probeOut)
	}()
}

// probe dials a new session (last zxid 0, so a server that lost data
// accepts it), reads the room without writing, and says whether
// ZooKeeper still holds what this member applied (id, applied).
func (r *Replica) probe(ctx context.Context, id logroom.BatchID, applied uint64) probeResult {
	c, err := logroom.Dial(ctx, r.cfg.zkDialConfig(slog.New(slog.NewTextHandler(io.Discard, nil)), true))
	if err != nil {
		return probeResult{}
	}
	defer c.Close()
	const what = "a new ZooKeeper session (probing while this member's own stays disconnected)"
	info, err := logroom.ReadRoomInfo(ctx, c, r.baseOrDefault(), r.cfg.Room)
	switch {
	case errors.Is(err, logroom.ErrNoRoom):
		verdict := r.roomGone(what + " found")
		r.tombstone(ctx, c, verdict)
		return probeResult{reached: true, verdict: verdict}
	case errors.Is(err, logroom.ErrRoomLost): // another member's tombstone
		return probeResult{reached: true, verdict: fmt.Errorf("%s found: %w", what, err)}
	case err != nil:
		return probeResult{}
	case info.Czxid != r.roomCzxid:
		return probeResult{reached: true, verdict: r.roomReplaced(what+" found", info.Czxid)}
	case info.EpochZnode != r.room.EpochZnode():
		return probeResult{reached: true, verdict: r.fenceReplaced(what+" found", info.EpochZnode)}
	}
	room, err := logroom.OpenRoom(ctx, c, r.cfg.Room, logroom.RoomOptions{Base: r.cfg.Base, NoCreate: true})
	if errors.Is(err, logroom.ErrNoRoom) {
		return probeResult{reached: true, verdict: r.roomGone(what + " found")}
	}
	if err != nil {
		return probeResult{}
	}
	if err := room.MatchLog(ctx, id, applied); errors.Is(err, logroom.ErrDiverged) {
		verdict := logLost(what+" found", err)
		_ = r.markLost(ctx, c, verdict)
		return probeResult{reached: true, verdict: verdict}
	} else if err != nil {
		return probeResult{}
	}
	// What we know was committed (checkCommittedHi) must be there too.
	if hi := r.committedHi.Load(); hi > applied {
		end, err := room.CommittedIndex(ctx, applied)
		if err != nil {
			return probeResult{}
		}
		if lost := committedLoss(what+" found", r.cfg.Room, hi, applied, end); lost != nil {
			return probeResult{reached: true, verdict: r.markedLost(ctx, c, lost)}
		}
	}
	return probeResult{reached: true}
}

// checkRoomIdentity is the running member's check that the room znode is
// still the incarnation it joined (after the audit's sync) and is not
// marked lost by another member (logroom.MarkLost): nil when it is, or
// when ZooKeeper did not answer.
func (r *Replica) checkRoomIdentity(ctx context.Context) error {
	info, err := logroom.ReadRoomInfo(ctx, r.client, r.baseOrDefault(), r.cfg.Room)
	switch classifyRoomIdentity(info, err, r.roomCzxid, r.room.EpochZnode()) {
	case roomIsGone:
		lost := r.roomGone("the log audit found")
		r.tombstone(ctx, r.client, lost)
		return lost
	case roomIsMarked:
		return fmt.Errorf("replica: the log audit found: %w", err)
	case roomIsReplaced:
		return r.roomReplaced("the log audit found", info.Czxid)
	case roomIsCorrupt:
		// Not a room meta: a znode created in its place is another
		// incarnation (czxid); our own corrupted meta is named elsewhere.
		if ok, st, e := r.conn.Exists(r.room.Path()); e == nil && ok && st.Czxid != r.roomCzxid {
			return r.roomReplaced("the log audit found", st.Czxid)
		}
		return nil
	case roomFenceReplaced:
		return r.fenceReplaced("the log audit found", info.EpochZnode)
	}
	return nil
}

// roomIdentity is what checkRoomIdentity finds of the room znode.
type roomIdentity int

const (
	roomIsOurs        roomIdentity = iota // the incarnation joined, or no answer
	roomIsGone                            // no room znode
	roomIsMarked                          // ours, marked lost (or a tombstone of ours)
	roomIsReplaced                        // another incarnation (info.Czxid)
	roomIsCorrupt                         // not a room meta: whose znode it is decides
	roomFenceReplaced                     // our czxid, another epoch znode (re-seeded)
)

// classifyRoomIdentity is checkRoomIdentity's verdict on one
// ReadRoomInfo (info, err) for a member that joined the incarnation
// created at czxid with the epoch znode epochZnode: no I/O.
func classifyRoomIdentity(info logroom.RoomInfo, err error, czxid int64, epochZnode string) roomIdentity {
	switch {
	case errors.Is(err, logroom.ErrNoRoom):
		return roomIsGone
	case errors.Is(err, logroom.ErrRoomLost) && info.Czxid == czxid:
		// Marked lost by a member that found the log short, or a
		// tombstone in a room of ours (a room re-created as a tombstone
		// has another czxid: replaced, below).
		return roomIsMarked
	case errors.Is(err, logroom.ErrRoomLost) && info.Czxid != 0:
		return roomIsReplaced
	case errors.Is(err, logroom.ErrCorrupt):
		return roomIsCorrupt
	case err != nil:
		return roomIsOurs
	case info.Czxid != czxid:
		return roomIsReplaced
	case info.EpochZnode != epochZnode:
		return roomFenceReplaced
	}
	return roomIsOurs
}

// checkRoomAtOpen runs in Open for a member holding state, before the
// room is opened: the room znode must exist (else ErrRoomLost: Open never
// creates it over a member's state) and, when DataDir's marker names an
// incarnation, be that one or a re-seed from it at this store's position.
func (r *Replica) checkRoomAtOpen(ctx context.Context) error {
	info, err := logroom.ReadRoomInfo(ctx, r.client, r.baseOrDefault(), r.cfg.Room)
	switch {
	case errors.Is(err, logroom.ErrNoRoom):
		lost := r.roomGone("Open found")
		r.tombstone(ctx, r.client, lost)
		return lost
	case errors.Is(err, logroom.ErrRoomLost): // a tombstone
		return fmt.Errorf("replica: Open found: %w", err)
	case errors.Is(err, logroom.ErrCorrupt), errors.Is(err, logroom.ErrUnsupportedVersion):
		return nil // OpenRoom names it
	case err != nil:
		return fmt.Errorf("replica: read room: %w", err)
	}
	m, err := readMarker(r.cfg.DataDir)
	if err != nil || m == nil {
		return nil // checkMarker decides on a malformed or missing marker
	}
	now := dirMarker{Base: m.Base, Room: m.Room, RoomCzxid: info.Czxid, EpochZnode: info.EpochZnode}
	if m.sameRoom(now) {
		return nil
	}
	return r.adoptReseed(ctx, *m, now)
}

// tombstone records found (the room missing) in ZooKeeper through c
// (logroom.WriteTombstone), so that no member, one on an empty disk
// included, creates the room anew at index 1 over the lost history. A
// failure is logged: the verdict stands either way.
func (r *Replica) tombstone(ctx context.Context, c *logroom.Client, found error) {
	text := fmt.Sprintf("member %s, holding %d applied entries of this room, found at %s: %v. "+
		"To recover: stop every member of the room and run `roomlog reseed %s --from <their data dirs>` (it replaces this znode). "+
		"To discard the room instead: stop its members and delete this znode.",
		r.cfg.ID, r.applied.Load(), time.Now().UTC().Format(time.RFC3339), found, r.cfg.Room)
	if err := logroom.WriteTombstone(ctx, c, r.baseOrDefault(), r.cfg.Room, text); err != nil {
		r.log.Warn("could not record the lost room in ZooKeeper (a tombstone): a member on an empty disk could create the room anew", "err", err)
		return
	}
	r.log.Warn("recorded in ZooKeeper that the room was lost (a tombstone in its place)", "room", r.cfg.Room)
}

// checkCommittedHi: the highest index this member knows committed (its
// own applies, and the primary's published applied index, which counts
// only committed entries) must still be in the log. A log that ends below
// it lost acknowledged entries although it still holds what this member
// applied (a standby behind the primary when ZooKeeper was restored from
// an older copy): this member must not take over and write those indexes
// again. nil when ZooKeeper did not answer (no verdict).
func (r *Replica) checkCommittedHi(ctx context.Context, what string) error {
	hi, applied := r.committedHi.Load(), r.applied.Load()
	if hi <= applied {
		return nil
	}
	end, err := r.room.CommittedIndex(ctx, applied)
	if err != nil {
		return nil
	}
	if lost := committedLoss(what, r.cfg.Room, hi, applied, end); lost != nil {
		return fatal(lost)
	}
	return nil
}

// committedLoss is the verdict of checkCommittedHi and the probe on a log
// that ends at end, for a member of room that applied applied and knows
// hi committed: logLost when the log ends below hi, else nil. No I/O.
func committedLoss(what, room string, hi, applied, end uint64) error {
	if hi <= applied || end >= hi {
		return nil
	}
	return logLost(what, fmt.Errorf("%w: room %q: the primary published index %d as applied (so it was committed), but the log ends at %d (this member applied %d)",
		logroom.ErrDiverged, room, hi, end, applied))
}

package replica

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/archive"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
	"github.com/roomlog/roomlog/tlsfiles"
	"github.com/roomlog/roomlog/zkx"
)

// ErrReseedRefused: Reseed found a reason not to re-create the room (the
// survivors disagree, a member is still live, the room still holds what
// the survivors applied, …); the error names it, and nothing was changed.
var ErrReseedRefused = errors.New("replica: re-seed refused")

// ReseedConfig says which room to re-seed and from which members' data
// dirs (package doc, "Disaster recovery").
type ReseedConfig struct {
	Servers        []string
	SessionTimeout time.Duration // default 4s
	Auth           *logroom.Digest

	// ZooKeeperTLS, ZooKeeperTLSServerName and ACLIdentities: as in Config.
	ZooKeeperTLS           *tlsfiles.Source
	ZooKeeperTLSServerName string
	ACLIdentities          []string

	Base string // default DefaultBase
	Room string
	// DataDirs are the survivors: the data dirs of the room's members
	// (stopped), or a data dir roomlog restore built.
	DataDirs []string
	// Trust names the data dir to seed from although the survivors
	// disagree (or cannot be compared); those that disagree with it are
	// left out (they are refused by name when they start).
	Trust string
	// Force re-seeds a room whose log still holds everything the chosen
	// survivor applied, or that holds entries of another incarnation
	// (they are lost).
	Force bool
	// RoomVersion to create the room at; 0: the higher of the old
	// room's (when ZooKeeper still has it) and the one the seed's marker
	// recorded (a member records the room version it sees, a finished
	// downgrade included; a survivor's without the seed's; for a data dir
	// archive.Restore built, the version its record names, and a refusal
	// when the restore could not tell), else 1. A
	// version below the recorded one is refused: lowering needs the
	// downgrade protocol, which a re-seed skips.
	RoomVersion int
	// MembersGone bounds the wait for the old room's ephemeral nodes
	// (of sessions that died with the members) to go; default two
	// session timeouts.
	MembersGone time.Duration
	// DryRun makes Reseed check what it can and write nothing: it opens
	// the survivors, chooses the seed, reads what ZooKeeper holds under
	// the room's name (and waits, as a re-seed does, for the old room's
	// live nodes to go), then returns the result it would have produced
	// — Survivors with their roles, Seed, From, Epoch, RoomVersion,
	// Previous — with Czxid and EpochZnode zero, before deleting,
	// creating or recording anything in ZooKeeper or rewriting a marker.
	DryRun bool
	Logger *slog.Logger
	// Progress, if set, is told each step as Reseed enters it (opening the
	// survivors, comparing them, waiting for the old room's live nodes to
	// go, deleting it, creating the room, rewriting markers), so a tool
	// can say what a long re-seed waits for. It must not block.
	Progress func(step string)

	// seedLowest plants a wrong choice for the whole-replica simulation,
	// which must catch it: seed from the survivor that applied the least,
	// and take the others for its history unchecked. Always false outside
	// that test.
	seedLowest bool
}

// step tells cfg.Progress, if set, what Reseed does now.
func (cfg ReseedConfig) step(format string, a ...any) {
	if cfg.Progress != nil {
		cfg.Progress(fmt.Sprintf(format, a...))
	}
}

// Survivor is what Reseed found in one data dir.
type Survivor struct {
	Dir         string
	Position    store.Point // its applied position
	MarkerCzxid int64       // the room incarnation its marker names (0: no marker)
	// MarkerEpochZnode is that incarnation's epoch znode name, as the
	// marker records it ("": not recorded, or no marker).
	MarkerEpochZnode string
	// MarkerRoomVersion: the highest room version its marker recorded (0:
	// none recorded, a member of a release before this was recorded); for
	// a data dir archive.Restore built (no marker), the room version its
	// record (archive.RestoreInfo) names.
	MarkerRoomVersion int
	// Restored: the data dir has no marker but archive.Restore's record.
	Restored bool
	// Role: "seed" (the room continues from it), "adopted" (at the seed's
	// position), "bootstrap" (a prefix of the seed: it bootstraps from a
	// peer's checkpoint when it starts), "left out" (disagrees with the
	// trusted seed, or cannot be compared: its marker is not rewritten).
	Role   string
	Reason string // why left out
}

// ReseedResult describes a re-seed.
type ReseedResult struct {
	Survivors []Survivor
	Seed      store.Point
	From      string // the seed's data dir
	Czxid     int64  // the new incarnation
	// EpochZnode is the new incarnation's epoch znode name (with Czxid,
	// its identity: logroom.RoomInfo.EpochZnode).
	EpochZnode string
	Epoch      uint64 // the epoch the room was created at
	// RoomVersion is the room version the room was created at.
	RoomVersion int
	// Previous: what ZooKeeper held under the room's name before
	// ("missing", or a description).
	Previous string
	// Unchecked is set when ZooKeeper held no room under the name (missing,
	// or a member's tombstone): the live members of the lost incarnation
	// could not be looked for, so one may still run (paused, or cut off).
	// None of its writes can land in the re-seeded room (its epoch znode
	// has a name no earlier incarnation used); it learns the room was
	// replaced at its next write or audit. Stop every member of the lost
	// incarnation before starting the survivors.
	Unchecked string
	Took      time.Duration
}

type survivorStore struct {
	Survivor
	st *store.Store
	// restoredIndex: the index a restored dir's record says it holds.
	restoredIndex uint64
}

// Reseed re-creates a room that ZooKeeper lost from the survivors' data
// dirs: it picks the survivor with the highest (epoch, applied index),
// checks that every other one is a prefix of it (store history: same
// batch, epoch and running hash at its index; ErrReseedRefused if one
// disagrees or cannot be compared, unless Trust names the seed), waits
// for the old room's live nodes to go (ErrReseedRefused naming those that
// stay), deletes what is left of the room, creates it anew with its log
// continuing at the seed's index + 1 under an epoch above every one seen,
// records the re-seed in <room>/reseed, and rewrites the markers of the
// survivors that are the seed's history so they rejoin. The stores are
// opened read-only: no member may run on them meanwhile.
func Reseed(ctx context.Context, cfg ReseedConfig) (ReseedResult, error) {
	start := time.Now()
	if cfg.Base == "" {
		cfg.Base = DefaultBase
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = 4 * time.Second
	}
	if cfg.MembersGone == 0 {
		cfg.MembersGone = 2 * cfg.SessionTimeout
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if err := logroom.ValidateName(cfg.Room); err != nil {
		return ReseedResult{}, err
	}
	if len(cfg.DataDirs) == 0 {
		return ReseedResult{}, fmt.Errorf("%w: no survivor data dir given", ErrReseedRefused)
	}
	cfg.step("opening %d survivor data dir(s)", len(cfg.DataDirs))
	survivors, err := openSurvivors(cfg)
	defer func() {
		for _, s := range survivors {
			if s.st != nil {
				s.st.Close()
			}
		}
	}()
	if err != nil {
		return ReseedResult{}, err
	}
	cfg.step("comparing the survivors' histories")
	seed, err := chooseSeed(cfg, survivors)
	if err != nil {
		return ReseedResult{}, err
	}
	res := ReseedResult{Seed: seed.Position, From: seed.Dir}
	if seed.Position.Index == 0 {
		return res, fmt.Errorf("%w: no survivor applied anything (%s is empty)", ErrReseedRefused, seed.Dir)
	}

	cfg.step("connecting to ZooKeeper %v", cfg.Servers)
	c, err := logroom.Dial(ctx, Config{Servers: cfg.Servers, SessionTimeout: cfg.SessionTimeout, Auth: cfg.Auth,
		ZooKeeperTLS: cfg.ZooKeeperTLS, ZooKeeperTLSServerName: cfg.ZooKeeperTLSServerName,
		ACLIdentities: cfg.ACLIdentities}.zkDialConfig(cfg.Logger, false))
	if err != nil {
		return res, fmt.Errorf("replica: reseed: %w", err)
	}
	defer c.Close()

	epoch := seed.Position.Epoch
	for _, s := range survivors {
		epoch = max(epoch, s.Position.Epoch)
	}
	rv := cfg.RoomVersion
	// The room version the state was written under: the seed's marker
	// (it saw the most, a finished downgrade included), else the highest
	// another survivor recorded.
	recorded, by := seed.MarkerRoomVersion, seed.Dir
	if recorded == 0 {
		for _, s := range survivors {
			if s.MarkerRoomVersion > recorded {
				recorded, by = s.MarkerRoomVersion, s.Dir
			}
		}
	}
	if rv != 0 && rv < recorded {
		return res, fmt.Errorf("%w: %s recorded room version %d; a re-seed at room version %d would lower it without the downgrade protocol (lower it in a running room first, or re-seed at %d)",
			ErrReseedRefused, by, recorded, rv, recorded)
	}
	cfg.step("reading what ZooKeeper holds under room %q", cfg.Room)
	info, err := logroom.ReadRoomInfo(ctx, c, cfg.Base, cfg.Room)
	const unchecked = "ZooKeeper holds no room under the name, so live members of the lost incarnation could not be looked for: " +
		"one may still run (paused or cut off); none of its writes can land in the re-seeded room (its epoch znode has a new name), " +
		"but stop every member of the lost incarnation before starting the survivors"
	switch {
	case errors.Is(err, logroom.ErrNoRoom):
		res.Previous = "missing"
		res.Unchecked = unchecked
		log.Warn("reseed: " + unchecked)
	case errors.Is(err, logroom.ErrRoomLost) && info.Lost == "":
		// A member's tombstone (it found the room missing): replaced.
		res.Previous = "a tombstone: " + err.Error()
		res.Unchecked = unchecked
		log.Warn("reseed: " + unchecked)
		if cfg.DryRun {
			break
		}
		if err := logroom.DeleteRoom(ctx, c, cfg.Base, cfg.Room); err != nil {
			return res, fmt.Errorf("replica: reseed: delete the tombstone: %w", err)
		}
	case err != nil && !errors.Is(err, logroom.ErrCorrupt) && info.Lost == "":
		return res, fmt.Errorf("replica: reseed: %w", err)
	default:
		if info.Lost != "" {
			// Marked lost by a member that found its log short (an older
			// copy): read and replaced like any room of ours.
			log.Warn("reseed: the room is marked lost", "marker", info.Lost)
			err = nil
		}
		if err != nil {
			res.Previous = "a corrupt room znode: " + err.Error()
		} else {
			res.Previous = fmt.Sprintf("room created at zxid 0x%x", info.Czxid)
			if rv == 0 {
				rv = info.RoomVersion.Version
			}
		}
		prev, err := oldRoom(ctx, c, cfg, info, seed, log)
		if err != nil {
			return res, err
		}
		if prev.done != nil {
			// An earlier run of this re-seed created the room: finish it.
			res.Czxid, res.EpochZnode, res.Epoch = info.Czxid, info.EpochZnode, prev.done.NewEpoch
			if cfg.DryRun {
				res.Previous += " (already re-seeded from this seed: only the markers are left to rewrite)"
				return dryRunResult(survivors, res, start), nil
			}
			log.Warn("the room was already re-seeded from this seed; rewriting the markers", "reseed", prev.done.String())
			return finishReseed(cfg, survivors, seed, res, start)
		}
		res.Previous += prev.what
		epoch = max(epoch, prev.epoch)
		if cfg.DryRun {
			break
		}
		cfg.step("deleting the old room")
		if err := logroom.DeleteRoom(ctx, c, cfg.Base, cfg.Room); err != nil {
			return res, fmt.Errorf("replica: reseed: delete the old room: %w", err)
		}
	}
	if rv == 0 {
		// ZooKeeper lost the room (or its meta): the survivors' markers
		// (or the restore's record) keep the version the state was
		// written under.
		if recorded == 0 && seed.Restored {
			return res, fmt.Errorf("%w: %s was built by a restore that could not tell the room version the state was written under (no archived channel of it): give the room version (--room-version)",
				ErrReseedRefused, seed.Dir)
		}
		rv = max(recorded, 1)
	} else if cfg.RoomVersion == 0 {
		rv = max(rv, recorded)
	}
	res.RoomVersion = rv
	if epoch >= 1<<62 {
		return res, fmt.Errorf("%w: epoch %d is too close to the end of the epoch space", ErrReseedRefused, epoch)
	}
	res.Epoch = epoch + 1
	if cfg.DryRun {
		return dryRunResult(survivors, res, start), nil
	}
	cfg.step("creating the room at index %d, epoch %d", seed.Position.Index, res.Epoch)
	res.Czxid, err = logroom.SeedRoom(ctx, c, cfg.Base, cfg.Room, logroom.Seed{Index: seed.Position.Index, Epoch: res.Epoch, RoomVersion: rv, Owner: "reseed"})
	if err != nil {
		return res, fmt.Errorf("replica: reseed: %w", err)
	}
	seeded, err := logroom.ReadRoomInfo(ctx, c, cfg.Base, cfg.Room)
	if err != nil {
		return res, fmt.Errorf("replica: reseed: read the seeded room: %w", err)
	}
	if seeded.Czxid != res.Czxid {
		return res, fmt.Errorf("%w: room %q was replaced right after it was seeded (created at zxid 0x%x, now 0x%x): another re-seed ran at once?",
			ErrReseedRefused, cfg.Room, res.Czxid, seeded.Czxid)
	}
	res.EpochZnode = seeded.EpochZnode
	rec := recordFor(seed.MarkerCzxid, seed.MarkerEpochZnode, seed.Position, seed.Dir, res.Epoch)
	p := logroom.RoomPath(cfg.Base, cfg.Room, reseedZ)
	err = c.Retry(ctx, func() error {
		_, e := c.Conn().Create(p, encode(rec), 0, c.ACL())
		if errors.Is(e, zk.ErrNodeExists) {
			return nil
		}
		return e
	})
	if err != nil {
		return res, fmt.Errorf("replica: reseed: record %s: %w", p, err)
	}
	log.Warn("room re-seeded", "room", cfg.Room, "index", seed.Position.Index, "from", seed.Dir, "epoch", res.Epoch, "czxid", fmt.Sprintf("0x%x", res.Czxid))
	return finishReseed(cfg, survivors, seed, res, start)
}

// dryRunResult is res of a dry run: the survivors as found, nothing written.
func dryRunResult(survivors []*survivorStore, res ReseedResult, start time.Time) ReseedResult {
	for _, s := range survivors {
		res.Survivors = append(res.Survivors, s.Survivor)
	}
	res.Took = time.Since(start)
	return res
}

// finishReseed rewrites the markers of the survivors that rejoin.
func finishReseed(cfg ReseedConfig, survivors []*survivorStore, seed *survivorStore, res ReseedResult, start time.Time) (ReseedResult, error) {
	cfg.step("rewriting the survivors' markers")
	var errs []error
	for _, s := range survivors {
		s.st.Close()
		s.st = nil
		if s.Role == "left out" {
			continue
		}
		m := dirMarker{Base: cfg.Base, Room: cfg.Room, RoomCzxid: res.Czxid, EpochZnode: res.EpochZnode, RoomVersion: res.RoomVersion}
		if err := writeMarker(s.Dir, m); err != nil {
			errs = append(errs, err)
		}
	}
	for _, s := range survivors {
		res.Survivors = append(res.Survivors, s.Survivor)
	}
	res.Took = time.Since(start)
	return res, errors.Join(errs...)
}

// openSurvivors opens each data dir's store read-only and reads its
// position and marker.
func openSurvivors(cfg ReseedConfig) ([]*survivorStore, error) {
	var out []*survivorStore
	for _, dir := range cfg.DataDirs {
		s := &survivorStore{Survivor: Survivor{Dir: dir}}
		if err := checkDiverged(dir); err != nil {
			return out, fmt.Errorf("%w: %s: %w (leave it out)", ErrReseedRefused, dir, err)
		}
		b, err := os.ReadFile(filepath.Join(dir, markerName))
		switch {
		case errors.Is(err, os.ErrNotExist):
			// A data dir a restore built: its record keeps the room
			// version the restored state was written under.
			ri, err := archive.ReadRestoreInfo(dir)
			if err != nil {
				return out, fmt.Errorf("%w: %s: %w", ErrReseedRefused, dir, err)
			}
			if ri != nil {
				// The record's room may differ: a restore may seed a new
				// room (a point-in-time copy beside the one in service).
				s.Restored, s.MarkerRoomVersion, s.restoredIndex = true, ri.RoomVersion, ri.Index
			}
		case err != nil:
			return out, fmt.Errorf("replica: reseed: %w", err)
		default:
			var m dirMarker
			if err := json.Unmarshal(b, &m); err != nil {
				return out, fmt.Errorf("%w: %s: malformed %s: %v", ErrReseedRefused, dir, markerName, err)
			}
			if m.Base != cfg.Base || m.Room != cfg.Room {
				return out, fmt.Errorf("%w: %s holds the state of room %s/%s, not %s/%s", ErrReseedRefused, dir, m.Base, m.Room, cfg.Base, cfg.Room)
			}
			s.MarkerCzxid, s.MarkerEpochZnode, s.MarkerRoomVersion = m.RoomCzxid, m.EpochZnode, m.RoomVersion
		}
		st, err := store.Open(filepath.Join(dir, "store"), &store.Options{ReadOnly: true})
		if err != nil {
			return out, fmt.Errorf("%w: %s: open its store (is a member still running on it?): %w", ErrReseedRefused, dir, err)
		}
		s.st = st
		s.Position = st.Position()
		out = append(out, s)
		if s.Restored && s.Position.Index != s.restoredIndex {
			return out, fmt.Errorf("%w: %s: its restore record (%s) says index %d, its store holds %d (a stale or copied record)",
				ErrReseedRefused, dir, archive.RestoreInfoName, s.restoredIndex, s.Position.Index)
		}
	}
	return out, nil
}

// chooseSeed picks the seed and classifies every other survivor against
// it.
func chooseSeed(cfg ReseedConfig, survivors []*survivorStore) (*survivorStore, error) {
	var seed *survivorStore
	if cfg.Trust != "" {
		for _, s := range survivors {
			if filepath.Clean(s.Dir) == filepath.Clean(cfg.Trust) {
				seed = s
			}
		}
		if seed == nil {
			return nil, fmt.Errorf("%w: the trusted data dir %s is not among the survivors", ErrReseedRefused, cfg.Trust)
		}
	} else {
		sorted := slices.Clone(survivors)
		slices.SortStableFunc(sorted, func(a, b *survivorStore) int {
			if a.Position.Epoch != b.Position.Epoch {
				return compareU(b.Position.Epoch, a.Position.Epoch)
			}
			return compareU(b.Position.Index, a.Position.Index)
		})
		seed = sorted[0]
		if cfg.seedLowest {
			seed = sorted[len(sorted)-1]
		}
	}
	seed.Role = "seed"
	var problems []error
	for _, s := range survivors {
		if s == seed {
			continue
		}
		if err := comparePrefix(seed, s); err != nil && !cfg.seedLowest {
			if cfg.Trust == "" {
				problems = append(problems, err)
			}
			s.Role, s.Reason = "left out", err.Error()
			continue
		}
		if s.Position.Index == seed.Position.Index {
			s.Role = "adopted"
		} else {
			s.Role = "bootstrap"
		}
	}
	if len(problems) > 0 {
		return nil, fmt.Errorf("%w: the survivors do not share one history (name the one to trust to seed from it; the others are then left out): %w",
			ErrReseedRefused, errors.Join(problems...))
	}
	return seed, nil
}

func compareU(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// comparePrefix: s's history must be a prefix of seed's (or the other
// way round, which only a trusted seed behind it allows... and then s is
// ahead of what the room continues from: refused).
func comparePrefix(seed, s *survivorStore) error {
	sp := s.Position
	if sp.Index > seed.Position.Index {
		return fmt.Errorf("%s applied index %d (epoch %d), past the seed %s at %d (epoch %d): seeding from %s would lose its entries",
			s.Dir, sp.Index, sp.Epoch, seed.Dir, seed.Position.Index, seed.Position.Epoch, seed.Dir)
	}
	if sp.Index == 0 {
		return nil // empty: any history extends it
	}
	at, ok, err := seed.st.PointAt(sp.Index)
	if err != nil {
		return fmt.Errorf("%s: %w", seed.Dir, err)
	}
	if !ok {
		return fmt.Errorf("%s is at index %d, which %s (at %d) keeps no history record for (more than %d entries behind, or not a batch end): they cannot be compared",
			s.Dir, sp.Index, seed.Dir, seed.Position.Index, store.HistoryWindow)
	}
	if sp.Batch == (store.BatchRef{}) || at.Batch == (store.BatchRef{}) {
		return fmt.Errorf("%s at index %d or %s records no batch identity there (state written by a release before batch identities): they cannot be compared",
			s.Dir, sp.Index, seed.Dir)
	}
	if at.Epoch != sp.Epoch || at.Batch != sp.Batch {
		return fmt.Errorf("at index %d %s applied batch %+v of epoch %d, %s batch %+v of epoch %d: they disagree",
			sp.Index, s.Dir, sp.Batch, sp.Epoch, seed.Dir, at.Batch, at.Epoch)
	}
	if at.Hash.Base == sp.Hash.Base && at.Hash != sp.Hash {
		return fmt.Errorf("at index %d %s's running state hash is %s, %s's %s: same entries, different state (an Applier that is not deterministic?): they disagree",
			sp.Index, s.Dir, sp.Hash, seed.Dir, at.Hash)
	}
	return nil
}

type oldRoomFacts struct {
	what  string        // appended to ReseedResult.Previous
	epoch uint64        // the highest epoch it records
	done  *reseedRecord // the room is this seed's re-seed already
}

// oldRoom inspects the room ZooKeeper still has under the name before it
// is deleted: it refuses while it has live members or still holds the
// seed's position, and reads the epochs it records.
func oldRoom(ctx context.Context, c *logroom.Client, cfg ReseedConfig, info logroom.RoomInfo, seed *survivorStore, log *slog.Logger) (oldRoomFacts, error) {
	var f oldRoomFacts
	root := logroom.RoomPath(cfg.Base, cfg.Room)
	// A re-seed from this seed created the room already (a rerun after an
	// interruption; the seed's marker may have been rewritten already, or
	// not): only the markers are left to write.
	if rec, ok, err := readReseed(ctx, c, root+"/"+reseedZ); err == nil && ok && samePoint(rec.point(), seed.Position) &&
		(seed.MarkerCzxid == rec.Prev || seed.MarkerCzxid == info.Czxid) {
		f.done = &rec
		return f, nil
	}
	if err := waitNoLiveNodes(ctx, c, root, cfg, log); err != nil {
		return f, err
	}
	if ep, err := logroom.ReadEpoch(ctx, c, cfg.Base, cfg.Room); err == nil {
		f.epoch = ep.Epoch
	}
	l, err := logroom.ListChannels(ctx, c, cfg.Base, cfg.Room)
	if err == nil {
		for _, n := range l.Nums {
			if ch, err := logroom.ReadChannel(ctx, c, cfg.Base, cfg.Room, n); err == nil {
				f.epoch = max(f.epoch, ch.Epoch)
			}
		}
	}
	room, err := logroom.OpenRoom(ctx, c, cfg.Room, logroom.RoomOptions{Base: cfg.Base, NoCreate: true, Inspect: true})
	if err != nil {
		f.what = fmt.Sprintf(" (unreadable: %v)", err)
		return f, nil
	}
	end, cerr := room.CommittedIndex(ctx, 0)
	if info.Czxid == seed.MarkerCzxid && (seed.MarkerEpochZnode == "" || seed.MarkerEpochZnode == info.EpochZnode) {
		id := logroom.BatchID{Epoch: seed.Position.Epoch, First: seed.Position.Batch.First, Count: int(seed.Position.Batch.Count), CRC: seed.Position.Batch.CRC}
		merr := room.MatchLog(ctx, id, seed.Position.Index)
		// The log reaches the seed contiguously and holds its batch.
		if merr == nil && cerr == nil && end >= seed.Position.Index && !cfg.Force && info.Lost != "" {
			return f, fmt.Errorf("%w: room %q still holds the seed's position (index %d, batch %v), but a member marked it lost: %s; "+
				"add the data dir of the member that found the loss (it applied more than the log holds), or pass Force to re-seed from these survivors",
				ErrReseedRefused, cfg.Room, seed.Position.Index, id, info.Lost)
		}
		if merr == nil && cerr == nil && end >= seed.Position.Index && !cfg.Force {
			return f, fmt.Errorf("%w: room %q (the survivors' incarnation, zxid 0x%x) still holds the seed's position (index %d, batch %v): ZooKeeper lost nothing the seed applied; start the members (or pass Force)",
				ErrReseedRefused, cfg.Room, info.Czxid, seed.Position.Index, id)
		}
		if cerr == nil && end > seed.Position.Index && !cfg.Force {
			// Written after the loss (or by a member not given): entries
			// past the seed that no survivor holds would be deleted.
			return f, fmt.Errorf("%w: room %q's log holds entries %d..%d past the seed's index %d that no given survivor applied (written after ZooKeeper lost data, or applied by a member whose data dir is not among the survivors): "+
				"add that member's data dir, or pass Force to discard them", ErrReseedRefused, cfg.Room, seed.Position.Index+1, end, seed.Position.Index)
		}
		f.what = fmt.Sprintf(", its log ends at %d (%v)", end, merr)
		return f, nil
	}
	// Another incarnation: its entries would be lost, unless it is an
	// earlier incarnation the seed descends from (ZooKeeper restored from
	// a copy taken before an earlier re-seed): the seed's history then
	// holds the batch the old log ends with, at its index.
	if cerr == nil && len(l.Nums) > 0 {
		oldest, err := logroom.ReadChannel(ctx, c, cfg.Base, cfg.Room, l.Nums[0])
		if err == nil && end+1 > oldest.FirstIndex && !cfg.Force {
			held, why := seedHolds(ctx, room, seed, end)
			if !held {
				return f, fmt.Errorf("%w: room %q is another incarnation (zxid 0x%x; the survivors' is 0x%x) whose log holds entries %d..%d (%s): re-seeding would delete them (pass Force if they are to be discarded)",
					ErrReseedRefused, cfg.Room, info.Czxid, seed.MarkerCzxid, oldest.FirstIndex, end, why)
			}
			f.what = fmt.Sprintf(", an earlier incarnation whose log (%d..%d) the seed holds", oldest.FirstIndex, end)
			return f, nil
		}
	}
	f.what = fmt.Sprintf(", another incarnation (its log ends at %d)", end)
	return f, nil
}

// seedHolds reports whether the seed applied the log of room (another
// incarnation) up to its committed end: the seed's history records a
// batch ending at end, and the room's log holds that batch there (one
// batch compared, as survivors are compared with the seed). why says
// what did not match.
func seedHolds(ctx context.Context, room *logroom.Room, seed *survivorStore, end uint64) (bool, string) {
	if end == 0 || end > seed.Position.Index {
		return false, fmt.Sprintf("its end %d is not within the seed's %d entries", end, seed.Position.Index)
	}
	at, ok, err := seed.st.PointAt(end)
	switch {
	case err != nil:
		return false, err.Error()
	case !ok || at.Batch == (store.BatchRef{}):
		return false, fmt.Sprintf("the seed keeps no batch identity at index %d", end)
	}
	id := logroom.BatchID{Epoch: at.Epoch, First: at.Batch.First, Count: int(at.Batch.Count), CRC: at.Batch.CRC}
	if err := room.MatchLog(ctx, id, end); err != nil {
		return false, fmt.Sprintf("not the seed's history: %v", err)
	}
	return true, ""
}

// waitNoLiveNodes waits (up to d) until no ephemeral node is left under
// the room's members/ and election/ (sessions of members that died with
// ZooKeeper's data expire after their timeout), and refuses naming those
// that stay.
func waitNoLiveNodes(ctx context.Context, c *logroom.Client, root string, cfg ReseedConfig, log *slog.Logger) error {
	d := cfg.MembersGone
	deadline := time.Now().Add(d)
	for {
		var live []string
		for _, dir := range []string{membersDir, electionDir} {
			p := root + "/" + dir
			kids, err := zkx.Children(ctx, c, p)
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return fmt.Errorf("replica: reseed: list %s: %w", p, err)
			}
			for _, k := range kids {
				_, st, err := zkx.Get(ctx, c, p+"/"+k)
				if err == nil && st.EphemeralOwner != 0 {
					live = append(live, fmt.Sprintf("%s/%s (session 0x%x)", dir, k, st.EphemeralOwner))
				}
			}
		}
		if len(live) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: the room still has live nodes after %v: %v: stop every member of the room first", ErrReseedRefused, d, live)
		}
		log.Info("waiting for the old room's sessions to expire", "live", live)
		cfg.step("waiting up to %v for %d live node(s) of the old room to go (sessions of members that died expire): %s",
			d, len(live), strings.Join(live, ", "))
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// writeMarker writes DataDir's marker atomically (tmp, fsync, rename,
// directory fsync).
func writeMarker(dir string, m dirMarker) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	path := filepath.Join(dir, markerName)
	tmp := path + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("replica: write %s: %w", tmp, err)
	}
	_, err = f.Write(b)
	err = errors.Join(err, f.Sync(), f.Close())
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err == nil {
		err = fsyncDir(dir)
	}
	if err != nil {
		return fmt.Errorf("replica: write %s: %w", path, err)
	}
	return nil
}

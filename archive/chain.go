package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/roomlog/roomlog/logroom"
)

// Incarnation is what the archive records of how one room incarnation
// began: the incarnation it continues, if any. A re-seed (package
// replica, <room>/reseed) creates an incarnation whose log continues a
// predecessor's history at PrevIndex + 1; the records of the archived
// incarnations form the re-seed chain, by which Restore picks the
// incarnation in service when none is named (czxids cannot order them).
type Incarnation struct {
	Origin Origin
	// Reseeded is when a re-seed created Origin (zero: a room OpenRoom
	// created, which begins a chain and continues nothing).
	Reseeded time.Time
	// Prev is the incarnation Origin continues (set only with Reseeded),
	// from its index PrevIndex (the seed's applied index). Prev.RoomCzxid
	// 0: the re-seed's seed named no incarnation (a data dir roomlog
	// restore built): the predecessor is unknown. Prev.Fence "": the
	// seed named the czxid only (a data dir of an earlier release, whose
	// marker recorded no epoch znode); the predecessor is the only other
	// archived incarnation of that czxid, if there is one.
	Prev      Origin
	PrevIndex uint64
}

// check refuses a record that cannot be stored.
func (inc Incarnation) check() error {
	if err := inc.Origin.validate(); err != nil {
		return err
	}
	switch {
	case inc.Reseeded.IsZero() && (inc.Prev != Origin{} || inc.PrevIndex != 0):
		return fmt.Errorf("archive: incarnation %s: a predecessor (%s, index %d) without a re-seed time", inc.Origin.ID(), inc.Prev.ID(), inc.PrevIndex)
	case inc.Reseeded.IsZero() && inc.Origin.Fence != logroom.EpochZnode:
		return fmt.Errorf("archive: incarnation %s: a re-seeded room's epoch znode without a re-seed time", inc.Origin.ID())
	case !inc.Reseeded.IsZero() && inc.Origin.Fence == logroom.EpochZnode:
		return fmt.Errorf("archive: incarnation %s: re-seeded, but its epoch znode is %q (a re-seed draws a new name)", inc.Origin.ID(), logroom.EpochZnode)
	case inc.Prev.RoomCzxid < 0 || (inc.Prev.RoomCzxid == 0 && (inc.Prev.Fence != "" || inc.PrevIndex != 0)):
		return fmt.Errorf("archive: incarnation %s: predecessor %s at index %d", inc.Origin.ID(), inc.Prev.ID(), inc.PrevIndex)
	case inc.Prev.Fence != "" && !logroom.ValidEpochZnode(inc.Prev.Fence):
		return fmt.Errorf("archive: incarnation %s: predecessor's epoch znode name %q", inc.Origin.ID(), inc.Prev.Fence)
	case inc.Prev.Room != "" && inc.Prev.Room != inc.Origin.Room:
		return fmt.Errorf("archive: incarnation %s of room %q: predecessor of room %q", inc.Origin.ID(), inc.Origin.Room, inc.Prev.Room)
	case inc.Prev.RoomCzxid == inc.Origin.RoomCzxid && inc.Prev.Fence == inc.Origin.Fence:
		return fmt.Errorf("archive: incarnation %s continues itself", inc.Origin.ID())
	}
	return nil
}

// String says how the incarnation began.
func (inc Incarnation) String() string {
	switch {
	case inc.Reseeded.IsZero():
		return "created as a new room (it continues no incarnation)"
	case inc.Prev.RoomCzxid == 0:
		return fmt.Sprintf("re-seeded %s from a data dir that named no incarnation", inc.Reseeded.UTC().Format(time.RFC3339))
	case inc.Prev.Fence == "":
		return fmt.Sprintf("re-seeded %s, continuing 0x%x (its epoch znode not recorded) from index %d",
			inc.Reseeded.UTC().Format(time.RFC3339), inc.Prev.RoomCzxid, inc.PrevIndex)
	}
	return fmt.Sprintf("re-seeded %s, continuing %s from index %d", inc.Reseeded.UTC().Format(time.RFC3339), inc.Prev.ID(), inc.PrevIndex)
}

// incName is an incarnation's record in its origin directory.
const incName = "roomlog-incarnation.json"

// incRecord is incName's content, self-checksummed (SHA-256 of the compact
// JSON with Checksum "").
type incRecord struct {
	Format    int
	Room      string
	RoomCzxid int64
	Fence     string `json:",omitempty"`
	// Reseeded: unix ms (0: created by OpenRoom).
	Reseeded  int64  `json:",omitempty"`
	PrevCzxid int64  `json:",omitempty"`
	PrevFence string `json:",omitempty"`
	PrevIndex uint64 `json:",omitempty"`
	Checksum  string
}

const incFormat = 1

func (r incRecord) sum() string {
	r.Checksum = ""
	b, _ := json.Marshal(r) // strings and integers: never fails
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

func recordOf(inc Incarnation) incRecord {
	r := incRecord{Format: incFormat, Room: inc.Origin.Room, RoomCzxid: inc.Origin.RoomCzxid, Fence: fenceField(inc.Origin.Fence),
		PrevCzxid: inc.Prev.RoomCzxid, PrevFence: inc.Prev.Fence, PrevIndex: inc.PrevIndex}
	if !inc.Reseeded.IsZero() {
		r.Reseeded = inc.Reseeded.UnixMilli()
	}
	r.Checksum = r.sum()
	return r
}

func (r incRecord) incarnation() Incarnation {
	inc := Incarnation{Origin: Origin{Room: r.Room, RoomCzxid: r.RoomCzxid, Fence: fenceOf(r.Fence)}, PrevIndex: r.PrevIndex}
	if r.Reseeded != 0 {
		inc.Reseeded = time.UnixMilli(r.Reseeded).UTC()
	}
	if r.PrevCzxid != 0 {
		inc.Prev = Origin{Room: r.Room, RoomCzxid: r.PrevCzxid, Fence: r.PrevFence}
	}
	return inc
}

// readIncRecord reads and checks the record at p for origin o; ok false
// when there is none.
func readIncRecord(p string, o Origin) (Incarnation, bool, error) {
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Incarnation{}, false, nil
	}
	if err != nil {
		return Incarnation{}, false, fmt.Errorf("archive: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 64<<10))
	if err != nil {
		return Incarnation{}, false, fmt.Errorf("archive: read %s: %w", p, err)
	}
	var r incRecord
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		return Incarnation{}, false, fmt.Errorf("%w: %s: %v", ErrCorrupt, p, err)
	}
	if r.Format != incFormat {
		return Incarnation{}, false, fmt.Errorf("%w: %s: format %d, this binary reads %d", ErrCorrupt, p, r.Format, incFormat)
	}
	if s := r.sum(); s != r.Checksum {
		return Incarnation{}, false, fmt.Errorf("%w: %s: checksum %.16s does not match its content (%.16s)", ErrCorrupt, p, r.Checksum, s)
	}
	if !validFenceField(r.Fence) {
		return Incarnation{}, false, fmt.Errorf("%w: %s: epoch znode name %q", ErrCorrupt, p, r.Fence)
	}
	inc := r.incarnation()
	if err := inc.check(); err != nil {
		return Incarnation{}, false, fmt.Errorf("%w: %s: %v", ErrCorrupt, p, err)
	}
	if inc.Origin != o {
		return Incarnation{}, false, fmt.Errorf("%w: %s records %v, stored under %v", ErrForeign, p, inc.Origin, o)
	}
	return inc, true, nil
}

// PutIncarnation implements Archive.
func (d *Dir) PutIncarnation(ctx context.Context, inc Incarnation) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if inc.Prev.RoomCzxid != 0 && inc.Prev.Room == "" {
		inc.Prev.Room = inc.Origin.Room
	}
	if err := inc.check(); err != nil {
		return err
	}
	od, err := d.originDir(inc.Origin)
	if err != nil {
		return err
	}
	p := filepath.Join(od, incName)
	rec := recordOf(inc)
	same := func() (bool, error) {
		have, ok, err := readIncRecord(p, inc.Origin)
		if errors.Is(err, ErrCorrupt) || errors.Is(err, ErrForeign) {
			return false, moveAside(p, err)
		}
		if err != nil || !ok {
			return false, err
		}
		if recordOf(have) == rec {
			return true, nil
		}
		return false, fmt.Errorf("%w: %s records incarnation %s as %s; put: %s", ErrConflict, p, inc.Origin.ID(), have, inc)
	}
	if ok, err := same(); ok || err != nil {
		return err
	}
	b, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	if err := writeAtomic(p, append(b, '\n')); err != nil {
		if errors.Is(err, fs.ErrExist) {
			if ok, err := same(); ok || err != nil {
				return err
			}
		}
		return err
	}
	return nil
}

// ReadIncarnation implements Archive.
func (d *Dir) ReadIncarnation(ctx context.Context, o Origin) (Incarnation, bool, error) {
	if err := ctx.Err(); err != nil {
		return Incarnation{}, false, err
	}
	od, err := d.originDir(o)
	if err != nil {
		return Incarnation{}, false, err
	}
	return readIncRecord(filepath.Join(od, incName), o)
}

// chainLink is what the archive knows of one archived incarnation's place
// in the re-seed chain.
type chainLink struct {
	inc  Incarnation
	rec  bool   // a record was read
	why  string // what is known, for listings
	prev int    // index of the archived predecessor in the origins (-1: none archived or unknown)
}

// readChain reads the record of each archived incarnation and links each
// to its archived predecessor.
func readChain(ctx context.Context, a Archive, all []Origin) ([]chainLink, error) {
	links := make([]chainLink, len(all))
	for i, o := range all {
		l := &links[i]
		l.prev = -1
		inc, ok, err := a.ReadIncarnation(ctx, o)
		switch {
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case err != nil:
			l.why = fmt.Sprintf("its record is unusable (%v)", err)
			continue
		case !ok && o.Fence == logroom.EpochZnode:
			// Created by OpenRoom (only a re-seed names the epoch znode
			// otherwise): it begins its chain.
			l.why = "created as a new room (epoch znode \"epoch\")"
			continue
		case !ok:
			l.why = "no record of the re-seed that created it"
			continue
		}
		l.inc, l.rec, l.why = inc, true, inc.String()
		if inc.Prev.RoomCzxid == 0 {
			continue // created by OpenRoom, or an unknown predecessor
		}
		var cands []int
		for j, p := range all {
			if j != i && p.RoomCzxid == inc.Prev.RoomCzxid && (inc.Prev.Fence == "" || p.Fence == inc.Prev.Fence) {
				cands = append(cands, j)
			}
		}
		switch len(cands) {
		case 0:
			l.why += " (nothing of it archived)"
		case 1:
			l.prev = cands[0]
		default:
			ids := make([]string, len(cands))
			for k, j := range cands {
				ids[k] = all[j].ID()
			}
			l.why += fmt.Sprintf(" (which of %s is not recorded)", strings.Join(ids, ", "))
		}
	}
	return links, nil
}

// chainHead returns the index of the incarnation in service by the re-seed
// chain: the archived incarnations must form one chain, each but the
// first continuing the one before (how the first began does not matter),
// and the last is in service. Otherwise ok is false and why says what
// the chain cannot tell.
func chainHead(all []Origin, links []chainLink) (int, bool, string) {
	continued := make([]bool, len(all))
	for _, l := range links {
		if l.prev >= 0 {
			if continued[l.prev] {
				return 0, false, fmt.Sprintf("two incarnations continue %s (re-seeded twice from it)", all[l.prev].ID())
			}
			continued[l.prev] = true
		}
	}
	head := -1
	for i := range all {
		if !continued[i] {
			if head >= 0 {
				return 0, false, fmt.Sprintf("the re-seed chain does not connect %s and %s", all[head].ID(), all[i].ID())
			}
			head = i
		}
	}
	if head < 0 {
		return 0, false, "the re-seed records form a cycle"
	}
	n := 1
	for i := head; links[i].prev >= 0 && n <= len(all); n++ {
		i = links[i].prev
	}
	if n != len(all) {
		return 0, false, "the re-seed records form a cycle"
	}
	return head, true, ""
}

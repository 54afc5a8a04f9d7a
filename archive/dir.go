package archive

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/logroom"
)

// Dir is an Archive in a local (or mounted) directory; doc.go gives its
// layout. It is safe for concurrent use, also by several processes
// (members of one room sharing the directory): every item appears by one
// rename, and a put that loses a race finds the other's item and compares.
type Dir struct {
	root string
}

var _ Archive = (*Dir)(nil)

// OpenDir returns the archive at root, creating the directory if missing.
func OpenDir(root string) (*Dir, error) {
	if root == "" {
		return nil, errors.New("archive: empty directory name")
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("archive: %w", err)
	}
	return &Dir{root: root}, nil
}

// Root is the archive's directory.
func (d *Dir) Root() string { return d.root }

// Layout names (doc.go).
const (
	itemName      = "roomlog-archive-item.json" // a checkpoint item's own record
	chanPrefix    = "ch-"
	ckptPrefix    = "ckpt-"
	tmpPrefix     = ".tmp-"
	corruptPrefix = ".corrupt-"
	ckptFormat    = 1
	maxItemBytes  = 64 << 20
)

// roomDir is the directory of room's items.
func (d *Dir) roomDir(room string) (string, error) {
	esc := url.PathEscape(room)
	if room == "" || esc == "." || esc == ".." || strings.HasPrefix(esc, ".") {
		return "", fmt.Errorf("archive: room name %q cannot name a directory", room)
	}
	return filepath.Join(d.root, esc), nil
}

// originDir is the directory of o's items: <czxid %016x> for an
// incarnation whose epoch znode is "epoch" (v0.1.0's layout, unchanged),
// <czxid %016x>-<epoch znode> otherwise.
func (d *Dir) originDir(o Origin) (string, error) {
	if err := o.validate(); err != nil {
		return "", err
	}
	rd, err := d.roomDir(o.Room)
	if err != nil {
		return "", err
	}
	return filepath.Join(rd, originDirName(o)), nil
}

func originDirName(o Origin) string {
	if o.Fence == logroom.EpochZnode {
		return fmt.Sprintf("%016x", o.RoomCzxid)
	}
	return fmt.Sprintf("%016x-%s", o.RoomCzxid, o.Fence)
}

// parseOriginDir parses an origin directory's name (originDirName).
func parseOriginDir(room, name string) (Origin, bool) {
	if len(name) < 16 {
		return Origin{}, false
	}
	cz, err := strconv.ParseUint(name[:16], 16, 63)
	if err != nil || cz == 0 {
		return Origin{}, false
	}
	o := Origin{Room: room, RoomCzxid: int64(cz), Fence: logroom.EpochZnode}
	if rest := name[16:]; rest != "" {
		f, ok := strings.CutPrefix(rest, "-")
		if !ok || f == logroom.EpochZnode || !logroom.ValidEpochZnode(f) {
			return Origin{}, false
		}
		o.Fence = f
	}
	return o, true
}

func chanName(first, last uint64) string {
	return fmt.Sprintf("%s%020d-%020d", chanPrefix, first, last)
}
func ckptName(index uint64) string { return fmt.Sprintf("%s%020d", ckptPrefix, index) }

// parseItemName parses an item's file or directory name.
func parseItemName(name string) (Kind, uint64, uint64, bool) {
	if s, ok := strings.CutPrefix(name, chanPrefix); ok && len(s) == 41 && s[20] == '-' {
		f, err1 := strconv.ParseUint(s[:20], 10, 64)
		l, err2 := strconv.ParseUint(s[21:], 10, 64)
		if err1 == nil && err2 == nil && f > 0 && l >= f {
			return KindChannel, f, l, true
		}
	}
	if s, ok := strings.CutPrefix(name, ckptPrefix); ok && len(s) == 20 {
		if i, err := strconv.ParseUint(s, 10, 64); err == nil {
			return KindCheckpoint, i, i, true
		}
	}
	return 0, 0, 0, false
}

// itemPath is where an item of kind and range is stored.
func (d *Dir) itemPath(o Origin, kind Kind, first, last uint64) (string, error) {
	od, err := d.originDir(o)
	if err != nil {
		return "", err
	}
	if kind == KindCheckpoint {
		return filepath.Join(od, ckptName(last)), nil
	}
	return filepath.Join(od, chanName(first, last)), nil
}

// Lookup implements Archive.
func (d *Dir) Lookup(_ context.Context, o Origin, kind Kind, first, last uint64) (Item, bool, error) {
	p, err := d.itemPath(o, kind, first, last)
	if err != nil {
		return Item{}, false, err
	}
	_, err = os.Lstat(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Item{}, false, nil
	}
	if err != nil {
		return Item{}, false, fmt.Errorf("archive: %w", err)
	}
	return Item{Kind: kind, Origin: o, First: first, Last: last, Path: p}, true, nil
}

// List implements Archive.
func (d *Dir) List(ctx context.Context, room string) ([]Item, error) {
	rd, err := d.roomDir(room)
	if err != nil {
		return nil, err
	}
	origins, err := os.ReadDir(rd)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("archive: list %s: %w", rd, err)
	}
	var out []Item
	for _, oe := range origins {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		o, ok := parseOriginDir(room, oe.Name())
		if !ok || !oe.IsDir() {
			continue
		}
		od := filepath.Join(rd, oe.Name())
		ents, err := os.ReadDir(od)
		if err != nil {
			return nil, fmt.Errorf("archive: list %s: %w", od, err)
		}
		for _, e := range ents {
			kind, f, l, ok := parseItemName(e.Name())
			if !ok || (kind == KindCheckpoint) != e.IsDir() {
				continue
			}
			out = append(out, Item{Kind: kind, Origin: o, First: f, Last: l,
				Path: filepath.Join(od, e.Name())})
		}
	}
	sortItems(out)
	return out, nil
}

func sortItems(items []Item) {
	sort.Slice(items, func(i, j int) bool {
		a, b := items[i], items[j]
		if a.Origin.RoomCzxid != b.Origin.RoomCzxid {
			return a.Origin.RoomCzxid < b.Origin.RoomCzxid
		}
		if a.Origin.Fence != b.Origin.Fence {
			return a.Origin.Fence < b.Origin.Fence
		}
		if a.First != b.First {
			return a.First < b.First
		}
		return a.Kind < b.Kind
	})
}

// PutChannel implements Archive.
func (d *Dir) PutChannel(ctx context.Context, ch Channel) (Item, error) {
	if err := ctx.Err(); err != nil {
		return Item{}, err
	}
	if err := checkChannel(ch); err != nil {
		return Item{}, fmt.Errorf("archive: put: %w", err)
	}
	if ch.Last < ch.First {
		return Item{}, fmt.Errorf("archive: put channel %d: it holds no entry (first %d, last %d)", ch.Num, ch.First, ch.Last)
	}
	data, h, err := encodeChannel(ch)
	if err != nil {
		return Item{}, err
	}
	path, err := d.itemPath(ch.Origin, KindChannel, ch.First, ch.Last)
	if err != nil {
		return Item{}, err
	}
	it := Item{Kind: KindChannel, Origin: ch.Origin, First: ch.First, Last: ch.Last, Path: path}
	same := func() (bool, error) {
		old, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("archive: %w", err)
		}
		_, oh, err := decodeChannel(path, old)
		if errors.Is(err, ErrCorrupt) {
			return false, moveAside(path, err)
		}
		if err != nil {
			return false, err
		}
		if oh.Content != h.Content || oh.Room != h.Room || oh.RoomCzxid != h.RoomCzxid || oh.Fence != h.Fence {
			return false, fmt.Errorf("%w: %s holds channel %d (content %.16s), put channel %d (content %.16s)",
				ErrConflict, path, oh.Channel, oh.Content, h.Channel, h.Content)
		}
		return true, nil
	}
	if ok, err := same(); ok || err != nil {
		return it, err
	}
	if err := writeAtomic(path, data); err != nil {
		if errors.Is(err, fs.ErrExist) {
			// Another put won the race: compare with what it wrote.
			if ok, err := same(); ok || err != nil {
				return it, err
			}
		}
		return Item{}, err
	}
	return it, nil
}

// ReadChannel implements Archive.
func (d *Dir) ReadChannel(ctx context.Context, it Item) (Channel, error) {
	if err := ctx.Err(); err != nil {
		return Channel{}, err
	}
	if it.Kind != KindChannel {
		return Channel{}, fmt.Errorf("archive: read channel: %v is not a channel item", it)
	}
	data, err := os.ReadFile(it.Path)
	if errors.Is(err, fs.ErrNotExist) {
		return Channel{}, fmt.Errorf("%w: %s", ErrNotFound, it.Path)
	}
	if err != nil {
		return Channel{}, fmt.Errorf("archive: %w", err)
	}
	ch, _, err := decodeChannel(it.Path, data)
	if err != nil {
		return Channel{}, err
	}
	if ch.Origin != it.Origin {
		return Channel{}, fmt.Errorf("%w: %s records %v, stored under %v", ErrForeign, it.Path, ch.Origin, it.Origin)
	}
	if ch.First != it.First || ch.Last != it.Last {
		return Channel{}, fmt.Errorf("%w: %s holds %d..%d, its name says %d..%d", ErrCorrupt, it.Path, ch.First, ch.Last, it.First, it.Last)
	}
	return ch, nil
}

// ckptItem is a checkpoint item's own record (itemName): what it holds
// and the SHA-256 of every file, self-checksummed like a checkpoint
// manifest (compact JSON with Checksum "").
type ckptItem struct {
	Format    int
	Room      string
	RoomCzxid int64
	// Fence is the incarnation's epoch znode name, omitted for "epoch"
	// (so such records are v0.1.0's, byte for byte).
	Fence string `json:",omitempty"`
	Index uint64
	Epoch uint64
	// Created is the checkpoint manifest's creation time (the member's
	// clock).
	Created time.Time
	// Files are the manifest (checkpoint.ManifestName) and db/<name> for
	// each Pebble file, with their sizes and SHA-256.
	Files    []itemFile
	Checksum string
}

type itemFile struct {
	Name   string
	Size   int64
	SHA256 string
}

// origin is the incarnation the record names.
func (c ckptItem) origin() Origin {
	return Origin{Room: c.Room, RoomCzxid: c.RoomCzxid, Fence: fenceOf(c.Fence)}
}

// fenceField is how items record an epoch znode name: omitted ("") for
// "epoch", as v0.1.0 wrote them.
func fenceField(fence string) string {
	if fence == logroom.EpochZnode {
		return ""
	}
	return fence
}

// fenceOf is the epoch znode name an item's fence field records.
func fenceOf(field string) string {
	if field == "" {
		return logroom.EpochZnode
	}
	return field
}

// validFenceField reports whether an item's fence field may be read:
// omitted, or a re-seeded room's epoch znode name ("epoch" itself is
// never written).
func validFenceField(field string) bool {
	return field == "" || (field != logroom.EpochZnode && logroom.ValidEpochZnode(field))
}

func (c ckptItem) sum() string {
	c.Checksum = ""
	b, _ := json.Marshal(c) // strings, integers, a time: never fails
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// readCkptItem reads and checks the record of the checkpoint item at dir.
func readCkptItem(dir string) (ckptItem, error) {
	p := filepath.Join(dir, itemName)
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return ckptItem{}, fmt.Errorf("%w: %s: missing", ErrCorrupt, p)
	}
	if err != nil {
		return ckptItem{}, fmt.Errorf("archive: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxItemBytes+1))
	if err != nil {
		return ckptItem{}, fmt.Errorf("archive: read %s: %w", p, err)
	}
	var c ckptItem
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		return ckptItem{}, fmt.Errorf("%w: %s: %v", ErrCorrupt, p, err)
	}
	if c.Format != ckptFormat {
		return ckptItem{}, fmt.Errorf("%w: %s: format %d, this binary reads %d", ErrCorrupt, p, c.Format, ckptFormat)
	}
	if !validFenceField(c.Fence) {
		return ckptItem{}, fmt.Errorf("%w: %s: epoch znode name %q", ErrCorrupt, p, c.Fence)
	}
	if s := c.sum(); s != c.Checksum {
		return ckptItem{}, fmt.Errorf("%w: %s: checksum %.16s does not match its content (%.16s)", ErrCorrupt, p, c.Checksum, s)
	}
	for _, fl := range c.Files {
		if fl.Name != checkpoint.ManifestName && (!strings.HasPrefix(fl.Name, checkpoint.DBDir+"/") ||
			strings.Contains(fl.Name[len(checkpoint.DBDir)+1:], "/") || strings.Contains(fl.Name, "..")) {
			return ckptItem{}, fmt.Errorf("%w: %s: file name %q", ErrCorrupt, p, fl.Name)
		}
	}
	return c, nil
}

// PutCheckpoint implements Archive. The copy computes every file's SHA-256
// and CRC32C as it writes; a file whose CRC32C differs from the
// checkpoint manifest's fails the put (the source is corrupt, or changed
// under the copy), and nothing is left.
func (d *Dir) PutCheckpoint(ctx context.Context, origin Origin, src string) (Item, error) {
	mb, err := os.ReadFile(filepath.Join(src, checkpoint.ManifestName))
	if err != nil {
		return Item{}, fmt.Errorf("archive: put checkpoint %s: %w", src, err)
	}
	m, err := checkpoint.ParseManifest(mb)
	if err != nil {
		return Item{}, fmt.Errorf("archive: put checkpoint %s: %w", src, err)
	}
	if err := m.CheckOrigin(origin.Checkpoint()); err != nil {
		return Item{}, fmt.Errorf("archive: put checkpoint %s: %w: %w", src, ErrForeign, err)
	}
	path, err := d.itemPath(origin, KindCheckpoint, m.Index, m.Index)
	if err != nil {
		return Item{}, err
	}
	it := Item{Kind: KindCheckpoint, Origin: origin, First: m.Index, Last: m.Index, Path: path}
	msum := sha256.Sum256(mb)
	same := func() (bool, error) {
		if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		old, err := readCkptItem(path)
		if errors.Is(err, ErrCorrupt) {
			return false, moveAside(path, err)
		}
		if err != nil {
			return false, err
		}
		for _, f := range old.Files {
			if f.Name == checkpoint.ManifestName {
				if f.SHA256 == hex.EncodeToString(msum[:]) {
					return true, nil
				}
				break
			}
		}
		return false, fmt.Errorf("%w: %s holds another checkpoint at index %d (created %v; this one %v)",
			ErrConflict, path, old.Index, old.Created, m.Created)
	}
	if ok, err := same(); ok || err != nil {
		return it, err
	}
	od := filepath.Dir(path)
	if err := os.MkdirAll(od, 0o755); err != nil {
		return Item{}, fmt.Errorf("archive: %w", err)
	}
	tmp, err := os.MkdirTemp(od, tmpPrefix+"ckpt-")
	if err != nil {
		return Item{}, fmt.Errorf("archive: %w", err)
	}
	defer func() {
		if tmp != "" {
			_ = os.RemoveAll(tmp)
		}
	}()
	rec := ckptItem{Format: ckptFormat, Room: origin.Room, RoomCzxid: origin.RoomCzxid, Fence: fenceField(origin.Fence),
		Index: m.Index, Epoch: m.Epoch, Created: m.Created}
	if err := writeFileSync(filepath.Join(tmp, checkpoint.ManifestName), mb); err != nil {
		return Item{}, fmt.Errorf("archive: %w", err)
	}
	rec.Files = append(rec.Files, itemFile{Name: checkpoint.ManifestName, Size: int64(len(mb)), SHA256: hex.EncodeToString(msum[:])})
	if err := os.Mkdir(filepath.Join(tmp, checkpoint.DBDir), 0o755); err != nil {
		return Item{}, fmt.Errorf("archive: %w", err)
	}
	buf := make([]byte, 1<<20)
	prev := previousTables(od, m.Index)
	for _, f := range m.Files {
		s := filepath.Join(src, checkpoint.DBDir, f.Name)
		dst := filepath.Join(tmp, checkpoint.DBDir, f.Name)
		if p, ok := prev[f.Name]; ok && p.size == f.Size && p.crc == f.CRC32C {
			// The same immutable table, archived with an earlier checkpoint
			// of this origin: link it within the archive, after checking
			// its CRC32C (rot in the earlier item is never carried on).
			if err := os.Link(p.path, dst); err == nil {
				if crcFile(ctx, dst, buf) == f.CRC32C {
					rec.Files = append(rec.Files, itemFile{Name: checkpoint.DBDir + "/" + f.Name, Size: f.Size, SHA256: p.sha})
					continue
				}
				_ = os.Remove(dst)
			}
		}
		sum, err := copyVerified(ctx, s, dst, f, buf)
		if err != nil {
			return Item{}, err
		}
		rec.Files = append(rec.Files, itemFile{Name: checkpoint.DBDir + "/" + f.Name, Size: f.Size, SHA256: sum})
	}
	rec.Checksum = rec.sum()
	rb, err := json.MarshalIndent(rec, "", "  ")
	if err != nil {
		return Item{}, fmt.Errorf("archive: %w", err)
	}
	if err := writeFileSync(filepath.Join(tmp, itemName), append(rb, '\n')); err != nil {
		return Item{}, fmt.Errorf("archive: %w", err)
	}
	if err := errors.Join(syncDir(filepath.Join(tmp, checkpoint.DBDir)), syncDir(tmp)); err != nil {
		return Item{}, fmt.Errorf("archive: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		// Another put won the race (a non-empty directory is in the way).
		if ok, err2 := same(); ok || err2 != nil {
			return it, err2
		}
		return Item{}, fmt.Errorf("archive: %w", err)
	}
	tmp = ""
	if err := syncDir(od); err != nil {
		return Item{}, fmt.Errorf("archive: %w", err)
	}
	return it, nil
}

// crcFile is the CRC32C of the file at p (0 on any error: never a
// manifest's CRC of a non-empty table, so the caller copies instead).
func crcFile(ctx context.Context, p string, buf []byte) uint32 {
	f, err := os.Open(p)
	if err != nil {
		return 0
	}
	defer f.Close()
	var crc uint32
	for {
		if ctx.Err() != nil {
			return 0
		}
		n, err := f.Read(buf)
		crc = crc32.Update(crc, castagnoli, buf[:n])
		if err == io.EOF {
			return crc
		}
		if err != nil {
			return 0
		}
	}
}

// prevTable is a Pebble table of an archived checkpoint item.
type prevTable struct {
	path string
	size int64
	crc  uint32
	sha  string
}

// previousTables returns the .sst tables of the newest checkpoint item in
// od below index whose record and manifest read back: Pebble tables are
// immutable, so a table of the same name, size and CRC32C (its manifest's)
// is the same table, and a new item links it instead of copying it. A
// table that item shares already with the item before it (the same file)
// is left out: no file is shared by more than two items, so one damaged
// file takes at most two restore points. Any trouble (none, corrupt):
// nothing to link, everything is copied.
func previousTables(od string, index uint64) map[string]prevTable {
	below := checkpointDirsBelow(od, index)
	if len(below) == 0 {
		return nil
	}
	best := below[len(below)-1]
	rec, err := readCkptItem(best)
	if err != nil {
		return nil
	}
	mb, err := os.ReadFile(filepath.Join(best, checkpoint.ManifestName))
	if err != nil {
		return nil
	}
	m, err := checkpoint.ParseManifest(mb)
	if err != nil {
		return nil
	}
	sha := map[string]string{}
	for _, f := range rec.Files {
		sha[f.Name] = f.SHA256
	}
	out := map[string]prevTable{}
	for _, f := range m.Files {
		if s, ok := sha[checkpoint.DBDir+"/"+f.Name]; ok && strings.HasSuffix(f.Name, ".sst") {
			p := filepath.Join(best, checkpoint.DBDir, f.Name)
			if len(below) >= 2 && sameFile(p, filepath.Join(below[len(below)-2], checkpoint.DBDir, f.Name)) {
				continue // shared by two items already: copy
			}
			out[f.Name] = prevTable{path: p, size: f.Size, crc: f.CRC32C, sha: s}
		}
	}
	return out
}

// checkpointDirsBelow lists the checkpoint item directories in od whose
// index is below index, ascending.
func checkpointDirsBelow(od string, index uint64) []string {
	ents, err := os.ReadDir(od)
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents { // sorted by name: by index (zero-padded)
		if kind, _, i, ok := parseItemName(e.Name()); ok && kind == KindCheckpoint && i < index && e.IsDir() {
			out = append(out, filepath.Join(od, e.Name()))
		}
	}
	return out
}

// sameFile reports whether a and b are one file (a hard link).
func sameFile(a, b string) bool {
	fa, err1 := os.Lstat(a)
	fb, err2 := os.Lstat(b)
	return err1 == nil && err2 == nil && os.SameFile(fa, fb)
}

// sharedBy names the other checkpoint items of p's origin directory that
// hold p (a file of a checkpoint item, db/<name>) as the same file (hard
// linked): they are damaged with it. Empty when none.
func sharedBy(itemDir, name string) string {
	od := filepath.Dir(itemDir)
	var idx []string
	for _, d := range checkpointDirsBelow(od, ^uint64(0)) {
		if d == itemDir {
			continue
		}
		if sameFile(filepath.Join(itemDir, name), filepath.Join(d, name)) {
			_, _, i, _ := parseItemName(filepath.Base(d))
			idx = append(idx, fmt.Sprint(i))
		}
	}
	if len(idx) == 0 {
		return ""
	}
	return fmt.Sprintf(" (the same file, hard-linked, is in the checkpoint at index %s: damaged too)", strings.Join(idx, ", "))
}

// copyVerified copies src to dst (new), fsyncs it, and returns its hex
// SHA-256; the size and CRC32C must be the manifest's (f).
func copyVerified(ctx context.Context, src, dst string, f checkpoint.File, buf []byte) (string, error) {
	in, err := os.Open(src)
	if err != nil {
		return "", fmt.Errorf("archive: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return "", fmt.Errorf("archive: %w", err)
	}
	defer out.Close()
	h := sha256.New()
	var crc uint32
	var size int64
	for {
		if err := ctx.Err(); err != nil {
			return "", err
		}
		n, rerr := in.Read(buf)
		if n > 0 {
			size += int64(n)
			h.Write(buf[:n])
			crc = crc32.Update(crc, castagnoli, buf[:n])
			if _, err := out.Write(buf[:n]); err != nil {
				return "", fmt.Errorf("archive: %w", err)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return "", fmt.Errorf("archive: read %s: %w", src, rerr)
		}
	}
	if size != f.Size || crc != f.CRC32C {
		return "", fmt.Errorf("archive: copy %s: %d bytes crc32c %08x, its manifest says %d bytes crc32c %08x (%w)",
			src, size, crc, f.Size, f.CRC32C, checkpoint.ErrCorrupt)
	}
	if err := out.Sync(); err != nil {
		return "", fmt.Errorf("archive: fsync %s: %w", dst, err)
	}
	return hex.EncodeToString(h.Sum(nil)), out.Close()
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// OpenCheckpoint implements Archive: it checks the item's record, that the
// directory holds exactly its files, each of its size and SHA-256, and
// that the manifest records the item's origin and index. The directory
// returned is the item itself (release does nothing).
func (d *Dir) OpenCheckpoint(ctx context.Context, it Item) (string, func(), error) {
	if it.Kind != KindCheckpoint {
		return "", nil, fmt.Errorf("archive: open checkpoint: %v is not a checkpoint item", it)
	}
	if err := verifyCkptItem(ctx, it); err != nil {
		return "", nil, err
	}
	return it.Path, func() {}, nil
}

func verifyCkptItem(ctx context.Context, it Item) error {
	if _, err := os.Lstat(it.Path); errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s", ErrNotFound, it.Path)
	}
	rec, err := readCkptItem(it.Path)
	if err != nil {
		return err
	}
	if got := rec.origin(); got != it.Origin || rec.Index != it.Last {
		return fmt.Errorf("%w: %s records index %d of %v, stored as index %d of %v", ErrForeign, it.Path, rec.Index, got, it.Last, it.Origin)
	}
	want := map[string]itemFile{}
	for _, f := range rec.Files {
		want[f.Name] = f
	}
	// Exactly the recorded files (and the record itself).
	var found []string
	for _, dir := range []string{"", checkpoint.DBDir} {
		ents, err := os.ReadDir(filepath.Join(it.Path, dir))
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrCorrupt, filepath.Join(it.Path, dir), err)
		}
		for _, e := range ents {
			name := e.Name()
			if dir != "" {
				name = dir + "/" + name
			}
			if name == itemName || (dir == "" && name == checkpoint.DBDir && e.IsDir()) {
				continue
			}
			if _, ok := want[name]; !ok || !e.Type().IsRegular() {
				return fmt.Errorf("%w: %s: not in the item's record", ErrCorrupt, filepath.Join(it.Path, name))
			}
			found = append(found, name)
		}
	}
	if len(found) != len(want) {
		for name := range want {
			if _, err := os.Lstat(filepath.Join(it.Path, name)); err != nil {
				return fmt.Errorf("%w: %s: missing", ErrCorrupt, filepath.Join(it.Path, name))
			}
		}
	}
	buf := make([]byte, 1<<20)
	for _, f := range rec.Files {
		p := filepath.Join(it.Path, f.Name)
		size, sum, err := sha256File(ctx, p, buf)
		if err != nil {
			return err
		}
		if size != f.Size {
			return fmt.Errorf("%w: %s: %d bytes, the item records %d (truncated?)%s", ErrCorrupt, p, size, f.Size, sharedBy(it.Path, f.Name))
		}
		if sum != f.SHA256 {
			return fmt.Errorf("%w: %s: sha256 %.16s, the item records %.16s%s", ErrCorrupt, p, sum, f.SHA256, sharedBy(it.Path, f.Name))
		}
	}
	mb, err := os.ReadFile(filepath.Join(it.Path, checkpoint.ManifestName))
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	m, err := checkpoint.ParseManifest(mb)
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrCorrupt, it.Path, err)
	}
	if err := m.CheckOrigin(it.Origin.Checkpoint()); err != nil || m.Index != it.Last {
		return fmt.Errorf("%w: %s: its manifest is of index %d (%v): %v", ErrForeign, it.Path, m.Index, m.Origin(), err)
	}
	return nil
}

func sha256File(ctx context.Context, p string, buf []byte) (int64, string, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, "", fmt.Errorf("%w: %s: %v", ErrCorrupt, p, err)
	}
	defer f.Close()
	h := sha256.New()
	var size int64
	for {
		if err := ctx.Err(); err != nil {
			return 0, "", err
		}
		n, err := f.Read(buf)
		size += int64(n)
		h.Write(buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, "", fmt.Errorf("archive: read %s: %w", p, err)
		}
	}
	return size, hex.EncodeToString(h.Sum(nil)), nil
}

// writeAtomic writes data at path through a temp file in the same
// directory: write, fsync, link into place (failing with fs.ErrExist when
// path exists), fsync the directory.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	f, err := os.CreateTemp(dir, tmpPrefix+"item-")
	if err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err = errors.Join(err, f.Close()); err != nil {
		return fmt.Errorf("archive: write %s: %w", tmp, err)
	}
	// A hard link never replaces: two puts of one key cannot both win.
	if err := os.Link(tmp, path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return err
		}
		// No hard links on this filesystem: a rename (last writer wins;
		// both wrote the same key, compared above).
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("archive: %w", err)
		}
	}
	if err := syncDir(dir); err != nil {
		return fmt.Errorf("archive: %w", err)
	}
	return nil
}

// moveAside renames a corrupt item out of the listing (kept for
// inspection) so that a put can replace it.
func moveAside(path string, why error) error {
	aside := filepath.Join(filepath.Dir(path), fmt.Sprintf("%s%s-%d", corruptPrefix, filepath.Base(path), time.Now().UnixNano()))
	if err := os.Rename(path, aside); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("archive: move corrupt %s aside (%v): %w", path, why, err)
	}
	return syncDir(filepath.Dir(path))
}

func writeFileSync(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

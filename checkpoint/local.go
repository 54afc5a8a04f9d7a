package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/roomlog/roomlog/store"
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// copyBufSize is the buffer used to read, checksum and write files.
const copyBufSize = 1 << 20

// Info is a checkpoint directory and what its manifest says.
type Info struct {
	Path     string
	Manifest Manifest
	Bytes    int64 // total size of the files (Manifest.Bytes())
	// ReadBytes, set by Create, is what it read to checksum: the files not
	// shared with the previous checkpoint (see doc.go, Protocol 1).
	ReadBytes int64
	// Fetch, set by Fetch, says what was fetched, reused and skipped.
	Fetch FetchStats
}

func newInfo(path string, m Manifest) Info {
	return Info{Path: path, Manifest: m, Bytes: m.Bytes()}
}

// Create checkpoints s at its current applied index into
// root/ckpt-%020d (see doc.go for the protocol), recording origin (the
// room's name and its znode's czxid, which must be positive) in the
// manifest. If a valid checkpoint of that index and origin already exists
// it is returned as is; an invalid one, or one of another origin, is moved
// aside to root/.corrupt-ckpt-… and replaced.
func Create(ctx context.Context, s *store.Store, root string, origin Origin) (info Info, err error) {
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	if origin.RoomCzxid <= 0 {
		return Info{}, fmt.Errorf("checkpoint: create: origin %v has no room czxid", origin)
	}
	// Every disk operation of the store's disk is bounded by the store's
	// DiskStallTimeout (store.DiskOp), like the store's own.
	disk := func(op, path string, fn func() error) error {
		end := s.DiskOp(op, path)
		defer end()
		return fn()
	}
	var tmp string
	err = disk("mkdir", root, func() (err error) {
		if err = os.MkdirAll(root, 0o755); err == nil {
			tmp, err = os.MkdirTemp(root, tmpPrefix+"ckpt-")
		}
		return err
	})
	if err != nil {
		return Info{}, fmt.Errorf("checkpoint: create: %w", err)
	}
	defer func() {
		if tmp != "" {
			_ = disk("remove", tmp, func() error { return os.RemoveAll(tmp) })
		}
	}()
	index, epoch, err := s.Checkpoint(filepath.Join(tmp, DBDir))
	if err != nil {
		return Info{}, fmt.Errorf("checkpoint: create: %w", err)
	}
	final := filepath.Join(root, dirName(index))
	if info, ok, err := existing(final, origin, s.DiskOp); ok || err != nil {
		return info, err
	}
	m := Manifest{
		FormatVersion: FormatVersion,
		Room:          origin.Room,
		RoomCzxid:     origin.RoomCzxid,
		Epoch:         epoch,
		Index:         index,
		Created:       time.Now().UTC().Round(time.Millisecond),
		Files:         []File{},
	}
	dbDir := filepath.Join(tmp, DBDir)
	var ents []os.DirEntry
	err = disk("readdir", dbDir, func() (err error) {
		ents, err = os.ReadDir(dbDir)
		return err
	})
	if err != nil {
		return Info{}, fmt.Errorf("checkpoint: create: %w", err)
	}
	buf := make([]byte, copyBufSize)
	var known tables
	_ = disk("read", root, func() error {
		known = knownTables(root, origin)
		return nil
	})
	var read int64
	for _, e := range ents {
		if err := ctx.Err(); err != nil {
			return Info{}, err
		}
		if !e.Type().IsRegular() {
			return Info{}, fmt.Errorf("checkpoint: create: pebble checkpoint holds %q, not a regular file", e.Name())
		}
		if err := validFileName(e.Name()); err != nil {
			return Info{}, fmt.Errorf("checkpoint: create: %w", err)
		}
		path := filepath.Join(dbDir, e.Name())
		var f File
		var ok bool
		_ = disk("stat", path, func() error {
			f, ok = known.same(path, e.Name())
			return nil
		})
		if ok {
			m.Files = append(m.Files, f)
			continue
		}
		size, crc, err := checksumFile(path, buf, true, s.DiskOp)
		if err != nil {
			return Info{}, fmt.Errorf("checkpoint: create: %w", err)
		}
		read += size
		m.Files = append(m.Files, File{Name: e.Name(), Size: size, CRC32C: crc})
	}
	sort.Slice(m.Files, func(i, j int) bool { return m.Files[i].Name < m.Files[j].Name })
	mb, err := m.Marshal()
	if err != nil {
		return Info{}, fmt.Errorf("checkpoint: create: %w", err)
	}
	if err := disk("write manifest", tmp, func() error { return writeFileSync(filepath.Join(tmp, ManifestName), mb) }); err != nil {
		return Info{}, fmt.Errorf("checkpoint: create: %w", err)
	}
	if err := disk("sync", tmp, func() error { return errors.Join(syncDir(dbDir), syncDir(tmp)) }); err != nil {
		return Info{}, fmt.Errorf("checkpoint: create: %w", err)
	}
	if err := disk("rename", tmp, func() error { return os.Rename(tmp, final) }); err != nil {
		// Lost a race with another Create of the same index?
		if info, ok, err2 := existing(final, origin, s.DiskOp); ok || err2 != nil {
			return info, err2
		}
		return Info{}, fmt.Errorf("checkpoint: create: %w", err)
	}
	tmp = ""
	if err := disk("sync", root, func() error { return syncDir(root) }); err != nil {
		return Info{}, fmt.Errorf("checkpoint: create: %w", err)
	}
	info = newInfo(final, m)
	info.ReadBytes = read
	return info, nil
}

// existing returns the valid checkpoint at path (ok), nothing if there is
// none, or moves an invalid one, or one whose origin is not want (when
// want.RoomCzxid != 0), aside and returns nothing.
func existing(path string, want Origin, watch diskWatch) (Info, bool, error) {
	if _, err := os.Lstat(path); errors.Is(err, fs.ErrNotExist) {
		return Info{}, false, nil
	} else if err != nil {
		return Info{}, false, fmt.Errorf("checkpoint: %w", err)
	}
	m, err := verify(path, watch)
	if err == nil && want.RoomCzxid != 0 {
		err = m.CheckOrigin(want)
	}
	if err == nil {
		return newInfo(path, m), true, nil
	}
	if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrForeign) {
		return Info{}, false, err
	}
	if rerr := discard(path); rerr != nil {
		return Info{}, false, fmt.Errorf("checkpoint: move %s aside (%v): %w", path, err, rerr)
	}
	return Info{}, false, nil
}

// discard moves the checkpoint directory at path aside, to
// root/.corrupt-<name>-<nanos>: never listed, kept for inspection. A path
// already gone is not an error.
func discard(path string) error {
	aside := filepath.Join(filepath.Dir(path), fmt.Sprintf("%s%s-%d", corruptPrefix, filepath.Base(path), time.Now().UnixNano()))
	if err := os.Rename(path, aside); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return syncDir(filepath.Dir(path))
}

// Remove deletes the checkpoint directory at path (one that failed to
// restore, say): after it returns, the checkpoint is neither listed nor
// served. A path already gone is not an error.
func Remove(path string) error {
	if _, ok := parseDirName(filepath.Base(path)); !ok {
		return fmt.Errorf("checkpoint: remove %s: not a checkpoint directory", path)
	}
	// Rename first, so that a crash midway never leaves a listed, partial
	// checkpoint; then delete.
	gone := filepath.Join(filepath.Dir(path), fmt.Sprintf("%sremove-%s-%d", tmpPrefix, filepath.Base(path), time.Now().UnixNano()))
	if err := os.Rename(path, gone); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("checkpoint: remove %s: %w", path, err)
	}
	if err := errors.Join(syncDir(filepath.Dir(path)), os.RemoveAll(gone)); err != nil {
		return fmt.Errorf("checkpoint: remove %s: %w", path, err)
	}
	return nil
}

// Check is the cheap full check of a local checkpoint, for a replica that
// is about to advertise or restore it: a valid manifest of origin want
// (ErrForeign otherwise), exactly the manifest's files at their sizes, and
// files that open as a store at the manifest's index and epoch (through
// hard links in a temp dir under the checkpoint's parent: the checkpoint
// itself is never opened, nor written). It does not compute the files'
// CRCs (Verify does, and Restore while copying). Failures wrap ErrCorrupt
// or ErrForeign.
func Check(path string, want Origin) (Manifest, error) {
	m, err := readManifest(path)
	if err != nil {
		return Manifest{}, err
	}
	if err := m.CheckOrigin(want); err != nil {
		return Manifest{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := checkLayout(path, m); err != nil {
		return Manifest{}, err
	}
	if err := checkOpens(filepath.Join(path, DBDir), filepath.Dir(path), m); err != nil {
		return Manifest{}, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}

// checkOpens opens a hard-linked image of dbDir (in a temp dir under
// scratch) read-only and compares its position with m. Pebble creates a
// LOCK file even when read-only, so dbDir itself is never opened.
func checkOpens(dbDir, scratch string, m Manifest) error {
	probe, err := os.MkdirTemp(scratch, tmpPrefix+"probe-")
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer os.RemoveAll(probe)
	buf := make([]byte, copyBufSize)
	for _, f := range m.Files {
		src, dst := filepath.Join(dbDir, f.Name), filepath.Join(probe, f.Name)
		if err := os.Link(src, dst); err != nil {
			// No hard links here: copy (checking the CRC on the way).
			if err := copyChecked(context.Background(), src, dst, f, buf); err != nil {
				return err
			}
		}
	}
	return checkStore(probe, m)
}

// Verify checks the checkpoint directory at path: a valid manifest (self
// checksum), a directory name that matches its index (when it has the
// ckpt- form), exactly the manifest's files in db/, each with the right size
// and CRC32C. Failures wrap ErrCorrupt and name the file.
func Verify(path string) (Manifest, error) { return verify(path, nil) }

// verify is Verify with each read bounded by watch (nil: none).
func verify(path string, watch diskWatch) (Manifest, error) {
	m, err := readManifest(path)
	if err != nil {
		return Manifest{}, err
	}
	if err := checkLayout(path, m); err != nil {
		return Manifest{}, err
	}
	buf := make([]byte, copyBufSize)
	for _, f := range m.Files {
		p := filepath.Join(path, DBDir, f.Name)
		size, crc, err := checksumFile(p, buf, false, watch)
		if err != nil {
			return Manifest{}, fmt.Errorf("checkpoint: verify: %w", err)
		}
		if err := f.check(p, size, crc); err != nil {
			return Manifest{}, err
		}
	}
	return m, nil
}

func (f File) check(path string, size int64, crc uint32) error {
	if size != f.Size {
		return fmt.Errorf("%w: %s: %d bytes, manifest says %d", ErrCorrupt, path, size, f.Size)
	}
	if crc != f.CRC32C {
		return fmt.Errorf("%w: %s: crc32c %08x, manifest says %08x", ErrCorrupt, path, crc, f.CRC32C)
	}
	return nil
}

// readManifest reads and parses path/ManifestName and checks the directory
// name against the index.
func readManifest(path string) (Manifest, error) {
	p := filepath.Join(path, ManifestName)
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return Manifest{}, fmt.Errorf("%w: %s: no manifest", ErrCorrupt, path)
	}
	if err != nil {
		return Manifest{}, fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxManifestBytes+1))
	if err != nil {
		return Manifest{}, fmt.Errorf("checkpoint: read %s: %w", p, err)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return Manifest{}, fmt.Errorf("%s: %w", p, err)
	}
	if idx, ok := parseDirName(filepath.Base(path)); ok && idx != m.Index {
		return Manifest{}, fmt.Errorf("%w: %s: directory is for index %d, manifest says %d", ErrCorrupt, path, idx, m.Index)
	}
	return m, nil
}

// checkLayout checks that path/db holds exactly the manifest's files, as
// regular files of the right sizes.
func checkLayout(path string, m Manifest) error {
	dbDir := filepath.Join(path, DBDir)
	ents, err := os.ReadDir(dbDir)
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s missing", ErrCorrupt, dbDir)
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	want := make(map[string]int64, len(m.Files))
	for _, f := range m.Files {
		want[f.Name] = f.Size
	}
	for _, e := range ents {
		size, ok := want[e.Name()]
		if !ok {
			return fmt.Errorf("%w: %s: file not in the manifest", ErrCorrupt, filepath.Join(dbDir, e.Name()))
		}
		fi, err := e.Info()
		if err != nil {
			return fmt.Errorf("checkpoint: %w", err)
		}
		if !fi.Mode().IsRegular() {
			return fmt.Errorf("%w: %s: not a regular file", ErrCorrupt, filepath.Join(dbDir, e.Name()))
		}
		if fi.Size() != size {
			return fmt.Errorf("%w: %s: %d bytes, manifest says %d", ErrCorrupt, filepath.Join(dbDir, e.Name()), fi.Size(), size)
		}
		delete(want, e.Name())
	}
	for name := range want {
		return fmt.Errorf("%w: %s: missing", ErrCorrupt, filepath.Join(dbDir, name))
	}
	return nil
}

// Restore turns the checkpoint at ckptPath into a store directory at
// storeDir, which must not exist or be an empty directory (else
// ErrNotEmpty). It checks the manifest, its origin (ErrForeign, naming
// both origins, unless it records exactly want; a format-1 manifest records
// none; a zero want is refused) and the file list first, then copies every
// file into a temp directory next to storeDir (.tmp-restore-*) while
// checking its CRC32C, fsyncs, opens the copy read-only to check its
// applied index and epoch against the manifest, and renames it into place.
// On any failure nothing is left at storeDir (a crash can leave the temp
// directory: the caller removes .tmp-restore-* before it next restores).
func Restore(ctx context.Context, ckptPath, storeDir string, want Origin) (err error) {
	m, err := readManifest(ckptPath)
	if err != nil {
		return err
	}
	if err := m.CheckOrigin(want); err != nil {
		return fmt.Errorf("checkpoint: restore %s: %w", ckptPath, err)
	}
	if err := checkLayout(ckptPath, m); err != nil {
		return err
	}
	if err := checkEmpty(storeDir); err != nil {
		return err
	}
	parent := filepath.Dir(storeDir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("checkpoint: restore: %w", err)
	}
	tmp, err := os.MkdirTemp(parent, tmpPrefix+"restore-")
	if err != nil {
		return fmt.Errorf("checkpoint: restore: %w", err)
	}
	defer func() {
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}()
	ckptRoot := filepath.Dir(ckptPath)
	loadVerified(ckptRoot)
	// Several files at once: each is read (or copied) whole to check it,
	// and one reader alone leaves the disk idle between requests.
	if err := forEach(ctx, len(m.Files), DefaultParallel, func(i int, buf []byte) error {
		f := m.Files[i]
		return linkChecked(ctx, filepath.Join(ckptPath, DBDir, f.Name), filepath.Join(tmp, f.Name), f, buf)
	}); err != nil {
		return err
	}
	if err := syncDir(tmp); err != nil {
		return fmt.Errorf("checkpoint: restore: %w", err)
	}
	if err := checkStore(tmp, m); err != nil {
		return err
	}
	if err := checkEmpty(storeDir); err != nil {
		return err
	}
	// An empty storeDir is replaced.
	if err := os.Remove(storeDir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("checkpoint: restore: %w", err)
	}
	if err := os.Rename(tmp, storeDir); err != nil {
		return fmt.Errorf("checkpoint: restore: %w", err)
	}
	tmp = ""
	if err := syncDir(parent); err != nil {
		return fmt.Errorf("checkpoint: restore: %w", err)
	}
	saveVerified(ckptRoot)
	return nil
}

// checkStore opens dir read-only and compares its position with m.
func checkStore(dir string, m Manifest) (err error) {
	// Files that passed their CRC checks can still be a forger's: a
	// manifest re-signed over sstables Pebble cannot read. Pebble may
	// panic opening them; that is a corrupt checkpoint, not a crash.
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("%w: checkpoint does not open as a store: pebble: %v", ErrCorrupt, p)
		}
	}()
	s, err := store.Open(dir, &store.Options{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("%w: checkpoint does not open as a store: %w", ErrCorrupt, err)
	}
	idx, ep := s.AppliedIndex(), s.AppliedEpoch()
	if err := s.Close(); err != nil {
		return fmt.Errorf("checkpoint: restore: %w", err)
	}
	if idx != m.Index || ep != m.Epoch {
		return fmt.Errorf("%w: store holds index %d epoch %d, manifest says index %d epoch %d", ErrCorrupt, idx, ep, m.Index, m.Epoch)
	}
	return nil
}

// checkEmpty returns nil if dir does not exist or is an empty directory.
func checkEmpty(dir string) error {
	f, err := os.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer f.Close()
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return fmt.Errorf("%w: %s", ErrNotEmpty, dir)
	}
	if err != nil && err != io.EOF {
		return fmt.Errorf("%w: %s: %w", ErrNotEmpty, dir, err)
	}
	return nil
}

// linkChecked puts f at dst: an sstable is hard-linked (Pebble never
// writes an sstable after creating it, it only unlinks it, so the store and
// the checkpoint can share it, as Pebble's own checkpoints share them with
// the store) and then read once to check its size and CRC32C; any other
// file (MANIFEST, OPTIONS, WAL: Pebble appends to them) is copied with
// copyChecked. A link that fails (another filesystem, no permission) falls
// back to a copy.
func linkChecked(ctx context.Context, src, dst string, f File, buf []byte) error {
	if !strings.HasSuffix(f.Name, ".sst") {
		return copyChecked(ctx, src, dst, f, buf)
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.Link(src, dst); err != nil {
		return copyChecked(ctx, src, dst, f, buf)
	}
	if verifiedAs(dst, f) {
		return nil // the same unchanged file this process checked (verified.go)
	}
	size, crc, err := checksumRemembered(dst, buf)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return f.check(src, size, crc)
}

// copyChecked copies src to dst, checking size and CRC32C against f while
// copying, and fsyncs dst.
func copyChecked(ctx context.Context, src, dst string, f File, buf []byte) error {
	in, err := os.Open(src)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	defer out.Close()
	var size int64
	var crc uint32
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		n, rerr := in.Read(buf)
		if n > 0 {
			size += int64(n)
			if size > f.Size {
				return fmt.Errorf("%w: %s: longer than the manifest's %d bytes", ErrCorrupt, src, f.Size)
			}
			crc = crc32.Update(crc, castagnoli, buf[:n])
			if _, err := out.Write(buf[:n]); err != nil {
				return fmt.Errorf("checkpoint: %w", err)
			}
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return fmt.Errorf("checkpoint: read %s: %w", src, rerr)
		}
	}
	if err := f.check(src, size, crc); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("checkpoint: %w", err)
	}
	return out.Close()
}

// tables are the sstables of the newest valid checkpoint of the same
// origin under root, by name: a new checkpoint whose sstable is a hard link
// to the very same file (Pebble links the store's immutable sstables into
// every checkpoint) takes its size and CRC from that manifest instead of
// reading the file again. Only sstables count (WAL, MANIFEST and OPTIONS
// are copies), and only the same inode with the same size.
type tables struct {
	dir   string
	id    os.FileInfo // the checkpoint directory as the manifest was read
	files map[string]File
}

func knownTables(root string, origin Origin) tables {
	infos, err := List(root)
	if err != nil {
		return tables{}
	}
	for _, in := range infos {
		if in.Manifest.Origin() != origin {
			continue
		}
		id, err := os.Stat(in.Path)
		if err != nil {
			return tables{}
		}
		t := tables{dir: filepath.Join(in.Path, DBDir), id: id, files: map[string]File{}}
		for _, f := range in.Manifest.Files {
			if strings.HasSuffix(f.Name, ".sst") {
				t.files[f.Name] = f
			}
		}
		return t
	}
	return tables{}
}

// same returns the known File for name if path is the same file as the
// known checkpoint's and its size is unchanged.
func (t tables) same(path, name string) (File, bool) {
	f, ok := t.files[name]
	if !ok {
		return File{}, false
	}
	a, err := os.Stat(path)
	if err != nil {
		return File{}, false
	}
	b, err := os.Stat(filepath.Join(t.dir, name))
	if err != nil || !os.SameFile(a, b) || a.Size() != f.Size {
		return File{}, false
	}
	// The checkpoint directory is still the one whose manifest was read
	// (not replaced by another of the same index meanwhile).
	if id, err := os.Stat(filepath.Dir(t.dir)); err != nil || !os.SameFile(id, t.id) {
		return File{}, false
	}
	return f, true
}

// diskWatch bounds one disk operation (store.Store.DiskOp): call the
// returned end when it returned.
type diskWatch func(op, path string) (end func())

// testHookRead, when set by a test, runs before each read of checksumFile,
// inside its watch: a read that blocks there is a read stuck on the disk.
var testHookRead func(path string)

// checksumFile returns the size and CRC32C of the file at path, fsyncing it
// too when sync is set. watch, if not nil, bounds each read and the sync
// (store.Store.DiskOp).
func checksumFile(path string, buf []byte, sync bool, watch diskWatch) (int64, uint32, error) {
	if watch == nil {
		watch = func(string, string) func() { return func() {} }
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	var size int64
	var crc uint32
	for {
		end := watch("read", path)
		if testHookRead != nil {
			testHookRead(path)
		}
		n, err := f.Read(buf)
		end()
		size += int64(n)
		crc = crc32.Update(crc, castagnoli, buf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			return 0, 0, fmt.Errorf("read %s: %w", path, err)
		}
	}
	if sync {
		end := watch("fsync", path)
		err := f.Sync()
		end()
		if err != nil {
			return 0, 0, fmt.Errorf("fsync %s: %w", path, err)
		}
	}
	return size, crc, nil
}

// writeFileSync writes a new file and fsyncs it.
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

// syncDir fsyncs a directory, making renames and creations in it durable.
func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return err
	}
	return errors.Join(f.Sync(), f.Close())
}

// List returns the checkpoints under root, newest (highest index) first.
// It ignores temp dirs, anything not named ckpt-%020d, and directories
// whose manifest is missing, invalid or for another index. It reads
// manifests only: use Verify to check the files. A missing root is empty.
func List(root string) ([]Info, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("checkpoint: list: %w", err)
	}
	var out []Info
	for _, e := range ents {
		if _, ok := parseDirName(e.Name()); !ok || !e.IsDir() {
			continue
		}
		p := filepath.Join(root, e.Name())
		m, err := readManifest(p)
		if err != nil {
			continue
		}
		out = append(out, newInfo(p, m))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Manifest.Index > out[j].Manifest.Index })
	return out, nil
}

// Newest returns the checkpoint with the highest index under root, or
// ErrNoCheckpoint.
func Newest(root string) (Info, error) {
	l, err := List(root)
	if err != nil {
		return Info{}, err
	}
	if len(l) == 0 {
		return Info{}, fmt.Errorf("%w under %s", ErrNoCheckpoint, root)
	}
	return l[0], nil
}

// Retain deletes every checkpoint under root but the newest keep (keep >= 1),
// and every partial fetch (root/.partial-*) of an index at or below the
// newest checkpoint's, unless a Fetch is using it. A checkpoint being
// served by Handler's tar stream or a file request in progress keeps
// streaming: the handler holds its files open; later per-file requests
// for it get 404.
func Retain(root string, keep int) error {
	if keep < 1 {
		return fmt.Errorf("checkpoint: retain: keep = %d, must be >= 1", keep)
	}
	l, err := List(root)
	if err != nil {
		return err
	}
	if len(l) > 0 {
		newest := l[0].Manifest.Index
		if err := removePartials(root, func(p partialDir) bool { return p.index <= newest }); err != nil {
			return fmt.Errorf("checkpoint: retain: %w", err)
		}
	}
	if len(l) <= keep {
		return nil
	}
	var errs []error
	for _, info := range l[keep:] {
		errs = append(errs, Remove(info.Path))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("checkpoint: retain: %w", err)
	}
	return nil
}

// CleanTemp removes the temp directories (".tmp-*") under root older than
// olderThan: leftovers of a Create or Fetch interrupted by a crash. Only
// call it with an age no Create or Fetch in progress can reach. It also
// bounds partial fetches (".partial-*", kept for a later Fetch to resume):
// all but the newest (highest index, then most recently changed) are
// removed, and the newest too once unchanged for PartialMaxAge, whatever
// olderThan; a partial a Fetch is using is never removed.
func CleanTemp(root string, olderThan time.Duration) error {
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("checkpoint: clean: %w", err)
	}
	var errs []error
	if err := cleanPartials(root); err != nil {
		errs = append(errs, err)
	}
	for _, e := range ents {
		if len(e.Name()) <= len(tmpPrefix) || e.Name()[:len(tmpPrefix)] != tmpPrefix {
			continue
		}
		fi, err := e.Info()
		if err != nil || time.Since(fi.ModTime()) < olderThan {
			continue
		}
		if err := os.RemoveAll(filepath.Join(root, e.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("checkpoint: clean: %w", err)
	}
	return nil
}

package checkpoint

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The verified-file memo: files this process checked (size and CRC32C
// read from every byte, or computed while the bytes were received and
// written) are remembered by their identity on disk — device, inode,
// size and modification time — so that linking the very same file again
// (Restore after the Fetch that received it, a re-bootstrap linking what
// an earlier checkpoint holds, a resumed Fetch keeping a complete file)
// does not read it again. A file written since (a new mtime), replaced (a
// new inode) or truncated (a new size) misses the memo and is read and
// checked as before; so is every file after the process restarts. A hard
// link shares its source's inode and mtime, so the link of a verified
// file is verified. What the memo cannot see is a change of content that
// keeps the size and the mtime (a disk's bit rot, a writer that restores
// the mtime): those bytes were checked once, when the memo recorded them,
// and Pebble's own block checksums check them again when they are read.
//
// A file whose mtime is within racyMargin of the moment its bytes were
// read is not recorded: a filesystem stamps mtimes from a coarse clock
// (a jiffy, 1–10 ms), so a write right after the read could keep the
// same mtime (Git's "racy" entries); any later write gets a later mtime.
// A file Fetch received is recorded when Fetch returns, if it is
// unchanged since its fsync and its mtime is that much older.
//
// The memo holds at most maxVerified entries (a few MB); when full it is
// cleared, which only costs reads.

// fileID is a file's identity on disk.
type fileID struct {
	dev, ino uint64
	size     int64
	mtime    int64 // UnixNano
}

const maxVerified = 1 << 16

// racyMargin: see above.
var racyMargin = 50 * time.Millisecond

var verifiedMemo struct {
	mu sync.Mutex
	m  map[fileID]uint32 // CRC32C
}

// rememberVerified records that fi (a Stat of a file whose bytes were
// checked to have CRC32C crc at the time checked, or later) is verified,
// unless fi's mtime is within racyMargin of checked.
func rememberVerified(fi os.FileInfo, crc uint32, checked time.Time) {
	id, ok := idOf(fi)
	if !ok || checked.Sub(fi.ModTime()) <= racyMargin {
		return
	}
	verifiedMemo.mu.Lock()
	defer verifiedMemo.mu.Unlock()
	if verifiedMemo.m == nil || len(verifiedMemo.m) >= maxVerified {
		verifiedMemo.m = make(map[fileID]uint32)
	}
	verifiedMemo.m[id] = crc
}

// verifiedAs reports whether the file at path is, unchanged, a file this
// process verified to hold exactly f (size and CRC32C).
func verifiedAs(path string, f File) bool {
	fi, err := os.Lstat(path)
	if err != nil || !fi.Mode().IsRegular() || fi.Size() != f.Size {
		return false
	}
	id, ok := idOf(fi)
	if !ok {
		return false
	}
	verifiedMemo.mu.Lock()
	crc, ok := verifiedMemo.m[id]
	verifiedMemo.mu.Unlock()
	return ok && crc == f.CRC32C
}

// checksumRemembered is checksumFile (without sync) that records a
// result whose file did not change while it was read; the caller still
// compares size and CRC with what it expects.
func checksumRemembered(path string, buf []byte) (int64, uint32, error) {
	before, err := os.Lstat(path)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	size, crc, err := checksumFile(path, buf, false, nil)
	if err != nil {
		return size, crc, err
	}
	if after, err := os.Lstat(path); err == nil && sameID(before, after) && after.Size() == size {
		rememberVerified(after, crc, start)
	}
	return size, crc, nil
}

// sameID reports whether a and b are the same file with the same size
// and mtime.
func sameID(a, b os.FileInfo) bool {
	x, ok1 := idOf(a)
	y, ok2 := idOf(b)
	return ok1 && ok2 && x == y
}

// forgetVerified empties the memo and forgets which roots were loaded,
// as a new process would start (tests).
func forgetVerified() {
	verifiedMemo.mu.Lock()
	verifiedMemo.m = nil
	verifiedMemo.mu.Unlock()
	loadedRoots.Clear()
}

// The memo outlives the process through root/verified-files (one line per
// file of root's checkpoints that the memo holds: device, inode, size,
// mtime, CRC32C), rewritten after each Fetch and Restore that used root
// and read once per process by the first Fetch or Restore of root, so
// that a standby restarted for a re-bootstrap does not read again the
// gigabytes its earlier checkpoint holds. Lines that do not parse are
// ignored; a file changed since it was listed misses, as above.
const verifiedFile = "verified-files"

var loadedRoots sync.Map // root -> struct{}

// loadVerified adds root's verified-files to the memo, once per process.
func loadVerified(root string) {
	if _, done := loadedRoots.LoadOrStore(filepath.Clean(root), struct{}{}); done {
		return
	}
	b, err := os.ReadFile(filepath.Join(root, verifiedFile))
	if err != nil {
		return
	}
	verifiedMemo.mu.Lock()
	defer verifiedMemo.mu.Unlock()
	for _, line := range strings.Split(string(b), "\n") {
		var id fileID
		var crc uint32
		if n, err := fmt.Sscanf(line, "%x %x %d %d %x", &id.dev, &id.ino, &id.size, &id.mtime, &crc); err != nil || n != 5 {
			continue
		}
		if verifiedMemo.m == nil || len(verifiedMemo.m) >= maxVerified {
			verifiedMemo.m = make(map[fileID]uint32)
		}
		verifiedMemo.m[id] = crc
	}
}

// saveVerified rewrites root/verified-files with the memo's entries for
// the db files of root's checkpoints (atomically: a temp file renamed).
// Failures are ignored: the file only saves reads.
func saveVerified(root string) {
	infos, err := List(root)
	if err != nil || len(infos) == 0 {
		return
	}
	var b strings.Builder
	for _, in := range infos {
		for _, f := range in.Manifest.Files {
			fi, err := os.Lstat(filepath.Join(in.Path, DBDir, f.Name))
			if err != nil {
				continue
			}
			id, ok := idOf(fi)
			if !ok {
				return
			}
			verifiedMemo.mu.Lock()
			crc, ok := verifiedMemo.m[id]
			verifiedMemo.mu.Unlock()
			if ok && crc == f.CRC32C {
				fmt.Fprintf(&b, "%x %x %d %d %x\n", id.dev, id.ino, id.size, id.mtime, crc)
			}
		}
	}
	tmp, err := os.CreateTemp(root, tmpPrefix+"verified-")
	if err != nil {
		return
	}
	_, werr := tmp.WriteString(b.String())
	if err := errors.Join(werr, tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return
	}
	if err := os.Rename(tmp.Name(), filepath.Join(root, verifiedFile)); err != nil {
		os.Remove(tmp.Name())
	}
}

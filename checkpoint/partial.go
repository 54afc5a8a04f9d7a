package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Partial fetches (see doc.go, "Partial fetches").
const (
	partialPrefix = ".partial-" // + %020d index + "-" + first 16 hex digits of the manifest checksum
	partSuffix    = ".part"     // a file being received, under db/
	// PartialMaxAge: CleanTemp removes the newest partial fetch too once
	// nothing in it changed for this long (older partials go at once).
	PartialMaxAge = 24 * time.Hour
)

// errPartialBusy: another Fetch (of this or another process) holds the
// partial directory of this checkpoint.
var errPartialBusy = errors.New("checkpoint: partial fetch in use")

// partialName is the partial directory of the checkpoint m.
func partialName(m Manifest) string {
	sum := m.Checksum
	if len(sum) > 16 {
		sum = sum[:16]
	}
	return fmt.Sprintf("%s%020d-%s", partialPrefix, m.Index, sum)
}

// parsePartialName returns the index of a partial directory name.
func parsePartialName(name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, partialPrefix)
	if !ok || len(rest) < 22 || rest[20] != '-' {
		return 0, false
	}
	idx, err := strconv.ParseUint(rest[:20], 10, 64)
	return idx, err == nil
}

// openPartial opens (creating it if needed) the partial directory of m
// under root and locks it (flock, so that one Fetch at a time, of any
// process, writes into it); errPartialBusy if another holds it, or if
// the filesystem cannot lock it. A
// directory without exactly the manifest mb (new, interrupted before its
// manifest was written, or of another checkpoint with the same name) is
// emptied and given mb. The lock is released by closing the returned
// file.
func openPartial(root string, m Manifest, mb []byte) (string, *os.File, error) {
	dir := filepath.Join(root, partialName(m))
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", nil, err
	}
	d, err := lockDir(dir)
	if err != nil {
		if !errors.Is(err, errPartialBusy) {
			// No flock here (some network filesystems): no partial
			// directory, the caller fetches into a private temp dir.
			os.Remove(dir) // (only if empty: one just made)
			err = fmt.Errorf("%w (cannot lock %s: %v)", errPartialBusy, dir, err)
		}
		return "", nil, err
	}
	ok := false
	defer func() {
		if !ok {
			d.Close()
		}
	}()
	mpath := filepath.Join(dir, ManifestName)
	if cur, err := os.ReadFile(mpath); err != nil || !bytes.Equal(cur, mb) {
		if err := os.RemoveAll(filepath.Join(dir, DBDir)); err != nil {
			return "", nil, err
		}
		if err := os.Remove(mpath); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", nil, err
		}
		if err := writeFileSync(mpath, mb); err != nil {
			return "", nil, err
		}
	}
	if err := os.MkdirAll(filepath.Join(dir, DBDir), 0o755); err != nil {
		return "", nil, err
	}
	if err := errors.Join(syncDir(dir), syncDir(root)); err != nil {
		return "", nil, err
	}
	ok = true
	return dir, d, nil
}

// lockDir opens dir and takes an exclusive flock on it without waiting
// (errPartialBusy if held), checking that dir is still the directory at
// that path once locked (not removed or replaced meanwhile).
func lockDir(dir string) (*os.File, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(d.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		d.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, errPartialBusy
		}
		return nil, err
	}
	a, err1 := d.Stat()
	b, err2 := os.Stat(dir)
	if err1 != nil || err2 != nil || !os.SameFile(a, b) {
		d.Close()
		return nil, errPartialBusy
	}
	return d, nil
}

// knownFiles returns, by file name, the paths of files under root that
// are known to have the name, size and CRC32C m lists: files of root's
// checkpoints of m's origin, and complete files of its other partial
// fetches of that origin (skip is the caller's own staging directory).
// Each is still checked after it is linked.
func knownFiles(root, skip string, m Manifest) map[string][]string {
	want := make(map[string]File, len(m.Files))
	for _, f := range m.Files {
		want[f.Name] = f
	}
	out := map[string][]string{}
	add := func(dir string, other Manifest) {
		if other.Origin() != m.Origin() {
			return
		}
		for _, f := range other.Files {
			if w, ok := want[f.Name]; ok && w == f {
				out[f.Name] = append(out[f.Name], filepath.Join(dir, DBDir, f.Name))
			}
		}
	}
	if infos, err := List(root); err == nil {
		for _, in := range infos {
			add(in.Path, in.Manifest)
		}
	}
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		dir := filepath.Join(root, e.Name())
		if _, ok := parsePartialName(e.Name()); !ok || dir == skip {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, ManifestName))
		if err != nil || int64(len(b)) > maxManifestBytes {
			continue
		}
		if other, err := ParseManifest(b); err == nil {
			add(dir, other)
		}
	}
	return out
}

// removeStrays removes from a partial db/ directory whatever is neither a
// file of m nor its .part.
func removeStrays(dbDir string, m Manifest) error {
	ents, err := os.ReadDir(dbDir)
	if err != nil {
		return err
	}
	keep := make(map[string]bool, 2*len(m.Files))
	for _, f := range m.Files {
		keep[f.Name], keep[f.Name+partSuffix] = true, true
	}
	for _, e := range ents {
		if !keep[e.Name()] {
			if err := os.RemoveAll(filepath.Join(dbDir, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// partialDir is a partial fetch directory under root.
type partialDir struct {
	path    string
	index   uint64
	touched time.Time // last change of the directory or its db/
}

func listPartials(root string) ([]partialDir, error) {
	ents, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []partialDir
	for _, e := range ents {
		idx, ok := parsePartialName(e.Name())
		if !ok || !e.IsDir() {
			continue
		}
		p := partialDir{path: filepath.Join(root, e.Name()), index: idx}
		for _, d := range []string{p.path, filepath.Join(p.path, DBDir)} {
			if fi, err := os.Stat(d); err == nil && fi.ModTime().After(p.touched) {
				p.touched = fi.ModTime()
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// removePartials removes the partial fetches under root for which drop
// says so, except those a Fetch holds (locked).
func removePartials(root string, drop func(p partialDir) bool) error {
	ps, err := listPartials(root)
	if err != nil {
		return err
	}
	var errs []error
	for _, p := range ps {
		if !drop(p) {
			continue
		}
		d, err := lockDir(p.path)
		if err != nil {
			continue // in use, or gone
		}
		errs = append(errs, os.RemoveAll(p.path))
		d.Close()
	}
	return errors.Join(errs...)
}

// cleanPartials keeps the newest partial fetch (highest index, then most
// recently changed) unless it is older than PartialMaxAge, and removes
// the others.
func cleanPartials(root string) error {
	ps, err := listPartials(root)
	if err != nil || len(ps) == 0 {
		return err
	}
	newest := ps[0]
	for _, p := range ps[1:] {
		if p.index > newest.index || (p.index == newest.index && p.touched.After(newest.touched)) {
			newest = p
		}
	}
	return removePartials(root, func(p partialDir) bool {
		return p.path != newest.path || time.Since(p.touched) > PartialMaxAge
	})
}

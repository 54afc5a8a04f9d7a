package checkpoint

import (
	"archive/tar"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Stream headers set by Handler (informational; Fetch trusts only the
// manifest inside the stream).
const (
	HeaderIndex = "X-Roomlog-Checkpoint-Index"
	HeaderEpoch = "X-Roomlog-Checkpoint-Epoch"
	// HeaderFiles is set (to FilesProtocol) on every answer of a handler
	// that serves GET /files/<name> (the manifest, and the file endpoint's
	// own errors): Fetch uses per-file requests only with a server that
	// says so, and tells "this server has no such endpoint" (an older
	// server's 404, without the header) from "this checkpoint is gone" (a
	// 404 with it).
	HeaderFiles = "X-Roomlog-Checkpoint-Files"
	// FilesProtocol is the value of HeaderFiles: the per-file protocol
	// version.
	FilesProtocol = "1"
)

// Handler serves the checkpoints under root:
//
//	GET /          the newest checkpoint as one tar stream: ManifestName
//	               first, then db/<file> for every manifest file, in
//	               manifest order (USTAR, with Content-Length)
//	GET /manifest  the newest checkpoint's manifest JSON
//	GET /manifest?index=N
//	               the manifest of the checkpoint at index N; 404 when root
//	               does not hold it (any more)
//	GET /files/<name>?index=N&sum=<manifest checksum>
//	               one db file of exactly that checkpoint, with Range
//	               support (http.ServeContent on the open file): 404 naming
//	               what is gone when root no longer holds index N or the
//	               manifest lists no such file, 409 when the checkpoint at
//	               index N has another manifest checksum, 400 for a bad
//	               name, index or sum
//
// GET / and GET /manifest answer 404 with a plain-text reason when root
// holds no checkpoint. The manifest and file answers carry HeaderFiles.
// A file name is a manifest name (validFileName: no separator, no dot
// first) and must be listed by that checkpoint's manifest, so nothing
// outside a checkpoint's db/ directory is ever served.
// Before writing the first byte, the handler opens the manifest and every
// file of the checkpoint; a Retain that deletes the checkpoint afterwards
// only unlinks names, and the stream keeps reading the open files (POSIX
// semantics). A checkpoint deleted between listing and opening is retried
// with the new newest one. The handler does not recompute checksums (the
// fetcher does), but checks the files' sizes against the manifest.
func Handler(root string) http.Handler {
	return &handler{root: root, held: map[uint64]heldManifest{}}
}

type handler struct {
	root string
	mu   sync.Mutex
	// held caches parsed manifests by index (a fetch asks once per
	// file), each valid while its manifest file is the same file with the
	// same size and time; at most maxHeld entries. Guarded by mu.
	held map[uint64]heldManifest
}

type heldManifest struct {
	fi   os.FileInfo // the manifest file as it was parsed
	info Info
	mb   []byte
}

const maxHeld = 8

// RequireBearer wraps h so that it serves only requests that carry
// "Authorization: Bearer <token>" with exactly token (compared in constant
// time). Others get 401 with a WWW-Authenticate challenge and nothing of
// h. An empty token is a programming error: RequireBearer panics rather
// than serve everyone while looking protected.
func RequireBearer(token string, h http.Handler) http.Handler {
	if token == "" {
		panic("checkpoint: RequireBearer with an empty token")
	}
	want := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		sum := sha256.Sum256([]byte(got))
		if !ok || subtle.ConstantTimeCompare(sum[:], want[:]) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="roomlog-checkpoint"`)
			http.Error(w, "roomlog checkpoint: missing or wrong bearer token", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "roomlog checkpoint: method not allowed", http.StatusMethodNotAllowed)
		return
	}
	switch p := r.URL.Path; {
	case p == "" || p == "/":
		h.serveStream(w, r)
	case p == "/manifest" && r.URL.Query().Has("index"):
		h.serveManifestAt(w, r)
	case p == "/manifest":
		h.serveManifest(w, r)
	case strings.HasPrefix(p, filesPath):
		h.serveFile(w, r, strings.TrimPrefix(p, filesPath))
	default:
		http.Error(w, "roomlog checkpoint: unknown path (use /, /manifest or /files/<name>)", http.StatusNotFound)
	}
}

// filesPath is the prefix of the per-file endpoint.
const filesPath = "/files/"

// opened is a checkpoint whose files are all open.
type opened struct {
	info     Info
	manifest []byte
	files    []*os.File // parallel to info.Manifest.Files
}

func (o *opened) close() {
	for _, f := range o.files {
		f.Close()
	}
}

// open opens the newest checkpoint, retrying when a concurrent Retain
// deletes it between listing and opening. A newest checkpoint whose files
// do not match its manifest is moved aside (never served again) and the
// next newest is tried.
func (h *handler) open(withFiles bool) (*opened, error) {
	var lastErr error
	for attempt := 0; attempt < 16; attempt++ {
		info, err := Newest(h.root)
		if err != nil {
			return nil, err
		}
		o, err := openCheckpoint(info, withFiles)
		if err == nil {
			return o, nil
		}
		lastErr = err
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case errors.Is(err, ErrCorrupt):
			if derr := discard(info.Path); derr != nil {
				return nil, errors.Join(err, derr)
			}
		default:
			return nil, err
		}
	}
	return nil, lastErr
}

// openCheckpoint re-reads info's manifest and checks its files' sizes;
// withFiles, it opens them too (a stream then survives their deletion).
func openCheckpoint(info Info, withFiles bool) (*opened, error) {
	mb, err := os.ReadFile(filepath.Join(info.Path, ManifestName))
	if err != nil {
		return nil, err
	}
	m, err := ParseManifest(mb)
	if err != nil {
		return nil, err
	}
	if m.Checksum != info.Manifest.Checksum {
		// Replaced since it was listed: treat like a deletion and retry.
		return nil, fmt.Errorf("%s changed: %w", info.Path, fs.ErrNotExist)
	}
	o := &opened{info: info, manifest: mb}
	for _, f := range m.Files {
		p := filepath.Join(info.Path, DBDir, f.Name)
		var fi os.FileInfo
		if withFiles {
			fh, err := os.Open(p)
			if err != nil {
				o.close()
				return nil, missingIsCorrupt(err)
			}
			o.files = append(o.files, fh)
			fi, err = fh.Stat()
		} else {
			fi, err = os.Stat(p)
		}
		if err != nil {
			o.close()
			return nil, missingIsCorrupt(err)
		}
		if fi.Size() != f.Size {
			o.close()
			return nil, fmt.Errorf("%w: %s: %d bytes, manifest says %d", ErrCorrupt, p, fi.Size(), f.Size)
		}
	}
	return o, nil
}

// missingIsCorrupt: a file missing while its manifest is still there (not
// a concurrent Retain, which deletes the whole directory) is corruption.
func missingIsCorrupt(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) && errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Stat(filepath.Join(filepath.Dir(filepath.Dir(pe.Path)), ManifestName)); serr == nil {
			return fmt.Errorf("%w: %s: missing", ErrCorrupt, pe.Path)
		}
	}
	return err
}

func (h *handler) fail(w http.ResponseWriter, err error) {
	if errors.Is(err, ErrNoCheckpoint) {
		http.Error(w, "roomlog checkpoint: no checkpoint available", http.StatusNotFound)
		return
	}
	http.Error(w, "roomlog checkpoint: "+err.Error(), http.StatusInternalServerError)
}

func (h *handler) serveManifest(w http.ResponseWriter, r *http.Request) {
	o, err := h.open(false)
	if err != nil {
		h.fail(w, err)
		return
	}
	writeManifest(w, r, o.info, o.manifest)
}

func writeManifest(w http.ResponseWriter, r *http.Request, info Info, mb []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(mb)))
	w.Header().Set(HeaderFiles, FilesProtocol)
	setInfoHeaders(w, info)
	if r.Method == http.MethodHead {
		return
	}
	w.Write(mb)
}

// heldAt reads the manifest of the checkpoint at index under root. Gone
// (never held, removed, or moved aside) is fs.ErrNotExist; a checkpoint
// whose manifest no longer parses is moved aside (never served again)
// and reported gone.
func (h *handler) heldAt(index uint64) (Info, []byte, error) {
	path := filepath.Join(h.root, dirName(index))
	fi, err := os.Stat(filepath.Join(path, ManifestName))
	if err != nil {
		return Info{}, nil, err
	}
	h.mu.Lock()
	c, ok := h.held[index]
	h.mu.Unlock()
	if ok && os.SameFile(c.fi, fi) && c.fi.Size() == fi.Size() && c.fi.ModTime().Equal(fi.ModTime()) {
		return c.info, c.mb, nil
	}
	mb, err := os.ReadFile(filepath.Join(path, ManifestName))
	if err != nil {
		return Info{}, nil, err
	}
	m, err := ParseManifest(mb)
	if err == nil && m.Index != index {
		err = fmt.Errorf("%w: %s: directory is for index %d, manifest says %d", ErrCorrupt, path, index, m.Index)
	}
	if err != nil {
		if errors.Is(err, ErrCorrupt) {
			if derr := discard(path); derr != nil {
				return Info{}, nil, errors.Join(err, derr)
			}
			return Info{}, nil, fmt.Errorf("%w (%v)", fs.ErrNotExist, err)
		}
		return Info{}, nil, err
	}
	info := newInfo(path, m)
	h.mu.Lock()
	if len(h.held) >= maxHeld {
		for k := range h.held {
			delete(h.held, k)
			break
		}
	}
	h.held[index] = heldManifest{fi: fi, info: info, mb: mb}
	h.mu.Unlock()
	return info, mb, nil
}

// queryIndex parses the index query parameter.
func queryIndex(r *http.Request) (uint64, error) {
	v := r.URL.Query().Get("index")
	idx, err := strconv.ParseUint(v, 10, 64)
	if err != nil || idx == 0 {
		return 0, fmt.Errorf("bad index %q", v)
	}
	return idx, nil
}

func (h *handler) serveManifestAt(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(HeaderFiles, FilesProtocol)
	idx, err := queryIndex(r)
	if err != nil {
		http.Error(w, "roomlog checkpoint: "+err.Error(), http.StatusBadRequest)
		return
	}
	info, mb, err := h.heldAt(idx)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		http.Error(w, fmt.Sprintf("roomlog checkpoint: no checkpoint at index %d held (any more)", idx), http.StatusNotFound)
	case err != nil:
		h.fail(w, err)
	default:
		writeManifest(w, r, info, mb)
	}
}

// serveFile answers one db file of the checkpoint the query names (index
// and manifest checksum), with Range support. The file is opened and its
// size checked against the manifest before the first byte; a checkpoint
// whose file is missing or of another size is moved aside, as GET / does.
func (h *handler) serveFile(w http.ResponseWriter, r *http.Request, name string) {
	w.Header().Set(HeaderFiles, FilesProtocol)
	if err := validFileName(name); err != nil {
		http.Error(w, "roomlog checkpoint: "+err.Error(), http.StatusBadRequest)
		return
	}
	idx, err := queryIndex(r)
	if err != nil {
		http.Error(w, "roomlog checkpoint: "+err.Error(), http.StatusBadRequest)
		return
	}
	sum := r.URL.Query().Get("sum")
	if sum == "" || len(sum) > 128 {
		http.Error(w, "roomlog checkpoint: missing or bad sum", http.StatusBadRequest)
		return
	}
	info, _, err := h.heldAt(idx)
	if errors.Is(err, fs.ErrNotExist) {
		http.Error(w, fmt.Sprintf("roomlog checkpoint: checkpoint at index %d is not held (any more): %s gone", idx, name), http.StatusNotFound)
		return
	}
	if err != nil {
		h.fail(w, err)
		return
	}
	if info.Manifest.Checksum != sum {
		http.Error(w, fmt.Sprintf("roomlog checkpoint: the checkpoint at index %d has manifest checksum %s, not %s",
			idx, info.Manifest.Checksum, sum), http.StatusConflict)
		return
	}
	var f File
	var listed bool
	for _, mf := range info.Manifest.Files {
		if mf.Name == name {
			f, listed = mf, true
			break
		}
	}
	if !listed {
		http.Error(w, fmt.Sprintf("roomlog checkpoint: the checkpoint at index %d lists no file %q", idx, name), http.StatusNotFound)
		return
	}
	p := filepath.Join(info.Path, DBDir, name)
	fh, err := os.Open(p)
	var fi os.FileInfo
	if err == nil {
		defer fh.Close()
		fi, err = fh.Stat()
	}
	if err == nil && (!fi.Mode().IsRegular() || fi.Size() != f.Size) {
		err = fmt.Errorf("%w: %s: %d bytes, manifest says %d", ErrCorrupt, p, fi.Size(), f.Size)
	}
	if err != nil {
		err = missingIsCorrupt(err)
		if errors.Is(err, ErrCorrupt) {
			if derr := discard(info.Path); derr != nil {
				h.fail(w, errors.Join(err, derr))
				return
			}
		}
		if errors.Is(err, ErrCorrupt) || errors.Is(err, fs.ErrNotExist) {
			http.Error(w, fmt.Sprintf("roomlog checkpoint: checkpoint at index %d is not held (any more): %s gone (%v)", idx, name, err), http.StatusNotFound)
			return
		}
		h.fail(w, err)
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	setInfoHeaders(w, info)
	http.ServeContent(w, r, "", time.Time{}, fh)
}

func setInfoHeaders(w http.ResponseWriter, info Info) {
	w.Header().Set(HeaderIndex, strconv.FormatUint(info.Manifest.Index, 10))
	w.Header().Set(HeaderEpoch, strconv.FormatUint(info.Manifest.Epoch, 10))
}

// tarSize is the exact length of the stream for a manifest of mlen bytes
// and files: a 512-byte USTAR header per entry, contents padded to 512, and
// the 1024-byte end marker.
func tarSize(mlen int64, files []File) int64 {
	pad := func(n int64) int64 { return (n + 511) &^ 511 }
	total := 512 + pad(mlen) + 1024
	for _, f := range files {
		total += 512 + pad(f.Size)
	}
	return total
}

func (h *handler) serveStream(w http.ResponseWriter, r *http.Request) {
	o, err := h.open(r.Method == http.MethodGet)
	if err != nil {
		h.fail(w, err)
		return
	}
	defer o.close()
	m := o.info.Manifest
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Length", strconv.FormatInt(tarSize(int64(len(o.manifest)), m.Files), 10))
	setInfoHeaders(w, o.info)
	if r.Method == http.MethodHead {
		return
	}
	if err := writeTar(w, o); err != nil {
		// Headers are gone; the client sees a short stream and rejects it.
		panic(http.ErrAbortHandler)
	}
}

func writeTar(w io.Writer, o *opened) error {
	m := o.info.Manifest
	mtime := m.Created.Truncate(time.Second)
	if mtime.Unix() < 0 {
		mtime = time.Unix(0, 0)
	}
	tw := tar.NewWriter(w)
	hdr := func(name string, size int64) error {
		return tw.WriteHeader(&tar.Header{
			Typeflag: tar.TypeReg,
			Name:     name,
			Size:     size,
			Mode:     0o644,
			ModTime:  mtime,
			Format:   tar.FormatUSTAR,
		})
	}
	if err := hdr(ManifestName, int64(len(o.manifest))); err != nil {
		return err
	}
	if _, err := tw.Write(o.manifest); err != nil {
		return err
	}
	buf := make([]byte, copyBufSize)
	for i, f := range m.Files {
		if err := hdr(DBDir+"/"+f.Name, f.Size); err != nil {
			return err
		}
		n, err := io.CopyBuffer(tw, io.LimitReader(onlyReader{o.files[i]}, f.Size), buf)
		if err != nil {
			return err
		}
		if n != f.Size {
			return fmt.Errorf("%s: short read %d of %d", f.Name, n, f.Size)
		}
	}
	return tw.Close()
}

// onlyReader hides other methods (WriteTo) so io.CopyBuffer uses the buffer.
type onlyReader struct{ r io.Reader }

func (o onlyReader) Read(p []byte) (int, error) { return o.r.Read(p) }

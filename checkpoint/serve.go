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
	"time"
)

// Stream headers set by Handler (informational; Fetch trusts only the
// manifest inside the stream).
const (
	HeaderIndex = "X-Roomlog-Checkpoint-Index"
	HeaderEpoch = "X-Roomlog-Checkpoint-Epoch"
)

// Handler serves the newest checkpoint under root:
//
//	GET /          the checkpoint as one tar stream: ManifestName first,
//	               then db/<file> for every manifest file, in manifest order
//	               (USTAR, with Content-Length)
//	GET /manifest  the manifest JSON
//
// Both answer 404 with a plain-text reason when root holds no checkpoint.
// Before writing the first byte, the handler opens the manifest and every
// file of the checkpoint; a Retain that deletes the checkpoint afterwards
// only unlinks names, and the stream keeps reading the open files (POSIX
// semantics). A checkpoint deleted between listing and opening is retried
// with the new newest one. The handler does not recompute checksums (the
// fetcher does), but checks the files' sizes against the manifest.
func Handler(root string) http.Handler {
	return &handler{root: root}
}

type handler struct{ root string }

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
	switch r.URL.Path {
	case "", "/":
		h.serveStream(w, r)
	case "/manifest":
		h.serveManifest(w, r)
	default:
		http.Error(w, "roomlog checkpoint: unknown path (use / or /manifest)", http.StatusNotFound)
	}
}

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
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(o.manifest)))
	setInfoHeaders(w, o.info)
	if r.Method == http.MethodHead {
		return
	}
	w.Write(o.manifest)
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

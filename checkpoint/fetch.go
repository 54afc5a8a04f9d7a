package checkpoint

import (
	"archive/tar"
	"bufio"
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Progress reports a transfer in progress.
type Progress struct {
	Bytes   int64         // stream bytes received so far
	Total   int64         // stream length, -1 if unknown
	Rate    float64       // bytes/s averaged since the start
	Elapsed time.Duration // since the request was sent
}

// FetchOptions configure Fetch.
type FetchOptions struct {
	// Progress, if set, is called from Fetch's goroutine at most every
	// ProgressInterval while bytes arrive, and once more after success with
	// Bytes == Total. It must not block for long.
	Progress func(Progress)
	// ProgressInterval: default 100ms.
	ProgressInterval time.Duration
	// Client: default a plain &http.Client{} (no timeout: ctx bounds the fetch).
	Client *http.Client
}

// Fetch downloads the checkpoint served by Handler at url into
// root/ckpt-%020d and returns it, verified: the manifest's self checksum,
// every file's size and CRC32C (computed while streaming), no missing,
// extra, duplicated, oversized or misnamed entry (so no path traversal).
// The download goes to root/.tmp-fetch-*; files and directories are fsynced
// before the rename into place. On any failure the temp directory is
// removed, nothing new is listed under root, and the error wraps ErrCorrupt
// (bad or truncated stream), ErrNoCheckpoint (404), or is the network or
// ctx error. If root already holds a valid checkpoint of the same index, it
// is returned instead.
func Fetch(ctx context.Context, url, root string, opts FetchOptions) (info Info, err error) {
	client := opts.Client
	if client == nil {
		client = &http.Client{}
	}
	interval := opts.ProgressInterval
	if interval <= 0 {
		interval = 100 * time.Millisecond
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return Info{}, fmt.Errorf("checkpoint: fetch: %w", err)
	}
	start := time.Now()
	resp, err := client.Do(req)
	if err != nil {
		return Info{}, fmt.Errorf("checkpoint: fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusNotFound:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return Info{}, fmt.Errorf("%w: fetch %s: %s: %s", ErrNoCheckpoint, url, resp.Status, strings.TrimSpace(string(msg)))
	case resp.StatusCode != http.StatusOK:
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return Info{}, fmt.Errorf("checkpoint: fetch %s: %s: %s", url, resp.Status, strings.TrimSpace(string(msg)))
	}

	if err := os.MkdirAll(root, 0o755); err != nil {
		return Info{}, fmt.Errorf("checkpoint: fetch: %w", err)
	}
	tmp, err := os.MkdirTemp(root, tmpPrefix+"fetch-")
	if err != nil {
		return Info{}, fmt.Errorf("checkpoint: fetch: %w", err)
	}
	defer func() {
		if tmp != "" {
			os.RemoveAll(tmp)
		}
	}()

	cr := &countingReader{r: resp.Body, total: resp.ContentLength, start: start, interval: interval, fn: opts.Progress}
	m, err := receive(ctx, bufio.NewReaderSize(cr, copyBufSize), tmp)
	if err != nil {
		if ctxErr := ctx.Err(); ctxErr != nil {
			return Info{}, fmt.Errorf("checkpoint: fetch %s: %w", url, ctxErr)
		}
		return Info{}, fmt.Errorf("checkpoint: fetch %s: %w", url, err)
	}
	// Let the connection be reused; what follows the end marker is ignored.
	io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))

	final := filepath.Join(root, dirName(m.Index))
	if info, ok, err := existing(final); ok || err != nil {
		cr.final()
		return info, err
	}
	if err := os.Rename(tmp, final); err != nil {
		if info, ok, err2 := existing(final); ok || err2 != nil {
			cr.final()
			return info, err2
		}
		return Info{}, fmt.Errorf("checkpoint: fetch: %w", err)
	}
	tmp = ""
	if err := syncDir(root); err != nil {
		return Info{}, fmt.Errorf("checkpoint: fetch: %w", err)
	}
	cr.final()
	return newInfo(final, m), nil
}

// receive reads the tar stream into dir (manifest + db/) and verifies it.
func receive(ctx context.Context, r io.Reader, dir string) (Manifest, error) {
	tr := tar.NewReader(r)
	hdr, err := tr.Next()
	if err != nil {
		return Manifest{}, streamErr("reading the manifest header", err)
	}
	if hdr.Name != ManifestName || hdr.Typeflag != tar.TypeReg {
		return Manifest{}, fmt.Errorf("%w: stream starts with %q (type %c), want %s", ErrCorrupt, hdr.Name, hdr.Typeflag, ManifestName)
	}
	if hdr.Size < 0 || hdr.Size > maxManifestBytes {
		return Manifest{}, fmt.Errorf("%w: manifest of %d bytes", ErrCorrupt, hdr.Size)
	}
	mb := make([]byte, hdr.Size)
	if _, err := io.ReadFull(tr, mb); err != nil {
		return Manifest{}, streamErr("reading the manifest", err)
	}
	m, err := ParseManifest(mb)
	if err != nil {
		return Manifest{}, err
	}
	dbDir := filepath.Join(dir, DBDir)
	if err := os.Mkdir(dbDir, 0o755); err != nil {
		return Manifest{}, err
	}
	want := make(map[string]File, len(m.Files))
	for _, f := range m.Files {
		want[f.Name] = f
	}
	buf := make([]byte, copyBufSize)
	for {
		if err := ctx.Err(); err != nil {
			return Manifest{}, err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return Manifest{}, streamErr("reading a file header", err)
		}
		name, ok := strings.CutPrefix(hdr.Name, DBDir+"/")
		f, listed := want[name]
		if !ok || !listed || hdr.Typeflag != tar.TypeReg {
			return Manifest{}, fmt.Errorf("%w: unexpected stream entry %q (type %c): not a manifest file, or sent twice", ErrCorrupt, hdr.Name, hdr.Typeflag)
		}
		delete(want, name)
		if hdr.Size != f.Size {
			return Manifest{}, fmt.Errorf("%w: stream entry %q is %d bytes, manifest says %d", ErrCorrupt, hdr.Name, hdr.Size, f.Size)
		}
		if err := receiveFile(ctx, tr, filepath.Join(dbDir, name), f, buf); err != nil {
			return Manifest{}, err
		}
	}
	for name := range want {
		return Manifest{}, fmt.Errorf("%w: stream ended without file %q", ErrCorrupt, name)
	}
	if err := writeFileSync(filepath.Join(dir, ManifestName), mb); err != nil {
		return Manifest{}, err
	}
	if err := errors.Join(syncDir(dbDir), syncDir(dir)); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

// receiveFile copies exactly f.Size bytes from r into a new file at path,
// checking the CRC32C on the way, and fsyncs it.
func receiveFile(ctx context.Context, r io.Reader, path string, f File, buf []byte) error {
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	var size int64
	var crc uint32
	for size < f.Size {
		if err := ctx.Err(); err != nil {
			return err
		}
		chunk := buf
		if rem := f.Size - size; rem < int64(len(chunk)) {
			chunk = chunk[:rem]
		}
		n, rerr := r.Read(chunk)
		if n > 0 {
			crc = crc32.Update(crc, castagnoli, chunk[:n])
			if _, err := out.Write(chunk[:n]); err != nil {
				return err
			}
			size += int64(n)
		}
		if rerr == io.EOF && size < f.Size {
			rerr = io.ErrUnexpectedEOF
		}
		if rerr != nil && rerr != io.EOF {
			return streamErr("reading "+f.Name, rerr)
		}
	}
	if err := f.check(DBDir+"/"+f.Name, size, crc); err != nil {
		return err
	}
	if err := out.Sync(); err != nil {
		return err
	}
	return out.Close()
}

// streamErr classifies an error reading the stream: truncation and tar
// format errors are corruption; anything else (network) is returned as is.
func streamErr(what string, err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) || errors.Is(err, tar.ErrHeader) ||
		errors.Is(err, tar.ErrInsecurePath) || errors.Is(err, tar.ErrFieldTooLong) {
		return fmt.Errorf("%w: truncated or malformed stream: %s: %w", ErrCorrupt, what, err)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// countingReader counts stream bytes and reports progress.
type countingReader struct {
	r        io.Reader
	n        int64
	total    int64
	start    time.Time
	last     time.Time
	interval time.Duration
	fn       func(Progress)
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if c.fn != nil && n > 0 {
		if now := time.Now(); now.Sub(c.last) >= c.interval {
			c.last = now
			c.fn(c.progress(now))
		}
	}
	return n, err
}

func (c *countingReader) progress(now time.Time) Progress {
	el := now.Sub(c.start)
	p := Progress{Bytes: c.n, Total: c.total, Elapsed: el}
	if el > 0 {
		p.Rate = float64(c.n) / el.Seconds()
	}
	return p
}

// final reports completion: Total is what was received.
func (c *countingReader) final() {
	if c.fn == nil {
		return
	}
	p := c.progress(time.Now())
	p.Total = c.n
	c.fn(p)
}

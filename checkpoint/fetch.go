package checkpoint

import (
	"archive/tar"
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Progress reports a transfer in progress.
type Progress struct {
	Bytes   int64         // stream bytes received so far
	Total   int64         // stream length, -1 if unknown
	Rate    float64       // bytes/s averaged since the start
	Elapsed time.Duration // since the request was sent
	// Stage: StageStreaming while bytes arrive (each file's CRC is
	// checked as it streams), StageStreamed once when the last byte of a
	// stream of known length arrived, StageVerified once after success
	// (the files opened as a store at the manifest's index and the
	// checkpoint is in place).
	Stage string
}

// Progress stages.
const (
	StageStreaming = "streaming"
	StageStreamed  = "streamed"
	StageVerified  = "verified"
)

// Fetch defaults (see FetchOptions).
const (
	DefaultConnectTimeout        = 5 * time.Second
	DefaultResponseHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout           = 30 * time.Second
	DefaultMaxBytes              = 64 << 30 // 64 GiB of checkpoint files
	DefaultMinRate               = 16 << 10 // bytes/s, after the idle timeout
	DefaultMaxManifestBytes      = 8 << 20  // ~100k files
)

// streamSlack is what a fetched stream may hold beyond the exact USTAR
// size of its manifest and files (PAX records of another tar writer).
const streamSlack = 1 << 20

// FetchOptions configure Fetch and FetchManifest. Zero (or negative)
// fields take the defaults.
type FetchOptions struct {
	// Progress, if set, is called from Fetch's goroutine at most every
	// ProgressInterval while bytes arrive, once when the stream's last byte
	// arrived (StageStreamed), and once more after success with Bytes ==
	// Total (StageVerified). It must not block for long.
	Progress func(Progress)
	// ProgressInterval: default 100ms.
	ProgressInterval time.Duration
	// Client: default a client of Fetch's own with the timeouts below, no
	// proxy and no compression. A caller's client is used as given except
	// that redirects are never followed; its transport's own timeouts then
	// apply, and ConnectTimeout+ResponseHeaderTimeout bounds the wait for
	// the response headers.
	Client *http.Client

	// Origin, when set (RoomCzxid != 0), is the room incarnation the
	// checkpoint must belong to: a manifest of any other origin (or a
	// format-1 manifest, which records none) fails with ErrForeign before
	// any file is received. Zero: any origin (Restore checks it anyway).
	Origin Origin
	// ConnectTimeout bounds the TCP connect (and TLS handshake). Default 5s.
	ConnectTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the response headers once
	// the request is sent. Default 10s.
	ResponseHeaderTimeout time.Duration
	// IdleTimeout: the fetch fails (ErrTimeout) when no byte of the body
	// arrives for this long. Default 30s.
	IdleTimeout time.Duration
	// MaxBytes bounds the total size of the checkpoint's files as its
	// manifest declares them: a larger checkpoint fails with ErrTooLarge
	// before any file is written. Every file is received to exactly its
	// declared size, so this bounds what Fetch writes. Default 64 GiB.
	MaxBytes int64
	// MaxManifestBytes bounds the manifest (its tar entry, or the body of
	// FetchManifest). Default 8 MiB.
	MaxManifestBytes int64
	// BearerToken, when set, is sent as "Authorization: Bearer <token>"
	// with every request (see RequireBearer). A 401 or 403 answer is
	// ErrUnauthorized.
	BearerToken string
	// TLS, when set, is the TLS configuration of https fetches (the
	// client certificate to present, how to verify the server): the
	// transport of Fetch's own client uses it. Ignored with Client.
	TLS *tls.Config
	// MinRate (bytes/s) bounds a peer that trickles: once IdleTimeout has
	// passed since the response, the body must have averaged at least
	// MinRate since then, or the fetch fails (ErrTimeout). With the size
	// bound, this bounds the whole fetch. Each per-file request is bounded
	// on its own. Default 16 KiB/s.
	MinRate int64

	// Local names extra directories (the caller's live store directory,
	// say) whose sstables may be hard-linked instead of fetched: a file of
	// the same name and size ending in ".sst" (Pebble never writes an
	// sstable after creating it) is linked, then read once to check its
	// CRC32C against the manifest; a CRC that differs, or a link that
	// fails (Pebble deleted the file meanwhile), falls back to fetching.
	// Other files (MANIFEST, OPTIONS, WAL: Pebble appends to them) are
	// never taken from these directories.
	Local []string
	// Parallel is how many files are fetched (and, before that, checked
	// locally) at once. Default DefaultParallel.
	Parallel int
	// Index, when not 0, asks for the checkpoint at exactly this index
	// (GET manifest?index=N): ErrNoCheckpoint if the source does not hold
	// it. Zero: the source's newest.
	Index uint64
}

// DefaultParallel is FetchOptions.Parallel's default.
const DefaultParallel = 4

func (o FetchOptions) withDefaults() FetchOptions {
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = 100 * time.Millisecond
	}
	if o.ConnectTimeout <= 0 {
		o.ConnectTimeout = DefaultConnectTimeout
	}
	if o.ResponseHeaderTimeout <= 0 {
		o.ResponseHeaderTimeout = DefaultResponseHeaderTimeout
	}
	if o.IdleTimeout <= 0 {
		o.IdleTimeout = DefaultIdleTimeout
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = DefaultMaxBytes
	}
	if o.MaxManifestBytes <= 0 {
		o.MaxManifestBytes = DefaultMaxManifestBytes
	}
	if o.MinRate <= 0 {
		o.MinRate = DefaultMinRate
	}
	if o.Parallel <= 0 {
		o.Parallel = DefaultParallel
	}
	o.MaxManifestBytes = min(o.MaxManifestBytes, maxManifestBytes)
	return o
}

// client returns the HTTP client to use (never following redirects) and a
// function that releases it.
func (o FetchOptions) client() (*http.Client, func()) {
	noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	if o.Client != nil {
		c := *o.Client
		c.CheckRedirect = noRedirect
		return &c, func() {}
	}
	tr := &http.Transport{
		DialContext:            (&net.Dialer{Timeout: o.ConnectTimeout, KeepAlive: 15 * time.Second}).DialContext,
		TLSHandshakeTimeout:    o.ConnectTimeout,
		ResponseHeaderTimeout:  o.ResponseHeaderTimeout,
		TLSClientConfig:        o.TLS,
		DisableCompression:     true,
		MaxResponseHeaderBytes: 64 << 10,
		MaxIdleConnsPerHost:    o.Parallel,
		ReadBufferSize:         256 << 10,
	}
	return &http.Client{Transport: tr, CheckRedirect: noRedirect}, tr.CloseIdleConnections
}

// watchdog cancels a request's context with a cause when a deadline
// passes; kick pushes the deadline back (the idle timeout).
type watchdog struct {
	cancel  context.CancelCauseFunc
	mu      sync.Mutex
	t       *time.Timer
	d       time.Duration
	stopped bool // guarded by mu: kick no longer re-arms
}

func newWatchdog(cancel context.CancelCauseFunc) *watchdog { return &watchdog{cancel: cancel} }

// arm (re)starts the watchdog: after d without a kick, the context ends
// with cause.
func (w *watchdog) arm(d time.Duration, cause error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.t != nil {
		w.t.Stop()
	}
	w.d = d
	w.t = time.AfterFunc(d, func() { w.cancel(cause) })
}

func (w *watchdog) kick() {
	w.mu.Lock()
	if w.t != nil && !w.stopped {
		w.t.Reset(w.d)
	}
	w.mu.Unlock()
}

func (w *watchdog) stop() {
	w.mu.Lock()
	w.stopped = true
	if w.t != nil {
		w.t.Stop()
	}
	w.mu.Unlock()
}

// kickReader kicks the watchdog on every read that makes progress.
type kickReader struct {
	r  io.Reader
	wd *watchdog
}

func (k kickReader) Read(p []byte) (int, error) {
	n, err := k.r.Read(p)
	if n > 0 {
		k.wd.kick()
	}
	return n, err
}

// rateReader fails with ErrTimeout once, grace after start, the bytes read
// average less than rate since then: a peer that sends a byte just often
// enough to defeat the idle timeout is still bounded.
type rateReader struct {
	r     io.Reader
	start time.Time
	grace time.Duration
	rate  int64
	url   string
	n     int64
}

func (s *rateReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.n += int64(n)
	if over := time.Since(s.start) - s.grace; over > 0 && s.n < int64(over.Seconds()*float64(s.rate)) {
		return n, fmt.Errorf("%w: %s sent %d bytes in %v, below the minimum of %d bytes/s after the first %v (MinRate)",
			ErrTimeout, s.url, s.n, time.Since(s.start).Round(time.Millisecond), s.rate, s.grace)
	}
	return n, err
}

// boundedReader fails with ErrCorrupt once more than limit bytes arrive
// (limit may be lowered as the stream's exact size becomes known).
type boundedReader struct {
	r     io.Reader
	n     int64
	limit int64
}

func (b *boundedReader) Read(p []byte) (int, error) {
	if b.n >= b.limit {
		var one [1]byte
		n, err := b.r.Read(one[:])
		if n > 0 {
			return 0, fmt.Errorf("%w: stream longer than the %d bytes its manifest allows", ErrCorrupt, b.limit)
		}
		return 0, err
	}
	if rem := b.limit - b.n; int64(len(p)) > rem {
		p = p[:rem]
	}
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

// request sends GET url with the options' timeouts and returns the
// response to a 200. Other answers are errors (statusErr). The returned
// ctx ends with the watchdog's cause; the caller arms the idle timeout
// and must call done.
func (o FetchOptions) request(ctx context.Context, url string) (_ *http.Response, _ context.Context, _ *watchdog, _ func(), err error) {
	client, release := o.client()
	resp, rctx, wd, done, err := o.send(ctx, client, url, nil)
	if err != nil {
		release()
		return nil, nil, nil, nil, err
	}
	cleanup := func() { done(); release() }
	if resp.StatusCode != http.StatusOK {
		defer cleanup()
		defer resp.Body.Close()
		return nil, nil, nil, nil, statusErr(url, resp)
	}
	return resp, rctx, wd, cleanup, nil
}

// send sends GET url through client with the options' timeouts (connect
// plus response headers; the caller arms the idle timeout) and the
// headers in hdr, and returns the response whatever its status. The
// returned ctx ends with the watchdog's cause; the caller must call done.
func (o FetchOptions) send(ctx context.Context, client *http.Client, url string, hdr http.Header) (_ *http.Response, _ context.Context, _ *watchdog, _ func(), err error) {
	rctx, cancel := context.WithCancelCause(ctx)
	wd := newWatchdog(cancel)
	cleanup := func() {
		wd.stop()
		cancel(nil)
	}
	defer func() {
		if err != nil {
			cleanup()
		}
	}()
	req, err := http.NewRequestWithContext(rctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, nil, nil, nil, fmt.Errorf("checkpoint: fetch: %w", err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	if o.BearerToken != "" {
		req.Header.Set("Authorization", "Bearer "+o.BearerToken)
	}
	headerWait := o.ConnectTimeout + o.ResponseHeaderTimeout
	wd.arm(headerWait, fmt.Errorf("%w: %s: no response within %v (connect %v + response headers %v)",
		ErrTimeout, url, headerWait, o.ConnectTimeout, o.ResponseHeaderTimeout))
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, nil, nil, fetchErr(ctx, rctx, url, err)
	}
	return resp, rctx, wd, cleanup, nil
}

// statusErr explains an unexpected answer: 404 wraps ErrNoCheckpoint,
// 401/403 ErrUnauthorized, a redirect names its Location (never
// followed). It reads a little of the body for the reason.
func statusErr(url string, resp *http.Response) error {
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return fmt.Errorf("%w: fetch %s: %s: %s", ErrNoCheckpoint, url, resp.Status, strings.TrimSpace(string(msg)))
	case resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("%w: fetch %s: %s: %s", ErrUnauthorized, url, resp.Status, strings.TrimSpace(string(msg)))
	case resp.StatusCode >= 300 && resp.StatusCode < 400:
		return fmt.Errorf("checkpoint: fetch %s: %s: redirect to %q refused (checkpoint fetches follow no redirects)",
			url, resp.Status, resp.Header.Get("Location"))
	default:
		return fmt.Errorf("checkpoint: fetch %s: %s: %s", url, resp.Status, strings.TrimSpace(string(msg)))
	}
}

// fetchErr explains a failed request or stream read: the watchdog's cause
// (ErrTimeout) if it fired, the caller's ctx error if that ended, a
// transport timeout as ErrTimeout, else err.
func fetchErr(ctx, rctx context.Context, url string, err error) error {
	if cerr := ctx.Err(); cerr != nil {
		return fmt.Errorf("checkpoint: fetch %s: %w", url, cerr)
	}
	if errors.Is(err, errStalledSync) {
		return fmt.Errorf("checkpoint: fetch %s: %w", url, err)
	}
	if cause := context.Cause(rctx); cause != nil && !errors.Is(cause, context.Canceled) {
		if errors.Is(err, cause) {
			return err // (the transport already reports the cause)
		}
		return fmt.Errorf("%w (%v)", cause, err)
	}
	if ne, ok := errors.AsType[net.Error](err); ok && ne.Timeout() {
		return fmt.Errorf("%w: fetch %s: %w", ErrTimeout, url, err)
	}
	return fmt.Errorf("checkpoint: fetch %s: %w", url, err)
}

// FetchManifest returns the manifest of the checkpoint served by Handler
// at url (GET url+"manifest"), parsed and validated, with the same
// timeouts, size limit and redirect rule as Fetch; with opts.Origin set it
// also checks the origin (ErrForeign). It proves what a peer serves now
// without downloading the checkpoint.
func FetchManifest(ctx context.Context, url string, opts FetchOptions) (Manifest, error) {
	o := opts.withDefaults()
	murl := strings.TrimSuffix(url, "/") + "/manifest"
	resp, rctx, wd, done, err := o.request(ctx, murl)
	if err != nil {
		return Manifest{}, err
	}
	defer done()
	defer resp.Body.Close()
	m, _, err := o.readManifestBody(ctx, rctx, wd, resp, murl)
	return m, err
}

// readManifestBody reads, parses and checks (MaxManifestBytes, origin) a
// manifest answer, with the idle timeout.
func (o FetchOptions) readManifestBody(ctx, rctx context.Context, wd *watchdog, resp *http.Response, murl string) (Manifest, []byte, error) {
	wd.arm(o.IdleTimeout, fmt.Errorf("%w: %s sent nothing for %v (idle timeout)", ErrTimeout, murl, o.IdleTimeout))
	b, err := io.ReadAll(io.LimitReader(kickReader{resp.Body, wd}, o.MaxManifestBytes+1))
	if err != nil {
		return Manifest{}, nil, fetchErr(ctx, rctx, murl, err)
	}
	if int64(len(b)) > o.MaxManifestBytes {
		return Manifest{}, nil, fmt.Errorf("%w: fetch %s: manifest longer than %d bytes (MaxManifestBytes)", ErrCorrupt, murl, o.MaxManifestBytes)
	}
	m, err := ParseManifest(b)
	if err != nil {
		return Manifest{}, nil, fmt.Errorf("checkpoint: fetch %s: %w", murl, err)
	}
	if o.Origin.RoomCzxid != 0 {
		if err := m.CheckOrigin(o.Origin); err != nil {
			return Manifest{}, nil, fmt.Errorf("checkpoint: fetch %s: %w", murl, err)
		}
	}
	return m, b, nil
}

// Fetch downloads the checkpoint served by Handler at url into
// root/ckpt-%020d and returns it, verified: the manifest's self checksum
// and size (MaxManifestBytes), its origin (when opts.Origin is set), the
// total it declares (MaxBytes), every file's size and CRC32C (computed
// while receiving; no file is ever written past its declared size), no
// missing, extra, duplicated, oversized or misnamed file (so no path
// traversal), and finally that the files open as a store at the
// manifest's index and epoch. No request follows a redirect; connect,
// response headers and every gap in a body are bounded by the options'
// timeouts (ErrTimeout).
//
// It first gets url's manifest. From a Handler that serves files one by
// one (HeaderFiles), it fetches only what root does not already hold:
// files of an earlier interrupted Fetch of the same checkpoint (resumed,
// a file in progress with a Range request), files root's checkpoints and
// other partial fetches of the same origin hold with the same name, size
// and CRC32C, and sstables of the same name and size in opts.Local are
// hard-linked and checked by CRC instead; the rest is fetched
// opts.Parallel files at once into root/.partial-<index>-<sum16>/, which
// is renamed into place once complete (see doc.go, "Partial fetches").
// Info.Fetch says what was fetched, resumed and linked. From an older
// server it receives the tar stream of GET url into root/.tmp-fetch-*, as
// before. Files and directories are fsynced before the rename into place.
//
// On failure nothing new is listed under root, and the error wraps
// ErrCorrupt (bad or truncated tar stream, a file that fails its CRC or
// size, not a store), ErrForeign, ErrTooLarge, ErrNoCheckpoint (404, or
// opts.Index not served), ErrTimeout, or is the network or ctx error. A
// per-file fetch keeps what it verified and received in its partial
// directory, so that the next Fetch of that checkpoint into root, from
// this source or another, continues from there (CleanTemp and Retain
// bound these directories); a tar fetch removes its temp directory. If
// root already holds a valid checkpoint of the same index (and, with
// opts.Origin, of that origin), it is returned instead; one of another
// origin is moved aside and replaced.
func Fetch(ctx context.Context, url, root string, opts FetchOptions) (info Info, err error) {
	return fetch(ctx, url, root, opts.withDefaults(), opts.Progress)
}

// fetchTar receives the whole checkpoint as GET url's tar stream (a
// source without the per-file endpoint), into a temp dir under root.
func fetchTar(ctx context.Context, url, root string, o FetchOptions, progress func(Progress), start time.Time, st FetchStats) (info Info, err error) {
	st.Tar = true
	t0 := time.Now()
	resp, rctx, wd, done, err := o.request(ctx, url)
	if err != nil {
		return Info{}, err
	}
	defer done()
	defer resp.Body.Close()
	wd.arm(o.IdleTimeout, fmt.Errorf("%w: %s sent nothing for %v (idle timeout)", ErrTimeout, url, o.IdleTimeout))

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

	slow := &rateReader{r: kickReader{resp.Body, wd}, start: time.Now(), grace: o.IdleTimeout, rate: o.MinRate, url: url}
	bounded := &boundedReader{r: slow, limit: o.MaxManifestBytes + 512 + streamSlack}
	cr := &countingReader{r: bounded, total: resp.ContentLength, start: start, interval: o.ProgressInterval, fn: progress}
	m, err := receive(rctx, bufio.NewReaderSize(cr, copyBufSize), tmp, o, bounded, wd.kick)
	if err != nil {
		return Info{}, fetchErr(ctx, rctx, url, err)
	}
	wd.stop()
	if o.Index != 0 && m.Index != o.Index {
		return Info{}, fmt.Errorf("%w: fetch %s: it serves index %d, not %d (Index)", ErrNoCheckpoint, url, m.Index, o.Index)
	}
	st.Files, st.Bytes = len(m.Files), m.Bytes()
	st.FetchedFiles, st.FetchedBytes = len(m.Files), cr.n
	st.Transfer = time.Since(t0)
	t1 := time.Now()
	defer func() {
		st.Final = time.Since(t1)
		info.Fetch = st
	}()
	if err := checkOpens(filepath.Join(tmp, DBDir), root, m); err != nil {
		return Info{}, fmt.Errorf("checkpoint: fetch %s: %w", url, err)
	}

	final := filepath.Join(root, dirName(m.Index))
	if info, ok, err := existing(final, m.Origin(), nil); ok || err != nil {
		cr.final()
		return info, err
	}
	if err := os.Rename(tmp, final); err != nil {
		if info, ok, err2 := existing(final, m.Origin(), nil); ok || err2 != nil {
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
// progress is called whenever a received file's fsync completes (the
// idle watchdog counts it as progress, so a slow but working disk is not
// mistaken for a stalled one).
func receive(ctx context.Context, r io.Reader, dir string, o FetchOptions, bounded *boundedReader, progress func()) (Manifest, error) {
	tr := tar.NewReader(r)
	hdr, err := tr.Next()
	if err != nil {
		return Manifest{}, streamErr("reading the manifest header", err)
	}
	if hdr.Name != ManifestName || hdr.Typeflag != tar.TypeReg {
		return Manifest{}, fmt.Errorf("%w: stream starts with %q (type %c), want %s", ErrCorrupt, hdr.Name, hdr.Typeflag, ManifestName)
	}
	if hdr.Size < 0 || hdr.Size > o.MaxManifestBytes {
		return Manifest{}, fmt.Errorf("%w: manifest of %d bytes, limit %d (MaxManifestBytes)", ErrCorrupt, hdr.Size, o.MaxManifestBytes)
	}
	mb := make([]byte, hdr.Size)
	if _, err := io.ReadFull(tr, mb); err != nil {
		return Manifest{}, streamErr("reading the manifest", err)
	}
	m, err := ParseManifest(mb)
	if err != nil {
		return Manifest{}, err
	}
	if o.Origin.RoomCzxid != 0 {
		if err := m.CheckOrigin(o.Origin); err != nil {
			return Manifest{}, err
		}
	}
	if total := m.Bytes(); total > o.MaxBytes {
		return Manifest{}, fmt.Errorf("%w: the manifest declares %d bytes in %d files, limit %d (MaxBytes)", ErrTooLarge, total, len(m.Files), o.MaxBytes)
	}
	// From here the stream's exact length is known (USTAR, as Handler
	// writes it); a little slack admits another tar writer's PAX records.
	bounded.limit = tarSize(int64(len(mb)), m.Files) + streamSlack
	dbDir := filepath.Join(dir, DBDir)
	if err := os.Mkdir(dbDir, 0o755); err != nil {
		return Manifest{}, err
	}
	want := make(map[string]File, len(m.Files))
	for _, f := range m.Files {
		want[f.Name] = f
	}
	buf := make([]byte, copyBufSize)
	// Files are fsynced by a second goroutine while the next one streams
	// in: the disk writes back one file while the network delivers the
	// next (at most syncQueue files wait for their fsync). Every file is synced (and closed) before the manifest is
	// written; on any failure the syncer is drained and the error returned.
	sy := newSyncer(progress)
	defer sy.abandon()
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
		out, err := receiveFile(ctx, tr, filepath.Join(dbDir, name), f, buf)
		if err != nil {
			return Manifest{}, err
		}
		if err := sy.sync(ctx, out); err != nil {
			return Manifest{}, err
		}
	}
	for name := range want {
		return Manifest{}, fmt.Errorf("%w: stream ended without file %q", ErrCorrupt, name)
	}
	if err := sy.wait(ctx); err != nil {
		return Manifest{}, err
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
// checking the CRC32C on the way, and returns it open and not yet synced
// (the caller fsyncs and closes it). On error the file is closed.
func receiveFile(ctx context.Context, r io.Reader, path string, f File, buf []byte) (_ *os.File, err error) {
	out, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			out.Close()
		}
	}()
	var size int64
	var crc uint32
	for size < f.Size {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		chunk := buf
		if rem := f.Size - size; rem < int64(len(chunk)) {
			chunk = chunk[:rem]
		}
		n, rerr := r.Read(chunk)
		if size+int64(n) > f.Size { // (chunk never allows it; defence in depth)
			return nil, fmt.Errorf("%w: %s: more than the manifest's %d bytes", ErrCorrupt, f.Name, f.Size)
		}
		if n > 0 {
			crc = crc32.Update(crc, castagnoli, chunk[:n])
			if _, err := out.Write(chunk[:n]); err != nil {
				return nil, err
			}
			size += int64(n)
		}
		if rerr == io.EOF && size < f.Size {
			rerr = io.ErrUnexpectedEOF
		}
		if rerr != nil && rerr != io.EOF {
			return nil, streamErr("reading "+f.Name, rerr)
		}
	}
	if err := f.check(DBDir+"/"+f.Name, size, crc); err != nil {
		return nil, err
	}
	return out, nil
}

// syncer fsyncs and closes received files on its own goroutine: at most
// syncQueue files wait while one is synced and the next streams in. Every
// wait on it ends with ctx: the fetch's idle watchdog, which every
// completed fsync kicks as a received byte does, so only a disk on which
// no fsync completes for IdleTimeout fails the fetch; the goroutine
// finishes and closes the files whenever the disk returns.
type syncer struct {
	files chan *os.File
	done  chan struct{}
	once  sync.Once
	mu    sync.Mutex
	err   error // first fsync or close error; guarded by mu
}

const syncQueue = 4

// syncFile is f.Sync; tests replace it to stall the disk.
var syncFile = (*os.File).Sync

// newSyncer starts the goroutine; progress (may be nil) is called after
// each file's fsync and close succeeded.
func newSyncer(progress func()) *syncer {
	s := &syncer{files: make(chan *os.File, syncQueue), done: make(chan struct{})}
	syncf := syncFile
	go func() {
		defer close(s.done)
		for f := range s.files {
			if err := errors.Join(syncf(f), f.Close()); err != nil {
				s.mu.Lock()
				if s.err == nil {
					s.err = fmt.Errorf("checkpoint: sync %s: %w", filepath.Base(f.Name()), err)
				}
				s.mu.Unlock()
			} else if progress != nil {
				progress()
			}
		}
	}()
	return s
}

func (s *syncer) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// sync queues f, waiting while syncQueue files are queued. An earlier
// file's failure is returned as soon as it is known, and f is then closed
// unsynced; so is f when ctx ends first.
func (s *syncer) sync(ctx context.Context, f *os.File) error {
	if err := s.failed(); err != nil {
		f.Close()
		return err
	}
	select {
	case s.files <- f:
		return nil
	case <-ctx.Done():
		f.Close()
		return stalledSync(ctx)
	}
}

// errStalledSync: the fetch's idle timeout passed while received files
// waited for their fsync and none completed; the disk stalled, not the
// peer.
var errStalledSync = fmt.Errorf("%w: no fsync of received files completed within the fetch's idle timeout (the local disk stalled, not the peer)", ErrTimeout)

func stalledSync(ctx context.Context) error {
	if cause := context.Cause(ctx); !errors.Is(cause, ErrTimeout) {
		return fmt.Errorf("checkpoint: waiting for fsync of received files: %w", cause)
	}
	return errStalledSync
}

// wait closes the queue and waits until every queued file is synced and
// closed, or ctx ends, and returns the first failure.
func (s *syncer) wait(ctx context.Context) error {
	s.abandon()
	select {
	case <-s.done:
		return s.failed()
	case <-ctx.Done():
		return stalledSync(ctx)
	}
}

// abandon closes the queue without waiting: the goroutine syncs and
// closes what is queued and exits. Safe to call more than once.
func (s *syncer) abandon() { s.once.Do(func() { close(s.files) }) }

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
		now := time.Now()
		switch {
		case c.total > 0 && c.n == c.total:
			p := c.progress(now)
			p.Stage = StageStreamed
			c.last = now
			c.fn(p)
		case now.Sub(c.last) >= c.interval:
			c.last = now
			c.fn(c.progress(now))
		}
	}
	return n, err
}

func (c *countingReader) progress(now time.Time) Progress {
	el := now.Sub(c.start)
	p := Progress{Bytes: c.n, Total: c.total, Elapsed: el, Stage: StageStreaming}
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
	p.Total, p.Stage = c.n, StageVerified
	c.fn(p)
}

package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"io/fs"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// FetchStats says what one Fetch sent, reused and spent (Info.Fetch).
// Within one round, every db file of the manifest is exactly one of:
// fetched, resumed, linked from a known file, linked from a Local
// directory (or, with Existing, already held). The counts add up over
// all Rounds: a file fetched in a round whose checkpoint the source then
// deleted, and linked in the next, counts in both.
type FetchStats struct {
	Files int   // files in the manifest
	Bytes int64 // their total size

	// FetchedFiles/FetchedBytes: files requested from the source, and the
	// body bytes received for them (with Tar: every file, and the whole
	// stream's bytes).
	FetchedFiles int
	FetchedBytes int64
	// ResumedFiles/ResumedBytes: bytes of an earlier, interrupted fetch of
	// this very checkpoint (same manifest checksum) under root that were
	// verified and not fetched again: complete files, and the prefix of a
	// file in progress continued with a Range request.
	ResumedFiles int
	ResumedBytes int64
	// LinkedKnown*: hard-linked from files root already knows to have
	// that name, size and CRC32C (its checkpoints of the same origin, and
	// complete files of its other partial fetches), then read once to
	// check the CRC.
	LinkedKnownFiles int
	LinkedKnownBytes int64
	// LinkedLocal*: sstables hard-linked from FetchOptions.Local by name
	// and size, then verified by CRC.
	LinkedLocalFiles int
	LinkedLocalBytes int64
	// Rejected: local candidates (partial, known or Local files) that
	// failed their size or CRC check and were not used.
	Rejected int
	// Refetched: files fetched again from byte 0 within this Fetch: a
	// resumed file whose whole CRC failed, or a source that ignored the
	// Range request.
	Refetched int
	// Rounds: manifests fetched (more than 1 when the source deleted the
	// checkpoint mid-fetch and Fetch moved on to its newest).
	Rounds int
	// Tar: the source has no per-file endpoint (an older server); the
	// whole tar stream was received and nothing was reused.
	Tar bool
	// Existing: root already held a valid checkpoint of that index and
	// origin; it was returned and nothing was fetched.
	Existing bool

	// Time per phase: getting the manifest, matching and verifying local
	// files, transferring files (network, CRC and fsync of each file,
	// overlapped), and the final sync and open check.
	Manifest, LocalMatch, Transfer, Final time.Duration
}

// errNoFilesEndpoint: the source answered a per-file request with a 404
// that does not carry HeaderFiles: it is an older server; use the tar
// stream.
var errNoFilesEndpoint = errors.New("checkpoint: the source has no per-file endpoint")

// errGone: the source no longer holds the checkpoint being fetched (404
// with HeaderFiles, or 409: another checkpoint at that index).
var errGone = errors.New("checkpoint: the source no longer serves this checkpoint")

// maxRounds bounds how often one Fetch moves on to a newer checkpoint
// when its source deletes the one being fetched.
const maxRounds = 3

// fetchBufSize is each transfer worker's read buffer.
const fetchBufSize = 1 << 20

// writebackChunk: every this many bytes received into a file, the kernel
// is asked to start writing them back (startWriteback).
const writebackChunk = 8 << 20

// fetch is Fetch with the defaults applied.
func fetch(ctx context.Context, url, root string, o FetchOptions, progress func(Progress)) (Info, error) {
	start := time.Now()
	client, release := o.client()
	defer release()
	base := strings.TrimSuffix(url, "/")
	var st FetchStats
	for {
		st.Rounds++
		t0 := time.Now()
		m, mb, perFile, err := o.getManifest(ctx, client, base)
		st.Manifest += time.Since(t0)
		if err != nil {
			return Info{}, err
		}
		if !perFile {
			return fetchTar(ctx, url, root, o, progress, start, st)
		}
		if total := m.Bytes(); total > o.MaxBytes {
			return Info{}, fmt.Errorf("%w: fetch %s: the manifest declares %d bytes in %d files, limit %d (MaxBytes)",
				ErrTooLarge, base, total, len(m.Files), o.MaxBytes)
		}
		if o.Index != 0 && m.Index != o.Index {
			return Info{}, fmt.Errorf("%w: fetch %s: it serves index %d, not %d (Index)", ErrNoCheckpoint, base, m.Index, o.Index)
		}
		for _, f := range m.Files {
			// (<name>.part is where <name> is received: no manifest file
			// may be named so; Pebble's never are.)
			if strings.HasSuffix(f.Name, partSuffix) {
				return Info{}, fmt.Errorf("%w: fetch %s: manifest file %q ends in %q", ErrCorrupt, base, f.Name, partSuffix)
			}
		}
		f := &fetcher{o: o, client: client, base: base, root: root, m: m, mb: mb, progress: progress, start: start, st: st}
		info, err := f.run(ctx)
		switch {
		case errors.Is(err, errNoFilesEndpoint):
			// (What the per-file attempt linked stays in its partial
			// directory; the tar stream brings every file.)
			return fetchTar(ctx, url, root, o, progress, start,
				FetchStats{Rounds: f.st.Rounds, Manifest: f.st.Manifest, LocalMatch: f.st.LocalMatch})
		case errors.Is(err, errGone) && o.Index == 0 && st.Rounds < maxRounds && ctx.Err() == nil:
			st = f.st // the next round reuses what this one verified
			continue
		}
		return info, err
	}
}

// getManifest gets base/manifest (?index=N with o.Index). perFile is
// false for a source that does not advertise the per-file endpoint (no
// HeaderFiles): an older server, whose tar stream is then used.
func (o FetchOptions) getManifest(ctx context.Context, client *http.Client, base string) (m Manifest, mb []byte, perFile bool, err error) {
	murl := base + "/manifest"
	if o.Index != 0 {
		murl += "?index=" + strconv.FormatUint(o.Index, 10)
	}
	resp, rctx, wd, done, err := o.send(ctx, client, murl, nil)
	if err != nil {
		return Manifest{}, nil, false, err
	}
	defer done()
	defer resp.Body.Close()
	marked := resp.Header.Get(HeaderFiles) == FilesProtocol
	switch {
	case resp.StatusCode == http.StatusOK && marked:
		m, mb, err := o.readManifestBody(ctx, rctx, wd, resp, murl)
		return m, mb, err == nil, err
	case resp.StatusCode == http.StatusOK || (resp.StatusCode == http.StatusNotFound && !marked):
		return Manifest{}, nil, false, nil
	default:
		return Manifest{}, nil, false, statusErr(murl, resp)
	}
}

// fetcher fetches one manifest's files per file into a staging directory
// (the partial directory of that checkpoint, or a private temp dir when
// another Fetch holds the partial).
type fetcher struct {
	o        FetchOptions
	client   *http.Client
	base     string
	root     string
	m        Manifest
	mb       []byte
	progress func(Progress)
	start    time.Time

	stage string // staging directory (its db/ holds the files)
	lock  *os.File
	sy    *fileSyncer // during transfer

	got atomic.Int64 // body bytes received so far (Progress)
	mu  sync.Mutex
	st  FetchStats // guarded by mu while workers run
	// received: files fetched, synced and named (guarded by mu), for the
	// verified-file memo once the checkpoint is in place (remember).
	received []receivedFile
}

type receivedFile struct {
	name string
	fi   os.FileInfo // after its fsync
	crc  uint32
}

// remember records the files this Fetch received in the verified-file
// memo (verified.go), each only if it is still the file it synced.
func (ft *fetcher) remember(dbDir string) {
	now := time.Now()
	ft.mu.Lock()
	defer ft.mu.Unlock()
	for _, r := range ft.received {
		if fi, err := os.Lstat(filepath.Join(dbDir, r.name)); err == nil && sameID(fi, r.fi) {
			rememberVerified(fi, r.crc, now)
		}
	}
}

// job is one file to fetch: from byte off, whose prefix has CRC32C crc.
type job struct {
	f   File
	off int64
	crc uint32
	// credited: the prefix counted in ResumedBytes (the source honoured
	// the Range request)
	credited int64
}

func (ft *fetcher) add(fn func(st *FetchStats)) {
	ft.mu.Lock()
	fn(&ft.st)
	ft.mu.Unlock()
}

func (ft *fetcher) run(ctx context.Context) (info Info, err error) {
	m := ft.m
	ft.st.Files, ft.st.Bytes = len(m.Files), m.Bytes()
	defer func() { info.Fetch = ft.st }()
	final := filepath.Join(ft.root, dirName(m.Index))
	if in, ok, err := existing(final, m.Origin(), nil); ok || err != nil {
		ft.st.Existing = ok
		if ok {
			removePartials(ft.root, func(p partialDir) bool { return p.index <= m.Index })
			ft.report(StageVerified, 0)
		}
		return in, err
	}
	if err := os.MkdirAll(ft.root, 0o755); err != nil {
		return Info{}, fmt.Errorf("checkpoint: fetch: %w", err)
	}
	private := false
	ft.stage, ft.lock, err = openPartial(ft.root, m, ft.mb)
	if errors.Is(err, errPartialBusy) {
		// Another Fetch of this checkpoint holds the partial directory:
		// fetch into a private temp dir (its complete files are still
		// reused as known files).
		private = true
		ft.stage, err = os.MkdirTemp(ft.root, tmpPrefix+"fetch-")
		if err == nil {
			err = errors.Join(os.Mkdir(filepath.Join(ft.stage, DBDir), 0o755),
				writeFileSync(filepath.Join(ft.stage, ManifestName), ft.mb))
		}
	}
	if err != nil {
		return Info{}, fmt.Errorf("checkpoint: fetch: %w", err)
	}
	junk := false // the staged files are worthless: remove the partial too
	defer func() {
		if ft.lock != nil {
			ft.lock.Close()
		}
		if ft.stage != "" && (private || junk) {
			os.RemoveAll(ft.stage)
		}
	}()

	t0 := time.Now()
	jobs, err := ft.matchLocal(ctx)
	ft.st.LocalMatch = time.Since(t0)
	if err != nil {
		return Info{}, fmt.Errorf("checkpoint: fetch %s: local files: %w", ft.base, err)
	}

	t1 := time.Now()
	err = ft.transfer(ctx, jobs)
	ft.st.Transfer = time.Since(t1)
	if cerr := ctx.Err(); err != nil && cerr != nil {
		return Info{}, fmt.Errorf("checkpoint: fetch %s: %w", ft.base, cerr)
	}
	if err != nil {
		return Info{}, err
	}

	t2 := time.Now()
	defer func() { ft.st.Final = time.Since(t2) }()
	dbDir := filepath.Join(ft.stage, DBDir)
	if err := errors.Join(syncDir(dbDir), syncDir(ft.stage)); err != nil {
		return Info{}, fmt.Errorf("checkpoint: fetch: %w", err)
	}
	if err := checkLayout(ft.stage, m); err != nil {
		return Info{}, fmt.Errorf("checkpoint: fetch %s: %w", ft.base, err)
	}
	if err := checkOpens(dbDir, ft.root, m); err != nil {
		junk = true
		return Info{}, fmt.Errorf("checkpoint: fetch %s: %w", ft.base, err)
	}
	if in, ok, err := existing(final, m.Origin(), nil); ok || err != nil {
		junk = ok // another Fetch or Create installed it meanwhile
		if ok {
			ft.report(StageVerified, ft.got.Load())
		}
		return in, err
	}
	if err := os.Rename(ft.stage, final); err != nil {
		if in, ok, err2 := existing(final, m.Origin(), nil); ok || err2 != nil {
			junk = ok
			if ok {
				ft.report(StageVerified, ft.got.Load())
			}
			return in, err2
		}
		return Info{}, fmt.Errorf("checkpoint: fetch: %w", err)
	}
	ft.stage = ""
	if err := syncDir(ft.root); err != nil {
		return Info{}, fmt.Errorf("checkpoint: fetch: %w", err)
	}
	// Partial fetches of this index or older are of no use any more.
	removePartials(ft.root, func(p partialDir) bool { return p.index <= m.Index })
	ft.remember(filepath.Join(final, DBDir))
	saveVerified(ft.root)
	ft.report(StageVerified, ft.got.Load())
	return newInfo(final, m), nil
}

// report calls the Progress callback (if any) from Fetch's goroutine.
// StageVerified reports Bytes == Total == what was received.
func (ft *fetcher) report(stage string, total int64) {
	if ft.progress == nil {
		return
	}
	el := time.Since(ft.start)
	p := Progress{Bytes: ft.got.Load(), Total: total, Elapsed: el, Stage: stage}
	if stage == StageVerified {
		p.Total = p.Bytes
	}
	if el > 0 {
		p.Rate = float64(p.Bytes) / el.Seconds()
	}
	ft.progress(p)
}

// matchLocal decides, for every file of the manifest, whether it is
// already in the staging directory (an earlier partial fetch), can be
// linked from a known or Local file, or must be fetched (from where a
// partial .part file ends). It runs Parallel files at once.
func (ft *fetcher) matchLocal(ctx context.Context) ([]job, error) {
	dbDir := filepath.Join(ft.stage, DBDir)
	if err := removeStrays(dbDir, ft.m); err != nil {
		return nil, err
	}
	known := knownFiles(ft.root, ft.stage, ft.m)
	loadVerified(ft.root)
	var mu sync.Mutex
	var jobs []job
	err := forEach(ctx, len(ft.m.Files), ft.o.Parallel, func(i int, buf []byte) error {
		j, fetch, err := ft.matchOne(ctx, ft.m.Files[i], known[ft.m.Files[i].Name], buf)
		if err == nil && fetch {
			mu.Lock()
			jobs = append(jobs, j)
			mu.Unlock()
		}
		return err
	})
	// Largest first, so that the last files to arrive are small ones.
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].f.Size-jobs[a].off > jobs[b].f.Size-jobs[b].off })
	return jobs, err
}

// matchOne handles one file (see matchLocal); fetch says it is to be
// fetched as j.
func (ft *fetcher) matchOne(ctx context.Context, f File, known []string, buf []byte) (j job, fetch bool, err error) {
	dst := filepath.Join(ft.stage, DBDir, f.Name)
	part := dst + partSuffix
	// 1. A complete file of an earlier partial fetch: verified again.
	if ok, err := ft.checkPresent(dst, f, buf); err != nil || ok {
		if ok {
			ft.add(func(st *FetchStats) { st.ResumedFiles++; st.ResumedBytes += f.Size })
		}
		return job{}, false, err
	}
	// 2. Known files (root's checkpoints and other partials).
	for _, src := range known {
		if ok, err := ft.linkVerified(ctx, src, dst, f, buf); err != nil || ok {
			if ok {
				os.Remove(part)
				ft.add(func(st *FetchStats) { st.LinkedKnownFiles++; st.LinkedKnownBytes += f.Size })
			}
			return job{}, false, err
		}
	}
	// 3. Local directories, sstables by name and size.
	if strings.HasSuffix(f.Name, ".sst") {
		for _, dir := range ft.o.Local {
			src := filepath.Join(dir, f.Name)
			// Lstat: a symlink is not taken (os.Link would link the
			// link itself, which checkLayout then refuses).
			if fi, err := os.Lstat(src); err != nil || !fi.Mode().IsRegular() || fi.Size() != f.Size {
				continue
			}
			if ok, err := ft.linkVerified(ctx, src, dst, f, buf); err != nil || ok {
				if ok {
					os.Remove(part)
					ft.add(func(st *FetchStats) { st.LinkedLocalFiles++; st.LinkedLocalBytes += f.Size })
				}
				return job{}, false, err
			}
		}
	}
	// 4. Fetch it, continuing a .part of an earlier partial fetch.
	j = job{f: f}
	fi, err := os.Lstat(part)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return j, true, nil
	case err != nil:
		return job{}, false, err
	case !fi.Mode().IsRegular() || fi.Size() > f.Size:
		ft.add(func(st *FetchStats) { st.Rejected++ })
		return j, true, os.RemoveAll(part)
	}
	size, crc, err := checksumFile(part, buf, false, nil)
	if err != nil {
		return job{}, false, err
	}
	if size == f.Size {
		// Received entirely before the interruption: finish it here.
		if f.check(part, size, crc) == nil {
			if err := syncRename(part, dst); err != nil {
				return job{}, false, err
			}
			ft.add(func(st *FetchStats) { st.ResumedFiles++; st.ResumedBytes += f.Size })
			return job{}, false, nil
		}
		ft.add(func(st *FetchStats) { st.Rejected++ })
		return j, true, os.Remove(part)
	}
	j.off, j.crc = size, crc
	return j, true, nil
}

// checkPresent reports whether dst holds f (size and CRC32C); a file that
// does not is removed.
func (ft *fetcher) checkPresent(dst string, f File, buf []byte) (bool, error) {
	fi, err := os.Lstat(dst)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if verifiedAs(dst, f) {
		return true, nil
	}
	if fi.Mode().IsRegular() && fi.Size() == f.Size {
		size, crc, err := checksumRemembered(dst, buf)
		if err != nil {
			return false, err
		}
		if f.check(dst, size, crc) == nil {
			return true, nil
		}
	}
	ft.add(func(st *FetchStats) { st.Rejected++ })
	return false, os.RemoveAll(dst)
}

// linkVerified hard-links src to dst (copying, with the CRC checked on
// the way, across filesystems) and reads dst once to check f's size and
// CRC32C. A source gone meanwhile or failing the check is not used (ok
// false, dst removed); err is for local failures that should stop the
// fetch.
func (ft *fetcher) linkVerified(ctx context.Context, src, dst string, f File, buf []byte) (ok bool, err error) {
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if err := os.Link(src, dst); err != nil {
		if !errors.Is(err, syscall.EXDEV) {
			return false, nil
		}
		if err := copyChecked(ctx, src, dst, f, buf); err != nil {
			os.Remove(dst)
			if errors.Is(err, ErrCorrupt) {
				ft.add(func(st *FetchStats) { st.Rejected++ })
			}
			return false, nil
		}
		return true, nil
	}
	if verifiedAs(dst, f) {
		return true, nil
	}
	size, crc, err := checksumRemembered(dst, buf)
	if err == nil && f.check(src, size, crc) == nil {
		return true, nil
	}
	ft.add(func(st *FetchStats) { st.Rejected++ })
	return false, os.Remove(dst)
}

// transfer fetches jobs, Parallel at once, calling Progress from this
// goroutine. A failed file stops new files from being started; files
// already streaming finish (what they receive is kept for a later
// resume), and the first error is returned.
func (ft *fetcher) transfer(ctx context.Context, jobs []job) error {
	var total int64
	for _, j := range jobs {
		total += j.f.Size - j.off
	}
	ft.report(StageStreaming, total)
	ft.sy = newFileSyncer(ctx, max(1, ft.o.Parallel/2), ft.o.Parallel, ft.o.IdleTimeout)
	ft.sy.done = func(dst string, fi os.FileInfo, crc uint32) {
		ft.mu.Lock()
		ft.received = append(ft.received, receivedFile{name: filepath.Base(dst), fi: fi, crc: crc})
		ft.mu.Unlock()
	}
	done := make(chan error, 1)
	go func() {
		err := forEachBuf(ctx, len(jobs), ft.o.Parallel, fetchBufSize, func(i int, buf []byte) error {
			return ft.fetchFile(ctx, jobs[i], buf)
		})
		// Files received before a failure are still synced and named:
		// a later Fetch resumes from them.
		done <- errors.Join(err, ft.sy.wait())
	}()
	tick := time.NewTicker(ft.o.ProgressInterval)
	defer tick.Stop()
	for {
		select {
		case err := <-done:
			if err != nil {
				return err
			}
			ft.report(StageStreamed, total)
			return nil
		case <-tick.C:
			ft.report(StageStreaming, total)
		}
	}
}

// fileURL is the per-file endpoint for f of the manifest.
func (ft *fetcher) fileURL(f File) string {
	return ft.base + filesPath + neturl.PathEscape(f.Name) + "?index=" + strconv.FormatUint(ft.m.Index, 10) + "&sum=" + ft.m.Checksum
}

// fetchFile receives j.f into its .part file from j.off (a Range
// request), verifying size and CRC32C while receiving, fsyncs it and
// renames it to its final name. A resumed file whose whole CRC fails is
// fetched once more from byte 0.
func (ft *fetcher) fetchFile(ctx context.Context, j job, buf []byte) error {
	ft.add(func(st *FetchStats) { st.FetchedFiles++ })
	for attempt := 0; ; attempt++ {
		resumed := j.off > 0
		err := ft.fetchOnce(ctx, &j, buf)
		if err == nil || !errors.Is(err, ErrCorrupt) || !resumed || attempt > 0 {
			return err
		}
		// The prefix kept from an earlier fetch was bad: start over.
		credited := j.credited
		ft.add(func(st *FetchStats) { st.Refetched++; st.ResumedBytes -= credited })
		j.off, j.crc, j.credited = 0, 0, 0
	}
}

func (ft *fetcher) fetchOnce(ctx context.Context, j *job, buf []byte) error {
	f := j.f
	u := ft.fileURL(f)
	dst := filepath.Join(ft.stage, DBDir, f.Name)
	part := dst + partSuffix
	var hdr http.Header
	if j.off > 0 {
		hdr = http.Header{"Range": {fmt.Sprintf("bytes=%d-", j.off)}}
	}
	resp, rctx, wd, done, err := ft.o.send(ctx, ft.client, u, hdr)
	if err != nil {
		return err
	}
	defer done()
	defer resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusPartialContent:
		if j.off == 0 {
			return fmt.Errorf("%w: fetch %s: a partial answer to a request for the whole file", ErrCorrupt, u)
		}
		var first, last, size int64
		cr := resp.Header.Get("Content-Range")
		if _, err := fmt.Sscanf(cr, "bytes %d-%d/%d", &first, &last, &size); err != nil || first != j.off || last != f.Size-1 || size != f.Size {
			return fmt.Errorf("%w: fetch %s: Content-Range %q, asked bytes %d-%d/%d", ErrCorrupt, u, cr, j.off, f.Size-1, f.Size)
		}
		off := j.off
		j.credited = off
		ft.add(func(st *FetchStats) { st.ResumedBytes += off })
	case http.StatusOK:
		if j.off > 0 {
			// The source ignored the Range request: start the file over.
			ft.add(func(st *FetchStats) { st.Refetched++ })
			j.off, j.crc = 0, 0
		}
	case http.StatusNotFound:
		if resp.Header.Get(HeaderFiles) != FilesProtocol {
			return errNoFilesEndpoint
		}
		return fmt.Errorf("%w: %w", errGone, statusErr(u, resp))
	case http.StatusConflict:
		return fmt.Errorf("%w: %w: %w", errGone, ErrNoCheckpoint, statusErr(u, resp))
	default:
		return statusErr(u, resp)
	}
	if want := f.Size - j.off; resp.ContentLength >= 0 && resp.ContentLength != want {
		return fmt.Errorf("%w: fetch %s: %d bytes announced, the manifest leaves %d", ErrCorrupt, u, resp.ContentLength, want)
	}
	wd.arm(ft.o.IdleTimeout, fmt.Errorf("%w: %s sent nothing for %v (idle timeout)", ErrTimeout, u, ft.o.IdleTimeout))
	body := &rateReader{r: kickReader{resp.Body, wd}, start: time.Now(), grace: ft.o.IdleTimeout, rate: ft.o.MinRate, url: u}

	flags := os.O_WRONLY | os.O_CREATE
	if j.off == 0 {
		flags |= os.O_TRUNC
	}
	out, err := os.OpenFile(part, flags, 0o644)
	if err != nil {
		return fmt.Errorf("checkpoint: fetch: %w", err)
	}
	defer func() {
		if out != nil {
			out.Close()
		}
	}()
	if j.off > 0 {
		// The prefix is exactly what was checksummed.
		if err := out.Truncate(j.off); err != nil {
			return fmt.Errorf("checkpoint: fetch: %w", err)
		}
		if _, err := out.Seek(j.off, io.SeekStart); err != nil {
			return fmt.Errorf("checkpoint: fetch: %w", err)
		}
	}
	size, crc := j.off, j.crc
	kicked := size // bytes handed to startWriteback
	for size < f.Size {
		// What arrived is written at once, in writes of up to minWrite
		// gathered reads (a TLS connection returns one 16 KiB record per
		// Read; a write per record held TLS fetches at 0.55-0.65x plain,
		// gathered 0.80-0.83x: bench/README, issue 44), and
		// before any error is handled: it is on disk (in the page cache)
		// when the source or ctx stops, so a resume never asks for it
		// again. Only a killed process loses the at most minWrite bytes
		// it gathered.
		chunk := buf[:min(int64(len(buf)), f.Size-size)]
		n, rerr := gather(body, chunk, minWrite)
		if n > 0 {
			crc = crc32.Update(crc, castagnoli, chunk[:n])
			if _, err := out.Write(chunk[:n]); err != nil {
				return fmt.Errorf("checkpoint: fetch: %w", err)
			}
			size += int64(n)
			if size-kicked >= writebackChunk {
				startWriteback(out, kicked, size-kicked)
				kicked = size
			}
			ft.got.Add(int64(n))
			ft.add(func(st *FetchStats) { st.FetchedBytes += int64(n) })
		}
		if rerr == io.EOF && size == f.Size {
			break
		}
		if rerr != nil {
			if errors.Is(rerr, io.ErrUnexpectedEOF) || errors.Is(rerr, io.EOF) {
				rerr = fmt.Errorf("the source sent %d of %d bytes of %s: %w", size, f.Size, f.Name, io.ErrUnexpectedEOF)
			}
			return fetchErr(ctx, rctx, u, rerr)
		}
	}
	if err := f.check(DBDir+"/"+f.Name, size, crc); err != nil {
		out.Close()
		out = nil
		os.Remove(part)
		return fmt.Errorf("checkpoint: fetch %s: %w", u, err)
	}
	wd.stop()
	startWriteback(out, kicked, size-kicked)
	done() // (the connection goes back to the pool while the file syncs)
	f2 := out
	out = nil
	return ft.sy.put(ctx, syncItem{f: f2, part: part, dst: dst, crc: crc})
}

// minWrite: fetchOnce gathers reads up to this many bytes per write.
const minWrite = 256 << 10

// gather reads into p until it holds at least min(want, len(p)) bytes or
// a read fails or returns nothing; it returns what it read and the error
// that stopped it (nil when it reached want).
func gather(r io.Reader, p []byte, want int) (int, error) {
	want = min(want, len(p))
	n := 0
	for n < want {
		m, err := r.Read(p[n:])
		n += m
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
	}
	return n, nil
}

// fileSyncer fsyncs received (verified) files and renames them to their
// final names on its own goroutines, so that a transfer worker starts
// its next file at once: the disk flushes one file while the network
// delivers the next. Each fsync is bounded by the idle timeout
// (errStalledSync); after the first failure, or once ctx ended, the
// remaining files are closed unsynced and keep their .part names (a
// resume checks them).
type fileSyncer struct {
	// done, if set, is called for each file synced and renamed, with its
	// Stat after the fsync.
	done func(dst string, fi os.FileInfo, crc uint32)
	q    chan syncItem
	wg   sync.WaitGroup
	idle time.Duration
	once sync.Once
	mu   sync.Mutex
	err  error // first failure; guarded by mu
}

type syncItem struct {
	f         *os.File
	part, dst string
	crc       uint32 // of every byte received into f, checked against the manifest
}

func newFileSyncer(ctx context.Context, workers, queue int, idle time.Duration) *fileSyncer {
	s := &fileSyncer{q: make(chan syncItem, queue), idle: idle}
	for i := 0; i < workers; i++ {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			for it := range s.q {
				if s.failed() != nil || ctx.Err() != nil {
					it.f.Close() // (kept as .part: a resume checks it)
					continue
				}
				err := syncBounded(ctx, it.f, idle)
				var fi os.FileInfo
				if err == nil {
					fi, _ = it.f.Stat()
				}
				if cerr := it.f.Close(); err == nil && cerr != nil {
					err = fmt.Errorf("checkpoint: close %s: %w", it.part, cerr)
				}
				if err == nil {
					err = os.Rename(it.part, it.dst)
				}
				if err == nil && fi != nil && s.done != nil {
					s.done(it.dst, fi, it.crc)
				}
				if err != nil {
					s.mu.Lock()
					if s.err == nil {
						s.err = err
					}
					s.mu.Unlock()
				}
			}
		}()
	}
	return s
}

func (s *fileSyncer) failed() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// put queues it (taking over its file), waiting at most the idle timeout
// for room: a queue that stays full is a disk whose fsyncs stalled.
func (s *fileSyncer) put(ctx context.Context, it syncItem) error {
	if err := s.failed(); err != nil {
		it.f.Close()
		return err
	}
	t := time.NewTimer(s.idle)
	defer t.Stop()
	select {
	case s.q <- it:
		return nil
	case <-ctx.Done():
		it.f.Close()
		return ctx.Err()
	case <-t.C:
		it.f.Close()
		return errStalledSync
	}
}

// wait closes the queue, waits for every queued file and returns the
// first failure.
func (s *fileSyncer) wait() error {
	s.once.Do(func() { close(s.q) })
	s.wg.Wait()
	return s.failed()
}

// syncBounded fsyncs f (syncFile), waiting at most d (errStalledSync) or
// until ctx ends; a stalled fsync finishes on its own goroutine.
func syncBounded(ctx context.Context, f *os.File, d time.Duration) error {
	res := make(chan error, 1)
	syncf := syncFile
	go func() { res <- syncf(f) }()
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case err := <-res:
		if err != nil {
			return fmt.Errorf("checkpoint: sync %s: %w", filepath.Base(f.Name()), err)
		}
		return nil
	case <-t.C:
		return errStalledSync
	case <-ctx.Done():
		return ctx.Err()
	}
}

// syncRename fsyncs the file at from and renames it to to.
func syncRename(from, to string) error {
	f, err := os.OpenFile(from, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return err
	}
	return os.Rename(from, to)
}

// forEach runs fn(i) for i in [0, n) on up to par goroutines, each with
// its own copyBufSize buffer. After the first error no new i is started;
// running calls finish. It returns the first error.
func forEach(ctx context.Context, n, par int, fn func(i int, buf []byte) error) error {
	return forEachBuf(ctx, n, par, copyBufSize, fn)
}

func forEachBuf(ctx context.Context, n, par, bufSize int, fn func(i int, buf []byte) error) error {
	var next atomic.Int64
	var mu sync.Mutex
	var first error
	failed := func() bool {
		mu.Lock()
		defer mu.Unlock()
		return first != nil
	}
	var wg sync.WaitGroup
	for w := 0; w < min(par, n); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, bufSize)
			for {
				i := int(next.Add(1) - 1)
				if i >= n || failed() {
					return
				}
				err := ctx.Err()
				if err == nil {
					err = fn(i, buf)
				}
				if err != nil {
					mu.Lock()
					if first == nil {
						first = err
					}
					mu.Unlock()
					return
				}
			}
		}()
	}
	wg.Wait()
	return first
}

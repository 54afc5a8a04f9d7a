package checkpoint

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The trust-boundary tests of this package: origin, hostile peers, junk.

var trustOrigin = Origin{Room: "r", RoomCzxid: 0x1234}

// trustCkpt creates a checkpoint of a small store under a fresh root.
func trustCkpt(t *testing.T, entries int) (Info, string) {
	t.Helper()
	s := newStore(t, entries, 1000)
	root := t.TempDir()
	info, err := Create(context.Background(), s, root, trustOrigin)
	require.NoError(t, err)
	return info, root
}

// fetchBounded runs Fetch with a guard deadline so that a hang is an
// assertion failure, not a stuck test, and returns how long it took.
func fetchBounded(t *testing.T, url, dst string, opts FetchOptions) (Info, time.Duration, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	info, err := Fetch(ctx, url, dst, opts)
	took := time.Since(start)
	require.NoError(t, ctx.Err(), "Fetch was only stopped by the test's guard deadline (%v): %v", took, err)
	return info, took, err
}

// requireNothingListed checks that dst holds no checkpoint and no temp dir.
func requireNothingListed(t *testing.T, dst string) {
	t.Helper()
	require.Empty(t, dirNames(t, dst), "something left under %s", dst)
	l, err := List(dst)
	require.NoError(t, err)
	require.Empty(t, l)
}

// countingHandler counts requests.
func countingHandler(n *atomic.Int64, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n.Add(1)
		h.ServeHTTP(w, r)
	})
}

func TestCkptTrustManifestOrigin(t *testing.T) {
	info, _ := trustCkpt(t, 50)
	require.Equal(t, FormatVersion, info.Manifest.FormatVersion)
	require.Equal(t, trustOrigin, info.Manifest.Origin())
	b, err := os.ReadFile(filepath.Join(info.Path, ManifestName))
	require.NoError(t, err)
	require.Contains(t, string(b), `"RoomCzxid": 4660`)

	// The checksum covers the czxid: editing it is corruption.
	edited := bytes.Replace(b, []byte(`"RoomCzxid": 4660`), []byte(`"RoomCzxid": 4661`), 1)
	_, err = ParseManifest(edited)
	require.ErrorIs(t, err, ErrCorrupt)

	require.NoError(t, info.Manifest.CheckOrigin(trustOrigin))
	for _, other := range []Origin{{Room: "r", RoomCzxid: 0x1235}, {Room: "r2", RoomCzxid: 0x1234}} {
		err := info.Manifest.CheckOrigin(other)
		require.ErrorIs(t, err, ErrForeign)
		require.NotErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "0x1234")
		require.Contains(t, err.Error(), fmt.Sprintf("0x%x", other.RoomCzxid))
	}

	// Create refuses to write a checkpoint without an origin.
	s := newStore(t, 5, 10)
	_, err = Create(context.Background(), s, t.TempDir(), Origin{Room: "r"})
	require.Error(t, err)

	// A format-2 manifest needs a czxid; a format-1 one must not have one.
	for _, m := range []Manifest{
		{FormatVersion: 2, Room: "r", Files: []File{}},
		{FormatVersion: 2, Room: "r", RoomCzxid: -3, Files: []File{}},
		{FormatVersion: 1, Room: "r", RoomCzxid: 7, Files: []File{}},
	} {
		_, err := m.Marshal()
		require.ErrorIs(t, err, ErrCorrupt, "%+v", m)
	}
}

// legacyCopy copies the checkpoint at info into a new root, rewriting its
// manifest as format 1 (no origin), as written before origins existed.
func legacyCopy(t *testing.T, info Info) Info {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, filepath.Base(info.Path))
	copyTree(t, info.Path, dir)
	m := info.Manifest
	m.FormatVersion, m.RoomCzxid = 1, 0
	b := resign(t, m)
	require.NotContains(t, string(b), "RoomCzxid", "a format-1 manifest has no czxid field")
	require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestName), b, 0o644))
	got, err := Verify(dir)
	require.NoError(t, err, "a format-1 checkpoint is still a valid checkpoint")
	require.Equal(t, Origin{Room: "r"}, got.Origin())
	return newInfo(dir, got)
}

func TestCkptTrustRestoreRefusesForeign(t *testing.T) {
	ctx := context.Background()
	info, _ := trustCkpt(t, 200)

	// Another incarnation of the same room name: refused, nothing at storeDir.
	storeDir := filepath.Join(t.TempDir(), "store")
	err := Restore(ctx, info.Path, storeDir, Origin{Room: "r", RoomCzxid: 0x9999})
	require.ErrorIs(t, err, ErrForeign)
	require.Contains(t, err.Error(), "0x1234")
	require.Contains(t, err.Error(), "0x9999")
	t.Logf("refused: %v", err)
	_, serr := os.Stat(storeDir)
	require.ErrorIs(t, serr, fs.ErrNotExist)
	require.Empty(t, dirNames(t, filepath.Dir(storeDir)), "no temp dir left")

	// An existing (empty) store dir stays as it was.
	empty := t.TempDir()
	require.ErrorIs(t, Restore(ctx, info.Path, empty, Origin{Room: "r", RoomCzxid: 0x9999}), ErrForeign)
	require.Empty(t, dirNames(t, empty))

	// A format-1 checkpoint has no origin: refused as foreign.
	legacy := legacyCopy(t, info)
	err = Restore(ctx, legacy.Path, storeDir, trustOrigin)
	require.ErrorIs(t, err, ErrForeign)
	require.Contains(t, err.Error(), "format 1")

	// Without an origin to check against, Restore refuses to guess.
	require.Error(t, Restore(ctx, info.Path, storeDir, Origin{}))
	_, serr = os.Stat(storeDir)
	require.ErrorIs(t, serr, fs.ErrNotExist)

	// The right origin restores.
	require.NoError(t, Restore(ctx, info.Path, storeDir, trustOrigin))
}

func TestCkptTrustFetchRefusesForeign(t *testing.T) {
	info, root := trustCkpt(t, 3000)
	var n atomic.Int64
	srv := httptest.NewServer(countingHandler(&n, Handler(root)))
	defer srv.Close()

	dst := filepath.Join(t.TempDir(), "dst")
	_, _, err := fetchBounded(t, srv.URL, dst, FetchOptions{Origin: Origin{Room: "r", RoomCzxid: 0x4321}})
	require.ErrorIs(t, err, ErrForeign)
	require.Contains(t, err.Error(), "0x4321")
	require.Contains(t, err.Error(), "0x1234")
	requireNothingListed(t, dst)

	legacy := legacyCopy(t, info)
	lsrv := httptest.NewServer(Handler(filepath.Dir(legacy.Path)))
	defer lsrv.Close()
	_, _, err = fetchBounded(t, lsrv.URL, dst, FetchOptions{Origin: trustOrigin})
	require.ErrorIs(t, err, ErrForeign)
	requireNothingListed(t, dst)

	// A local checkpoint of the same index but another origin is replaced
	// by the fetched one, never returned in its place.
	foreignRoot := filepath.Join(t.TempDir(), "mixed")
	fdir := filepath.Join(foreignRoot, filepath.Base(info.Path))
	copyTree(t, info.Path, fdir)
	fm := info.Manifest
	fm.RoomCzxid = 0x5555
	require.NoError(t, os.WriteFile(filepath.Join(fdir, ManifestName), resign(t, fm), 0o644))
	got, _, err := fetchBounded(t, srv.URL, foreignRoot, FetchOptions{Origin: trustOrigin})
	require.NoError(t, err)
	require.Equal(t, trustOrigin, got.Manifest.Origin())
	l, err := List(foreignRoot)
	require.NoError(t, err)
	require.Len(t, l, 1)
	require.Equal(t, trustOrigin, l[0].Manifest.Origin())

	// And without an Origin option Fetch is transport only: it accepts.
	got, _, err = fetchBounded(t, srv.URL, filepath.Join(t.TempDir(), "any"), FetchOptions{})
	require.NoError(t, err)
	require.Equal(t, info.Manifest.Checksum, got.Manifest.Checksum)
}

// stallHandler answers GET / with 200 and the full Content-Length of
// stream, sends its first `after` bytes, flushes, and then sends nothing
// until the client goes away or the test ends. Other paths are 404 (a
// server with the stream only).
func stallHandler(t *testing.T, stream []byte, after int, stalled *atomic.Int64) http.Handler {
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(stream)))
		w.WriteHeader(http.StatusOK)
		w.Write(stream[:after])
		http.NewResponseController(w).Flush()
		stalled.Add(1)
		select {
		case <-r.Context().Done():
		case <-done:
		}
	})
}

func TestCkptTrustFetchStalledPeer(t *testing.T) {
	info, _ := trustCkpt(t, 3000)
	_, es := ckptEntries(t, info.Path)
	stream := tarBytes(t, es)
	const idle = 300 * time.Millisecond

	t.Run("mid-stream", func(t *testing.T) {
		var stalled atomic.Int64
		srv := httptest.NewServer(stallHandler(t, stream, len(stream)/2, &stalled))
		t.Cleanup(srv.Close)
		dst := filepath.Join(t.TempDir(), "dst")
		_, took, err := fetchBounded(t, srv.URL, dst, FetchOptions{IdleTimeout: idle, Origin: trustOrigin})
		require.ErrorIs(t, err, ErrTimeout)
		require.Contains(t, err.Error(), "idle")
		require.EqualValues(t, 1, stalled.Load())
		require.GreaterOrEqual(t, took, idle)
		require.Less(t, took, idle+3*time.Second, "the stall must end the fetch within the idle timeout")
		requireNothingListed(t, dst)
		t.Logf("after %v: %v", took, err)
	})
	t.Run("trickle", func(t *testing.T) {
		// A byte every 100 ms: never idle for 300 ms, but far below
		// MinRate once the grace (the idle timeout) has passed.
		done := make(chan struct{})
		t.Cleanup(func() { close(done) })
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Length", strconv.Itoa(len(stream)))
			w.WriteHeader(http.StatusOK)
			rc := http.NewResponseController(w)
			for i := 0; i < len(stream); i++ {
				if _, err := w.Write(stream[i : i+1]); err != nil {
					return
				}
				rc.Flush()
				select {
				case <-r.Context().Done():
					return
				case <-done:
					return
				case <-time.After(100 * time.Millisecond):
				}
			}
		}))
		t.Cleanup(srv.Close)
		dst := filepath.Join(t.TempDir(), "dst")
		_, took, err := fetchBounded(t, srv.URL, dst, FetchOptions{IdleTimeout: idle, MinRate: 1 << 10})
		require.ErrorIs(t, err, ErrTimeout)
		require.Contains(t, err.Error(), "MinRate")
		require.Less(t, took, idle+3*time.Second, "a trickling peer must not hold the fetch")
		requireNothingListed(t, dst)
	})
	t.Run("headers only", func(t *testing.T) {
		var stalled atomic.Int64
		srv := httptest.NewServer(stallHandler(t, stream, 0, &stalled))
		t.Cleanup(srv.Close)
		dst := filepath.Join(t.TempDir(), "dst")
		_, took, err := fetchBounded(t, srv.URL, dst, FetchOptions{IdleTimeout: idle})
		require.ErrorIs(t, err, ErrTimeout)
		require.Less(t, took, idle+3*time.Second)
		requireNothingListed(t, dst)
	})
	t.Run("no headers", func(t *testing.T) {
		// A peer that accepts the connection and never answers.
		done := make(chan struct{})
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			select {
			case <-r.Context().Done():
			case <-done:
			}
		}))
		t.Cleanup(srv.Close)
		t.Cleanup(func() { close(done) })
		dst := filepath.Join(t.TempDir(), "dst")
		_, took, err := fetchBounded(t, srv.URL, dst, FetchOptions{ResponseHeaderTimeout: idle, IdleTimeout: time.Hour})
		require.ErrorIs(t, err, ErrTimeout)
		require.Less(t, took, idle+3*time.Second)
		requireNothingListed(t, dst)
		// FetchManifest is bounded the same way.
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		_, err = FetchManifest(ctx, srv.URL, FetchOptions{ResponseHeaderTimeout: idle})
		require.ErrorIs(t, err, ErrTimeout)
		require.NoError(t, ctx.Err())
	})
	t.Run("no accept", func(t *testing.T) {
		// A listener whose backlog completes the TCP handshake but that never
		// accepts: the request is written into the void.
		srv := httptest.NewUnstartedServer(http.NotFoundHandler())
		t.Cleanup(func() { srv.Listener.Close() })
		dst := filepath.Join(t.TempDir(), "dst")
		_, took, err := fetchBounded(t, "http://"+srv.Listener.Addr().String(), dst,
			FetchOptions{ConnectTimeout: idle, ResponseHeaderTimeout: idle})
		require.ErrorIs(t, err, ErrTimeout)
		require.Less(t, took, 2*idle+3*time.Second)
		requireNothingListed(t, dst)
	})
}

func TestCkptTrustFetchNoRedirect(t *testing.T) {
	_, root := trustCkpt(t, 200)
	var target atomic.Int64
	good := httptest.NewServer(countingHandler(&target, Handler(root)))
	defer good.Close()
	for _, code := range []int{http.StatusMovedPermanently, http.StatusFound, http.StatusTemporaryRedirect, http.StatusPermanentRedirect} {
		redir := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			http.Redirect(w, r, good.URL+r.URL.Path, code)
		}))
		dst := filepath.Join(t.TempDir(), "dst")
		_, _, err := fetchBounded(t, redir.URL, dst, FetchOptions{Origin: trustOrigin})
		require.Error(t, err, "status %d", code)
		require.Contains(t, err.Error(), good.URL, "the error names the Location")
		require.Contains(t, err.Error(), strconv.Itoa(code))
		requireNothingListed(t, dst)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		_, err = FetchManifest(ctx, redir.URL, FetchOptions{})
		cancel()
		require.Error(t, err)
		require.Contains(t, err.Error(), good.URL)
		// Also through a caller's client that would follow redirects.
		_, _, err = fetchBounded(t, redir.URL, dst, FetchOptions{Client: &http.Client{}})
		require.Error(t, err)
		redir.Close()
	}
	require.Zero(t, target.Load(), "a redirect was followed")
}

// maxFileSizeUnder returns the size of the largest regular file under dir.
func maxFileSizeUnder(dir string) int64 {
	var max int64
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if fi, err := d.Info(); err == nil && fi.Size() > max {
				max = fi.Size()
			}
		}
		return nil
	})
	return max
}

// watchSizes records the largest file seen under dir until stop is called.
func watchSizes(dir string) (stop func() int64) {
	var max atomic.Int64
	quit := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if s := maxFileSizeUnder(dir); s > max.Load() {
				max.Store(s)
			}
			select {
			case <-quit:
				return
			case <-time.After(time.Millisecond):
			}
		}
	}()
	return func() int64 {
		close(quit)
		wg.Wait()
		if s := maxFileSizeUnder(dir); s > max.Load() {
			max.Store(s)
		}
		return max.Load()
	}
}

// hugeHandler streams a tar with the manifest mb and then one entry named
// name whose header claims hdrSize bytes, sending zeros lazily until the
// client stops reading. sent counts the body bytes written.
func hugeHandler(mb []byte, name string, hdrSize int64, sent *atomic.Int64) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusOK)
		cw := &countWriter{w: w, n: sent}
		tw := tar.NewWriter(cw)
		if tw.WriteHeader(&tar.Header{Name: ManifestName, Typeflag: tar.TypeReg, Size: int64(len(mb)), Mode: 0o644}) != nil {
			return
		}
		if _, err := tw.Write(mb); err != nil {
			return
		}
		if tw.WriteHeader(&tar.Header{Name: DBDir + "/" + name, Typeflag: tar.TypeReg, Size: hdrSize, Mode: 0o644}) != nil {
			return
		}
		chunk := make([]byte, 256<<10)
		for left := hdrSize; left > 0; left -= int64(len(chunk)) {
			if _, err := tw.Write(chunk[:min(left, int64(len(chunk)))]); err != nil {
				return
			}
		}
		tw.Close()
	})
}

type countWriter struct {
	w http.ResponseWriter
	n *atomic.Int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func TestCkptTrustFetchSizeLimits(t *testing.T) {
	const declared = 1 << 20
	const huge = 200 << 20
	forged := func(size int64) []byte {
		m := Manifest{FormatVersion: FormatVersion, Room: "r", RoomCzxid: trustOrigin.RoomCzxid, Epoch: 1, Index: 77,
			Files: []File{{Name: "000001.sst", Size: size, CRC32C: 1}}}
		return resign(t, m)
	}

	t.Run("file larger than the manifest declares", func(t *testing.T) {
		var sent atomic.Int64
		srv := httptest.NewServer(hugeHandler(forged(declared), "000001.sst", huge, &sent))
		defer srv.Close()
		dst := filepath.Join(t.TempDir(), "dst")
		stop := watchSizes(dst)
		_, _, err := fetchBounded(t, srv.URL, dst, FetchOptions{Origin: trustOrigin})
		biggest := stop()
		require.ErrorIs(t, err, ErrCorrupt)
		require.LessOrEqual(t, biggest, int64(declared+copyBufSize), "a file on disk outgrew its declared size")
		require.Less(t, sent.Load(), int64(huge/2), "the fetch kept reading a stream it had refused")
		requireNothingListed(t, dst)
		t.Logf("refused after the peer sent %d bytes (largest file seen %d): %v", sent.Load(), biggest, err)
	})

	t.Run("total above MaxBytes", func(t *testing.T) {
		var sent atomic.Int64
		srv := httptest.NewServer(hugeHandler(forged(huge), "000001.sst", huge, &sent))
		defer srv.Close()
		dst := filepath.Join(t.TempDir(), "dst")
		stop := watchSizes(dst)
		_, _, err := fetchBounded(t, srv.URL, dst, FetchOptions{MaxBytes: 16 << 20})
		biggest := stop()
		require.ErrorIs(t, err, ErrTooLarge)
		require.Contains(t, err.Error(), strconv.Itoa(huge))
		require.Zero(t, biggest, "nothing is written for a checkpoint over the limit")
		require.Less(t, sent.Load(), int64(huge/2))
		requireNothingListed(t, dst)
	})

	t.Run("default MaxBytes", func(t *testing.T) {
		var sent atomic.Int64
		srv := httptest.NewServer(hugeHandler(forged(DefaultMaxBytes+1), "000001.sst", DefaultMaxBytes+1, &sent))
		defer srv.Close()
		dst := filepath.Join(t.TempDir(), "dst")
		_, _, err := fetchBounded(t, srv.URL, dst, FetchOptions{})
		require.ErrorIs(t, err, ErrTooLarge)
		requireNothingListed(t, dst)
	})

	t.Run("manifest above MaxManifestBytes", func(t *testing.T) {
		info, root := trustCkpt(t, 50)
		srv := httptest.NewServer(Handler(root))
		defer srv.Close()
		mb, err := os.ReadFile(filepath.Join(info.Path, ManifestName))
		require.NoError(t, err)
		limit := int64(len(mb) - 1)
		dst := filepath.Join(t.TempDir(), "dst")
		_, _, err = fetchBounded(t, srv.URL, dst, FetchOptions{MaxManifestBytes: limit})
		require.Error(t, err)
		require.Contains(t, err.Error(), "manifest")
		requireNothingListed(t, dst)
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, err = FetchManifest(ctx, srv.URL, FetchOptions{MaxManifestBytes: limit})
		require.Error(t, err)
		_, err = FetchManifest(ctx, srv.URL, FetchOptions{Origin: trustOrigin})
		require.NoError(t, err)
	})

	t.Run("exact limits admit a real checkpoint", func(t *testing.T) {
		info, root := trustCkpt(t, 3000) // a few MB: more than the stream bound before the manifest
		srv := httptest.NewServer(Handler(root))
		defer srv.Close()
		mb, err := os.ReadFile(filepath.Join(info.Path, ManifestName))
		require.NoError(t, err)
		require.Greater(t, info.Bytes, int64(len(mb)+512+streamSlack))
		exact := FetchOptions{Origin: trustOrigin, MaxBytes: info.Bytes, MaxManifestBytes: int64(len(mb))}
		got, _, err := fetchBounded(t, srv.URL, filepath.Join(t.TempDir(), "dst"), exact)
		require.NoError(t, err)
		require.Equal(t, info.Manifest.Checksum, got.Manifest.Checksum)
		exact.MaxBytes--
		dst := filepath.Join(t.TempDir(), "dst")
		_, _, err = fetchBounded(t, srv.URL, dst, exact)
		require.ErrorIs(t, err, ErrTooLarge)
		requireNothingListed(t, dst)
	})

	t.Run("endless special headers", func(t *testing.T) {
		// PAX extended headers are consumed inside tar.Reader.Next: a peer
		// sending them forever must still hit the stream bound.
		var sent atomic.Int64
		mb := forged(declared)
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(http.StatusOK)
			cw := &countWriter{w: w, n: &sent}
			tw := tar.NewWriter(cw)
			tw.WriteHeader(&tar.Header{Name: ManifestName, Typeflag: tar.TypeReg, Size: int64(len(mb)), Mode: 0o644})
			tw.Write(mb)
			tw.Flush()
			rec := paxRecord("comment", strings.Repeat("x", 500))
			pax := append(rawHeader(t, "PaxHeader", tar.TypeXHeader, int64(len(rec))), rec...)
			pax = append(pax, make([]byte, (512-len(rec)%512)%512)...)
			for sent.Load() < huge {
				if _, err := cw.Write(pax); err != nil {
					return
				}
			}
		}))
		defer srv.Close()
		dst := filepath.Join(t.TempDir(), "dst")
		_, _, err := fetchBounded(t, srv.URL, dst, FetchOptions{})
		require.ErrorIs(t, err, ErrCorrupt)
		require.Less(t, sent.Load(), int64(huge/2))
		requireNothingListed(t, dst)
	})
}

// paxRecord is one PAX record "%d key=value\n" (the length counts itself).
func paxRecord(key, value string) []byte {
	rest := " " + key + "=" + value + "\n"
	n := len(rest) + 1
	for len(strconv.Itoa(n))+len(rest) != n {
		n++
	}
	return []byte(strconv.Itoa(n) + rest)
}

// rawHeader is a USTAR header block of any type (tar.Writer refuses to
// write PAX headers by hand).
func rawHeader(t *testing.T, name string, typ byte, size int64) []byte {
	t.Helper()
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	require.NoError(t, tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Size: 0, Mode: 0o644, Format: tar.FormatUSTAR}))
	require.NoError(t, tw.Flush())
	h := b.Bytes()[:512]
	h[156] = typ
	copy(h[124:136], fmt.Sprintf("%011o\x00", size))
	copy(h[148:156], "        ")
	var sum int64
	for _, c := range h {
		sum += int64(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return h
}

// junkManifest is a manifest with a valid checksum, no files and a huge
// index: it passes every checksum and describes no store.
func junkManifest(t *testing.T, index uint64) []byte {
	m := Manifest{FormatVersion: FormatVersion, Room: "r", RoomCzxid: trustOrigin.RoomCzxid, Epoch: 1, Index: index, Files: []File{}}
	return resign(t, m)
}

func TestCkptTrustJunkNeverListed(t *testing.T) {
	mb := junkManifest(t, 1_000_000)
	srv := serveBytes(tarBytes(t, []entry{{name: ManifestName, data: mb}}))
	defer srv.Close()
	dst := filepath.Join(t.TempDir(), "dst")
	_, _, err := fetchBounded(t, srv.URL, dst, FetchOptions{Origin: trustOrigin})
	require.ErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "store")
	requireNothingListed(t, dst)

	// The same junk written to disk: Verify (checksums only) passes, Check
	// (which opens it as a store) refuses it.
	root := t.TempDir()
	dir := filepath.Join(root, dirName(1_000_000))
	require.NoError(t, os.MkdirAll(filepath.Join(dir, DBDir), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestName), mb, 0o644))
	_, err = Verify(dir)
	require.NoError(t, err)
	_, err = Check(dir, trustOrigin)
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestCkptTrustCheck(t *testing.T) {
	info, _ := trustCkpt(t, 300)
	before := dirNames(t, filepath.Join(info.Path, DBDir))
	m, err := Check(info.Path, trustOrigin)
	require.NoError(t, err)
	require.Equal(t, info.Manifest.Checksum, m.Checksum)
	require.Equal(t, before, dirNames(t, filepath.Join(info.Path, DBDir)), "Check wrote into the checkpoint")
	_, err = Verify(info.Path)
	require.NoError(t, err, "the checkpoint still verifies after Check")
	require.Equal(t, []string{DBDir, ManifestName}, dirNames(t, info.Path))

	_, err = Check(info.Path, Origin{Room: "r", RoomCzxid: 1})
	require.ErrorIs(t, err, ErrForeign)
	_, err = Check(legacyCopy(t, info).Path, trustOrigin)
	require.ErrorIs(t, err, ErrForeign)

	big := largestFile(info.Manifest)
	damaged := filepath.Join(t.TempDir(), filepath.Base(info.Path))
	copyTree(t, info.Path, damaged)
	require.NoError(t, os.Truncate(filepath.Join(damaged, DBDir, big.Name), big.Size-1))
	_, err = Check(damaged, trustOrigin)
	require.ErrorIs(t, err, ErrCorrupt)
}

func TestCkptTrustHandlerSkipsBroken(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 300, 1000)
	root := t.TempDir()
	older, err := Create(ctx, s, root, trustOrigin)
	require.NoError(t, err)
	fill(t, s, 300, 1000)
	newer, err := Create(ctx, s, root, trustOrigin)
	require.NoError(t, err)
	require.Greater(t, newer.Manifest.Index, older.Manifest.Index)
	// Damage the newest: it can no longer be served as the manifest says.
	big := largestFile(newer.Manifest)
	p := filepath.Join(newer.Path, DBDir, big.Name)
	require.NoError(t, os.Remove(p)) // (hard-linked with the store: never write into it)
	require.NoError(t, os.WriteFile(p, []byte("short"), 0o644))

	srv := httptest.NewServer(Handler(root))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/manifest")
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, strconv.FormatUint(older.Manifest.Index, 10), resp.Header.Get(HeaderIndex))
	got, _, err := fetchBounded(t, srv.URL, filepath.Join(t.TempDir(), "dst"), FetchOptions{Origin: trustOrigin})
	require.NoError(t, err)
	require.Equal(t, older.Manifest.Index, got.Manifest.Index)
	l, err := List(root)
	require.NoError(t, err)
	require.Len(t, l, 1, "the broken checkpoint is no longer listed")
	require.Equal(t, older.Manifest.Index, l[0].Manifest.Index)
}

// TestCkptTrustFetchErrorsAreClassified: the sentinels callers branch on.
func TestCkptTrustFetchErrorsAreClassified(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	_, _, err := fetchBounded(t, srv.URL, t.TempDir(), FetchOptions{})
	require.ErrorIs(t, err, ErrNoCheckpoint)
	require.False(t, errors.Is(err, ErrTimeout))
}

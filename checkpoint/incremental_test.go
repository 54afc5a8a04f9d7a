package checkpoint

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomlog/roomlog/store"
	"github.com/stretchr/testify/require"
)

// Tests of the per-file endpoint, incremental and resumed fetches.
//
// Bytes sent are counted by meter at the handler: the body bytes the
// handler wrote for each kind of request (files, manifests, tar stream),
// HTTP headers excluded. "Sends nothing twice" is then exact: the file
// bytes sent over all sources equal the checkpoint's file bytes minus what
// was linked locally.

// tarOnly makes h look like a server from before the per-file endpoint:
// /files/ answers a plain 404 and no answer carries HeaderFiles, so Fetch
// uses the tar stream.
func tarOnly(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, filesPath) {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(hideFilesHeader{w}, r)
	})
}

type hideFilesHeader struct{ http.ResponseWriter }

func (h hideFilesHeader) WriteHeader(code int) {
	h.Header().Del(HeaderFiles)
	h.ResponseWriter.WriteHeader(code)
}

func (h hideFilesHeader) Write(p []byte) (int, error) {
	h.Header().Del(HeaderFiles)
	return h.ResponseWriter.Write(p)
}

func (h hideFilesHeader) Unwrap() http.ResponseWriter { return h.ResponseWriter }

// noFiles is h with the per-file endpoint answering a plain 404 (the
// manifest still advertises it).
func noFiles(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, filesPath) {
			http.NotFound(w, r)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// meter counts what a handler sends, and can cut the per-file bodies once
// budget file bytes were sent (over all requests): the handler then stops
// writing and the connection ends.
type meter struct {
	files, manifests, stream atomic.Int64
	budget                   atomic.Int64 // file body bytes still allowed; -1: no limit
	mu                       sync.Mutex
	ranges                   []string // Range headers of file requests, guarded by mu
	fileReqs                 atomic.Int64
}

func newMeter(budget int64) *meter {
	m := &meter{}
	m.budget.Store(budget)
	return m
}

func (m *meter) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mw := &meterWriter{ResponseWriter: w, m: m}
		switch {
		case strings.HasPrefix(r.URL.Path, filesPath):
			mw.n, mw.cut = &m.files, true
			m.fileReqs.Add(1)
			if rg := r.Header.Get("Range"); rg != "" {
				m.mu.Lock()
				m.ranges = append(m.ranges, r.URL.Path+" "+rg)
				m.mu.Unlock()
			}
		case r.URL.Path == "/manifest":
			mw.n = &m.manifests
		default:
			mw.n = &m.stream
		}
		h.ServeHTTP(mw, r)
	})
}

func (m *meter) rangeHeaders() []string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]string(nil), m.ranges...)
}

type meterWriter struct {
	http.ResponseWriter
	m   *meter
	n   *atomic.Int64
	cut bool
}

func (w *meterWriter) Write(p []byte) (int, error) {
	if w.cut {
		for {
			left := w.m.budget.Load()
			if left < 0 {
				break
			}
			take := min(left, int64(len(p)))
			if w.m.budget.CompareAndSwap(left, left-take) {
				if take < int64(len(p)) {
					n, _ := w.ResponseWriter.Write(p[:take])
					w.n.Add(int64(n))
					return n, errCut
				}
				break
			}
		}
	}
	n, err := w.ResponseWriter.Write(p)
	w.n.Add(int64(n))
	return n, err
}

func (w *meterWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// ckptStore opens a store that flushes before a checkpoint unless its WAL
// is tiny (so that a checkpoint's WAL copy does not dominate a small
// change) and fills it with n unique keys under prefix.
func ckptStore(t testing.TB, n int) *store.Store {
	t.Helper()
	s, err := store.Open(filepath.Join(t.TempDir(), "store"), &store.Options{MemTableSize: 1 << 20, CheckpointFlushBytes: 64 << 10})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	fillKeys(t, s, "a/", n, 1000)
	return s
}

// fillKeys applies n entries, each setting a new key prefix+%08d.
func fillKeys(t testing.TB, s *store.Store, prefix string, n, valueLen int) {
	t.Helper()
	var batch []store.Entry
	for i := 0; i < n; i++ {
		idx := s.AppliedIndex() + uint64(len(batch)) + 1
		data, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte(fmt.Sprintf("%s%08d", prefix, idx)), Value: incompressible(idx, valueLen)}})
		require.NoError(t, err)
		batch = append(batch, store.Entry{Index: idx, Epoch: 1, Data: data})
		if len(batch) == 100 || i == n-1 {
			_, err := s.Apply(batch)
			require.NoError(t, err)
			batch = batch[:0]
		}
	}
}

func partials(t testing.TB, root string) []string {
	t.Helper()
	var out []string
	for _, name := range dirNames(t, root) {
		if strings.HasPrefix(name, partialPrefix) {
			out = append(out, filepath.Join(root, name))
		}
	}
	return out
}

// requireOpensAt restores the fetched checkpoint and checks that it holds
// s's state at index.
func requireOpensAt(t *testing.T, s *store.Store, info Info, index uint64) {
	t.Helper()
	require.Equal(t, index, info.Manifest.Index)
	_, err := Verify(info.Path)
	require.NoError(t, err)
	dir := filepath.Join(t.TempDir(), "restored")
	require.NoError(t, Restore(context.Background(), info.Path, dir, info.Manifest.Origin()))
	requireSameState(t, s, index, dir)
}

var incOrigin = Origin{Room: "r", RoomCzxid: 7}

// TestFetchIncremental: a root that holds the first checkpoint fetches a
// second one, taken after ~1% of the keys were written to a new key range,
// and the server sends only the new files; a root that holds nothing but
// is given the live store directory (FetchOptions.Local) does the same.
func TestFetchIncremental(t *testing.T) {
	ctx := context.Background()
	s := ckptStore(t, 20000)
	// Let the load's flushes and compactions finish first: the change
	// measured is the one below, not Pebble still rewriting the load.
	_, err := Create(ctx, s, t.TempDir(), incOrigin) // (flushes the memtable)
	require.NoError(t, err)
	waitSettled(t, s.Dir())
	fillKeys(t, s, "a/", 1, 1000)
	src := t.TempDir()
	first, err := Create(ctx, s, src, incOrigin)
	require.NoError(t, err)
	m := newMeter(-1)
	srv := httptest.NewServer(m.wrap(Handler(src)))
	defer srv.Close()

	root := filepath.Join(t.TempDir(), "root")
	got1, err := Fetch(ctx, srv.URL, root, FetchOptions{Origin: incOrigin})
	require.NoError(t, err)
	require.Equal(t, first.Bytes, m.files.Load(), "a first fetch sends every file once")
	require.Equal(t, first.Bytes, got1.Fetch.FetchedBytes)

	fillKeys(t, s, "z/", 200, 1000) // 1% of the keys, in a key range of their own
	second, err := Create(ctx, s, src, incOrigin)
	require.NoError(t, err)
	require.Greater(t, second.Manifest.Index, first.Manifest.Index)
	// The live store's sstables as they are now (a compaction later on
	// may rename them all): Local gets this frozen view of the store dir.
	frozen := t.TempDir()
	var inStore int
	for _, f := range second.Manifest.Files {
		if strings.HasSuffix(f.Name, ".sst") && os.Link(filepath.Join(s.Dir(), f.Name), filepath.Join(frozen, f.Name)) == nil {
			inStore++
		}
	}

	m.files.Store(0)
	got2, err := Fetch(ctx, srv.URL, root, FetchOptions{Origin: incOrigin})
	require.NoError(t, err)
	st := got2.Fetch
	t.Logf("checkpoint %d bytes in %d files; sent %d bytes (%.2f%%) in %d files; linked %d files; phases: manifest %v, local %v, transfer %v, final %v",
		second.Bytes, len(second.Manifest.Files), m.files.Load(), 100*float64(m.files.Load())/float64(second.Bytes), st.FetchedFiles,
		st.LinkedKnownFiles, st.Manifest, st.LocalMatch, st.Transfer, st.Final)
	// Exactly the files that are new in the second checkpoint are sent:
	// the new sstable, the MANIFEST (Pebble's, which grows) and the WAL
	// copy. At this size the WAL copy (a recycled log file, ~1 MB here)
	// is most of it; sstables alone stay under 3%.
	old := map[File]bool{}
	for _, f := range first.Manifest.Files {
		old[f] = true
	}
	var newBytes, newSST int64
	for _, f := range second.Manifest.Files {
		if !old[f] {
			t.Logf("new in the second checkpoint: %+v", f)
			newBytes += f.Size
			if strings.HasSuffix(f.Name, ".sst") {
				newSST += f.Size
			}
		}
	}
	require.False(t, st.Tar)
	require.Equal(t, newBytes, m.files.Load(), "sent something the first checkpoint already had")
	require.Equal(t, m.files.Load(), st.FetchedBytes)
	require.LessOrEqual(t, newSST, second.Bytes*3/100, "more than 3%% of the checkpoint in new sstables for a 1%% change")
	require.LessOrEqual(t, m.files.Load(), second.Bytes*6/100, "more than 6%% of the checkpoint sent for a 1%% change")
	require.Positive(t, st.LinkedKnownFiles)
	require.Equal(t, st.Files, st.FetchedFiles+st.LinkedKnownFiles)
	require.Equal(t, st.Bytes, st.FetchedBytes+st.LinkedKnownBytes)
	requireOpensAt(t, s, got2, second.Manifest.Index)

	// Local: an empty root with the live store directory.
	m.files.Store(0)
	got3, err := Fetch(ctx, srv.URL, filepath.Join(t.TempDir(), "fresh"), FetchOptions{Origin: incOrigin, Local: []string{frozen}})
	require.NoError(t, err)
	st = got3.Fetch
	t.Logf("with Local: sent %d bytes in %d files; linked %d local files (%d bytes)", m.files.Load(), st.FetchedFiles, st.LinkedLocalFiles, st.LinkedLocalBytes)
	require.Positive(t, inStore)
	require.Equal(t, inStore, st.LinkedLocalFiles)
	require.Zero(t, st.LinkedKnownFiles)
	require.Equal(t, m.files.Load(), st.FetchedBytes)
	require.LessOrEqual(t, m.files.Load(), second.Bytes*6/100)
	requireOpensAt(t, s, got3, second.Manifest.Index)
}

// TestFetchLocalOtherContentNotUsed: a Local file with the name and size
// of a checkpoint file but other content is not linked; it is fetched, and
// the local file is left as it was.
func TestFetchLocalOtherContentNotUsed(t *testing.T) {
	ctx := context.Background()
	s := ckptStore(t, 3000)
	src := t.TempDir()
	info, err := Create(ctx, s, src, incOrigin)
	require.NoError(t, err)
	big := largestFile(info.Manifest)
	require.True(t, strings.HasSuffix(big.Name, ".sst"))
	local := t.TempDir()
	other := incompressible(99, int(big.Size))
	require.NoError(t, os.WriteFile(filepath.Join(local, big.Name), other, 0o644))

	m := newMeter(-1)
	srv := httptest.NewServer(m.wrap(Handler(src)))
	defer srv.Close()
	got, err := Fetch(ctx, srv.URL, filepath.Join(t.TempDir(), "root"), FetchOptions{Origin: incOrigin, Local: []string{local}})
	require.NoError(t, err)
	require.Zero(t, got.Fetch.LinkedLocalFiles)
	require.Equal(t, 1, got.Fetch.Rejected)
	require.Equal(t, info.Bytes, m.files.Load(), "every file was sent")
	requireOpensAt(t, s, got, info.Manifest.Index)
	b, err := os.ReadFile(filepath.Join(local, big.Name))
	require.NoError(t, err)
	require.Equal(t, other, b, "the local file was changed")
}

// TestFetchLocalSymlinkNotUsed: a Local "sstable" that is a symlink (to
// the right content, even) is not linked: os.Link would link the symlink
// itself, which the layout check refuses, failing every Fetch.
func TestFetchLocalSymlinkNotUsed(t *testing.T) {
	ctx := context.Background()
	s := ckptStore(t, 3000)
	src := t.TempDir()
	info, err := Create(ctx, s, src, incOrigin)
	require.NoError(t, err)
	big := largestFile(info.Manifest)
	local := t.TempDir()
	require.NoError(t, os.Symlink(filepath.Join(info.Path, DBDir, big.Name), filepath.Join(local, big.Name)))

	m := newMeter(-1)
	srv := httptest.NewServer(m.wrap(Handler(src)))
	defer srv.Close()
	got, err := Fetch(ctx, srv.URL, filepath.Join(t.TempDir(), "root"), FetchOptions{Origin: incOrigin, Local: []string{local}})
	require.NoError(t, err)
	require.Zero(t, got.Fetch.LinkedLocalFiles)
	require.Equal(t, info.Bytes, m.files.Load(), "every file was sent")
	requireOpensAt(t, s, got, info.Manifest.Index)
}

// cutFetch runs a Fetch of srvURL into root that the meter cuts; it must
// fail, list nothing and leave one partial directory.
func cutFetch(t *testing.T, url, root string, opts FetchOptions) string {
	t.Helper()
	_, _, err := fetchBounded(t, url, root, opts)
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrCorrupt)
	t.Logf("cut: %v", err)
	l, lerr := List(root)
	require.NoError(t, lerr)
	require.Empty(t, l)
	ps := partials(t, root)
	require.Len(t, ps, 1)
	return ps[0]
}

// TestFetchResumesAfterCut: a source cut mid-transfer leaves the verified
// files and the file in progress in a partial directory; a second Fetch,
// from another server serving the same checkpoint directory, sends exactly
// the rest: the file bytes both servers sent add up to the checkpoint's.
func TestFetchResumesAfterCut(t *testing.T) {
	ctx := context.Background()
	s := ckptStore(t, 6000)
	src := t.TempDir()
	info, err := Create(ctx, s, src, incOrigin)
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(info.Manifest.Files), 4)

	// One file at a time, largest first, cut in the middle of the second
	// (4 at once could cut 4 files in progress).
	files := append([]File(nil), info.Manifest.Files...)
	sortBySizeDesc(files)
	budget := files[0].Size + files[1].Size/2
	a := newMeter(budget)
	srvA := httptest.NewServer(a.wrap(Handler(src)))
	defer srvA.Close()
	root := filepath.Join(t.TempDir(), "root")
	partial := cutFetch(t, srvA.URL, root, FetchOptions{Origin: incOrigin, Parallel: 1})
	require.Equal(t, budget, a.files.Load())
	var complete, parts int
	for _, name := range dirNames(t, filepath.Join(partial, DBDir)) {
		if strings.HasSuffix(name, partSuffix) {
			parts++
		} else {
			complete++
		}
	}
	t.Logf("partial after the cut: %d complete files, %d in progress", complete, parts)
	require.Positive(t, complete)
	require.Positive(t, parts)

	b := newMeter(-1)
	srvB := httptest.NewServer(b.wrap(Handler(src)))
	defer srvB.Close()
	got, err := Fetch(ctx, srvB.URL, root, FetchOptions{Origin: incOrigin})
	require.NoError(t, err)
	st := got.Fetch
	t.Logf("resumed: A sent %d, B sent %d, checkpoint %d; stats %+v; ranges %v", a.files.Load(), b.files.Load(), info.Bytes, st, b.rangeHeaders())
	require.Equal(t, info.Bytes, a.files.Load()+b.files.Load(), "a byte was sent twice (or not at all)")
	// Beyond the files' bytes, each Fetch got the manifest once (and HTTP
	// headers, not counted here): nothing else was sent.
	mb, err := os.ReadFile(filepath.Join(info.Path, ManifestName))
	require.NoError(t, err)
	require.EqualValues(t, len(mb), a.manifests.Load())
	require.EqualValues(t, len(mb), b.manifests.Load())
	require.Zero(t, a.stream.Load()+b.stream.Load())
	require.Equal(t, b.files.Load(), st.FetchedBytes)
	require.Equal(t, a.files.Load(), st.ResumedBytes)
	require.NotEmpty(t, b.rangeHeaders(), "no file was resumed with a Range request")
	require.Zero(t, st.Refetched)
	require.Empty(t, partials(t, root), "the partial became the checkpoint")
	requireOpensAt(t, s, got, info.Manifest.Index)
}

// TestFetchResumesAfterKill: a fetching process killed (SIGKILL) mid-file
// leaves a .part that the next Fetch continues with a Range request from
// its length.
func TestFetchResumesAfterKill(t *testing.T) {
	if url := os.Getenv("CKPT_KILL_URL"); url != "" {
		// The child: fetch until killed.
		_, err := Fetch(context.Background(), url, os.Getenv("CKPT_KILL_ROOT"), FetchOptions{Parallel: 1, IdleTimeout: time.Minute})
		t.Fatalf("the fetch ended: %v", err)
	}
	ctx := context.Background()
	s := ckptStore(t, 3000)
	src := t.TempDir()
	info, err := Create(ctx, s, src, incOrigin)
	require.NoError(t, err)
	big := largestFile(info.Manifest)
	half := big.Size / 2

	// Source A sends half of the largest file (fetched first), then stalls.
	release := make(chan struct{})
	var sentA atomic.Int64
	srvA := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, filesPath) {
			Handler(src).ServeHTTP(w, r)
			return
		}
		b, err := os.ReadFile(filepath.Join(info.Path, DBDir, big.Name))
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(big.Size))
		n, _ := w.Write(b[:half])
		sentA.Add(int64(n))
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srvA.Close()
	defer close(release) // (before Close, which waits for the handler)

	root := filepath.Join(t.TempDir(), "root")
	cmd := execSelf(t, "TestFetchResumesAfterKill", "CKPT_KILL_URL="+srvA.URL, "CKPT_KILL_ROOT="+root)
	require.NoError(t, cmd.Start())
	var part string
	require.Eventually(t, func() bool {
		for _, p := range partials(t, root) {
			fi, err := os.Stat(filepath.Join(p, DBDir, big.Name+partSuffix))
			if err == nil && fi.Size() == half {
				part = filepath.Join(p, DBDir, big.Name+partSuffix)
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond, "the child never wrote half of %s", big.Name)
	require.NoError(t, cmd.Process.Kill())
	cmd.Wait()
	fi, err := os.Stat(part)
	require.NoError(t, err)
	require.Equal(t, half, fi.Size())

	b := newMeter(-1)
	srvB := httptest.NewServer(b.wrap(Handler(src)))
	defer srvB.Close()
	got, err := Fetch(ctx, srvB.URL, root, FetchOptions{Origin: incOrigin})
	require.NoError(t, err)
	require.Contains(t, b.rangeHeaders(), filesPath+big.Name+fmt.Sprintf(" bytes=%d-", half))
	require.Equal(t, info.Bytes, sentA.Load()+b.files.Load(), "a byte was sent twice")
	require.Equal(t, half, got.Fetch.ResumedBytes)
	requireOpensAt(t, s, got, info.Manifest.Index)
}

// TestFetchDamagedPartial: damage in a partial directory is detected and
// the damaged file fetched again; it is never installed.
func TestFetchDamagedPartial(t *testing.T) {
	ctx := context.Background()
	s := ckptStore(t, 6000)
	src := t.TempDir()
	info, err := Create(ctx, s, src, incOrigin)
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(src))
	defer srv.Close()
	// One worker fetches the largest files first: after the cut, the
	// largest is complete and the second is half received.
	files := append([]File(nil), info.Manifest.Files...)
	sortBySizeDesc(files)
	budget := files[0].Size + files[1].Size/2

	cases := []struct {
		name   string
		damage func(t *testing.T, db string)
		// refetched: bytes fetched again beyond what the cut left to fetch
		refetched int64
		stat      func(st FetchStats) int
	}{
		{"flipped byte in a complete file", func(t *testing.T, db string) {
			flipByte(t, filepath.Join(db, files[0].Name), files[0].Size/3)
		}, files[0].Size, func(st FetchStats) int { return st.Rejected }},
		{"truncated part", func(t *testing.T, db string) {
			require.NoError(t, os.Truncate(filepath.Join(db, files[1].Name+partSuffix), files[1].Size/4))
		}, files[1].Size/2 - files[1].Size/4, func(st FetchStats) int {
			// the complete file, and the part from where the truncation left it
			if st.ResumedBytes == files[0].Size+files[1].Size/4 {
				return 1
			}
			return 0
		}},
		{"extended part", func(t *testing.T, db string) {
			require.NoError(t, os.Truncate(filepath.Join(db, files[1].Name+partSuffix), files[1].Size+10))
		}, files[1].Size / 2, func(st FetchStats) int { return st.Rejected }},
		{"flipped byte in a part", func(t *testing.T, db string) {
			flipByte(t, filepath.Join(db, files[1].Name+partSuffix), 7)
		}, files[1].Size, func(st FetchStats) int { return st.Refetched }}, // (its rest, then all of it again)
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := newMeter(budget)
			srvA := httptest.NewServer(a.wrap(Handler(src)))
			defer srvA.Close()
			root := filepath.Join(t.TempDir(), "root")
			partial := cutFetch(t, srvA.URL, root, FetchOptions{Parallel: 1})
			db := filepath.Join(partial, DBDir)
			require.FileExists(t, filepath.Join(db, files[0].Name))
			require.FileExists(t, filepath.Join(db, files[1].Name+partSuffix))
			c.damage(t, db)

			b := newMeter(-1)
			srvB := httptest.NewServer(b.wrap(Handler(src)))
			defer srvB.Close()
			got, err := Fetch(ctx, srvB.URL, root, FetchOptions{Parallel: 1})
			require.NoError(t, err)
			t.Logf("stats %+v", got.Fetch)
			require.Equal(t, 1, c.stat(got.Fetch))
			require.Equal(t, info.Bytes-budget+c.refetched, b.files.Load())
			requireOpensAt(t, s, got, info.Manifest.Index)
		})
	}
}

func sortBySizeDesc(fs []File) {
	for i := range fs {
		for j := i + 1; j < len(fs); j++ {
			if fs[j].Size > fs[i].Size {
				fs[i], fs[j] = fs[j], fs[i]
			}
		}
	}
}

// TestFetchTarFallback: a server without the per-file endpoint (404 on
// /files/, whether or not its manifest advertises it) still serves a
// fetch, through its tar stream.
func TestFetchTarFallback(t *testing.T) {
	ctx := context.Background()
	s := ckptStore(t, 2000)
	src := t.TempDir()
	info, err := Create(ctx, s, src, incOrigin)
	require.NoError(t, err)
	mb, err := os.ReadFile(filepath.Join(info.Path, ManifestName))
	require.NoError(t, err)
	for name, wrap := range map[string]func(http.Handler) http.Handler{"files 404": noFiles, "older server": tarOnly} {
		t.Run(name, func(t *testing.T) {
			m := newMeter(-1)
			srv := httptest.NewServer(m.wrap(wrap(Handler(src))))
			defer srv.Close()
			var last Progress
			got, err := Fetch(ctx, srv.URL, filepath.Join(t.TempDir(), "root"), FetchOptions{Origin: incOrigin,
				Progress: func(p Progress) { last = p }})
			require.NoError(t, err)
			require.True(t, got.Fetch.Tar)
			require.Equal(t, len(info.Manifest.Files), got.Fetch.FetchedFiles)
			require.Zero(t, got.Fetch.LinkedKnownFiles+got.Fetch.LinkedLocalFiles+got.Fetch.ResumedFiles)
			require.Equal(t, tarSize(int64(len(mb)), info.Manifest.Files), m.stream.Load())
			require.Equal(t, m.stream.Load(), last.Bytes)
			require.Equal(t, StageVerified, last.Stage)
			requireOpensAt(t, s, got, info.Manifest.Index)
		})
	}
}

// TestFetchMovesOnWhenRetained: the source deletes the checkpoint being
// fetched file by file (Retain after a newer Create): its next file
// requests get 404, and Fetch moves on to the newest checkpoint.
func TestFetchMovesOnWhenRetained(t *testing.T) {
	ctx := context.Background()
	s := ckptStore(t, 4000)
	src := t.TempDir()
	first, err := Create(ctx, s, src, incOrigin)
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(src))
	defer srv.Close()
	var newer Info
	got, err := Fetch(ctx, srv.URL, t.TempDir(), FetchOptions{Parallel: 1, Progress: func(p Progress) {
		if newer.Path != "" {
			return
		}
		fillKeys(t, s, "b/", 10, 10)
		var err error
		newer, err = Create(ctx, s, src, incOrigin)
		require.NoError(t, err)
		require.NoError(t, Retain(src, 1))
		require.NoDirExists(t, first.Path)
	}})
	require.NoError(t, err)
	require.Equal(t, 2, got.Fetch.Rounds)
	requireOpensAt(t, s, got, newer.Manifest.Index)
}

// TestHandlerFiles: the per-file endpoint serves exactly the files of the
// checkpoint named by index and manifest checksum, with Range.
func TestHandlerFiles(t *testing.T) {
	ctx := context.Background()
	s := ckptStore(t, 2000)
	src := t.TempDir()
	info, err := Create(ctx, s, src, incOrigin)
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(src))
	defer srv.Close()
	big := largestFile(info.Manifest)
	want, err := os.ReadFile(filepath.Join(info.Path, DBDir, big.Name))
	require.NoError(t, err)
	idx := fmt.Sprint(info.Manifest.Index)
	sum := info.Manifest.Checksum
	get := func(path, rng string) (*http.Response, []byte) {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		if rng != "" {
			req.Header.Set("Range", rng)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp, b
	}
	resp, b := get("/files/"+big.Name+"?index="+idx+"&sum="+sum, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, FilesProtocol, resp.Header.Get(HeaderFiles))
	require.Equal(t, want, b)
	resp, b = get("/files/"+big.Name+"?index="+idx+"&sum="+sum, "bytes=1000-")
	require.Equal(t, http.StatusPartialContent, resp.StatusCode)
	require.Equal(t, want[1000:], b)

	resp, b = get("/manifest?index="+idx, "")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	m, err := ParseManifest(b)
	require.NoError(t, err)
	require.Equal(t, sum, m.Checksum)

	for _, c := range []struct {
		path string
		code int
	}{
		{"/manifest?index=" + fmt.Sprint(info.Manifest.Index+1), http.StatusNotFound},
		{"/files/" + big.Name + "?index=" + fmt.Sprint(info.Manifest.Index+1) + "&sum=" + sum, http.StatusNotFound},
		{"/files/" + big.Name + "?index=" + idx + "&sum=00" + sum[2:], http.StatusConflict},
		{"/files/999999.sst?index=" + idx + "&sum=" + sum, http.StatusNotFound},
		{"/files/..%2F" + dirName(info.Manifest.Index) + "%2F" + ManifestName + "?index=" + idx + "&sum=" + sum, http.StatusBadRequest},
		{"/files/" + ManifestName + "?index=" + idx + "&sum=" + sum, http.StatusNotFound},
		{"/files/.hidden?index=" + idx + "&sum=" + sum, http.StatusBadRequest},
		{"/files/" + big.Name + "?index=x&sum=" + sum, http.StatusBadRequest},
		{"/files/" + big.Name + "?index=" + idx, http.StatusBadRequest},
	} {
		resp, b := get(c.path, "")
		require.Equal(t, c.code, resp.StatusCode, "%s: %s", c.path, b)
		require.Equal(t, FilesProtocol, resp.Header.Get(HeaderFiles), c.path)
	}

	// A checkpoint whose file no longer matches its manifest is moved aside.
	p := filepath.Join(info.Path, DBDir, big.Name)
	require.NoError(t, os.Remove(p)) // (hard-linked with the store: never write into it)
	require.NoError(t, os.WriteFile(p, []byte("short"), 0o644))
	resp, b = get("/files/"+big.Name+"?index="+idx+"&sum="+sum, "")
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "%s", b)
	require.Contains(t, string(b), big.Name)
	l, err := List(src)
	require.NoError(t, err)
	require.Empty(t, l)
}

// TestPartialsBounded: CleanTemp keeps only the newest partial fetch (and
// drops it too after PartialMaxAge); Retain drops partials at or below
// the newest checkpoint; a partial in use is never removed.
func TestPartialsBounded(t *testing.T) {
	ctx := context.Background()
	s := ckptStore(t, 3000)
	src := t.TempDir()
	first, err := Create(ctx, s, src, incOrigin)
	require.NoError(t, err)
	root := filepath.Join(t.TempDir(), "root")
	cutOnce := func() string {
		a := newMeter(first.Bytes / 3)
		srv := httptest.NewServer(a.wrap(Handler(src)))
		defer srv.Close()
		before := partials(t, root)
		_, err := Fetch(ctx, srv.URL, root, FetchOptions{})
		require.Error(t, err)
		for _, p := range partials(t, root) {
			if !contains(before, p) {
				return p
			}
		}
		t.Fatal("no new partial")
		return ""
	}
	p1 := cutOnce()
	fillKeys(t, s, "c/", 100, 1000)
	second, err := Create(ctx, s, src, incOrigin)
	require.NoError(t, err)
	require.NoError(t, Retain(src, 1))
	p2 := cutOnce()
	require.ElementsMatch(t, []string{p1, p2}, partials(t, root))

	require.NoError(t, CleanTemp(root, 0))
	require.Equal(t, []string{p2}, partials(t, root), "CleanTemp keeps the newest partial only")

	// In use: kept even when stale.
	old := time.Now().Add(-PartialMaxAge - time.Hour)
	for _, d := range []string{p2, filepath.Join(p2, DBDir)} {
		require.NoError(t, os.Chtimes(d, old, old))
	}
	d, err := lockDir(p2)
	require.NoError(t, err)
	require.NoError(t, CleanTemp(root, 0))
	require.Equal(t, []string{p2}, partials(t, root))
	d.Close()
	require.NoError(t, CleanTemp(root, 0))
	require.Empty(t, partials(t, root), "a stale newest partial is removed")

	// Retain: partials at or below the newest checkpoint go.
	p3 := cutOnce()
	require.Contains(t, p3, fmt.Sprintf("%020d", second.Manifest.Index))
	require.NoError(t, Retain(root, 1))
	require.Equal(t, []string{p3}, partials(t, root), "no checkpoint in root: kept")
	fillKeys(t, s, "d/", 10, 10)
	_, err = Create(ctx, s, root, incOrigin) // newer than p3's
	require.NoError(t, err)
	require.Equal(t, []string{p3}, partials(t, root))
	require.NoError(t, Retain(root, 1))
	require.Empty(t, partials(t, root), "Retain keeps no partial at or below the newest checkpoint")
}

func contains(l []string, s string) bool {
	for _, x := range l {
		if x == s {
			return true
		}
	}
	return false
}

// execSelf returns a command running this test binary's test name alone,
// with env added.
func execSelf(t *testing.T, name string, env ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	return cmd
}

// waitSettled waits until the sstables in dir stay the same for a while
// (background compactions done).
func waitSettled(t *testing.T, dir string) {
	t.Helper()
	var last string
	stable := 0
	require.Eventually(t, func() bool {
		var ssts []string
		for _, n := range dirNames(t, dir) {
			if strings.HasSuffix(n, ".sst") {
				ssts = append(ssts, n)
			}
		}
		cur := strings.Join(ssts, ",")
		if cur == last {
			stable++
		} else {
			last, stable = cur, 0
		}
		return stable >= 10
	}, 60*time.Second, 100*time.Millisecond)
}

// TestFetchStalledFileResumes: a source that stops sending mid-file fails
// the fetch within the idle timeout and keeps what arrived; the next
// Fetch asks only for the rest.
func TestFetchStalledFileResumes(t *testing.T) {
	ctx := context.Background()
	s := ckptStore(t, 3000)
	src := t.TempDir()
	info, err := Create(ctx, s, src, incOrigin)
	require.NoError(t, err)
	big := largestFile(info.Manifest)
	half := big.Size / 2
	release := make(chan struct{})
	var sentA atomic.Int64
	srvA := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, filesPath) {
			Handler(src).ServeHTTP(w, r)
			return
		}
		b, err := os.ReadFile(filepath.Join(info.Path, DBDir, big.Name))
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(big.Size))
		n, _ := w.Write(b[:half])
		sentA.Add(int64(n))
		http.NewResponseController(w).Flush()
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer srvA.Close()
	defer close(release)

	const idle = 300 * time.Millisecond
	root := filepath.Join(t.TempDir(), "root")
	_, took, err := fetchBounded(t, srvA.URL, root, FetchOptions{Parallel: 1, IdleTimeout: idle})
	require.ErrorIs(t, err, ErrTimeout)
	require.Less(t, took, idle+3*time.Second)
	l, err := List(root)
	require.NoError(t, err)
	require.Empty(t, l)
	ps := partials(t, root)
	require.Len(t, ps, 1)
	fi, err := os.Stat(filepath.Join(ps[0], DBDir, big.Name+partSuffix))
	require.NoError(t, err)
	require.Equal(t, half, fi.Size(), "what arrived before the stall was kept")

	b := newMeter(-1)
	srvB := httptest.NewServer(b.wrap(Handler(src)))
	defer srvB.Close()
	got, err := Fetch(ctx, srvB.URL, root, FetchOptions{})
	require.NoError(t, err)
	require.Equal(t, info.Bytes, sentA.Load()+b.files.Load())
	requireOpensAt(t, s, got, info.Manifest.Index)
}

// TestFetchRangeIgnored: a source that answers a Range request with the
// whole file (200) gets the file started over, not appended to.
func TestFetchRangeIgnored(t *testing.T) {
	ctx := context.Background()
	s := ckptStore(t, 6000)
	src := t.TempDir()
	info, err := Create(ctx, s, src, incOrigin)
	require.NoError(t, err)
	files := append([]File(nil), info.Manifest.Files...)
	sortBySizeDesc(files)
	budget := files[0].Size + files[1].Size/2
	a := newMeter(budget)
	srvA := httptest.NewServer(a.wrap(Handler(src)))
	defer srvA.Close()
	root := filepath.Join(t.TempDir(), "root")
	cutFetch(t, srvA.URL, root, FetchOptions{Parallel: 1})

	b := newMeter(-1)
	noRange := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Header.Del("Range")
		Handler(src).ServeHTTP(w, r)
	})
	srvB := httptest.NewServer(b.wrap(noRange))
	defer srvB.Close()
	got, err := Fetch(ctx, srvB.URL, root, FetchOptions{})
	require.NoError(t, err)
	require.Equal(t, 1, got.Fetch.Refetched)
	require.Equal(t, files[0].Size, got.Fetch.ResumedBytes, "only the complete file counts as resumed")
	require.Equal(t, info.Bytes-files[0].Size, b.files.Load())
	requireOpensAt(t, s, got, info.Manifest.Index)
}

// TestFetchConcurrentSameCheckpoint: two Fetches of one checkpoint into
// one root both succeed with the same checkpoint, and leave nothing else.
func TestFetchConcurrentSameCheckpoint(t *testing.T) {
	ctx := context.Background()
	s := ckptStore(t, 3000)
	src := t.TempDir()
	info, err := Create(ctx, s, src, incOrigin)
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(src))
	defer srv.Close()
	root := filepath.Join(t.TempDir(), "root")
	var wg sync.WaitGroup
	var got [4]Info
	var errs [4]error
	for i := range got {
		wg.Add(1)
		go func() {
			defer wg.Done()
			got[i], errs[i] = Fetch(ctx, srv.URL, root, FetchOptions{Origin: incOrigin})
		}()
	}
	wg.Wait()
	for i := range got {
		require.NoError(t, errs[i])
		require.Equal(t, filepath.Join(root, dirName(info.Manifest.Index)), got[i].Path)
	}
	require.Equal(t, []string{dirName(info.Manifest.Index)}, dirNames(t, root))
	requireOpensAt(t, s, got[0], info.Manifest.Index)
}

// TestFetchRefusesPartNames: a manifest (validly signed) that lists a
// file named like another's file in progress is refused before anything
// is written.
func TestFetchRefusesPartNames(t *testing.T) {
	m := Manifest{FormatVersion: FormatVersion, Room: "r", RoomCzxid: incOrigin.RoomCzxid, Epoch: 1, Index: 5,
		Files: []File{{Name: "000001.sst", Size: 10, CRC32C: 1}, {Name: "000001.sst" + partSuffix, Size: 10, CRC32C: 2}}}
	mb := resign(t, m)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set(HeaderFiles, FilesProtocol)
		w.Write(mb)
	}))
	defer srv.Close()
	dst := filepath.Join(t.TempDir(), "dst")
	_, _, err := fetchBounded(t, srv.URL, dst, FetchOptions{})
	require.ErrorIs(t, err, ErrCorrupt)
	requireNothingListed(t, dst)
}

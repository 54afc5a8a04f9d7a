package checkpoint

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/store"
	"github.com/stretchr/testify/require"
)

func TestRoundTripOverHTTP(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 6000, 1000)
	root := filepath.Join(t.TempDir(), "ckpts")
	info, err := Create(ctx, s, root, Origin{Room: "room-a", RoomCzxid: 1})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(root, dirName(s.AppliedIndex())), info.Path)
	require.Equal(t, s.AppliedIndex(), info.Manifest.Index)
	require.Equal(t, s.AppliedEpoch(), info.Manifest.Epoch)
	require.Equal(t, "room-a", info.Manifest.Room)
	require.Greater(t, info.Bytes, int64(4<<20))
	var ssts int
	for _, f := range info.Manifest.Files {
		if filepath.Ext(f.Name) == ".sst" {
			ssts++
		}
	}
	require.Greater(t, ssts, 0, "the test store should have flushed sstables")
	_, err = Verify(info.Path)
	require.NoError(t, err)
	require.Empty(t, dirNames(t, root)[1:], "only the checkpoint is left under root: %v", dirNames(t, root))

	// Applies after the checkpoint are not in it.
	index := s.AppliedIndex()
	wantHash, _, err := s.StateHash()
	require.NoError(t, err)
	fill(t, s, 10, 100)

	srv := httptest.NewServer(Handler(root))
	defer srv.Close()

	// GET /manifest
	resp, err := http.Get(srv.URL + "/manifest")
	require.NoError(t, err)
	mb, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	m, err := ParseManifest(mb)
	require.NoError(t, err)
	require.Equal(t, info.Manifest.Checksum, m.Checksum)
	require.Equal(t, strconv.FormatUint(index, 10), resp.Header.Get(HeaderIndex))

	// Fetch with progress.
	var progress []Progress
	dst := filepath.Join(t.TempDir(), "fetched")
	got, err := Fetch(ctx, srv.URL, dst, FetchOptions{
		Progress:         func(p Progress) { progress = append(progress, p) },
		ProgressInterval: time.Nanosecond,
	})
	require.NoError(t, err)
	require.Equal(t, filepath.Join(dst, dirName(index)), got.Path)
	require.Equal(t, info.Manifest.Checksum, got.Manifest.Checksum)
	require.Equal(t, []string{dirName(index)}, dirNames(t, dst), "no temp dir left")
	_, err = Verify(got.Path)
	require.NoError(t, err)

	require.GreaterOrEqual(t, len(progress), 3)
	require.False(t, got.Fetch.Tar, "Handler serves files one by one")
	require.Equal(t, info.Bytes, got.Fetch.FetchedBytes)
	// Per file, Progress counts the files' bytes (the tar path counts the
	// stream: see TestFetchTarFallback).
	total := info.Bytes
	for i, p := range progress {
		require.Equal(t, total, p.Total, "progress %d", i)
		require.LessOrEqual(t, p.Bytes, total)
		require.GreaterOrEqual(t, p.Rate, 0.0)
		if i > 0 {
			require.GreaterOrEqual(t, p.Bytes, progress[i-1].Bytes)
			require.GreaterOrEqual(t, p.Elapsed, progress[i-1].Elapsed)
		}
	}
	last := progress[len(progress)-1]
	require.Equal(t, total, last.Bytes, "final progress reports the whole stream")
	require.Greater(t, last.Rate, 0.0)

	// Restore and open.
	storeDir := filepath.Join(t.TempDir(), "restored")
	require.NoError(t, Restore(ctx, got.Path, storeDir, Origin{Room: "room-a", RoomCzxid: 1}))
	r, err := store.Open(storeDir, nil)
	require.NoError(t, err)
	h, idx, err := r.StateHash()
	require.NoError(t, err)
	require.Equal(t, index, idx)
	require.Equal(t, index, r.AppliedIndex())
	require.Equal(t, info.Manifest.Epoch, r.AppliedEpoch())
	require.Equal(t, wantHash, h)
	// The restored store keeps going from there.
	fill(t, r, 5, 10)
	require.Equal(t, index+5, r.AppliedIndex())
	require.NoError(t, r.Close())
}

func TestCreateExistingIndex(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 300, 100)
	root := t.TempDir()
	a, err := Create(ctx, s, root, Origin{Room: "r", RoomCzxid: 1})
	require.NoError(t, err)
	b, err := Create(ctx, s, root, Origin{Room: "r", RoomCzxid: 1})
	require.NoError(t, err, "a second Create of the same index returns the first")
	require.Equal(t, a.Path, b.Path)
	require.Equal(t, a.Manifest.Checksum, b.Manifest.Checksum)

	// Damage it (replace the manifest by a wrong one): Create moves it aside and rebuilds.
	require.NoError(t, os.WriteFile(filepath.Join(a.Path, DBDir, "extra"), []byte("x"), 0o644))
	_, err = Verify(a.Path)
	require.ErrorIs(t, err, ErrCorrupt)
	c, err := Create(ctx, s, root, Origin{Room: "r", RoomCzxid: 1})
	require.NoError(t, err)
	require.Equal(t, a.Path, c.Path)
	_, err = Verify(c.Path)
	require.NoError(t, err)
	var aside int
	for _, n := range dirNames(t, root) {
		if len(n) > 9 && n[:9] == ".corrupt-" {
			aside++
		}
	}
	require.Equal(t, 1, aside, "the broken checkpoint is kept aside: %v", dirNames(t, root))
	l, err := List(root)
	require.NoError(t, err)
	require.Len(t, l, 1)
}

func TestRestoreRefusesNonEmptyDir(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 100, 100)
	info, err := Create(ctx, s, t.TempDir(), Origin{Room: "r", RoomCzxid: 1})
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "x"), nil, 0o644))
	require.ErrorIs(t, Restore(ctx, info.Path, dir, Origin{Room: "r", RoomCzxid: 1}), ErrNotEmpty)
	require.Equal(t, []string{"x"}, dirNames(t, dir))

	empty := t.TempDir()
	require.NoError(t, Restore(ctx, info.Path, empty, Origin{Room: "r", RoomCzxid: 1}))
	requireSameState(t, s, info.Manifest.Index, empty)
}

func TestRetainKeepsNewest(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 10, 10)
	root := t.TempDir()
	var created []uint64
	for i := 0; i < 4; i++ {
		info, err := Create(ctx, s, root, Origin{Room: "r", RoomCzxid: 1})
		require.NoError(t, err)
		created = append(created, info.Manifest.Index)
		fill(t, s, 10, 10)
	}
	// Junk that List and Retain must ignore.
	require.NoError(t, os.Mkdir(filepath.Join(root, ".tmp-ckpt-123"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(root, "ckpt-junk"), 0o755))
	require.NoError(t, os.Mkdir(filepath.Join(root, dirName(999999)), 0o755)) // no manifest

	require.Error(t, Retain(root, 0))
	l, err := List(root)
	require.NoError(t, err)
	require.Len(t, l, 4)
	for i, info := range l {
		require.Equal(t, created[3-i], info.Manifest.Index, "List is newest first")
	}

	require.NoError(t, Retain(root, 2))
	l, err = List(root)
	require.NoError(t, err)
	require.Len(t, l, 2)
	require.Equal(t, created[3], l[0].Manifest.Index)
	require.Equal(t, created[2], l[1].Manifest.Index)
	for _, idx := range created[:2] {
		_, err := os.Stat(filepath.Join(root, dirName(idx)))
		require.True(t, os.IsNotExist(err), "old checkpoint %d still there", idx)
	}
	newest, err := Newest(root)
	require.NoError(t, err)
	require.Equal(t, created[3], newest.Manifest.Index)
	require.Contains(t, dirNames(t, root), ".tmp-ckpt-123", "Retain leaves temp dirs alone")

	require.NoError(t, CleanTemp(root, time.Hour))
	require.Contains(t, dirNames(t, root), ".tmp-ckpt-123", "too young to clean")
	require.NoError(t, CleanTemp(root, 0))
	require.NotContains(t, dirNames(t, root), ".tmp-ckpt-123")

	_, err = Newest(t.TempDir())
	require.ErrorIs(t, err, ErrNoCheckpoint)
	require.NoError(t, Retain(filepath.Join(t.TempDir(), "missing"), 1))
	l, err = List(filepath.Join(t.TempDir(), "missing"))
	require.NoError(t, err)
	require.Empty(t, l)
}

func TestHandlerWithoutCheckpoint(t *testing.T) {
	srv := httptest.NewServer(Handler(t.TempDir()))
	defer srv.Close()
	for _, path := range []string{"/", "/manifest", "/nope"} {
		resp, err := http.Get(srv.URL + path)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusNotFound, resp.StatusCode, path)
		require.Contains(t, string(body), "roomlog checkpoint")
	}
	resp, err := http.Post(srv.URL+"/", "text/plain", nil)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode)

	dst := t.TempDir()
	_, err = Fetch(context.Background(), srv.URL, dst, FetchOptions{})
	require.ErrorIs(t, err, ErrNoCheckpoint)
	require.Empty(t, dirNames(t, dst))
}

// TestStreamSurvivesRetain deletes the checkpoint being streamed (Retain
// after a newer Create) while the client is mid-stream (the tar stream of
// a server without the per-file endpoint; per file, see
// TestFetchMovesOnWhenRetained).
func TestStreamSurvivesRetain(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 4000, 1000)
	root := t.TempDir()
	first, err := Create(ctx, s, root, Origin{Room: "r", RoomCzxid: 1})
	require.NoError(t, err)
	srv := httptest.NewServer(tarOnly(Handler(root)))
	defer srv.Close()

	var deleted bool
	dst := t.TempDir()
	got, err := Fetch(ctx, srv.URL, dst, FetchOptions{Progress: func(p Progress) {
		if deleted || p.Bytes == p.Total {
			return
		}
		deleted = true
		fill(t, s, 10, 10)
		_, err := Create(ctx, s, root, Origin{Room: "r", RoomCzxid: 1})
		require.NoError(t, err)
		require.NoError(t, Retain(root, 1))
		_, err = os.Stat(first.Path)
		require.True(t, os.IsNotExist(err))
	}})
	require.NoError(t, err)
	require.True(t, deleted)
	require.Equal(t, first.Manifest.Index, got.Manifest.Index)
	_, err = Verify(got.Path)
	require.NoError(t, err)
}

func TestFetchCancelled(t *testing.T) {
	s := newStore(t, 2000, 1000)
	root := t.TempDir()
	_, err := Create(context.Background(), s, root, Origin{Room: "r", RoomCzxid: 1})
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(root))
	defer srv.Close()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dst := t.TempDir()
	_, err = Fetch(ctx, srv.URL, dst, FetchOptions{Progress: func(p Progress) { cancel() }})
	require.ErrorIs(t, err, context.Canceled)
	// Nothing listed, no temp dir; the partial fetch is kept for a resume.
	l, err := List(dst)
	require.NoError(t, err)
	require.Empty(t, l)
	for _, name := range dirNames(t, dst) {
		require.True(t, strings.HasPrefix(name, partialPrefix), "left under root: %s", name)
	}
}

func TestManifestJSON(t *testing.T) {
	m := Manifest{FormatVersion: FormatVersion, Room: "r", RoomCzxid: 0x2a, Epoch: 2, Index: 9,
		Created: time.Date(2025, 1, 2, 3, 4, 5, 6000000, time.UTC),
		Files:   []File{{Name: "000001.sst", Size: 10, CRC32C: 7}}}
	b, err := m.Marshal()
	require.NoError(t, err)
	got, err := ParseManifest(b)
	require.NoError(t, err)
	require.Equal(t, m, got)

	var raw map[string]any
	require.NoError(t, json.Unmarshal(b, &raw))
	for _, field := range []string{"FormatVersion", "Room", "RoomCzxid", "Epoch", "Index", "Created", "Files", "Checksum"} {
		require.Contains(t, raw, field)
	}

	bad := []Manifest{
		{FormatVersion: 3, RoomCzxid: 1, Files: []File{}},
		{FormatVersion: 1, Files: []File{{Name: "../x"}}},
		{FormatVersion: 1, Files: []File{{Name: "a/b"}}},
		{FormatVersion: 1, Files: []File{{Name: ".hidden"}}},
		{FormatVersion: 1, Files: []File{{Name: "a"}, {Name: "a"}}},
		{FormatVersion: 1, Files: []File{{Name: "a", Size: -1}}},
		{FormatVersion: 1, Files: []File{{Name: ""}}},
		{FormatVersion: 1, Files: []File{{Name: "a\x00b"}}},
	}
	for i, m := range bad {
		_, err := m.Marshal()
		require.ErrorIs(t, err, ErrCorrupt, "case %d", i)
	}
}

// TestFetchProgressStages: streaming calls, then exactly one
// StageStreamed at the last byte (Bytes == Total), then exactly one
// StageVerified after the store check, in that order.
func TestFetchProgressStages(t *testing.T) {
	s := newStore(t, 2000, 1000)
	root := t.TempDir()
	ctx := context.Background()
	_, err := Create(ctx, s, root, Origin{Room: "r", RoomCzxid: 1})
	require.NoError(t, err)
	srv := httptest.NewServer(Handler(root))
	defer srv.Close()
	var stages []string
	var streamed, verified Progress
	_, err = Fetch(ctx, srv.URL, t.TempDir(), FetchOptions{ProgressInterval: time.Nanosecond, Progress: func(p Progress) {
		if len(stages) == 0 || stages[len(stages)-1] != p.Stage {
			stages = append(stages, p.Stage)
		}
		switch p.Stage {
		case StageStreamed:
			streamed = p
		case StageVerified:
			verified = p
		}
	}})
	require.NoError(t, err)
	require.Equal(t, []string{StageStreaming, StageStreamed, StageVerified}, stages)
	require.Positive(t, streamed.Total)
	require.Equal(t, streamed.Total, streamed.Bytes)
	require.Equal(t, streamed.Bytes, verified.Bytes)
	require.GreaterOrEqual(t, verified.Elapsed, streamed.Elapsed)
}

// TestManifestNewerFormat: a manifest of a newer format version, even one
// with fields this binary does not know, is ErrUnsupportedVersion (a newer
// roomlog's checkpoint, kept), not corruption (which replicas delete);
// unknown fields in a manifest of a known version stay corrupt.
func TestManifestNewerFormat(t *testing.T) {
	newer := []byte(`{"FormatVersion":3,"Room":"r","RoomCzxid":1,"Epoch":1,"Index":2,"Created":"2026-01-01T00:00:00Z","Files":[],"Extents":[1,2],"Checksum":"x"}`)
	_, err := ParseManifest(newer)
	require.ErrorIs(t, err, ErrUnsupportedVersion)
	require.NotErrorIs(t, err, ErrCorrupt)
	require.Contains(t, err.Error(), "format version 3")

	known := []byte(`{"FormatVersion":2,"Room":"r","RoomCzxid":1,"Epoch":1,"Index":2,"Created":"2026-01-01T00:00:00Z","Files":[],"Extents":[1,2],"Checksum":"x"}`)
	_, err = ParseManifest(known)
	require.ErrorIs(t, err, ErrCorrupt)
}

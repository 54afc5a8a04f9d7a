package checkpoint

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// entry is one tar entry of a hand-made stream.
type entry struct {
	name string
	data []byte
	typ  byte  // default TypeReg
	size int64 // header size; default len(data)
}

// ckptEntries returns the entries of a correct stream of the checkpoint at path.
func ckptEntries(t testing.TB, path string) (Manifest, []entry) {
	t.Helper()
	mb, err := os.ReadFile(filepath.Join(path, ManifestName))
	require.NoError(t, err)
	m, err := ParseManifest(mb)
	require.NoError(t, err)
	es := []entry{{name: ManifestName, data: mb}}
	for _, f := range m.Files {
		b, err := os.ReadFile(filepath.Join(path, DBDir, f.Name))
		require.NoError(t, err)
		es = append(es, entry{name: DBDir + "/" + f.Name, data: b})
	}
	return m, es
}

func tarBytes(t testing.TB, es []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		typ, size := e.typ, e.size
		if typ == 0 {
			typ = tar.TypeReg
		}
		if size == 0 {
			size = int64(len(e.data))
		}
		hdr := &tar.Header{Name: e.name, Typeflag: typ, Size: size, Mode: 0o644}
		if typ != tar.TypeReg {
			hdr.Size = 0
			hdr.Linkname = "/etc/passwd"
		}
		require.NoError(t, tw.WriteHeader(hdr))
		if typ == tar.TypeReg && len(e.data) > 0 {
			_, err := tw.Write(e.data[:min(int64(len(e.data)), size)])
			require.NoError(t, err)
		}
		if typ == tar.TypeReg && size > int64(len(e.data)) {
			_, err := tw.Write(make([]byte, size-int64(len(e.data))))
			require.NoError(t, err)
		}
	}
	require.NoError(t, tw.Close())
	return buf.Bytes()
}

func serveBytes(b []byte) *httptest.Server {
	return httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.Write(b)
	}))
}

// resign recomputes a manifest's self checksum (a forger who knows the format).
func resign(t testing.TB, m Manifest) []byte {
	t.Helper()
	b, err := m.Marshal()
	require.NoError(t, err)
	return b
}

var indexRE = regexp.MustCompile(`"Index": \d+`)

// requireRejected checks Fetch(url) fails with ErrCorrupt and leaves nothing in dst.
func requireRejected(t *testing.T, url string) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "dst")
	_, err := Fetch(context.Background(), url, dst, FetchOptions{})
	require.ErrorIs(t, err, ErrCorrupt)
	require.Empty(t, dirNames(t, dst), "something left behind after a rejected fetch")
	l, lerr := List(dst)
	require.NoError(t, lerr)
	require.Empty(t, l)
	t.Logf("rejected: %v", err)
}

func TestFetchRejectsCorruption(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 3000, 1000)
	src := t.TempDir()
	info, err := Create(ctx, s, src, Origin{Room: "r", RoomCzxid: 1})
	require.NoError(t, err)
	m, good := ckptEntries(t, info.Path)
	big := largestFile(m)
	bigIdx := -1
	for i, e := range good {
		if e.name == DBDir+"/"+big.Name {
			bigIdx = i
		}
	}
	require.Positive(t, bigIdx)
	clone := func() []entry {
		es := make([]entry, len(good))
		for i, e := range good {
			es[i] = entry{name: e.name, data: bytes.Clone(e.data)}
		}
		return es
	}

	t.Run("sane", func(t *testing.T) {
		srv := serveBytes(tarBytes(t, good))
		defer srv.Close()
		got, err := Fetch(ctx, srv.URL, t.TempDir(), FetchOptions{})
		require.NoError(t, err, "the hand-made stream of a good checkpoint must be accepted")
		require.Equal(t, m.Index, got.Manifest.Index)
	})

	cases := map[string]func() []entry{
		"flipped byte": func() []entry {
			es := clone()
			es[bigIdx].data[len(es[bigIdx].data)/2] ^= 0x40
			return es
		},
		"edited manifest index": func() []entry {
			es := clone()
			es[0].data = indexRE.ReplaceAll(es[0].data, []byte(`"Index": `+strconv.FormatUint(m.Index+1, 10)))
			require.NotEqual(t, good[0].data, es[0].data)
			return es
		},
		"forged manifest with a wrong crc": func() []entry {
			es := clone()
			fm := m
			fm.Files = append([]File{}, m.Files...)
			for i := range fm.Files {
				if fm.Files[i].Name == big.Name {
					fm.Files[i].CRC32C++
				}
			}
			es[0].data = resign(t, fm)
			return es
		},
		"path traversal": func() []entry {
			es := clone()
			es[bigIdx].name = DBDir + "/../../../evil-" + big.Name
			return es
		},
		"absolute path": func() []entry {
			es := clone()
			es[bigIdx].name = "/tmp/evil"
			return es
		},
		"extra file": func() []entry {
			return append(clone(), entry{name: DBDir + "/extra.sst", data: []byte("x")})
		},
		"missing file": func() []entry {
			es := clone()
			return append(es[:bigIdx], es[bigIdx+1:]...)
		},
		"duplicated file": func() []entry {
			es := clone()
			return append(es, es[bigIdx])
		},
		"oversize file": func() []entry {
			es := clone()
			es[bigIdx].size = int64(len(es[bigIdx].data)) + 4096
			return es
		},
		"symlink": func() []entry {
			es := clone()
			es[bigIdx] = entry{name: es[bigIdx].name, typ: tar.TypeSymlink}
			return es
		},
		"manifest not first": func() []entry {
			es := clone()
			es[0], es[1] = es[1], es[0]
			return es
		},
	}
	for name, mk := range cases {
		t.Run(name, func(t *testing.T) {
			srv := serveBytes(tarBytes(t, mk()))
			defer srv.Close()
			requireRejected(t, srv.URL)
			_, err := os.Stat(filepath.Join(filepath.Dir(t.TempDir()), "evil-"+big.Name))
			require.True(t, os.IsNotExist(err))
		})
	}
	t.Run("not a tar stream", func(t *testing.T) {
		srv := serveBytes(bytes.Repeat([]byte("garbage!"), 1000))
		defer srv.Close()
		requireRejected(t, srv.URL)
	})

	// Truncations of the real handler's tar stream (as a server without
	// the per-file endpoint serves it), with and without Content-Length.
	// (Per file, a cut is resumable: TestFetchResumesAfterCut.)
	stream := tarBytes(t, good)
	for _, cut := range []int{0, 100, 700, len(stream) / 2, len(stream) - 1030, len(stream) - 1} {
		for _, chunked := range []bool{false, true} {
			t.Run("truncated at "+strconv.Itoa(cut)+map[bool]string{true: " chunked"}[chunked], func(t *testing.T) {
				srv := httptest.NewServer(tarOnly(cutHandler(Handler(src), int64(cut), chunked)))
				defer srv.Close()
				requireRejected(t, srv.URL)
			})
		}
	}
}

func TestFetchServerHangsUp(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		panic(http.ErrAbortHandler)
	}))
	defer srv.Close()
	dst := filepath.Join(t.TempDir(), "dst")
	_, err := Fetch(context.Background(), srv.URL, dst, FetchOptions{})
	require.Error(t, err)
	require.Empty(t, dirNames(t, dst))
}

// cutHandler serves h's answer but stops after limit body bytes (the
// handler then aborts the connection). With chunked, Content-Length is
// dropped so the cut looks like a clean end of a chunked body.
func cutHandler(h http.Handler, limit int64, chunked bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&cutWriter{ResponseWriter: w, left: limit, chunked: chunked}, r)
	})
}

type cutWriter struct {
	http.ResponseWriter
	left    int64
	chunked bool
	wrote   bool
}

var errCut = errors.New("cut")

func (c *cutWriter) WriteHeader(code int) {
	if c.chunked {
		c.Header().Del("Content-Length")
	}
	c.wrote = true
	c.ResponseWriter.WriteHeader(code)
	// Commit the headers now, so that every cut is a cut of the body.
	http.NewResponseController(c.ResponseWriter).Flush()
}

func (c *cutWriter) Write(p []byte) (int, error) {
	if !c.wrote {
		c.WriteHeader(http.StatusOK)
	}
	if int64(len(p)) > c.left {
		n, _ := c.ResponseWriter.Write(p[:c.left])
		c.left = 0
		return n, errCut
	}
	c.left -= int64(len(p))
	return c.ResponseWriter.Write(p)
}

func TestLocalCorruptionDetected(t *testing.T) {
	ctx := context.Background()
	s := newStore(t, 3000, 1000)
	info, err := Create(ctx, s, t.TempDir(), Origin{Room: "r", RoomCzxid: 1})
	require.NoError(t, err)
	big := largestFile(info.Manifest)

	damage := map[string]func(t *testing.T, dir string){
		"flipped byte": func(t *testing.T, dir string) {
			flipByte(t, filepath.Join(dir, DBDir, big.Name), big.Size/3)
		},
		"truncated file": func(t *testing.T, dir string) {
			require.NoError(t, os.Truncate(filepath.Join(dir, DBDir, big.Name), big.Size-1))
		},
		"missing file": func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, DBDir, big.Name)))
		},
		"extra file": func(t *testing.T, dir string) {
			require.NoError(t, os.WriteFile(filepath.Join(dir, DBDir, "000999.sst"), []byte("x"), 0o644))
		},
		"edited manifest": func(t *testing.T, dir string) {
			p := filepath.Join(dir, ManifestName)
			b, err := os.ReadFile(p)
			require.NoError(t, err)
			b = indexRE.ReplaceAll(b, []byte(`"Index": 1`))
			require.NoError(t, os.WriteFile(p, b, 0o644))
		},
		"missing manifest": func(t *testing.T, dir string) {
			require.NoError(t, os.Remove(filepath.Join(dir, ManifestName)))
		},
	}
	for name, fn := range damage {
		t.Run(name, func(t *testing.T) {
			root := t.TempDir()
			dir := filepath.Join(root, filepath.Base(info.Path))
			copyTree(t, info.Path, dir)
			_, err := Verify(dir)
			require.NoError(t, err, "the undamaged copy verifies")
			fn(t, dir)
			_, err = Verify(dir)
			require.ErrorIs(t, err, ErrCorrupt)
			t.Logf("verify: %v", err)
			storeDir := filepath.Join(t.TempDir(), "store")
			require.ErrorIs(t, Restore(ctx, dir, storeDir, Origin{Room: "r", RoomCzxid: 1}), ErrCorrupt)
			_, err = os.Stat(storeDir)
			require.True(t, os.IsNotExist(err), "restore left a store directory behind")
			require.Equal(t, []string{}, append([]string{}, dirNames(t, filepath.Dir(storeDir))...), "restore left a temp dir behind")
		})
	}

	// A forger who re-signs the manifest with another index (files intact) gets
	// past the checksums, but Restore opens the copy read-only and refuses it.
	t.Run("re-signed manifest with another index", func(t *testing.T) {
		root := t.TempDir()
		fm := info.Manifest
		fm.Index += 5
		dir := filepath.Join(root, dirName(fm.Index))
		copyTree(t, info.Path, dir)
		require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestName), resign(t, fm), 0o644))
		_, err := Verify(dir)
		require.NoError(t, err)
		storeDir := filepath.Join(t.TempDir(), "store")
		err = Restore(ctx, dir, storeDir, Origin{Room: "r", RoomCzxid: 1})
		require.ErrorIs(t, err, ErrCorrupt)
		require.Contains(t, err.Error(), "store holds index")
		_, err = os.Stat(storeDir)
		require.True(t, os.IsNotExist(err))
	})
	t.Run("directory name disagrees with the manifest", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), dirName(info.Manifest.Index+1))
		copyTree(t, info.Path, dir)
		_, err := Verify(dir)
		require.ErrorIs(t, err, ErrCorrupt)
		l, err := List(filepath.Dir(dir))
		require.NoError(t, err)
		require.Empty(t, l)
	})
}

func FuzzParseManifest(f *testing.F) {
	m := Manifest{FormatVersion: FormatVersion, Room: "r", RoomCzxid: 9, Epoch: 1, Index: 5,
		Files: []File{{Name: "000001.sst", Size: 3, CRC32C: 9}, {Name: "MANIFEST-000001", Size: 0}}}
	b, err := m.Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Add(indexRE.ReplaceAll(b, []byte(`"Index": 6`)))
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"FormatVersion":1,"Files":[{"Name":"../x"}]}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseManifest(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error does not wrap ErrCorrupt: %v", err)
			}
			return
		}
		// Accepted manifests are valid and re-sign to the same checksum.
		sum := m.Checksum
		again, err := m.Marshal()
		if err != nil {
			t.Fatalf("re-marshal: %v", err)
		}
		if m.Checksum != sum {
			t.Fatalf("checksum changed on re-marshal: %s -> %s", sum, m.Checksum)
		}
		if _, err := ParseManifest(again); err != nil {
			t.Fatalf("re-parse: %v", err)
		}
		for _, f := range m.Files {
			if validFileName(f.Name) != nil {
				t.Fatalf("accepted bad file name %q", f.Name)
			}
		}
	})
}

package checkpoint

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"github.com/cockroachdb/pebble/v2"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/roomlog/roomlog/store"
	"github.com/stretchr/testify/require"
)

func TestZZProbeOpen(t *testing.T) {
	if os.Getenv("PROBE") == "" {
		t.Skip()
	}
	ctx := context.Background()
	base := t.TempDir()
	s, err := store.Open(filepath.Join(base, "store"), nil)
	require.NoError(t, err)
	defer s.Close()
	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, 4000)
	idx := uint64(1)
	for b := 0; b < 32768/32; b++ {
		var batch []store.Entry
		for j := 0; j < 32; j++ {
			for i := range val {
				val[i] = byte(rng.Uint32())
			}
			data, _ := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte(fmt.Sprintf("file/%09d", idx)), Value: val}})
			batch = append(batch, store.Entry{Index: idx, Epoch: 1, Data: data})
			idx++
		}
		_, err := s.Apply(batch)
		require.NoError(t, err)
	}
	root := filepath.Join(base, "ckpts")
	info, err := Create(ctx, s, root, Origin{Room: "big", RoomCzxid: 1})
	require.NoError(t, err)
	t.Logf("files %d bytes %d", len(info.Manifest.Files), info.Bytes)
	{
		pdb, err := pebble.Open(filepath.Join(info.Path, "db"), &pebble.Options{ReadOnly: true})
		require.NoError(t, err)
		m := pdb.Metrics()
		for i, l := range m.Levels {
			fmt.Println("L", i, l.TablesCount, l.TablesSize, "sublevels", l.Sublevels)
		}
		pdb.Close()
		fi, _ := os.ReadDir(filepath.Join(info.Path, "db"))
		for _, f := range fi {
			st, _ := f.Info()
			if !strings.HasSuffix(f.Name(), ".sst") { fmt.Println(f.Name(), st.Size()) }
		}
	}
	srv := httptest.NewServer(Handler(root))
	defer srv.Close()
	t0 := time.Now()
	got, err := Fetch(ctx, srv.URL, filepath.Join(base, "fetched"), FetchOptions{})
	require.NoError(t, err)
	t1 := time.Now()
	restored := filepath.Join(base, "restored")
	require.NoError(t, Restore(ctx, got.Path, restored, Origin{Room: "big", RoomCzxid: 1}))
	t2 := time.Now()
	if os.Getenv("PROBE") == "pause" {
		fmt.Println("PAUSE", os.Getpid())
		time.Sleep(3 * time.Second)
	}
	t2 = time.Now()
	go func() { time.Sleep(150 * time.Millisecond); pprof.Lookup("goroutine").WriteTo(os.Stdout, 2) }()
	r, err := store.Open(restored, nil)
	require.NoError(t, err)
	t3 := time.Now()
	r.Close()
	t.Logf("fetch %v restore %v open %v", t1.Sub(t0), t2.Sub(t1), t3.Sub(t2))
}

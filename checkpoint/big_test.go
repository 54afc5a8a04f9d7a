package checkpoint

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/roomlog/roomlog/store"
	"github.com/stretchr/testify/require"
)

// TestBigMeasurement measures, on a store of 1 million keys with ~200-byte
// values (~200 MB): apply throughput of the store alone, checkpoint create
// time, and fetch+verify+restore throughput over loopback. Not run by
// default: ROOMLOG_BIG=1 go test -run TestBigMeasurement -v ./checkpoint
func TestBigMeasurement(t *testing.T) {
	if os.Getenv("ROOMLOG_BIG") != "1" {
		t.Skip("set ROOMLOG_BIG=1 to run the 1M-key measurement")
	}
	ctx := context.Background()
	const (
		keys      = 1_000_000
		valueLen  = 200
		perBatch  = 1000 // entries per Apply (~230 KB: one logroom batch)
		smallRuns = 20_000
	)
	base := t.TempDir()
	s, err := store.Open(filepath.Join(base, "store"), &store.Options{MemTableSize: 64 << 20})
	require.NoError(t, err)
	defer s.Close()

	rng := rand.New(rand.NewPCG(1, 2))
	val := make([]byte, valueLen)
	mkEntry := func(idx uint64) store.Entry {
		for i := range val {
			val[i] = byte(rng.Uint32())
		}
		data, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte(fmt.Sprintf("file/%09d", idx)), Value: val}})
		require.NoError(t, err)
		return store.Entry{Index: idx, Epoch: 1, Data: data}
	}
	start := time.Now()
	var applyTime time.Duration
	batch := make([]store.Entry, 0, perBatch)
	for idx := uint64(1); idx <= keys; idx++ {
		batch = append(batch, mkEntry(idx))
		if len(batch) == perBatch {
			t0 := time.Now()
			_, err := s.Apply(batch)
			applyTime += time.Since(t0)
			require.NoError(t, err)
			batch = batch[:0]
		}
	}
	t.Logf("apply: %d entries (1 set of %d B each) in batches of %d, SyncEveryBatch: %.0f entries/s (%.1f MB/s of values) [wall incl. encoding %v]",
		keys, valueLen, perBatch, keys/applyTime.Seconds(), float64(keys*valueLen)/1e6/applyTime.Seconds(), time.Since(start).Round(time.Millisecond))

	// Apply throughput with small batches, both sync policies.
	for _, tc := range []struct {
		pol   store.SyncPolicy
		batch int
	}{{store.SyncEveryBatch, 1}, {store.SyncEveryBatch, 10}, {store.SyncEveryBatch, 100}, {store.SyncGroup, 1}, {store.SyncGroup, 10}} {
		ss, err := store.Open(filepath.Join(base, fmt.Sprintf("small-%d-%d", tc.pol, tc.batch)), &store.Options{Sync: tc.pol})
		require.NoError(t, err)
		n := smallRuns
		if tc.pol == store.SyncEveryBatch && tc.batch == 1 {
			n = 2000
		}
		t0 := time.Now()
		for idx := uint64(1); idx <= uint64(n); idx += uint64(tc.batch) {
			b := make([]store.Entry, 0, tc.batch)
			for j := 0; j < tc.batch; j++ {
				b = append(b, mkEntry(idx+uint64(j)))
			}
			_, err := ss.Apply(b)
			require.NoError(t, err)
		}
		el := time.Since(t0)
		require.NoError(t, ss.Close())
		t.Logf("apply: %s, batches of %d: %.0f entries/s (%d entries, incl. encoding)", tc.pol, tc.batch, float64(n)/el.Seconds(), n)
	}

	root := filepath.Join(base, "ckpts")
	t0 := time.Now()
	info, err := Create(ctx, s, root, Origin{Room: "big", RoomCzxid: 1})
	require.NoError(t, err)
	createTime := time.Since(t0)
	t.Logf("checkpoint create: %v for %.1f MB in %d files (index %d)", createTime.Round(time.Millisecond), float64(info.Bytes)/1e6, len(info.Manifest.Files), info.Manifest.Index)

	t0 = time.Now()
	_, err = Verify(info.Path)
	require.NoError(t, err)
	t.Logf("verify (local): %v", time.Since(t0).Round(time.Millisecond))

	srv := httptest.NewServer(Handler(root))
	defer srv.Close()
	var lastP Progress
	var calls int
	t0 = time.Now()
	got, err := Fetch(ctx, srv.URL, filepath.Join(base, "fetched"), FetchOptions{Progress: func(p Progress) { lastP = p; calls++ }})
	require.NoError(t, err)
	fetchTime := time.Since(t0)
	t1 := time.Now()
	restored := filepath.Join(base, "restored")
	require.NoError(t, Restore(ctx, got.Path, restored, Origin{Room: "big", RoomCzxid: 1}))
	restoreTime := time.Since(t1)
	total := time.Since(t0)
	mb := float64(info.Bytes) / 1e6
	t.Logf("fetch+verify over loopback: %v (%.0f MB/s; %d progress calls, last rate %.0f MB/s)", fetchTime.Round(time.Millisecond), mb/fetchTime.Seconds(), calls, lastP.Rate/1e6)
	t.Logf("restore (copy+crc+fsync+open check): %v (%.0f MB/s)", restoreTime.Round(time.Millisecond), mb/restoreTime.Seconds())
	t.Logf("fetch+verify+restore: %v for %.1f MB = %.0f MB/s", total.Round(time.Millisecond), mb, mb/total.Seconds())

	t0 = time.Now()
	want, widx, err := s.StateHash()
	require.NoError(t, err)
	hashTime := time.Since(t0)
	r, err := store.Open(restored, nil)
	require.NoError(t, err)
	defer r.Close()
	h, idx, err := r.StateHash()
	require.NoError(t, err)
	require.Equal(t, widx, idx)
	require.Equal(t, want, h)
	t.Logf("state hash of %d keys: %v; restored store identical (index %d)", keys, hashTime.Round(time.Millisecond), idx)
}

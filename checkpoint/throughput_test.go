package checkpoint

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/roomlog/roomlog/store"
	"github.com/stretchr/testify/require"
)

// TestFetchThroughput measures a full fetch of a checkpoint of about
// ROOMLOG_FETCH_MB megabytes over loopback against a sequential write of
// the same size on the same disk (4 MiB writes, one fsync at the end, as
// dd conv=fdatasync does). Not run by default:
//
//	ROOMLOG_FETCH_MB=1500 go test -run TestFetchThroughput -v ./checkpoint
func TestFetchThroughput(t *testing.T) {
	mbs, _ := strconv.Atoi(os.Getenv("ROOMLOG_FETCH_MB"))
	if mbs <= 0 {
		t.Skip("set ROOMLOG_FETCH_MB to run the throughput measurement")
	}
	ctx := context.Background()
	base := t.TempDir()
	s, err := store.Open(filepath.Join(base, "store"), &store.Options{MemTableSize: 64 << 20})
	require.NoError(t, err)
	defer s.Close()
	const valueLen = 16 << 10
	rng := rand.NewChaCha8([32]byte{1})
	n := mbs << 20 / valueLen
	t0 := time.Now()
	var batch []store.Entry
	for i := 1; i <= n; i++ {
		v := make([]byte, valueLen)
		rng.Read(v)
		data, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte(fmt.Sprintf("k/%09d", i)), Value: v}})
		require.NoError(t, err)
		batch = append(batch, store.Entry{Index: uint64(i), Epoch: 1, Data: data})
		if len(batch) == 64 || i == n {
			_, err := s.Apply(batch)
			require.NoError(t, err)
			batch = batch[:0]
		}
	}
	src := filepath.Join(base, "src")
	info, err := Create(ctx, s, src, Origin{Room: "big", RoomCzxid: 1})
	require.NoError(t, err)
	mb := float64(info.Bytes) / 1e6
	t.Logf("checkpoint: %.1f MB in %d files (built in %v)", mb, len(info.Manifest.Files), time.Since(t0).Round(time.Second))

	waitSettled(t, s.Dir()) // (no compaction competing for the disk)

	// The disk: a sequential write of the same size, 4 MiB writes of
	// random bytes, one fsync (as dd bs=4M conv=fdatasync).
	seq := filepath.Join(base, "seq")
	buf := make([]byte, 4<<20)
	rng.Read(buf)
	seqWrite := func() float64 {
		syscall.Sync()
		t0 := time.Now()
		f, err := os.Create(seq)
		require.NoError(t, err)
		for w := int64(0); w < info.Bytes; w += int64(len(buf)) {
			_, err := f.Write(buf[:min(int64(len(buf)), info.Bytes-w)])
			require.NoError(t, err)
		}
		require.NoError(t, f.Sync())
		require.NoError(t, f.Close())
		rate := mb / time.Since(t0).Seconds()
		require.NoError(t, os.Remove(seq))
		t.Logf("sequential write (4 MiB writes of random bytes + fsync): %.0f MB/s", rate)
		return rate
	}
	syscall.Sync()
	out, err := exec.Command("dd", "if=/dev/zero", "of="+seq, "bs=4M", fmt.Sprintf("count=%d", info.Bytes>>22), "conv=fdatasync").CombinedOutput()
	if err == nil {
		t.Logf("dd of zeros (for reference; zeros may be cheaper to this disk): %s", lastLine(string(out)))
	}
	os.Remove(seq)

	srv := httptest.NewServer(Handler(src))
	defer srv.Close()
	tsrv := httptest.NewServer(tarOnly(Handler(src)))
	defer tsrv.Close()
	for _, c := range []struct {
		name string
		url  string
		par  int
	}{{"per file, 4 at once", srv.URL, 4}, {"tar stream", tsrv.URL, 0}, {"per file, 4 at once", srv.URL, 4},
		{"tar stream", tsrv.URL, 0}, {"per file, 4 at once", srv.URL, 4}, {"per file, 8 at once", srv.URL, 8}, {"per file, 1 at a time", srv.URL, 1}} {
		disk := seqWrite() // (the disk's rate varies: measured next to each fetch)
		syscall.Sync()
		root := filepath.Join(base, "dst")
		cpu0 := cpuTime()
		t0 := time.Now()
		got, err := Fetch(ctx, c.url, root, FetchOptions{Parallel: c.par})
		require.NoError(t, err)
		el := time.Since(t0)
		cpu := cpuTime() - cpu0
		st := got.Fetch
		t.Logf("%s: %.0f MB/s end to end (%.0f%% of the sequential write); CPU (server+client) %.2f s/GB; manifest %v, local %v, transfer %v, final %v",
			c.name, mb/el.Seconds(), 100*mb/el.Seconds()/disk, cpu.Seconds()/(mb/1000), st.Manifest.Round(time.Millisecond), st.LocalMatch.Round(time.Millisecond),
			st.Transfer.Round(time.Millisecond), st.Final.Round(time.Millisecond))
		require.NoError(t, os.RemoveAll(root))
	}
}

func lastLine(s string) string {
	for len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == '\n' {
			return s[i+1:]
		}
	}
	return s
}

// cpuTime is the user+system CPU time of this process so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

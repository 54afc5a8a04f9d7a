package logroom

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/stretchr/testify/require"
)

// shared is one 1-server ensemble for the tests that need no faults; each
// test works under its own base path.
var shared = zkensemble.NewShared(zkensemble.Options{Servers: 1})

func TestMain(m *testing.M) {
	code := shared.Run(m)
	for _, f := range benchCleanup {
		f()
	}
	os.Exit(code)
}

// needZK fails under CI=true and skips otherwise when ZooKeeper is missing.
func needZK(t testing.TB) {
	t.Helper()
	zkensemble.Require(t)
}

func sharedZK(t testing.TB) *zkensemble.Ensemble {
	t.Helper()
	return shared.Get(t)
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func dial(t testing.TB, servers []string) *Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := Dial(ctx, DialConfig{Servers: servers, SessionTimeout: 4 * time.Second})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// testBase is a base path unique to the test, one top-level component (no
// shared parent: a test may protect its base with a digest ACL).
// testBase is the base path of t's rooms: its name, and for every run of
// it after the first in this process (-count) a run number, so a rerun
// never finds the rooms an earlier run left (tampered with, say).
func testBase(t testing.TB) string {
	r := strings.NewReplacer("/", "_", " ", "_", "#", "_")
	base := "/t_" + r.Replace(t.Name())
	basesMu.Lock()
	defer basesMu.Unlock()
	if b, ok := bases[t]; ok {
		return b
	}
	runs[base]++
	if n := runs[base]; n > 1 {
		base += fmt.Sprintf("_run%d", n)
	}
	bases[t] = base
	return base
}

var (
	basesMu sync.Mutex
	bases   = map[testing.TB]string{} // by test: its base
	runs    = map[string]int{}        // by name: runs so far
)

func openRoom(t testing.TB, c *Client, name string) *Room {
	t.Helper()
	r, err := OpenRoom(testCtx(t, 30*time.Second), c, name, RoomOptions{Base: testBase(t)})
	require.NoError(t, err)
	return r
}

func newWriter(t testing.TB, r *Room, cfg WriterConfig) *Writer {
	t.Helper()
	w, err := r.NewWriter(testCtx(t, 30*time.Second), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

func payload(i int) []byte { return []byte(fmt.Sprintf("entry-%08d", i)) }

// readN reads exactly n entries from rd and checks dense indexes.
func readN(t testing.TB, ctx context.Context, rd *Reader, n int) []Entry {
	t.Helper()
	var out []Entry
	for len(out) < n {
		es, err := rd.Next(ctx)
		require.NoError(t, err, "after %d of %d entries", len(out), n)
		require.NotEmpty(t, es)
		for _, e := range es {
			if len(out) > 0 {
				require.Equal(t, out[len(out)-1].Index+1, e.Index, "dense order")
			}
			out = append(out, e)
		}
	}
	require.Len(t, out, n, "read past the expected end")
	return out
}

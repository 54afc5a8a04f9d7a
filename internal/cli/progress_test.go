package cli

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func fastProgress(t *testing.T) {
	a, e, r := ProgressAfter, ProgressEvery, ProgressRedraw
	ProgressAfter, ProgressEvery, ProgressRedraw = 20*time.Millisecond, 20*time.Millisecond, 10*time.Millisecond
	t.Cleanup(func() { ProgressAfter, ProgressEvery, ProgressRedraw = a, e, r })
}

// TestProgressLines: without a terminal, nothing before ProgressAfter,
// then a line every ProgressEvery naming the step, the time and the
// count; nothing after Stop.
func TestProgressLines(t *testing.T) {
	fastProgress(t)
	var w syncBuf
	p := StartProgress(&w, "roomlog restore", false)
	p.Step("applying the archive of room %s", "ns")
	p.Count(250, 1000, "entries")
	require.Eventually(t, func() bool { return strings.Count(w.String(), "\n") >= 2 }, 5*time.Second, 5*time.Millisecond)
	p.Stop()
	out := w.String()
	require.NotContains(t, out, "\r", "no terminal, no bar")
	line := strings.SplitN(out, "\n", 2)[0]
	require.Regexp(t, `^roomlog restore: \d+s: applying the archive of room ns: 250 of 1000 entries \(25%\)$`, line)
	time.Sleep(50 * time.Millisecond)
	require.Equal(t, out, w.String(), "silent after Stop")

	// A quick operation prints nothing at all.
	ProgressAfter = time.Hour
	var quiet syncBuf
	p = StartProgress(&quiet, "x", false)
	p.Step("quick")
	p.Stop()
	require.Empty(t, quiet.String())
}

// TestProgressBar: on a terminal one line is redrawn in place with a bar
// (bytes in MiB); output through Writer erases the bar first and redraws
// it after; Stop and an empty step erase it.
func TestProgressBar(t *testing.T) {
	fastProgress(t)
	var w syncBuf
	p := StartProgress(&w, "dfsmaster-demo serve", true)
	p.Step("bootstrap: fetching a checkpoint")
	p.Count(50<<20, 100<<20, "bytes")
	require.Eventually(t, func() bool { return strings.Contains(w.String(), "[############------------] 50.0 of 100.0 MiB (50%)") },
		5*time.Second, 5*time.Millisecond, w.String())
	_, err := p.Writer().Write([]byte("time=... level=INFO msg=hello\n"))
	require.NoError(t, err)
	out := w.String()
	i := strings.Index(out, "time=...")
	require.Equal(t, "\r\x1b[K", out[i-4:i], "the bar is erased before a log line")
	require.Contains(t, out[i:], "\r\x1b[Kdfsmaster-demo serve [", "and redrawn after it")
	p.Step("")
	time.Sleep(30 * time.Millisecond)
	p.Stop()
	require.True(t, strings.HasSuffix(w.String(), "\r\x1b[K"), "erased: %q", w.String())
}

package main

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/checkpoint"
)

// TestBootstrapProgressLog: without a terminal, a bootstrap's checkpoint
// fetch logs nothing in its first 2 s, then a line every 3 s with the
// bytes, the total and the rate, and one when the checkpoint is verified;
// a new fetch starts over.
func TestBootstrapProgressLog(t *testing.T) {
	var buf bytes.Buffer
	fn := bootstrapProgress(slog.New(slog.NewTextHandler(&buf, nil)), nil)
	ev := func(bytes int64, elapsed time.Duration, stage string) {
		fn(checkpoint.Progress{Bytes: bytes, Total: 100 << 20, Rate: 10 << 20, Elapsed: elapsed, Stage: stage})
	}
	for ms := 0; ms <= 9000; ms += 100 {
		ev(int64(ms)<<20/100, time.Duration(ms)*time.Millisecond, checkpoint.StageStreaming)
	}
	ev(100<<20, 10*time.Second, checkpoint.StageVerified)
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 4, buf.String()) // 2 s, 5 s, 8 s, verified
	require.Contains(t, lines[0], `msg="bootstrap: fetching a checkpoint" received_mib=20 rate_mib_s=10 elapsed=2s total_mib=100 percent=20`)
	require.Contains(t, lines[1], "elapsed=5s")
	require.Contains(t, lines[3], `msg="bootstrap: checkpoint fetched and verified" received_mib=100`)

	buf.Reset()
	ev(1<<20, 100*time.Millisecond, checkpoint.StageStreaming)
	ev(1<<20, time.Second, checkpoint.StageVerified)
	require.Empty(t, buf.String(), "a fetch under 2 s says nothing")
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/zkensemble"
)

// buildDemo builds this command into a temp dir (with -race when the test
// binary has it, so the pair and its serve children are checked too).
func buildDemo(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "dfsmaster-demo")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go") // the toolchain that built this test
	}
	cmd := exec.Command(gobin, append(args, ".")...)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// TestPairDemo runs "dfsmaster-demo pair" end to end (its own one-server
// ZooKeeper, two serve processes, kill -9, takeover, restart, verification)
// and checks its RESULT line and exit status.
func TestPairDemo(t *testing.T) {
	zkensemble.Require(t)
	bin := buildDemo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "pair", "--zk-servers", "1", "--phase", "2s", "--workers", "3")
	// On timeout, interrupt it like Ctrl-C so it cleans up (its children die
	// with it anyway: Pdeathsig).
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 20 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	t.Logf("pair took %v", time.Since(start))
	out := stdout.String()
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out, stderr.String())

	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	last := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(last, "RESULT "), "last line %q", last)
	var res pairResult
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(last, "RESULT ")), &res))
	var generic map[string]any
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(last, "RESULT ")), &generic))
	for _, k := range []string{"ops_acked", "ops_lost", "ops_unknown", "ops_resolved_by_retry", "ops_replayed",
		"failover_ms", "replicas", "hashes_equal"} {
		require.Contains(t, generic, k)
	}
	require.NotContains(t, generic, "ops_unknown_landed", "unknown outcomes are resolved by retrying, not by reading")
	require.True(t, res.OK, out)
	require.Zero(t, res.OpsLost)
	require.Zero(t, res.Mismatches)
	// Every attempt with an unknown outcome (the requests in flight at the
	// kill, typically) was resolved by re-sending it with its key; a replay
	// is one kind of resolution.
	require.Zero(t, res.OpsUnknown)
	require.LessOrEqual(t, res.OpsReplayed, res.OpsResolved)
	require.Contains(t, out, "resolved by retry with the same Idempotency-Key")
	require.True(t, res.HashesEqual)
	require.Equal(t, 2, res.Replicas)
	require.Positive(t, res.FailoverMS)
	require.Positive(t, res.OpsAcked)
	require.GreaterOrEqual(t, res.AppliedIndex, uint64(res.OpsAcked))
	require.Equal(t, "m1", res.KilledNode)
	require.Equal(t, "m2", res.TakeoverNode)
	require.Contains(t, out, "took over")
	require.Contains(t, out, "summary:")
}

func TestPairUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"zk servers", []string{"--zk-servers", "2"}, "--zk-servers must be 1 or 3"},
		{"phase", []string{"--phase", "0s"}, "must be positive"},
		{"extra", []string{"x"}, "unexpected arguments"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, exitUsage, run(context.Background(), append([]string{"pair"}, tc.args...), &stdout, &stderr))
			require.Contains(t, stderr.String(), tc.want)
		})
	}
}

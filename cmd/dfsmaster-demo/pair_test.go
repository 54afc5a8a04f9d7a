package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/replica"
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

// TestPairDemo runs "dfsmaster-demo pair --acl" end to end (its own
// one-server ZooKeeper, two serve processes with generated digest
// credentials and checkpoint token, kill -9, takeover, restart,
// verification) and checks its RESULT line and exit status. While the
// pair runs, it checks from outside that the room's znodes refuse a plain
// ZooKeeper client without credentials (zk.ErrNoAuth) and one with a wrong
// password, but not one with the generated credentials; that a master's
// checkpoint endpoint answers 401 without the token; and that the master
// serves /metrics.
func TestPairDemo(t *testing.T) {
	zkensemble.Require(t)
	bin := buildDemo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	const room = "pairtest"
	cmd := exec.CommandContext(ctx, bin, "pair", "--zk-servers", "1", "--phase", "2s", "--workers", "3", "--acl", "--room", room)
	// On timeout, interrupt it like Ctrl-C so it cleans up (its children die
	// with it anyway: Pdeathsig).
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 20 * time.Second
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	require.NoError(t, cmd.Start())
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()

	// The output names ZooKeeper's address, the credentials file and m2's
	// address (m2 runs from start to end).
	var zkAddr, digestFile, m2Addr string
	require.Eventually(t, func() bool {
		for _, line := range strings.Split(stdout.String(), "\n") {
			if _, rest, ok := strings.Cut(line, "==> ZooKeeper ready in "); ok {
				_, zkAddr, _ = strings.Cut(rest, " at ")
			}
			if _, rest, ok := strings.Cut(line, "random password) in "); ok {
				digestFile, _, _ = strings.Cut(rest, ":")
			}
			if _, rest, ok := strings.Cut(line, "==> m2 serving http://"); ok {
				m2Addr, _, _ = strings.Cut(rest, " ")
			}
		}
		select {
		case err := <-exited:
			t.Fatalf("pair exited early (%v):\n%s\n%s", err, stdout.String(), stderr.String())
		default:
		}
		return zkAddr != "" && digestFile != "" && m2Addr != ""
	}, 90*time.Second, 20*time.Millisecond, "the pair's ZooKeeper, credentials and m2 lines")
	checkPairACL(t, zkAddr, digestFile, room)
	r := rawRequest(t, http.MethodGet, "http://"+m2Addr+replica.CheckpointPath(room)+"manifest", "")
	require.Equal(t, http.StatusUnauthorized, r.status, r.body)
	r = rawRequest(t, http.MethodGet, "http://"+m2Addr+metricsPath, "")
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.body, fmt.Sprintf(`roomlog_replica_applied_index{member="m2",room=%q}`, room))

	var err error
	select {
	case err = <-exited:
	case <-time.After(140 * time.Second):
		t.Fatal("pair did not finish")
	}
	t.Logf("pair took %v", time.Since(start))
	out := stdout.String()
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out, stderr.String())
	_, statErr := os.Stat(digestFile)
	require.ErrorIs(t, statErr, os.ErrNotExist, "the work dir (credentials included) is removed")

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
	require.Contains(t, generic, "acl")
	for _, k := range []string{"chunkservers", "chunkservers_killed", "rereplication_tasks", "tasks_done_twice", "blocks_under_replicated"} {
		require.Contains(t, generic, k)
	}
	require.True(t, res.OK, out)
	// A chunk server killed before the primary: every block it held is
	// back at its replication factor, across the failover, no task twice.
	require.Equal(t, 4, res.ChunkServers)
	require.Equal(t, 1, res.ChunkServersKilled)
	require.Positive(t, res.BlocksPlaced)
	require.Positive(t, res.RereplicationTasks)
	require.Zero(t, res.TasksDoneTwice)
	require.Zero(t, res.BlocksUnderReplicated)
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
	require.True(t, res.ACL)
	require.Contains(t, out, "ACL check: a ZooKeeper client without the credentials is refused on /roomlog/"+room)
	require.Contains(t, out, "checkpoint bearer token in ")
}

// checkPairACL connects to the pair's ZooKeeper with plain go-zookeeper
// clients: the room's znodes exist, and refuse reads and listings without
// credentials or with a wrong password (zk.ErrNoAuth), but not with the
// credentials of the pair's file.
func checkPairACL(t *testing.T, zkAddr, digestFile, room string) {
	t.Helper()
	cred, err := os.ReadFile(digestFile)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(cred), pairDigestUser+":"), "the credentials file holds user:password")
	fi, err := os.Stat(digestFile)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())
	connect := func(auth string) *zk.Conn {
		conn, _, err := zk.Connect(strings.Split(zkAddr, ","), 5*time.Second, zk.WithLogInfo(false),
			zk.WithLogger(log.New(io.Discard, "", 0)))
		require.NoError(t, err)
		t.Cleanup(conn.Close)
		if auth != "" {
			require.NoError(t, conn.AddAuth("digest", []byte(auth)))
		}
		return conn
	}
	roomPath := replica.DefaultBase + "/" + room
	paths := []string{roomPath, roomPath + "/members", roomPath + "/members/m2", roomPath + "/election"}
	for _, c := range []struct {
		name, auth string
	}{{"no credentials", ""}, {"wrong password", pairDigestUser + ":wrong"}} {
		conn := connect(c.auth)
		for _, p := range paths {
			ok, _, err := conn.Exists(p) // exists checks no ACL: the znode is there
			require.NoError(t, err, "%s: exists %s", c.name, p)
			require.True(t, ok, "%s: %s exists", c.name, p)
			_, _, err = conn.Get(p)
			require.ErrorIs(t, err, zk.ErrNoAuth, "%s: read %s", c.name, p)
			_, _, err = conn.Children(p)
			require.ErrorIs(t, err, zk.ErrNoAuth, "%s: list %s", c.name, p)
		}
		_, err := conn.Create(roomPath+"/members/mallory", []byte("x"), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		require.ErrorIs(t, err, zk.ErrNoAuth, "%s: add a member", c.name)
	}
	owner := connect(strings.TrimSuffix(string(cred), "\n"))
	for _, p := range paths {
		_, _, err := owner.Get(p)
		require.NoError(t, err, "with the credentials: read %s", p)
	}
	kids, _, err := owner.Children(roomPath + "/members")
	require.NoError(t, err)
	require.Contains(t, kids, "m2")
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
		{"bad room", []string{"--room", ".."}, `--room: logroom: bad name: room name "..": is a relative path element`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, exitUsage, run(context.Background(), append([]string{"pair"}, tc.args...), &stdout, &stderr))
			require.Contains(t, stderr.String(), tc.want)
		})
	}
}

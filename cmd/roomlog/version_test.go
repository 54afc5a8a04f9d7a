package main

import (
	"bytes"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	conv "github.com/roomlog/roomlog/internal/cli"
	"github.com/roomlog/roomlog/version"
)

// TestVersion: version prints the build line (or, with --json, the build
// as an object) and exits 0 before anything about ZooKeeper is checked or
// dialled: a --zk that names no server, or a listener that would see the
// connection, does not matter.
func TestVersion(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()

	for _, args := range [][]string{
		{"version"},
		{"--zk", ln.Addr().String(), "--timeout", "100ms", "version"},
		{"--zk", " , ", "--timeout", "0s", "--base", "relative", "version"}, // each a usage error for the other commands
	} {
		var out, errb bytes.Buffer
		require.Equal(t, exitOK, run(args, &out, &errb), "%q: stderr %s", args, errb.String())
		require.Equal(t, version.Info().String()+"\n", out.String(), "%q", args)
		require.Empty(t, errb.String(), "%q", args)
	}
	require.Regexp(t, `^v\d+\.\d+\.\d+ \(commit \S+, \S*, room versions \d+\.\.\d+\)$`, version.Info().String())

	var out, errb bytes.Buffer
	require.Equal(t, exitOK, run([]string{"version", "--json"}, &out, &errb), errb.String())
	var got map[string]any
	require.NoError(t, json.Unmarshal(out.Bytes(), &got), out.String())
	b := version.Info()
	require.Equal(t, map[string]any{
		"release": version.Release, "commit": b.Commit, "modified": b.Modified, "go": runtime.Version(),
		"room_min": float64(version.RoomMin), "room_max": float64(version.RoomMax),
	}, got)

	// Nothing connected to the listener.
	require.NoError(t, ln.(*net.TCPListener).SetDeadline(time.Now().Add(50*time.Millisecond)))
	conn, err := ln.Accept()
	if err == nil {
		conn.Close()
	}
	require.Error(t, err, "version dialled ZooKeeper")

	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"version", "extra"}, "version takes 0 argument(s), got 1"},
		{[]string{"version", "--from", "3"}, "apply to dump only"},
	} {
		out.Reset()
		errb.Reset()
		require.Equal(t, exitUsage, run(tc.args, &out, &errb), "%q", tc.args)
		require.Contains(t, errb.String(), tc.msg)
		require.Empty(t, out.String())
	}
	out.Reset()
	require.Equal(t, exitOK, run([]string{"help"}, &out, &errb))
	require.Contains(t, out.String(), "\n  version ")
}

// TestVersionBuilt: a roomlog binary built from this checkout names the
// commit it was built from (the Go toolchain's VCS stamp, which
// version.Info reads), one in this repository's history.
func TestVersionBuilt(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary")
	}
	if err := exec.Command("git", "rev-parse", "--absolute-git-dir").Run(); err != nil {
		t.Skipf("not a git checkout (or no git): %v", err)
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go") // the toolchain that built this test
	}
	bin := filepath.Join(t.TempDir(), "roomlog")
	build := exec.Command(gobin, "build", "-buildvcs=true", "-o", bin, ".")
	// GIT_OPTIONAL_LOCKS=0: the toolchain's "git status" must not take the
	// index lock of a checkout others commit in.
	build.Env = append(os.Environ(), "GIT_OPTIONAL_LOCKS=0", "GOFLAGS=")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	out, err = exec.Command(bin, "version", "--json").Output()
	require.NoError(t, err)
	var v conv.Version
	require.NoError(t, json.Unmarshal(out, &v), string(out))
	require.Equal(t, version.Release, v.Release)
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{40}$`), v.Commit)
	require.NoError(t, exec.Command("git", "merge-base", "--is-ancestor", v.Commit, "HEAD").Run(),
		"commit %s is not in this checkout's history", v.Commit)

	line, err := exec.Command(bin, "version").Output()
	require.NoError(t, err)
	require.Contains(t, string(line), version.Release+" (commit "+v.Commit[:12])
}

package main

import (
	"bytes"
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/internal/cli"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
)

// TestHelpToStdout: -h, --help and help print the usage with the exit
// codes to stdout and exit 0, as does every command's -h; no command is a
// usage error on stderr (exit 2).
func TestHelpToStdout(t *testing.T) {
	for _, args := range [][]string{{"-h"}, {"--help"}, {"help"}} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, exitOK, run(context.Background(), args, &stdout, &stderr), "%q", args)
		require.Contains(t, stdout.String(), "usage: dfsmaster-demo", "%q", args)
		require.Contains(t, stdout.String(), cli.ExitCodesHelp, "%q", args)
		require.Empty(t, stderr.String(), "%q", args)
	}
	for _, args := range [][]string{{"serve", "-h"}, {"ctl", "--help"}, {"chunkserver", "-h"}, {"restore", "-h"},
		{"pair", "-h"}, {"version", "-h"}, {"help", "serve"}, {"ctl", "--addr", "x", "mkdir", "-h"}} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, exitOK, run(context.Background(), args, &stdout, &stderr), "%q: %s", args, stderr.String())
		require.NotEmpty(t, stdout.String(), "%q", args)
		require.Empty(t, stderr.String(), "%q", args)
	}
	var stdout, stderr bytes.Buffer
	require.Equal(t, cli.ExitUsage, run(context.Background(), nil, &stdout, &stderr))
	require.Empty(t, stdout.String())
	require.Contains(t, stderr.String(), "usage: dfsmaster-demo")
}

// TestServeExitCodeRoomLost: a master whose room was deleted while it was
// down refuses to start with exit 4 (room not found), not 1.
func TestServeExitCodeRoomLost(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "solo")
	m, err := openMaster(ctx, serveConfig{Servers: ens.Addrs(), Room: "lost", ID: "solo", Data: dir,
		HTTPAddr: "127.0.0.1:0", SessionTimeout: 2 * time.Second, Logger: testLogger(t)})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return apiStatus(t, m.Addr()).Role == api.RolePrimary }, 30*time.Second, 20*time.Millisecond)
	c, err := client.New(m.Addr(), nil)
	require.NoError(t, err)
	_, err = c.Mkdir(ctx, "/x", false)
	require.NoError(t, err)
	require.NoError(t, m.Close())

	zc, err := logroom.Dial(ctx, logroom.DialConfig{Servers: ens.Addrs(), SessionTimeout: 2 * time.Second})
	require.NoError(t, err)
	require.NoError(t, logroom.DeleteRoom(ctx, zc, logroom.DefaultBase, "lost"))
	zc.Close()

	var stdout, stderr syncBuffer
	code := run(ctx, []string{"serve", "--zk", ens.ConnString(), "--room", "lost", "--id", "solo",
		"--data", dir, "--http", "127.0.0.1:0", "--session-timeout", "2s", "--log-level", "warn"}, &stdout, &stderr)
	require.Equal(t, cli.ExitNoRoom, code, "stderr: %s", stderr.String())
	require.Contains(t, stderr.String(), "reseed")
}

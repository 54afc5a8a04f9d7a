package main

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
)

// TestServeVersionFlags: --max-room-version, --compression and
// --handoff-timeout reach the master's config, with their defaults.
func TestServeVersionFlags(t *testing.T) {
	var stderr bytes.Buffer
	opts, _, ok := parseServeFlags([]string{"--id", "a", "--data", "/tmp/x"}, &stderr)
	require.True(t, ok, stderr.String())
	require.Zero(t, opts.cfg.MaxRoomVersion)
	require.Equal(t, logroom.CompressionS2, opts.cfg.Compression)
	require.Equal(t, 2*time.Second, opts.cfg.HandoffTimeout)
	opts, _, ok = parseServeFlags([]string{"--id", "a", "--data", "/tmp/x", "--max-room-version", "1", "--compression", "zstd", "--handoff-timeout", "0"}, &stderr)
	require.True(t, ok, stderr.String())
	require.Equal(t, 1, opts.cfg.MaxRoomVersion)
	require.Equal(t, logroom.CompressionZstd, opts.cfg.Compression)
	require.Zero(t, opts.cfg.HandoffTimeout)
	for _, bad := range [][]string{{"--max-room-version", "9"}, {"--max-room-version", "-1"}, {"--compression", "lz4"}, {"--handoff-timeout", "-1s"}} {
		stderr.Reset()
		_, code, ok := parseServeFlags(append([]string{"--id", "a", "--data", "/tmp/x"}, bad...), &stderr)
		require.False(t, ok, "%q", bad)
		require.Equal(t, exitUsage, code)
		require.Contains(t, stderr.String(), bad[0])
	}
}

// TestServeHandoffOnStop: a stopping primary hands its role to the
// standby before it leaves: when Close returns, the standby already leads
// (a plain leave would only start its takeover), and it leads at a newer
// epoch with everything applied.
func TestServeHandoffOnStop(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	dir := t.TempDir()
	withHandoff := func(c *serveConfig) { c.HandoffTimeout = 5 * time.Second }
	a := openTestMaster(t, ens, "handoff", "a", dir, withHandoff)
	require.Eventually(t, func() bool { return a.rep.Status().Role == replica.RolePrimary }, 30*time.Second, 10*time.Millisecond)
	b := openTestMaster(t, ens, "handoff", "b", dir, withHandoff)
	require.Eventually(t, func() bool {
		s := b.rep.Status()
		return s.Role == replica.RoleStandby && s.PrimaryID == "a" && len(a.rep.Status().Members) == 2
	}, 30*time.Second, 10*time.Millisecond)
	epoch := a.rep.Status().Epoch
	require.NoError(t, a.Close())
	s := b.rep.Status()
	require.Equal(t, replica.RolePrimary, s.Role, "the standby leads as soon as the old primary's Close returns")
	require.Greater(t, s.Epoch, epoch)
}

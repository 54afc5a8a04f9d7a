package main

import (
	"bytes"
	"testing"

	"github.com/roomlog/roomlog/logroom"
	"github.com/stretchr/testify/require"
)

// TestServeEnvironment: serve reads the ROOMLOG_* variables roomlog reads
// (ROOMLOG_ZK, ROOMLOG_ZK_DIGEST_FILE, ROOMLOG_CHECKPOINT_TOKEN_FILE); the
// old names (ZK, DFSMASTER_ZK_DIGEST_FILE, DFSMASTER_CHECKPOINT_TOKEN_FILE)
// still work with a deprecation warning naming the new one; the new name
// wins over an old one, a flag over both, and a flag on the line reads no
// variable (no warning).
func TestServeEnvironment(t *testing.T) {
	digest := writeFile(t, "digest", "nn:pa55word\n")
	token := writeFile(t, "token", "t0ken-value\n")
	base := []string{"--id", "a", "--data", t.TempDir()}
	clear := func() {
		for _, n := range []string{envZK, envDigestFile, envTokenFile, "ZK", "DFSMASTER_ZK_DIGEST_FILE",
			"ROOMLOG_DIGEST_FILE", "DFSMASTER_CHECKPOINT_TOKEN_FILE"} {
			t.Setenv(n, "")
		}
	}
	parse := func(args ...string) (serveOptions, string) {
		t.Helper()
		var stderr bytes.Buffer
		opts, _, ok := parseServeFlags(append(append([]string{}, base...), args...), &stderr)
		require.True(t, ok, stderr.String())
		return opts, stderr.String()
	}

	clear()
	t.Setenv(envZK, "zk1:2181,zk2:2181")
	t.Setenv(envDigestFile, digest)
	t.Setenv(envTokenFile, token)
	opts, warn := parse()
	require.Equal(t, []string{"zk1:2181", "zk2:2181"}, opts.cfg.Servers)
	require.Equal(t, &logroom.Digest{User: "nn", Password: "pa55word"}, opts.cfg.Auth)
	require.Equal(t, "t0ken-value", opts.cfg.CheckpointToken)
	require.NotContains(t, warn, "deprecated")

	clear()
	t.Setenv("ZK", "old:2181")
	t.Setenv("DFSMASTER_ZK_DIGEST_FILE", digest)
	t.Setenv("DFSMASTER_CHECKPOINT_TOKEN_FILE", token)
	opts, warn = parse()
	require.Equal(t, []string{"old:2181"}, opts.cfg.Servers)
	require.Equal(t, &logroom.Digest{User: "nn", Password: "pa55word"}, opts.cfg.Auth)
	require.Equal(t, "t0ken-value", opts.cfg.CheckpointToken)
	for _, w := range []string{
		"environment variable ZK is deprecated; set ROOMLOG_ZK instead",
		"environment variable DFSMASTER_ZK_DIGEST_FILE is deprecated; set ROOMLOG_ZK_DIGEST_FILE instead",
		"environment variable DFSMASTER_CHECKPOINT_TOKEN_FILE is deprecated; set ROOMLOG_CHECKPOINT_TOKEN_FILE instead",
	} {
		require.Contains(t, warn, w)
	}

	// The new name wins; a flag wins over both and reads no variable.
	t.Setenv(envZK, "new:2181")
	opts, _ = parse()
	require.Equal(t, []string{"new:2181"}, opts.cfg.Servers)
	opts, warn = parse("--zk", "flag:2181")
	require.Equal(t, []string{"flag:2181"}, opts.cfg.Servers)
	require.NotContains(t, warn, "ZK is deprecated")

	clear()
	opts, _ = parse()
	require.Equal(t, []string{"127.0.0.1:2181"}, opts.cfg.Servers)
	require.Nil(t, opts.cfg.Auth)
}

// TestChunkServerAndPairEnvironment: chunkserver and pair read the same
// variables (an unreadable digest file named by an old variable is refused
// as their own flag would be, after the warning).
func TestChunkServerAndPairEnvironment(t *testing.T) {
	for _, n := range []string{envZK, envDigestFile, "ZK", "ROOMLOG_DIGEST_FILE"} {
		t.Setenv(n, "")
	}
	t.Setenv("DFSMASTER_ZK_DIGEST_FILE", "/nonexistent/digest")
	for _, args := range [][]string{{"chunkserver", "--id", "c1"}, {"pair"}} {
		var stdout, stderr bytes.Buffer
		require.Equal(t, exitUsage, run(t.Context(), args, &stdout, &stderr), args)
		require.Contains(t, stderr.String(), "DFSMASTER_ZK_DIGEST_FILE is deprecated; set ROOMLOG_ZK_DIGEST_FILE instead", args)
		require.Contains(t, stderr.String(), "--zk-digest-file: ", args)
	}
	t.Setenv("DFSMASTER_ZK_DIGEST_FILE", "")
	t.Setenv("ZK", "bad host no port")
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitUsage, run(t.Context(), []string{"chunkserver", "--id", "c1", "--room", "bad/room"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "ZK is deprecated; set ROOMLOG_ZK instead")
}

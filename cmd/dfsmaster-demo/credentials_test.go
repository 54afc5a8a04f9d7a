package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/logroom"
)

// writeFile writes a test file (mode 0600) and returns its path.
func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
	return p
}

func TestLoadTokenFile(t *testing.T) {
	for _, tc := range []struct {
		name, content, want, err string
	}{
		{"plain", "s3cr3t-t0ken", "s3cr3t-t0ken", ""},
		{"trailing newline", "s3cr3t\n", "s3cr3t", ""},
		{"trailing CRLF", "s3cr3t\r\n", "s3cr3t", ""},
		{"max size", strings.Repeat("a", maxTokenFile), strings.Repeat("a", maxTokenFile), ""},
		{"max size with newline", strings.Repeat("a", maxTokenFile-1) + "\n", strings.Repeat("a", maxTokenFile-1), ""},
		{"empty", "", "", "holds no token (empty)"},
		{"only a newline", "\n", "", "holds no token (empty)"},
		{"too large", strings.Repeat("a", maxTokenFile+1), "", "larger than 4096 bytes"},
		{"two newlines", "s3cr3t\n\n", "", "byte 6 is 0x0a"},
		{"two lines", "s3cr3t\nmore\n", "", "byte 6 is 0x0a"},
		{"inner space", "s3 cr3t", "", "byte 2 is 0x20"},
		{"lone CR", "s3cr3t\r", "", "byte 6 is 0x0d"},
		{"non-ASCII", "s3cr3té", "", "byte 6 is 0xc3"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := loadTokenFile(writeFile(t, "token", tc.content))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				if len(tc.content) > 3 {
					require.NotContains(t, err.Error(), tc.content[:4], "the error shows the token")
				}
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	_, err := loadTokenFile(filepath.Join(t.TempDir(), "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = loadTokenFile(t.TempDir())
	require.ErrorContains(t, err, "not a regular file")
}

// TestServeCredentialFlags: --zk-digest-file and --checkpoint-token-file
// (or their environment variables) fill the replica's Auth and
// CheckpointToken; bad files are a usage error that never shows the secret.
func TestServeCredentialFlags(t *testing.T) {
	digest := writeFile(t, "digest", "nn:pa55word\n")
	token := writeFile(t, "token", "t0ken-value\n")
	base := []string{"--id", "a", "--data", "/tmp/x"}

	t.Setenv(envDigestFile, "")
	t.Setenv(envTokenFile, "")
	var stderr bytes.Buffer
	opts, _, ok := parseServeFlags(base, &stderr)
	require.True(t, ok, stderr.String())
	require.Nil(t, opts.cfg.Auth)
	require.Empty(t, opts.cfg.CheckpointToken)

	opts, _, ok = parseServeFlags(append(base, "--zk-digest-file", digest, "--checkpoint-token-file", token), &stderr)
	require.True(t, ok, stderr.String())
	require.Equal(t, &logroom.Digest{User: "nn", Password: "pa55word"}, opts.cfg.Auth)
	require.Equal(t, "t0ken-value", opts.cfg.CheckpointToken)

	t.Setenv(envDigestFile, digest)
	t.Setenv(envTokenFile, token)
	opts, _, ok = parseServeFlags(base, &stderr)
	require.True(t, ok, stderr.String())
	require.Equal(t, &logroom.Digest{User: "nn", Password: "pa55word"}, opts.cfg.Auth)
	require.Equal(t, "t0ken-value", opts.cfg.CheckpointToken)
	// The flag wins over the environment.
	other := writeFile(t, "token2", "other-token")
	opts, _, ok = parseServeFlags(append(base, "--checkpoint-token-file", other), &stderr)
	require.True(t, ok, stderr.String())
	require.Equal(t, "other-token", opts.cfg.CheckpointToken)
	t.Setenv(envDigestFile, "")
	t.Setenv(envTokenFile, "")

	for _, tc := range []struct {
		name, flag, content, want string
	}{
		{"digest without colon", "--zk-digest-file", "nnpa55word\n", "--zk-digest-file: "},
		{"digest empty password", "--zk-digest-file", "nn:\n", "empty password"},
		{"digest two lines", "--zk-digest-file", "nn:pa55word\nnn:pa55word\n", "control character"},
		{"digest too large", "--zk-digest-file", "nn:" + strings.Repeat("p", 5000), "larger than 4096 bytes"},
		{"token empty", "--checkpoint-token-file", "", "--checkpoint-token-file: "},
		{"token too large", "--checkpoint-token-file", strings.Repeat("p", 5000), "larger than 4096 bytes"},
		{"token with a space", "--checkpoint-token-file", "pa55 word", "visible ASCII"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"serve"}, base...)
			args = append(args, tc.flag, writeFile(t, "secret", tc.content))
			require.Equal(t, exitUsage, run(t.Context(), args, &stdout, &stderr))
			require.Contains(t, stderr.String(), tc.want)
			require.NotContains(t, stderr.String(), "pa55", "the error shows the secret")
			require.Empty(t, stdout.String())
		})
	}
	var stdout bytes.Buffer
	stderr.Reset()
	require.Equal(t, exitUsage, run(t.Context(), append([]string{"serve", "--zk-digest-file", "/nonexistent/digest"}, base...), &stdout, &stderr))
	require.Contains(t, stderr.String(), "--zk-digest-file: logroom: digest file: open /nonexistent/digest")
}

// TestPairCredentialFlags: pair --acl and --zk-digest-file exclude each
// other; a bad credentials file is refused before anything starts.
func TestPairCredentialFlags(t *testing.T) {
	t.Setenv(envDigestFile, "")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"acl and file", []string{"--acl", "--zk-digest-file", writeFile(t, "d", "u:p4ss\n")}, "--acl generates credentials; --zk-digest-file gives them: use one"},
		{"bad file", []string{"--zk-digest-file", writeFile(t, "d", "no colon here\n")}, "--zk-digest-file: "},
		{"missing file", []string{"--zk-digest-file", "/nonexistent/digest"}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			start := time.Now()
			require.Equal(t, exitUsage, run(t.Context(), append([]string{"pair"}, tc.args...), &stdout, &stderr))
			require.Contains(t, stderr.String(), tc.want)
			require.NotContains(t, stderr.String(), "p4ss")
			require.Less(t, time.Since(start), 5*time.Second, "refused before starting anything")
		})
	}
	// The environment's file is overridden by --acl (no conflict).
	t.Setenv(envDigestFile, "/nonexistent/digest")
	var stdout, stderr bytes.Buffer
	require.Equal(t, exitUsage, run(t.Context(), []string{"pair", "--acl", "--zk-servers", "2"}, &stdout, &stderr))
	require.Contains(t, stderr.String(), "--zk-servers must be 1 or 3")
	require.NotContains(t, stderr.String(), "digest")
}

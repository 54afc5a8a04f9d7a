package logroom

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseDigest(t *testing.T) {
	d, err := ParseDigest("alice:pa:ss word")
	require.NoError(t, err)
	require.Equal(t, Digest{User: "alice", Password: "pa:ss word"}, *d)
	for _, bad := range []string{"", "alice", ":pw", "alice:", " alice:pw", "alice:pw ", "al\x00ice:pw", "alice:p\nw"} {
		_, err := ParseDigest(bad)
		require.ErrorIs(t, err, ErrBadDigest, "%q", bad)
		if i := strings.IndexByte(bad, ':'); i >= 0 && len(bad) > i+1 {
			require.NotContains(t, err.Error(), bad[i+1:], "the password leaks into the error")
		}
	}
}

func TestLoadDigestFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	for _, content := range []string{"bob:secret", "bob:secret\n", "bob:secret\r\n"} {
		d, err := LoadDigestFile(write("ok", content))
		require.NoError(t, err)
		require.Equal(t, Digest{User: "bob", Password: "secret"}, *d)
	}
	for _, content := range []string{"", "\n", "bob:secret\nmore", "bob:secret\n\n", "bobsecret", strings.Repeat("x", 5000) + ":y"} {
		_, err := LoadDigestFile(write("bad", content))
		require.ErrorIs(t, err, ErrBadDigest, "%q", content)
		require.NotContains(t, err.Error(), "secret")
	}
	_, err := LoadDigestFile(filepath.Join(dir, "missing"))
	require.ErrorIs(t, err, os.ErrNotExist)
	_, err = LoadDigestFile(dir)
	require.ErrorIs(t, err, ErrBadDigest)
}

package version

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The RELEASES file's last line is this binary's release with its room
// versions, and CHANGELOG.md has a section for every release listed.
func TestReleasesFileMatchesBinary(t *testing.T) {
	f, err := os.Open("../RELEASES")
	require.NoError(t, err)
	defer f.Close()
	lines, err := ParseReleases(f)
	require.NoError(t, err)
	last := lines[len(lines)-1]
	require.Equal(t, Release, last.Release, "RELEASES' last line names another release than version.Release")
	require.Equal(t, RoomMin, last.RoomMin)
	require.Equal(t, RoomMax, last.RoomMax)
	prev, ok := Previous(lines, Release)
	require.True(t, ok, "RELEASES lists no release before %s", Release)
	require.NotEmpty(t, prev.Commit)

	changelog, err := os.ReadFile("../CHANGELOG.md")
	require.NoError(t, err)
	for _, l := range lines {
		require.Contains(t, string(changelog), "## "+l.Release, "CHANGELOG.md has no section for %s", l.Release)
	}
}

func TestParseReleasesRefusesBadLines(t *testing.T) {
	for _, bad := range []string{
		"",
		"v0.1 db299032515bf2a911bd5d0962c84c91a29b351f 1..1",
		"v0.1.0 db29903 1..1",
		"v0.1.0 db299032515bf2a911bd5d0962c84c91a29b351f 2..1",
		"v0.1.0 db299032515bf2a911bd5d0962c84c91a29b351f 1",
		"v0.1.0 - 1..1\nv0.2.0 - 1..2",
		"v0.1.0 db299032515bf2a911bd5d0962c84c91a29b351f 1..1 extra",
	} {
		_, err := ParseReleases(strings.NewReader(bad))
		require.Error(t, err, "%q", bad)
	}
	lines, err := ParseReleases(strings.NewReader("# c\nv0.1.0 db299032515bf2a911bd5d0962c84c91a29b351f 1..1\n\nv0.2.0 - 1..2\n"))
	require.NoError(t, err)
	require.Len(t, lines, 2)
	p, ok := Previous(lines, "v0.2.0")
	require.True(t, ok)
	require.Equal(t, "v0.1.0", p.Release)
	_, ok = Previous(lines, "v0.1.0")
	require.False(t, ok)
}

func TestBuildString(t *testing.T) {
	b := Build{Release: "v9.9.9", Commit: "0123456789abcdef0123", Modified: true, GoVersion: "go1.26"}
	require.Equal(t, "v9.9.9 (commit 0123456789ab+dirty, go1.26, room versions 1..2)", b.String())
	require.True(t, Supports(RoomMax))
	require.False(t, Supports(RoomMax+1))
	require.False(t, Supports(0))
	require.Equal(t, Release, Info().Release)
}

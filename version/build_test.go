package version

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReadBuild: the toolchain's vcs settings win; without them the
// linker's stamp gives the commit.
func TestReadBuild(t *testing.T) {
	const c1, c2 = "1111111111111111111111111111111111111111", "2222222222222222222222222222222222222222"
	vcs := &debug.BuildInfo{GoVersion: "go1.26", Settings: []debug.BuildSetting{{Key: "vcs.revision", Value: c1}, {Key: "vcs.modified", Value: "false"}}}
	for _, tc := range []struct {
		name             string
		bi               *debug.BuildInfo
		commit, modified string
		want             Build
	}{
		{"vcs", vcs, "", "", Build{Release: Release, Commit: c1, GoVersion: "go1.26"}},
		{"vcs wins over the stamp", vcs, c2, "true", Build{Release: Release, Commit: c1, GoVersion: "go1.26"}},
		{"stamp without vcs", &debug.BuildInfo{GoVersion: "go1.26"}, c2, "true", Build{Release: Release, Commit: c2, Modified: true, GoVersion: "go1.26"}},
		{"nothing", nil, "", "", Build{Release: Release}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, readBuild(tc.bi, tc.commit, tc.modified))
		})
	}
}

// TestMakeBuildStampsCommit: GOFLAGS=-buildvcs=false make build builds
// binaries whose --version names the checkout's commit, not "unknown".
func TestMakeBuildStampsCommit(t *testing.T) {
	if testing.Short() {
		t.Skip("builds both binaries")
	}
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	head, err := exec.Command("git", "-C", "..", "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("not a git checkout: %v", err)
	}
	commit := strings.TrimSpace(string(head))
	bin := t.TempDir()
	cmd := exec.Command("make", "-C", "..", "build", "BINDIR="+bin)
	cmd.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, name := range []string{"roomlog", "dfsmaster-demo"} {
		v, err := exec.Command(filepath.Join(bin, name), "--version").Output()
		require.NoError(t, err, name)
		require.Contains(t, string(v), "(commit "+commit[:12], name)
	}
}

package compat

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomlog/roomlog/version"
)

const (
	modulePath = "github.com/roomlog/roomlog"
	demoPkg    = "./cmd/dfsmaster-demo"
	// buildTimeout bounds both builds together (a cold build cache on
	// two cores compiles Pebble twice: once per tree).
	buildTimeout = 8 * time.Minute
)

// demoBuilds are the two dfsmaster-demo binaries every test of the
// package uses.
type demoBuilds struct {
	Old     version.ReleaseLine // the release before version.Release
	OldBin  string
	NewBin  string
	OldTook time.Duration
	NewTook time.Duration
	// OldModMod: the old tree built only with -mod=mod (its go.sum
	// lacks an entry this toolchain wants).
	OldModMod bool
}

// buildCache builds the binaries once per test binary run; TestMain
// removes dir.
type buildCache struct {
	once    sync.Once
	dir     string
	b       demoBuilds
	missing string // the release's commit is not in this clone ("" when it is)
	err     error
}

var builds buildCache

func TestMain(m *testing.M) {
	code := m.Run()
	if builds.dir != "" {
		_ = os.RemoveAll(builds.dir)
	}
	os.Exit(code)
}

// demoBinaries returns the two builds, building them on first use. A
// clone without the previous release's commit fails the test under
// CI=true and skips it otherwise.
func demoBinaries(t *testing.T) demoBuilds {
	t.Helper()
	builds.once.Do(builds.build)
	if builds.missing != "" {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%s (CI=true: the compatibility test fails instead of skipping)", builds.missing)
		}
		t.Skip(builds.missing)
	}
	if builds.err != nil {
		t.Fatalf("compat: %v", builds.err)
	}
	return builds.b
}

func (c *buildCache) build() {
	ctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	root, err := repoRoot()
	if err != nil {
		c.err = err
		return
	}
	prev, err := previousRelease(root)
	if err != nil {
		c.err = err
		return
	}
	c.b.Old = prev
	if out, err := run(ctx, root, nil, "git", "cat-file", "-e", prev.Commit+"^{commit}"); err != nil {
		c.missing = fmt.Sprintf("compat: commit %s of release %s (RELEASES) is not in the history of %s (%v: %s); "+
			"the compatibility test builds the previous release from the repository's own history: "+
			"fetch the full history of main (git fetch --unshallow, or clone without --depth)",
			prev.Commit, prev.Release, root, err, strings.TrimSpace(string(out)))
		return
	}
	c.dir, err = os.MkdirTemp("", "roomlog-compat-")
	if err != nil {
		c.err = err
		return
	}

	// This tree first: the old tree then finds most of its dependencies
	// compiled in the build cache.
	c.b.NewBin = filepath.Join(c.dir, "demo-new")
	start := time.Now()
	if out, err := run(ctx, root, nil, goTool(), "build", "-o", c.b.NewBin, demoPkg); err != nil {
		c.err = fmt.Errorf("build %s at %s: %w\n%s", demoPkg, root, err, out)
		return
	}
	c.b.NewTook = time.Since(start)

	start = time.Now()
	src := filepath.Join(c.dir, "src-"+prev.Release)
	if err := os.Mkdir(src, 0o755); err != nil {
		c.err = err
		return
	}
	tarball := filepath.Join(c.dir, prev.Release+".tar")
	if out, err := run(ctx, root, nil, "git", "archive", "--format=tar", "-o", tarball, prev.Commit); err != nil {
		c.err = fmt.Errorf("git archive %s: %w\n%s", prev.Commit, err, out)
		return
	}
	if out, err := run(ctx, src, nil, "tar", "-xf", tarball); err != nil {
		c.err = fmt.Errorf("extract %s: %w\n%s", tarball, err, out)
		return
	}
	c.b.OldBin = filepath.Join(c.dir, "demo-old")
	out, err := run(ctx, src, nil, goTool(), "build", "-o", c.b.OldBin, demoPkg)
	if err != nil {
		// The old go.sum may lack a line this toolchain wants; the
		// module cache has the modules themselves.
		flags := strings.TrimSpace(os.Getenv("GOFLAGS") + " -mod=mod")
		out2, err2 := run(ctx, src, []string{"GOFLAGS=" + flags}, goTool(), "build", "-o", c.b.OldBin, demoPkg)
		if err2 != nil {
			c.err = fmt.Errorf("build %s of %s (commit %s): %w\n%s\nwith -mod=mod: %v\n%s",
				demoPkg, prev.Release, prev.Commit, err, out, err2, out2)
			return
		}
		c.b.OldModMod = true
	}
	c.b.OldTook = time.Since(start)
}

// repoRoot is the module root: this package's parent directory.
func repoRoot() (string, error) {
	root, err := filepath.Abs("..")
	if err != nil {
		return "", err
	}
	mod, err := os.ReadFile(filepath.Join(root, "go.mod"))
	if err != nil {
		return "", fmt.Errorf("compat: the module root: %w", err)
	}
	if !bytes.HasPrefix(mod, []byte("module "+modulePath+"\n")) {
		return "", fmt.Errorf("compat: %s/go.mod is not module %s", root, modulePath)
	}
	return root, nil
}

// previousRelease reads RELEASES at root and returns the release before
// this binary's.
func previousRelease(root string) (version.ReleaseLine, error) {
	f, err := os.Open(filepath.Join(root, "RELEASES"))
	if err != nil {
		return version.ReleaseLine{}, fmt.Errorf("compat: %w", err)
	}
	defer f.Close()
	lines, err := version.ParseReleases(f)
	if err != nil {
		return version.ReleaseLine{}, fmt.Errorf("compat: %w", err)
	}
	prev, ok := version.Previous(lines, version.Release)
	if !ok {
		return version.ReleaseLine{}, fmt.Errorf("compat: RELEASES lists no release before %s", version.Release)
	}
	if prev.Commit == "" {
		return version.ReleaseLine{}, fmt.Errorf("compat: RELEASES names no commit for %s", prev.Release)
	}
	return prev, nil
}

// run runs name with args in dir (env added to the environment) and
// returns its combined output.
func run(ctx context.Context, dir string, env []string, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil && ctx.Err() != nil {
		err = errors.Join(err, ctx.Err())
	}
	return out, err
}

// goTool is the go command: on PATH, else the toolchain that built this
// test.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

package testnode

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// CmdPackage is the import path of the test node's main package.
const CmdPackage = "github.com/roomlog/roomlog/internal/harness/testnode/cmd/roomlog-testnode"

// EnvRace, when "1", makes Build compile the node with -race (slower
// nodes; use it to hunt data races in replica under faults).
const EnvRace = "ROOMLOG_TESTNODE_RACE"

// builds caches the binary per test process (the one mutable package
// variable: building a Go binary costs seconds, and every test of the
// process needs the same one). Guarded by buildMu.
var (
	buildMu sync.Mutex
	builds  = map[bool]*buildResult{}
)

type buildResult struct {
	done chan struct{}
	path string
	err  error
}

// Build compiles the node binary once per process (per race flag, see
// EnvRace) into a temp dir and returns its path. Concurrent callers share
// one build. A failed build is not cached. RemoveBuilds deletes the
// binaries (call it from TestMain after m.Run).
func Build(ctx context.Context) (string, error) {
	race := os.Getenv(EnvRace) == "1"
	buildMu.Lock()
	b, ok := builds[race]
	if !ok {
		b = &buildResult{done: make(chan struct{})}
		builds[race] = b
		buildMu.Unlock()
		b.path, b.err = build(ctx, race)
		if b.err != nil {
			buildMu.Lock()
			delete(builds, race)
			buildMu.Unlock()
		}
		close(b.done)
		return b.path, b.err
	}
	buildMu.Unlock()
	select {
	case <-b.done:
		return b.path, b.err
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

// BuildT is Build for a test: it fails t on error (5 minutes at most).
func BuildT(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	p, err := Build(ctx)
	if err != nil {
		t.Fatalf("build %s: %v", CmdPackage, err)
	}
	return p
}

// RemoveBuilds deletes the binaries Build made in this process.
func RemoveBuilds() {
	buildMu.Lock()
	defer buildMu.Unlock()
	for race, b := range builds {
		select {
		case <-b.done:
			if b.err == nil {
				_ = os.RemoveAll(filepath.Dir(b.path))
			}
			delete(builds, race)
		default: // still building: leave it
		}
	}
}

func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	for _, p := range []string{filepath.Join(runtime.GOROOT(), "bin", "go"), "/usr/local/go/bin/go"} {
		if _, err := os.Stat(p); err == nil {
			return p
		}
	}
	return "go"
}

// srcDir is this package's source directory (inside the module), where
// `go build` runs so the module is found whatever the caller's cwd.
func srcDir() string {
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		return ""
	}
	dir := filepath.Dir(file)
	if _, err := os.Stat(dir); err != nil {
		return ""
	}
	return dir
}

func build(ctx context.Context, race bool) (string, error) {
	dir, err := os.MkdirTemp("", "roomlog-testnode-bin-")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "roomlog-testnode")
	args := []string{"build", "-o", out}
	if race {
		args = append(args, "-race")
	}
	args = append(args, CmdPackage)
	cmd := exec.CommandContext(ctx, goTool(), args...)
	cmd.Dir = srcDir()
	start := time.Now()
	if b, err := cmd.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", fmt.Errorf("go %v (in %s, after %v): %w\n%s", args, cmd.Dir, time.Since(start).Round(time.Millisecond), err, b)
	}
	return out, nil
}

// BuildRelease builds the roomlog-testnode of an earlier commit of this
// module (a release RELEASES names) into dir: it extracts the commit with
// `git archive` from the repository this package's source sits in (the
// checkout is not touched) and runs `go build` there, again with
// -mod=mod if the old go.sum lacks an entry this toolchain wants. The
// binary is dir/roomlog-testnode-<commit[:12]>.
func BuildRelease(ctx context.Context, commit, dir string) (string, error) {
	top, err := exec.CommandContext(ctx, "git", "-C", srcDir(), "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("testnode: build %s: the repository: %w", commit, err)
	}
	root := strings.TrimSpace(string(top))
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "cat-file", "-e", commit+"^{commit}").CombinedOutput(); err != nil {
		return "", fmt.Errorf("testnode: build %s: commit not in %s (a shallow clone? git fetch --unshallow): %w: %s",
			commit, root, err, bytes.TrimSpace(out))
	}
	src, err := os.MkdirTemp(dir, "src-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(src)
	tarball := filepath.Join(src, "src.tar")
	if out, err := exec.CommandContext(ctx, "git", "-C", root, "archive", "--format=tar", "-o", tarball, commit).CombinedOutput(); err != nil {
		return "", fmt.Errorf("testnode: git archive %s: %w: %s", commit, err, out)
	}
	if out, err := exec.CommandContext(ctx, "tar", "-xf", tarball, "-C", src).CombinedOutput(); err != nil {
		return "", fmt.Errorf("testnode: extract %s: %w: %s", commit, err, out)
	}
	bin := filepath.Join(dir, "roomlog-testnode-"+commit[:min(12, len(commit))])
	cmd := exec.CommandContext(ctx, goTool(), "build", "-o", bin, CmdPackage)
	cmd.Dir = src
	out, err := cmd.CombinedOutput()
	if err != nil {
		cmd = exec.CommandContext(ctx, goTool(), "build", "-o", bin, CmdPackage)
		cmd.Dir = src
		cmd.Env = append(os.Environ(), "GOFLAGS="+strings.TrimSpace(os.Getenv("GOFLAGS")+" -mod=mod"))
		out2, err2 := cmd.CombinedOutput()
		if err2 != nil {
			return "", fmt.Errorf("testnode: build %s of commit %s: %w\n%s\nwith -mod=mod: %v\n%s", CmdPackage, commit, err, out, err2, out2)
		}
	}
	return bin, nil
}

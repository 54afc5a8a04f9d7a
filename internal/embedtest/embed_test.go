package embedtest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/faultnet"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
)

// checkout is the root of this repository (the module roomlog's replace
// points at).
func checkout(t *testing.T) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	require.True(t, ok)
	root, err := filepath.Abs(filepath.Join(filepath.Dir(file), "..", ".."))
	require.NoError(t, err)
	_, err = os.Stat(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	return root
}

// goVersion is the go directive of roomlog's go.mod.
func goVersion(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("no go directive in go.mod")
	return ""
}

// module writes a module outside this repository holding main.go, whose
// go.mod requires roomlog (replaced by this checkout) and the extra
// requirements, with roomlog's go.sum to start from.
func module(t *testing.T, main string, extra ...string) string {
	t.Helper()
	root := checkout(t)
	dir := t.TempDir()
	gomod := fmt.Sprintf("module example.com/embedder\n\ngo %s\n\nrequire github.com/roomlog/roomlog v0.0.0\n", goVersion(t, root))
	for _, r := range extra {
		gomod += "require " + r + "\n"
	}
	gomod += "\nreplace github.com/roomlog/roomlog => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(main), 0o644))
	return dir
}

// goCmd runs the go tool in dir: modules from the local cache only
// (GOPROXY=off) unless online, go.sum completed from it (-mod=mod).
func goCmd(ctx context.Context, dir string, online bool, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, "go", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod -buildvcs=false", "GOWORK=off")
	if !online {
		cmd.Env = append(cmd.Env, "GOPROXY=off")
	}
	return cmd
}

// raceProgram is the embedder's program; ZKIMPORT is the ZooKeeper client
// it uses directly. Arguments: the ZooKeeper address, a base znode, and
// how many sessions (the first plus reconnects) to see before it stops.
const raceProgram = `package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/logroom"
	zk "ZKIMPORT"
)

type quiet struct{}

func (quiet) Printf(string, ...any) {}

func main() {
	addr, base := os.Args[1], os.Args[2]
	want, err := strconv.Atoi(os.Args[3])
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// roomlog through its public API: a room and a writer appending
	// throughout (errors from the resets are expected and counted).
	c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: []string{addr}, SessionTimeout: 10 * time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "dial:", err)
		os.Exit(2)
	}
	defer c.Close()
	room, err := logroom.OpenRoom(ctx, c, "embedder", logroom.RoomOptions{Base: base + "-rooms"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open room:", err)
		os.Exit(2)
	}
	w, err := room.NewWriter(ctx, logroom.WriterConfig{Owner: "embedder"})
	if err != nil {
		fmt.Fprintln(os.Stderr, "writer:", err)
		os.Exit(2)
	}
	defer w.Close()

	// The client this program builds with, used directly: a child watch
	// kept armed and requests in flight while the connection is reset.
	var sessions, ok, failed, appended, appendErrs, fired atomic.Int64
	conn, _, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(quiet{}),
		zk.WithEventCallback(func(e zk.Event) {
			if e.Type == zk.EventSession && e.State == zk.StateHasSession {
				sessions.Add(1)
			}
		}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "connect:", err)
		os.Exit(2)
	}
	defer conn.Close()
	for {
		if _, err := conn.Create(base, nil, 0, zk.WorldACL(zk.PermAll)); err == nil || err == zk.ErrNodeExists {
			break
		}
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "create base: timed out")
			os.Exit(2)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Watches that stay armed across every reconnect (nothing changes
	// them), so each new connection resends them (sendSetWatches).
	// Armed once each; a request the resets cut off is tried again.
	for _, arm := range []struct {
		what string
		do   func() error
	}{
		{"exists watch", func() error { _, _, _, err := conn.ExistsW(base + "/absent"); return err }},
		{"data watch", func() error { _, _, _, err := conn.GetW(base); return err }},
	} {
		for {
			err := arm.do()
			if err == nil {
				break
			}
			if err != zk.ErrConnectionClosed && err != zk.ErrNoServer && err != zk.ErrSessionExpired || ctx.Err() != nil {
				fmt.Fprintln(os.Stderr, arm.what+":", err)
				os.Exit(2)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a child watch, re-armed at every trigger
		defer wg.Done()
		for {
			_, _, ch, err := conn.ChildrenW(base)
			if err != nil {
				select {
				case <-stop:
					return
				case <-time.After(5 * time.Millisecond):
				}
				continue
			}
			select {
			case <-stop:
				return
			case <-ch:
				fired.Add(1)
			}
		}
	}()
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() { // requests in flight
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				p, err := conn.Create(base+"/n-", []byte("x"), zk.FlagSequence|zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
				if err == nil {
					err = conn.Delete(p, -1)
				}
				if _, _, err2 := conn.Exists(base); err == nil && err2 == nil {
					ok.Add(1)
				} else {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Add(1)
	go func() { // appends through roomlog
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			actx, acancel := context.WithTimeout(ctx, 5*time.Second)
			if _, err := w.Append(actx, []byte("edit")); err == nil {
				appended.Add(1)
			} else {
				appendErrs.Add(1)
			}
			acancel()
		}
	}()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for sessions.Load() < int64(want) || appended.Load() == 0 {
		select {
		case <-ctx.Done():
			fmt.Fprintf(os.Stderr, "timed out: %d sessions of %d, %d appended\n", sessions.Load(), want, appended.Load())
			os.Exit(2)
		case <-tick.C:
		}
	}
	close(stop)
	wg.Wait()
	fmt.Printf("sessions=%d requests_ok=%d requests_failed=%d watch_fired=%d appended=%d append_errors=%d\n",
		sessions.Load(), ok.Load(), failed.Load(), fired.Load(), appended.Load(), appendErrs.Load())
}
`

// runResult is what one run of the program did.
type runResult struct {
	exit   int
	stdout string
	stderr string
	resets int
	took   time.Duration
}

// runUnderResets runs bin against ZooKeeper through a proxy, resetting
// every connection through it every 150 ms until the program exits
// (bounded by ctx).
func runUnderResets(ctx context.Context, t *testing.T, bin string, ens *zkensemble.Ensemble, base string, sessions int) runResult {
	t.Helper()
	p, err := faultnet.New(faultnet.Config{Targets: ens.Addrs()})
	require.NoError(t, err)
	defer p.Close()
	var out, errb bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, p.Addr(), base, fmt.Sprint(sessions))
	cmd.Stdout, cmd.Stderr = &out, &errb
	t0 := time.Now()
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	tick := time.NewTicker(150 * time.Millisecond)
	defer tick.Stop()
	res := runResult{}
	for {
		select {
		case err := <-done:
			res.took = time.Since(t0)
			res.exit = 0
			if err != nil {
				res.exit = -1
				if ee, ok := err.(*exec.ExitError); ok {
					res.exit = ee.ExitCode()
				}
			}
			res.stdout, res.stderr = out.String(), errb.String()
			return res
		case <-tick.C:
			p.Reset()
			res.resets++
		}
	}
}

// TestEmbedderRaceFree: a program outside this module that requires
// roomlog builds, with -race, against the patched ZooKeeper client, and
// survives the lastZxid race's reproduction with no race report: at
// least 8 sessions (reconnects) with a watch armed and requests in
// flight. Upstream go-zookeeper/zk v1.0.4 in the same program is logged.
func TestEmbedderRaceFree(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const sessions = 8

	build := func(zkImport string, online bool, extra ...string) (string, []byte, error) {
		dir := module(t, strings.ReplaceAll(raceProgram, "ZKIMPORT", zkImport), extra...)
		bin := filepath.Join(dir, "embedder")
		out, err := goCmd(ctx, dir, online, "build", "-race", "-o", bin, ".").CombinedOutput()
		return bin, out, err
	}
	t0 := time.Now()
	bin, out, err := build("github.com/roomlog/roomlog/third_party/zk", false)
	require.NoError(t, err, "building the embedder with -race:\n%s", out)
	t.Logf("built the embedder with -race in %v", time.Since(t0).Round(time.Second))

	res := runUnderResets(ctx, t, bin, ens, "/embed-patched", sessions)
	t.Logf("patched client: exit %d after %v and %d resets: %s", res.exit, res.took.Round(10*time.Millisecond), res.resets, strings.TrimSpace(res.stdout))
	require.NotContains(t, res.stderr, "DATA RACE", "race report with the patched client")
	require.Equal(t, 0, res.exit, "stderr:\n%s", res.stderr)
	require.Contains(t, res.stdout, "sessions=", "the program reports what it did")

	// Upstream v1.0.4, for the record: built only when the module is in
	// the cache or can be fetched.
	t0 = time.Now()
	ubin, uout, err := build("github.com/go-zookeeper/zk", true, "github.com/go-zookeeper/zk v1.0.4")
	if err != nil {
		t.Logf("upstream go-zookeeper/zk v1.0.4 variant not built (%v): %s", err, bytes.TrimSpace(uout))
		return
	}
	t.Logf("built the upstream variant in %v", time.Since(t0).Round(time.Second))
	ures := runUnderResets(ctx, t, ubin, ens, "/embed-upstream", sessions)
	races := strings.Count(ures.stderr, "WARNING: DATA RACE")
	t.Logf("upstream go-zookeeper/zk v1.0.4: exit %d after %v and %d resets, %d race reports: %s", ures.exit, ures.took.Round(10*time.Millisecond), ures.resets, races, strings.TrimSpace(ures.stdout))
	if i := strings.Index(ures.stderr, "WARNING: DATA RACE"); i >= 0 {
		rep := ures.stderr[i:]
		if len(rep) > 1500 {
			rep = rep[:1500]
		}
		t.Logf("upstream's first race report:\n%s", rep)
	}
}

// readmeExample returns the Go program of the README's "Embed it"
// section (its first go code block).
func readmeExample(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(checkout(t), "README.md"))
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, "\n## Embed it\n")
	require.GreaterOrEqual(t, i, 0, "README has an Embed it section")
	s = s[i:]
	start := strings.Index(s, "\n```go\n")
	require.GreaterOrEqual(t, start, 0, "the section holds a go block")
	s = s[start+len("\n```go\n"):]
	end := strings.Index(s, "\n```\n")
	require.GreaterOrEqual(t, end, 0)
	return s[:end+1]
}

// TestReadmeEmbedExample: the README's embed example is a program that
// compiles outside this module (no internal import), passes go vet, and
// run against a real ZooKeeper opens a replica, becomes primary of its
// room, commits one entry through its Applier and logs it through its
// Logger.
func TestReadmeEmbedExample(t *testing.T) {
	src := readmeExample(t)
	require.NotContains(t, src, "roomlog/internal", "an embedder cannot import internal packages")
	require.Contains(t, src, "Apply(b store.Batch, e store.Entry)", "the example implements an Applier")
	require.Contains(t, src, "Logger:", "the example gives the replica a Logger")
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	dir := module(t, src)
	out, err := goCmd(ctx, dir, false, "vet", ".").CombinedOutput()
	require.NoError(t, err, "go vet on the README's example:\n%s", out)
	bin := filepath.Join(dir, "counters")
	out, err = goCmd(ctx, dir, false, "build", "-o", bin, ".").CombinedOutput()
	require.NoError(t, err, "building the README's example:\n%s", out)

	ens := zkensemble.ForTest(t, zkensemble.Options{})
	rctx, rcancel := context.WithTimeout(ctx, 90*time.Second)
	defer rcancel()
	cmd := exec.CommandContext(rctx, bin, "-zk", strings.Join(ens.Addrs(), ","), "-id", "m1",
		"-data", filepath.Join(t.TempDir(), "m1"), "-listen", "127.0.0.1:0")
	out, err = cmd.CombinedOutput()
	t.Logf("the README's example, run:\n%s", out)
	require.NoError(t, err)
	require.Contains(t, string(out), `msg=committed index=1 visits=1`)
}

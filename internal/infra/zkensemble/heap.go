package zkensemble

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// heapUsed matches the heap lines of `jcmd PID GC.heap_info`, e.g.
// " garbage-first heap   total 1048576K, used 21503K [0x…" (G1) or
// " def new generation   total 314560K, used 8409K [0x…" (Serial);
// Metaspace and class space lines say "used" without "total", so they do
// not match.
var heapUsed = regexp.MustCompile(`(?m)^\s*(?:garbage-first heap|def new generation|tenured generation|PSYoungGen|ParOldGen|ZHeap|Shenandoah)\b.*?total \d+K, used (\d+)K`)

// jcmd finds the JDK's jcmd: next to the java the servers run, then on
// PATH. The JRE alone has none (Debian: openjdk-17-jdk-headless has it;
// scripts/install-zookeeper.sh installs it).
func jcmd() (string, error) {
	inst, err := locate()
	if err != nil {
		return "", err
	}
	if java, err := filepath.EvalSymlinks(inst.java); err == nil {
		p := filepath.Join(filepath.Dir(java), "jcmd")
		if st, err := os.Stat(p); err == nil && !st.IsDir() {
			return p, nil
		}
	}
	if p, err := exec.LookPath("jcmd"); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("%w: no jcmd next to %s or on PATH (a JDK is needed to measure a server's heap; run scripts/install-zookeeper.sh)",
		ErrUnavailable, inst.java)
}

// RequireJcmd fails t under CI=true and skips it otherwise when jcmd (the
// JDK tool LiveHeap uses) is missing.
func RequireJcmd(t testing.TB) bool {
	t.Helper()
	_, err := jcmd()
	return requireAvailable(t, err)
}

// LiveHeap forces a full collection in server i's JVM (jcmd GC.run, i.e.
// System.gc(): a full, stop-the-world collection under G1 unless
// -XX:+ExplicitGCInvokesConcurrent) and returns the heap bytes still used
// after it: what the server's live objects hold. Bounded by ctx.
func (e *Ensemble) LiveHeap(ctx context.Context, i int) (int64, error) {
	if err := e.checkIndex(i); err != nil {
		return 0, err
	}
	pid := e.PID(i)
	if pid == 0 {
		return 0, fmt.Errorf("zkensemble: server %d is not running", i)
	}
	bin, err := jcmd()
	if err != nil {
		return 0, err
	}
	run := func(cmd string) (string, error) {
		out, err := exec.CommandContext(ctx, bin, strconv.Itoa(pid), cmd).CombinedOutput()
		if err != nil {
			return "", fmt.Errorf("zkensemble: jcmd %d %s: %w: %s", pid, cmd, err, strings.TrimSpace(string(out)))
		}
		return string(out), nil
	}
	if _, err := run("GC.run"); err != nil {
		return 0, err
	}
	out, err := run("GC.heap_info")
	if err != nil {
		return 0, err
	}
	return parseHeapInfo(out)
}

// parseHeapInfo sums the "used" figures of the heap lines of GC.heap_info.
func parseHeapInfo(out string) (int64, error) {
	ms := heapUsed.FindAllStringSubmatch(out, -1)
	if len(ms) == 0 {
		return 0, errors.New("zkensemble: no heap line in jcmd GC.heap_info output: " + strings.TrimSpace(out))
	}
	var total int64
	for _, m := range ms {
		k, err := strconv.ParseInt(m[1], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("zkensemble: GC.heap_info: %q: %w", m[0], err)
		}
		total += k << 10
	}
	return total, nil
}

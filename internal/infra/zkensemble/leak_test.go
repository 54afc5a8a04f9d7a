package zkensemble

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const leakHelperEnv = "ZKENSEMBLE_LEAK_HELPER"

// TestLeakHelper is not a test: run as a child by TestKilledTestLeaksNoServer,
// it starts an ensemble, prints its PIDs and waits to be killed.
func TestLeakHelper(t *testing.T) {
	if os.Getenv(leakHelperEnv) == "" {
		t.Skip("helper process for TestKilledTestLeaksNoServer")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, err := Start(ctx, Options{Servers: 1, Dir: os.Getenv(leakHelperEnv)})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(1)
	}
	fmt.Println("PID", e.PID(0))
	select {} // until killed
}

// A test binary killed with SIGKILL runs no cleanup; its servers must die
// with it (Pdeathsig on the spawner thread) instead of leaking 1 GiB JVMs.
func TestKilledTestLeaksNoServer(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLeakHelper$", "-test.count=1")
	cmd.Env = append(os.Environ(), leakHelperEnv+"="+t.TempDir())
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	var pid int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		if v, ok := strings.CutPrefix(line, "PID "); ok {
			pid, err = strconv.Atoi(v)
			require.NoError(t, err)
			break
		}
		require.NotContains(t, line, "ERR", "helper failed")
	}
	require.NotZero(t, pid, "helper printed no PID")
	require.NoError(t, syscall.Kill(pid, 0), "server running while the helper lives")

	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	_ = cmd.Wait()
	require.Eventually(t, func() bool { return processGone(pid) }, 10*time.Second, 20*time.Millisecond,
		"server pid %d outlived its killed test process", pid)
}

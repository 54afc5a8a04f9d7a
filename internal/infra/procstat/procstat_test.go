package procstat

import (
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestThreadsStopped(t *testing.T) {
	if _, err := os.Stat("/proc/self/task"); err != nil {
		t.Skip("no /proc here")
	}
	cmd := exec.Command("sleep", "30")
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	pid := cmd.Process.Pid

	waitState := func(wantAll bool) {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for {
			all, _, ok := ThreadsStopped(pid)
			require.True(t, ok)
			if all == wantAll {
				return
			}
			require.True(t, time.Now().Before(deadline), "state never became all-stopped=%v", wantAll)
			time.Sleep(5 * time.Millisecond)
		}
	}
	waitState(false)
	require.NoError(t, cmd.Process.Signal(syscall.SIGSTOP))
	waitState(true)
	require.NoError(t, cmd.Process.Signal(syscall.SIGCONT))
	waitState(false)

	_, _, ok := ThreadsStopped(1 << 30) // no such process
	require.False(t, ok)
}

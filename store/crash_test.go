package store

import (
	"bufio"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Environment of the crash child (TestCrashChild re-executed by
// runCrashRounds).
const (
	envCrashDir  = "ROOMLOG_STORE_CRASH_DIR"
	envCrashSync = "ROOMLOG_STORE_CRASH_SYNC"
)

// TestCrashChild is not a test on its own: it is the child process of the
// crash tests. It applies the generated entries in deterministic batches,
// forever, printing "applied N" after each Apply returned, until killed.
func TestCrashChild(t *testing.T) {
	dir := os.Getenv(envCrashDir)
	if dir == "" {
		t.Skip("crash-test child process only")
	}
	pol := SyncEveryBatch
	if os.Getenv(envCrashSync) == "group" {
		pol = SyncGroup
	}
	s, err := Open(dir, &Options{Sync: pol, GroupSyncInterval: 2 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, "open:", err)
		os.Exit(2)
	}
	// Safety net: never outlive the parent for long.
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		first := s.AppliedIndex() + 1
		last := first + batchLen(first) - 1
		if _, err := s.Apply(genEntries(t, first, last)); err != nil {
			fmt.Fprintln(os.Stderr, "apply:", err)
			os.Exit(3)
		}
		fmt.Fprintf(os.Stdout, "applied %d\n", last)
	}
	os.Exit(4)
}

// crashRound runs the child once on dir, kills it with SIGKILL at a random
// moment after its first acknowledged batch, and returns the last index it
// acknowledged.
func crashRound(t *testing.T, dir, sync string, rng *rand.Rand) uint64 {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envCrashDir+"="+dir, envCrashSync+"="+sync)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())

	var acked atomic.Uint64
	readerDone := make(chan struct{})
	go func() {
		defer close(readerDone)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if n, ok := strings.CutPrefix(sc.Text(), "applied "); ok {
				v, err := strconv.ParseUint(n, 10, 64)
				if err == nil {
					acked.Store(v)
				}
			}
		}
	}()
	// Wait (polling, with a deadline) until the child applies something.
	deadline := time.Now().Add(30 * time.Second)
	for acked.Load() == 0 && time.Now().Before(deadline) {
		if cmd.ProcessState != nil {
			break
		}
		time.Sleep(time.Millisecond)
	}
	if acked.Load() == 0 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("crash child applied nothing; stderr: %s", stderr.String())
	}
	// The random kill moment (this sleep is the point of the test, not
	// synchronisation): anywhere within the next 0-80ms of applying.
	time.Sleep(time.Duration(rng.IntN(80_000)) * time.Microsecond)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	<-readerDone
	err = cmd.Wait()
	require.Error(t, err)
	ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL,
		"child did not die of SIGKILL (%v); stderr: %s", err, stderr.String())
	return acked.Load()
}

// isBoundary reports whether idx is reachable from start by whole
// generated batches.
func isBoundary(start, idx uint64) bool {
	b := start
	for b < idx {
		b += batchLen(b + 1)
	}
	return b == idx
}

func runCrashRounds(t *testing.T, sync string, rounds int) {
	if testing.Short() {
		t.Skip("-short")
	}
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1))
	m := newModel()
	var recovered uint64
	for round := 0; round < rounds; round++ {
		acked := crashRound(t, dir, sync, rng)

		s, err := Open(dir, nil)
		require.NoError(t, err, "round %d: reopen after SIGKILL", round)
		idx := s.AppliedIndex()
		if sync == "every" {
			require.GreaterOrEqual(t, idx, acked, "round %d: SyncEveryBatch lost an acknowledged batch", round)
		}
		require.GreaterOrEqual(t, idx, recovered, "round %d: applied index went back", round)
		require.True(t, isBoundary(recovered, idx),
			"round %d: index %d is not a whole-batch boundary after %d (torn batch)", round, idx, recovered)
		wantEpoch := uint64(0) // nothing applied yet (possible under SyncGroup)
		if idx > 0 {
			wantEpoch = genEpoch(idx)
		}
		require.Equal(t, wantEpoch, s.AppliedEpoch(), "round %d", round)
		m.advance(idx)
		hash, hidx, err := s.StateHash()
		require.NoError(t, err)
		require.Equal(t, idx, hidx)
		require.Equal(t, m.hash(), hash, "round %d: state at index %d is not the state of that prefix", round, idx)
		require.NoError(t, s.Close())
		t.Logf("round %d: acked %d, recovered %d", round, acked, idx)
		recovered = idx
	}
	require.Greater(t, recovered, uint64(rounds), "the children made too little progress to test anything")
}

func TestCrashConsistencySyncEveryBatch(t *testing.T) { runCrashRounds(t, "every", 20) }

func TestCrashConsistencySyncGroup(t *testing.T) { runCrashRounds(t, "group", 10) }

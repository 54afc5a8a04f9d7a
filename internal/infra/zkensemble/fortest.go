package zkensemble

import (
	"context"
	"os"
	"testing"
	"time"
)

// ForTest starts an ensemble for a test and registers t.Cleanup(Close).
// When ZooKeeper is missing it fails the test under CI=true (a skip there
// would make CI green while testing nothing) and skips it otherwise. Start
// gets 60 seconds. When the test failed, the cleanup writes the last 40
// lines of each server's log to t.Log before closing.
func ForTest(t testing.TB, opts Options) *Ensemble {
	t.Helper()
	return forTest(t, opts, Available())
}

// Require fails the test under CI=true and skips it otherwise when
// ZooKeeper is not installed: for tests that share or start their own
// ensembles. It reports whether the test may go on (false only with a fake
// testing.TB whose Fatalf and Skip return).
func Require(t testing.TB) bool {
	t.Helper()
	return requireAvailable(t, Available())
}

func requireAvailable(t testing.TB, unavailable error) bool {
	t.Helper()
	if unavailable != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("%v (CI=true: a test that needs ZooKeeper fails instead of skipping)", unavailable)
		} else {
			t.Skip(unavailable)
		}
		return false
	}
	return true
}

func forTest(t testing.TB, opts Options, unavailable error) *Ensemble {
	t.Helper()
	if !requireAvailable(t, unavailable) {
		return nil // only reached with a fake testing.TB
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("zkensemble: start: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			for i := range e.servers {
				t.Logf("zkensemble: server %d (%s, pid %d), last %d lines of %s:\n%s",
					i, e.servers[i].addr(), e.PID(i), tailLines, e.LogPath(i), e.LogTail(i, tailLines))
			}
		}
		if err := e.Close(); err != nil {
			t.Errorf("zkensemble: close: %v", err)
		}
	})
	return e
}

package zkensemble

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"
)

// sharedStartTimeout bounds the start of a shared ensemble.
const sharedStartTimeout = 90 * time.Second

// Shared is one ensemble for all the tests of a test binary that need no
// faults of their own; each test works under its own paths. It starts on
// the first Get and is closed by Run when the tests end:
//
//	var zk = zkensemble.NewShared(zkensemble.Options{})
//
//	func TestMain(m *testing.M) { os.Exit(zk.Run(m)) }
//
//	func TestX(t *testing.T) { e := zk.Get(t); ... }
//
// Its methods are safe for concurrent use.
type Shared struct {
	opts Options
	once sync.Once
	mu   sync.Mutex // guards e and err, written once by the start in Get
	e    *Ensemble
	err  error
}

// NewShared returns a Shared that starts an ensemble with opts on first use.
func NewShared(opts Options) *Shared { return &Shared{opts: opts} }

// Get returns the shared ensemble, starting it on the first call (within
// 90 seconds). When ZooKeeper is missing it fails the test under CI=true
// and skips it otherwise, as Require does; when the start failed it fails
// this test and every later one with the start's error.
func (s *Shared) Get(t testing.TB) *Ensemble {
	t.Helper()
	return s.get(t, Available())
}

func (s *Shared) get(t testing.TB, unavailable error) *Ensemble {
	t.Helper()
	if !requireAvailable(t, unavailable) {
		return nil // only reached with a fake testing.TB
	}
	s.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), sharedStartTimeout)
		defer cancel()
		e, err := Start(ctx, s.opts)
		s.mu.Lock()
		s.e, s.err = e, err
		s.mu.Unlock()
	})
	s.mu.Lock()
	e, err := s.e, s.err
	s.mu.Unlock()
	if err != nil {
		t.Fatalf("zkensemble: start shared ensemble: %v", err)
		return nil // only reached with a fake testing.TB
	}
	return e
}

// Close closes the ensemble if Get started one. It is idempotent.
func (s *Shared) Close() error {
	s.mu.Lock()
	e := s.e
	s.mu.Unlock()
	if e == nil {
		return nil
	}
	return e.Close()
}

// Run runs the tests, then closes the ensemble (a close error goes to
// stderr) and returns m.Run's exit code, for TestMain to pass to os.Exit
// after any cleanup of its own.
func (s *Shared) Run(m *testing.M) int {
	code := m.Run()
	if err := s.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "zkensemble: close shared ensemble:", err)
	}
	return code
}

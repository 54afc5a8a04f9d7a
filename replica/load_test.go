package replica

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// load proposes unique keys from several workers through whichever replica
// is primary and records what was acknowledged.
type load struct {
	c        *cluster
	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup

	mu      sync.Mutex // guards the fields below
	acked   map[string]uint64
	unknown map[string]bool
	maxIdx  uint64
	errs    []error
}

func startLoad(c *cluster, workers int) *load {
	l := &load{c: c, stop: make(chan struct{}), acked: map[string]uint64{}, unknown: map[string]bool{}}
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				key := fmt.Sprintf("w%d-%06d", w, i)
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				res, err := c.proposeRetry(ctx, setOp(key, key))
				cancel()
				l.mu.Lock()
				switch {
				case err == nil:
					l.acked[key] = res.Index
					l.maxIdx = max(l.maxIdx, res.Index)
				case errors.Is(err, ErrOutcomeUnknown) || errors.Is(err, ErrNoResponse) || errors.Is(err, ErrFenced):
					l.unknown[key] = true
				default:
					l.errs = append(l.errs, fmt.Errorf("%s: %w", key, err))
				}
				l.mu.Unlock()
			}
		}()
	}
	return l
}

// waitAcked waits until at least n more proposals were acknowledged.
func (l *load) waitAcked(t *testing.T, n int, d time.Duration) {
	t.Helper()
	l.mu.Lock()
	target := len(l.acked) + n
	l.mu.Unlock()
	require.Eventually(t, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		return len(l.acked) >= target
	}, d, 5*time.Millisecond, "%d more acknowledged proposals", n)
}

func (l *load) finish() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// verify checks that every acknowledged proposal is applied, at its index,
// on every replica of the cluster, and that they converged.
func (l *load) verify(t *testing.T) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	require.Empty(t, l.errs, "unexpected proposal errors")
	require.NotEmpty(t, l.acked)
	l.c.waitConverged(l.maxIdx, 30*time.Second)
	seen := map[uint64]string{}
	for k, idx := range l.acked {
		if other, dup := seen[idx]; dup {
			t.Fatalf("index %d acknowledged for %s and %s", idx, other, k)
		}
		seen[idx] = k
	}
	for _, r := range l.c.all() {
		for k := range l.acked {
			v, err := r.Get([]byte(k))
			require.NoError(t, err, "%s: acknowledged key %s missing", r.ID(), k)
			require.Equal(t, k, string(v))
		}
	}
	t.Logf("verified %d acknowledged proposals (%d with unknown outcome) on %d replicas", len(l.acked), len(l.unknown), len(l.c.all()))
}

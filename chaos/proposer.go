package main

import (
	"context"
	mrand "math/rand/v2"
	"sync"

	"github.com/roomlog/roomlog/internal/harness/testnode"
)

// proposers is the run's load: testnode's load generator (testnode.Load),
// which records every proposal's final outcome in a testnode.History, set
// up for the chaos rules:
//
//   - every proposal has a payload and a request id of its own
//     (RetryUnknown: replica.NewRequestID, sent with ProposeRequest);
//   - a proposal whose first attempt fails definitely is never resent
//     (NoResendNotCommitted), so every definite failure the replicas report
//     becomes a recorded proposal the checker must not find in the log
//     (rule 6, "phantom");
//   - an attempt whose outcome is unknown is resent — same payload, same
//     id — until an attempt is acknowledged or shows it committed, or
//     testnode.DefaultMaxUnknownAttempts attempts were made, or the run
//     stops (then the proposal stays unknown): the replicas must apply it
//     exactly once (rule 9).
//
// On top of it, proposers keeps the key of every proposal sent, for the
// readers (pickKey).
type proposers struct {
	load *testnode.Load

	mu   sync.Mutex // guards keys
	keys []string   // the key of every proposal sent, in order (readers pick from it)
}

// startProposers starts workers proposers; stop ends them.
func startProposers(ctx context.Context, c *testnode.Cluster, h *testnode.History, workers int) *proposers {
	p := &proposers{}
	p.load = testnode.StartLoad(ctx, c, h, testnode.LoadOptions{
		Workers:              workers,
		RetryUnknown:         true,
		NoResendNotCommitted: true,
		OnSend:               p.addKey,
	})
	return p
}

func (p *proposers) addKey(key string) {
	p.mu.Lock()
	p.keys = append(p.keys, key)
	p.mu.Unlock()
}

// stop ends the workers and waits for them: an attempt in flight gets its
// answer (or times out) and is recorded. Idempotent.
func (p *proposers) stop() { p.load.Stop() }

// acked is the number of acknowledged proposals so far.
func (p *proposers) acked() int64 { return p.load.Acked() }

// errorCounts returns the failed attempts by error code.
func (p *proposers) errorCounts() map[string]int { return p.load.Errors() }

// waitAcked waits until n more proposals than now were acknowledged.
func (p *proposers) waitAcked(ctx context.Context, n int64) error {
	return p.load.WaitAcked(ctx, n)
}

// pickKey returns a key some proposal was sent for (false: none yet):
// half the time one of the 8 newest (often in flight or just
// acknowledged: the state a lagging or deposed replica would miss), a
// quarter one of the 256 newest, else any (old state: what a checkpoint
// restore must have carried).
func (p *proposers) pickKey(rng *mrand.Rand) (string, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := len(p.keys)
	if n == 0 {
		return "", false
	}
	window := n
	switch x := rng.IntN(4); {
	case x < 2:
		window = min(n, 8)
	case x == 2:
		window = min(n, 256)
	}
	return p.keys[n-1-rng.IntN(window)], true
}

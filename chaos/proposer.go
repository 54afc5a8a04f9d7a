package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/internal/testnode"
	"github.com/roomlog/roomlog/replica"
)

// proposers is the run's load: workers that propose, each attempt with a
// payload of its own, and record every attempt's outcome in a
// testnode.History. Unlike testnode.Load (which resends a payload after a
// definite failure) an attempt is never repeated, so every definite failure
// the replicas report becomes a recorded proposal the checker must not
// find in the log (rule 6, "phantom"), and every unknown outcome one it
// may find at most once.
type proposers struct {
	c       *testnode.Cluster
	h       *testnode.History
	tag     string
	timeout time.Duration
	hint    atomic.Pointer[string] // id of the replica believed primary
	acks    atomic.Int64
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	mu     sync.Mutex     // guards errors and keys
	errors map[string]int // failed attempts by error code
	keys   []string       // the key of every attempt started, in order (readers pick from it)
}

// startProposers starts workers proposers; stop ends them.
func startProposers(ctx context.Context, c *testnode.Cluster, h *testnode.History, workers int) *proposers {
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	ctx, cancel := context.WithCancel(ctx)
	p := &proposers{c: c, h: h, tag: hex.EncodeToString(tag[:]), timeout: 5 * time.Second,
		cancel: cancel, errors: map[string]int{}}
	for w := range workers {
		p.wg.Add(1)
		go func() { // owner: p; stop cancels and waits
			defer p.wg.Done()
			p.worker(ctx, w)
		}()
	}
	return p
}

// stop ends the workers and waits for them: an attempt in flight gets its
// answer (or times out) and is recorded. Idempotent.
func (p *proposers) stop() {
	p.cancel()
	p.wg.Wait()
}

// acked is the number of acknowledged proposals so far.
func (p *proposers) acked() int64 { return p.acks.Load() }

// errorCounts returns the failed attempts by error code.
func (p *proposers) errorCounts() map[string]int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return maps.Clone(p.errors)
}

// waitAcked waits until n more proposals than now were acknowledged.
func (p *proposers) waitAcked(ctx context.Context, n int64) error {
	target := p.acks.Load() + n
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for p.acks.Load() < target {
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %d acknowledgements (have %d): %w", target, p.acks.Load(), ctx.Err())
		case <-t.C:
		}
	}
	return nil
}

// target is the hinted primary if it is live, else the live replicas in
// turn (nil: none live).
func (p *proposers) target(turn int) *testnode.Node {
	if id := p.hint.Load(); id != nil {
		if n := p.c.Node(*id); n != nil && n.Live() {
			return n
		}
	}
	live := p.c.Live()
	if len(live) == 0 {
		return nil
	}
	return live[turn%len(live)]
}

func (p *proposers) worker(ctx context.Context, w int) {
	value := make([]byte, 64)
	for seq, turn := 0, 0; ctx.Err() == nil; seq++ {
		n := p.target(turn)
		if n == nil {
			sleep(ctx, 20*time.Millisecond)
			continue
		}
		key := fmt.Sprintf("p/w%d/%d", w, seq)
		copy(value, fmt.Sprintf("%s:%s:", p.tag, key))
		entry, err := testnode.SetEntry(key, value)
		if err != nil {
			return // cannot happen: the key is not empty
		}
		prop := testnode.Proposal{Key: key, SHA256: testnode.EntrySHA(entry), Node: n.ID(), Attempts: 1, Start: time.Now()}
		p.mu.Lock()
		p.keys = append(p.keys, key)
		p.mu.Unlock()
		// The attempt is not bound to ctx: stopping the load must not turn
		// an attempt in flight into an unknown outcome.
		actx, cancel := context.WithTimeout(context.Background(), p.timeout)
		res, err := n.Propose(actx, entry)
		cancel()
		prop.End = time.Now()
		prop.Outcome = testnode.Classify(res, err)
		if err != nil {
			prop.Err = err.Error()
			p.count(err)
		}
		switch prop.Outcome {
		case testnode.OutcomeAcked, testnode.OutcomeCommitted:
			prop.Index = res.Index
			if prop.Outcome == testnode.OutcomeAcked {
				p.acks.Add(1)
			}
			id := n.ID()
			p.hint.Store(&id)
		case testnode.OutcomeNotCommitted:
			var ae *testnode.APIError
			if errors.As(err, &ae) && errors.Is(err, replica.ErrNotPrimary) && ae.PrimaryID != "" && ae.PrimaryID != n.ID() {
				id := ae.PrimaryID
				p.hint.Store(&id)
			} else {
				p.hint.Store(nil)
				turn++
			}
		default:
			p.hint.Store(nil)
			turn++
		}
		p.h.Add(prop)
		if prop.Outcome != testnode.OutcomeAcked {
			sleep(ctx, 10*time.Millisecond)
		}
	}
}

// pickKey returns a key some attempt was started for (false: none yet):
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

func (p *proposers) count(err error) {
	code := "other"
	var ae *testnode.APIError
	switch {
	case errors.As(err, &ae):
		code = ae.ErrorResponse.Error
	case errors.Is(err, testnode.ErrNotSent):
		code = "not_sent"
	case errors.Is(err, testnode.ErrUnreachable):
		code = "unreachable"
	}
	p.mu.Lock()
	p.errors[code]++
	p.mu.Unlock()
}

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

// proposers is the run's load: workers that propose, each proposal with a
// payload and a request id of its own (replica.NewRequestID, sent with
// ProposeRequest), and record every proposal's final outcome in a
// testnode.History. A proposal whose first attempt fails definitely is
// never resent (unlike testnode.Load), so every definite failure the
// replicas report becomes a recorded proposal the checker must not find in
// the log (rule 6, "phantom"). An attempt whose outcome is unknown is
// resent — same payload, same id — until an attempt is acknowledged or
// shows it committed, or maxAttempts attempts were made, or the run stops
// (then the proposal stays unknown): the replicas must apply it exactly
// once (rule 9).
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
	keys   []string       // the key of every proposal started, in order (readers pick from it)
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
	turn := 0
	for seq := 0; ctx.Err() == nil; seq++ {
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
		id := replica.NewRequestID()
		prop := testnode.Proposal{Key: key, SHA256: testnode.EntrySHA(entry), RequestID: id.String(), Start: time.Now()}
		p.mu.Lock()
		p.keys = append(p.keys, key)
		p.mu.Unlock()
		p.propose(ctx, n, id, entry, &prop, &turn)
		p.h.Add(prop)
		if prop.Outcome != testnode.OutcomeAcked {
			sleep(ctx, 10*time.Millisecond)
		}
	}
}

// maxAttempts bounds the attempts of one proposal (resends after an
// unknown outcome).
const maxAttempts = 20

// propose sends entry with request id, first to n, and fills in prop's
// outcome: the first attempt's if it is definite (acknowledged, committed
// or failed), else that of the resends, which go to the replica believed
// primary (following hints, else the live replicas in turn) after a
// backoff. A resend that fails definitely says nothing of the attempts
// before it: the proposal stays unknown unless a later one is acknowledged
// or shows it committed.
func (p *proposers) propose(ctx context.Context, n *testnode.Node, id replica.RequestID, entry []byte, prop *testnode.Proposal, turn *int) {
	for {
		// An attempt is not bound to ctx: stopping the load must not turn
		// an attempt in flight into an unknown outcome.
		actx, cancel := context.WithTimeout(context.Background(), p.timeout)
		res, err := n.ProposeRequest(actx, id, entry)
		cancel()
		prop.Attempts++
		prop.Node = n.ID()
		prop.End = time.Now()
		out := testnode.Classify(res, err)
		if err != nil {
			prop.Err = err.Error()
			p.count(err)
		}
		switch out {
		case testnode.OutcomeAcked, testnode.OutcomeCommitted:
			prop.Outcome, prop.Index, prop.Duplicate = out, res.Index, res.Duplicate
			if out == testnode.OutcomeAcked {
				p.acks.Add(1)
			}
			id := n.ID()
			p.hint.Store(&id)
			return
		case testnode.OutcomeNotCommitted:
			var ae *testnode.APIError
			if errors.As(err, &ae) && errors.Is(err, replica.ErrNotPrimary) && ae.PrimaryID != "" && ae.PrimaryID != n.ID() {
				id := ae.PrimaryID
				p.hint.Store(&id)
			} else {
				p.hint.Store(nil)
				*turn++
			}
			if prop.Unknowns == 0 {
				prop.Outcome = testnode.OutcomeNotCommitted // never resent
				return
			}
		default:
			prop.Unknowns++
			p.hint.Store(nil)
			*turn++
		}
		prop.Outcome = testnode.OutcomeUnknown
		if prop.Attempts >= maxAttempts {
			return
		}
		sleep(ctx, retryBackoff(prop.Attempts))
		for n = p.target(*turn); n == nil && ctx.Err() == nil; n = p.target(*turn) {
			sleep(ctx, 20*time.Millisecond)
		}
		if ctx.Err() != nil {
			return // the run stops: the proposal stays unknown
		}
	}
}

// retryBackoff is the pause before the attempt after attempt number n (1,
// 2, …) of a proposal whose outcome is unknown: 50 ms doubling up to 1 s,
// so that maxAttempts attempts outlast a failover (about 16 s of pauses).
func retryBackoff(n int) time.Duration {
	d := 50 * time.Millisecond
	for i := 1; i < n && d < time.Second; i++ {
		d *= 2
	}
	return min(d, time.Second)
}

// pickKey returns a key some proposal was started for (false: none yet):
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

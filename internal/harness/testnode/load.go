package testnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/replica"
)

// LoadOptions configure a Load.
type LoadOptions struct {
	// Workers is the number of concurrent proposers. Default 4.
	Workers int
	// ValueSize is the size of each proposal's value. Default 64.
	ValueSize int
	// KeyPrefix starts every key ("p" by default; keys are
	// prefix/w<worker>/<seq>). It must not start with RecordPrefix.
	KeyPrefix string
	// Timeout bounds one attempt. Default 5s.
	Timeout time.Duration
	// Interval, when > 0, is a pause between a worker's proposals.
	Interval time.Duration
	// Max, when > 0, stops each worker after that many proposals.
	Max int
	// RetryUnknown: every proposal carries a request id
	// (replica.NewRequestID, sent with ProposeRequest) and an attempt whose
	// outcome is unknown is retried with the same payload and the same id
	// — the replicas apply it at most once — following the primary as
	// usual, until an attempt is acknowledged or shows it committed, or
	// MaxUnknownAttempts attempts were made, or the load stops; the
	// proposal then stays unknown. A definite failure after an unknown
	// attempt proves nothing about the earlier attempt: it is retried too.
	// Default false: plain Propose, and a proposal whose outcome is
	// unknown is never resent.
	RetryUnknown bool
	// MaxUnknownAttempts bounds the attempts of one proposal once an
	// attempt was unknown (RetryUnknown). Default 20.
	MaxUnknownAttempts int
	// NoResendNotCommitted: a proposal whose first attempts fail
	// definitely (surely not committed: not_primary, fenced, queue_full,
	// …, before any unknown attempt) is recorded as not committed and
	// never resent; the worker goes on with a new payload. Every definite
	// failure a node reports thus becomes a proposal that a checker must
	// not find in the log. (After an unknown attempt, definite failures
	// prove nothing and are retried as RetryUnknown says.) Default false:
	// the payload is resent until its outcome is other than not committed.
	NoResendNotCommitted bool
	// OnSend, if set, is called with a proposal's key just before its
	// first attempt is sent (from the worker's goroutine; workers call it
	// concurrently): the keys a reader may look for.
	OnSend func(key string)
}

// Load runs proposer goroutines against a cluster and records every
// proposal's outcome in a History. It follows the primary (not_primary
// hints, then any live node) and retries a payload while its outcome is
// surely "not committed" (unless NoResendNotCommitted); after an unknown
// outcome it moves on to a new payload, so a checker can require each
// payload at most once in the log — unless RetryUnknown, where the payload
// is resent with the same request id, which the replicas deduplicate. A
// proposal that was not acknowledged is followed by a 10 ms pause.
type Load struct {
	c      *Cluster
	h      *History
	opts   LoadOptions
	tag    string
	hint   atomic.Pointer[string] // id of the node believed primary
	cancel context.CancelFunc
	wg     sync.WaitGroup
	acks   atomic.Int64

	errMu  sync.Mutex     // guards errors
	errors map[string]int // attempts that failed, by error code
}

// StartLoad starts opts.Workers proposers; Stop ends them.
func StartLoad(ctx context.Context, c *Cluster, h *History, opts LoadOptions) *Load {
	if opts.Workers <= 0 {
		opts.Workers = 4
	}
	if opts.ValueSize <= 0 {
		opts.ValueSize = 64
	}
	if opts.KeyPrefix == "" {
		opts.KeyPrefix = "p"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.MaxUnknownAttempts <= 0 {
		opts.MaxUnknownAttempts = DefaultMaxUnknownAttempts
	}
	var tag [4]byte
	_, _ = rand.Read(tag[:])
	ctx, cancel := context.WithCancel(ctx)
	l := &Load{c: c, h: h, opts: opts, tag: hex.EncodeToString(tag[:]), cancel: cancel, errors: map[string]int{}}
	for w := range opts.Workers {
		l.wg.Add(1)
		go func() { // owner: l; Stop cancels and waits
			defer l.wg.Done()
			l.worker(ctx, w)
		}()
	}
	return l
}

// Stop ends the workers and waits for them (an attempt in flight finishes
// or times out and is recorded).
func (l *Load) Stop() {
	l.cancel()
	l.wg.Wait()
}

// Acked returns how many proposals this load got acknowledged so far.
func (l *Load) Acked() int64 { return l.acks.Load() }

// Errors returns how many attempts failed, by error code (the API's codes,
// or "unreachable" / "not_sent" for transport failures).
func (l *Load) Errors() map[string]int {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return maps.Clone(l.errors)
}

func (l *Load) countErr(err error) {
	code := ErrorCode(err)
	l.errMu.Lock()
	l.errors[code]++
	l.errMu.Unlock()
}

// ErrorCode names a Client error as Load.Errors counts it: the node's
// error code (ErrorResponse.Error), "not_sent" or "unreachable" for
// transport failures, else "other".
func ErrorCode(err error) string {
	var ae *APIError
	switch {
	case errors.As(err, &ae):
		return ae.ErrorResponse.Error
	case errors.Is(err, ErrNotSent):
		return "not_sent"
	case errors.Is(err, ErrUnreachable):
		return "unreachable"
	}
	return "other"
}

// WaitAcked waits until n more proposals than now were acknowledged.
func (l *Load) WaitAcked(ctx context.Context, n int64) error {
	target := l.acks.Load() + n
	return poll(ctx, 10*time.Millisecond, fmt.Sprintf("%d acknowledged proposals", target), func() (bool, string, error) {
		got := l.acks.Load()
		return got >= target, fmt.Sprintf("%d acknowledged", got), nil
	})
}

// target picks the node to send to: the hinted primary if it is live,
// else the live nodes in turn.
func (l *Load) target(turn int) *Node {
	if id := l.hint.Load(); id != nil {
		if n := l.c.Node(*id); n != nil && n.Live() {
			return n
		}
	}
	live := l.c.Live()
	if len(live) == 0 {
		return nil
	}
	return live[turn%len(live)]
}

func (l *Load) worker(ctx context.Context, w int) {
	value := make([]byte, l.opts.ValueSize)
	turn := 0 // rotates over the live nodes while no primary is known
	for seq := 0; l.opts.Max <= 0 || seq < l.opts.Max; seq++ {
		if ctx.Err() != nil {
			return
		}
		key := fmt.Sprintf("%s/w%d/%d", l.opts.KeyPrefix, w, seq)
		copy(value, fmt.Sprintf("%s:%s:", l.tag, key))
		entry, err := SetEntry(key, value)
		if err != nil {
			return // cannot happen with a non-empty key
		}
		p := Proposal{Key: key, SHA256: EntrySHA(entry), Start: time.Now()}
		var id replica.RequestID
		if l.opts.RetryUnknown {
			id = replica.NewRequestID()
			p.RequestID = id.String()
		}
		if !l.propose(ctx, id, entry, &p, &turn) {
			return // stopped before anything could have been sent
		}
		if p.Outcome != OutcomeAcked && !sleepCtx(ctx, 10*time.Millisecond) {
			return
		}
		if l.opts.Interval > 0 {
			t := time.NewTimer(l.opts.Interval)
			select {
			case <-ctx.Done():
			case <-t.C:
			}
			t.Stop()
		}
	}
}

// propose tries entry until its outcome is other than not-committed (with
// a request id: until it is acknowledged or shown committed, within
// MaxUnknownAttempts once an attempt was unknown; with
// NoResendNotCommitted, a first definite failure is final), and records
// it. It returns false if ctx ended while the proposal was surely not
// committed (recorded as such if anything was sent).
func (l *Load) propose(ctx context.Context, id replica.RequestID, entry []byte, p *Proposal, turn *int) bool {
	for ; ; *turn++ {
		n := l.target(*turn)
		if n == nil {
			if !sleepCtx(ctx, 20*time.Millisecond) {
				if p.Unknowns > 0 {
					return l.stopped(p)
				}
				return false
			}
			continue
		}
		if p.Attempts == 0 && l.opts.OnSend != nil {
			l.opts.OnSend(p.Key)
		}
		// Attempts are not bound to ctx: stopping the load must not turn an
		// in-flight proposal into an unknown outcome.
		actx, cancel := context.WithTimeout(context.Background(), l.opts.Timeout)
		var res ProposeResponse
		var err error
		if id.IsZero() {
			res, err = n.Propose(actx, entry)
		} else {
			res, err = n.ProposeRequest(actx, id, entry)
		}
		cancel()
		p.Attempts++
		p.Node = n.ID()
		p.End = time.Now()
		out := Classify(res, err)
		if err != nil {
			p.Err = err.Error()
			l.countErr(err)
		}
		switch out {
		case OutcomeAcked, OutcomeCommitted:
			p.Outcome, p.Index, p.Duplicate = out, res.Index, res.Duplicate
			if out == OutcomeAcked {
				l.acks.Add(1)
				id := n.ID()
				l.hint.Store(&id)
			}
			l.h.Add(*p)
			return true
		case OutcomeUnknown:
			p.Unknowns++
			l.hint.Store(nil) // the next live node, or a fresh hint
			if id.IsZero() || p.Attempts >= l.opts.MaxUnknownAttempts || ctx.Err() != nil {
				p.Outcome = OutcomeUnknown
				l.h.Add(*p)
				*turn++
				return true
			}
			if !sleepCtx(ctx, retryBackoff(p.Attempts)) {
				return l.stopped(p)
			}
			continue
		}
		// Not committed (this attempt): follow a hint, back off a little,
		// try again.
		var ae *APIError
		if errors.As(err, &ae) && errors.Is(err, replica.ErrNotPrimary) && ae.PrimaryID != "" && ae.PrimaryID != n.ID() {
			id := ae.PrimaryID
			l.hint.Store(&id)
		} else {
			l.hint.Store(nil)
		}
		if p.Unknowns == 0 && l.opts.NoResendNotCommitted {
			p.Outcome = OutcomeNotCommitted // never resent
			l.h.Add(*p)
			*turn++
			return true
		}
		if p.Unknowns > 0 && p.Attempts >= l.opts.MaxUnknownAttempts {
			p.Outcome = OutcomeUnknown // an earlier attempt may have landed
			l.h.Add(*p)
			return true
		}
		pause := 10 * time.Millisecond
		if p.Unknowns > 0 {
			pause = retryBackoff(p.Attempts) // the attempts are bounded: spread them
		}
		if !sleepCtx(ctx, pause) {
			return l.stopped(p)
		}
	}
}

// stopped records p when the load stops between its attempts: surely not
// committed if no attempt was unknown, else unknown. It reports whether
// anything may have been sent.
func (l *Load) stopped(p *Proposal) bool {
	if p.Unknowns > 0 {
		p.Outcome = OutcomeUnknown
		l.h.Add(*p)
		return true
	}
	p.Outcome = OutcomeNotCommitted
	l.h.Add(*p)
	return false
}

// DefaultMaxUnknownAttempts bounds the attempts of one proposal after an
// unknown outcome (LoadOptions.MaxUnknownAttempts).
const DefaultMaxUnknownAttempts = 20

// retryBackoff is the pause before the attempt after attempt number n (1,
// 2, …) whose outcome was unknown: 50 ms doubling up to 1 s, so that 20
// attempts outlast a failover.
func retryBackoff(n int) time.Duration {
	d := 50 * time.Millisecond
	for i := 1; i < n && d < time.Second; i++ {
		d *= 2
	}
	return min(d, time.Second)
}

// sleepCtx waits d or until ctx ends; it reports whether ctx is still live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

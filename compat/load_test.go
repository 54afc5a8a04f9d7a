package compat

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
)

const (
	// mutationTimeout bounds one mkdir (redirects and the client's own
	// retries included).
	mutationTimeout = 5 * time.Second
	// errorPause is how long a writer waits after an error before it
	// tries the next master: it paces retries, nothing waits on it.
	errorPause = 10 * time.Millisecond
)

// ack is one acknowledged mutation.
type ack struct {
	worker int
	name   string // the directory's name under /w<worker>
	index  uint64
	at     time.Time
}

// load is the writers: each creates /w<k>/<n> for n = 0, 1, ... through
// one master (following its redirect to the primary) and moves to the
// next master after an error.
type load struct {
	members []*member
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	// hold is taken for reading around every mutation; hold.Lock pauses
	// the writers between mutations.
	hold sync.RWMutex

	mu   sync.Mutex // guards acks and errs
	acks []ack      // in the order of at (appended under mu with at read under mu)
	errs map[string]int
}

// workerDir is the directory writer k creates its directories in.
func workerDir(k int) string { return fmt.Sprintf("/w%d", k) }

// startLoad starts n writers, the first aimed at first (an index of
// members), the others at the following members.
func startLoad(members []*member, n, first int) *load {
	ctx, cancel := context.WithCancel(context.Background())
	l := &load{members: members, cancel: cancel, errs: map[string]int{}}
	for k := 0; k < n; k++ {
		l.wg.Add(1)
		go func() { // owner: l; stop waits for it
			defer l.wg.Done()
			l.writer(ctx, k, (first+k)%len(members))
		}()
	}
	return l
}

func (l *load) writer(ctx context.Context, k, turn int) {
	for n := 0; ; n++ {
		name := fmt.Sprint(n)
		l.hold.RLock()
		if ctx.Err() != nil {
			l.hold.RUnlock()
			return
		}
		mctx, cancel := context.WithTimeout(ctx, mutationTimeout)
		res, err := l.members[turn].c.Mkdir(mctx, workerDir(k)+"/"+name, false)
		cancel()
		l.hold.RUnlock()
		if err == nil {
			l.mu.Lock()
			l.acks = append(l.acks, ack{worker: k, name: name, index: res.Index, at: time.Now()})
			l.mu.Unlock()
			continue
		}
		if ctx.Err() != nil {
			return
		}
		l.mu.Lock()
		l.errs[errorCode(err)]++
		l.mu.Unlock()
		turn = (turn + 1) % len(l.members)
		if !sleep(ctx, errorPause) {
			return
		}
	}
}

// stop ends the writers and waits for them.
func (l *load) stop() {
	l.cancel()
	l.wg.Wait()
}

// pause holds the writers between mutations until resume.
func (l *load) pause()  { l.hold.Lock() }
func (l *load) resume() { l.hold.Unlock() }

// count is the number of acknowledged mutations so far.
func (l *load) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.acks)
}

// snapshot returns the acknowledged mutations and the error counts.
func (l *load) snapshot() ([]ack, map[string]int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	errs := make(map[string]int, len(l.errs))
	for k, v := range l.errs {
		errs[k] = v
	}
	return append([]ack(nil), l.acks...), errs
}

// waitAcks waits until n more mutations than already acknowledged are
// acknowledged, or d passes.
func (l *load) waitAcks(ctx context.Context, n int, d time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	want := l.count() + n
	for l.count() < want {
		if !sleep(ctx, poll) {
			return fmt.Errorf("compat: %d mutations acknowledged within %v, want %d more", l.count()-want+n, d, n)
		}
	}
	return nil
}

// gap is the longest time in [from, to] with no acknowledged mutation
// (counting from from and up to to), where it began, and how many
// mutations were acknowledged in the window.
func (l *load) gap(from, to time.Time) (gap time.Duration, at time.Time, n int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return longestGap(l.acks, from, to)
}

func longestGap(acks []ack, from, to time.Time) (gap time.Duration, at time.Time, n int) {
	i := sort.Search(len(acks), func(i int) bool { return !acks[i].at.Before(from) })
	last := from
	at = from
	for ; i < len(acks) && !acks[i].at.After(to); i++ {
		n++
		if g := acks[i].at.Sub(last); g > gap {
			gap, at = g, last
		}
		last = acks[i].at
	}
	if g := to.Sub(last); g > gap {
		gap, at = g, last
	}
	return gap, at, n
}

// errorCode names a failed mutation for the error counts.
func errorCode(err error) string {
	var ce *client.Error
	switch {
	case errors.Is(err, client.ErrOutcomeUnknown):
		if errors.As(err, &ce) {
			return "outcome unknown (" + ce.Code + ")"
		}
		return "outcome unknown"
	case errors.As(err, &ce):
		return ce.Code
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	default:
		return "transport"
	}
}

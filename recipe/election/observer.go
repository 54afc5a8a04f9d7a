package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/zkx"
)

// ObserveOptions configures Observe. The zero value is valid.
type ObserveOptions struct {
	// OnChange is called with the new leader (ok false: no candidate)
	// whenever the lowest candidate changes, on the observer's own
	// goroutine, one call at a time. A slow callback delays only later
	// calls, which then coalesce to the newest leader.
	OnChange func(leader Candidate, ok bool)
	// Logger receives the observer's logs (nil: discard).
	Logger *slog.Logger
}

// Observer tracks the election's leader (the seed's "master cache"): the
// lowest accepted candidate, kept current by a child watch on the
// directory whose every firing is followed by a fresh listing (which
// re-arms it).
//
// The lowest candidate is the leader or about to be: it may still be
// taking over, or about to step behind a designated candidate. Only the
// leader's own Term says when it may act.
type Observer struct {
	sess   *zkr.Session
	dir    string
	opts   ObserveOptions
	log    *slog.Logger
	sig    zkx.Signal
	lister *lister // owned by the loop (Observe before it starts)

	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu     sync.Mutex // guards the fields below
	cands  []Candidate
	stale  bool
	closed bool
}

// Observe reads the directory (creating it if missing) and tracks its
// leader until Close. When it returns, Leader holds the first reading.
func Observe(ctx context.Context, c *zkx.Client, dir string, opts ObserveOptions) (*Observer, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrBadConfig)
	}
	if err := zkr.ValidDir(dir); err != nil {
		return nil, fmt.Errorf("%w: dir %q: %v", ErrBadConfig, dir, err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("recipe", "election", "dir", dir, "observer", true)
	o := &Observer{sess: zkr.NewSession(c), dir: dir, opts: opts, log: log, sig: zkx.NewSignal()}
	o.lister = newLister(o.sess, dir, zkx.NewForeignSet(log, "election candidate"))
	if err := zkx.EnsurePath(ctx, o.sess, dir); err != nil {
		o.sess.Close()
		return nil, fmt.Errorf("election: observe %s: %w", dir, err)
	}
	sid := o.sess.ID()
	ch, err := o.refresh(ctx)
	if err != nil {
		o.sess.Close()
		return nil, fmt.Errorf("election: observe %s: %w", dir, err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	o.cancel = cancel
	o.wg.Add(2)
	go o.loop(lctx, ch, sid)
	go o.dispatch(lctx)
	return o, nil
}

// Leader returns the lowest accepted candidate; ok is false when there is
// none. While the observer is disconnected (Stale) it is the last one
// read.
func (o *Observer) Leader() (Candidate, bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.cands) == 0 {
		return Candidate{}, false
	}
	return o.cands[0].clone(), true
}

// Candidates returns the accepted candidates in line order.
func (o *Observer) Candidates() []Candidate {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]Candidate, len(o.cands))
	for i, c := range o.cands {
		out[i] = c.clone()
	}
	return out
}

// Stale reports whether the observer is disconnected.
func (o *Observer) Stale() bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stale
}

// Foreign returns the children of the directory the last listing refused.
func (o *Observer) Foreign() []Foreign { return o.lister.foreign.List() }

// Close stops the observer and waits for its goroutines (a callback in
// progress finishes first). Idempotent.
func (o *Observer) Close() {
	o.mu.Lock()
	if o.closed {
		o.mu.Unlock()
		return
	}
	o.closed = true
	o.mu.Unlock()
	o.cancel()
	o.wg.Wait()
	o.sess.Close()
}

func (o *Observer) loop(ctx context.Context, ch <-chan zk.Event, sid int64) {
	defer o.wg.Done()
	var bo zkx.Backoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
		case _, ok := <-o.sess.Events():
			if !ok {
				o.log.Warn("election: client closed; observer stopped")
				return
			}
			connected := o.sess.Connected()
			o.mu.Lock()
			o.stale = !connected
			o.mu.Unlock()
			if !connected || o.sess.ID() == sid {
				continue
			}
			// A new session: the watch is gone; read again (after Sync).
			if err := zkx.Sync(ctx, o.sess, o.dir); err != nil && ctx.Err() != nil {
				return
			}
		}
		sid = o.sess.ID()
		for {
			var err error
			if ch, err = o.refresh(ctx); err == nil {
				bo.Reset()
				break
			}
			if ctx.Err() != nil || errors.Is(err, zkr.ErrClientClosed) {
				return
			}
			o.log.Warn("election: observer listing failed; retrying", "err", err)
			if bo.Wait(ctx) != nil {
				return
			}
		}
	}
}

// refresh lists the directory with a child watch and publishes the
// candidates. The returned channel fires at the next change (or, when the
// directory is gone, at its creation).
func (o *Observer) refresh(ctx context.Context) (<-chan zk.Event, error) {
	names, ch, err := zkx.ChildrenW(ctx, o.sess, o.dir)
	if errors.Is(err, zk.ErrNoNode) {
		ok, _, ech, eerr := zkx.ExistsW(ctx, o.sess, o.dir)
		if eerr != nil {
			return nil, eerr
		}
		if ok {
			return nil, fmt.Errorf("%s re-created while listing", o.dir)
		}
		o.publish(nil)
		return ech, nil
	}
	if err != nil {
		return nil, err
	}
	cands, err := o.lister.read(ctx, names)
	if err != nil {
		return nil, err
	}
	o.publish(cands)
	return ch, nil
}

func (o *Observer) publish(cands []Candidate) {
	o.mu.Lock()
	o.cands = cands
	o.stale = false
	o.mu.Unlock()
	o.sig.Notify()
}

// dispatch calls OnChange when the lowest candidate differs from the last
// one delivered.
func (o *Observer) dispatch(ctx context.Context) {
	defer o.wg.Done()
	var last Candidate
	delivered := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-o.sig.C():
		}
		l, ok := o.Leader()
		if delivered && ok == (last.Node != "") && l.Node == last.Node {
			continue
		}
		delivered, last = true, l
		if o.opts.OnChange != nil && ctx.Err() == nil {
			o.opts.OnChange(l, ok)
		}
	}
}

package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/recipe/internal/zkr"
)

// Member is one live member: an accepted child of the directory.
type Member struct {
	// ID is the node name.
	ID string
	// Data is the data the member joined with.
	Data []byte
	// Session is the ZooKeeper session that holds the node
	// (Stat.EphemeralOwner).
	Session int64
	// Czxid is the zxid that created the node: it tells two incarnations
	// of one id apart (a rebuild after an expiry has a new one).
	Czxid int64
}

func (m Member) clone() Member {
	m.Data = append([]byte(nil), m.Data...)
	return m
}

// Foreign is a child of the directory that does not count as a member, and
// why.
type Foreign = zkr.Foreign

// SessionEvent is a change of the watcher's own session.
type SessionEvent int

const (
	// Suspended: disconnected (Curator's SUSPENDED). The view is frozen and
	// may be stale; the session and its watches may still be alive.
	Suspended SessionEvent = iota + 1
	// Reconnected: the same session is back; its watches survived and
	// fire for anything that changed meanwhile.
	Reconnected
	// Lost: the session expired (Curator's LOST). The view was re-read in
	// the new session, and its differences are delivered as joins and
	// leaves.
	Lost
)

func (e SessionEvent) String() string {
	switch e {
	case Suspended:
		return "suspended"
	case Reconnected:
		return "reconnected"
	case Lost:
		return "lost"
	}
	return fmt.Sprintf("SessionEvent(%d)", int(e))
}

// WatchOptions configures Watch. Every callback runs on the watcher's own
// dispatch goroutine, one at a time, never on go-zookeeper's event path; a
// slow callback delays only later callbacks (see the package doc for what
// coalescing means then).
type WatchOptions struct {
	// OnJoin is called for every member that appears, the members present
	// when Watch returns included.
	OnJoin func(Member)
	// OnLeave is called for every member that disappears, always after
	// the OnJoin of the same incarnation.
	OnLeave func(Member)
	// OnSession is called on the watcher's session changes.
	OnSession func(SessionEvent)
	// Accept, when set, is an extra check a child must pass to count (for
	// instance that Data decodes); its error is the foreign reason.
	Accept func(Member) error
	// Logger receives the watcher's logs (nil: discard).
	Logger *slog.Logger
}

// maxPendingSession bounds the session events queued for the dispatcher
// (the oldest is dropped beyond it).
const maxPendingSession = 16

// Watcher keeps a view of a directory's members.
type Watcher struct {
	sess    *zkr.Session
	dir     string
	opts    WatchOptions
	log     *slog.Logger
	foreign *zkr.ForeignSet
	sig     zkr.Signal

	cancel context.CancelFunc
	wg     sync.WaitGroup

	// sid is the session the last listing ran in. Owned by the loop
	// goroutine (Watch sets it before starting it).
	sid int64
	// connected is the loop's idea of the connection. Owned by the loop.
	connected bool

	mu sync.Mutex // guards the fields below
	// view is the last accepted listing by id.
	view map[string]Member
	// stale: disconnected since the view was read.
	stale bool
	// pending are session events not yet handed to OnSession.
	pending []SessionEvent
	closed  bool
}

// Watch reads dir's members (creating dir if missing) and keeps the view
// current until Close: each child watch that fires is re-armed by the
// listing that follows it, and that listing is compared with the previous
// one, so a join or leave between a trigger and the re-arm is never
// missed. When Watch returns, Members() holds the first listing (the
// seed's GetOriginMates).
func Watch(ctx context.Context, c *logroom.Client, dir string, opts WatchOptions) (*Watcher, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrBadName)
	}
	if err := zkr.ValidDir(dir); err != nil {
		return nil, fmt.Errorf("%w: dir %q: %v", ErrBadName, dir, err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("recipe", "membership", "dir", dir)
	w := &Watcher{
		sess: zkr.NewSession(c), dir: dir, opts: opts, log: log,
		foreign: zkr.NewForeignSet(log, "member"),
		sig:     zkr.NewSignal(),
		view:    map[string]Member{},
	}
	if err := zkr.EnsurePath(ctx, w.sess, dir); err != nil {
		w.sess.Close()
		return nil, fmt.Errorf("membership: watch %s: %w", dir, err)
	}
	w.sid = w.sess.ID()
	w.connected = true
	ch, err := w.refresh(ctx)
	if err != nil {
		w.sess.Close()
		return nil, fmt.Errorf("membership: watch %s: %w", dir, err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.wg.Add(2)
	go w.loop(lctx, ch)
	go w.dispatch(lctx)
	return w, nil
}

// Members returns the current view sorted by id. While the watcher is
// disconnected (Stale) it is the last view read.
func (w *Watcher) Members() []Member {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Member, 0, len(w.view))
	for _, m := range w.view {
		out = append(out, m.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Stale reports whether the watcher is disconnected, so that Members may
// be out of date.
func (w *Watcher) Stale() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.stale
}

// Foreign returns the children of dir that the last listing refused:
// non-ephemeral (persistent) nodes, names that are not valid ids,
// unreadable nodes and nodes Accept refused.
func (w *Watcher) Foreign() []Foreign { return w.foreign.List() }

// Close stops the watcher and waits for its goroutines (a callback in
// progress finishes first; nothing is delivered after Close returns).
// Idempotent.
func (w *Watcher) Close() {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	w.closed = true
	w.mu.Unlock()
	w.cancel()
	w.wg.Wait()
	w.sess.Close()
}

// loop re-lists on every child watch and follows the session.
func (w *Watcher) loop(ctx context.Context, ch <-chan zk.Event) {
	defer w.wg.Done()
	var bo zkr.Backoff
	for {
		select {
		case <-ctx.Done():
			return
		case <-ch:
			// A change, or NotWatching (expiry, close): list again.
		case ev, ok := <-w.sess.Events():
			if !ok {
				w.log.Warn("membership: client closed; watcher stopped")
				return
			}
			w.log.Debug("membership: session event", "type", ev.Type, "state", ev.State, "now", w.sess.Client().State())
			if !w.sess.Connected() {
				if w.connected {
					w.connected = false
					w.setStale(true, Suspended)
				}
				continue
			}
			if w.sess.ID() == w.sid {
				if !w.connected {
					w.connected = true
					w.setStale(false, Reconnected)
				}
				continue
			}
			// A new session: ours expired. refresh reports it.
		}
		for {
			var err error
			ch, err = w.refresh(ctx)
			if err == nil {
				bo.Reset()
				break
			}
			if ctx.Err() != nil || errors.Is(err, zkr.ErrClientClosed) {
				return
			}
			w.log.Warn("membership: listing failed; retrying", "err", err)
			if bo.Wait(ctx) != nil {
				return
			}
		}
	}
}

func (w *Watcher) setStale(stale bool, ev SessionEvent) {
	w.mu.Lock()
	w.stale = stale
	w.pushLocked(ev)
	w.mu.Unlock()
	w.sig.Notify()
}

func (w *Watcher) pushLocked(ev SessionEvent) {
	if len(w.pending) >= maxPendingSession {
		w.pending = w.pending[1:]
	}
	w.pending = append(w.pending, ev)
}

// refresh lists dir with a child watch, reads every child and publishes the
// accepted ones as the view. Every listing re-reads every child: a member
// deleted and re-created between two listings comes back with a new czxid
// and is reported as a leave and a join. The returned channel fires at the
// next change (or, when dir is gone, when it is created).
func (w *Watcher) refresh(ctx context.Context) (<-chan zk.Event, error) {
	if err := w.sess.WaitConnected(ctx); err != nil {
		return nil, err
	}
	if sid := w.sess.ID(); sid != w.sid {
		// Expired: the new session may read from a server behind what we
		// saw; catch it up first.
		if err := zkr.Sync(ctx, w.sess, w.dir); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, err
		}
		w.log.Info("membership: watcher session expired; re-reading in the new session")
		w.sid = sid
		w.connected = true
		w.setStale(false, Lost)
	}
	names, ch, err := zkr.ChildrenW(ctx, w.sess, w.dir)
	if errors.Is(err, zk.ErrNoNode) {
		ok, _, ech, eerr := zkr.ExistsW(ctx, w.sess, w.dir)
		if eerr != nil {
			return nil, eerr
		}
		if ok {
			return nil, fmt.Errorf("%s re-created while listing", w.dir)
		}
		w.log.Warn("membership: directory is gone; waiting for it")
		w.publish(map[string]Member{}, map[string]string{})
		return ech, nil
	}
	if err != nil {
		return nil, err
	}
	view := make(map[string]Member, len(names))
	foreign := map[string]string{}
	for _, n := range names {
		p := w.dir + "/" + n
		if err := zkr.ValidName(n); err != nil {
			foreign[p] = "not a valid member id: " + err.Error()
			continue
		}
		b, st, err := zkr.Get(ctx, w.sess, p)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			continue // left meanwhile; the watch fires again
		case errors.Is(err, zk.ErrNoAuth):
			foreign[p] = "unreadable: its ACL denies this client READ"
			continue
		case err != nil:
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		m := Member{ID: n, Data: b, Session: st.EphemeralOwner, Czxid: st.Czxid}
		if reason := w.accept(m); reason != "" {
			foreign[p] = reason
			continue
		}
		view[n] = m
	}
	w.publish(view, foreign)
	return ch, nil
}

// accept returns why m is foreign, or "".
func (w *Watcher) accept(m Member) string {
	if m.Session == 0 {
		return "not ephemeral (a persistent znode is never a live member)"
	}
	if w.opts.Accept != nil {
		if err := w.opts.Accept(m.clone()); err != nil {
			return "refused by Accept: " + err.Error()
		}
	}
	return ""
}

func (w *Watcher) publish(view map[string]Member, foreign map[string]string) {
	w.foreign.Replace(foreign)
	w.mu.Lock()
	w.view = view
	w.mu.Unlock()
	w.sig.Notify()
}

// dispatch runs the callbacks. It compares the newest view with the last
// one it delivered (coalescing any views in between) and reports the
// differences: leaves first, then joins, each in id order.
func (w *Watcher) dispatch(ctx context.Context) {
	defer w.wg.Done()
	delivered := map[string]Member{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.sig.C():
		}
		w.mu.Lock()
		events := w.pending
		w.pending = nil
		view := w.view // replaced, never mutated, by publish
		w.mu.Unlock()
		for _, ev := range events {
			if ctx.Err() != nil {
				return
			}
			if w.opts.OnSession != nil {
				w.opts.OnSession(ev)
			}
		}
		leaves, joins := diff(delivered, view)
		for _, m := range leaves {
			if ctx.Err() != nil {
				return
			}
			if w.opts.OnLeave != nil {
				w.opts.OnLeave(m.clone())
			}
		}
		for _, m := range joins {
			if ctx.Err() != nil {
				return
			}
			if w.opts.OnJoin != nil {
				w.opts.OnJoin(m.clone())
			}
		}
		delivered = view
	}
}

// diff returns the members of old missing from cur or replaced by another
// incarnation (leaves), and those of cur new or replaced (joins), each
// sorted by id.
func diff(old, cur map[string]Member) (leaves, joins []Member) {
	for id, m := range old {
		if c, ok := cur[id]; !ok || c.Czxid != m.Czxid {
			leaves = append(leaves, m)
		}
	}
	for id, m := range cur {
		if o, ok := old[id]; !ok || o.Czxid != m.Czxid {
			joins = append(joins, m)
		}
	}
	sort.Slice(leaves, func(i, j int) bool { return leaves[i].ID < leaves[j].ID })
	sort.Slice(joins, func(i, j int) bool { return joins[i].ID < joins[j].ID })
	return leaves, joins
}

package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/zkx"
)

// Member is one live member: an accepted child of the directory.
type Member struct {
	// ID is the node name.
	ID string
	// Data is the member's data as last read: the data it joined with, or
	// of its last Update seen.
	Data []byte
	// Session is the ZooKeeper session that holds the node
	// (Stat.EphemeralOwner).
	Session int64
	// Czxid is the zxid that created the node: it tells two incarnations
	// of one id apart (a rebuild after an expiry has a new one).
	Czxid int64
	// Version is the node's data version (Stat.Version): 0 at creation,
	// +1 per write. Within one incarnation (Czxid), a higher Version is
	// newer data.
	Version int32
}

func (m Member) clone() Member {
	m.Data = append([]byte(nil), m.Data...)
	return m
}

// Foreign is a child of the directory that does not count as a member, and
// why.
type Foreign = zkx.Foreign

// SessionEvent is a change of the watcher's own session.
type SessionEvent int

const (
	// Suspended: disconnected (Curator's SUSPENDED). The view is frozen and
	// may be stale; the session and its watches may still be alive.
	Suspended SessionEvent = iota + 1
	// Reconnected: the same session is back; its watches survived and
	// fire for anything that changed meanwhile.
	Reconnected
	// Lost: the session expired (Curator's LOST) and a new one began. The
	// view is re-read in the new session (Stale stays true until then),
	// and its differences are delivered as joins and leaves.
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
	// OnUpdate is called when a member's data was written (its Version
	// changed) while it stayed the same incarnation (same Czxid): old is
	// the member as last delivered, cur as now. It is called after the
	// leaves and joins of the same round, in id order, always between the
	// OnJoin and the OnLeave of that incarnation. Writes coalesce: several
	// updates between two reads (or while a callback runs) are one call,
	// but the last data is always delivered. A new incarnation is never
	// an update: it is a leave and a join. Accept sees the new data too:
	// a member it now refuses leaves the view (OnLeave), and joins again
	// (OnJoin, same Czxid) once accepted. Setting OnUpdate arms data
	// watches (see WatchData).
	OnUpdate func(old, cur Member)
	// WatchData arms a data watch on every member (besides the children
	// watch), so that Members follows data changes too, not only joins and
	// leaves. Implied by OnUpdate. Cost per member: one data watch held on
	// the servers, and one getData per refresh — and every write of any
	// member's data causes a refresh (a listing and a getData per child).
	// Without it, a member's Data is re-read only when the set of children
	// changes.
	WatchData bool
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
	foreign *zkx.ForeignSet
	sig     zkx.Signal

	cancel context.CancelFunc
	wg     sync.WaitGroup
	// expired wakes the loop (capacity 1, coalescing): the session goroutine
	// saw a new session, so the directory must be read again in it.
	expired chan struct{}
	// gone is closed by the session goroutine when the client closed.
	gone chan struct{}

	// sid is the session the last listing ran in. Owned by the loop
	// goroutine (Watch sets it before starting it).
	sid int64
	// watchData: arm a data watch on each child (OnUpdate or WatchData).
	watchData bool
	// armed holds, per child name, the data watch armed on it in session
	// sid that has not been seen firing yet. A child with one is re-read
	// without arming another (go-zookeeper would keep every channel until
	// the node changes). Owned by the loop.
	armed map[string]<-chan zk.Event
	// beforeRead, when set (tests only: export_test.go), is called by a
	// listing before it reads each child.
	beforeRead atomic.Pointer[func(id string)]

	mu sync.Mutex // guards the fields below
	// view is the last accepted listing by id, read in session viewSid
	// (written by the loop).
	view    map[string]Member
	viewSid int64
	// connected and cur are the session goroutine's idea of the
	// connection: connected since the last disconnection, in session cur
	// (written by the session goroutine only). Stale is !connected or
	// viewSid != cur.
	connected bool
	cur       int64
	// pending are session events not yet handed to OnSession.
	pending []SessionEvent
	closed  bool
}

// Watch reads dir's members (creating dir if missing) and keeps the view
// current until Close: each child watch that fires is re-armed by the
// listing that follows it, and that listing is compared with the previous
// one, so a join or leave between a trigger and the re-arm is never
// missed. When Watch returns, Members() holds the first listing, and
// Mates() the same without this process's own members (the seed's
// GetOriginMates).
func Watch(ctx context.Context, c *zkx.Client, dir string, opts WatchOptions) (*Watcher, error) {
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
		foreign:   zkx.NewForeignSet(log, "member"),
		sig:       zkx.NewSignal(),
		view:      map[string]Member{},
		watchData: opts.WatchData || opts.OnUpdate != nil,
		armed:     map[string]<-chan zk.Event{},
		expired:   make(chan struct{}, 1),
		gone:      make(chan struct{}),
	}
	if err := zkx.EnsurePath(ctx, w.sess, dir); err != nil {
		w.sess.Close()
		return nil, fmt.Errorf("membership: watch %s: %w", dir, err)
	}
	w.sid = w.sess.ID()
	ch, err := w.refresh(ctx)
	if err != nil {
		w.sess.Close()
		return nil, fmt.Errorf("membership: watch %s: %w", dir, err)
	}
	// The session goroutine starts from the session of the first listing;
	// the events queued since the subscription (a disconnection during
	// it, an expiry) follow.
	w.connected, w.cur = true, w.sid
	lctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	w.wg.Add(3)
	go w.followSession(lctx)
	go w.loop(lctx, ch)
	go w.dispatch(lctx)
	return w, nil
}

// Members returns the current view sorted by id: every member, this
// process's own included (a Registration through the same client is a
// member like any other). While the watcher is disconnected (Stale) it is
// the last view read. Mates leaves this process's own out.
func (w *Watcher) Members() []Member { return w.members(0) }

// Mates returns the current view sorted by id without the members this
// process holds — those whose node is held by the session of the
// watcher's client (a Registration through the same client): the others
// only, as the seed's GetOriginMates. While the watcher is disconnected
// (Stale) it is the last view read; after an expiry, until the next
// listing, our own node of the old session may still be in it.
func (w *Watcher) Mates() []Member { return w.members(w.sess.ID()) }

// members returns the view sorted by id, without the members held by
// session self (none when self is 0).
func (w *Watcher) members(self int64) []Member {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]Member, 0, len(w.view))
	for _, m := range w.view {
		if self != 0 && m.Session == self {
			continue
		}
		out = append(out, m.clone())
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// Stale reports whether Members may be out of date: the watcher is
// disconnected (from the moment its client loses the connection, whatever
// the watcher is doing, until it reconnects), or its session expired and
// the directory has not yet been read in the new one.
func (w *Watcher) Stale() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.connected || w.viewSid != w.cur
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
	var bo zkx.Backoff
	for {
		switch w.next(ctx, ch) {
		case wakeStop:
			return
		case wakeChange:
			// A change (of the children or of a member's data), or
			// NotWatching (expiry, close): list again.
		case wakeClosed:
			w.log.Warn("membership: client closed; watcher stopped")
			return
		case wakeExpired:
			// A new session: ours expired. refresh Syncs first.
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

// followSession follows the session events, in order, on its own
// goroutine: whatever the loop is doing (a refresh blocked on a request
// the disconnection interrupted, waiting for the session), Stale and the
// events Suspended, Reconnected and Lost follow the connection at once.
// It wakes the loop when a new session began (ours expired), and closes
// gone when the client closes.
func (w *Watcher) followSession(ctx context.Context) {
	defer w.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case ev, ok := <-w.sess.Events():
			if !ok {
				close(w.gone)
				return
			}
			w.log.Debug("membership: session event", "type", ev.Type, "state", ev.State, "now", w.sess.Client().State())
			if w.follow(ev) {
				select {
				case w.expired <- struct{}{}:
				default: // the loop has not taken the last one yet
				}
			}
		}
	}
}

// follow updates the session goroutine's idea of the connection from one
// session event, reports the change (Suspended, Reconnected or Lost), and
// reports whether a new session began (our session expired: the directory
// must be read again). It follows the events in order, so a disconnection
// that began and ended before its events were read is still reported,
// Suspended then Reconnected; a new session is recognised by its id, which
// no dropped event can hide.
func (w *Watcher) follow(ev zk.Event) (expired bool) {
	id := w.sess.ID()
	var report SessionEvent
	w.mu.Lock()
	switch {
	case ev.Type == zk.EventSession && ev.State == zk.StateDisconnected:
		if w.connected {
			w.connected = false
			report = Suspended
		}
	case ev.Type == zk.EventSession && ev.State == zk.StateHasSession,
		ev.Type == zk.EventNotWatching && w.sess.Connected():
		// NotWatching: a watch ended (the session expired, or the
		// client closes); a new session tells which.
		switch {
		case id == 0:
		case id != w.cur:
			w.cur, w.connected = id, true
			report, expired = Lost, true
		case !w.connected && ev.Type == zk.EventSession:
			w.connected = true
			report = Reconnected
		}
	}
	if report != 0 {
		w.pushLocked(report)
	}
	w.mu.Unlock()
	if report != 0 {
		w.sig.Notify()
	}
	return expired
}

// What woke the loop (next).
const (
	wakeStop    = iota // ctx ended
	wakeChange         // the children watch or a data watch fired
	wakeExpired        // a new session began: ours expired
	wakeClosed         // the client closed
)

// next waits for the children watch ch, a data watch of armed, a new
// session, the client's close or ctx. A data watch seen firing leaves
// armed, so that the refresh that follows re-arms it.
func (w *Watcher) next(ctx context.Context, ch <-chan zk.Event) int {
	if len(w.armed) == 0 {
		select {
		case <-ctx.Done():
			return wakeStop
		case <-ch:
			return wakeChange
		case <-w.expired:
			return wakeExpired
		case <-w.gone:
			return wakeClosed
		}
	}
	// A dynamic set of channels: one Select over all of them, no goroutine
	// per member.
	const fixed = 4
	cases := make([]reflect.SelectCase, fixed, fixed+len(w.armed))
	cases[0] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())}
	cases[1] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ch)}
	cases[2] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.expired)}
	cases[3] = reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(w.gone)}
	names := make([]string, 0, len(w.armed))
	for n, c := range w.armed {
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(c)})
		names = append(names, n)
	}
	i, _, _ := reflect.Select(cases)
	switch i {
	case 0:
		return wakeStop
	case 1:
		return wakeChange
	case 2:
		return wakeExpired
	case 3:
		return wakeClosed
	}
	delete(w.armed, names[i-fixed])
	return wakeChange
}

// fired reports whether the watch ch has fired (consuming its event).
func fired(ch <-chan zk.Event) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// read reads child p (named n) of the directory. With data watches on, it
// arms one on p unless an earlier one is still armed and has not fired:
// that one fires at the next write, so nothing is missed, and arming
// another would only pile up channels in go-zookeeper.
func (w *Watcher) read(ctx context.Context, n, p string) ([]byte, *zk.Stat, error) {
	if !w.watchData {
		return zkx.Get(ctx, w.sess, p)
	}
	if c, ok := w.armed[n]; ok && !fired(c) {
		return zkx.Get(ctx, w.sess, p)
	}
	delete(w.armed, n)
	type res struct {
		b  []byte
		st *zk.Stat
		ch <-chan zk.Event
	}
	v, err := zkr.Retry(ctx, w.sess, func() (res, error) {
		b, st, ch, err := w.sess.Conn().GetW(p)
		return res{b, st, ch}, err
	})
	if err != nil {
		return nil, nil, err // no watch is armed on a failed getData
	}
	w.armed[n] = v.ch
	return v.b, v.st, nil
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
		if err := zkx.Sync(ctx, w.sess, w.dir); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return nil, err
		}
		w.log.Info("membership: watcher session expired; re-reading in the new session")
		// The old session's watches are gone: go-zookeeper fired them
		// (NotWatching), so arm re-arms each of them; a watch already
		// armed in the new session (a listing that straddled the expiry)
		// has not fired and is kept, not armed twice. (The session
		// goroutine reported Lost when it saw the new session.)
		w.sid = sid
	}
	names, ch, err := zkx.ChildrenW(ctx, w.sess, w.dir)
	if errors.Is(err, zk.ErrNoNode) {
		ok, _, ech, eerr := zkx.ExistsW(ctx, w.sess, w.dir)
		if eerr != nil {
			return nil, eerr
		}
		if ok {
			return nil, fmt.Errorf("%s re-created while listing", w.dir)
		}
		w.log.Warn("membership: directory is gone; waiting for it")
		w.armed = map[string]<-chan zk.Event{} // their nodes are gone: fired
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
		if err := zkx.ValidName(n); err != nil {
			foreign[p] = "not a valid member id: " + err.Error()
			continue
		}
		if f := w.beforeRead.Load(); f != nil {
			(*f)(n)
		}
		b, st, err := w.read(ctx, n, p)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			continue // left meanwhile; the watch fires again
		case errors.Is(err, zk.ErrNoAuth):
			foreign[p] = "unreadable: its ACL denies this client READ"
			continue
		case err != nil:
			return nil, fmt.Errorf("read %s: %w", p, err)
		}
		m := Member{ID: n, Data: b, Session: st.EphemeralOwner, Czxid: st.Czxid, Version: st.Version}
		if reason := w.accept(m); reason != "" {
			foreign[p] = reason
			continue
		}
		view[n] = m
	}
	if len(w.armed) > 0 {
		// Children no longer listed were deleted, which fired their
		// watches: forget them.
		listed := make(map[string]bool, len(names))
		for _, n := range names {
			listed[n] = true
		}
		for n := range w.armed {
			if !listed[n] {
				delete(w.armed, n)
			}
		}
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
			return err.Error() // Accept names what is wrong
		}
	}
	return ""
}

func (w *Watcher) publish(view map[string]Member, foreign map[string]string) {
	w.foreign.Replace(foreign)
	w.mu.Lock()
	w.view, w.viewSid = view, w.sid
	w.mu.Unlock()
	w.sig.Notify()
}

// dispatch runs the callbacks. It compares the newest view with the last
// one it delivered (coalescing any views in between) and reports the
// differences: leaves first, then joins, then updates, each in id order.
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
		leaves, joins, updates := diff(delivered, view)
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
		for _, u := range updates {
			if ctx.Err() != nil {
				return
			}
			if w.opts.OnUpdate != nil {
				w.opts.OnUpdate(u.old.clone(), u.cur.clone())
			}
		}
		delivered = view
	}
}

// update is a member whose data was written: as delivered, and as now.
type update struct{ old, cur Member }

// diff returns the members of old missing from cur or replaced by another
// incarnation (leaves), those of cur new or replaced (joins), and those of
// the same incarnation in both with another data version (updates), each
// sorted by id.
func diff(old, cur map[string]Member) (leaves, joins []Member, updates []update) {
	for id, m := range old {
		c, ok := cur[id]
		switch {
		case !ok || c.Czxid != m.Czxid:
			leaves = append(leaves, m)
		case c.Version != m.Version:
			updates = append(updates, update{m, c})
		}
	}
	for id, m := range cur {
		if o, ok := old[id]; !ok || o.Czxid != m.Czxid {
			joins = append(joins, m)
		}
	}
	sort.Slice(leaves, func(i, j int) bool { return leaves[i].ID < leaves[j].ID })
	sort.Slice(joins, func(i, j int) bool { return joins[i].ID < joins[j].ID })
	sort.Slice(updates, func(i, j int) bool { return updates[i].cur.ID < updates[j].cur.ID })
	return leaves, joins, updates
}

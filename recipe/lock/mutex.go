package lock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"slices"
	"sync"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/zkx"
)

const (
	// nodePrefix starts every contender node: l-<guid>-<seq>.
	nodePrefix = "l-"
	formatV1   = 1
)

// nodeData is a contender node's data (informational: who holds).
type nodeData struct {
	V  int    `msgpack:"v"`
	ID string `msgpack:"id"`
}

// Contender is one accepted contender node.
type Contender struct {
	// Name is the node name l-<guid>-<seq>.
	Name string
	// ID is the holder id from the node's data ("" when unset or
	// undecodable: the data is informational, not a condition).
	ID string
	// Seq is ZooKeeper's sequence suffix.
	Seq int64
	// Session holds the node.
	Session int64
	// Czxid is the zxid that created the node: the fencing token of the
	// lease it becomes.
	Czxid int64

	guid string
	// unreadable: its ACL denies this client READ. ZooKeeper fires no
	// watch of this client on it, so a waiter behind it watches the
	// directory's children instead.
	unreadable bool
}

// Foreign is a child of the lock directory that does not count, and why.
type Foreign = zkx.Foreign

// Mutex is a fenced distributed mutual exclusion lock. One Mutex holds at
// most one lease at a time: Lock from several goroutines of one process
// queues them locally first, as a sync.Mutex would.
type Mutex struct {
	cfg     Config
	sess    *zkr.Session
	guid    string
	data    []byte
	log     *slog.Logger
	foreign *zkx.ForeignSet

	// sem is held from a Lock until its lease is unlocked (or the Lock
	// fails), and forever once Close took it. Whoever holds it owns stats.
	sem chan struct{}
	// stats caches the accepted contenders by name (a contender node never
	// changes; a name that leaves a listing is forgotten).
	stats map[string]Contender

	closeCtx    context.Context // done once Close began
	closeCancel context.CancelFunc
	janitor     zkx.Signal
	janitorDone chan struct{}

	mu sync.Mutex // guards the fields below
	// lease is the current lease (nil: none).
	lease *Lease
	// stray are names of our nodes that must go (a Lock that gave up, a
	// create that landed after its caller gave up, an Unlock whose delete
	// was not confirmed). Never a current lease's node.
	stray map[string]bool
	// dirty: a create's outcome was unknown (connection loss), so a node
	// of ours may exist unknown to us: the next sweep lists and deletes.
	dirty  bool
	closed bool
}

// New validates cfg, creates the lock directory if missing and returns a
// Mutex. It starts one goroutine (the janitor that deletes stray nodes);
// Close stops it.
func New(ctx context.Context, cfg Config) (*Mutex, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("recipe", "lock", "dir", cfg.Dir)
	m := &Mutex{
		cfg: cfg, sess: zkr.NewSession(cfg.Client), guid: zkr.NewGUID(),
		data: zkr.Encode(nodeData{V: formatV1, ID: cfg.ID}), log: log,
		foreign: zkx.NewForeignSet(log, "lock contender"),
		sem:     make(chan struct{}, 1), stats: map[string]Contender{},
		janitor: zkx.NewSignal(), janitorDone: make(chan struct{}),
		stray: map[string]bool{},
	}
	if err := zkx.EnsurePath(ctx, m.sess, cfg.Dir); err != nil {
		m.sess.Close()
		return nil, fmt.Errorf("lock: %s: %w", cfg.Dir, err)
	}
	m.closeCtx, m.closeCancel = context.WithCancel(context.Background())
	go m.runJanitor(m.closeCtx)
	return m, nil
}

// GUID returns the 32 hex characters in every node name of this Mutex.
func (m *Mutex) GUID() string { return m.guid }

// Foreign returns the children of the lock directory the last listing
// refused (bad names, persistent or unreadable nodes); they are ignored.
func (m *Mutex) Foreign() []Foreign { return m.foreign.List() }

// Lease returns the current lease, or nil.
func (m *Mutex) Lease() *Lease {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.lease
}

// Lock waits until this Mutex holds the lock, ctx ends or the Mutex is
// closed (ErrClosed), and returns the lease. On failure no node of this
// attempt is left behind (one that may exist is deleted in the
// background). The lease's Token is larger than that of every earlier
// lease of this lock, by any holder.
func (m *Mutex) Lock(ctx context.Context) (*Lease, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(m.closeCtx, cancel)
	defer stop()
	select {
	case m.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, m.ctxErr(ctx)
	}
	l, err := m.acquire(ctx)
	if err != nil {
		<-m.sem
		if ctx.Err() != nil {
			err = m.ctxErr(ctx)
		}
		return nil, fmt.Errorf("lock: lock %s: %w", m.cfg.Dir, err)
	}
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		l.hold.End(zkr.ErrHoldReleased)
		m.addStray(path.Base(l.Path()))
		<-m.sem
		return nil, fmt.Errorf("lock: lock %s: %w", m.cfg.Dir, ErrClosed)
	}
	m.lease = l
	m.mu.Unlock()
	m.log.Debug("lock: acquired", "node", l.Path(), "token", l.Token())
	return l, nil
}

// ctxErr is ctx's error, or ErrClosed when Close cancelled it.
func (m *Mutex) ctxErr(ctx context.Context) error {
	if m.closeCtx.Err() != nil {
		return ErrClosed
	}
	return ctx.Err()
}

// Unlock releases the current lease (see Lease.Unlock); ErrNotLocked
// without one.
func (m *Mutex) Unlock(ctx context.Context) error {
	l := m.Lease()
	if l == nil {
		return fmt.Errorf("lock: unlock %s: %w", m.cfg.Dir, ErrNotLocked)
	}
	return l.Unlock(ctx)
}

// Holder returns the contender that holds the lock now (the lowest
// accepted node), read afresh; ok is false when nobody does.
func (m *Mutex) Holder(ctx context.Context) (Contender, bool, error) {
	names, err := zkx.Children(ctx, m.sess, m.cfg.Dir)
	if errors.Is(err, zk.ErrNoNode) {
		return Contender{}, false, nil // no directory: nobody holds it
	}
	if err != nil {
		return Contender{}, false, fmt.Errorf("lock: holder of %s: %w", m.cfg.Dir, err)
	}
	var nodes []zkr.SeqNode
	for _, n := range names {
		if sn, err := zkr.ParseSeqNode(nodePrefix, n); err == nil {
			nodes = append(nodes, sn)
		}
	}
	zkr.SortBySeq(nodes)
	for _, sn := range nodes {
		c, ok, err := zkr.ReadAccepted(ctx, m.sess, m.cfg.Dir, sn, "contender", map[string]string{}, accept)
		if err != nil {
			return Contender{}, false, fmt.Errorf("lock: holder of %s: %w", m.cfg.Dir, err)
		}
		if ok {
			return c, true, nil
		}
	}
	return Contender{}, false, nil
}

// Close unlocks the current lease if any, makes pending and future Lock
// calls fail with ErrClosed, deletes every node this Mutex may have left
// (bounded by ctx) and stops its goroutines, waiting for them. Idempotent.
func (m *Mutex) Close(ctx context.Context) error {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		return nil
	}
	m.closed = true
	l := m.lease
	m.mu.Unlock()
	m.closeCancel()
	var errs []error
	if l != nil {
		if err := l.Unlock(ctx); err != nil && !errors.Is(err, ErrLockLost) {
			errs = append(errs, err)
		}
	}
	// A Lock in flight returns promptly now (its context is cancelled);
	// after it, nothing else uses the Mutex's nodes.
	m.sem <- struct{}{}
	if err := m.sweep(ctx); err != nil {
		errs = append(errs, err)
	}
	<-m.janitorDone
	m.sess.Close()
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("lock: close %s: %w", m.cfg.Dir, err)
	}
	return nil
}

// acquire creates our contender node and waits until it is the lowest.
// The caller holds sem.
func (m *Mutex) acquire(ctx context.Context) (*Lease, error) {
	if m.isDirty() {
		if err := m.sweep(ctx); err != nil {
			return nil, err
		}
	}
	mine := ""
	// gaveUp deletes our node when we return without a lease.
	defer func() {
		if mine != "" {
			m.addStray(mine)
		}
	}()
	listedIn := m.sess.ID()
	for {
		if mine == "" {
			name, err := m.create(ctx)
			if err != nil {
				return nil, err
			}
			mine = name
		}
		if sid := m.sess.ID(); sid != listedIn {
			// A new session: read from an up-to-date server before
			// concluding that our node is gone.
			if err := zkx.Sync(ctx, m.sess, m.cfg.Dir); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return nil, err
			}
			listedIn = sid
		}
		cs, err := m.list(ctx, mine)
		if err != nil {
			return nil, err
		}
		idx := -1
		for i, c := range cs {
			if c.Name == mine {
				idx = i
				break
			}
		}
		if idx < 0 || cs[idx].Session != m.sess.ID() {
			m.log.Info("lock: our contender node is gone (session expired or deleted); queueing again", "node", mine)
			mine = ""
			continue
		}
		if idx == 0 {
			c := cs[0]
			h := zkr.StartHold(m.sess, m.cfg.Dir+"/"+c.Name, c.Czxid, c.Session, m.cfg.SuspendGrace, m.log)
			mine = "" // the lease owns it now
			return &Lease{m: m, hold: h}, nil
		}
		// Watch only the predecessor (no herd effect), or, when we may
		// not read it (ZooKeeper fires no watch on it for us), the
		// directory's children.
		ok, ch, err := m.watchPredecessor(ctx, cs[idx-1])
		if err != nil {
			return nil, err
		}
		if !ok {
			continue
		}
		if err := m.waitWatch(ctx, ch, listedIn); err != nil {
			return nil, err
		}
	}
}

// watchPredecessor arms a watch that fires when pred goes: an ExistsW on
// it, or a ChildrenW on the directory when pred is unreadable. ok is false
// when pred is gone already.
func (m *Mutex) watchPredecessor(ctx context.Context, pred Contender) (bool, <-chan zk.Event, error) {
	p := m.cfg.Dir + "/" + pred.Name
	if !pred.unreadable {
		ok, _, ch, err := zkx.ExistsW(ctx, m.sess, p)
		if err != nil {
			return false, nil, fmt.Errorf("watch predecessor %s: %w", pred.Name, err)
		}
		return ok, ch, nil
	}
	names, ch, err := zkx.ChildrenW(ctx, m.sess, m.cfg.Dir)
	if err != nil {
		return false, nil, fmt.Errorf("watch the contenders before unreadable %s: %w", pred.Name, err)
	}
	return slices.Contains(names, pred.Name), ch, nil
}

// waitWatch waits for ch, a session change away from sid, or ctx.
func (m *Mutex) waitWatch(ctx context.Context, ch <-chan zk.Event, sid int64) error {
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
			return nil
		case _, ok := <-m.sess.Events():
			if !ok {
				return zkr.ErrClientClosed
			}
			if id := m.sess.ID(); id != 0 && id != sid {
				return nil
			}
		}
	}
}

// create makes our contender node, protected against a lost answer: after
// a connection loss it looks for a node carrying our guid in our session
// before creating another.
func (m *Mutex) create(ctx context.Context) (string, error) {
	prefix := m.cfg.Dir + "/" + zkr.SeqPrefix(nodePrefix, m.guid)
	var bo zkx.Backoff
	for {
		p, err := zkr.Do(ctx, m.sess, func() (string, error) {
			return m.sess.Conn().Create(prefix, m.data, zk.FlagEphemeral|zk.FlagSequence, m.sess.ACL())
		}, func(p string, err error) {
			// Landed (or may have) after the caller gave up.
			if err == nil {
				m.addStray(path.Base(p))
			} else if zkx.IsConnLoss(err) {
				m.setDirty()
			}
		})
		if err == nil {
			return path.Base(p), nil
		}
		if errors.Is(err, zk.ErrNoNode) {
			// The directory is gone (deleted by someone): create it again,
			// as New did.
			m.log.Info("lock: the lock directory is missing; creating it again")
			if err := zkx.EnsurePath(ctx, m.sess, m.cfg.Dir); err != nil {
				return "", fmt.Errorf("create contender: %w", err)
			}
			continue
		}
		if !zkx.IsConnLoss(err) {
			return "", fmt.Errorf("create contender: %w", err)
		}
		m.setDirty()
		m.log.Info("lock: connection lost during create; looking for our node", "err", err)
		if werr := bo.Wait(ctx); werr != nil {
			return "", fmt.Errorf("%w (last error: %w)", werr, err)
		}
		if err := zkx.Sync(ctx, m.sess, m.cfg.Dir); err != nil {
			return "", err
		}
		cs, err := m.list(ctx, "")
		if err != nil {
			return "", err
		}
		for _, c := range cs {
			if c.guid == m.guid && c.Session == m.sess.ID() {
				m.log.Info("lock: adopted our contender node after a connection loss", "node", c.Name)
				return c.Name, nil // list deleted every other node of ours
			}
		}
	}
}

// list reads the contenders, sorted by sequence, up to mine. Nodes held by
// our session carrying our guid other than mine are ours from a lost
// create or an abandoned attempt: they are deleted (with mine == "", the
// lowest one is kept: create adopts it). A node with our guid held by
// another session is a contender like any other. Foreign children are
// reported and ignored.
func (m *Mutex) list(ctx context.Context, mine string) ([]Contender, error) {
	names, err := zkx.Children(ctx, m.sess, m.cfg.Dir)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, fmt.Errorf("list contenders: %w", err)
	}
	// A missing directory holds nobody: ours is gone too, and create
	// makes the directory again.
	foreign := map[string]string{}
	nodes := zkr.ParseListing(m.cfg.Dir, nodePrefix, names, "", m.stats, foreign)
	var out []Contender
	keptOurs := mine != ""
	for _, sn := range nodes {
		c, ok := m.stats[sn.Name]
		if !ok {
			var err error
			if c, ok, err = zkr.ReadAccepted(ctx, m.sess, m.cfg.Dir, sn, "contender", foreign, accept); err != nil {
				return nil, err
			} else if !ok {
				continue
			}
			m.stats[sn.Name] = c
		}
		if c.guid == m.guid && c.Name != mine && c.Session == m.sess.ID() {
			if !keptOurs {
				keptOurs = true // create adopts it
			} else {
				if err := m.deleteNode(ctx, c.Name); err != nil {
					return nil, err
				}
				continue
			}
		}
		out = append(out, c)
		if c.Name == mine {
			break // nodes after ours do not matter
		}
	}
	m.foreign.Replace(foreign)
	return out, nil
}

// accept checks a contender: its name parsed, it is ephemeral. Its data is
// informational (the holder id), not a condition, so a node this client
// may not read (readable false: another client's credentials) counts all
// the same, with no ID. The reason is "" when it counts.
func accept(sn zkr.SeqNode, data []byte, st *zk.Stat, readable bool) (Contender, string) {
	if st.EphemeralOwner == 0 {
		return Contender{}, "not ephemeral (a persistent znode never holds the lock)"
	}
	c := Contender{Name: sn.Name, Seq: sn.Seq, Session: st.EphemeralOwner, Czxid: st.Czxid, guid: sn.GUID, unreadable: !readable}
	var d nodeData
	if readable && zkr.Decode(data, &d) == nil && d.V == formatV1 && zkx.ValidName(d.ID) == nil {
		c.ID = d.ID
	}
	return c, ""
}

// deleteNode deletes one of our nodes by name (gone already is fine).
func (m *Mutex) deleteNode(ctx context.Context, name string) error {
	err := zkr.Retry0(ctx, m.sess, func() error { return m.sess.Conn().Delete(m.cfg.Dir+"/"+name, -1) })
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("delete %s: %w", name, err)
	}
	delete(m.stats, name)
	return nil
}

// sweep deletes every node carrying our guid but the current lease's. The
// caller holds sem.
func (m *Mutex) sweep(ctx context.Context) error {
	m.mu.Lock()
	keep := ""
	if m.lease != nil {
		keep = path.Base(m.lease.Path())
	}
	m.mu.Unlock()
	err := zkx.Sync(ctx, m.sess, m.cfg.Dir)
	var names []string
	if err == nil {
		names, err = zkx.Children(ctx, m.sess, m.cfg.Dir)
	}
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("list contenders: %w", err)
	}
	// A missing directory holds no node of ours.
	for _, n := range names {
		sn, err := zkr.ParseSeqNode(nodePrefix, n)
		if err != nil || sn.GUID != m.guid || n == keep {
			continue
		}
		// Only our session's: a node of another session with our guid is
		// not ours to delete (and one of an expired session of ours is
		// gone already).
		ok, st, err := zkx.Exists(ctx, m.sess, m.cfg.Dir+"/"+n)
		if err != nil {
			return fmt.Errorf("exists %s: %w", n, err)
		}
		if !ok || st.EphemeralOwner != m.sess.ID() {
			continue
		}
		if err := m.deleteNode(ctx, n); err != nil {
			return err
		}
	}
	m.mu.Lock()
	m.dirty = false
	m.mu.Unlock()
	return nil
}

func (m *Mutex) isDirty() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.dirty
}

func (m *Mutex) setDirty() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.dirty = true
}

// addStray hands one of our node names to the janitor.
func (m *Mutex) addStray(name string) {
	m.mu.Lock()
	m.stray[name] = true
	m.mu.Unlock()
	m.janitor.Notify()
}

// runJanitor deletes stray nodes until ctx ends (Close).
func (m *Mutex) runJanitor(ctx context.Context) {
	defer close(m.janitorDone)
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.janitor.C():
		}
		m.mu.Lock()
		names := make([]string, 0, len(m.stray))
		for n := range m.stray {
			names = append(names, n)
		}
		m.mu.Unlock()
		for _, n := range names {
			p := m.cfg.Dir + "/" + n
			err := zkr.Retry0(ctx, m.sess, func() error { return m.sess.Conn().Delete(p, -1) })
			if err != nil && !errors.Is(err, zk.ErrNoNode) {
				if ctx.Err() == nil {
					m.log.Warn("lock: cannot delete stray node; the session's end will", "node", p, "err", err)
				}
				continue
			}
			m.log.Debug("lock: stray node deleted", "node", p)
			m.mu.Lock()
			delete(m.stray, n)
			m.mu.Unlock()
		}
	}
}

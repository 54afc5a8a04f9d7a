package membership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/zkx"
)

// JoinOptions configures Join. The zero value is valid.
type JoinOptions struct {
	// Logger receives the registration's logs (nil: discard).
	Logger *slog.Logger
	// KeepDir: Join creates the directory when missing, but once joined
	// the keeper never creates it again: when it vanishes (the whole tree
	// above it deleted, ZooKeeper's data lost), the keeper waits for it to
	// come back instead of re-creating the path above it. An owner that
	// treats the directory's disappearance as a fact to report (package
	// replica: its room lost) sets it.
	KeepDir bool
}

// Registration is this process's member node: dir/id, EPHEMERAL, holding
// the caller's data. A goroutine (the keeper) keeps it there: it
// re-creates the node in the new session after an expiry, and after anyone
// deletes it, until Leave; it writes the data given to Update, and puts
// the registration's data back if anyone else overwrites it.
type Registration struct {
	key  liveKey // released when the keeper stops
	sess *zkr.Session
	dir  string
	id   string
	log  *slog.Logger
	// keepDir: JoinOptions.KeepDir.
	keepDir bool

	cancel context.CancelFunc
	done   chan struct{} // closed when the loop returned
	// poke wakes the keeper when Update recorded new data.
	poke zkx.Signal
	// afterEvent, when set (tests only: export_test.go), is called by the
	// keeper after it handled a session event.
	afterEvent atomic.Pointer[func(zk.Event)]

	mu sync.Mutex // guards the fields below
	// data is the latest data (Join's, then Update's), gen its generation
	// (1 for Join's, +1 per Update that changed it). Never mutated: Update
	// replaces it.
	data []byte
	gen  int64
	// nodeGen is the generation of the data known to be in the node we
	// hold, -1 when unknown (a node adopted, a write whose answer was
	// lost, a write by someone else); nodeVer is the node's data version
	// then.
	nodeGen int64
	nodeVer int32
	// acked is the highest generation ever known to be in the node: an
	// Update of generation g is done once acked >= g. ackCh is closed (and
	// replaced) whenever acked grows.
	acked int64
	ackCh chan struct{}
	// czxid identifies the node we hold (0: none right now, as far as the
	// loop knows).
	czxid int64
	// owner is the session that holds it.
	owner int64
	// rebuilds counts the creations after the first.
	rebuilds int
	// lastErr is the loop's last failure to (re)create the node, nil once
	// it holds one.
	lastErr error
	left    bool
	// gone: Leave finished (the node deleted, or not ours); a Leave whose
	// delete failed leaves it false, and the next Leave tries again.
	gone bool
}

// Join creates dir/id (EPHEMERAL, data as given, the client's ACL),
// creating dir's missing ancestors (persistent), and keeps it there until
// Leave. id must be a valid znode name (ErrBadName otherwise).
//
// A node of that name held by another live session is waited out until ctx
// ends (ErrIDInUse then): it is most likely this member's previous
// process, whose session has not expired yet. A persistent node of that
// name is foreign and no expiry removes it: ErrIDInUse at once. A node
// held by our own session (a create whose answer was lost) is adopted.
func Join(ctx context.Context, c *zkx.Client, dir, id string, data []byte, opts JoinOptions) (*Registration, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrBadName)
	}
	if err := zkr.ValidDir(dir); err != nil {
		return nil, fmt.Errorf("%w: dir %q: %v", ErrBadName, dir, err)
	}
	if err := zkx.ValidName(id); err != nil {
		return nil, fmt.Errorf("%w: id %q: %v", ErrBadName, id, err)
	}
	if len(data) > MaxDataBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrDataTooLarge, len(data), MaxDataBytes)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	key := liveKey{c, dir + "/" + id}
	if !claimLive(key) {
		return nil, fmt.Errorf("%w: %s is already joined through this client (one Registration per id and client)", ErrIDInUse, key.path)
	}
	joined := false
	defer func() {
		if !joined {
			releaseLive(key)
		}
	}()
	r := &Registration{
		key:  key,
		sess: zkr.NewSession(c), dir: dir, id: id, keepDir: opts.KeepDir,
		data: append([]byte(nil), data...), gen: 1, nodeGen: -1,
		log:   log.With("recipe", "membership", "path", dir+"/"+id),
		done:  make(chan struct{}),
		poke:  zkx.NewSignal(),
		ackCh: make(chan struct{}),
	}
	ensure := zkx.EnsurePath
	if opts.KeepDir {
		ensure = createLeaf // the path above must exist: it is not re-created
	}
	if err := ensure(ctx, r.sess, dir); err != nil {
		r.sess.Close()
		return nil, fmt.Errorf("membership: join %s: %w", r.Path(), err)
	}
	st, ch, err := r.ensure(ctx)
	if err != nil {
		r.sess.Close()
		return nil, fmt.Errorf("membership: join %s: %w", r.Path(), err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	joined = true
	go r.loop(lctx, st, ch)
	return r, nil
}

// errSessionChanged: a data write was about to run in another session
// than the one that holds our node.
var errSessionChanged = errors.New("membership: session changed")

// liveKey names a live Registration: two on one client for one path would
// each take the other's writes for foreign ones and write theirs back
// forever, so Join refuses the second (ErrIDInUse) until the first's
// keeper has stopped.
type liveKey struct {
	c    *zkx.Client
	path string
}

var live struct {
	mu   sync.Mutex
	keys map[liveKey]bool
}

func claimLive(k liveKey) bool {
	live.mu.Lock()
	defer live.mu.Unlock()
	if live.keys[k] {
		return false
	}
	if live.keys == nil {
		live.keys = map[liveKey]bool{}
	}
	live.keys[k] = true
	return true
}

func releaseLive(k liveKey) {
	live.mu.Lock()
	delete(live.keys, k)
	live.mu.Unlock()
}

// Data returns (a copy of) the registration's data: Join's, or that of the
// last Update accepted (an Update refused for its size records nothing).
// It is what the node holds, or will hold once the keeper has written it:
// an Update that returned nil is in the node; one that returned an error
// after recording its data is written as soon as the keeper can.
func (r *Registration) Data() []byte {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]byte(nil), r.data...)
}

// Update replaces the member node's data: data becomes the registration's
// data (Data), which every later re-creation (after an expiry or a
// deletion) writes too, and Update waits until the node holds it.
//
// It returns nil once the node of the current session holds data or the
// data of a later Update: written by a setData when the node is there, or
// by the rebuild's create when the node is missing (session expired,
// deleted), in which case Update returns after the rebuild. Connection
// losses are retried (the session coming back, or a new one after an
// expiry) for as long as ctx lasts. When ctx ends first, Update returns an
// error wrapping ctx's: the data stays recorded and the keeper still
// writes it (at the next reconnection or rebuild) unless a later Update
// replaces it. Updates are written one at a time by the keeper, so
// concurrent Updates are safe; the last recorded wins.
//
// data is at most MaxDataBytes (ErrDataTooLarge otherwise: nothing is
// recorded nor sent). Data equal to the current data writes nothing. After
// Leave (or once the client is closed) it returns ErrLeft (or the
// client's error) without recording anything.
//
// Each write is a getData (to check that the node is still this
// registration's incarnation and to see whether a lost answer landed)
// then a version-checked setData; every watcher with data watches
// (WatchOptions.OnUpdate) re-reads the directory once per write it sees.
func (r *Registration) Update(ctx context.Context, data []byte) error {
	if len(data) > MaxDataBytes {
		return fmt.Errorf("membership: update %s: %w: %d bytes, at most %d", r.Path(), ErrDataTooLarge, len(data), MaxDataBytes)
	}
	r.mu.Lock()
	if r.left {
		r.mu.Unlock()
		return fmt.Errorf("membership: update %s: %w", r.Path(), ErrLeft)
	}
	select {
	case <-r.done:
		err := r.lastErr
		r.mu.Unlock()
		if err == nil {
			err = ErrLeft
		}
		return fmt.Errorf("membership: update %s: keeper stopped: %w", r.Path(), err)
	default:
	}
	if !bytes.Equal(data, r.data) {
		r.data = append([]byte(nil), data...)
		r.gen++
	}
	gen := r.gen
	r.mu.Unlock()
	r.poke.Notify()
	for {
		r.mu.Lock()
		acked, ackCh, left, lastErr := r.acked, r.ackCh, r.left, r.lastErr
		r.mu.Unlock()
		if acked >= gen {
			return nil
		}
		if left {
			return fmt.Errorf("membership: update %s: %w (the data was recorded, not written)", r.Path(), ErrLeft)
		}
		select {
		case <-ackCh:
		case <-r.done:
			r.mu.Lock()
			acked, lastErr = r.acked, r.lastErr
			r.mu.Unlock()
			if acked >= gen {
				return nil
			}
			if lastErr == nil {
				lastErr = ErrLeft
			}
			return fmt.Errorf("membership: update %s: keeper stopped before writing: %w", r.Path(), lastErr)
		case <-ctx.Done():
			if lastErr != nil {
				return fmt.Errorf("membership: update %s: recorded, not yet written: %w (last error: %w)", r.Path(), ctx.Err(), lastErr)
			}
			return fmt.Errorf("membership: update %s: recorded, not yet written: %w", r.Path(), ctx.Err())
		}
	}
}

// ID returns the member id.
func (r *Registration) ID() string { return r.id }

// Path returns the member node's path.
func (r *Registration) Path() string { return r.dir + "/" + r.id }

// Registered reports whether the node is there in the current session as
// far as the registration knows (false from the moment it learns of a
// disconnection-free loss — expiry, deletion — until it re-created the
// node; a disconnected client keeps the last answer).
func (r *Registration) Registered() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.czxid != 0 && r.owner == r.sess.ID()
}

// Rebuilds returns how many times the node was re-created after the first
// creation (session expiries, deletions by others).
func (r *Registration) Rebuilds() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.rebuilds
}

// Err returns the last failure to re-create the node (nil while it is
// held): e.g. ErrIDInUse while another session holds our id.
func (r *Registration) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// Leave stops the registration, waits for its goroutine and deletes the
// node if our session holds it. The session ending deletes it too (that
// is what makes a crash a leave). When ctx ends (or the delete fails)
// first, Leave returns the error and the node may remain: call Leave
// again to retry the delete (the registration no longer keeps the node
// either way). Once a Leave returned nil, later ones return nil at once.
func (r *Registration) Leave(ctx context.Context) error {
	r.mu.Lock()
	if r.gone {
		r.mu.Unlock()
		return nil
	}
	r.left = true
	r.mu.Unlock()
	r.cancel()
	<-r.done
	p := r.Path()
	err := zkr.Retry0(ctx, r.sess, func() error {
		ok, st, err := r.sess.Conn().Exists(p)
		if err != nil || !ok || st.EphemeralOwner != r.sess.ID() {
			return err
		}
		err = r.sess.Conn().Delete(p, st.Version)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		return err
	})
	if err != nil && !errors.Is(err, zkr.ErrClientClosed) && !errors.Is(err, zk.ErrClosing) {
		// A closed client closed its session, and the node with it.
		return fmt.Errorf("membership: leave %s: %w", p, err)
	}
	r.mu.Lock()
	first := !r.gone
	r.czxid, r.gone = 0, true
	r.mu.Unlock()
	if first {
		r.sess.Close()
	}
	return nil
}

// loop keeps the node: it watches it, re-creates it when it is gone
// (deleted, or the session that held it expired), and writes the latest
// data into it. st and ch are the node's Stat and an armed watch on it
// from Join's ensure.
func (r *Registration) loop(ctx context.Context, st *zk.Stat, ch <-chan zk.Event) {
	defer close(r.done)
	defer releaseLive(r.key) // before done closes: Leave returns with the id free
	var bo zkx.Backoff
	// ch is an armed, unfired watch on the node in session chSid (nil:
	// none). It is kept across wake-ups that are not its own, so that
	// go-zookeeper does not pile up one channel per wake-up.
	chSid := r.sess.ID()
	r.checkVersion(st)
	for ctx.Err() == nil {
		if !r.holds() {
			var err error
			st, ch, err = r.ensure(ctx)
			if err != nil {
				if ctx.Err() != nil {
					return
				}
				r.setErr(err)
				if errors.Is(err, zkr.ErrClientClosed) {
					return
				}
				r.log.Warn("membership: cannot re-create member node; retrying", "err", err)
				if bo.Wait(ctx) != nil {
					return
				}
				continue
			}
			chSid = r.sess.ID()
			r.checkVersion(st)
			bo.Reset()
		}
		if err := r.writeData(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			r.setErr(err)
			if errors.Is(err, zkr.ErrClientClosed) {
				return
			}
			r.log.Warn("membership: cannot write member data; retrying", "err", err)
			if bo.Wait(ctx) != nil {
				return
			}
			continue
		}
		if !r.holds() {
			continue // lost while writing: re-create
		}
		r.mu.Lock()
		owner := r.owner
		r.mu.Unlock()
		if ch == nil || chSid != r.sess.ID() {
			p := r.Path()
			ok, est, ech, err := zkx.ExistsW(ctx, r.sess, p)
			if err != nil {
				if errors.Is(err, zkr.ErrClientClosed) {
					r.setErr(err) // a waiting Update reports the client's error
				}
				if ctx.Err() != nil || errors.Is(err, zkr.ErrClientClosed) {
					return
				}
				if bo.Wait(ctx) != nil {
					return
				}
				continue
			}
			ch, chSid = ech, r.sess.ID()
			if !ok || est.EphemeralOwner != owner {
				r.lose("member node gone")
				continue
			}
			if !r.checkVersion(est) {
				continue // written by someone else: put our data back
			}
		}
		fired, ok := r.wait(ctx, ch, owner)
		if !ok {
			return
		}
		if fired {
			ch = nil
		}
	}
}

// wait blocks until the node's watch fires (fired), Update pokes the
// keeper, the session that holds the node is gone, or ctx ends (!ok).
func (r *Registration) wait(ctx context.Context, ch <-chan zk.Event, owner int64) (fired, ok bool) {
	for {
		select {
		case <-ctx.Done():
			return false, false
		case <-r.poke.C():
			return false, true
		case ev := <-ch:
			if ev.Type == zk.EventNodeDeleted {
				r.lose("member node deleted")
			}
			// Any other event (data change — ours or someone else's,
			// NotWatching after an expiry or a close): look again.
			return true, true
		case ev, ok := <-r.sess.Events():
			if !ok {
				r.setErr(zkr.ErrClientClosed)
				return false, false
			}
			// Events queue while the keeper is busy (a write or a
			// rebuild waiting for the session), so one may be about a
			// session older than the node's: only the current session
			// id tells whether the session that holds the node is gone.
			// go-zookeeper clears it before it reports StateExpired.
			lost := false
			switch id := r.sess.ID(); {
			case id == owner:
			case ev.State == zk.StateExpired:
				r.lose("session expired")
				lost = true
			case id != 0:
				r.lose("session expired (new session)")
				lost = true
			}
			if f := r.afterEvent.Load(); f != nil {
				(*f)(ev)
			}
			if lost {
				return false, true
			}
		}
	}
}

// checkVersion compares the node's Stat, read while we hold it, with the
// data version we know: a difference means someone else wrote the node,
// whose data is then unknown (writeData re-reads it). It reports whether
// the version matched (or nothing was known).
func (r *Registration) checkVersion(st *zk.Stat) bool {
	if st == nil {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.nodeGen < 0 || st.Czxid != r.czxid || st.Version == r.nodeVer {
		return true
	}
	r.log.Info("membership: member node written by someone else; restoring our data", "version", st.Version)
	r.nodeGen = -1
	return false
}

// setNodeLocked records that the node holds the data of generation gen at
// data version ver, and wakes the Updates it completes.
func (r *Registration) setNodeLocked(gen int64, ver int32) {
	r.nodeGen, r.nodeVer = gen, ver
	if gen > r.acked {
		r.acked = gen
		close(r.ackCh)
		r.ackCh = make(chan struct{})
	}
}

// writeData makes the node we hold hold the latest data, when it may not:
// a getData checks that the node is still our incarnation (else it is
// lost, and the caller re-creates it) and whether it already holds the
// data (an earlier write whose answer was lost), then a setData
// conditioned on the version read writes it. A connection loss or a
// concurrent write (BadVersion) starts over; other errors are returned.
func (r *Registration) writeData(ctx context.Context) error {
	p := r.Path()
	var bo zkx.Backoff
	for {
		r.mu.Lock()
		data, gen := r.data, r.gen
		done := r.nodeGen == gen
		czxid, owner := r.czxid, r.owner
		r.mu.Unlock()
		if done || czxid == 0 {
			return nil
		}
		if owner != r.sess.ID() {
			r.lose("session expired (new session)")
			return nil
		}
		b, st, err := zkx.Get(ctx, r.sess, p)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			r.lose("member node gone")
			return nil
		case err != nil:
			return fmt.Errorf("read %s: %w", p, err)
		case st.Czxid != czxid || st.EphemeralOwner != owner || owner != r.sess.ID():
			r.lose("member node replaced")
			return nil
		case bytes.Equal(b, data):
			r.mu.Lock()
			r.setNodeLocked(gen, st.Version)
			r.mu.Unlock()
			continue // a newer Update may have come meanwhile
		}
		nst, err := zkr.Do(ctx, r.sess, func() (*zk.Stat, error) {
			// A retry after a reconnect may run in a new session, where the
			// same version could belong to another process's node.
			if r.sess.ID() != owner {
				return nil, errSessionChanged
			}
			return r.sess.Conn().Set(p, data, st.Version)
		}, nil)
		switch {
		case errors.Is(err, errSessionChanged):
			r.lose("session expired (new session)")
			return nil
		case err == nil && (nst.Czxid != czxid || nst.EphemeralOwner != owner):
			// Cannot happen unless the session changed between the check
			// and the request; the write landed on a node not ours.
			r.log.Warn("membership: member data written to a node another session re-created", "czxid", nst.Czxid, "owner", nst.EphemeralOwner)
			r.lose("member node replaced")
			return nil
		case err == nil:
			r.mu.Lock()
			r.setNodeLocked(gen, nst.Version)
			r.lastErr = nil
			r.mu.Unlock()
			r.log.Debug("membership: member data written", "version", nst.Version, "bytes", len(data))
			bo.Reset()
		case errors.Is(err, zk.ErrBadVersion):
			// Written by someone else between our read and write: read
			// again.
		case errors.Is(err, zk.ErrNoNode):
			r.lose("member node gone")
			return nil
		case zkx.IsConnLoss(err):
			// The write may have landed: the next read tells.
			if werr := bo.Wait(ctx); werr != nil {
				return fmt.Errorf("%w (last error: %w)", werr, err)
			}
		default:
			return fmt.Errorf("set %s: %w", p, err)
		}
	}
}

func (r *Registration) holds() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.czxid != 0 && r.owner == r.sess.ID()
}

func (r *Registration) lose(why string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.czxid != 0 {
		r.log.Info("membership: member node lost; re-creating", "why", why)
	}
	r.czxid = 0
	r.nodeGen = -1
}

func (r *Registration) setErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastErr = err
}

// ensure creates the node with the latest data, or adopts it when our
// session already holds it; it waits (until ctx ends) for a node held by
// another live session to go. It returns the node's Stat and a watch armed
// on it.
func (r *Registration) ensure(ctx context.Context) (*zk.Stat, <-chan zk.Event, error) {
	p := r.Path()
	var dirBo zkx.Backoff // KeepDir: waiting for the directory to come back
	dirWarned := false
	for {
		sid := r.sess.ID()
		r.mu.Lock()
		data, gen := r.data, r.gen
		r.mu.Unlock()
		// created is the generation this attempt wrote, -1 when the node
		// was not created by it (its data is then unknown).
		created := int64(-1)
		// A create that lands after ctx ended is undone: nobody would keep
		// it otherwise until the session ends.
		_, err := zkr.Do(ctx, r.sess, func() (string, error) {
			return r.sess.Conn().Create(p, data, zk.FlagEphemeral, r.sess.ACL())
		}, func(_ string, err error) {
			if err == nil {
				_ = r.sess.Conn().Delete(p, -1)
			}
		})
		switch {
		case err == nil:
			created = gen
		case errors.Is(err, zk.ErrNodeExists):
			// Ours (a lost answer: data unknown), or someone else's.
		case errors.Is(err, zk.ErrNoNode) && r.keepDir:
			// The directory is gone and the owner reports it: wait.
			if !dirWarned {
				dirWarned = true
				r.log.Warn("membership: the directory is missing; not creating it (KeepDir)")
			}
			if werr := dirBo.Wait(ctx); werr != nil {
				return nil, nil, fmt.Errorf("%w (the directory %s is missing)", werr, r.dir)
			}
			continue
		case errors.Is(err, zk.ErrNoNode):
			// The directory is gone (deleted by someone): create it
			// again, as Join did.
			r.log.Info("membership: the directory is missing; creating it again")
			if err := zkx.EnsurePath(ctx, r.sess, r.dir); err != nil {
				return nil, nil, fmt.Errorf("create %s: %w", r.dir, err)
			}
			continue
		case zkx.IsConnLoss(err):
			var bo zkx.Backoff
			if werr := bo.Wait(ctx); werr != nil {
				return nil, nil, fmt.Errorf("%w (last error: %w)", werr, err)
			}
			continue // the next create answers NodeExists if this one landed
		default:
			return nil, nil, fmt.Errorf("create %s: %w", p, err)
		}
		// Sync: after an expiry the new session may read from a server that
		// has not yet removed the old session's node.
		if err := zkx.Sync(ctx, r.sess, p); err != nil {
			return nil, nil, err
		}
		ok, st, ch, err := zkx.ExistsW(ctx, r.sess, p)
		if err != nil {
			return nil, nil, fmt.Errorf("exists %s: %w", p, err)
		}
		switch {
		case !ok:
			continue // deleted meanwhile: create again
		case st.EphemeralOwner == 0:
			return nil, nil, fmt.Errorf("%w: %w: %s (no session expiry removes it; an operator must delete it)", ErrIDInUse, ErrPersistentNode, p)
		case st.EphemeralOwner == r.sess.ID() && st.EphemeralOwner == sid:
			r.mu.Lock()
			if r.owner != 0 {
				r.rebuilds++
			}
			r.czxid, r.owner, r.lastErr = st.Czxid, st.EphemeralOwner, nil
			if created >= 0 && st.Version == 0 {
				r.setNodeLocked(created, 0)
			} else {
				r.nodeGen = -1 // adopted, or written since: the keeper reads it
			}
			r.mu.Unlock()
			r.log.Debug("membership: member node held", "czxid", st.Czxid, "session", fmt.Sprintf("0x%x", st.EphemeralOwner))
			return st, ch, nil
		case st.EphemeralOwner == r.sess.ID():
			continue // the session changed under the create: look again
		}
		held := fmt.Errorf("%w: %s held by session 0x%x", ErrIDInUse, p, st.EphemeralOwner)
		r.setErr(held)
		r.log.Info("membership: waiting for a member node of our id held by another session", "owner", fmt.Sprintf("0x%x", st.EphemeralOwner))
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("%w: %w", held, ctx.Err())
		}
	}
}

// createLeaf creates the persistent znode p (nil if it exists) but none
// of its parents: a missing parent is an error (zk.ErrNoNode).
func createLeaf(ctx context.Context, sess zkx.Requester, p string) error {
	_, err := zkx.RetryValue(ctx, nil, func() (string, error) {
		return sess.Conn().Create(p, nil, 0, sess.ACL())
	})
	if errors.Is(err, zk.ErrNodeExists) {
		return nil
	}
	return err
}

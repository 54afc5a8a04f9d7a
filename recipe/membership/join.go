package membership

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/go-zookeeper/zk"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/recipe/internal/zkr"
)

// JoinOptions configures Join. The zero value is valid.
type JoinOptions struct {
	// Logger receives the registration's logs (nil: discard).
	Logger *slog.Logger
}

// Registration is this process's member node: dir/id, EPHEMERAL, holding
// the caller's data. A goroutine keeps it there: it re-creates the node in
// the new session after an expiry, and after anyone deletes it, until
// Leave.
type Registration struct {
	sess *zkr.Session
	dir  string
	id   string
	data []byte
	log  *slog.Logger

	cancel context.CancelFunc
	done   chan struct{} // closed when the loop returned

	mu sync.Mutex // guards the fields below
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
func Join(ctx context.Context, c *logroom.Client, dir, id string, data []byte, opts JoinOptions) (*Registration, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrBadName)
	}
	if err := zkr.ValidDir(dir); err != nil {
		return nil, fmt.Errorf("%w: dir %q: %v", ErrBadName, dir, err)
	}
	if err := zkr.ValidName(id); err != nil {
		return nil, fmt.Errorf("%w: id %q: %v", ErrBadName, id, err)
	}
	if len(data) > MaxDataBytes {
		return nil, fmt.Errorf("%w: %d bytes, at most %d", ErrDataTooLarge, len(data), MaxDataBytes)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &Registration{
		sess: zkr.NewSession(c), dir: dir, id: id,
		data: append([]byte(nil), data...),
		log:  log.With("recipe", "membership", "path", dir+"/"+id),
		done: make(chan struct{}),
	}
	if err := zkr.EnsurePath(ctx, r.sess, dir); err != nil {
		r.sess.Close()
		return nil, fmt.Errorf("membership: join %s: %w", r.Path(), err)
	}
	if err := r.ensure(ctx); err != nil {
		r.sess.Close()
		return nil, fmt.Errorf("membership: join %s: %w", r.Path(), err)
	}
	lctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go r.loop(lctx)
	return r, nil
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
// is what makes a crash a leave). Idempotent; after ctx ends the node may
// remain until the session does.
func (r *Registration) Leave(ctx context.Context) error {
	r.mu.Lock()
	if r.left {
		r.mu.Unlock()
		return nil
	}
	r.left = true
	r.mu.Unlock()
	r.cancel()
	<-r.done
	defer r.sess.Close()
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
	r.mu.Lock()
	r.czxid = 0
	r.mu.Unlock()
	if err != nil && !errors.Is(err, zkr.ErrClientClosed) && !errors.Is(err, zk.ErrClosing) {
		// A closed client closed its session, and the node with it.
		return fmt.Errorf("membership: leave %s: %w", p, err)
	}
	return nil
}

// loop keeps the node: it watches it and re-creates it when it is gone
// (deleted, or the session that held it expired).
func (r *Registration) loop(ctx context.Context) {
	defer close(r.done)
	var bo zkr.Backoff
	for ctx.Err() == nil {
		if !r.holds() {
			if err := r.ensure(ctx); err != nil {
				if ctx.Err() != nil {
					return
				}
				r.setErr(err)
				r.log.Warn("membership: cannot re-create member node; retrying", "err", err)
				if bo.Wait(ctx) != nil {
					return
				}
				continue
			}
			bo.Reset()
		}
		r.mu.Lock()
		owner := r.owner
		r.mu.Unlock()
		p := r.Path()
		ok, st, ch, err := zkr.ExistsW(ctx, r.sess, p)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, zkr.ErrClientClosed) {
				return
			}
			if bo.Wait(ctx) != nil {
				return
			}
			continue
		}
		if !ok || st.EphemeralOwner != owner {
			r.lose("member node gone")
			continue
		}
		if !r.wait(ctx, ch, owner) {
			return
		}
	}
}

// wait blocks until the node's watch fires, the session that holds it is
// gone, or ctx ends (false).
func (r *Registration) wait(ctx context.Context, ch <-chan zk.Event, owner int64) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case ev := <-ch:
			if ev.Type == zk.EventNodeDeleted {
				r.lose("member node deleted")
			}
			// Any other event (data change, NotWatching after an expiry or
			// a close): look again.
			return true
		case ev, ok := <-r.sess.Events():
			if !ok {
				r.setErr(zkr.ErrClientClosed)
				return false
			}
			if ev.State == zk.StateExpired {
				r.lose("session expired")
				return true
			}
			if id := r.sess.ID(); id != 0 && id != owner {
				r.lose("session expired (new session)")
				return true
			}
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
}

func (r *Registration) setErr(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lastErr = err
}

// ensure creates the node, or adopts it when our session already holds it;
// it waits (until ctx ends) for a node held by another live session to go.
func (r *Registration) ensure(ctx context.Context) error {
	p := r.Path()
	for {
		sid := r.sess.ID()
		// A create that lands after ctx ended is undone: nobody would keep
		// it otherwise until the session ends.
		_, err := zkr.Do(ctx, r.sess, func() (string, error) {
			return r.sess.Conn().Create(p, r.data, zk.FlagEphemeral, r.sess.ACL())
		}, func(_ string, err error) {
			if err == nil {
				_ = r.sess.Conn().Delete(p, -1)
			}
		})
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			// Ours (just created, or a lost answer), or someone else's.
		case zkr.IsConnLoss(err):
			var bo zkr.Backoff
			if werr := bo.Wait(ctx); werr != nil {
				return fmt.Errorf("%w (last error: %w)", werr, err)
			}
			continue // the next create answers NodeExists if this one landed
		default:
			return fmt.Errorf("create %s: %w", p, err)
		}
		// Sync: after an expiry the new session may read from a server that
		// has not yet removed the old session's node.
		if err := zkr.Sync(ctx, r.sess, p); err != nil {
			return err
		}
		ok, st, ch, err := zkr.ExistsW(ctx, r.sess, p)
		if err != nil {
			return fmt.Errorf("exists %s: %w", p, err)
		}
		switch {
		case !ok:
			continue // deleted meanwhile: create again
		case st.EphemeralOwner == 0:
			return fmt.Errorf("%w: %s is a persistent znode (foreign: no session expiry removes it; an operator must delete it)", ErrIDInUse, p)
		case st.EphemeralOwner == r.sess.ID() && st.EphemeralOwner == sid:
			r.mu.Lock()
			if r.owner != 0 {
				r.rebuilds++
			}
			r.czxid, r.owner, r.lastErr = st.Czxid, st.EphemeralOwner, nil
			r.mu.Unlock()
			r.log.Debug("membership: member node held", "czxid", st.Czxid, "session", fmt.Sprintf("0x%x", st.EphemeralOwner))
			return nil
		case st.EphemeralOwner == r.sess.ID():
			continue // the session changed under the create: look again
		}
		held := fmt.Errorf("%w: %s held by session 0x%x", ErrIDInUse, p, st.EphemeralOwner)
		r.setErr(held)
		r.log.Info("membership: waiting for a member node of our id held by another session", "owner", fmt.Sprintf("0x%x", st.EphemeralOwner))
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("%w: %w", held, ctx.Err())
		}
	}
}

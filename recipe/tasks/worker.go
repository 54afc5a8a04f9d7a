package tasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/recipe/membership"
	"github.com/roomlog/roomlog/zkx"
)

// WorkerOptions configures JoinWorker. The zero value is valid.
type WorkerOptions struct {
	// Data is published in the worker's membership node (an address, a
	// capacity), at most membership.MaxDataBytes. The recipe does not
	// read it.
	Data []byte
	// Logger receives the worker's logs (nil: discard).
	Logger *slog.Logger
}

// Foreign is a znode that breaks the recipe's acceptance rules, and why.
type Foreign = zkx.Foreign

// Worker is one worker: its membership node <dir>/workers/<id> and its
// assignment directory <dir>/assign/<id>, which a goroutine of its own
// watches, delivering each assignment on Assignments.
type Worker struct {
	sess    *zkr.Session
	dir     string
	id      string
	log     *slog.Logger
	reg     *membership.Registration
	foreign *zkx.ForeignSet
	out     chan Assignment

	cancel context.CancelFunc
	done   chan struct{} // closed when the loop returned

	// ownDir: Report writes results into the worker's report directory
	// (<dir>/reports/<id>/r-<id>), set once ZooKeeper refused its
	// Multi on <dir>/results (per-worker ACLs).
	ownDir atomic.Bool

	closeOnce sync.Once
	closeErr  error
}

// JoinWorker registers worker id in the recipe in dir: it creates
// <dir>/assign/<id> (the seed's order: the assignment directory before
// the membership node, so an assigner that sees the member can assign to
// it), joins <dir>/workers through package membership (EPHEMERAL, kept
// across session expiry until Close), and starts delivering its
// assignments on Assignments. A worker id is a valid znode name; two live
// workers must not share one (membership refuses the second: ErrIDInUse
// once ctx ends).
func JoinWorker(ctx context.Context, c *zkx.Client, dir, id string, opts WorkerOptions) (*Worker, error) {
	if c == nil {
		return nil, fmt.Errorf("%w: nil client", ErrBadConfig)
	}
	if err := zkr.ValidDir(dir); err != nil {
		return nil, fmt.Errorf("%w: dir %q: %v", ErrBadConfig, dir, err)
	}
	if err := zkx.ValidName(id); err != nil {
		return nil, fmt.Errorf("%w: worker id %q: %v", ErrBadConfig, id, err)
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("recipe", "tasks", "dir", dir, "worker", id)
	w := &Worker{
		sess: zkr.NewSession(c), dir: dir, id: id, log: log,
		foreign: zkx.NewForeignSet(log, "assignment"),
		out:     make(chan Assignment),
		done:    make(chan struct{}),
	}
	for _, p := range []string{w.assignPath(), dir + "/" + resultsDir} {
		err := zkx.EnsurePath(ctx, w.sess, p)
		if errors.Is(err, zk.ErrNoAuth) {
			// Per-worker ACLs: the assigner creates the directories
			// (package doc, "ACLs"); the loop lists ours once it is there.
			log.Info("no permission to create a directory of the recipe: the assigner creates it", "path", p)
			continue
		}
		if err != nil {
			w.sess.Close()
			return nil, fmt.Errorf("tasks: join worker %s in %s: %w", id, dir, err)
		}
	}
	reg, err := membership.Join(ctx, c, dir+"/"+workersDir, id, opts.Data, membership.JoinOptions{Logger: opts.Logger})
	if err != nil {
		w.sess.Close()
		return nil, fmt.Errorf("tasks: join worker %s in %s: %w", id, dir, err)
	}
	w.reg = reg
	lctx, cancel := context.WithCancel(context.Background())
	w.cancel = cancel
	go w.loop(lctx)
	return w, nil
}

// ID returns the worker's id.
func (w *Worker) ID() string { return w.id }

// Assignments delivers the tasks assigned to this worker, each assignment
// (one attempt of a task) once, also across reconnections; after a
// session expiry every assignment still in the worker's directory is
// delivered again (the worker cannot tell what it did in the lost
// session: a caller still running that attempt may ignore it by ID and
// Attempt). It is closed by Close. Receive promptly: nothing else of the
// worker waits on it.
func (w *Worker) Assignments() <-chan Assignment { return w.out }

// Foreign returns the nodes of the worker's directory that are not
// assignments (ignored, never deleted).
func (w *Worker) Foreign() []Foreign { return w.foreign.List() }

func (w *Worker) assignPath() string { return w.dir + "/" + assignDir + "/" + w.id }

// Close stops delivering (Assignments is closed) and leaves the
// membership: the assigner then reassigns the tasks still assigned to
// this worker. Bounded by the client's session timeout; the membership
// node goes with the session otherwise.
func (w *Worker) Close() error {
	w.closeOnce.Do(func() {
		w.cancel()
		<-w.done
		ctx, cancel := context.WithTimeout(context.Background(), w.sess.Client().SessionTimeout())
		defer cancel()
		if err := w.reg.Leave(ctx); err != nil {
			w.closeErr = fmt.Errorf("tasks: close worker %s: %w", w.id, err)
		}
		w.sess.Close()
	})
	return w.closeErr
}

// seen is one child of the worker's directory as last read.
type seen struct {
	czxid int64
}

// loop lists the worker's directory whenever its child watch fires or the
// session changes, and delivers the new assignments in node creation
// order. It owns sid, known and pending.
func (w *Worker) loop(ctx context.Context) {
	defer close(w.done)
	defer close(w.out)
	var (
		sid     int64
		known   = map[string]seen{} // child name -> node read in session sid
		pending []Assignment        // read, not yet received
		ch      <-chan zk.Event     // the armed child watch, nil once fired
		list    = true
		bo      zkx.Backoff
		retry   <-chan time.Time
	)
	for {
		if list {
			list = false
			if id := w.sess.ID(); id != sid {
				// A new session: deliver again whatever is still assigned.
				if sid != 0 {
					w.log.Info("session changed: assignments will be delivered again", "old", fmt.Sprintf("0x%x", sid), "new", fmt.Sprintf("0x%x", id))
				}
				sid, known, pending, ch = id, map[string]seen{}, nil, nil
				if err := zkx.Sync(ctx, w.sess, w.assignPath()); err != nil && ctx.Err() != nil {
					return
				}
			}
			var err error
			pending, ch, err = w.list(ctx, known, pending, ch)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				w.log.Warn("listing assignments failed; retrying", "err", err)
				retry = time.After(bo.Next())
			default:
				bo.Reset()
			}
		}
		var send chan<- Assignment
		var next Assignment
		if len(pending) > 0 {
			send, next = w.out, pending[0]
		}
		select {
		case <-ctx.Done():
			return
		case send <- next:
			pending = pending[1:]
		case <-ch:
			ch, list = nil, true
		case <-retry:
			retry, list = nil, true
		case _, ok := <-w.sess.Events():
			if !ok {
				return
			}
			if w.sess.ID() != sid {
				list = true
			}
		}
	}
}

// list reads the worker's directory (arming the child watch unless ch is
// still armed), reads the children not yet known, and returns the pending
// assignments: those still listed, then the new ones by creation order.
func (w *Worker) list(ctx context.Context, known map[string]seen, pending []Assignment, ch <-chan zk.Event) ([]Assignment, <-chan zk.Event, error) {
	var names []string
	var err error
	for tries := 0; ; tries++ {
		if ch == nil {
			names, ch, err = zkx.ChildrenW(ctx, w.sess, w.assignPath())
		} else {
			names, err = zkx.Children(ctx, w.sess, w.assignPath())
		}
		if !errors.Is(err, zk.ErrNoNode) || tries == 1 {
			break
		}
		// Deleted (by an operator, or by the assigner while this
		// worker was not a member): create it again, then list it
		// again, arming a watch on the new directory (the assigner
		// also creates it before it assigns).
		ch = nil
		if err := zkx.EnsurePath(ctx, w.sess, w.assignPath()); err != nil {
			return pending, nil, err
		}
	}
	if err != nil {
		return pending, nil, err
	}
	listed := make(map[string]bool, len(names))
	for _, n := range names {
		listed[n] = true
	}
	for n := range known {
		if !listed[n] {
			delete(known, n)
			w.foreign.Drop(w.assignPath() + "/" + n)
		}
	}
	kept := pending[:0]
	for _, a := range pending {
		if listed[nodeName(a.ID)] {
			kept = append(kept, a)
		}
	}
	pending = kept
	var fresh []Assignment
	for _, n := range names {
		if _, ok := known[n]; ok {
			continue
		}
		p := w.assignPath() + "/" + n
		b, st, err := zkx.Get(ctx, w.sess, p)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			// What was read so far is delivered (and known); the node
			// that failed is read again by the next listing.
			sort.Slice(fresh, func(i, j int) bool { return fresh[i].czxid < fresh[j].czxid })
			return append(pending, fresh...), ch, err
		}
		known[n] = seen{czxid: st.Czxid}
		r, why := decodeAssign(w.id, n, b, st)
		if why != "" {
			w.foreign.Report(p, why)
			continue
		}
		fresh = append(fresh, Assignment{
			ID: r.ID, Data: r.Data, Worker: r.Worker, Token: r.Token, Attempt: r.Attempt,
			Submitted: msTime(r.Submitted), czxid: st.Czxid, version: st.Version,
		})
	}
	sort.Slice(fresh, func(i, j int) bool { return fresh[i].czxid < fresh[j].czxid })
	return append(pending, fresh...), ch, nil
}

// Report records the outcome of assignment a (received from this
// worker's Assignments): in one Multi it deletes the assignment node, at
// the version it was delivered with, and creates <dir>/results/t-<id>.
// So a task reassigned away from this worker (its session was lost) can
// no longer be reported by it: ErrReassigned, nothing written. Under
// per-worker ACLs (no CREATE in <dir>/results, no DELETE of
// assignments) the Multi instead checks the assignment node (at the
// version delivered) and creates <dir>/reports/<worker>/r-<id>; the
// assigner moves it to <dir>/results, deleting the assignment (package
// doc, "ACLs"). On a
// connection loss the outcome is resolved by reading back (the result
// node ours: nil; the assignment still there: sent again). Reporting an
// attempt whose result is recorded already is nil and writes nothing. ok
// and result are the caller's (result at most MaxResultBytes).
func (w *Worker) Report(ctx context.Context, a Assignment, ok bool, result []byte) error {
	if a.Worker != w.id || a.czxid == 0 {
		return fmt.Errorf("%w: report of task %q: not an assignment delivered to worker %s", ErrBadConfig, a.ID, w.id)
	}
	if len(result) > MaxResultBytes {
		return fmt.Errorf("%w: report of task %s: result of %d bytes, at most %d", ErrBadConfig, a.ID, len(result), MaxResultBytes)
	}
	if err := w.report(ctx, a, ok, result); err != nil {
		if errors.Is(err, zkr.ErrSessionClosed) {
			err = fmt.Errorf("%w: %w", ErrClosed, err)
		}
		return fmt.Errorf("tasks: worker %s: report task %s attempt %d: %w", w.id, a.ID, a.Attempt, err)
	}
	return nil
}

func (w *Worker) report(ctx context.Context, a Assignment, ok bool, result []byte) error {
	name := nodeName(a.ID)
	ap := w.assignPath() + "/" + name
	rp := w.dir + "/" + resultsDir + "/" + name
	own := w.dir + "/" + reportsDir + "/" + w.id + "/" + reportName(a.ID)
	rec := zkr.Encode(resultRecord{
		V: formatVersion, ID: a.ID, Worker: w.id, Attempt: a.Attempt, OK: ok, Result: result,
		At: time.Now().UnixMilli(), Sum: dataSum(a.Data),
	})
	ours := func() (bool, error) {
		// In our directory still, or moved by the assigner.
		for _, p := range []string{own, rp} {
			b, st, err := zkx.Get(ctx, w.sess, p)
			if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrNoAuth) {
				continue
			}
			if err != nil {
				return false, err
			}
			r, why := decodeResult(name, b, st)
			if why == "" && r.Worker == w.id && r.Attempt == a.Attempt {
				return true, nil
			}
		}
		return false, nil
	}
	var bo zkx.Backoff
	uncertain := false
	for {
		if uncertain {
			// Our Multi's fate is unknown: see what landed (Sync: the
			// session may now read from another server).
			if err := zkx.Sync(ctx, w.sess, ap); err != nil {
				return err
			}
		}
		okNode, st, err := zkx.Exists(ctx, w.sess, ap)
		if err != nil {
			return err
		}
		if !okNode || st.Czxid != a.czxid {
			if mine, err := ours(); err != nil || mine {
				return err // our earlier Multi landed
			}
			return fmt.Errorf("%w: %s is gone or another attempt's", ErrReassigned, ap)
		}
		target := rp
		var first any = &zk.DeleteRequest{Path: ap, Version: a.version}
		if w.ownDir.Load() {
			// The assigner deletes the assignment when it moves the
			// report; ours must name the attempt still there.
			target = own
			first = &zk.CheckVersionRequest{Path: ap, Version: a.version}
		}
		res, err := zkr.Do(ctx, w.sess, func() ([]zk.MultiResponse, error) {
			return w.sess.Conn().Multi(first,
				&zk.CreateRequest{Path: target, Data: rec, Acl: w.sess.ACL()},
			)
		}, nil)
		switch {
		case err == nil:
			return nil
		case zkx.IsConnLoss(err):
			uncertain = true
			if werr := bo.Wait(ctx); werr != nil {
				return fmt.Errorf("%w (last error: %w)", werr, err)
			}
			continue
		case len(res) != 2:
			return err
		case target == rp && (errors.Is(res[0].Error, zk.ErrNoAuth) || errors.Is(res[1].Error, zk.ErrNoAuth)):
			// Per-worker ACLs: results go through our report
			// directory, and the assigner moves them (package doc,
			// "ACLs").
			w.log.Info("no permission to report in results: reporting in the worker's report directory from now on", "path", own)
			w.ownDir.Store(true)
			continue
		case errors.Is(res[0].Error, zk.ErrNoNode):
			continue // gone since the check: the check says why
		case errors.Is(res[0].Error, zk.ErrBadVersion):
			return fmt.Errorf("%w: %s was written by someone else", ErrReassigned, ap)
		case errors.Is(res[1].Error, zk.ErrNodeExists):
			if mine, rerr := ours(); rerr != nil || mine {
				return rerr
			}
			return fmt.Errorf("%s exists already (another result, or a foreign node): %w", target, err)
		case errors.Is(res[1].Error, zk.ErrNoNode) && target == own:
			// Our report directory is not there yet: the assigner
			// creates it for every live worker.
			if werr := bo.Wait(ctx); werr != nil {
				return fmt.Errorf("%w (waiting for the assigner to create %s)", werr, w.dir+"/"+reportsDir+"/"+w.id)
			}
			continue
		case errors.Is(res[1].Error, zk.ErrNoNode):
			if err := zkx.EnsurePath(ctx, w.sess, w.dir+"/"+resultsDir); err != nil {
				return err
			}
			continue
		default:
			return err
		}
	}
}

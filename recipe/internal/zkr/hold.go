package zkr

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/zkx"
)

// Reasons a Hold ends (wrapped by the recipes' own sentinels).
var (
	// ErrHoldReleased: the owner released it (Unlock, StepDown, Resign).
	ErrHoldReleased = errors.New("released")
	// ErrHoldNodeGone: the node is gone (deleted by someone, or its
	// session expired while the client was disconnected).
	ErrHoldNodeGone = errors.New("node deleted")
	// ErrHoldSessionLost: the session that holds the node expired.
	ErrHoldSessionLost = errors.New("session expired")
	// ErrHoldSuspended: disconnected for longer than the grace: the owner
	// can no longer assume the node is still there.
	ErrHoldSuspended = errors.New("disconnected longer than the grace period")
	// ErrHoldNodeChanged: the node's Stat is no longer the one the hold
	// began with (another data version, creation time or owner: written
	// by someone else), so every guarded write would fail: the hold ends
	// rather than stay Active and stall.
	ErrHoldNodeChanged = errors.New("node changed by someone else")
)

// CheckGrace checks a hold's SuspendGrace against the session timeout c
// asked for: it must stay below a third of it. go-zookeeper notices a
// silent connection only after two thirds of the timeout (its read
// timeout), and the servers expire the session a whole timeout after they
// last heard from it; a grace below the remaining third ends the hold
// before another holder can begin. Nil when c is nil or grace <= 0.
func CheckGrace(c *zkx.Client, grace time.Duration) error {
	if c == nil || grace <= 0 {
		return nil
	}
	if st := c.SessionTimeout(); grace*3 >= st {
		return fmt.Errorf("SuspendGrace %v is not below a third of the client's session timeout %v (keep it under %v)", grace, st, st/3)
	}
	return nil
}

// Hold is a tenure tied to one ephemeral node of one session: a leadership
// term or a lock lease. It ends (Done closes, Err says why) when the owner
// releases it, the node is deleted, the node's Stat changes (data
// version, ctime or ephemeral owner: ErrHoldNodeChanged), the session
// expires, or the client stays disconnected for longer than the grace. A goroutine of its own
// watches the node and the session; End stops it and waits for it.
type Hold struct {
	sess  *Session // its own subscription
	path  string
	czxid int64
	sid   int64
	grace time.Duration
	log   *slog.Logger
	// ctime is the node's creation time, from the first Stat the watch
	// read (0 until then). Owned by the watch.
	ctime int64

	done   chan struct{}
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu  sync.Mutex // guards err
	err error      // non-nil once ended
}

// StartHold starts a hold on path (created by session sid with czxid).
func StartHold(s *Session, path string, czxid, sid int64, grace time.Duration, log *slog.Logger) *Hold {
	ctx, cancel := context.WithCancel(context.Background())
	h := &Hold{
		sess: NewSession(s.Client()), path: path, czxid: czxid, sid: sid, grace: grace, log: log,
		done: make(chan struct{}), cancel: cancel,
	}
	h.wg.Add(1)
	go h.watch(ctx)
	return h
}

// Path returns the held node's path.
func (h *Hold) Path() string { return h.path }

// Token returns the node's czxid: it grows with every hold, across the
// ensemble (a later create has a larger zxid).
func (h *Hold) Token() int64 { return h.czxid }

// Session returns the session that holds the node.
func (h *Hold) Session() int64 { return h.sid }

// Done is closed when the hold ended.
func (h *Hold) Done() <-chan struct{} { return h.done }

// Err returns nil while the hold lasts, then why it ended.
func (h *Hold) Err() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.err
}

// Active reports whether the hold has not ended and its session is
// connected right now: the only time its owner may act on it.
func (h *Hold) Active() bool {
	return h.Err() == nil && h.sess.Connected() && h.sess.ID() == h.sid
}

// End ends the hold with err (the first call wins), stops its goroutine and
// waits for it. Safe to call from any goroutine but the hold's own.
func (h *Hold) End(err error) {
	h.end(err)
	h.cancel()
	h.wg.Wait()
	h.sess.Close()
}

func (h *Hold) end(err error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.err != nil {
		return
	}
	h.err = err
	close(h.done)
	h.log.Info("hold ended", "path", h.path, "token", h.czxid, "why", err)
}

// ErrHoldEnded: Hold.Multi refused locally, nothing was sent: the hold had
// ended (it wraps why).
var ErrHoldEnded = errors.New("hold ended")

// Multi runs ops in one Multi guarded by a check that the held node still
// exists at version 0 (recipe nodes are never written after creation).
// Once the hold ended it sends nothing (ErrHoldEnded wrapping why, also
// for a write that was waiting for the session when it ended); a
// check that fails on the server is ErrGuardFailed. Either way nothing
// was applied.
func (h *Hold) Multi(ctx context.Context, ops ...any) ([]zk.MultiResponse, error) {
	if err := h.Err(); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrHoldEnded, err)
	}
	res, err := GuardedMulti(ctx, h.sess, h.path, 0, ops...)
	if errors.Is(err, ErrSessionClosed) {
		// The hold ended while the write waited for the session: nothing
		// was sent.
		return nil, fmt.Errorf("%w: %w", ErrHoldEnded, h.Err())
	}
	return res, err
}

// changed says how st differs from the Stat the hold began with ("" when
// it does not): recipe nodes are never written after creation (version 0),
// keep their creation time and stay owned by the holding session. The
// first Stat read records the creation time. Called by the watch's arm
// goroutines, one at a time.
func (h *Hold) changed(st *zk.Stat) string {
	switch {
	case st.Version != 0:
		return fmt.Sprintf("data version %d, not 0", st.Version)
	case st.EphemeralOwner != h.sid:
		return fmt.Sprintf("owned by session 0x%x, not 0x%x", st.EphemeralOwner, h.sid)
	case h.ctime != 0 && st.Ctime != h.ctime:
		return fmt.Sprintf("ctime %d, not %d", st.Ctime, h.ctime)
	}
	h.ctime = st.Ctime
	return ""
}

// watch ends the hold when the node goes or the session is lost, or after
// the grace when disconnected.
func (h *Hold) watch(ctx context.Context) {
	defer h.wg.Done()
	// Arm the node watch on a goroutine of its own: a request made while
	// disconnected waits for the session, and the grace timer must not.
	armed := make(chan (<-chan zk.Event), 1)
	var armWG sync.WaitGroup
	defer armWG.Wait()
	defer h.cancel() // before armWG.Wait: ends a pending ExistsW
	arm := func() {
		armWG.Add(1)
		go func() {
			defer armWG.Done()
			ok, st, ch, err := zkx.ExistsW(ctx, h.sess, h.path)
			switch {
			case err != nil:
				return // ctx ended or the client closed: the events say
			case !ok || st.Czxid != h.czxid:
				h.end(ErrHoldNodeGone)
			default:
				if why := h.changed(st); why != "" {
					h.end(fmt.Errorf("%w: %s", ErrHoldNodeChanged, why))
					return
				}
				armed <- ch
			}
		}()
	}
	arm()
	var nodeCh <-chan zk.Event
	var graceC <-chan time.Time
	var graceT *time.Timer
	defer func() {
		if graceT != nil {
			graceT.Stop()
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.done:
			return
		case ch := <-armed:
			nodeCh = ch
		case ev := <-nodeCh:
			nodeCh = nil
			switch {
			case ev.Type == zk.EventNodeDeleted:
				h.end(ErrHoldNodeGone)
				return
			case ev.Type == zk.EventNotWatching && errors.Is(ev.Err, zk.ErrSessionExpired):
				h.end(ErrHoldSessionLost)
				return
			case ev.Type == zk.EventNodeDataChanged:
				h.end(fmt.Errorf("%w: its data was written", ErrHoldNodeChanged))
				return
			default:
				arm()
			}
		case <-graceC:
			h.end(ErrHoldSuspended)
			return
		case ev, ok := <-h.sess.Events():
			if !ok {
				h.end(ErrClientClosed)
				return
			}
			id := h.sess.ID()
			if ev.State == zk.StateExpired || (id != 0 && id != h.sid) {
				h.end(ErrHoldSessionLost)
				return
			}
			if ev.Type != zk.EventSession {
				continue
			}
			// Follow the events in order (not the current state): a
			// disconnection is seen even if the client is back already.
			switch {
			case ev.State == zk.StateHasSession:
				if graceT != nil {
					graceT.Stop()
					graceT, graceC = nil, nil
				}
			case ev.State == zk.StateDisconnected && graceT == nil:
				if h.grace <= 0 {
					h.end(ErrHoldSuspended)
					return
				}
				graceT = time.NewTimer(h.grace)
				graceC = graceT.C
			}
		}
	}
}

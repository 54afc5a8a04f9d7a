package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
)

// The pair demo's workload: several writers, each owning a subtree /w<k>,
// run mkdir/create/addblock/rename/delete through the Go client against
// whichever master answers, and keep a model of what their acknowledged
// operations must have produced. Verification later compares each model
// with every master's namespace.
//
// Outcomes of one operation:
//
//   - acked: the master answered success. It is in the ledger and must
//     survive everything.
//   - retried: the master said nothing was applied (503 no_primary,
//     overloaded, unavailable) or the connection could not be made at all
//     (dial error: nothing was sent, e.g. the killed primary's port); the
//     writer tries again, on the next master.
//   - unknown: the request may have been applied (connection reset or EOF
//     after sending, 503 outcome_unknown, 504). The writer never retries
//     blindly: it makes a later write acknowledged (mkdir -p of its root,
//     "sync"), reads the affected path with min_index = that write's index
//     — so the read sees every entry committed before it — and learns
//     whether the operation landed. The model follows what it learned.

// Operation kinds.
const (
	opSync     = "sync" // mkdir -p of the writer's root: an acknowledged write used as a read barrier
	opMkdir    = "mkdir"
	opCreate   = "create"
	opAddBlock = "addblock"
	opRename   = "rename"
	opDelete   = "delete"
	opRmdir    = "delete -r"
)

var opKinds = []string{opSync, opMkdir, opCreate, opAddBlock, opRename, opDelete, opRmdir}

const (
	opTimeout    = 45 * time.Second      // one operation, retries included
	retryBackoff = 25 * time.Millisecond // between attempts
)

// endpoints is the set of masters the writers talk to. Each attempt starts
// at the preferred master (the primary, as last seen) and moves on to the
// next on a retryable failure.
type endpoints struct {
	hc *http.Client

	mu        sync.Mutex // guards addrs, preferred
	addrs     []string
	preferred int
}

func newEndpoints() *endpoints {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DialContext = (&net.Dialer{Timeout: time.Second}).DialContext
	tr.MaxIdleConnsPerHost = 64
	return &endpoints{hc: &http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// set replaces the master list; prefer names the primary, if known.
func (e *endpoints) set(addrs []string, prefer string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.addrs = append([]string(nil), addrs...)
	e.preferred = 0
	for i, a := range e.addrs {
		if a == prefer {
			e.preferred = i
		}
	}
}

// prefer makes addr the first master tried, if it is in the list.
func (e *endpoints) prefer(addr string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i, a := range e.addrs {
		if a == addr {
			e.preferred = i
		}
	}
}

// client returns the master for attempt i of an operation.
func (e *endpoints) client(i int) (*client.Client, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.addrs) == 0 {
		return nil, errors.New("no masters")
	}
	return client.New(e.addrs[(e.preferred+i)%len(e.addrs)], e.hc)
}

func (e *endpoints) close() { e.hc.CloseIdleConnections() }

// ledger is what every writer reports to: counters for the progress line and
// the summary, and the takeover measurement.
type ledger struct {
	acked, unknown, landed atomic.Int64  // landed: unknown operations found applied
	retries                atomic.Int64  // attempts that failed retryably
	maxIndex               atomic.Uint64 // highest acknowledged index
	perKind                sync.Map      // kind -> *atomic.Int64 (acked)

	// Takeover: the first acknowledgement of an attempt that started after
	// killAt (only the new primary can have served it).
	killAt       atomic.Int64 // unix ns; 0 = no kill yet
	takeoverOnce sync.Once
	takeover     chan struct{} // closed at the first such acknowledgement
	takeoverAt   time.Time     // written once, before takeover is closed
	takeoverIdx  uint64        // its index
}

func newLedger() *ledger {
	l := &ledger{takeover: make(chan struct{})}
	for _, k := range opKinds {
		l.perKind.Store(k, new(atomic.Int64))
	}
	return l
}

func (l *ledger) ack(kind string, idx uint64, attemptStart, at time.Time) {
	l.acked.Add(1)
	if v, ok := l.perKind.Load(kind); ok {
		v.(*atomic.Int64).Add(1)
	}
	for {
		cur := l.maxIndex.Load()
		if idx <= cur || l.maxIndex.CompareAndSwap(cur, idx) {
			break
		}
	}
	if k := l.killAt.Load(); k != 0 && attemptStart.UnixNano() > k {
		l.takeoverOnce.Do(func() {
			l.takeoverAt, l.takeoverIdx = at, idx
			close(l.takeover)
		})
	}
}

func (l *ledger) kindCount(kind string) int64 {
	v, _ := l.perKind.Load(kind)
	return v.(*atomic.Int64).Load()
}

// opRec is one operation a writer issued.
type opRec struct {
	id       int
	kind     string
	path     string
	dst      string // rename
	index    uint64 // acked: its entry's index
	acked    bool   // the master acknowledged it
	unknown  bool   // the outcome was unknown when it returned
	landed   bool   // unknown and then found applied
	blockID  uint64 // addblock
	attempts int
}

// Model of a writer's subtree.
type (
	fileState struct {
		path   string
		repl   int
		blocks []blockRec
		create int // op that created it
		move   int // last rename that moved it here; -1: none
	}
	blockRec struct {
		id   uint64
		size int64
		op   int
	}
	dirState struct {
		path string
		op   int // mkdir (or the root's first sync)
	}
	goneRec struct {
		path string
		op   int // the rename or delete that removed it
	}
)

// writer is one workload goroutine and the model of its subtree. All its
// fields are owned by its goroutine until run returns.
type writer struct {
	k    int
	root string
	rng  *rand.Rand
	eps  *endpoints
	led  *ledger
	stop <-chan struct{} // closed: finish the current operation and return

	seq   int
	ops   []*opRec    // by id
	dirs  []*dirState // live directories; dirs[0] is the root
	files []*fileState
	gone  []goneRec

	errMu sync.Mutex // guards err (read by the pair while the writer runs)
	err   error      // why the writer stopped early (a bug or an unexpected answer)
}

func (w *writer) fail(err error) {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	w.err = fmt.Errorf("writer %s: %w", w.root, err)
}

// failure is why the writer stopped early, or nil.
func (w *writer) failure() error {
	w.errMu.Lock()
	defer w.errMu.Unlock()
	return w.err
}

func newWriter(k int, eps *endpoints, led *ledger, stop <-chan struct{}) *writer {
	return &writer{k: k, root: fmt.Sprintf("/w%d", k), rng: rand.New(rand.NewPCG(uint64(k), 0x5eed)),
		eps: eps, led: led, stop: stop}
}

func (w *writer) stopped() bool {
	select {
	case <-w.stop:
		return true
	default:
		return false
	}
}

func (w *writer) next(prefix string) string {
	w.seq++
	return fmt.Sprintf("%s%d", prefix, w.seq)
}

// run issues operations until stop is closed or ctx ends.
func (w *writer) run(ctx context.Context) {
	if _, err := w.sync(ctx); err != nil {
		if ctx.Err() == nil {
			w.fail(err)
		}
		return
	}
	w.dirs = []*dirState{{path: w.root, op: len(w.ops) - 1}}
	for !w.stopped() && ctx.Err() == nil {
		if err := w.step(ctx); err != nil {
			if ctx.Err() == nil {
				w.fail(err)
			}
			return
		}
	}
}

// step picks and runs one operation.
func (w *writer) step(ctx context.Context) error {
	r := w.rng.Float64()
	switch {
	case r < 0.08 || len(w.dirs) < 2:
		return w.mkdir(ctx)
	case r < 0.35 || len(w.files) == 0:
		return w.create(ctx)
	case r < 0.75:
		return w.addBlock(ctx)
	case r < 0.88:
		return w.rename(ctx)
	case r < 0.97 || len(w.dirs) < 4:
		return w.deleteFile(ctx)
	default:
		return w.rmdir(ctx)
	}
}

func (w *writer) mkdir(ctx context.Context) error {
	p := path.Join(w.root, w.next("d"))
	op, err := w.mutate(ctx, opMkdir, p, "", func(c *client.Client, ctx context.Context) (api.MutationResponse, error) {
		return c.Mkdir(ctx, p, false)
	})
	if err != nil {
		return err
	}
	if op.unknown {
		info, found, err := w.resolve(ctx, p)
		if err != nil {
			return err
		}
		op.landed = found && info.Type == "dir"
	}
	if op.acked || op.landed {
		w.dirs = append(w.dirs, &dirState{path: p, op: op.id})
	}
	return nil
}

func (w *writer) create(ctx context.Context) error {
	dir := w.dirs[w.rng.IntN(len(w.dirs))]
	p := path.Join(dir.path, w.next("f"))
	repl := 1 + w.rng.IntN(3)
	op, err := w.mutate(ctx, opCreate, p, "", func(c *client.Client, ctx context.Context) (api.MutationResponse, error) {
		return c.Create(ctx, p, repl)
	})
	if err != nil {
		return err
	}
	if op.unknown {
		_, found, err := w.resolve(ctx, p)
		if err != nil {
			return err
		}
		op.landed = found
	}
	if op.acked || op.landed {
		w.files = append(w.files, &fileState{path: p, repl: repl, create: op.id, move: -1})
	}
	return nil
}

func (w *writer) addBlock(ctx context.Context) error {
	f := w.files[w.rng.IntN(len(w.files))]
	size := 1 + w.rng.Int64N(128<<20)
	op, err := w.mutate(ctx, opAddBlock, f.path, "", func(c *client.Client, ctx context.Context) (api.MutationResponse, error) {
		return c.AddBlock(ctx, f.path, size)
	})
	if err != nil {
		return err
	}
	if op.unknown {
		info, found, err := w.resolve(ctx, f.path)
		if err != nil {
			return err
		}
		switch {
		case !found || len(info.BlockList) < len(f.blocks) || len(info.BlockList) > len(f.blocks)+1:
			return fmt.Errorf("resolving addblock %s: the file has %d blocks (found %v), the model %d", f.path, len(info.BlockList), found, len(f.blocks))
		case len(info.BlockList) == len(f.blocks)+1:
			op.landed = true
			op.blockID = info.BlockList[len(f.blocks)].ID
		}
	}
	if op.acked || op.landed {
		f.blocks = append(f.blocks, blockRec{id: op.blockID, size: size, op: op.id})
	}
	return nil
}

func (w *writer) rename(ctx context.Context) error {
	i := w.rng.IntN(len(w.files))
	f := w.files[i]
	dir := w.dirs[w.rng.IntN(len(w.dirs))]
	src, dst := f.path, path.Join(dir.path, w.next("r"))
	op, err := w.mutate(ctx, opRename, src, dst, func(c *client.Client, ctx context.Context) (api.MutationResponse, error) {
		return c.Rename(ctx, src, dst)
	})
	if err != nil {
		return err
	}
	if op.unknown {
		_, found, err := w.resolve(ctx, dst)
		if err != nil {
			return err
		}
		op.landed = found
	}
	if op.acked || op.landed {
		f.path, f.move = dst, op.id
		w.gone = append(w.gone, goneRec{path: src, op: op.id})
	}
	return nil
}

func (w *writer) deleteFile(ctx context.Context) error {
	i := w.rng.IntN(len(w.files))
	p := w.files[i].path
	op, err := w.mutate(ctx, opDelete, p, "", func(c *client.Client, ctx context.Context) (api.MutationResponse, error) {
		return c.Delete(ctx, p, false)
	})
	if err != nil {
		return err
	}
	if op.unknown {
		_, found, err := w.resolve(ctx, p)
		if err != nil {
			return err
		}
		op.landed = !found
	}
	if op.acked || op.landed {
		w.files = append(w.files[:i], w.files[i+1:]...)
		w.gone = append(w.gone, goneRec{path: p, op: op.id})
	}
	return nil
}

// rmdir deletes a directory other than the root and the newest one, with
// its files.
func (w *writer) rmdir(ctx context.Context) error {
	i := 1 + w.rng.IntN(len(w.dirs)-2)
	p := w.dirs[i].path
	op, err := w.mutate(ctx, opRmdir, p, "", func(c *client.Client, ctx context.Context) (api.MutationResponse, error) {
		return c.Delete(ctx, p, true)
	})
	if err != nil {
		return err
	}
	if op.unknown {
		_, found, err := w.resolve(ctx, p)
		if err != nil {
			return err
		}
		op.landed = !found
	}
	if op.acked || op.landed {
		w.dirs = append(w.dirs[:i], w.dirs[i+1:]...)
		kept := w.files[:0]
		for _, f := range w.files {
			if !strings.HasPrefix(f.path, p+"/") {
				kept = append(kept, f)
			}
		}
		clear(w.files[len(kept):])
		w.files = kept
		w.gone = append(w.gone, goneRec{path: p, op: op.id})
	}
	return nil
}

// sync makes an acknowledged write (mkdir -p of the root) and returns its
// index: a read with that min_index sees everything committed before it.
func (w *writer) sync(ctx context.Context) (uint64, error) {
	for {
		op, err := w.mutate(ctx, opSync, w.root, "", func(c *client.Client, ctx context.Context) (api.MutationResponse, error) {
			return c.Mkdir(ctx, w.root, true)
		})
		if err != nil {
			return 0, err
		}
		if op.acked {
			return op.index, nil
		}
		// Unknown: an mkdir -p of an existing directory changes nothing, so
		// simply try again (not counted as an unknown outcome).
	}
}

// resolve learns the state of p after an operation with an unknown outcome:
// it syncs, then stats p at or after the sync's index.
func (w *writer) resolve(ctx context.Context, p string) (namespace.Info, bool, error) {
	idx, err := w.sync(ctx)
	if err != nil {
		return namespace.Info{}, false, err
	}
	var info namespace.Info
	found := false
	err = w.read(ctx, func(c *client.Client, ctx context.Context) error {
		st, err := c.Stat(ctx, p, idx)
		if errors.Is(err, namespace.ErrNotFound) {
			found = false
			return nil
		}
		if err != nil {
			return err
		}
		info, found = st.Info, true
		return nil
	})
	return info, found, err
}

// read runs fn against the masters until it succeeds or fails for a reason
// other than an unreachable or unready master.
func (w *writer) read(ctx context.Context, fn func(*client.Client, context.Context) error) error {
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		c, err := w.eps.client(attempt)
		if err != nil {
			return err
		}
		last := fn(c, ctx)
		if last == nil {
			return nil
		}
		var ce *client.Error
		if errors.As(last, &ce) && ce.Status < 500 {
			return last // a real answer (4xx) that fn did not expect
		}
		w.led.retries.Add(1)
		if err := sleepCtx(ctx, retryBackoff); err != nil {
			return fmt.Errorf("read: %w (last error: %v)", err, last)
		}
	}
}

// mutate runs one mutation until it is acknowledged or its outcome is
// unknown; it returns the recorded operation. An error means the writer must
// stop: the context ended, or a master rejected an operation the model
// says is valid (a bug, or the model diverged).
func (w *writer) mutate(ctx context.Context, kind, p, dst string, fn func(*client.Client, context.Context) (api.MutationResponse, error)) (*opRec, error) {
	op := &opRec{id: len(w.ops), kind: kind, path: p, dst: dst}
	w.ops = append(w.ops, op)
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	var last error
	for attempt := 0; ; attempt++ {
		if err := octx.Err(); err != nil {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%s %s: no master acknowledged it within %v (last error: %v)", kind, p, opTimeout, last)
		}
		c, err := w.eps.client(attempt)
		if err != nil {
			return nil, err
		}
		op.attempts++
		start := time.Now()
		resp, err := fn(c, octx)
		switch classify(err) {
		case outcomeAcked:
			op.acked, op.index, op.blockID = true, resp.Index, resp.BlockID
			w.led.ack(kind, resp.Index, start, time.Now())
			return op, nil
		case outcomeUnknown:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			op.unknown = true
			if kind != opSync { // syncs are idempotent and simply re-sent (see sync)
				w.led.unknown.Add(1)
			}
			return op, nil
		case outcomeRetry:
			last = err
			w.led.retries.Add(1)
			if err := sleepCtx(octx, retryBackoff); err != nil {
				continue // reported at the top of the loop
			}
		default:
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			return nil, fmt.Errorf("%s %s %s: %w", kind, p, dst, err)
		}
	}
}

type outcome int

const (
	outcomeAcked outcome = iota
	outcomeRetry
	outcomeUnknown
	outcomeFailed
)

// classify sorts a mutation's error into what the writer does next.
func classify(err error) outcome {
	if err == nil {
		return outcomeAcked
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		switch ce.Code {
		case api.CodeNoPrimary, api.CodeOverloaded, api.CodeUnavailable:
			return outcomeRetry // nothing was applied
		case api.CodeOutcomeUnknown, api.CodeTimeout:
			return outcomeUnknown
		}
		return outcomeFailed // a namespace rejection, a bad request or an internal error
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return outcomeRetry // the connection was never made: nothing was sent
	}
	// Reset or EOF after sending, or our deadline while the request was in
	// flight: it may have been applied.
	return outcomeUnknown
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

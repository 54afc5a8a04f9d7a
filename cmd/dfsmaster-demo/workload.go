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
)

// The pair demo's workload: several writers, each owning a subtree /w<k>,
// run mkdir/create/addblock/rename/delete through the Go client against
// whichever master answers, and keep a model of what their acknowledged
// operations must have produced. Verification later compares each model
// with every master's namespace.
//
// Every operation has one Idempotency-Key (client.NewIdempotencyKey), sent
// with every attempt of it, on any master. Outcomes of one attempt:
//
//   - acked: the master answered success — the operation's own, or the
//     original's answer replayed (Idempotent-Replayed) because an earlier
//     attempt had been applied. It is in the ledger and must survive
//     everything.
//   - retried: the master said nothing was applied (503 no_primary,
//     overloaded, unavailable) or the connection could not be made at all
//     (dial error: nothing was sent, e.g. the killed primary's port); the
//     writer tries again, with the same key, on the next master.
//   - unknown: the attempt may have been applied (connection reset or EOF
//     after sending, 503 outcome_unknown, 504; the client already re-sent
//     it on the same master as far as its Retry policy allows). The writer
//     re-sends it with the same key on the next master: the replicated
//     request table applies it at most once and answers a retry of an
//     applied attempt with the original's answer. The model follows the
//     answer, so nothing needs to be read back.
//
// An operation is abandoned only when the writer stops (its context ended,
// or no master answered within opTimeout: the writer fails); one abandoned
// after an unknown attempt is the only outcome the demo cannot tell, and
// counts in ops_unknown.

// Operation kinds.
const (
	opSync     = "sync" // mkdir -p of the writer's root: creates it (the writer's first operation)
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
	retryBackoff = 25 * time.Millisecond // between attempts (the client's own retries back off too)
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
	acked    atomic.Int64  // operations acknowledged
	unknown  atomic.Int64  // operations abandoned after an attempt whose outcome was unknown
	resolved atomic.Int64  // operations acknowledged after an attempt whose outcome was unknown
	replayed atomic.Int64  // ... whose answer was replayed: an earlier attempt had been applied
	retries  atomic.Int64  // writer attempts that failed (each retried on the next master)
	maxIndex atomic.Uint64 // highest acknowledged index
	perKind  sync.Map      // kind -> *atomic.Int64 (acked)

	// Takeover: the first acknowledgement of an attempt that started after
	// killAt and was not a replay (only the new primary can have served it;
	// a replay may come from a standby's request table).
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

func (l *ledger) ack(op *opRec, attemptStart, at time.Time) {
	l.acked.Add(1)
	if v, ok := l.perKind.Load(op.kind); ok {
		v.(*atomic.Int64).Add(1)
	}
	if op.unknown {
		l.resolved.Add(1)
	}
	if op.replayed {
		l.replayed.Add(1)
	}
	idx := op.index
	for {
		cur := l.maxIndex.Load()
		if idx <= cur || l.maxIndex.CompareAndSwap(cur, idx) {
			break
		}
	}
	if k := l.killAt.Load(); k != 0 && attemptStart.UnixNano() > k && !op.replayed {
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
	id    int
	kind  string
	path  string
	dst   string // rename
	key   string // the Idempotency-Key of every attempt
	index uint64 // acked: its entry's index
	acked bool   // the master acknowledged it
	// unknown: an attempt's outcome was unknown. Acked: resolved by a retry
	// with the same key; not acked: abandoned, it may or may not have been
	// applied.
	unknown  bool
	replayed bool   // acked with the original's answer, replayed (an earlier attempt had been applied)
	blockID  uint64 // addblock
	attempts int    // the client's attempts, over all the writer's
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
	op, err := w.mutate(ctx, opMkdir, p, "", func(c *client.Client, ctx context.Context, key client.MutationOption) (client.MutationResult, error) {
		return c.Mkdir(ctx, p, false, key)
	})
	if err != nil {
		return err
	}
	w.dirs = append(w.dirs, &dirState{path: p, op: op.id})
	return nil
}

func (w *writer) create(ctx context.Context) error {
	dir := w.dirs[w.rng.IntN(len(w.dirs))]
	p := path.Join(dir.path, w.next("f"))
	repl := 1 + w.rng.IntN(3)
	op, err := w.mutate(ctx, opCreate, p, "", func(c *client.Client, ctx context.Context, key client.MutationOption) (client.MutationResult, error) {
		return c.Create(ctx, p, repl, key)
	})
	if err != nil {
		return err
	}
	w.files = append(w.files, &fileState{path: p, repl: repl, create: op.id, move: -1})
	return nil
}

func (w *writer) addBlock(ctx context.Context) error {
	f := w.files[w.rng.IntN(len(w.files))]
	size := 1 + w.rng.Int64N(128<<20)
	op, err := w.mutate(ctx, opAddBlock, f.path, "", func(c *client.Client, ctx context.Context, key client.MutationOption) (client.MutationResult, error) {
		return c.AddBlock(ctx, f.path, size, key)
	})
	if err != nil {
		return err
	}
	f.blocks = append(f.blocks, blockRec{id: op.blockID, size: size, op: op.id})
	return nil
}

func (w *writer) rename(ctx context.Context) error {
	i := w.rng.IntN(len(w.files))
	f := w.files[i]
	dir := w.dirs[w.rng.IntN(len(w.dirs))]
	src, dst := f.path, path.Join(dir.path, w.next("r"))
	op, err := w.mutate(ctx, opRename, src, dst, func(c *client.Client, ctx context.Context, key client.MutationOption) (client.MutationResult, error) {
		return c.Rename(ctx, src, dst, key)
	})
	if err != nil {
		return err
	}
	f.path, f.move = dst, op.id
	w.gone = append(w.gone, goneRec{path: src, op: op.id})
	return nil
}

func (w *writer) deleteFile(ctx context.Context) error {
	i := w.rng.IntN(len(w.files))
	p := w.files[i].path
	op, err := w.mutate(ctx, opDelete, p, "", func(c *client.Client, ctx context.Context, key client.MutationOption) (client.MutationResult, error) {
		return c.Delete(ctx, p, false, key)
	})
	if err != nil {
		return err
	}
	w.files = append(w.files[:i], w.files[i+1:]...)
	w.gone = append(w.gone, goneRec{path: p, op: op.id})
	return nil
}

// rmdir deletes a directory other than the root and the newest one, with
// its files.
func (w *writer) rmdir(ctx context.Context) error {
	i := 1 + w.rng.IntN(len(w.dirs)-2)
	p := w.dirs[i].path
	op, err := w.mutate(ctx, opRmdir, p, "", func(c *client.Client, ctx context.Context, key client.MutationOption) (client.MutationResult, error) {
		return c.Delete(ctx, p, true, key)
	})
	if err != nil {
		return err
	}
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
	return nil
}

// sync makes an acknowledged write (mkdir -p of the root) and returns its
// index: the writer's first operation, which creates its subtree.
func (w *writer) sync(ctx context.Context) (uint64, error) {
	op, err := w.mutate(ctx, opSync, w.root, "", func(c *client.Client, ctx context.Context, key client.MutationOption) (client.MutationResult, error) {
		return c.Mkdir(ctx, w.root, true, key)
	})
	if err != nil {
		return 0, err
	}
	return op.index, nil
}

// mutate runs one mutation, every attempt with the same Idempotency-Key,
// until a master acknowledges it (its own answer or the original's,
// replayed); it returns the recorded, acknowledged operation. An error
// means the writer must stop: the context ended, no master answered within
// opTimeout, or a master rejected an operation the model says is valid (a
// bug, or the model diverged).
func (w *writer) mutate(ctx context.Context, kind, p, dst string, fn func(*client.Client, context.Context, client.MutationOption) (client.MutationResult, error)) (*opRec, error) {
	op := &opRec{id: len(w.ops), kind: kind, path: p, dst: dst, key: client.NewIdempotencyKey()}
	w.ops = append(w.ops, op)
	key := client.IdempotencyKey(op.key)
	octx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	// abandon stops the operation; it stays unknown when an attempt's
	// outcome was and no answer (a 4xx, which settles every attempt of the
	// key) came since.
	abandon := func(err error) (*opRec, error) {
		var ce *client.Error
		answered := errors.As(err, &ce) && ce.Status < 500 && !errors.Is(err, client.ErrOutcomeUnknown)
		if op.unknown && !answered {
			w.led.unknown.Add(1)
		}
		return nil, err
	}
	var last error
	for attempt := 0; ; attempt++ {
		if err := octx.Err(); err != nil {
			if ctx.Err() != nil {
				return abandon(ctx.Err())
			}
			return abandon(fmt.Errorf("%s %s: no master answered it within %v (key %s, last error: %v)", kind, p, opTimeout, op.key, last))
		}
		c, err := w.eps.client(attempt)
		if err != nil {
			return abandon(err)
		}
		start := time.Now()
		res, err := fn(c, octx, key)
		op.attempts += attemptsOf(res, err)
		switch classify(err) {
		case outcomeAcked:
			// More than one client attempt: the client retried after an
			// unknown outcome. A replay: an earlier attempt (maybe one
			// net/http re-sent by itself) had been applied.
			op.unknown = op.unknown || res.Attempts > 1 || res.Replayed
			op.acked, op.index, op.blockID, op.replayed = true, res.Index, res.BlockID, res.Replayed
			w.led.ack(op, start, time.Now())
			return op, nil
		case outcomeUnknown:
			op.unknown = true
			fallthrough
		case outcomeRetry:
			last = err
			w.led.retries.Add(1)
			if err := sleepCtx(octx, retryBackoff); err != nil {
				continue // reported at the top of the loop
			}
		default:
			if ctx.Err() != nil {
				return abandon(ctx.Err())
			}
			return abandon(fmt.Errorf("%s %s %s (key %s): %w", kind, p, dst, op.key, err))
		}
	}
}

// attemptsOf is how many attempts the client made for one call.
func attemptsOf(res client.MutationResult, err error) int {
	var ue *client.UnknownOutcomeError
	switch {
	case err == nil:
		return res.Attempts
	case errors.As(err, &ue):
		return ue.Attempts
	}
	return 1
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
	if errors.Is(err, client.ErrOutcomeUnknown) {
		// The client gave up with an attempt's outcome unknown (whatever
		// the last attempt's error, e.g. the dead primary's refused dial).
		return outcomeUnknown
	}
	var ce *client.Error
	if errors.As(err, &ce) {
		switch ce.Code {
		case api.CodeNoPrimary, api.CodeOverloaded, api.CodeUnavailable:
			return outcomeRetry // nothing was applied
		case api.CodeOutcomeUnknown, api.CodeTimeout:
			return outcomeUnknown
		}
		return outcomeFailed // a namespace rejection, a bad request, a reused key or an internal error
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return outcomeRetry // the connection was never made: nothing was sent
	}
	// Reset or EOF after sending, or our deadline while the request was in
	// flight: it may have been applied (the client wraps these in an
	// UnknownOutcomeError; kept for errors that come unwrapped).
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

package tasks

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/recipe/membership"
	"github.com/roomlog/roomlog/zkx"
)

// Fence makes the assigner's writes conditional on its tenure: Guard
// returns ops preceded by the checks (zk.CheckVersionRequest) that hold
// only while the caller leads, for one Multi. *election.Term and
// *lock.Lease are Fences. When the Fence also has Done() <-chan struct{}
// (both have), Run stops as soon as it closes; Err() error, when present,
// is checked before each write (nothing is sent once it is non-nil);
// Token() int64, when present, is recorded in every assignment.
type Fence interface {
	Guard(ops ...any) []any
}

// AssignerConfig configures an Assigner.
type AssignerConfig struct {
	// Client is the ZooKeeper client (required). The assigner shares its
	// session and creates nodes with its ACL.
	Client *zkx.Client
	// Dir is the recipe's directory (required); missing components are
	// created (persistent).
	Dir string
	// Fence guards every write of the assigner (required): the term of
	// an election or the lease of a lock the assigner won.
	Fence Fence
	// Pick chooses the worker for a task among workers: the live workers
	// with room (fewer than MaxOpen assignments, and the task's data
	// within MaxOpenBytes with theirs), least loaded first (ties
	// by id). It runs on Run's goroutine and must not block. It may
	// return "" to leave the task waiting; a name not in workers is
	// treated as "" (and logged). Default: workers[0], the least loaded.
	Pick func(task Task, workers []string) string
	// Logger receives the assigner's logs (nil: discard).
	Logger *slog.Logger
	// MaxOpen caps the assignments of one worker (its directory's
	// children). Default DefaultMaxOpen, at most MaxOpenLimit.
	MaxOpen int
	// MaxOpenBytes caps the task data (the sum of Task.Data's lengths)
	// assigned to one worker at once: a task that would pass it waits in
	// <dir>/tasks. Default DefaultMaxOpenBytes; at least MaxDataBytes (a
	// worker with nothing assigned can always take any task).
	MaxOpenBytes int
	// MaxWaitingBytes bounds the bytes of <dir>/tasks (data, names and
	// ZooKeeper's per-znode cost): the assigner publishes their total
	// and this bound in that node's data, and Submit refuses a task that
	// would pass it (ErrFull). Default DefaultMaxWaitingBytes; at least
	// one task of MaxDataBytes.
	MaxWaitingBytes int64
	// MaxFinishedBytes bounds the bytes of <dir>/results the same way:
	// Submit refuses while one more result of MaxResultBytes would pass
	// it, and the assigner assigns no waiting task while the results
	// are at it. Default DefaultMaxFinishedBytes; at least one result of
	// MaxResultBytes.
	MaxFinishedBytes int64
	// WorkerACL, when set, gives each worker an ACL of its own (package
	// doc, "ACLs"): it returns the ACL entries naming worker's identity
	// (their Perms are ignored: the recipe grants per node what the
	// worker needs). Nodes of a worker are then created with the
	// client's ACL plus these entries; a worker it returns none for is
	// not offered tasks. nil: every node gets the client's ACL.
	WorkerACL func(worker string) []zk.ACL
	// WorkerIdentities, with WorkerACL, are the entries naming every
	// worker's identity (Perms ignored): <dir>/workers, when the
	// assigner creates it, grants them CREATE and DELETE, to join and
	// leave.
	WorkerIdentities []zk.ACL
	// ResultTTL is how long a result stays once the assigner first saw it
	// (its own monotonic clock: a new assigner starts counting again).
	// Default DefaultResultTTL.
	ResultTTL time.Duration
}

// Validate reports every invalid field at once.
func (c AssignerConfig) Validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, fmt.Errorf("%w: Client is nil", ErrBadConfig))
	}
	if err := zkr.ValidDir(c.Dir); err != nil {
		errs = append(errs, fmt.Errorf("%w: Dir %q: %v", ErrBadConfig, c.Dir, err))
	}
	if c.Fence == nil {
		errs = append(errs, fmt.Errorf("%w: Fence is nil (every assignment must be fenced)", ErrBadConfig))
	} else if len(c.Fence.Guard()) == 0 {
		errs = append(errs, fmt.Errorf("%w: Fence.Guard adds no check", ErrBadConfig))
	}
	if c.MaxOpen < 0 || c.MaxOpen > MaxOpenLimit {
		errs = append(errs, fmt.Errorf("%w: MaxOpen %d not in [0, %d]", ErrBadConfig, c.MaxOpen, MaxOpenLimit))
	}
	if c.MaxOpenBytes != 0 && c.MaxOpenBytes < MaxDataBytes {
		errs = append(errs, fmt.Errorf("%w: MaxOpenBytes %d < MaxDataBytes %d (a task of MaxDataBytes could never be assigned; 0 for the default)", ErrBadConfig, c.MaxOpenBytes, MaxDataBytes))
	}
	if c.MaxWaitingBytes != 0 && c.MaxWaitingBytes < maxTaskCost {
		errs = append(errs, fmt.Errorf("%w: MaxWaitingBytes %d < %d, what one task of MaxDataBytes may cost (0 for the default)", ErrBadConfig, c.MaxWaitingBytes, maxTaskCost))
	}
	if c.MaxFinishedBytes != 0 && c.MaxFinishedBytes < maxResultCost {
		errs = append(errs, fmt.Errorf("%w: MaxFinishedBytes %d < %d, what one result of MaxResultBytes may cost (0 for the default)", ErrBadConfig, c.MaxFinishedBytes, maxResultCost))
	}
	if c.ResultTTL < 0 {
		errs = append(errs, fmt.Errorf("%w: ResultTTL %v < 0", ErrBadConfig, c.ResultTTL))
	}
	if len(c.WorkerIdentities) > 0 && c.WorkerACL == nil {
		errs = append(errs, fmt.Errorf("%w: WorkerIdentities without WorkerACL", ErrBadConfig))
	}
	return errors.Join(errs...)
}

// Stats counts an Assigner's rounds and the writes of it that ZooKeeper
// confirmed.
type Stats struct {
	// Rounds: rounds run (each reads everything it acts on, package doc,
	// "Protocol" 2). It grows with the changes the assigner sees, and by
	// about one per backoff delay while a write keeps failing; a count
	// that grows while nothing changes is a fault worth a look.
	Rounds int
	// Assigned: tasks moved from <dir>/tasks to a worker.
	Assigned int
	// Reassigned: assignments moved from a worker that is not a member
	// to another.
	Reassigned int
	// Duplicates: task nodes deleted because the same task (same id and
	// data) was already assigned or finished.
	Duplicates int
	// Expired: results deleted after ResultTTL.
	Expired int
}

// Assigner is the recipe's master: while its Fence holds, Run assigns
// waiting tasks to live workers, reassigns the tasks of workers that are
// gone and expires results.
type Assigner struct {
	cfg     AssignerConfig
	log     *slog.Logger
	foreign *zkx.ForeignSet
	running atomic.Bool

	mu    sync.Mutex // guards stats
	stats Stats

	// afterReadAssignments, when set (by tests, before Run), runs in each
	// round once the assignments were read.
	afterReadAssignments func()
}

// NewAssigner validates cfg and returns an Assigner; nothing is sent
// until Run.
func NewAssigner(cfg AssignerConfig) (*Assigner, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.MaxOpen == 0 {
		cfg.MaxOpen = DefaultMaxOpen
	}
	if cfg.MaxOpenBytes == 0 {
		cfg.MaxOpenBytes = DefaultMaxOpenBytes
	}
	if cfg.ResultTTL == 0 {
		cfg.ResultTTL = DefaultResultTTL
	}
	if cfg.MaxWaitingBytes == 0 {
		cfg.MaxWaitingBytes = DefaultMaxWaitingBytes
	}
	if cfg.MaxFinishedBytes == 0 {
		cfg.MaxFinishedBytes = DefaultMaxFinishedBytes
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("recipe", "tasks", "dir", cfg.Dir)
	return &Assigner{cfg: cfg, log: log, foreign: zkx.NewForeignSet(log, "task recipe")}, nil
}

// Foreign returns the nodes the assigner ignores: task, assignment and
// result nodes that break the format, task nodes that conflict with an
// open task of the same id, and task nodes waiting for a foreign node at
// their result's name to go.
func (a *Assigner) Foreign() []Foreign { return a.foreign.List() }

// Stats returns the counts so far (over every Run).
func (a *Assigner) Stats() Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.stats
}

func (a *Assigner) count(f func(*Stats)) {
	a.mu.Lock()
	f(&a.stats)
	a.mu.Unlock()
}

// fenceErr is the Fence's own verdict, when it has one.
func (a *Assigner) fenceErr() error {
	if f, ok := a.cfg.Fence.(interface{ Err() error }); ok {
		if err := f.Err(); err != nil {
			return fmt.Errorf("%w: %w", ErrFenced, err)
		}
	}
	return nil
}

// Run assigns until ctx ends (ctx's error) or the fence is lost (an error
// wrapping ErrFenced). It first recovers the state it inherits (package
// doc, "Protocol"), then works on every change of <dir>/tasks,
// <dir>/results and the membership. A connection loss or a failed
// request only ends a round: the next round reads everything again
// before it writes. One Run at a time per Assigner; after the fence is
// lost, make a new Assigner with the next term's fence.
func (a *Assigner) Run(ctx context.Context) error {
	if !a.running.CompareAndSwap(false, true) {
		return fmt.Errorf("%w: Run is already running", ErrBadConfig)
	}
	defer a.running.Store(false)
	if err := a.fenceErr(); err != nil {
		return err
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var fenceDone <-chan struct{}
	if f, ok := a.cfg.Fence.(interface{ Done() <-chan struct{} }); ok {
		fenceDone = f.Done()
		go func() {
			select {
			case <-fenceDone:
				cancel()
			case <-rctx.Done():
			}
		}()
	}
	r := &round{a: a, sess: zkr.NewSession(a.cfg.Client), wake: zkx.NewSignal(),
		tasks: map[string]cached[taskRecord]{}, assigns: map[string]cached[assignRecord]{},
		firstSeen: map[string]time.Time{}, dirs: map[string]map[string]bool{}, resultSize: map[string]int32{},
		armed: map[string]bool{}, fired: map[string]bool{}, reportDirs: map[string]map[string]bool{},
		deletedReports: map[string][]string{}}
	if f, ok := a.cfg.Fence.(interface{ Token() int64 }); ok {
		r.token = f.Token()
	}
	defer r.sess.Close()
	err := r.setup(rctx)
	if err == nil {
		defer r.watcher.Close()
		err = r.loop(rctx, fenceDone)
	}
	cancel()
	r.waiters.Wait() // the directory watches' goroutines

	if ferr := a.fenceErr(); ferr != nil {
		return ferr
	}
	if fenceDone != nil {
		select {
		case <-fenceDone:
			return fmt.Errorf("%w: the fence ended", ErrFenced)
		default:
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return err
}

// cached is a node read by the assigner, with the Stat it had; a node the
// assigner wrote is cached from its own write.
type cached[T any] struct {
	rec T
	st  zk.Stat
	// foreign is the reason it is refused ("" when accepted).
	foreign string
}

// round is one Run's state, owned by Run's goroutine.
type round struct {
	a       *Assigner
	sess    *zkr.Session
	watcher *membership.Watcher
	wake    zkx.Signal
	token   int64
	// sid is the session the last round read in.
	sid int64
	// tasksCh and resultsCh are the armed child watches (nil once fired:
	// the next listing arms a new one).
	tasksCh, resultsCh <-chan zk.Event
	// tasks caches <dir>/tasks by name, assigns the assignment nodes by
	// path: a listed node is read once, until it is no longer listed.
	tasks   map[string]cached[taskRecord]
	assigns map[string]cached[assignRecord]
	// firstSeen: when this Run first listed each result (by name).
	firstSeen map[string]time.Time
	// results: the names of the last listing of <dir>/results (nil
	// before the first), at child version resultsCv; resultSize the
	// data length of each of them read so far.
	results    map[string]bool
	resultsCv  int32
	resultSize map[string]int32
	// taskNames: the names of the last listing of <dir>/tasks (nil
	// before the first), at child version tasksCv.
	taskNames map[string]bool
	tasksCv   int32
	// waiting and finished are the byte totals (nodeCost) of the last
	// listings of <dir>/tasks and <dir>/results; pubTasks and
	// pubResults what this Run published in those nodes.
	waiting, finished    dirTotal
	pubTasks, pubResults dirTotal
	// dirs: the worker directories known to exist, each with the names
	// in it (foreign ones included: a task is not assigned to a worker
	// whose directory holds its name already).
	dirs map[string]map[string]bool
	// again: a write failed on a state that changed under it: run another
	// round soon (after a backoff while it keeps failing).
	again bool
	// armed: the paths of the worker directories (assignments and
	// reports) with a child watch armed by this Run (a worker's report
	// starts a round). Each watch has a goroutine (waiters) that
	// records it in fired when it fires and wakes the loop.
	armed   map[string]bool
	waiters sync.WaitGroup
	firedMu sync.Mutex // guards fired
	fired   map[string]bool
	// reports: the results workers wrote into their report directories
	// (<dir>/reports/<w>/r-<id>, per-worker ACLs), each matching an
	// assignment of its worker, read by the last readAssignments.
	reports []report
	// reportDirs: with per-worker ACLs, the report directories known to
	// exist, each with the names left in it.
	reportDirs map[string]map[string]bool
	// deletedReports: per worker, the paths of the last reports deleted
	// as malformed or unmatched (at most keptDeletedReports), still
	// listed by Foreign.
	deletedReports map[string][]string
}

// report is an accepted r-<id> node of a worker's report directory,
// with the assignment it reports.
type report struct {
	worker, name string
	data         []byte
	rec          resultRecord
	st           zk.Stat
	as           assignment
}

func (r *round) path(parts ...string) string {
	p := r.a.cfg.Dir
	for _, s := range parts {
		p += "/" + s
	}
	return p
}

func (r *round) setup(ctx context.Context) error {
	if r.a.cfg.WorkerACL != nil {
		// The workers join and leave in <dir>/workers: CREATE and DELETE
		// there (package doc, "ACLs").
		if err := zkx.EnsurePath(ctx, r.sess, r.a.cfg.Dir); err != nil {
			return fmt.Errorf("tasks: assigner: %w", err)
		}
		acl := r.withWorkers(r.a.cfg.WorkerIdentities, zk.PermCreate|zk.PermDelete)
		if err := r.createDir(ctx, r.path(workersDir), acl); err != nil {
			return fmt.Errorf("tasks: assigner: %w", err)
		}
	}
	dirs := []string{tasksDir, assignDir, resultsDir, workersDir}
	if r.a.cfg.WorkerACL != nil {
		dirs = append(dirs, reportsDir)
	}
	for _, d := range dirs {
		if err := zkx.EnsurePath(ctx, r.sess, r.path(d)); err != nil {
			return fmt.Errorf("tasks: assigner: %w", err)
		}
	}
	w, err := membership.Watch(ctx, r.a.cfg.Client, r.path(workersDir), membership.WatchOptions{
		OnJoin:  func(membership.Member) { r.wake.Notify() },
		OnLeave: func(membership.Member) { r.wake.Notify() },
		Logger:  r.a.cfg.Logger,
	})
	if err != nil {
		return fmt.Errorf("tasks: assigner: %w", err)
	}
	r.watcher = w
	return nil
}

// withWorkers is the client's ACL plus entries (their Perms set to perms).
func (r *round) withWorkers(entries []zk.ACL, perms int32) []zk.ACL {
	acl := append([]zk.ACL(nil), r.sess.ACL()...)
	for _, e := range entries {
		e.Perms = perms
		acl = append(acl, e)
	}
	return acl
}

// workerACL is the ACL of a node of worker w granting it perms: the
// client's ACL alone without AssignerConfig.WorkerACL.
func (r *round) workerACL(w string, perms int32) []zk.ACL {
	if r.a.cfg.WorkerACL == nil {
		return r.sess.ACL()
	}
	return r.withWorkers(r.a.cfg.WorkerACL(w), perms)
}

// servable reports whether tasks may go to worker w: with per-worker
// ACLs, only when WorkerACL names its identity.
func (r *round) servable(w string) bool {
	return r.a.cfg.WorkerACL == nil || len(r.a.cfg.WorkerACL(w)) > 0
}

// createDir creates the persistent node p (its parent exists) with acl,
// nil if it exists.
func (r *round) createDir(ctx context.Context, p string, acl []zk.ACL) error {
	err := zkr.Retry0(ctx, r.sess, func() error {
		_, err := r.sess.Conn().Create(p, nil, 0, acl)
		return err
	})
	if err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("create %s: %w", p, err)
	}
	return nil
}

func (r *round) loop(ctx context.Context, fenceDone <-chan struct{}) error {
	// bo delays the rounds after a failed one: a round that failed, or
	// whose write failed on a state that changed under it (again),
	// runs again after bo's next delay, or sooner on a change. A state
	// that stays as it is (a node the recipe cannot consume) costs a
	// round per delay, not a busy loop.
	var bo zkx.Backoff
	retry := func() <-chan time.Time {
		d := bo.Next()
		bo.AtLeast(2 * d)
		return time.After(d)
	}
	for {
		next, err := r.run(ctx)
		var wait <-chan time.Time
		switch {
		case errors.Is(err, ErrFenced):
			return err
		case ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			r.a.log.Warn("assigner round failed; reading everything again", "err", err)
			wait = retry()
		case r.again:
			wait = retry()
		default:
			bo.Reset()
			if next > 0 {
				wait = time.After(next)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-fenceDone:
			return ErrFenced
		case <-r.wake.C():
		case <-r.tasksCh:
			r.tasksCh = nil
		case <-r.resultsCh:
			r.resultsCh = nil
		case <-wait:
		case _, ok := <-r.sess.Events():
			if !ok {
				return zkr.ErrClientClosed
			}
		}
	}
}

// assignment is an accepted assignment node.
type assignment struct {
	worker string
	name   string
	rec    assignRecord
	st     zk.Stat
}

// run is one round: read everything, then write. It returns how long
// until the next result expires (0: none).
func (r *round) run(ctx context.Context) (time.Duration, error) {
	r.again = false
	r.a.count(func(s *Stats) { s.Rounds++ })
	if err := r.a.fenceErr(); err != nil {
		return 0, err
	}
	if id := r.sess.ID(); id != r.sid {
		// A new session may read from a server behind what we saw.
		if err := zkx.Sync(ctx, r.sess, r.a.cfg.Dir); err != nil {
			return 0, err
		}
		r.sid = id
	}
	live := map[string]bool{}
	for _, m := range r.watcher.Members() {
		live[m.ID] = true
	}
	assigned, load, err := r.readAssignments(ctx)
	if err != nil {
		return 0, err
	}
	if r.a.afterReadAssignments != nil {
		r.a.afterReadAssignments()
	}
	results, err := r.readResults(ctx)
	if err != nil {
		return 0, err
	}
	// Results reported in the workers' own directories go to
	// <dir>/results (they count as finished from now on).
	reported := map[string]bool{}
	for _, rp := range r.reports {
		reported[rp.rec.ID] = true
		ok, err := r.moveReport(ctx, rp)
		if err != nil {
			return 0, err
		}
		if ok {
			// Finished: no longer open, nor in its worker's load.
			if as, found := assigned[rp.rec.ID]; found && as.worker == rp.worker && as.name == rp.as.name {
				delete(assigned, rp.rec.ID)
			}
			load.add(rp.worker, rp.as.rec.Data, -1)
		}
	}
	waiting, err := r.readTasks(ctx)
	if err != nil {
		return 0, err
	}
	if err := r.publishTotal(ctx, tasksDir, r.waiting, &r.pubTasks); err != nil {
		return 0, err
	}
	if err := r.publishTotal(ctx, resultsDir, r.finished, &r.pubResults); err != nil {
		return 0, err
	}
	// Duplicates: a task node whose id is assigned or finished (a Submit
	// that raced a move, or the seed's half-done assignment).
	kept := waiting[:0]
	for _, t := range waiting {
		as, isAssigned := assigned[t.rec.ID]
		_, isDone := results[t.rec.ID]
		var same bool
		var other string
		// open checks, in the Multi that deletes the duplicate, that
		// the open node it duplicates is still there: read before the
		// task node, it may have finished meanwhile, its result been
		// deleted and the task node be a new submission.
		var open *zk.CheckVersionRequest
		switch {
		case isAssigned:
			same, other = string(as.rec.Data) == string(t.rec.Data), r.path(assignDir, as.worker, as.name)
			open = &zk.CheckVersionRequest{Path: other, Version: as.st.Version}
		case isDone:
			rr, found, err := readResultRecord(ctx, r.sess, r.a.cfg.Dir, t.rec.ID)
			if errors.Is(err, ErrMalformed) {
				// A foreign node holds the result's name: the task
				// could not report there. It waits until the node is
				// gone (ResultTTL, or an operator: the results watch).
				rp := r.path(resultsDir, nodeName(t.rec.ID))
				r.a.foreign.Report(rp, err.Error())
				r.a.foreign.Report(r.path(tasksDir, nodeName(t.rec.ID)), "waits: a foreign node holds its result's name at "+rp)
				continue
			}
			if err != nil {
				return 0, err
			}
			if !found {
				// Deleted since the listing (or malformed): the task
				// node is a new submission once no result is there.
				r.again = true
				continue
			}
			same, other = rr.sameSum(t.rec.Data), r.path(resultsDir, nodeName(t.rec.ID))
			open = &zk.CheckVersionRequest{Path: other, Version: -1}
		case reported[t.rec.ID]:
			// Its result is on its way to <dir>/results: the next
			// round compares with it.
			r.again = true
			continue
		default:
			kept = append(kept, t)
			continue
		}
		p := r.path(tasksDir, nodeName(t.rec.ID))
		if !same {
			r.a.foreign.Report(p, "another task of this id with other data is open at "+other+": it waits until that one's result is deleted")
			continue
		}
		ok, err := r.write(ctx, "delete duplicate "+p, open, &zk.DeleteRequest{Path: p, Version: t.st.Version})
		delete(r.tasks, nodeName(t.rec.ID))
		if err != nil || !ok {
			return 0, err
		}
		r.a.count(func(s *Stats) { s.Duplicates++ })
		r.a.log.Info("deleted a duplicate task node", "path", p, "open", other)
	}
	waiting = kept
	// Reassign the assignments of workers that are not members.
	var orphans []assignment
	for _, as := range assigned {
		if !live[as.worker] {
			orphans = append(orphans, as)
		}
	}
	sort.Slice(orphans, func(i, j int) bool { return orphans[i].st.Czxid < orphans[j].st.Czxid })
	for _, as := range orphans {
		w := r.pick(Task{ID: as.rec.ID, Data: as.rec.Data, Submitted: msTime(as.rec.Submitted)}, live, load)
		if w == "" {
			// No worker with room, or Pick declined this one: the
			// others may still go elsewhere.
			continue
		}
		ok, err := r.reassign(ctx, as, w)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		load.add(as.worker, as.rec.Data, -1)
		load.add(w, as.rec.Data, 1)
	}
	// Delete the empty directories of workers that are not members (a
	// Submit reads every directory). One that joins meanwhile creates
	// its directory again.
	for w, names := range r.dirs {
		if len(names) > 0 || live[w] {
			continue
		}
		wp := r.path(assignDir, w)
		ok, err := r.write(ctx, "delete the empty directory "+wp+" of a worker that is not a member", &zk.DeleteRequest{Path: wp, Version: -1})
		if err != nil {
			return 0, err
		}
		if ok {
			delete(r.dirs, w)
			r.a.log.Debug("deleted the empty directory of a worker that is not a member", "path", wp)
		}
	}
	for w, names := range r.reportDirs {
		if len(names) > 0 || live[w] {
			continue
		}
		rd := r.path(reportsDir, w)
		ok, err := r.write(ctx, "delete the empty report directory "+rd+" of a worker that is not a member", &zk.DeleteRequest{Path: rd, Version: -1})
		if err != nil {
			return 0, err
		}
		if ok {
			delete(r.reportDirs, w)
		}
	}
	// A live worker without a directory gets one (with per-worker ACLs
	// a worker cannot create it), and with per-worker ACLs one to report
	// in.
	for w := range live {
		if !r.hasDirs(w) && r.servable(w) {
			if err := r.ensureDir(ctx, w); err != nil {
				return 0, err
			}
		}
	}
	// Assign the waiting tasks, in submission order, unless the results
	// are at their bound: each task assigned may add one.
	if r.finished.Bytes >= r.a.cfg.MaxFinishedBytes && len(waiting) > 0 {
		r.a.log.Warn("results at their byte bound: waiting tasks are not assigned until results are deleted",
			"results_bytes", r.finished.Bytes, "bound", r.a.cfg.MaxFinishedBytes, "waiting", len(waiting))
		waiting = nil
	}
	for _, t := range waiting {
		w := r.pick(Task{ID: t.rec.ID, Data: t.rec.Data, Submitted: msTime(t.rec.Submitted)}, live, load)
		if w == "" {
			continue
		}
		ok, err := r.assign(ctx, t, w)
		if err != nil {
			return 0, err
		}
		if ok {
			load.add(w, t.rec.Data, 1)
		}
	}
	return r.expire(ctx, results)
}

// readAssignments lists <dir>/assign and every worker directory in it.
func (r *round) readAssignments(ctx context.Context) (map[string]assignment, loads, error) {
	workers, err := zkx.Children(ctx, r.sess, r.path(assignDir))
	if err != nil {
		return nil, nil, fmt.Errorf("list %s: %w", r.path(assignDir), err)
	}
	sort.Strings(workers)
	assigned := map[string]assignment{}
	load := loads{}
	listed := map[string]bool{}
	dirs := map[string]map[string]bool{}
	// mine: each worker's accepted assignments by task id, what its
	// reports must match.
	mine := map[string]map[string]assignment{}
	r.reports = nil
	r.firedMu.Lock()
	for p := range r.fired {
		delete(r.armed, p)
	}
	clear(r.fired)
	r.firedMu.Unlock()
	for _, w := range workers {
		wp := r.path(assignDir, w)
		if err := zkx.ValidName(w); err != nil {
			r.a.foreign.Report(wp, "not a worker id: "+err.Error())
			continue
		}
		names, err := r.listDir(ctx, wp)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("list %s: %w", wp, err)
		}
		dirs[w] = make(map[string]bool, len(names))
		for _, n := range names {
			dirs[w][n] = true
			p := wp + "/" + n
			listed[p] = true
			c, ok := r.assigns[p]
			if !ok {
				b, st, err := zkx.Get(ctx, r.sess, p)
				if errors.Is(err, zk.ErrNoNode) {
					continue
				}
				if err != nil {
					return nil, nil, fmt.Errorf("read %s: %w", p, err)
				}
				rec, why := decodeAssign(w, n, b, st)
				c = cached[assignRecord]{rec: rec, st: *st, foreign: why}
				r.assigns[p] = c
			}
			if c.foreign != "" {
				r.a.foreign.Report(p, c.foreign)
				continue
			}
			as := assignment{worker: w, name: n, rec: c.rec, st: c.st}
			if mine[w] == nil {
				mine[w] = map[string]assignment{}
			}
			mine[w][c.rec.ID] = as
			if prev, dup := assigned[c.rec.ID]; dup {
				// Never written by an assigner (each move deletes the
				// node it moves): keep the later attempt.
				lo, hi := prev, as
				if lo.rec.Attempt > hi.rec.Attempt {
					lo, hi = hi, lo
				}
				r.a.foreign.Report(r.path(assignDir, lo.worker, lo.name),
					fmt.Sprintf("a second assignment of task %s (attempt %d; attempt %d is at %s)", c.rec.ID, lo.rec.Attempt, hi.rec.Attempt, r.path(assignDir, hi.worker, hi.name)))
				load.add(lo.worker, lo.rec.Data, 1)
				as = hi
				assigned[c.rec.ID] = as
				load.add(as.worker, as.rec.Data, 1)
				continue
			}
			assigned[c.rec.ID] = as
			load.add(w, c.rec.Data, 1)
		}
	}
	for p := range r.assigns {
		if !listed[p] {
			delete(r.assigns, p)
			r.a.foreign.Drop(p)
		}
	}
	r.dirs = dirs
	if r.a.cfg.WorkerACL != nil {
		if err := r.readReports(ctx, mine); err != nil {
			return nil, nil, err
		}
	}
	return assigned, load, nil
}

// readResults lists <dir>/results (arming its watch); results are read
// only when a task node of the same id is waiting.
func (r *round) readResults(ctx context.Context) (map[string]bool, error) {
	p := r.path(resultsDir)
	l, err := list(ctx, r.sess, p, r.resultsCh == nil)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", p, err)
	}
	if l.ch != nil {
		r.resultsCh = l.ch
	}
	names := l.names
	if hiddenChanges(r.results, r.resultsCv, names, l.st.Cversion) {
		clear(r.resultSize)
	}
	now := time.Now()
	listed := map[string]bool{}
	out := map[string]bool{}
	for _, n := range names {
		id, err := parseName(n)
		if err != nil {
			r.a.foreign.Report(p+"/"+n, err.Error())
			continue
		}
		listed[n] = true
		if _, ok := r.firstSeen[n]; !ok {
			r.firstSeen[n] = now
		}
		out[id] = true
	}
	for n := range r.firstSeen {
		if !listed[n] {
			delete(r.firstSeen, n)
		}
	}
	all := make(map[string]bool, len(names))
	for _, n := range names {
		all[n] = true
	}
	for n := range r.results {
		if !all[n] {
			r.a.foreign.Drop(p + "/" + n)
			delete(r.resultSize, n)
		}
	}
	r.results, r.resultsCv = all, l.st.Cversion
	// The byte total: each result's size is read once (an exists: the
	// data is read only when a task of its id waits).
	total := int64(0)
	for _, n := range names {
		size, ok := r.resultSize[n]
		if !ok {
			found, st, err := zkx.Exists(ctx, r.sess, p+"/"+n)
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", p+"/"+n, err)
			}
			if !found {
				continue
			}
			size = st.DataLength
			r.resultSize[n] = size
		}
		total += nodeCost(n, size)
	}
	r.finished = dirTotal{V: formatVersion, Bytes: total, Cversion: l.st.Cversion, Max: r.a.cfg.MaxFinishedBytes}
	return out, nil
}

// waitingTask is an accepted node of <dir>/tasks.
type waitingTask struct {
	rec taskRecord
	st  zk.Stat
}

// readTasks lists <dir>/tasks (arming its watch) and returns the accepted
// tasks in creation order.
func (r *round) readTasks(ctx context.Context) ([]waitingTask, error) {
	p := r.path(tasksDir)
	l, err := list(ctx, r.sess, p, r.tasksCh == nil)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", p, err)
	}
	if l.ch != nil {
		r.tasksCh = l.ch
	}
	names := l.names
	if hiddenChanges(r.taskNames, r.tasksCv, names, l.st.Cversion) {
		// A node deleted and created again unseen: read every one again.
		clear(r.tasks)
	}
	listed := map[string]bool{}
	var out []waitingTask
	total := int64(0)
	for _, n := range names {
		listed[n] = true
		tp := p + "/" + n
		c, ok := r.tasks[n]
		if !ok {
			b, st, err := zkx.Get(ctx, r.sess, tp)
			if errors.Is(err, zk.ErrNoNode) {
				continue
			}
			if err != nil {
				return nil, fmt.Errorf("read %s: %w", tp, err)
			}
			rec, why := decodeTask(n, b, st)
			c = cached[taskRecord]{rec: rec, st: *st, foreign: why}
			r.tasks[n] = c
		}
		total += nodeCost(n, c.st.DataLength)
		if c.foreign != "" {
			r.a.foreign.Report(tp, c.foreign)
			continue
		}
		out = append(out, waitingTask{rec: c.rec, st: c.st})
	}
	for n := range r.tasks {
		if !listed[n] {
			delete(r.tasks, n)
			r.a.foreign.Drop(p + "/" + n)
		}
	}
	r.taskNames, r.tasksCv = listed, l.st.Cversion
	r.waiting = dirTotal{V: formatVersion, Bytes: total, Cversion: l.st.Cversion, Max: r.a.cfg.MaxWaitingBytes}
	sort.Slice(out, func(i, j int) bool { return out[i].st.Czxid < out[j].st.Czxid })
	return out, nil
}

// workLoad is what is assigned to one worker: n assignments holding
// bytes of task data.
type workLoad struct{ n, bytes int }

// loads is the workLoad of each worker.
type loads map[string]workLoad

// add counts k assignments (negative: moved away) of a task with data to
// worker w.
func (l loads) add(w string, data []byte, k int) {
	x := l[w]
	x.n += k
	x.bytes += k * len(data)
	l[w] = x
}

// pick returns the worker for task t ("" to leave it waiting).
func (r *round) pick(t Task, live map[string]bool, load loads) string {
	var ws []string
	name := nodeName(t.ID)
	for w := range live {
		if !r.servable(w) {
			continue
		}
		// A directory holding the task's name already (a foreign node:
		// readAssignments reported it) would refuse the create.
		if l := load[w]; l.n < r.a.cfg.MaxOpen && l.bytes+len(t.Data) <= r.a.cfg.MaxOpenBytes && !r.dirs[w][name] {
			ws = append(ws, w)
		}
	}
	if len(ws) == 0 {
		return ""
	}
	sort.Slice(ws, func(i, j int) bool {
		if load[ws[i]].n != load[ws[j]].n {
			return load[ws[i]].n < load[ws[j]].n
		}
		return ws[i] < ws[j]
	})
	if r.a.cfg.Pick == nil {
		return ws[0]
	}
	w := r.a.cfg.Pick(t, append([]string(nil), ws...))
	if w == "" {
		return ""
	}
	for _, x := range ws {
		if x == w {
			return w
		}
	}
	r.a.log.Warn("Pick returned a worker that is not offered; task left waiting", "task", t.ID, "worker", w)
	return ""
}

// ensureDir makes sure <dir>/assign/<w> exists (the worker creates it
// before it joins; an operator may have deleted it).
func (r *round) ensureDir(ctx context.Context, w string) error {
	if _, ok := r.dirs[w]; !ok {
		// Read by the worker, written by the assigner alone (package
		// doc, "ACLs"): every assignment in it is the assigner's.
		if err := r.createDir(ctx, r.path(assignDir, w), r.workerACL(w, zk.PermRead)); err != nil {
			return err
		}
		r.dirs[w] = map[string]bool{}
	}
	if _, ok := r.reportDirs[w]; !ok && r.a.cfg.WorkerACL != nil {
		// The worker creates its reports there (and reads them back).
		if err := r.createDir(ctx, r.path(reportsDir, w), r.workerACL(w, zk.PermRead|zk.PermCreate)); err != nil {
			return err
		}
		r.reportDirs[w] = map[string]bool{}
	}
	return nil
}

// hasDirs reports whether worker w's directories (the assignments', and
// with per-worker ACLs the reports') are known to exist.
func (r *round) hasDirs(w string) bool {
	if _, ok := r.dirs[w]; !ok {
		return false
	}
	if _, ok := r.reportDirs[w]; !ok && r.a.cfg.WorkerACL != nil {
		return false
	}
	return true
}

// assign moves task t to worker w: create the assignment and delete the
// task node (at the version read), in one fenced Multi.
func (r *round) assign(ctx context.Context, t waitingTask, w string) (bool, error) {
	if err := r.ensureDir(ctx, w); err != nil {
		return false, err
	}
	name := nodeName(t.rec.ID)
	tp, ap := r.path(tasksDir, name), r.path(assignDir, w, name)
	rec := assignRecord{V: formatVersion, ID: t.rec.ID, Data: t.rec.Data, Worker: w, Token: r.token, Attempt: 1, Submitted: t.rec.Submitted}
	ok, err := r.write(ctx, "assign "+tp+" to "+w,
		&zk.CreateRequest{Path: ap, Data: zkr.Encode(rec), Acl: r.workerACL(w, zk.PermRead)},
		&zk.DeleteRequest{Path: tp, Version: t.st.Version})
	delete(r.tasks, name)
	if err != nil || !ok {
		return false, err
	}
	r.dirs[w][name] = true
	r.a.count(func(s *Stats) { s.Assigned++ })
	r.a.log.Debug("assigned", "task", t.rec.ID, "worker", w)
	return true, nil
}

// reassign moves assignment as (of a worker that is not a member) to w
// with the next attempt number: delete the old node (at the version
// read), create the new one, in one fenced Multi.
func (r *round) reassign(ctx context.Context, as assignment, w string) (bool, error) {
	if err := r.ensureDir(ctx, w); err != nil {
		return false, err
	}
	op := r.path(assignDir, as.worker, as.name)
	np := r.path(assignDir, w, as.name)
	rec := as.rec
	rec.Worker, rec.Token, rec.Attempt = w, r.token, as.rec.Attempt+1
	ok, err := r.write(ctx, "reassign "+op+" to "+w,
		&zk.DeleteRequest{Path: op, Version: as.st.Version},
		&zk.CreateRequest{Path: np, Data: zkr.Encode(rec), Acl: r.workerACL(w, zk.PermRead)})
	delete(r.assigns, op)
	if err != nil || !ok {
		return false, err
	}
	delete(r.dirs[as.worker], as.name)
	r.dirs[w][as.name] = true
	r.a.count(func(s *Stats) { s.Reassigned++ })
	r.a.log.Info("reassigned the task of a worker that is gone", "task", as.rec.ID, "from", as.worker, "to", w, "attempt", rec.Attempt)
	return true, nil
}

// expire deletes the results first seen more than ResultTTL ago and
// returns how long until the next one is due (0: none).
func (r *round) expire(ctx context.Context, results map[string]bool) (time.Duration, error) {
	var next time.Duration
	now := time.Now()
	for id := range results {
		n := nodeName(id)
		left := r.a.cfg.ResultTTL - now.Sub(r.firstSeen[n])
		if left > 0 {
			if next == 0 || left < next {
				next = left
			}
			continue
		}
		p := r.path(resultsDir, n)
		ok, err := r.write(ctx, "expire "+p, &zk.DeleteRequest{Path: p, Version: -1})
		if err != nil {
			return 0, err
		}
		if ok {
			r.a.count(func(s *Stats) { s.Expired++ })
		}
	}
	return next, nil
}

// write runs ops in one Multi behind the Fence's guard. A failed guard is
// ErrFenced (returned: Run ends). A connection loss is returned too: the
// round ends and the next one reads back what landed before it writes
// again (every write deletes the node it consumes at the version read,
// so a Multi that landed unseen cannot be applied twice). Any other
// failure (the state changed under the write: a node gone, re-created or
// foreign) is logged, and another round runs at once.
func (r *round) write(ctx context.Context, what string, ops ...any) (bool, error) {
	if err := r.a.fenceErr(); err != nil {
		return false, err
	}
	all := r.a.cfg.Fence.Guard(ops...)
	k := len(all) - len(ops)
	res, err := zkr.Do(ctx, r.sess, func() ([]zk.MultiResponse, error) { return r.sess.Conn().Multi(all...) }, nil)
	if err == nil {
		return true, nil
	}
	if zkx.IsConnLoss(err) || len(res) != len(all) {
		return false, fmt.Errorf("%s: %w", what, err)
	}
	for i := 0; i < k; i++ {
		if errors.Is(res[i].Error, zk.ErrNoNode) || errors.Is(res[i].Error, zk.ErrBadVersion) {
			return false, fmt.Errorf("%w: %s refused by ZooKeeper, nothing written: %w", ErrFenced, what, res[i].Error)
		}
	}
	r.a.log.Warn("write failed: the state changed under it; reading again", "what", what, "err", err)
	r.again = true
	return false, nil
}

// readReports lists <dir>/reports and each worker's report directory
// in it (per-worker ACLs). A report counts only if it matches an
// assignment of that worker read in this round (mine): the same task id,
// its worker, the attempt and the sum of the task's data. Anything else
// in a report directory (a bad name, malformed data, a report of a task
// not assigned to that worker, or of another attempt) is deleted,
// fenced, and listed as foreign: no worker can report a task it does not
// hold, nor fill the directory. Only the assigner creates assignments,
// and a worker reports only while its assignment is there (Worker 3),
// so a genuine report's assignment was listed before it.
func (r *round) readReports(ctx context.Context, mine map[string]map[string]assignment) error {
	top := r.path(reportsDir)
	workers, err := zkx.Children(ctx, r.sess, top)
	if err != nil {
		return fmt.Errorf("list %s: %w", top, err)
	}
	sort.Strings(workers)
	dirs := map[string]map[string]bool{}
	for _, w := range workers {
		rd := r.path(reportsDir, w)
		if err := zkx.ValidName(w); err != nil {
			r.a.foreign.Report(rd, "not a worker id: "+err.Error())
			continue
		}
		found, st, err := zkx.Exists(ctx, r.sess, rd)
		if err != nil {
			return fmt.Errorf("read %s: %w", rd, err)
		}
		if !found {
			continue
		}
		if limit := r.a.cfg.MaxOpen + maxStaleReports; int(st.NumChildren) > limit {
			// Its genuine reports are at most one per assignment: a
			// worker that filled it waits for an operator.
			r.a.foreign.Report(rd, fmt.Sprintf("%d reports, more than %d: not listed", st.NumChildren, limit))
			dirs[w] = map[string]bool{"": true}
			continue
		}
		r.a.foreign.Drop(rd)
		names, err := r.listDir(ctx, rd)
		if errors.Is(err, zk.ErrNoNode) {
			continue
		}
		if err != nil {
			return fmt.Errorf("list %s: %w", rd, err)
		}
		dirs[w] = make(map[string]bool, len(names))
		for _, n := range names {
			kept, err := r.readReport(ctx, w, n, mine[w])
			if err != nil {
				return err
			}
			if kept {
				dirs[w][n] = true
			}
		}
	}
	r.reportDirs = dirs
	return nil
}

// readReport reads r-<id> of worker w's report directory and adds it to
// r.reports if it matches an assignment of w in mine; otherwise it
// deletes it. kept: the node is still there.
func (r *round) readReport(ctx context.Context, w, n string, mine map[string]assignment) (bool, error) {
	p := r.path(reportsDir, w, n)
	id, ok := strings.CutPrefix(n, reportPrefix)
	var why string
	if !ok {
		why = fmt.Sprintf("name does not start with %q", reportPrefix)
	} else if err := validID(id); err != nil {
		why = fmt.Sprintf("bad task id %q: %v", id, err)
	}
	as, assigned := mine[id]
	if why == "" && !assigned {
		why = fmt.Sprintf("task %s is not assigned to worker %s", id, w)
	}
	if why != "" {
		// Deleted unread.
		return r.deleteReport(ctx, w, p, -1, why)
	}
	b, st, err := zkx.Get(ctx, r.sess, p)
	if errors.Is(err, zk.ErrNoNode) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read %s: %w", p, err)
	}
	rec, why := decodeResult(nodeName(id), b, st)
	switch {
	case why != "":
	case rec.Worker != w:
		why = fmt.Sprintf("worker %q in the report directory of %q", rec.Worker, w)
	case rec.Attempt != as.rec.Attempt:
		why = fmt.Sprintf("attempt %d; worker %s holds attempt %d of task %s", rec.Attempt, w, as.rec.Attempt, id)
	case !rec.sameSum(as.rec.Data):
		why = fmt.Sprintf("not the sum of the data of task %s", id)
	}
	if why != "" {
		return r.deleteReport(ctx, w, p, st.Version, why)
	}
	r.a.foreign.Drop(p)
	r.reports = append(r.reports, report{worker: w, name: n, data: b, rec: rec, st: *st, as: as})
	return true, nil
}

// deleteReport deletes the report p of worker w (at version), fenced,
// and lists it as foreign for why: the last keptDeletedReports of each
// worker stay listed. kept: the node may still be there.
func (r *round) deleteReport(ctx context.Context, w, p string, version int32, why string) (bool, error) {
	r.a.foreign.Report(p, why+" (deleted)")
	ok, err := r.write(ctx, "delete the report "+p+" ("+why+")", &zk.DeleteRequest{Path: p, Version: version})
	if err != nil || !ok {
		return true, err
	}
	d := r.deletedReports[w]
	for i, x := range d {
		if x == p {
			d = append(d[:i], d[i+1:]...)
			break
		}
	}
	d = append(d, p)
	if len(d) > keptDeletedReports {
		r.a.foreign.Drop(d[0])
		d = d[1:]
	}
	r.deletedReports[w] = d
	return false, nil
}

// moveReport moves a result from its worker's report directory to
// <dir>/results, in one fenced Multi: delete it and the assignment it
// reports (each at the version read), create the result with the same
// data, readable by that worker.
func (r *round) moveReport(ctx context.Context, rp report) (bool, error) {
	op := r.path(reportsDir, rp.worker, rp.name)
	ap := r.path(assignDir, rp.worker, rp.as.name)
	np := r.path(resultsDir, nodeName(rp.rec.ID))
	ok, err := r.write(ctx, "move the result "+op+" to "+np,
		&zk.DeleteRequest{Path: op, Version: rp.st.Version},
		&zk.DeleteRequest{Path: ap, Version: rp.as.st.Version},
		&zk.CreateRequest{Path: np, Data: rp.data, Acl: r.workerACL(rp.worker, zk.PermRead)})
	if err != nil || !ok {
		return false, err
	}
	delete(r.reportDirs[rp.worker], rp.name)
	delete(r.dirs[rp.worker], rp.as.name)
	delete(r.assigns, ap)
	r.a.log.Debug("moved a result reported in its worker's report directory", "task", rp.rec.ID, "worker", rp.worker)
	return true, nil
}

// listDir lists the worker directory p, arming a child watch unless one
// is armed: its goroutine records it in r.fired and wakes the loop when
// it fires, or returns when the Run ends (ctx).
func (r *round) listDir(ctx context.Context, p string) ([]string, error) {
	if r.armed[p] {
		return zkx.Children(ctx, r.sess, p)
	}
	names, ch, err := zkx.ChildrenW(ctx, r.sess, p)
	if err != nil {
		return nil, err
	}
	r.armed[p] = true
	r.waiters.Add(1)
	go func() {
		defer r.waiters.Done()
		select {
		case <-ch:
		case <-ctx.Done():
			return
		}
		r.firedMu.Lock()
		r.fired[p] = true
		r.firedMu.Unlock()
		r.wake.Notify()
	}()
	return names, nil
}

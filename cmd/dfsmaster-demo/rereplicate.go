package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/recipe/lock"
	"github.com/roomlog/roomlog/recipe/tasks"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/zkx"
)

// Chunk servers and re-replication (issue 30). Chunk servers
// (dfsmaster-demo chunkserver) are workers of the recipe/tasks directory
// chunkDir(room): they register under <dir>/workers and execute the tasks
// assigned to them. The primary master, and only it, runs a rereplicator:
//
//  1. It holds the lock <dir>/assigner (recipe/lock) while it is primary,
//     and runs a tasks.Assigner fenced by that lease: a deposed master's
//     assignments fail in ZooKeeper.
//  2. Every tick it reads the placements (namespace.Placements, the
//     primary's applied state) and the live chunk servers. A server that
//     holds blocks and is not live is lost: Propose loseserver(server)
//     (idempotent), which leaves its blocks under-replicated.
//  3. For each under-replicated block with a live holder and a live
//     server that does not hold it, it submits the task rr-<block>-<gen>
//     (data: block, holders; gen: the placement's change count): the id
//     is a function of the state, so a new primary submits the same ids
//     (Submit is idempotent) and one missing replica is one task.
//  4. Each accepted result (a chunk server copied the block) becomes
//     addreplica(block, worker) through ProposeRequest with the request id
//     of the task, so a result applied by a master that then died is not
//     applied twice by the next; then the result is deleted.
//
// The assigner picks, for a task, the least loaded live chunk server that
// does not hold the block.

// workerACL is the assigner's per-worker ACL configuration for workers
// (chunk server id -> x509 identity): WorkerACL names the identity of a
// listed chunk server (none for another: it gets no tasks) and
// WorkerIdentities all of them, in id order. nil, nil without workers.
func workerACL(workers map[string]string) (func(string) []zk.ACL, []zk.ACL) {
	if len(workers) == 0 {
		return nil, nil
	}
	ids := slices.Sorted(maps.Keys(workers))
	var all []zk.ACL
	for _, id := range ids {
		all = append(all, zkx.X509ACL(zk.PermAll, workers[id])...)
	}
	return func(w string) []zk.ACL {
		if s, ok := workers[w]; ok {
			return zkx.X509ACL(zk.PermAll, s)
		}
		return nil
	}, all
}

// chunkDir is the recipe/tasks directory of room's chunk servers.
func chunkDir(room string) string { return "/dfsmaster-demo/" + room + "/chunk" }

// rrTask is a re-replication task's data.
type rrTask struct {
	Block   uint64   `json:"block"`
	Gen     uint64   `json:"gen"` // the placement generation the task was made for
	Holders []string `json:"holders"`
}

// rrTaskID names the task that adds a replica to block at placement
// generation gen: the same for every master (a function of the state),
// new after every change of the block's servers.
func rrTaskID(block, gen uint64) string { return fmt.Sprintf("rr-%d-%d", block, gen) }

// rereplicator is the primary's chunk-server controller.
type rereplicator struct {
	rep  *replica.Replica
	c    *logroom.Client
	dir  string
	id   string
	log  *slog.Logger
	tick time.Duration
	// grace: how long a chunk server must be seen absent (from the
	// start of the term at the earliest) before it is declared lost: a
	// server reconnecting with a new session, or not registered yet after
	// a restart of everything, is not lost.
	grace time.Duration
	// missing: since when each absent server has been seen absent in
	// this term (the controller's goroutine only).
	missing map[string]time.Time
	// workers: chunk server id -> x509 identity (--zk-acl-x509-worker);
	// nil: every task znode gets the session's ACL.
	workers map[string]string

	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	stats rrStats
}

// rrStats is what the controller did (for /v1/status-like reporting and
// tests).
type rrStats struct {
	Terms     int // times this master started controlling (became primary)
	Lost      int // loseserver proposals applied
	Submitted int // tasks submitted (Submit calls that did not fail)
	Applied   int // results applied as addreplica (not duplicates)
	Dups      int // results whose addreplica was a duplicate (applied before)
}

// startRereplicator starts the controller of master id. workers, when
// set, maps each chunk server id to its x509 identity: the assigner's
// per-worker ACLs (workerACL).
func startRereplicator(rep *replica.Replica, c *logroom.Client, room, id string, grace time.Duration, workers map[string]string, log *slog.Logger) *rereplicator {
	ctx, cancel := context.WithCancel(context.Background())
	r := &rereplicator{rep: rep, c: c, dir: chunkDir(room), id: id, log: log, tick: 200 * time.Millisecond, grace: grace,
		workers: workers, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.run(ctx)
	}()
	return r
}

func (r *rereplicator) Close() {
	r.cancel()
	<-r.done
}

func (r *rereplicator) Stats() rrStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stats
}

// run waits to be primary, then controls until it no longer is.
func (r *rereplicator) run(ctx context.Context) {
	for ctx.Err() == nil {
		if r.rep.Status().Role != replica.RolePrimary {
			_ = sleepCtx(ctx, r.tick)
			continue
		}
		if err := r.term(ctx); err != nil && ctx.Err() == nil {
			r.log.Warn("re-replication stopped; retrying", "err", err)
			_ = sleepCtx(ctx, time.Second)
		}
	}
}

// term holds the assigner lock while this master is primary and runs
// the assigner and the control loop under it.
func (r *rereplicator) term(ctx context.Context) error {
	if err := zkx.EnsurePath(ctx, r.c, r.dir); err != nil {
		return fmt.Errorf("create %s: %w", r.dir, err)
	}
	mu, err := lock.New(ctx, lock.Config{Client: r.c, Dir: r.dir + "/assigner", ID: r.id})
	if err != nil {
		return err
	}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = mu.Close(cctx)
		cancel()
	}()
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	lease, err := mu.Lock(lctx)
	cancel()
	if err != nil {
		return fmt.Errorf("assigner lock: %w", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = lease.Unlock(uctx)
		cancel()
	}()
	tctx, stop := context.WithCancel(ctx)
	defer stop()
	acfg := tasks.AssignerConfig{Client: r.c, Dir: r.dir, Fence: lease, Pick: pickTarget, Logger: r.log}
	acfg.WorkerACL, acfg.WorkerIdentities = workerACL(r.workers)
	a, err := tasks.NewAssigner(acfg)
	if err != nil {
		return err
	}
	assignerDone := make(chan error, 1)
	go func() { assignerDone <- a.Run(tctx) }()
	r.mu.Lock()
	r.stats.Terms++
	r.mu.Unlock()
	r.missing = map[string]time.Time{} // absences count from the term's start
	r.log.Info("re-replication: controlling the chunk servers", "dir", r.dir)
	t := time.NewTicker(r.tick)
	defer t.Stop()
	for {
		if r.rep.Status().Role != replica.RolePrimary {
			stop()
			<-assignerDone
			return nil
		}
		leading := func() bool { return lease.Active() && r.rep.Status().Role == replica.RolePrimary }
		if err := r.step(tctx, leading); err != nil && tctx.Err() == nil {
			r.log.Warn("re-replication step failed (retried next tick)", "err", err)
		}
		select {
		case <-tctx.Done():
			<-assignerDone
			return nil
		case err := <-assignerDone:
			return fmt.Errorf("assigner: %w", err)
		case <-lease.Done():
			stop()
			<-assignerDone
			return errors.New("assigner lock lost")
		case <-t.C:
		}
	}
}

// step is one round of the control loop. leading is checked again before
// each submit: a master that lost its lease or its role (its state may be
// stale) must not submit a task for a placement generation already done.
func (r *rereplicator) step(ctx context.Context, leading func() bool) error {
	if r.rep.Status().RoomVersion < 2 {
		// addreplica and loseserver are commands masters of v0.1.0 reject:
		// proposed only where every master reads them (room version 2).
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	live, err := r.liveServers(ctx)
	if err != nil {
		return err
	}
	// 4. Results first, and the placements read after them: a task whose
	// result was applied and deleted must not be submitted again from a
	// placement read before (it would run twice).
	if err := r.applyResults(ctx); err != nil {
		return err
	}
	v, err := r.rep.Store().View()
	if err != nil {
		return err
	}
	ps, err := namespace.Placements(v)
	v.Close()
	if err != nil {
		return err
	}
	// 2. Lost servers: absent for the grace period.
	lost := map[string]bool{}
	now := time.Now()
	for _, p := range ps {
		for _, s := range p.Servers {
			if live[s] {
				continue
			}
			since, ok := r.missing[s]
			if !ok {
				r.missing[s] = now
				continue
			}
			if now.Sub(since) >= r.grace {
				lost[s] = true
			}
		}
	}
	for s := range r.missing {
		if live[s] {
			delete(r.missing, s)
		}
	}
	for _, s := range sortedKeys(lost) {
		if err := r.propose(ctx, "", namespace.Command{Op: namespace.OpLoseServer, Server: s}); err != nil {
			return err
		}
		r.mu.Lock()
		r.stats.Lost++
		r.mu.Unlock()
		r.log.Warn("chunk server lost: its blocks are re-replicated", "server", s)
	}
	if len(lost) > 0 {
		return nil // re-read the placements next tick
	}
	// 3. Under-replicated blocks.
	for _, p := range ps {
		if !p.UnderReplicated() || !hasLive(live, p.Servers) || !hasTarget(live, p.Servers) {
			continue // complete, no live copy to copy from, or nowhere to copy to
		}
		if !leading() {
			return nil
		}
		data, err := json.Marshal(rrTask{Block: p.Block, Gen: p.Gen, Holders: p.Servers})
		if err != nil {
			return err
		}
		if err := tasks.Submit(ctx, r.c, r.dir, rrTaskID(p.Block, p.Gen), data); err != nil {
			if errors.Is(err, tasks.ErrTooMany) || errors.Is(err, tasks.ErrFull) {
				return nil // the assigner catches up first
			}
			return err
		}
		r.mu.Lock()
		r.stats.Submitted++
		r.mu.Unlock()
	}
	return nil
}

// applyResults turns accepted results into addreplica and deletes them.
func (r *rereplicator) applyResults(ctx context.Context) error {
	names, err := zkx.Children(ctx, r.c, r.dir+"/results")
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, n := range names {
		id, ok := strings.CutPrefix(n, "t-")
		if !ok || !strings.HasPrefix(id, "rr-") {
			continue
		}
		res, found, err := tasks.ReadResult(ctx, r.c, r.dir, id)
		if err != nil || !found {
			continue
		}
		block, gen, ok := parseRRTaskID(id)
		if ok && res.OK {
			// Recorded only if the placement is still at the generation
			// the task was made for (a task submitted from a stale view
			// never adds a replica).
			cmd := namespace.Command{Op: namespace.OpAddReplica, Block: block, Server: res.Worker, Expect: gen + 1}
			if err := r.propose(ctx, "task/"+id, cmd); err != nil {
				return err
			}
		} else {
			r.log.Warn("re-replication task failed; it is submitted again", "task", id, "worker", res.Worker, "result", string(res.Result))
		}
		if err := tasks.DeleteResult(ctx, r.c, r.dir, id); err != nil {
			return err
		}
	}
	return nil
}

// propose proposes cmd (with request id key when not empty).
func (r *rereplicator) propose(ctx context.Context, key string, cmd namespace.Command) error {
	entry, err := namespace.EncodeCommand(cmd)
	if err != nil {
		return err
	}
	var res replica.Result
	if key != "" {
		res, err = r.rep.ProposeRequest(ctx, replica.RequestIDFromKey(key), entry)
	} else {
		res, err = r.rep.Propose(ctx, entry)
	}
	if err != nil {
		return err
	}
	resp, err := namespace.DecodeResponse(res.Response)
	if err != nil {
		return err
	}
	if err := resp.Err(); err != nil {
		if errors.Is(err, namespace.ErrNotFound) || errors.Is(err, namespace.ErrAlreadyExists) {
			// The block is gone, or its placement changed since the task
			// was made: nothing to record.
			r.log.Info("re-replication result not recorded", "op", cmd.Op, "block", cmd.Block, "reason", err)
			return nil
		}
		return fmt.Errorf("%s: %w", cmd.Op, err)
	}
	if cmd.Op == namespace.OpAddReplica {
		r.mu.Lock()
		if res.Duplicate {
			r.stats.Dups++
		} else {
			r.stats.Applied++
		}
		r.mu.Unlock()
	}
	return nil
}

// liveServers lists the registered chunk servers: the ephemeral nodes
// under <dir>/workers (a persistent node there is forged: ignored).
func (r *rereplicator) liveServers(ctx context.Context) (map[string]bool, error) {
	p := r.dir + "/workers"
	names, err := zkx.Children(ctx, r.c, p)
	if errors.Is(err, zk.ErrNoNode) {
		return map[string]bool{}, nil
	}
	if err != nil {
		return nil, err
	}
	live := make(map[string]bool, len(names))
	for _, n := range names {
		ok, st, err := zkx.Exists(ctx, r.c, p+"/"+n)
		if err != nil {
			return nil, err
		}
		if ok && st.EphemeralOwner != 0 {
			live[n] = true
		}
	}
	return live, nil
}

func hasLive(live map[string]bool, holders []string) bool {
	for _, h := range holders {
		if live[h] {
			return true
		}
	}
	return false
}

func hasTarget(live map[string]bool, holders []string) bool {
	for s := range live {
		if !slices.Contains(holders, s) {
			return true
		}
	}
	return false
}

func parseRRTaskID(id string) (block, gen uint64, ok bool) {
	parts := strings.Split(id, "-")
	if len(parts) != 3 || parts[0] != "rr" {
		return 0, 0, false
	}
	b, err1 := strconv.ParseUint(parts[1], 10, 64)
	g, err2 := strconv.ParseUint(parts[2], 10, 64)
	return b, g, err1 == nil && err2 == nil && b > 0 && g < 1<<62
}

// pickTarget is the assigner's Pick: the least loaded live chunk server
// (workers come least loaded first) that does not hold the block.
func pickTarget(t tasks.Task, workers []string) string {
	var d rrTask
	if err := json.Unmarshal(t.Data, &d); err != nil {
		return ""
	}
	for _, w := range workers {
		if !slices.Contains(d.Holders, w) {
			return w
		}
	}
	return ""
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

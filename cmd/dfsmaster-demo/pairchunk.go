package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
)

// The pair demo's chunk servers (issue 30): N chunk-server processes, a
// block writer placing every block it adds on 3 live ones, one chunk
// server killed with kill -9 before the primary is, and a check at the
// end that every placed block is back at its replication factor with no
// task done twice.

// chunkRF is the replication factor of the block writer's files.
const chunkRF = 3

// pairChunkGrace is the masters' --chunk-grace in the demo: how long a
// chunk server's membership node must be gone before it is lost.
const pairChunkGrace = time.Second

type pairChunks struct {
	p      *pair
	n      int
	mu     sync.Mutex
	live   []string            // chunk servers alive (the block writer places on them)
	procs  map[string]*child   // by id
	done   map[string][]string // task id -> chunk servers that reported it done
	killed []string
	// killAt: when the primary was killed; before/after: tasks reported
	// done before and after it.
	killAt        time.Time
	before, after int
	// held: blocks acknowledged on each chunk server; heldAtKill: what
	// the killed ones held when they were killed (nothing to re-replicate
	// when 0).
	held       map[string]int
	heldAtKill int

	blocks   atomic.Int64 // blocks the block writer added (acknowledged)
	writeErr atomic.Pointer[error]
	stop     chan struct{}
	wg       sync.WaitGroup
}

// chunkResult is the RESULT line's chunk-server part.
type chunkResult struct {
	ChunkServers       int   `json:"chunkservers"`
	ChunkServersKilled int   `json:"chunkservers_killed"`
	BlocksPlaced       int64 `json:"blocks_placed"`
	RereplicationTasks int   `json:"rereplication_tasks"`
	// TasksAfterFailover: of those, reported after the primary was killed
	// (the new primary accepted them).
	TasksAfterFailover    int `json:"rereplication_tasks_after_failover"`
	TasksDoneTwice        int `json:"tasks_done_twice"`
	BlocksUnderReplicated int `json:"blocks_under_replicated"`
	// BlocksOnKilled: blocks the killed chunk servers held when killed.
	BlocksOnKilled int `json:"blocks_on_killed"`
}

// killHoldWait bounds kill's wait for the victim to hold a block.
const killHoldWait = 5 * time.Second

// startChunks raises the room to room version 2 (placements need every
// master to read them), starts n chunk servers and the block writer.
func (p *pair) startChunks(ctx context.Context, n int) (*pairChunks, error) {
	pc := &pairChunks{p: p, n: n, procs: map[string]*child{}, done: map[string][]string{}, held: map[string]int{}, stop: make(chan struct{})}
	if err := p.raiseRoomVersion(ctx); err != nil {
		return nil, err
	}
	for i := 1; i <= n; i++ {
		id := chunkID(i)
		args := []string{"chunkserver", "--zk", p.zkConn, "--room", p.cfg.room, "--id", id,
			"--session-timeout", p.cfg.sessionTimeout.String(), "--copy-time", "100ms"}
		if p.digestFile != "" {
			args = append(args, "--zk-digest-file", p.digestFile)
		}
		args = append(args, p.zkTLSArgs(id)...)
		sctx, cancel := context.WithTimeout(ctx, startTimeout)
		c, err := startChildWith(sctx, p.sp, id, p.cfg.bin, args, filepath.Join(p.tmp, id+".log"), chunkServingPrefix, func(line string) {
			if rest, ok := strings.CutPrefix(line, chunkDonePrefix); ok && strings.Contains(rest, "ok=true") {
				task := strings.Fields(rest)[0]
				pc.mu.Lock()
				pc.done[task] = append(pc.done[task], id)
				if pc.killAt.IsZero() {
					pc.before++
				} else {
					pc.after++
				}
				pc.mu.Unlock()
			}
		})
		cancel()
		if err != nil {
			return nil, err
		}
		p.procs.add(c)
		pc.procs[id] = c
		pc.live = append(pc.live, id)
	}
	p.step("%d chunk servers joined (cs1..cs%d); a block writer places every block it adds on %d of them", n, n, chunkRF)
	pc.wg.Add(1)
	go func() {
		defer pc.wg.Done()
		if err := pc.writeBlocks(ctx); err != nil {
			pc.writeErr.Store(&err)
		}
	}()
	return pc, nil
}

// chunkID is the id of the pair's i-th chunk server (from 1).
func chunkID(i int) string { return fmt.Sprintf("cs%d", i) }

// raiseRoomVersion sets the room's target to room version 2 and waits
// until the primary moved the room there.
func (p *pair) raiseRoomVersion(ctx context.Context) error {
	var auth *logroom.Digest
	if p.digestFile != "" {
		d, err := logroom.LoadDigestFile(p.digestFile)
		if err != nil {
			return err
		}
		auth = d
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := logroom.Dial(dctx, p.zkDial(logroom.DialConfig{Servers: strings.Split(p.zkConn, ","), Auth: auth}))
	if err != nil {
		return fmt.Errorf("raise the room version: %w", err)
	}
	defer c.Close()
	if err := replica.SetRoomVersionTarget(dctx, c, "", p.cfg.room, 2); err != nil {
		return fmt.Errorf("raise the room version: %w", err)
	}
	for {
		st, err := p.status(dctx, p.primaryID(dctx))
		if err == nil && st.RoomVersion >= 2 {
			p.step("room at room version 2 (block placements need every master to read them)")
			return nil
		}
		if serr := sleepCtx(dctx, 50*time.Millisecond); serr != nil {
			return fmt.Errorf("the room did not reach room version 2 within 30s (last status error %v)", err)
		}
	}
}

// primaryID is the master whose status says primary (the first when
// none does).
func (p *pair) primaryID(ctx context.Context) string {
	for _, id := range p.order {
		if st, err := p.status(ctx, id); err == nil && st.Role == api.RolePrimary {
			return id
		}
	}
	return p.order[0]
}

// writeBlocks adds blocks to files /chunks/f<k>, each on chunkRF live
// chunk servers, until stopped.
func (pc *pairChunks) writeBlocks(ctx context.Context) error {
	var file string
	for k := 0; ; k++ {
		select {
		case <-pc.stop:
			return nil
		case <-ctx.Done():
			return nil
		default:
		}
		if k%20 == 0 {
			file = fmt.Sprintf("/chunks/f%d", k/20)
			if err := pc.retryOp(ctx, func(ctx context.Context, cl *client.Client) error {
				_, err := cl.Mkdir(ctx, "/chunks", true)
				if err != nil {
					return err
				}
				_, err = cl.Create(ctx, file, chunkRF)
				if errors.Is(err, namespace.ErrAlreadyExists) {
					return nil // a retry of an applied create
				}
				return err
			}); err != nil {
				return err
			}
		}
		pc.mu.Lock()
		live := slices.Clone(pc.live)
		pc.mu.Unlock()
		rand.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
		on := live[:min(chunkRF, len(live))]
		key := client.NewIdempotencyKey()
		if err := pc.retryOp(ctx, func(ctx context.Context, cl *client.Client) error {
			_, err := cl.AddBlockOn(ctx, file, 1<<20, on, client.IdempotencyKey(key))
			return err
		}); err != nil {
			return err
		}
		pc.blocks.Add(1)
		pc.mu.Lock()
		for _, s := range on {
			pc.held[s]++
		}
		pc.mu.Unlock()
		if sleepCtx(ctx, 20*time.Millisecond) != nil {
			return nil
		}
	}
}

// retryOp retries op (bounded per attempt, each on the next master)
// until it succeeds, the writer is stopped or 60 s pass.
func (pc *pairChunks) retryOp(ctx context.Context, op func(context.Context, *client.Client) error) error {
	deadline := time.Now().Add(60 * time.Second)
	for attempt := 0; ; attempt++ {
		cl, err := pc.p.eps.client(attempt)
		if err == nil {
			actx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err = op(actx, cl)
			cancel()
		}
		if err == nil {
			return nil
		}
		select {
		case <-pc.stop:
			return nil
		default:
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("block writer: %w", err)
		}
		if sleepCtx(ctx, 50*time.Millisecond) != nil {
			return nil
		}
	}
}

// primaryKilled records when the primary was killed.
func (pc *pairChunks) primaryKilled(at time.Time) {
	pc.mu.Lock()
	pc.killAt = at
	pc.mu.Unlock()
}

// kill kill -9s chunk server id, once it holds a block (waiting at most
// killHoldWait: on a loaded machine the block writer may not have placed
// one there yet, and a server that holds nothing leaves nothing to
// re-replicate).
func (pc *pairChunks) kill(ctx context.Context, id string) {
	deadline := time.Now().Add(killHoldWait)
	for {
		pc.mu.Lock()
		n := pc.held[id]
		pc.mu.Unlock()
		if n > 0 || time.Now().After(deadline) || sleepCtx(ctx, 20*time.Millisecond) != nil {
			break
		}
	}
	pc.mu.Lock()
	pc.heldAtKill += pc.held[id]
	pc.live = slices.DeleteFunc(pc.live, func(s string) bool { return s == id })
	pc.killed = append(pc.killed, id)
	c := pc.procs[id]
	pc.mu.Unlock()
	pc.p.step("kill -9 chunk server %s (pid %d): the primary re-replicates the blocks it held", id, c.pid())
	c.kill()
}

// stopWriter stops the block writer and returns its error.
func (pc *pairChunks) stopWriter() error {
	select {
	case <-pc.stop:
	default:
		close(pc.stop)
	}
	pc.wg.Wait()
	if e := pc.writeErr.Load(); e != nil {
		return *e
	}
	return nil
}

// check waits until the placements on master id have no under-replicated
// block and name no killed server, and fills r.
func (pc *pairChunks) check(ctx context.Context, addr string, minIndex uint64, r *chunkResult) error {
	cl, err := client.New(addr, pc.p.eps.hc)
	if err != nil {
		return err
	}
	r.ChunkServers, r.ChunkServersKilled, r.BlocksPlaced = pc.n, len(pc.killed), pc.blocks.Load()
	pc.mu.Lock()
	r.BlocksOnKilled = pc.heldAtKill
	pc.mu.Unlock()
	deadline := time.Now().Add(convergeTimeout)
	var last api.PlacementsResponse
	for {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		last, err = cl.Placements(qctx, minIndex)
		cancel()
		if err == nil {
			r.BlocksUnderReplicated = last.UnderReplicated
			stale := 0
			for _, pl := range last.Placements {
				for _, k := range pc.killed {
					if slices.Contains(pl.Servers, k) {
						stale++
					}
				}
			}
			if last.UnderReplicated == 0 && stale == 0 && int64(len(last.Placements)) >= r.BlocksPlaced {
				break
			}
			r.BlocksUnderReplicated += stale
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("blocks still under-replicated %v after the workload (%d of %d placements; last error %v)",
				convergeTimeout, r.BlocksUnderReplicated, len(last.Placements), err)
		}
		if sleepCtx(ctx, 100*time.Millisecond) != nil {
			return interrupted(ctx)
		}
	}
	pc.mu.Lock()
	defer pc.mu.Unlock()
	for _, by := range pc.done {
		r.RereplicationTasks += len(by)
		if len(by) > 1 {
			r.TasksDoneTwice++
		}
	}
	r.TasksAfterFailover = pc.after
	pc.p.step("chunk servers: %d placed blocks all at replication factor %d after %s was killed; %d re-replication tasks done (%d before the primary was killed, %d after), %d twice",
		len(last.Placements), chunkRF, strings.Join(pc.killed, ","), r.RereplicationTasks, pc.before, pc.after, r.TasksDoneTwice)
	return nil
}

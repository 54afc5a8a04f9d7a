package tasks_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/tasks"
	"github.com/roomlog/roomlog/zkx"
)

// monitor looks for a task assigned to two workers at once. A listing of
// several directories is not atomic, so a task seen under two workers is
// confirmed: node A exists, node B exists, node A still exists with the
// same czxid — a node is never re-created with the same czxid, so A
// existed throughout and both existed when B was read.
type monitor struct {
	c          *zkx.Client
	dir        string
	violations atomic.Int64
	mu         sync.Mutex
	report     []string
}

func (m *monitor) czxid(p string) int64 {
	ok, st, err := m.c.Conn().Exists(p)
	if err != nil || !ok {
		return 0
	}
	return st.Czxid
}

func (m *monitor) scan() {
	workers, _, err := m.c.Conn().Children(m.dir + "/assign")
	if err != nil {
		return
	}
	where := map[string]string{}
	for _, w := range workers {
		names, _, err := m.c.Conn().Children(m.dir + "/assign/" + w)
		if err != nil {
			continue
		}
		for _, n := range names {
			p := m.dir + "/assign/" + w + "/" + n
			if q, dup := where[n]; dup {
				a := m.czxid(q)
				b := m.czxid(p)
				if a != 0 && b != 0 && m.czxid(q) == a {
					m.violations.Add(1)
					m.mu.Lock()
					if len(m.report) < 5 {
						m.report = append(m.report, fmt.Sprintf("%s and %s exist at once", q, p))
					}
					m.mu.Unlock()
				}
			}
			where[n] = p
		}
	}
}

// TestRandomized kills assigners and workers at random while 300 tasks
// are submitted and worked on (sessions expired through the proxies,
// clients closed and replaced), then lets everything heal. The checker:
// every submitted task ends with exactly one result, that result's
// attempt was delivered to the worker that reported it, each attempt of
// a task went to one worker only, at most one Report per task was
// accepted, and the monitor never saw a task assigned to two workers at
// once.
func TestRandomized(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	l := newLedger()

	const nWorkers, nCands, nTasks = 4, 2, 300
	type workerSlot struct {
		p  *recipetest.Proxied
		tw *testWorker
	}
	workers := make([]*workerSlot, nWorkers)
	startW := func(i int) {
		p := recipetest.DialProxied(t)
		delay := time.Duration(rng.IntN(15)) * time.Millisecond
		tw := startWorker(t, p.Client, dir, fmt.Sprintf("w%d", i), l, workerOpts{delay: delay})
		workers[i] = &workerSlot{p: p, tw: tw}
	}
	for i := range workers {
		startW(i)
	}
	var runs atomic.Int64
	cctx, stopCands := context.WithCancel(ctx)
	type candSlot struct {
		p    *recipetest.Proxied
		done <-chan struct{}
	}
	cands := make([]*candSlot, nCands)
	gen := 0
	startC := func(i int) {
		p := recipetest.DialProxied(t)
		gen++
		cands[i] = &candSlot{p: p, done: candidate(cctx, t, p.Client, dir, fmt.Sprintf("a%d", gen), &runs, nil)}
	}
	for i := range cands {
		startC(i)
	}
	defer func() {
		stopCands()
		for _, c := range cands {
			<-c.done
		}
	}()

	mon := &monitor{c: admin, dir: dir}
	monDone := make(chan struct{})
	monStop := make(chan struct{})
	go func() {
		defer close(monDone)
		for {
			select {
			case <-monStop:
				return
			case <-time.After(20 * time.Millisecond):
				mon.scan()
			}
		}
	}()

	// Submit in batches while the chaos runs.
	var ids []string
	subDone := make(chan struct{})
	go func() {
		defer close(subDone)
		for b := 0; b < 10; b++ {
			for i := b * nTasks / 10; i < (b+1)*nTasks/10; i++ {
				id := fmt.Sprintf("task-%04d", i)
				if err := tasks.Submit(ctx, admin, dir, id, []byte(fmt.Sprintf("data-%d", i))); err != nil {
					t.Errorf("submit %s: %v", id, err)
					return
				}
			}
			time.Sleep(400 * time.Millisecond)
		}
	}()
	for i := 0; i < nTasks; i++ {
		ids = append(ids, fmt.Sprintf("task-%04d", i))
	}

	var cuts sync.WaitGroup
	expire := func(p *recipetest.Proxied) {
		p.Proxy.Cut()
		cuts.Add(1)
		go func() {
			defer cuts.Done()
			time.Sleep(recipetest.ProxiedSession + 700*time.Millisecond)
			p.Proxy.Heal()
		}()
	}
	kills := map[string]int{}
	chaosEnd := time.Now().Add(10 * time.Second)
	for time.Now().Before(chaosEnd) {
		time.Sleep(time.Duration(300+rng.IntN(500)) * time.Millisecond)
		switch k := rng.IntN(4); k {
		case 0: // a worker's session expires
			expire(workers[rng.IntN(nWorkers)].p)
			kills["worker expired"]++
		case 1: // a worker is killed and replaced
			i := rng.IntN(nWorkers)
			workers[i].p.Client.Close()
			workers[i].tw.stop()
			startW(i)
			kills["worker killed"]++
		case 2: // an assigner candidate's session expires
			expire(cands[rng.IntN(nCands)].p)
			kills["assigner expired"]++
		case 3: // an assigner candidate is killed and replaced
			i := rng.IntN(nCands)
			cands[i].p.Client.Close()
			<-cands[i].done
			startC(i)
			kills["assigner killed"]++
		}
	}
	cuts.Wait()
	<-subDone
	t.Logf("kills: %v; assigner runs: %d", kills, runs.Load())

	res := waitResults(t, admin, dir, ids, 40*time.Second)
	close(monStop)
	<-monDone
	mon.scan()
	require.Zero(t, mon.violations.Load(), "assigned twice at once: %s", strings.Join(mon.report, "; "))
	l.check(t)
	l.mu.Lock()
	for id, r := range res {
		ws := l.delivered[id][r.Attempt]
		require.NotEmpty(t, ws, "task %s: result of attempt %d never delivered", id, r.Attempt)
		require.Equal(t, r.Worker, ws[0], "task %s: result from a worker the attempt was not assigned to", id)
		if acc := l.accepted[id]; len(acc) == 1 {
			require.Equal(t, fmt.Sprintf("%s/%d", r.Worker, r.Attempt), acc[0], "task %s", id)
		}
	}
	l.mu.Unlock()
	require.Len(t, children(t, admin, dir+"/results"), nTasks, "exactly one result per task, nothing else")
	require.Empty(t, children(t, admin, dir+"/tasks"))
	require.Empty(t, openAssignments(t, admin, dir))
}

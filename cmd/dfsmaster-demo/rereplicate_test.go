package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
)

// chunkFleet runs chunk servers in this process (runChunkServer), each
// stoppable; it counts the tasks each reported.
type chunkFleet struct {
	t    *testing.T
	zk   string
	room string

	mu      sync.Mutex
	cancels map[string]context.CancelFunc
	done    map[string][]string // task id -> servers that reported it ok
	wg      sync.WaitGroup
}

func newChunkFleet(t *testing.T, ens *zkensemble.Ensemble, room string) *chunkFleet {
	f := &chunkFleet{t: t, zk: ens.ConnString(), room: room, cancels: map[string]context.CancelFunc{}, done: map[string][]string{}}
	t.Cleanup(func() {
		f.mu.Lock()
		for _, c := range f.cancels {
			c()
		}
		f.mu.Unlock()
		f.wg.Wait()
	})
	return f
}

func (f *chunkFleet) start(id string) {
	ctx, cancel := context.WithCancel(context.Background())
	pr, pw := io.Pipe()
	joined := make(chan struct{})
	f.mu.Lock()
	f.cancels[id] = cancel
	f.mu.Unlock()
	f.wg.Add(2)
	go func() {
		defer f.wg.Done()
		defer pw.Close()
		runChunkServer(ctx, []string{"--zk", f.zk, "--room", f.room, "--id", id, "--session-timeout", "2s"}, pw, io.Discard)
	}()
	go func() {
		defer f.wg.Done()
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			line := sc.Text()
			if strings.HasPrefix(line, chunkServingPrefix) {
				close(joined)
			}
			if rest, ok := strings.CutPrefix(line, chunkDonePrefix); ok && strings.Contains(rest, "ok=true") {
				task := strings.Fields(rest)[0]
				f.mu.Lock()
				f.done[task] = append(f.done[task], id)
				f.mu.Unlock()
			}
		}
	}()
	select {
	case <-joined:
	case <-time.After(30 * time.Second):
		f.t.Fatalf("chunk server %s did not join", id)
	}
}

// stop ends a chunk server (it leaves: its membership node goes).
func (f *chunkFleet) stop(id string) {
	f.mu.Lock()
	c := f.cancels[id]
	delete(f.cancels, id)
	f.mu.Unlock()
	c()
}

func (f *chunkFleet) doneTwice() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for task, by := range f.done {
		if len(by) > 1 {
			out = append(out, fmt.Sprintf("%s by %v", task, by))
		}
	}
	return out
}

// waitPlacements waits until every placement on the master at addr has
// its replication factor and names none of gone.
func waitPlacements(t *testing.T, addr string, blocks int, gone ...string) api.PlacementsResponse {
	t.Helper()
	c, err := client.New(addr, nil)
	require.NoError(t, err)
	var last api.PlacementsResponse
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		p, err := c.Placements(ctx, 0)
		if err != nil {
			return false
		}
		last = p
		if len(p.Placements) != blocks || p.UnderReplicated != 0 {
			return false
		}
		for _, pl := range p.Placements {
			for _, g := range gone {
				if slices.Contains(pl.Servers, g) {
					return false
				}
			}
		}
		return true
	}, 60*time.Second, 50*time.Millisecond, "every block back at its replication factor without %v", gone)
	return last
}

// TestRereplication: blocks placed on chunk servers; a chunk server lost
// → the primary re-replicates every block it held (one task per missing
// replica, executed by a live server that did not hold the block); then
// the primary itself goes and another chunk server is lost: the new
// primary finishes the job. No task is done twice; every block ends at
// its replication factor.
func TestRereplication(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	dir := t.TempDir()
	const room = "rr-test"
	chunk := func(c *serveConfig) { c.ChunkServers = true }
	m1 := openTestMaster(t, ens, room, "m1", dir, chunk)
	require.Eventually(t, func() bool { return apiStatus(t, m1.Addr()).Role == api.RolePrimary }, 30*time.Second, 20*time.Millisecond)
	m2 := openTestMaster(t, ens, room, "m2", dir, chunk)
	require.Eventually(t, func() bool { return apiStatus(t, m2.Addr()).Role == api.RoleStandby }, 30*time.Second, 20*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	c, err := client.New(m1.Addr(), nil)
	require.NoError(t, err)
	_, err = c.Create(ctx, "/f", 3)
	require.NoError(t, err)
	// Placements need room version 2 (every master reads them).
	_, err = c.AddBlockOn(ctx, "/f", 1, []string{"cs0", "cs1", "cs2"})
	require.ErrorContains(t, err, "room version 2")
	require.NoError(t, m1.rep.SetRoomVersion(ctx, 2))
	require.Eventually(t, func() bool { return m1.rep.Status().RoomVersion == 2 }, 30*time.Second, 20*time.Millisecond)

	fleet := newChunkFleet(t, ens, room)
	servers := []string{"cs0", "cs1", "cs2", "cs3", "cs4"}
	for _, s := range servers {
		fleet.start(s)
	}
	const blocks = 24
	for i := 0; i < blocks; i++ {
		on := []string{servers[i%5], servers[(i+1)%5], servers[(i+2)%5]}
		_, err := c.AddBlockOn(ctx, "/f", 1, on)
		require.NoError(t, err)
	}
	waitPlacements(t, m1.Addr(), blocks)

	// A chunk server lost: its blocks come back elsewhere.
	fleet.stop("cs1")
	waitPlacements(t, m1.Addr(), blocks, "cs1")
	st := m1.rr.Stats()
	require.Positive(t, st.Applied)
	require.Equal(t, 1, st.Lost)

	// The primary leaves, and another chunk server is lost.
	require.NoError(t, m1.Close())
	require.Eventually(t, func() bool { return apiStatus(t, m2.Addr()).Role == api.RolePrimary }, 30*time.Second, 20*time.Millisecond)
	fleet.stop("cs3")
	p := waitPlacements(t, m2.Addr(), blocks, "cs1", "cs3")
	for _, pl := range p.Placements {
		require.Len(t, pl.Servers, 3, "block %d", pl.Block)
	}
	require.Empty(t, fleet.doneTwice(), "no task done twice")
	require.Positive(t, m2.rr.Stats().Applied, "the new primary re-replicated")
}

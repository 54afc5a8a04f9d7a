package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/internal/infra/faultnet"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
)

// TestPartitionedStandbyDoesNotStopMutations is issue 32's whole-system
// check, over the demo's HTTP API on real ZooKeeper: three masters, each
// behind its own fault proxy; twelve sequential clients, each writing to
// the primary and then reading what it wrote from any master (a Pool) with
// min_index = the index it was given. One standby is cut from ZooKeeper
// (bytes held, no RST) for longer than the session timeout. Before the fix
// every client ended up parked on that standby, so no mutation was
// acknowledged anywhere for the whole partition; now the longest time
// without an acknowledged mutation stays under a second, the cut-off
// standby refuses reads by name (503 disconnected), and every read still
// returns what its client wrote.
func TestPartitionedStandbyDoesNotStopMutations(t *testing.T) {
	if testing.Short() {
		t.Skip("whole-system partition run")
	}
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	dir := t.TempDir()
	const room = "cutoff-workload"
	const session = 2 * time.Second
	ids := []string{"m1", "m2", "m3"}
	proxies := map[string]*faultnet.Proxy{}
	masters := map[string]*master{}
	for _, id := range ids {
		p, err := faultnet.New(faultnet.Config{Targets: ens.Addrs()})
		require.NoError(t, err)
		t.Cleanup(func() { p.Close() })
		proxies[id] = p
	}
	for _, id := range ids {
		masters[id] = openTestMaster(t, ens, room, id, dir, func(c *serveConfig) {
			c.Servers = []string{proxies[id].Addr()}
			c.SessionTimeout = session
		})
	}
	var primary string
	require.Eventually(t, func() bool {
		n := 0
		for _, id := range ids {
			s := apiStatus(t, masters[id].Addr())
			switch s.Role {
			case api.RolePrimary:
				primary = id
			case api.RoleStandby:
				n++
			}
		}
		return primary != "" && n == len(ids)-1
	}, 30*time.Second, 20*time.Millisecond, "one primary, two standbys")
	victim := ids[0]
	if victim == primary {
		victim = ids[1]
	}
	addrs := make([]string, 0, len(ids))
	for _, id := range ids {
		addrs = append(addrs, masters[id].Addr())
	}
	hc := &http.Client{Timeout: 30 * time.Second}

	var (
		mu     sync.Mutex
		acks   []time.Time
		reads  atomic.Int64
		failed = make(chan error, 16)
	)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	const clients = 12
	for k := 0; k < clients; k++ {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			w, err := client.New(masters[primary].Addr(), hc)
			if err != nil {
				failed <- err
				return
			}
			pool, err := client.NewPool(addrs, hc)
			if err != nil {
				failed <- err
				return
			}
			for n := 0; ctx.Err() == nil; n++ {
				p := fmt.Sprintf("/c%d-%d", k, n)
				res, err := w.Mkdir(ctx, p, false)
				if err != nil {
					if ctx.Err() == nil {
						failed <- fmt.Errorf("client %d: mkdir %s: %w", k, p, err)
					}
					return
				}
				mu.Lock()
				acks = append(acks, time.Now())
				mu.Unlock()
				st, err := pool.Stat(ctx, p, res.Index)
				if err != nil {
					if ctx.Err() == nil {
						failed <- fmt.Errorf("client %d: stat %s at min_index %d: %w", k, p, res.Index, err)
					}
					return
				}
				if st.Index < res.Index {
					failed <- fmt.Errorf("client %d: stat %s answered at index %d below min_index %d", k, p, st.Index, res.Index)
					return
				}
				reads.Add(1)
			}
		}(k)
	}

	// Steady load first: the longest gap the machine shows without any
	// fault (a busy CI machine under -race stalls everything now and
	// then) is the baseline the partition's gap is judged against.
	time.Sleep(500 * time.Millisecond)
	baseFrom := time.Now()
	time.Sleep(3 * time.Second)
	cutAt := time.Now()
	proxies[victim].Blackhole()
	var refused *client.Error
	probe, err := client.New(masters[victim].Addr(), hc)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
		defer pcancel()
		_, err := probe.Stat(pctx, "/", 1<<40)
		return errors.As(err, &refused) && refused.Code == api.CodeDisconnected
	}, 10*time.Second, 50*time.Millisecond, "the cut-off standby refuses reads it cannot serve, by name")
	sawLoss := time.Since(cutAt)
	time.Sleep(2*session + time.Second - sawLoss)
	healAt := time.Now()
	proxies[victim].Heal()
	require.Eventually(t, func() bool { return apiStatus(t, masters[victim].Addr()).Connected }, 30*time.Second, 20*time.Millisecond, "the standby reconnects")
	time.Sleep(time.Second)
	end := time.Now()
	cancel()
	wg.Wait()
	select {
	case err := <-failed:
		t.Fatal(err)
	default:
	}

	mu.Lock()
	defer mu.Unlock()
	sort.Slice(acks, func(i, j int) bool { return acks[i].Before(acks[j]) })
	baseGap, _, _ := longestGap(acks, baseFrom, cutAt)
	maxGap, gapAt, during := longestGap(acks, cutAt, end)
	t.Logf("partition of %s for %v (loss seen and refused after %v): %d mutations acknowledged meanwhile and after, %d reads; "+
		"longest gap %v at +%v (%v with no fault before it) (%s)",
		victim, healAt.Sub(cutAt).Round(time.Millisecond), sawLoss.Round(time.Millisecond),
		during, reads.Load(), maxGap.Round(time.Millisecond), gapAt.Sub(cutAt).Round(time.Millisecond), baseGap.Round(time.Millisecond), refused.Message)
	require.Greater(t, during, 100, "mutations went on")
	// The bound is 1 s; what the machine stalls anyway (the
	// baseline, some 100 ms on a quiet machine) is not the partition's.
	require.Less(t, maxGap, time.Second+baseGap, "longest time without an acknowledged mutation while one standby was partitioned")
}

// longestGap is the longest time between consecutive acknowledgements in
// [from, to] (counting from from and up to to), where it began, and how
// many acknowledgements fall in the window. acks is sorted.
func longestGap(acks []time.Time, from, to time.Time) (gap time.Duration, at time.Time, n int) {
	last := from
	for _, a := range acks {
		if a.Before(from) {
			continue
		}
		if a.After(to) {
			break
		}
		n++
		if g := a.Sub(last); g > gap {
			gap, at = g, last
		}
		last = a
	}
	if g := to.Sub(last); g > gap {
		gap, at = g, last
	}
	return gap, at, n
}

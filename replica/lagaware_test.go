package replica

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/store"
)

// slowApplier is store.OpsApplier that, while slow is set, sleeps per
// entry: a member that falls behind (a slow disk, a busy host).
type slowApplier struct {
	mu   sync.Mutex
	slow time.Duration
}

func (a *slowApplier) Apply(b store.Batch, e store.Entry) ([]byte, error) {
	a.mu.Lock()
	d := a.slow
	a.mu.Unlock()
	if d > 0 {
		time.Sleep(d)
	}
	return store.OpsApplier{}.Apply(b, e)
}

func (a *slowApplier) set(d time.Duration) {
	a.mu.Lock()
	a.slow = d
	a.mu.Unlock()
}

// TestLagAwareTakeover (issue 28): when the primary goes and the next in
// line (m1) lags far behind another standby (m2), m2 takes over and m1
// does not lead; with the bound switched off, m1 would (the control run).
func TestLagAwareTakeover(t *testing.T) {
	for _, tc := range []struct {
		name  string
		bound int
		want  string
	}{
		{"bounded", 0, "m2"},    // the default bound: the caught-up standby leads
		{"unbounded", -1, "m1"}, // the lowest leads, catch-up and all
	} {
		t.Run(tc.name, func(t *testing.T) {
			slow := map[string]*slowApplier{}
			var mu sync.Mutex
			cl := newCluster(t, sharedEnsemble(t), func(cfg *Config) {
				mu.Lock()
				defer mu.Unlock()
				a := &slowApplier{}
				slow[cfg.ID] = a
				cfg.Applier = a
				cfg.TakeoverLagBound = tc.bound
				cfg.MemberUpdateInterval = 50 * time.Millisecond
			})
			p := cl.open("m0")
			require.Equal(t, p, cl.waitPrimary(30*time.Second))
			m1 := cl.open("m1") // next in line
			m2 := cl.open("m2")
			cl.waitPrimary(30 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()

			// m1 falls behind: each entry costs it 2 ms while 3000 arrive.
			mu.Lock()
			slow["m1"].set(2 * time.Millisecond)
			mu.Unlock()
			var wg sync.WaitGroup
			for g := range 30 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := range 100 {
						_, err := p.Propose(ctx, setOp(fmt.Sprintf("k%d-%d", g, i), "v"))
						require.NoError(t, err)
					}
				}()
			}
			wg.Wait()
			last := p.Status().Applied
			require.Eventually(t, func() bool {
				for _, m := range p.Status().Members {
					if m.ID == "m2" && m.Applied >= last {
						return true
					}
				}
				return false
			}, 30*time.Second, 10*time.Millisecond, "m2 caught up and published it")
			behind := last - m1.Status().Applied
			require.Greater(t, behind, uint64(DefaultTakeoverLagBound), "m1 lags by more than the bound (it applied %d of %d)", m1.Status().Applied, last)

			cl.close("m0") // resigns: m1 is the lowest candidate now
			var leader *Replica
			require.Eventually(t, func() bool {
				for _, r := range []*Replica{m1, m2} {
					if r.Status().Role == RolePrimary {
						leader = r
						return true
					}
				}
				return false
			}, 60*time.Second, 5*time.Millisecond)
			require.Equal(t, tc.want, leader.ID(), "m1 was %d entries behind when the primary left", behind)
			mu.Lock()
			slow["m1"].set(0)
			mu.Unlock()
			res, err := cl.proposeRetry(ctx, setOp("after", "failover"))
			require.NoError(t, err)
			cl.waitConverged(res.Index, 60*time.Second)
		})
	}
}

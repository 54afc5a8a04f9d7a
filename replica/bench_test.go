package replica

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkPropose: proposals of 1 KiB from 32 concurrent callers on the
// primary of a 3-member room (one ZooKeeper server).
func BenchmarkPropose(b *testing.B) {
	ens := sharedEnsemble(b)
	c := newCluster(b, ens, nil)
	c.openN(3)
	p := c.waitPrimary(20 * time.Second)
	val := strings.Repeat("x", 1024)
	ctx := context.Background()
	b.ResetTimer()
	var wg sync.WaitGroup
	const workers = 32
	per := b.N/workers + 1
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < per; i++ {
				if _, err := p.Propose(ctx, setOp(fmt.Sprintf("w%d-%d", w, i), val)); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(per*workers)/b.Elapsed().Seconds(), "proposals/s")
}

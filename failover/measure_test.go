package failover

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/testnode"
)

// TestMeasureFailover measures, on a 3-server ensemble with the package's
// session timeout, the median of 5 of:
//   - failover time: kill -9 of the primary → first proposal acknowledged
//     by the new primary (proposers retry every 10 ms);
//   - graceful transfer time: TransferLeadership called → first proposal
//     acknowledged by the target.
//
// Run with ROOMLOG_MEASURE=1 (it takes about a minute).
func TestMeasureFailover(t *testing.T) {
	if os.Getenv("ROOMLOG_MEASURE") != "1" {
		t.Skip("set ROOMLOG_MEASURE=1 to measure failover and transfer times")
	}
	const rounds = 5
	e := newEnv(t, 3, 8*time.Minute, nil)
	l := e.load(testnode.LoadOptions{Workers: 2})
	e.waitAcked(l, 100, 30*time.Second)
	loadBefore := loadAvg()

	var failovers, elections []time.Duration
	for round := range rounds {
		p := e.primary()
		e.waitAcked(l, 50, 30*time.Second)
		killed := time.Now()
		require.NoError(t, p.Kill())
		np, seen := e.waitNewPrimary(p, sessionTimeout+10*time.Second)
		e.waitFor(30*time.Second, "an acknowledgement by the new primary", func() bool {
			_, ok := e.h.FirstAckAfter(killed, p.ID())
			return ok
		})
		first, _ := e.h.FirstAckAfter(killed, p.ID())
		failovers = append(failovers, first.End.Sub(killed))
		elections = append(elections, seen.Sub(killed))
		t.Logf("failover %d: %s killed, %s primary after %v, first ack after %v", round, p.ID(), np.ID(), seen.Sub(killed), first.End.Sub(killed))
		require.NoError(t, p.Restart(e.ctx))
		e.primary()
	}

	var transfers, calls []time.Duration
	for round := range rounds {
		p := e.primary()
		to := e.standbys(p)[round%2]
		e.waitAcked(l, 50, 30*time.Second)
		start := time.Now()
		require.NoError(t, p.Transfer(e.ctx, to.ID()))
		call := time.Since(start)
		e.waitFor(30*time.Second, "an acknowledgement by the target", func() bool {
			_, ok := e.h.FirstAckAfter(start, p.ID())
			return ok
		})
		first, _ := e.h.FirstAckAfter(start, p.ID())
		require.Equal(t, to.ID(), first.Node)
		transfers = append(transfers, first.End.Sub(start))
		calls = append(calls, call)
		t.Logf("transfer %d: %s -> %s, call %v, first ack after %v", round, p.ID(), to.ID(), call, first.End.Sub(start))
	}
	e.settle(l)
	t.Logf("MEASURE session_timeout=%v tick=200ms servers=3 failover_median=%v (elected %v) transfer_median=%v (call %v) loadavg_before=%q loadavg_after=%q",
		sessionTimeout, median(failovers), median(elections), median(transfers), median(calls), loadBefore, loadAvg())
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)/2].Round(time.Millisecond)
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

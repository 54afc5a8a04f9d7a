package replica

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// gather returns the value of metric name with the given labels (gauge or
// counter; histograms give their sample count), and whether it exists.
func gather(t *testing.T, g prometheus.Gatherer, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			have := map[string]string{}
			for _, lp := range m.GetLabel() {
				have[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if have[k] != v {
					continue next
				}
			}
			return metricValue(m), true
		}
	}
	return 0, false
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return -1
}

// TestMetrics: a pair with one registry reports what Status and the calls
// say, lints clean, and unregisters on Close so the member can reopen.
func TestMetrics(t *testing.T) {
	ens := sharedEnsemble(t)
	reg := prometheus.NewPedanticRegistry()
	c := newCluster(t, ens, func(cfg *Config) { cfg.Registerer = reg })
	c.openN(2)
	p := c.waitPrimary(20 * time.Second)
	s := c.other(p)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < 20; i++ {
		_, err := p.Propose(ctx, setOp("k", strings.Repeat("v", i)))
		require.NoError(t, err)
	}
	id := NewRequestID()
	for i := 0; i < 3; i++ {
		_, err := p.ProposeRequest(ctx, id, setOp("once", "1"))
		require.NoError(t, err)
	}
	_, err := s.Propose(ctx, setOp("k", "x"))
	require.ErrorIs(t, err, ErrNotPrimary)
	require.NoError(t, p.Checkpoint(ctx))
	idx, err := p.Barrier(ctx)
	require.NoError(t, err)
	require.NoError(t, s.WaitApplied(ctx, idx))

	problems, err := testutil.GatherAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)

	pl := map[string]string{"member": p.ID(), "room": c.room}
	sl := map[string]string{"member": s.ID(), "room": c.room}
	with := func(l map[string]string, k, v string) map[string]string {
		out := map[string]string{k: v}
		for a, b := range l {
			out[a] = b
		}
		return out
	}
	val := func(name string, labels map[string]string) float64 {
		t.Helper()
		v, ok := gather(t, reg, name, labels)
		require.True(t, ok, "%s%v missing", name, labels)
		return v
	}
	require.Equal(t, 20.0, val("roomlog_replica_proposals_total", with(pl, "outcome", "ok"))-1) // + the request's original
	require.Equal(t, 2.0, val("roomlog_replica_proposals_total", with(pl, "outcome", "duplicate")))
	require.Equal(t, 1.0, val("roomlog_replica_proposals_total", with(sl, "outcome", "not_primary")))
	require.Equal(t, 23.0, val("roomlog_replica_propose_seconds", pl))
	require.Equal(t, 1.0, val("roomlog_replica_role", with(pl, "role", RolePrimary.String())))
	require.Equal(t, 0.0, val("roomlog_replica_role", with(pl, "role", RoleStandby.String())))
	require.Equal(t, 1.0, val("roomlog_replica_role", with(sl, "role", RoleStandby.String())))
	require.Equal(t, float64(p.Status().Applied), val("roomlog_replica_applied_index", pl))
	require.GreaterOrEqual(t, val("roomlog_replica_applied_index", sl), float64(idx))
	require.Equal(t, float64(p.Status().Epoch), val("roomlog_replica_epoch", pl))
	require.Equal(t, 1.0, val("roomlog_replica_takeover_seconds", pl))
	require.GreaterOrEqual(t, val("roomlog_replica_leader_changes_total", sl), 1.0)
	require.Equal(t, 1.0, val("roomlog_replica_checkpoint_seconds", pl))
	require.Greater(t, val("roomlog_replica_checkpoint_bytes", pl), 0.0)
	require.Equal(t, 1.0, val("roomlog_replica_zk_connected", sl))
	require.GreaterOrEqual(t, val("roomlog_replica_apply_lag_seconds", sl), 1.0, "the standby applied a request")
	// The room's writer and reader report under the same labels.
	require.Equal(t, 23.0, val("roomlog_writer_entries_total", pl), "20 plain, 1 request and its 2 retries (appended, skipped at apply)")
	require.Equal(t, 1.0, val("roomlog_writer_rotations_total", pl), "the checkpoint rotated once")
	require.GreaterOrEqual(t, val("roomlog_reader_entries_total", sl), 21.0)
	require.GreaterOrEqual(t, val("roomlog_room_znodes", pl), 1.0, "at least the open channel")
	_, ok := gather(t, reg, "roomlog_replica_member_applied_delta", with(pl, "peer", s.ID()))
	require.True(t, ok, "the primary reports its standby's delta")
	_, ok = gather(t, reg, "roomlog_replica_member_applied_delta", with(sl, "peer", p.ID()))
	require.False(t, ok, "a standby reports no member deltas")

	// Close unregisters; the same id opens again on the same registry.
	sid := s.ID()
	c.close(sid)
	_, ok = gather(t, reg, "roomlog_replica_applied_index", sl)
	require.False(t, ok)
	_, ok = gather(t, reg, "roomlog_reader_entries_total", sl)
	require.False(t, ok, "logroom's collectors are unregistered too")
	s = c.open(sid)
	require.Eventually(t, func() bool {
		v, ok := gather(t, reg, "roomlog_replica_applied_index", sl)
		return ok && v >= float64(idx)
	}, 20*time.Second, 5*time.Millisecond, "reopened member reports its applied index")
}

package main

import (
	"context"
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/internal/infra/promserver"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/version"
)

// getMetrics fetches a master's /metrics body.
func getMetrics(t *testing.T, addr string) string {
	t.Helper()
	r := rawRequest(t, http.MethodGet, "http://"+addr+metricsPath, "")
	require.Equal(t, http.StatusOK, r.status, r.body)
	require.True(t, strings.HasPrefix(r.header.Get("Content-Type"), "text/plain"), r.header.Get("Content-Type"))
	return r.body
}

// query runs one PromQL query and returns its samples' values by the
// given label.
func query(t *testing.T, ctx context.Context, prom *promserver.Server, promql, by string) map[string]float64 {
	t.Helper()
	samples, err := prom.Query(ctx, promql)
	require.NoError(t, err)
	out := map[string]float64{}
	for _, s := range samples {
		out[s.Labels[by]] = s.Value
	}
	return out
}

// TestServeMetricsPrometheus: both masters of a primary/standby pair serve
// /metrics from their own registry (replica, logroom, API, Go and process
// collectors), promtool accepts each body, and a real Prometheus scraping
// both answers PromQL with the standby's applied index (equal to the
// primary's after a barrier), both roles, and the API's request counts.
// Each body has roomlog_build_info naming this binary and roomlog_room_version
// the room's version, as /v1/status does.
// It fails under CI=true when Prometheus is missing (promserver.Require).
func TestServeMetricsPrometheus(t *testing.T) {
	_, promtool := promserver.Require(t)
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	dir := t.TempDir()
	const room = "metrics-e2e"
	m1 := openTestMaster(t, ens, room, "m1", dir)
	require.Eventually(t, func() bool { return apiStatus(t, m1.Addr()).Role == api.RolePrimary }, 30*time.Second, 20*time.Millisecond, "m1 primary")
	m2 := openTestMaster(t, ens, room, "m2", dir)
	require.Eventually(t, func() bool {
		s := apiStatus(t, m2.Addr())
		return s.Role == api.RoleStandby && s.PrimaryAddr == m1.Addr()
	}, 30*time.Second, 20*time.Millisecond, "m2 a standby naming m1")
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()

	// Writes through the standby: a 307 there, a 200 on the primary.
	c2, err := client.New(m2.Addr(), nil)
	require.NoError(t, err)
	const writes = 20
	for i := 0; i < writes; i++ {
		_, err := c2.Mkdir(ctx, fmt.Sprintf("/d%02d", i), false)
		require.NoError(t, err)
	}
	idx, err := m1.rep.Barrier(ctx)
	require.NoError(t, err)
	require.NoError(t, m2.rep.WaitApplied(ctx, idx))
	require.GreaterOrEqual(t, idx, uint64(writes))

	for _, m := range []*master{m1, m2} {
		var st api.Status
		require.Eventually(t, func() bool { st = apiStatus(t, m.Addr()); return st.RoomVersion >= 1 },
			30*time.Second, 20*time.Millisecond, "%s has read the room's version", m.rep.ID())
		body := getMetrics(t, m.Addr())
		require.NoError(t, promserver.CheckMetrics(ctx, promtool, []byte(body)), "promtool on %s's /metrics", m.rep.ID())
		id := m.rep.ID()
		for _, want := range []string{
			fmt.Sprintf(`roomlog_replica_applied_index{member=%q,room=%q}`, id, room),
			fmt.Sprintf(`roomlog_replica_role{member=%q,role="primary",room=%q}`, id, room),
			fmt.Sprintf(`roomlog_writer_entries_total{member=%q,room=%q}`, id, room),
			fmt.Sprintf(`roomlog_demo_http_requests_total{code="200",member=%q,room=%q,route="/v1/status"}`, id, room),
			"go_goroutines ", "process_resident_memory_bytes ",
			fmt.Sprintf(`roomlog_build_info{commit=%q,goversion=%q,release=%q} 1`, buildCommit(version.Info()), runtime.Version(), version.Release),
			// Nothing raises the room's version during the test.
			fmt.Sprintf("roomlog_room_version{member=%q,room=%q} %d\n", id, room, st.RoomVersion),
		} {
			require.Contains(t, body, want, "%s's /metrics", id)
		}
		require.Equal(t, version.Release, st.Version, "%s's /v1/status", id)
		require.Equal(t, buildCommit(version.Info()), st.Commit, "%s's /v1/status", id)
		require.Equal(t, [2]int{version.RoomMin, version.RoomMax}, [2]int{st.RoomVersionMin, st.RoomVersionMax}, "%s's /v1/status", id)
		for _, mem := range st.Members {
			require.Equal(t, [2]int{version.RoomMin, version.RoomMax}, [2]int{mem.RoomVersionMin, mem.RoomVersionMax}, "%s's /v1/status, member %s", id, mem.ID)
		}
		if id == "m1" {
			t.Logf("m1 /metrics, a sample:\n%s", sampleLines(body, "roomlog_replica_", "roomlog_demo_http_requests_total", "roomlog_writer_entries_total"))
		}
	}

	prom := promserver.Start(ctx, t, []string{m1.Addr(), m2.Addr()})
	var applied, roles map[string]float64
	require.Eventually(t, func() bool {
		applied = query(t, ctx, prom, fmt.Sprintf(`roomlog_replica_applied_index{room=%q}`, room), "member")
		return len(applied) == 2 && applied["m2"] >= float64(idx) && applied["m1"] >= float64(idx)
	}, 60*time.Second, 20*time.Millisecond, "Prometheus has scraped both masters after the barrier")
	// Nothing was written after the barrier: the same index on both.
	require.Equal(t, applied["m1"], applied["m2"], "standby's applied index vs the primary's: %v", applied)
	standby := query(t, ctx, prom, `roomlog_replica_applied_index{member="m2"} > 0`, "member")
	require.Equal(t, map[string]float64{"m2": applied["m1"]}, standby)

	roles = query(t, ctx, prom, fmt.Sprintf(`roomlog_replica_role{room=%q} == 1`, room), "member")
	require.Len(t, roles, 2)
	require.Equal(t, map[string]float64{"m2": 1}, query(t, ctx, prom, `roomlog_replica_role{role="standby",member="m2"} == 1`, "member"))
	require.Equal(t, map[string]float64{"m1": 1}, query(t, ctx, prom, `roomlog_replica_role{role="primary",member="m1"} == 1`, "member"))
	require.Empty(t, query(t, ctx, prom, `roomlog_replica_role{role="primary",member="m2"} == 1`, "member"))
	up := query(t, ctx, prom, `up{job="roomlog"}`, "instance")
	require.Equal(t, map[string]float64{m1.Addr(): 1, m2.Addr(): 1}, up)

	// The API's own metrics: the writes were redirected by the standby and
	// served by the primary.
	var served, redirected map[string]float64
	require.Eventually(t, func() bool {
		served = query(t, ctx, prom, `sum by (member) (roomlog_demo_http_requests_total{route="/v1/mkdir",code="200"})`, "member")
		redirected = query(t, ctx, prom, `sum by (member) (roomlog_demo_http_requests_total{route="/v1/mkdir",code="307"})`, "member")
		return served["m1"] >= writes && redirected["m2"] >= writes
	}, 30*time.Second, 20*time.Millisecond, "the API's request counts scraped")
	require.NotContains(t, served, "m2")
	require.NotContains(t, redirected, "m1")
}

// sampleLines picks the exposition lines (no comments) starting with one
// of the prefixes.
func sampleLines(body string, prefixes ...string) string {
	var out []string
	for _, line := range strings.Split(body, "\n") {
		for _, p := range prefixes {
			if strings.HasPrefix(line, p) && !strings.Contains(line, "_bucket{") {
				out = append(out, line)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

package main

import (
	"bytes"
	"log/slog"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/replica"
)

// TestServeObserverFlag: --observer reaches the master's config; off by
// default.
func TestServeObserverFlag(t *testing.T) {
	var stderr bytes.Buffer
	opts, _, ok := parseServeFlags([]string{"--id", "a", "--data", "/tmp/x"}, &stderr)
	require.True(t, ok, stderr.String())
	require.False(t, opts.cfg.Observer)
	opts, _, ok = parseServeFlags([]string{"--id", "a", "--data", "/tmp/x", "--observer"}, &stderr)
	require.True(t, ok, stderr.String())
	require.True(t, opts.cfg.Observer)
}

// TestServeObserver: a master opened with Observer is a replica observer;
// /v1/status (its own and the primary's member row), the status page and
// /metrics say so; and a stopping primary whose only peer is the observer
// does not try to hand its role to it (no failed hand-off), so the
// observer stays a standby with no primary.
func TestServeObserver(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	dir := t.TempDir()
	var logs syncBuffer
	a := openTestMaster(t, ens, "obs", "a", dir, func(c *serveConfig) {
		c.HandoffTimeout = 5 * time.Second
		c.Logger = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	})
	require.Eventually(t, func() bool { return a.rep.Status().Role == replica.RolePrimary }, 30*time.Second, 10*time.Millisecond)
	o := openTestMaster(t, ens, "obs", "o", dir, func(c *serveConfig) { c.Observer = true })
	require.True(t, o.rep.Status().Observer, "serveConfig.Observer reaches replica.Config")
	require.Eventually(t, func() bool {
		s := o.rep.Status()
		return s.Role == replica.RoleStandby && s.PrimaryID == "a" && len(a.rep.Status().Members) == 2
	}, 30*time.Second, 10*time.Millisecond)

	st := apiStatus(t, o.Addr())
	require.True(t, st.Observer)
	require.Equal(t, "standby", st.Role)
	pst := apiStatus(t, a.Addr())
	require.False(t, pst.Observer)
	require.Eventually(t, func() bool {
		for _, m := range apiStatus(t, a.Addr()).Members {
			if m.ID == "o" {
				return m.Observer && m.Role == "standby"
			}
		}
		return false
	}, 10*time.Second, 10*time.Millisecond, "the primary's member row of the observer says observer")
	for _, m := range pst.Members {
		if m.ID == "a" {
			require.False(t, m.Observer)
		}
	}
	raw := rawRequest(t, http.MethodGet, "http://"+o.Addr()+"/v1/status", "")
	require.Equal(t, http.StatusOK, raw.status)
	require.Contains(t, raw.body, `"observer":true`)
	page := rawRequest(t, http.MethodGet, "http://"+o.Addr()+"/", "")
	require.Equal(t, http.StatusOK, page.status)
	require.Contains(t, page.body, `<span class="observer">observer</span>`)
	metrics := rawRequest(t, http.MethodGet, "http://"+o.Addr()+metricsPath, "")
	require.Contains(t, metrics.body, `roomlog_replica_observer{member="o",room="obs"} 1`)

	// The primary stops: its hand-off skips the observer (nobody to hand
	// to), so it leaves without trying a transfer the observer would
	// refuse; the observer does not take over.
	require.NoError(t, a.Close())
	require.NotContains(t, logs.String(), "hand-off of the primary role failed")
	require.NotContains(t, logs.String(), "handed the primary role over")
	require.Never(t, func() bool { return o.rep.Status().Role != replica.RoleStandby }, time.Second, 10*time.Millisecond,
		"the observer never takes over")
	require.Empty(t, apiStatus(t, o.Addr()).PrimaryID)
}

package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
)

// TestStrictBodiesAccept: what the strict checks must still accept —
// names with escaped surrogate pairs (an emoji), a literal backslash
// before "u", non-ASCII letters, keys in any order — and the messages of
// what they refuse.
func TestStrictBodiesAccept(t *testing.T) {
	p := newPair(t, api.Config{})
	base := p.primarySrv.URL
	for _, body := range []string{
		`{"path":"/smile-\ud83d\ude00"}`, // an escaped surrogate pair: U+1F600
		`{"path":"/back\\ud800slash"}`,   // a backslash, then the letters "ud800"
		`{"path":"/é\u00e9"}`,
		`{"parents":true,"path":"/x/y"}`,
	} {
		ok(t, post(t, base, "/v1/mkdir", body))
	}
	ls := ok(t, get(t, base, "/v1/ls?path=/"))
	require.Equal(t, []any{"back\\ud800slash", "smile-\U0001F600", "x", "éé"}, names(ls))
	r := get(t, base, "/v1/stat?path="+"/smile-%F0%9F%98%80")
	require.Equal(t, http.StatusOK, r.status, "body %s", r.raw)

	for _, tc := range []struct{ path, body, want string }{
		{"/v1/mkdir", `{"PATH":"/x"}`, `unknown field "PATH": JSON keys are case-sensitive; did you mean "path"?`},
		{"/v1/mkdir", `{"path":"/x","path":"/y"}`, `duplicate field "path"`},
		{"/v1/mkdir", `{"path":"/x","mode":1}`, `unknown field "mode" (fields: path, parents)`},
		{"/v1/mkdir", `{"path":"/a\nb"}`, `control character (U+000A)`},
		{"/v1/mkdir", `{"path":"/a\ud800"}`, `unpaired UTF-16 surrogate \uD800`},
		{"/v1/mkdir", "{\"path\":\"/a\xff\"}", `path: not valid UTF-8`},
		{"/v1/delete", `{"path":"/"}`, `delete /: the root cannot be deleted`},
		{"/v1/rename", `{"src":"/","dst":"/y"}`, `rename /: the root cannot be moved`},
	} {
		r := post(t, base, tc.path, tc.body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s %s: %s", tc.path, tc.body, r.raw)
		require.Contains(t, r.obj(t)["message"], tc.want, "%s %s", tc.path, tc.body)
	}

	// Refused before the log, so an Idempotency-Key leaves no record: the
	// same key then works for a valid request.
	r = keyed(t, http.DefaultClient, base+"/v1/delete", `{"path":"/"}`, "k-root")
	require.Equal(t, http.StatusBadRequest, r.status)
	r = keyed(t, http.DefaultClient, base+"/v1/delete", `{"path":"/x","recursive":true}`, "k-root")
	require.Equal(t, http.StatusOK, r.status, "body %s", r.raw)
}

// counterValue finds roomlog_demo_http_requests_total{route,code} in reg.
func counterValue(t *testing.T, reg *prometheus.Registry, route, code string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "roomlog_demo_http_requests_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if label(m, "route") == route && label(m, "code") == code {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func label(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// TestMetrics: requests are counted by route pattern and status code;
// unknown paths share the route "other" (no raw path becomes a label);
// Instrument counts the embedder's endpoints; registering twice fails.
func TestMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := newFakeMaster(t, "m1", api.RolePrimary)
	s, err := api.New(api.Config{Master: m, Registerer: reg})
	require.NoError(t, err)
	mux := http.NewServeMux()
	mux.Handle("/extra", s.Instrument("extra", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusTeapot)
	})))
	mux.Handle("/", s)
	srv := serveHandler(t, mux)

	ok(t, post(t, srv, "/v1/mkdir", `{"path":"/a"}`))
	ok(t, post(t, srv, "/v1/mkdir", `{"path":"/b"}`))
	require.Equal(t, http.StatusConflict, post(t, srv, "/v1/mkdir", `{"path":"/a"}`).status)
	require.Equal(t, http.StatusBadRequest, post(t, srv, "/v1/mkdir", `{"PATH":"/c"}`).status)
	for _, p := range []string{"/v1/chmod", "/etc/passwd", "/v1/ls/x?y"} {
		require.Equal(t, http.StatusNotFound, get(t, srv, p).status)
	}
	ok(t, get(t, srv, "/v1/ls?path=/"))
	require.Equal(t, http.StatusTeapot, get(t, srv, "/extra").status)
	// Behind the metrics' wrapper, a body over the limit still closes the
	// connection (the rest of the body is not read).
	resp, err := http.Post(srv+"/v1/mkdir", "application/json", strings.NewReader(`{"path":"/`+strings.Repeat("x", 70<<10)+`"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.True(t, resp.Close, "Connection: close")

	require.Equal(t, 2.0, counterValue(t, reg, "/v1/mkdir", "200"))
	require.Equal(t, 1.0, counterValue(t, reg, "/v1/mkdir", "409"))
	require.Equal(t, 1.0, counterValue(t, reg, "/v1/mkdir", "400"))
	require.Equal(t, 1.0, counterValue(t, reg, "/v1/mkdir", "413"))
	require.Equal(t, 3.0, counterValue(t, reg, api.RouteOther, "404"))
	require.Equal(t, 1.0, counterValue(t, reg, "/v1/ls", "200"))
	require.Equal(t, 1.0, counterValue(t, reg, "extra", "418"))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	routes := map[string]bool{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			routes[label(m, "route")] = true
		}
		if mf.GetName() == "roomlog_demo_http_request_duration_seconds" {
			require.Equal(t, dto.MetricType_HISTOGRAM, mf.GetType())
		}
	}
	require.Equal(t, map[string]bool{"/v1/mkdir": true, "/v1/ls": true, "other": true, "extra": true}, routes)

	_, err = api.New(api.Config{Master: m, Registerer: reg})
	require.ErrorContains(t, err, "register metrics")
}

// TestStatusPageLagAndRoleChanges: the page shows each member's lag behind
// the primary and the master's last role changes (newest first), and
// /v1/status carries the same.
func TestStatusPageLagAndRoleChanges(t *testing.T) {
	p := newPair(t, api.Config{MetricsPath: "/metrics"})
	at := time.Date(2025, 3, 4, 5, 6, 7, 890_000_000, time.UTC)
	p.standby.set(func(f *fakeMaster) {
		f.status.Members = []api.Member{
			{ID: "m1", Role: api.RolePrimary, AppliedIndex: 120, Lag: 0},
			{ID: "m2", Role: api.RoleStandby, AppliedIndex: 97, Lag: 23},
		}
		f.status.RoleChanges = []api.RoleChange{
			{At: at.Add(time.Second), Role: api.RoleStandby, Epoch: 3, Reason: "session <expired>"},
			{At: at, Role: api.RolePrimary, Epoch: 2, Reason: "elected"},
		}
	})
	st := ok(t, get(t, p.standbySrv.URL, "/v1/status"))
	require.Equal(t, []any{
		map[string]any{"at": "2025-03-04T05:06:08.89Z", "role": "standby", "epoch": num(3), "reason": "session <expired>"},
		map[string]any{"at": "2025-03-04T05:06:07.89Z", "role": "primary", "epoch": num(2), "reason": "elected"},
	}, st["role_changes"])
	require.Equal(t, num(23), st["members"].([]any)[1].(map[string]any)["lag"])

	page := string(get(t, p.standbySrv.URL, "/").raw)
	for _, want := range []string{
		"behind the primary",
		`<td>97</td><td class="behind">23</td>`,
		"Role changes of this master",
		"2025-03-04 05:06:08.890", "session &lt;expired&gt;",
		"2025-03-04 05:06:07.890", "elected",
		`<a href="/metrics">/metrics</a>`,
	} {
		require.Contains(t, page, want)
	}
	require.Less(t, strings.Index(page, "05:06:08.890"), strings.Index(page, "05:06:07.890"), "newest first")

	// No role change recorded yet; no metrics path configured.
	page = string(get(t, p.primarySrv.URL, "/").raw)
	require.Contains(t, page, "none recorded")
	srv := serveHandler(t, mustNew(t, api.Config{Master: p.primary}))
	require.NotContains(t, string(get(t, srv, "/").raw), "/metrics")
}

func serveHandler(t *testing.T, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv.URL
}

func mustNew(t *testing.T, cfg api.Config) *api.Server {
	t.Helper()
	s, err := api.New(cfg)
	require.NoError(t, err)
	return s
}

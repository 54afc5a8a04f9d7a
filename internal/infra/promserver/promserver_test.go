package promserver

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/stretchr/testify/require"
)

// TestScrapeAndQuery: a real Prometheus scrapes a test exporter and a
// PromQL query returns its value; promtool accepts good exposition text
// and rejects bad.
func TestScrapeAndQuery(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, promtool := Require(t)

	reg := prometheus.NewRegistry()
	g := prometheus.NewGauge(prometheus.GaugeOpts{Name: "promserver_test_value", Help: "A test gauge."})
	reg.MustRegister(g)
	g.Set(42)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), ReadHeaderTimeout: 5 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	require.NoError(t, CheckMetrics(ctx, promtool, []byte("# HELP a_total A counter.\n# TYPE a_total counter\na_total 1\n")))
	err = CheckMetrics(ctx, promtool, []byte("# HELP a A counter without the suffix.\n# TYPE a counter\na 1\n"))
	require.Error(t, err)
	require.Contains(t, err.Error(), "_total")

	s := Start(ctx, t, []string{ln.Addr().String()})
	var got []Sample
	for ctx.Err() == nil {
		got, err = s.Query(ctx, `promserver_test_value{job="roomlog"}`)
		require.NoError(t, err)
		if len(got) == 1 {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	require.Len(t, got, 1)
	require.Equal(t, 42.0, got[0].Value)
	_, err = s.Query(ctx, `this is not promql`)
	require.Error(t, err)
}

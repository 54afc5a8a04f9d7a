package api

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// RouteOther is the route label of requests for a path the API does not
// serve (404): raw paths never become label values, so the label's values
// stay the API's endpoints, this one, and those passed to Instrument.
const RouteOther = "other"

// metrics are the API's Prometheus collectors; a nil *metrics (no
// Config.Registerer) records nothing.
type metrics struct {
	requests *prometheus.CounterVec   // route, code
	seconds  *prometheus.HistogramVec // route
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomlog_demo_http_requests_total",
			Help: "HTTP requests answered by the dfsmaster demo, by route (the endpoint's path pattern, \"other\" for unknown paths) and status code.",
		}, []string{"route", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "roomlog_demo_http_request_duration_seconds",
			Help:    "Time from a request's arrival at the handler to the handler's return, by route.",
			Buckets: []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10},
		}, []string{"route"}),
	}
	if err := reg.Register(m.requests); err != nil {
		return nil, fmt.Errorf("api: register metrics: %w", err)
	}
	if err := reg.Register(m.seconds); err != nil {
		reg.Unregister(m.requests)
		return nil, fmt.Errorf("api: register metrics: %w", err)
	}
	return m, nil
}

// observe wraps one request of route.
func (m *metrics) observe(route string, w http.ResponseWriter, r *http.Request, h func(w http.ResponseWriter, r *http.Request)) {
	if m == nil {
		h(w, r)
		return
	}
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	h(rec, r)
	code := rec.status
	if code == 0 {
		code = http.StatusOK // nothing written: net/http sends 200
	}
	m.requests.WithLabelValues(route, strconv.Itoa(code)).Inc()
	m.seconds.WithLabelValues(route).Observe(time.Since(start).Seconds())
}

// Instrument counts the requests h serves in the API's metrics under the
// route label route (a fixed name: the embedding server's other endpoints,
// such as "/metrics" or the checkpoint handler). Without a
// Config.Registerer it returns h.
func (s *Server) Instrument(route string, h http.Handler) http.Handler {
	if s.metrics == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.metrics.observe(route, w, r, h.ServeHTTP)
	})
}

// statusRecorder remembers the status code a handler sends.
type statusRecorder struct {
	http.ResponseWriter
	status int // first final status written (0: none yet)
}

func (w *statusRecorder) WriteHeader(code int) {
	if w.status == 0 && (code >= 200 || code == http.StatusSwitchingProtocols) {
		w.status = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusRecorder) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// ReadFrom keeps io.Copy into the response on net/http's fast path
// (sendfile for the checkpoint stream).
func (w *statusRecorder) ReadFrom(r io.Reader) (int64, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return io.Copy(w.ResponseWriter, r)
}

// Unwrap lets http.ResponseController reach the connection's writer.
func (w *statusRecorder) Unwrap() http.ResponseWriter { return w.ResponseWriter }

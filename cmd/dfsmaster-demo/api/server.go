package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Defaults for Config.
const (
	DefaultReadWait       = 5 * time.Second
	DefaultProposeTimeout = 10 * time.Second
	DefaultMaxBodyBytes   = 64 << 10
	DefaultReplication    = 3
	DefaultPageRefresh    = 2 * time.Second
	// MaxHeaderBytes is the http.Server.MaxHeaderBytes the serve command
	// sets: request headers beyond it (plus the 4 KiB net/http allows on
	// top) get net/http's own plain-text 431, before any handler (doc.go,
	// "Errors net/http writes itself").
	MaxHeaderBytes = 16 << 10
)

// Config configures New.
type Config struct {
	// Master serves the requests. Required.
	Master Master
	// ReadWait bounds how long a read waits for min_index. Default 5s.
	ReadWait time.Duration
	// ProposeTimeout bounds a mutation's proposal. Default 10s.
	ProposeTimeout time.Duration
	// MaxBodyBytes bounds a request body. Default 64 KiB; at least 8 KiB
	// (two maximal paths).
	MaxBodyBytes int64
	// PageRefresh is how often the HTML status page reloads. Default 2s.
	PageRefresh time.Duration
	// Logger gets one debug line per failed request. Default: discard.
	Logger *slog.Logger
	// Registerer, when set, receives the API's metrics (doc.go, "Metrics"):
	// roomlog_demo_http_requests_total{route,code} and
	// roomlog_demo_http_request_duration_seconds{route}. Registering fails
	// New when they are already registered there. nil: no metrics.
	Registerer prometheus.Registerer
	// MetricsPath, when set, is where the embedding server serves its
	// Prometheus metrics; the status page links to it.
	MetricsPath string
}

// Validate names every bad field.
func (c Config) Validate() error {
	var errs []error
	if c.Master == nil {
		errs = append(errs, errors.New("Master: required"))
	}
	if c.ReadWait < 0 {
		errs = append(errs, fmt.Errorf("ReadWait %v: negative", c.ReadWait))
	}
	if c.ProposeTimeout < 0 {
		errs = append(errs, fmt.Errorf("ProposeTimeout %v: negative", c.ProposeTimeout))
	}
	if c.MaxBodyBytes != 0 && c.MaxBodyBytes < 8<<10 {
		errs = append(errs, fmt.Errorf("MaxBodyBytes %d: must be 0 (default) or at least 8 KiB", c.MaxBodyBytes))
	}
	if c.PageRefresh < 0 {
		errs = append(errs, fmt.Errorf("PageRefresh %v: negative", c.PageRefresh))
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("%w: %w", ErrInvalidConfig, errors.Join(errs...))
}

func (c Config) withDefaults() Config {
	if c.ReadWait == 0 {
		c.ReadWait = DefaultReadWait
	}
	if c.ProposeTimeout == 0 {
		c.ProposeTimeout = DefaultProposeTimeout
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if c.PageRefresh == 0 {
		c.PageRefresh = DefaultPageRefresh
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Server is the API as an http.Handler. It holds no mutable state of its
// own; every request is served from the Master.
type Server struct {
	cfg     Config
	m       Master
	page    *template.Template
	routes  map[string]route // by URL path; read-only after New
	metrics *metrics         // nil without Config.Registerer
}

type route struct {
	method  string
	handler func(w http.ResponseWriter, r *http.Request)
}

// New returns the API server for cfg.Master.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	page, err := template.New("status").Funcs(template.FuncMap{"href": memberHref, "ts": pageTime}).Parse(statusPage)
	if err != nil {
		return nil, fmt.Errorf("api: status page template: %w", err)
	}
	met, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, m: cfg.Master, page: page, metrics: met}
	s.routes = map[string]route{
		"/":              {http.MethodGet, s.handlePage},
		"/v1/mkdir":      {http.MethodPost, s.mutation(mkdirCommand)},
		"/v1/create":     {http.MethodPost, s.mutation(createCommand)},
		"/v1/addblock":   {http.MethodPost, s.mutation(addBlockCommand)},
		"/v1/rename":     {http.MethodPost, s.mutation(renameCommand)},
		"/v1/delete":     {http.MethodPost, s.mutation(deleteCommand)},
		"/v1/ls":         {http.MethodGet, s.handleLs},
		"/v1/stat":       {http.MethodGet, s.handleStat},
		"/v1/status":     {http.MethodGet, s.handleStatus},
		"/v1/hash":       {http.MethodGet, s.handleHash},
		"/v1/placements": {http.MethodGet, s.handlePlacements},
		"/v1/health":     {http.MethodGet, s.handleHealth},
	}
	return s, nil
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rt, ok := s.routes[r.URL.Path]
	label := r.URL.Path // one of the routes' fixed paths
	if !ok {
		label = RouteOther
	}
	s.metrics.observe(label, w, r, func(w http.ResponseWriter, r *http.Request) { s.serve(rt, ok, w, r) })
}

func (s *Server) serve(rt route, ok bool, w http.ResponseWriter, r *http.Request) {
	if !ok {
		s.fail(w, r, &httpError{status: http.StatusNotFound, code: CodeBadRequest,
			msg: fmt.Sprintf("no endpoint %s (see /v1/...)", r.URL.Path)})
		return
	}
	if r.Method != rt.method && !(rt.method == http.MethodGet && r.Method == http.MethodHead) {
		w.Header().Set("Allow", rt.method)
		s.fail(w, r, &httpError{status: http.StatusMethodNotAllowed, code: CodeBadRequest,
			msg: fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, rt.method)})
		return
	}
	rt.handler(w, r)
}

// Error codes of the API beyond the namespace's own (namespace.Code).
const (
	CodeBadRequest     = "bad_request"
	CodeNoPrimary      = "no_primary"
	CodeNotPrimary     = "not_primary" // on a 307 redirect
	CodeOutcomeUnknown = "outcome_unknown"
	CodeOverloaded     = "overloaded"
	CodeUnavailable    = "unavailable"
	CodeDisconnected   = "disconnected" // 503: cut off from ZooKeeper; a read it cannot serve, or /v1/health; try another master (Retry-After)
	CodeFailed         = "failed"       // the master failed for good; the message says why
	CodeBehind         = "behind"       // 503 on /v1/health and reads: a standby that cannot reach its room's state (its tail retries; tail_error says why)
	CodeTimeout        = "timeout"
	CodeInternal       = "internal"
)

// ErrorBody is the JSON of every failed request.
type ErrorBody struct {
	Error   string `json:"error"`
	Message string `json:"message"`
	Index   uint64 `json:"index,omitempty"`   // a command rejected by the log: its entry's index
	Primary string `json:"primary,omitempty"` // a redirect: the primary's address
}

// httpError is a failed request on its way out.
type httpError struct {
	status   int
	code     string
	msg      string
	index    uint64
	primary  string
	location string
	header   map[string]string
}

func (e *httpError) Error() string { return e.code + ": " + e.msg }

func badRequest(format string, args ...any) *httpError {
	return &httpError{status: http.StatusBadRequest, code: CodeBadRequest, msg: fmt.Sprintf(format, args...)}
}

func (s *Server) fail(w http.ResponseWriter, r *http.Request, e *httpError) {
	s.cfg.Logger.Debug("request failed", "method", r.Method, "path", r.URL.Path, "status", e.status, "code", e.code, "message", e.msg)
	for k, v := range e.header {
		w.Header().Set(k, v)
	}
	if e.location != "" {
		w.Header().Set("Location", e.location)
	}
	writeJSON(w, e.status, ErrorBody{Error: e.code, Message: e.msg, Index: e.index, Primary: e.primary})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		// Every value written here is a plain struct of this package.
		panic(fmt.Sprintf("api: marshal %T: %v", v, err))
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}

// pageTime formats a role change's time for the status page.
func pageTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000")
}

// memberHref turns an advertised address into a link to its status page.
func memberHref(addr string) string {
	if addr == "" {
		return ""
	}
	if strings.Contains(addr, "://") {
		return strings.TrimSuffix(addr, "/") + "/"
	}
	return "http://" + addr + "/"
}

package promserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// ScrapeInterval is how often Start's server scrapes its targets (and
// evaluates its rules).
const ScrapeInterval = 500 * time.Millisecond

// Find returns the paths of prometheus and promtool, or an error naming
// what is missing and how to install it.
func Find() (prometheus, promtool string, err error) {
	look := func(name string) (string, error) {
		if home := os.Getenv("PROMETHEUS_HOME"); home != "" {
			p := filepath.Join(home, name)
			if st, err := os.Stat(p); err == nil && st.Mode()&0o111 != 0 {
				return p, nil
			}
		}
		return exec.LookPath(name)
	}
	if prometheus, err = look("prometheus"); err != nil {
		return "", "", fmt.Errorf("prometheus not found (run scripts/install-prometheus.sh): %w", err)
	}
	if promtool, err = look("promtool"); err != nil {
		return "", "", fmt.Errorf("promtool not found (run scripts/install-prometheus.sh): %w", err)
	}
	return prometheus, promtool, nil
}

// Require returns the binaries, failing the test under CI=true and
// skipping it otherwise when they are missing.
func Require(t testing.TB) (prometheus, promtool string) {
	t.Helper()
	p, pt, err := Find()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("promserver: %v", err)
		}
		t.Skipf("promserver: %v", err)
	}
	return p, pt
}

// CheckMetrics runs `promtool check metrics` on an exposition body and
// returns its complaints (nil: none).
func CheckMetrics(ctx context.Context, promtool string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, promtool, "check", "metrics")
	cmd.Stdin = bytes.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("promtool check metrics: %w: %s", err, strings.TrimSpace(string(out)))
	}
	if s := strings.TrimSpace(string(out)); s != "" {
		return fmt.Errorf("promtool check metrics: %s", s)
	}
	return nil
}

// Server is a running Prometheus.
type Server struct {
	URL string // http://127.0.0.1:<port>
	cmd *exec.Cmd
	out *lockedBuffer
}

// Start runs a Prometheus server scraping targets ("host:port", path
// /metrics) and waits until it is ready (bounded by ctx and 60 s).
func Start(ctx context.Context, t testing.TB, targets []string) *Server {
	t.Helper()
	return StartWith(ctx, t, targets, Options{})
}

// Options are StartWith's.
type Options struct {
	// Interval is the scrape and rule evaluation interval (0:
	// ScrapeInterval).
	Interval time.Duration
	// RuleFiles are loaded as the server's rule files (absolute paths).
	RuleFiles []string
	// TLSTargets are scraped over HTTPS (job "roomlog-tls"), presenting
	// the client certificate of TLS and verifying the targets against its
	// CA file.
	TLSTargets []string
	TLS        TLSFiles
}

// TLSFiles are PEM file paths for a scrape over HTTPS.
type TLSFiles struct{ CA, Cert, Key string }

// StartWith is Start with rule files, another interval and targets
// scraped over HTTPS.
func StartWith(ctx context.Context, t testing.TB, targets []string, o Options) *Server {
	t.Helper()
	bin, _ := Require(t)
	dir := t.TempDir()
	if o.Interval <= 0 {
		o.Interval = ScrapeInterval
	}
	quoted := make([]string, len(targets))
	for i, tg := range targets {
		quoted[i] = strconv.Quote(tg)
	}
	rules := make([]string, len(o.RuleFiles))
	for i, f := range o.RuleFiles {
		rules[i] = strconv.Quote(f)
	}
	cfg := fmt.Sprintf(`global:
  scrape_interval: %s
  scrape_timeout: %s
  evaluation_interval: %s
rule_files: [%s]
scrape_configs:
  - job_name: roomlog
    static_configs:
      - targets: [%s]
`, o.Interval, o.Interval, o.Interval, strings.Join(rules, ", "), strings.Join(quoted, ", "))
	if len(o.TLSTargets) > 0 {
		tq := make([]string, len(o.TLSTargets))
		for i, tg := range o.TLSTargets {
			tq[i] = strconv.Quote(tg)
		}
		cfg += fmt.Sprintf(`  - job_name: roomlog-tls
    scheme: https
    tls_config:
      ca_file: %s
      cert_file: %s
      key_file: %s
    static_configs:
      - targets: [%s]
`, strconv.Quote(o.TLS.CA), strconv.Quote(o.TLS.Cert), strconv.Quote(o.TLS.Key), strings.Join(tq, ", "))
	}
	cfgPath := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatalf("promserver: %v", err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("promserver: %v", err)
	}
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	s := &Server{URL: "http://" + addr, out: &lockedBuffer{}}
	s.cmd = exec.Command(bin,
		"--config.file="+cfgPath,
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
		"--log.level=warn",
	)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("promserver: start %s: %v", bin, err)
	}
	exited := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(5 * time.Second):
			_ = s.cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("prometheus output:\n%s", s.out.String())
		}
	})
	rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(rctx, http.MethodGet, s.URL+"/-/ready", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return s
			}
		}
		select {
		case <-exited:
			t.Fatalf("promserver: prometheus exited before it was ready:\n%s", s.out.String())
		case <-rctx.Done():
			t.Fatalf("promserver: prometheus not ready within 60s: %v\n%s", rctx.Err(), s.out.String())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Sample is one element of an instant vector.
type Sample struct {
	Labels map[string]string
	Value  float64
}

// Query runs an instant PromQL query and returns the vector's samples.
func (s *Server) Query(ctx context.Context, promql string) ([]Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	u := s.URL + "/api/v1/query?" + url.Values{"query": {promql}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", promql, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	if err != nil {
		return nil, fmt.Errorf("query %q: %w", promql, err)
	}
	var r struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string `json:"resultType"`
			Result     []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal(body, &r); err != nil {
		return nil, fmt.Errorf("query %q: %s: %w", promql, resp.Status, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("query %q: %s: %s", promql, resp.Status, r.Error)
	}
	if r.Data.ResultType != "vector" {
		return nil, fmt.Errorf("query %q: result type %q, want vector", promql, r.Data.ResultType)
	}
	out := make([]Sample, 0, len(r.Data.Result))
	for _, e := range r.Data.Result {
		vs, ok := e.Value[1].(string)
		if !ok {
			return nil, errors.New("query: sample value is not a string")
		}
		v, err := strconv.ParseFloat(vs, 64)
		if err != nil {
			return nil, fmt.Errorf("query: sample value %q: %w", vs, err)
		}
		out = append(out, Sample{Labels: e.Metric, Value: v})
	}
	return out, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.b.Len() > 1<<20 {
		return len(p), nil
	}
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

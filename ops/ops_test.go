package ops

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/roomlog/roomlog/internal/infra/promserver"
)

const (
	rulesFile = "prometheus/roomlog-alerts.yml"
	testsFile = "prometheus/roomlog-alerts_test.yml"
	dashFile  = "grafana/roomlog-dashboard.json"
)

// Rule is one alerting rule of rulesFile.
type rule struct {
	Alert       string            `yaml:"alert"`
	Expr        string            `yaml:"expr"`
	For         string            `yaml:"for"`
	Labels      map[string]string `yaml:"labels"`
	Annotations map[string]string `yaml:"annotations"`
}

func readRules(t *testing.T) []rule {
	t.Helper()
	var f struct {
		Groups []struct {
			Rules []rule `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile(rulesFile)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &f))
	var out []rule
	for _, g := range f.Groups {
		out = append(out, g.Rules...)
	}
	require.NotEmpty(t, out)
	return out
}

// TestAlertRules: promtool accepts the rules and passes their unit tests;
// every alert has a case where it fires and one where it does not, a
// severity, a summary naming the room, and a runbook that exists.
func TestAlertRules(t *testing.T) {
	_, promtool := promserver.Require(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for _, args := range [][]string{{"check", "rules", rulesFile}, {"test", "rules", testsFile}} {
		out, err := exec.CommandContext(ctx, promtool, args...).CombinedOutput()
		require.NoError(t, err, "promtool %s:\n%s", strings.Join(args, " "), out)
		t.Logf("promtool %s: %s", strings.Join(args, " "), strings.TrimSpace(string(out)))
	}

	var tests struct {
		RuleFiles []string `yaml:"rule_files"`
		Tests     []struct {
			Name  string `yaml:"name"`
			Cases []struct {
				Alert  string `yaml:"alertname"`
				Alerts []any  `yaml:"exp_alerts"`
			} `yaml:"alert_rule_test"`
		} `yaml:"tests"`
	}
	b, err := os.ReadFile(testsFile)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &tests))
	require.Equal(t, []string{filepath.Base(rulesFile)}, tests.RuleFiles, "the tests load the shipped rules")
	fires, quiet := map[string]int{}, map[string]int{}
	for _, tc := range tests.Tests {
		for _, c := range tc.Cases {
			if len(c.Alerts) > 0 {
				fires[c.Alert]++
			} else {
				quiet[c.Alert]++
			}
		}
	}
	rules := readRules(t)
	names := map[string]bool{}
	for _, r := range rules {
		t.Run(r.Alert, func(t *testing.T) {
			require.False(t, names[r.Alert], "alert defined twice")
			names[r.Alert] = true
			require.Positive(t, fires[r.Alert], "no promtool case where %s fires", r.Alert)
			require.Positive(t, quiet[r.Alert], "no promtool case where %s does not fire", r.Alert)
			require.Contains(t, []string{"critical", "warning"}, r.Labels["severity"])
			require.Contains(t, r.Annotations["summary"], "{{ $labels.room }}", "the summary names the room")
			url := r.Annotations["runbook_url"]
			require.True(t, strings.HasPrefix(url, "docs/runbooks/") && strings.HasSuffix(url, ".md"), "runbook_url %q is a path under docs/runbooks/", url)
			body, err := os.ReadFile(filepath.Join("..", url))
			require.NoError(t, err, "runbook of %s", r.Alert)
			require.Contains(t, string(body), r.Alert, "the runbook %s names the alert", url)
		})
	}
	for a := range fires {
		require.True(t, names[a], "promtool cases for an alert that does not exist: %s", a)
	}
}

// metricRE matches the roomlog metric names in a PromQL expression.
var metricRE = regexp.MustCompile(`\broomlog_[a-z_]+`)

// exported lists the metric names roomlog's Go code defines (string
// literals "roomlog_..." outside tests), with the suffixes Prometheus adds
// to histograms.
func exported(t *testing.T) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	lit := regexp.MustCompile(`"(roomlog_[a-z_]+)"`)
	err := filepath.WalkDir("..", func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != ".." && (d.Name() == "third_party" || strings.HasPrefix(d.Name(), ".")) {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, m := range lit.FindAllStringSubmatch(string(b), -1) {
			for _, suffix := range []string{"", "_bucket", "_sum", "_count"} {
				out[m[1]+suffix] = true
			}
		}
		return nil
	})
	require.NoError(t, err)
	require.True(t, out["roomlog_replica_role"], "the walk found the replica's metrics")
	return out
}

// TestOpsNameExportedMetrics: every metric the rules and the dashboard
// query is one roomlog exports (a renamed metric breaks this test, not
// the operator's alert), and every dashboard panel has a query.
func TestOpsNameExportedMetrics(t *testing.T) {
	have := exported(t)
	check := func(where, expr string) {
		t.Helper()
		ms := metricRE.FindAllString(expr, -1)
		require.NotEmpty(t, ms, "%s: %s names no roomlog metric", where, expr)
		for _, m := range ms {
			require.True(t, have[m], "%s: %s is not a metric roomlog exports", where, m)
		}
	}
	for _, r := range readRules(t) {
		check(r.Alert, r.Expr)
	}
	for _, p := range DashboardQueries(t) {
		check(p.Panel, p.Expr)
	}
}

// PanelQuery is one query of a dashboard panel.
type PanelQuery struct{ Panel, Expr string }

// DashboardQueries returns every panel's queries (rows excluded), and
// fails the test on a panel without one.
func DashboardQueries(t testing.TB) []PanelQuery {
	t.Helper()
	b, err := os.ReadFile(dashFile)
	require.NoError(t, err)
	return ParseDashboard(t, b)
}

// ParseDashboard is DashboardQueries for a dashboard's JSON.
func ParseDashboard(t testing.TB, b []byte) []PanelQuery {
	t.Helper()
	var d struct {
		Panels []struct {
			Type    string `json:"type"`
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	require.NoError(t, json.Unmarshal(b, &d))
	var out []PanelQuery
	var titles []string
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q has no query", p.Title)
		require.False(t, slices.Contains(titles, p.Title), "two panels titled %q", p.Title)
		titles = append(titles, p.Title)
		for _, tg := range p.Targets {
			require.NotEmpty(t, tg.Expr, "panel %q", p.Title)
			out = append(out, PanelQuery{p.Title, tg.Expr})
		}
	}
	return out
}

// TestDocs: the README reads in five minutes (at most 12 kB) and links
// the guides; every relative link in the README and under docs/ points
// at a file or directory of this repository; docs/ holds at least six
// guides beside the runbooks; docs/metrics.md names every metric roomlog
// exports.
func TestDocs(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "README.md"))
	require.NoError(t, err)
	require.LessOrEqual(t, len(readme), 12*1024, "README.md is %d bytes", len(readme))
	files := []string{filepath.Join("..", "README.md")}
	err = filepath.WalkDir(filepath.Join("..", "docs"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return err
	})
	require.NoError(t, err)
	guides := 0
	for _, f := range files {
		if filepath.Dir(f) == filepath.Join("..", "docs") && filepath.Base(f) != "README.md" {
			guides++
		}
	}
	require.GreaterOrEqual(t, guides, 6, "guides under docs/")
	link := regexp.MustCompile(`\]\(([^)#\s]+)(#[^)]*)?\)`)
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, m := range link.FindAllStringSubmatch(string(b), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			_, err := os.Stat(filepath.Join(filepath.Dir(f), target))
			require.NoError(t, err, "%s links %s", f, target)
		}
		if filepath.Base(f) == "README.md" && filepath.Dir(f) == ".." {
			for _, g := range []string{"docs/tls.md", "docs/upgrades.md", "docs/disaster-recovery.md", "docs/large-namespaces.md",
				"docs/metrics.md", "docs/zookeeper-sizing.md", "docs/by-hand.md"} {
				require.Contains(t, string(b), "("+g+")", "the README links %s", g)
			}
		}
	}
	metricsDoc, err := os.ReadFile(filepath.Join("..", "docs", "metrics.md"))
	require.NoError(t, err)
	for m := range exported(t) {
		if strings.HasSuffix(m, "_bucket") || strings.HasSuffix(m, "_sum") || strings.HasSuffix(m, "_count") || m == "roomlog_replica_" {
			continue
		}
		require.True(t, strings.Contains(string(metricsDoc), m), "docs/metrics.md does not document %s", m)
	}
}

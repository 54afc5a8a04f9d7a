package main

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// Target is one goal, checked against the rows of this run: issue 14's
// (256 B at 16 and 256 proposers, bulk of realistic entries, standby lag,
// checkpoint under load, bootstrap) and, where issue 14 sets none, issue
// 7's (one proposer, failover).
type Target struct {
	Name     string  `json:"name"`
	Goal     string  `json:"goal"`
	Measured string  `json:"measured"` // "" when the run did not measure it
	Value    float64 `json:"value"`
	Met      *bool   `json:"met,omitempty"` // nil when not measured
}

// find returns the first row matching system, scenario, entry size and
// concurrency (size or concurrency 0 = any).
func find(rows []Result, system, scenario string, size, conc int) *Result {
	for i := range rows {
		r := &rows[i]
		if r.System == system && r.Scenario == scenario &&
			(size == 0 || r.EntryBytes == size) && (conc == 0 || r.Concurrency == conc) {
			return r
		}
	}
	return nil
}

// evalTargets checks the targets (256 B entries, 3-member cluster)
// against rows. sessionTimeout is the replicas' ZooKeeper session timeout
// (the failover goal is relative to it).
func evalTargets(rows []Result, sessionTimeout time.Duration) []Target {
	var ts []Target
	add := func(name, goal string, r *Result, value float64, unit string, ok func(float64) bool) {
		t := Target{Name: name, Goal: goal}
		if r != nil {
			t.Value = value
			t.Measured = fmt.Sprintf("%s%s", trimFloat(value), unit)
			met := ok(value)
			t.Met = &met
		}
		ts = append(ts, t)
	}
	atLeast := func(v float64) func(float64) bool { return func(x float64) bool { return x >= v } }
	atMost := func(v float64) func(float64) bool { return func(x float64) bool { return x <= v } }

	for _, c := range []struct {
		conc      int
		rate, p99 float64
	}{{1, 1700, 2}, {16, 10000, 7}, {256, 100000, 15}} { // x1: issue 7; x16, x256: issues 7 and 14
		r := find(rows, "roomlog", "append", 256, c.conc)
		var rate, p99 float64
		if r != nil {
			rate, p99 = r.EntriesPerS, r.P99ms
		}
		add(fmt.Sprintf("%d proposer(s), 256 B", c.conc), fmt.Sprintf(">= %s entries/s", fmtRate(c.rate)), r, rate, " entries/s", atLeast(c.rate))
		add(fmt.Sprintf("%d proposer(s), 256 B", c.conc), fmt.Sprintf("p99 <= %g ms", c.p99), r, p99, " ms", atMost(c.p99))
	}

	// Bulk (issue 14): realistic entries, the demo's namespace commands
	// stored with the writer's default compression (compress-demo-s2),
	// logical entries/s and logical MB/s over the raw batched ceiling.
	demo := find(rows, "roomlog", "compress-demo-s2", 0, 0)
	var rate, ratio float64
	var ratioRow *Result
	if demo != nil {
		rate = demo.EntriesPerS
		if demo.RatioToRaw != nil {
			ratio, ratioRow = *demo.RatioToRaw, demo
		}
	}
	add("bulk, demo entries", ">= 500k entries/s", demo, rate, " entries/s", atLeast(500000))
	add("bulk, demo entries", "logical MB/s >= 1.5x raw batched", ratioRow, ratio, "x", atLeast(1.5))

	single := func(name, goal, scenario, unit string, pick func(*Result) float64, ok func(float64) bool) {
		r := find(rows, "roomlog", scenario, 0, 0)
		var v float64
		if r != nil {
			v = pick(r)
		}
		add(name, goal, r, v, unit, ok)
	}
	p99 := func(r *Result) float64 { return r.P99ms }
	p50 := func(r *Result) float64 { return r.P50ms }
	single("standby lag", "p99 <= 20 ms at half max rate", "lag", " ms", p99, atMost(20))
	// Issue 28: a dead process is proven gone (its liveness stream), not
	// waited out: below a second whatever the session timeout; a pause
	// shorter than the session is no takeover.
	single("kill -9 failover", "median <= 1 s", "failover-kill", " ms", p50, atMost(1000))
	single("kill -9 failover, worst", "max <= 1.5 s", "failover-kill", " ms", p99, atMost(1500))
	single("pause shorter than the session", "no takeover in 20 SIGSTOPs of 2 s", "failover-pause", " takeovers",
		func(r *Result) float64 { return extraNum(r.Extra, "takeovers") }, atMost(0))
	single("graceful transfer", "median <= 300 ms", "failover-transfer", " ms", p50, atMost(300))
	single("checkpoint under load", "Propose p99 at most 1.5x", "checkpoint-load", "x",
		func(r *Result) float64 { return extraNum(r.Extra, "p99_ratio") }, atMost(1.5))
	single("bootstrap", ">= 200 MB/s end to end", "bootstrap", " MB/s", func(r *Result) float64 { return r.MBPerS }, atLeast(200))
	return ts
}

func trimFloat(v float64) string {
	switch {
	case v >= 1000:
		return fmtRate(v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func writeTargets(w io.Writer, ts []Target) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "target\tgoal\tmeasured\tresult")
	for _, t := range ts {
		res, m := "not run", t.Measured
		if t.Met != nil {
			res = "MISSED"
			if *t.Met {
				res = "met"
			}
		}
		if m == "" {
			m = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", t.Name, t.Goal, m, res)
	}
	return tw.Flush()
}

package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

// Result is one row of the report. The JSON keys are stable: scripts that
// compare runs read them. A figure that does not apply to a row is 0, except
// RatioToRaw, which is omitted where it does not apply.
type Result struct {
	System      string   `json:"system"`   // "zookeeper" (raw client) or "roomlog"
	Servers     int      `json:"servers"`  // ZooKeeper servers in the ensemble
	Scenario    string   `json:"scenario"` // e.g. "raw-pipelined", "append", "failover-kill"
	EntryBytes  int      `json:"entry_bytes"`
	Concurrency int      `json:"concurrency"` // proposers, or requests in flight for raw rows
	EntriesPerS float64  `json:"entries_per_s"`
	MBPerS      float64  `json:"mb_per_s"` // entry payload bytes, 1 MB = 10^6 bytes
	P50ms       float64  `json:"p50_ms"`
	P99ms       float64  `json:"p99_ms"`
	P999ms      float64  `json:"p999_ms"`
	RatioToRaw  *float64 `json:"ratio_to_raw,omitempty"` // MB/s over the raw batched ceiling's MB/s
	// Extra holds scenario-specific figures (sample lists, counts, phases).
	Extra map[string]any `json:"extra,omitempty"`
	// Note is a short human remark (what the row measures, errors seen).
	Note string `json:"note,omitempty"`
}

func (r *Result) setExtra(k string, v any) {
	if r.Extra == nil {
		r.Extra = map[string]any{}
	}
	r.Extra[k] = v
}

// setLatency fills p50/p99/p999 from a histogram.
func (r *Result) setLatency(h *histogram) {
	r.P50ms = round3(ms(h.Quantile(0.50)))
	r.P99ms = round3(ms(h.Quantile(0.99)))
	r.P999ms = round3(ms(h.Quantile(0.999)))
	r.setExtra("samples", h.Count())
	r.setExtra("max_ms", round3(ms(h.Max())))
	r.setExtra("mean_ms", round3(ms(h.Mean())))
}

func round3(v float64) float64 {
	return float64(int64(v*1000+0.5)) / 1000
}

// Report is the whole -json document.
type Report struct {
	Started  time.Time `json:"started"`
	Finished time.Time `json:"finished"`
	Command  string    `json:"command"`
	Servers  int       `json:"servers"`
	Quick    bool      `json:"quick"`
	Duration string    `json:"duration_per_row"`
	GoMaxP   int       `json:"gomaxprocs"`
	CPUs     int       `json:"cpus"`
	LoadAvg  string    `json:"loadavg_at_start"`
	Writer   string    `json:"writer_config"`
	// Clients is where the clients connected: "leader first" (logroom's
	// default; the raw rows to the leader too) or "any server".
	Clients string   `json:"clients,omitempty"`
	Results []Result `json:"results"`
	Targets []Target `json:"targets"`
	Errors  []string `json:"errors,omitempty"`
}

func writeJSON(path string, rep *Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

// fmtRate prints a rate with a k/M suffix and three significant digits.
func fmtRate(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e4:
		return fmt.Sprintf("%.1fk", v/1e3)
	case v >= 1e3:
		return fmt.Sprintf("%.2fk", v/1e3)
	default:
		return fmt.Sprintf("%.0f", v)
	}
}

func fmtMs(v float64) string {
	switch {
	case v == 0:
		return "-"
	case v >= 100:
		return fmt.Sprintf("%.0f", v)
	case v >= 10:
		return fmt.Sprintf("%.1f", v)
	default:
		return fmt.Sprintf("%.2f", v)
	}
}

func fmtBytes(n int) string {
	switch {
	case n == 0:
		return "-"
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%dKiB", n>>10)
	default:
		return fmt.Sprintf("%dB", n)
	}
}

// writeTable prints the rows as an aligned table.
func writeTable(w io.Writer, rows []Result) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "system\tscenario\tentry\tconc\tentries/s\tMB/s\tp50 ms\tp99 ms\tp99.9 ms\t/raw\tzk cpu\tother cpu\t")
	for _, r := range rows {
		ratio := "-"
		if r.RatioToRaw != nil {
			ratio = fmt.Sprintf("%.0f%%", *r.RatioToRaw*100)
		}
		mb := "-"
		if r.MBPerS > 0 {
			mb = fmt.Sprintf("%.1f", r.MBPerS)
		}
		conc := "-"
		if r.Concurrency > 0 {
			conc = fmt.Sprint(r.Concurrency)
		}
		zkCPU, otherCPU := "-", "-"
		if _, ok := r.Extra["cpu_machine_pct"]; ok {
			zkCPU = fmt.Sprintf("%.0f%%", extraNum(r.Extra, "cpu_zookeeper_pct"))
			otherCPU = fmt.Sprintf("%.0f%%", extraNum(r.Extra, "cpu_others_pct"))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n",
			r.System, r.Scenario, fmtBytes(r.EntryBytes), conc, fmtRate(r.EntriesPerS), mb,
			fmtMs(r.P50ms), fmtMs(r.P99ms), fmtMs(r.P999ms), ratio, zkCPU, otherCPU)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "zk cpu: the ZooKeeper servers' CPU, other cpu: CPU of processes that are neither ZooKeeper nor the bench, both in % of one core during the row.")
	var notes []string
	for _, r := range rows {
		if r.Note != "" {
			head := fmt.Sprintf("%s %s %s", r.System, r.Scenario, fmtBytes(r.EntryBytes))
			if r.Concurrency > 0 {
				head += fmt.Sprintf(" x%d", r.Concurrency)
			}
			notes = append(notes, fmt.Sprintf("  %s: %s", head, r.Note))
		}
	}
	if len(notes) > 0 {
		fmt.Fprintln(w, "notes:")
		fmt.Fprintln(w, strings.Join(notes, "\n"))
	}
	return nil
}

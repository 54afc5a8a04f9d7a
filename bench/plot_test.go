package main

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func sampleRows() []Result {
	ratio, demoRatio := 0.8, 1.2
	return []Result{
		{System: "zookeeper", Scenario: "raw-seq", EntryBytes: 256, Concurrency: 1, EntriesPerS: 550, P99ms: 4},
		{System: "zookeeper", Scenario: "raw-pipelined", EntryBytes: 256, Concurrency: 64, EntriesPerS: 5000, P99ms: 30},
		{System: "zookeeper", Scenario: "raw-pipelined", EntryBytes: 256 << 10, Concurrency: 64, EntriesPerS: 120, MBPerS: 31, P99ms: 900},
		{System: "roomlog", Scenario: "append", EntryBytes: 256, Concurrency: 1, EntriesPerS: 1800, P99ms: 1.9},
		{System: "roomlog", Scenario: "append", EntryBytes: 256, Concurrency: 16, EntriesPerS: 12000, P99ms: 6},
		{System: "roomlog", Scenario: "append", EntryBytes: 256, Concurrency: 256, EntriesPerS: 150000, P99ms: 14},
		{System: "roomlog", Scenario: "append", EntryBytes: 64, Concurrency: 1, EntriesPerS: 1900, P99ms: 1.8},
		{System: "roomlog", Scenario: "append", EntryBytes: 64, Concurrency: 16, EntriesPerS: 13000, P99ms: 5},
		{System: "roomlog", Scenario: "append-bulk", EntryBytes: 256, Concurrency: 16, EntriesPerS: 600000, MBPerS: 25, P99ms: 40,
			RatioToRaw: &ratio, Extra: map[string]any{"entries_per_call": 1000}},
		{System: "roomlog", Scenario: "compress-demo-s2", EntryBytes: 256, Concurrency: 16, EntriesPerS: 900000, MBPerS: 230, P99ms: 60,
			RatioToRaw: &demoRatio, Extra: map[string]any{"entries_per_call": 1000, "data": "demo"}},
		{System: "roomlog", Scenario: "lag", EntryBytes: 256, P50ms: 3, P99ms: 9},
		{System: "roomlog", Scenario: "checkpoint-load", EntryBytes: 256, Concurrency: 256, P99ms: 30,
			Extra: map[string]any{"p99_ratio": 1.6}},
	}
}

// wellFormed decodes every XML token of an SVG document.
func wellFormed(t *testing.T, doc []byte) {
	t.Helper()
	d := xml.NewDecoder(bytes.NewReader(doc))
	for {
		_, err := d.Token()
		if errors.Is(err, io.EOF) {
			return
		}
		require.NoError(t, err)
	}
}

func TestResultsPlotIsWellFormedSVG(t *testing.T) {
	var buf bytes.Buffer
	p := resultsPlot(sampleRows(), 3, "subtitle with <markup> & ampersand")
	require.NoError(t, p.WriteSVG(&buf))
	doc := buf.Bytes()
	wellFormed(t, doc)
	s := buf.String()
	require.True(t, strings.HasPrefix(s, "<svg "))
	for _, want := range []string{
		"throughput, entries/s (log scale)", "p99 latency", // axis labels
		"roomlog 64B entries", "roomlog 256B entries", "roomlog bulk, 256 B", "raw ZooKeeper", "target", // legend
		"&lt;markup&gt; &amp; ampersand", // escaped
		"1000/call x16", "x256",
		"<polyline", // a line per size
	} {
		require.Contains(t, s, want)
	}
	require.Equal(t, 2, strings.Count(s, "<polyline"), "one line per entry size")
}

func TestPlotWithoutPoints(t *testing.T) {
	var buf bytes.Buffer
	require.NoError(t, (&plot{Title: "empty"}).WriteSVG(&buf))
	wellFormed(t, buf.Bytes())
	require.NotContains(t, buf.String(), "NaN")
	require.NotContains(t, buf.String(), "Inf")
}

func TestLogTicksAndLabels(t *testing.T) {
	lo, hi := logRange([]float64{230, 48700})
	require.Equal(t, 100.0, lo)
	require.Equal(t, 100000.0, hi)
	require.Equal(t, []float64{100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000}, logTicks(lo, hi))
	require.Equal(t, "2k", tickLabel(2000))
	require.Equal(t, "1M", tickLabel(1e6))
	require.Equal(t, "0.5", tickLabel(0.5))
}

func TestPlaceLabelAvoidsOverlap(t *testing.T) {
	frame := box{0, 0, 1000, 1000}
	markers := []box{{494, 494, 506, 506}}
	var placed []box
	for range 4 {
		placeLabel("label", 500, 500, markers, &placed, frame)
	}
	for i := range placed {
		require.False(t, placed[i].overlaps(markers[0]), "label %d over the marker", i)
		for j := range i {
			require.False(t, placed[i].overlaps(placed[j]), "labels %d and %d overlap", i, j)
		}
	}
}

func TestTargetsAndTable(t *testing.T) {
	rows := sampleRows()
	ts := evalTargets(rows, 0)
	byGoal := map[string]Target{}
	for _, tg := range ts {
		byGoal[tg.Name+" "+tg.Goal] = tg
	}
	require.True(t, *byGoal["1 proposer(s), 256 B >= 1.70k entries/s"].Met)
	require.True(t, *byGoal["256 proposer(s), 256 B p99 <= 15 ms"].Met)
	require.True(t, *byGoal["bulk, demo entries >= 500k entries/s"].Met)
	require.False(t, *byGoal["bulk, demo entries logical MB/s >= 1.5x raw batched"].Met, "1.2x of the ceiling")
	require.True(t, *byGoal["standby lag p99 <= 20 ms at half max rate"].Met)
	require.False(t, *byGoal["checkpoint under load Propose p99 at most 1.5x"].Met, "1.6x")
	require.Nil(t, byGoal["bootstrap >= 200 MB/s end to end"].Met, "not measured")

	var buf bytes.Buffer
	require.NoError(t, writeTable(&buf, rows))
	require.Contains(t, buf.String(), "append-bulk")
	require.Contains(t, buf.String(), "80%")
	buf.Reset()
	require.NoError(t, writeTargets(&buf, ts))
	require.Contains(t, buf.String(), "not run")
}

func TestParseJstatUsed(t *testing.T) {
	out := ` S0C         S1C         S0U         S1U          EC           EU           OC           OU          MC         MU       CCSC      CCSU     YGC     YGCT     FGC    FGCT     CGC    CGCT       GCT   
        0.0     8192.0        0.0     8192.0     667648.0     335872.0     372736.0     120000.5     20480.0    19800.1   2304.0    2100.0     12     0.101     0     0.000     4     0.010     0.111
`
	mb, err := parseJstatUsed(out)
	require.NoError(t, err)
	require.InDelta(t, (8192.0+335872.0+120000.5)*1024/1e6, mb, 1e-9)
	_, err = parseJstatUsed("garbage")
	require.Error(t, err)
	_, err = parseJstatUsed("A B\n1 2")
	require.Error(t, err)
}

func TestEntryMakerExactSize(t *testing.T) {
	for _, size := range []int{64, 256, 1024, 4096} {
		em, err := newEntryMaker(size, 100)
		require.NoError(t, err)
		for i := range 3 {
			require.Len(t, em.make(i*1000), size)
		}
	}
	_, err := newEntryMaker(3, 10)
	require.Error(t, err)
}

func TestTailBufferCause(t *testing.T) {
	tb := &tailBuffer{max: 200}
	_, _ = tb.Write([]byte("[  1.0s] progress\npanic: logroom: queued request in state 1\n\ngoroutine 14 [running]:\n" +
		"github.com/roomlog/roomlog/logroom.(*Writer).formBatch(0x1)\n\t/work/main/logroom/pipeline.go:209 +0xfa5\nmore\n"))
	require.Equal(t, "panic: logroom: queued request in state 1 at github.com/roomlog/roomlog/logroom.(*Writer).formBatch(0x1) (pipeline.go:209)", tb.cause())
	tb = &tailBuffer{max: 8}
	_, _ = tb.Write([]byte("first line\nlast"))
	require.Equal(t, "ine\nlast"[4:], tb.cause())
}

func TestCPUUse(t *testing.T) {
	a := cpuSample{at: time.Unix(100, 0), zkTicks: 1000, selfTicks: 50, machineBusy: 5000, machineTotal: 10000}
	b := cpuSample{at: time.Unix(102, 0), zkTicks: 1200, selfTicks: 70, machineBusy: 5350, machineTotal: 10400}
	u := b.since(a, 2)
	require.InDelta(t, 100.0, u.ZooKeeper, 1e-9) // 200 ticks over 2 s = one core
	require.InDelta(t, 10.0, u.Bench, 1e-9)
	require.InDelta(t, 175.0, u.Machine, 1e-9) // 350 of 400 ticks busy, 2 cores
	require.InDelta(t, 65.0, u.Others, 1e-9)
	s := takeCPU(nil)
	require.False(t, s.at.IsZero())
}

package main

import (
	"bufio"
	"encoding/xml"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
)

// plotPoint is one point of a series; Label is drawn next to it.
type plotPoint struct {
	X, Y  float64
	Label string
}

// plotSeries is a line (or, with NoLine, a set of markers) with a legend entry.
type plotSeries struct {
	Name   string
	Color  string
	Points []plotPoint
	NoLine bool
	Dashed bool
	Marker string // "circle" (default), "square", "diamond", "ring" (hollow circle)
}

// plot is a log-log scatter/line chart rendered by hand as SVG.
type plot struct {
	Title, Subtitle string
	XLabel, YLabel  string
	Series          []plotSeries
	Notes           []string // short lines under the legend
}

const (
	plotW       = 1000
	plotH       = 600
	plotLeft    = 80
	plotRight   = 280 // room for the legend
	plotTop     = 64
	plotBottom  = 70
	plotFont    = "font-family=\"Helvetica, Arial, sans-serif\""
	plotAxisClr = "#333"
	plotGridClr = "#e3e3e3"
)

// logRange returns decade-aligned bounds covering vs (all > 0), padded so
// points never sit on the frame.
func logRange(vs []float64) (lo, hi float64) {
	lo, hi = math.Inf(1), math.Inf(-1)
	for _, v := range vs {
		if v > 0 {
			lo = math.Min(lo, v)
			hi = math.Max(hi, v)
		}
	}
	if math.IsInf(lo, 1) {
		return 1, 10
	}
	lo = math.Pow(10, math.Floor(math.Log10(lo/1.15)))
	hi = math.Pow(10, math.Ceil(math.Log10(hi*1.15)))
	if hi <= lo {
		hi = lo * 10
	}
	return lo, hi
}

// logTicks returns 1-2-5 ticks in [lo, hi].
func logTicks(lo, hi float64) []float64 {
	var ts []float64
	for d := math.Floor(math.Log10(lo)); d <= math.Ceil(math.Log10(hi)); d++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, d)
			if v >= lo*0.999 && v <= hi*1.001 {
				ts = append(ts, v)
			}
		}
	}
	return ts
}

// tickLabel formats an axis value compactly: 500, 2k, 10k, 1M, 0.5, 20.
func tickLabel(v float64) string {
	switch {
	case v >= 1e6:
		return strings.TrimSuffix(fmt.Sprintf("%g", v/1e6), ".0") + "M"
	case v >= 1e3:
		return strings.TrimSuffix(fmt.Sprintf("%g", v/1e3), ".0") + "k"
	default:
		return fmt.Sprintf("%g", v)
	}
}

func esc(s string) string {
	var b strings.Builder
	_ = xml.EscapeText(&b, []byte(s))
	return b.String()
}

// WriteSVG renders the plot. Both axes are logarithmic.
func (p *plot) WriteSVG(out io.Writer) error {
	w := bufio.NewWriter(out)
	var xs, ys []float64
	for _, s := range p.Series {
		for _, pt := range s.Points {
			xs = append(xs, pt.X)
			ys = append(ys, pt.Y)
		}
	}
	x0, x1 := logRange(xs)
	y0, y1 := logRange(ys)
	iw := float64(plotW - plotLeft - plotRight)
	ih := float64(plotH - plotTop - plotBottom)
	px := func(x float64) float64 {
		return plotLeft + iw*(math.Log10(x)-math.Log10(x0))/(math.Log10(x1)-math.Log10(x0))
	}
	py := func(y float64) float64 {
		return plotTop + ih - ih*(math.Log10(y)-math.Log10(y0))/(math.Log10(y1)-math.Log10(y0))
	}

	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" %s font-size="13">`+"\n",
		plotW, plotH, plotW, plotH, plotFont)
	fmt.Fprintf(w, `<rect x="0" y="0" width="%d" height="%d" fill="white"/>`+"\n", plotW, plotH)
	fmt.Fprintf(w, `<text x="%d" y="26" font-size="18" font-weight="bold">%s</text>`+"\n", plotLeft, esc(p.Title))
	if p.Subtitle != "" {
		fmt.Fprintf(w, `<text x="%d" y="46" font-size="12" fill="#555">%s</text>`+"\n", plotLeft, esc(p.Subtitle))
	}

	// Grid and ticks.
	fmt.Fprintln(w, `<g stroke-width="1">`)
	for _, t := range logTicks(x0, x1) {
		x := px(t)
		major := math.Abs(math.Log10(t)-math.Round(math.Log10(t))) < 1e-9
		clr := plotGridClr
		if major {
			clr = "#c8c8c8"
		}
		fmt.Fprintf(w, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", x, plotTop, x, plotTop+ih, clr)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="%s">%s</text>`+"\n", x, plotTop+ih+18, plotAxisClr, tickLabel(t))
	}
	for _, t := range logTicks(y0, y1) {
		y := py(t)
		major := math.Abs(math.Log10(t)-math.Round(math.Log10(t))) < 1e-9
		clr := plotGridClr
		if major {
			clr = "#c8c8c8"
		}
		fmt.Fprintf(w, `<line x1="%d" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s"/>`+"\n", plotLeft, y, plotLeft+iw, y, clr)
		fmt.Fprintf(w, `<text x="%d" y="%.1f" text-anchor="end" fill="%s">%s</text>`+"\n", plotLeft-8, y+4, plotAxisClr, tickLabel(t))
	}
	fmt.Fprintln(w, `</g>`)
	fmt.Fprintf(w, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="%s"/>`+"\n", plotLeft, plotTop, iw, ih, plotAxisClr)

	// Axis labels.
	fmt.Fprintf(w, `<text x="%.1f" y="%d" text-anchor="middle" font-size="14">%s</text>`+"\n", plotLeft+iw/2, plotH-22, esc(p.XLabel))
	fmt.Fprintf(w, `<text transform="translate(22 %.1f) rotate(-90)" text-anchor="middle" font-size="14">%s</text>`+"\n", plotTop+ih/2, esc(p.YLabel))

	// Series: lines, then markers.
	var markers, labels []box
	for _, s := range p.Series {
		pts := append([]plotPoint(nil), s.Points...)
		sort.SliceStable(pts, func(i, j int) bool { return pts[i].X < pts[j].X })
		if !s.NoLine && len(pts) > 1 {
			var b strings.Builder
			for i, pt := range pts {
				if i > 0 {
					b.WriteByte(' ')
				}
				fmt.Fprintf(&b, "%.1f,%.1f", px(pt.X), py(pt.Y))
			}
			dash := ""
			if s.Dashed {
				dash = ` stroke-dasharray="6 4"`
			}
			fmt.Fprintf(w, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2.2"%s/>`+"\n", b.String(), s.Color, dash)
			// Labels avoid the line too: small boxes along each segment.
			for i := 1; i < len(pts); i++ {
				ax, ay, bx, by := px(pts[i-1].X), py(pts[i-1].Y), px(pts[i].X), py(pts[i].Y)
				steps := int(math.Hypot(bx-ax, by-ay)/6) + 1
				for k := 0; k <= steps; k++ {
					f := float64(k) / float64(steps)
					x, y := ax+(bx-ax)*f, ay+(by-ay)*f
					markers = append(markers, box{x - 2, y - 2, x + 2, y + 2})
				}
			}
		}
		for _, pt := range pts {
			writeMarker(w, s.Marker, px(pt.X), py(pt.Y), s.Color)
			markers = append(markers, box{px(pt.X) - 6, py(pt.Y) - 6, px(pt.X) + 6, py(pt.Y) + 6})
		}
	}
	// Point labels, placed after every marker so a label avoids them all.
	for _, s := range p.Series {
		for _, pt := range s.Points {
			if pt.Label == "" {
				continue
			}
			x, y, anchor := placeLabel(pt.Label, px(pt.X), py(pt.Y), markers, &labels,
				box{plotLeft, plotTop, plotLeft + iw, plotTop + ih})
			fmt.Fprintf(w, `<text x="%.1f" y="%.1f" font-size="11" text-anchor="%s" fill="%s">%s</text>`+"\n",
				x, y, anchor, s.Color, esc(pt.Label))
		}
	}

	// Legend.
	lx := float64(plotW - plotRight + 20)
	ly := float64(plotTop + 8)
	fmt.Fprintf(w, `<text x="%.1f" y="%.1f" font-weight="bold">legend</text>`+"\n", lx, ly)
	for i, s := range p.Series {
		y := ly + 22 + float64(i)*22
		if !s.NoLine {
			dash := ""
			if s.Dashed {
				dash = ` stroke-dasharray="6 4"`
			}
			fmt.Fprintf(w, `<line x1="%.1f" y1="%.1f" x2="%.1f" y2="%.1f" stroke="%s" stroke-width="2.2"%s/>`+"\n", lx, y-4, lx+26, y-4, s.Color, dash)
		}
		writeMarker(w, s.Marker, lx+13, y-4, s.Color)
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f">%s</text>`+"\n", lx+34, y, esc(s.Name))
	}
	for i, line := range p.Notes {
		y := ly + 22 + float64(len(p.Series))*22 + 14 + float64(i)*17
		fmt.Fprintf(w, `<text x="%.1f" y="%.1f" font-size="11" fill="#555">%s</text>`+"\n", lx, y, esc(line))
	}
	fmt.Fprintln(w, `</svg>`)
	return w.Flush()
}

func writeMarker(w io.Writer, kind string, x, y float64, color string) {
	switch kind {
	case "square":
		fmt.Fprintf(w, `<rect x="%.1f" y="%.1f" width="9" height="9" fill="%s"/>`+"\n", x-4.5, y-4.5, color)
	case "diamond":
		fmt.Fprintf(w, `<polygon points="%.1f,%.1f %.1f,%.1f %.1f,%.1f %.1f,%.1f" fill="%s"/>`+"\n",
			x, y-6, x+6, y, x, y+6, x-6, y, color)
	case "ring":
		fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="5.5" fill="white" stroke="%s" stroke-width="2"/>`+"\n", x, y, color)
	default:
		fmt.Fprintf(w, `<circle cx="%.1f" cy="%.1f" r="4.5" fill="%s"/>`+"\n", x, y, color)
	}
}

// resultsPlot turns the report's rows into the throughput/latency chart: one
// line per entry size across proposer counts, bulk rows and raw ZooKeeper
// rows as markers, and the 256 B targets as hollow rings.
func resultsPlot(rows []Result, servers int, subtitle string) *plot {
	p := &plot{
		Title:    fmt.Sprintf("roomlog append: throughput vs p99 latency (%d ZooKeeper server(s))", servers),
		Subtitle: subtitle,
		XLabel:   "throughput, entries/s (log scale)",
		YLabel:   "p99 latency per Append call, ms (log scale)",
		Notes: []string{
			"xN: N concurrent proposers",
			"(goroutines calling Append in a loop)",
			"N/call: entries per Append call",
			"ZK: go-zookeeper creates, N in flight",
			"target: must be right of and below",
		},
	}
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b", "#e377c2"}
	sizes := map[int][]plotPoint{}
	var order []int
	var bulk, raw []plotPoint
	for _, r := range rows {
		if r.EntriesPerS <= 0 || r.P99ms <= 0 {
			continue
		}
		switch {
		case r.System == "roomlog" && r.Scenario == "append":
			if _, ok := sizes[r.EntryBytes]; !ok {
				order = append(order, r.EntryBytes)
			}
			sizes[r.EntryBytes] = append(sizes[r.EntryBytes], plotPoint{r.EntriesPerS, r.P99ms, fmt.Sprintf("x%d", r.Concurrency)})
		case r.System == "roomlog" && (r.Scenario == "append-bulk" || r.Scenario == "append-many"):
			label := fmt.Sprintf("%s x%d", r.Scenario, r.Concurrency)
			if n := extraNum(r.Extra, "entries_per_call"); n > 1 {
				label = fmt.Sprintf("%g/call x%d", n, r.Concurrency)
			}
			bulk = append(bulk, plotPoint{r.EntriesPerS, r.P99ms, label})
		case r.System == "zookeeper" && r.EntryBytes <= 4096:
			raw = append(raw, plotPoint{r.EntriesPerS, r.P99ms, fmt.Sprintf("ZK %s, %d in flight", fmtBytes(r.EntryBytes), r.Concurrency)})
		}
	}
	sort.Ints(order)
	for i, size := range order {
		p.Series = append(p.Series, plotSeries{
			Name:   fmt.Sprintf("roomlog %s entries", fmtBytes(size)),
			Color:  colors[i%len(colors)],
			Points: sizes[size],
		})
	}
	if len(bulk) > 0 {
		p.Series = append(p.Series, plotSeries{Name: "roomlog bulk, 256 B", Color: "#ff7f0e", Points: bulk, NoLine: true, Marker: "diamond"})
	}
	if len(raw) > 0 {
		p.Series = append(p.Series, plotSeries{Name: "raw ZooKeeper, 1 znode/entry", Color: "#7f7f7f", Points: raw, NoLine: true, Marker: "square"})
	}
	p.Series = append(p.Series, plotSeries{
		Name:  "targets (issues 7, 14), 256 B",
		Color: "#222222", NoLine: true, Marker: "ring",
		Points: []plotPoint{
			{1700, 2, "target x1"}, {10000, 7, "target x16"}, {100000, 15, "target x256"},
		},
	})
	return p
}

// box is an axis-aligned rectangle in SVG coordinates.
type box struct{ x0, y0, x1, y1 float64 }

func (a box) overlaps(b box) bool {
	return a.x0 < b.x1 && b.x0 < a.x1 && a.y0 < b.y1 && b.y0 < a.y1
}

func (a box) inside(b box) bool {
	return a.x0 >= b.x0 && a.x1 <= b.x1 && a.y0 >= b.y0 && a.y1 <= b.y1
}

// placeLabel picks the first of eight positions around a point (x, y) where
// the label overlaps no marker and no label placed before, staying inside
// frame; failing that, the position with the fewest overlaps. It records the
// chosen box in placed and returns the text position and anchor.
func placeLabel(label string, x, y float64, markers []box, placed *[]box, frame box) (tx, ty float64, anchor string) {
	const charW, h = 6.3, 11.0
	wd := charW * float64(len(label))
	type cand struct {
		tx, ty float64
		anchor string
		b      box
	}
	var cands []cand
	for _, c := range []struct{ dx, dy float64 }{{8, -8}, {8, 15}, {-8, -8}, {-8, 15}, {0, -12}, {0, 21}, {10, 4}, {-10, 4},
		{8, -22}, {8, 29}, {-8, -22}, {-8, 29}, {0, -26}, {0, 35}} {
		tx, ty := x+c.dx, y+c.dy
		var b box
		anchor := "start"
		switch {
		case c.dx > 0:
			b = box{tx, ty - h, tx + wd, ty + 2}
		case c.dx < 0:
			anchor = "end"
			b = box{tx - wd, ty - h, tx, ty + 2}
		default:
			anchor = "middle"
			b = box{tx - wd/2, ty - h, tx + wd/2, ty + 2}
		}
		cands = append(cands, cand{tx, ty, anchor, b})
	}
	best, bestHits := 0, -1
	for i, c := range cands {
		hits := 0
		if !c.b.inside(frame) {
			hits += 100
		}
		for _, m := range markers {
			if c.b.overlaps(m) {
				hits++
			}
		}
		for _, l := range *placed {
			if c.b.overlaps(l) {
				hits += 2
			}
		}
		if bestHits < 0 || hits < bestHits {
			best, bestHits = i, hits
		}
		if hits == 0 {
			break
		}
	}
	c := cands[best]
	*placed = append(*placed, c.b)
	return c.tx, c.ty, c.anchor
}

// extraNum reads a numeric extra whether it was set in this run (int,
// float64…) or decoded from JSON (float64). Missing: 0.
func extraNum(m map[string]any, k string) float64 {
	switch v := m[k].(type) {
	case int:
		return float64(v)
	case int64:
		return float64(v)
	case uint64:
		return float64(v)
	case float64:
		return v
	}
	return 0
}

package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// Progress shows a long operation (re-seed, restore, bootstrap) on w,
// usually stderr: on a terminal one line redrawn in place, with a bar
// when the total is known; otherwise, from ProgressAfter on, a line every
// ProgressEvery saying the step, the time taken and how far it got (the
// rule both binaries follow: a wait longer than 2 s says what it waits
// for, every few seconds). Safe for concurrent use.
type Progress struct {
	w        io.Writer
	prog     string
	terminal bool
	start    time.Time

	mu          sync.Mutex
	step        string
	done, total int64
	unit        string // "bytes" is shown in MiB
	drawn       bool   // a bar line is on the terminal
	stopped     bool

	quit chan struct{}
	wg   sync.WaitGroup
}

// Progress timing: the first line after ProgressAfter, then one every
// ProgressEvery; a terminal's bar is redrawn every ProgressRedraw.
var (
	ProgressAfter  = 2 * time.Second
	ProgressEvery  = 3 * time.Second
	ProgressRedraw = 200 * time.Millisecond
)

// IsTerminal reports whether w is a terminal (a character device).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// StartProgress starts showing progress on w, prefixed by prog (e.g.
// "roomlog reseed"); terminal chooses the bar (IsTerminal(w) usually).
// Stop ends it.
func StartProgress(w io.Writer, prog string, terminal bool) *Progress {
	p := &Progress{w: w, prog: prog, terminal: terminal, start: time.Now(), quit: make(chan struct{})}
	p.wg.Add(1)
	go p.loop()
	return p
}

func (p *Progress) loop() {
	defer p.wg.Done()
	first, every := ProgressAfter, ProgressEvery
	if p.terminal {
		first, every = ProgressRedraw, ProgressRedraw
	}
	t := time.NewTimer(first)
	defer t.Stop()
	for {
		select {
		case <-p.quit:
			return
		case <-t.C:
			p.mu.Lock()
			if !p.stopped {
				p.show()
			}
			p.mu.Unlock()
			t.Reset(every)
		}
	}
}

// Step says what the operation does now (a new step resets the count).
func (p *Progress) Step(format string, a ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.step = fmt.Sprintf(format, a...)
	p.done, p.total, p.unit = 0, 0, ""
}

// Count says how far the current step got: done of total units (total
// <= 0: unknown).
func (p *Progress) Count(done, total int64, unit string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done, p.total, p.unit = done, total, unit
}

// Stop ends the display (a bar is erased) and waits for its goroutine.
func (p *Progress) Stop() {
	p.mu.Lock()
	if p.stopped {
		p.mu.Unlock()
		return
	}
	p.stopped = true
	p.clear()
	p.mu.Unlock()
	close(p.quit)
	p.wg.Wait()
}

// Writer returns a writer for other output to the same terminal (a
// logger's): each write erases the bar first and redraws it after, so
// the two do not mix. Without a terminal it is w itself.
func (p *Progress) Writer() io.Writer {
	if !p.terminal {
		return p.w
	}
	return progressWriter{p}
}

type progressWriter struct{ p *Progress }

func (pw progressWriter) Write(b []byte) (int, error) {
	p := pw.p
	p.mu.Lock()
	defer p.mu.Unlock()
	redraw := p.drawn
	p.clear()
	n, err := p.w.Write(b)
	if redraw && !p.stopped {
		p.show()
	}
	return n, err
}

// clear erases the bar (p.mu held).
func (p *Progress) clear() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[K")
		p.drawn = false
	}
}

// show prints the state (p.mu held): the bar, or one line.
func (p *Progress) show() {
	if p.step == "" && p.total <= 0 && p.done == 0 {
		p.clear() // idle: nothing to show
		return
	}
	elapsed := time.Since(p.start).Round(time.Second)
	count := ""
	pct := -1
	if p.total > 0 {
		pct = int(min(100, p.done*100/p.total))
		count = fmt.Sprintf("%s of %s %s (%d%%)", p.amount(p.done), p.amount(p.total), p.unitName(), pct)
	} else if p.done > 0 {
		count = fmt.Sprintf("%s %s", p.amount(p.done), p.unitName())
	}
	if !p.terminal {
		line := fmt.Sprintf("%s: %v: %s", p.prog, elapsed, p.step)
		if count != "" {
			line += ": " + count
		}
		fmt.Fprintln(p.w, line)
		return
	}
	const width = 24
	bar := ""
	if pct >= 0 {
		n := pct * width / 100
		bar = "[" + strings.Repeat("#", n) + strings.Repeat("-", width-n) + "] "
	}
	fmt.Fprintf(p.w, "\r\x1b[K%s %s%s  %v  %s", p.prog, bar, count, elapsed, p.step)
	p.drawn = true
}

func (p *Progress) amount(v int64) string {
	if p.unit == "bytes" {
		return fmt.Sprintf("%.1f", float64(v)/(1<<20))
	}
	return fmt.Sprint(v)
}

func (p *Progress) unitName() string {
	if p.unit == "bytes" {
		return "MiB"
	}
	return p.unit
}

package main

import (
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// progress writes what the bench is doing to stderr: one line per step and,
// while a row runs, a live counter (rewritten in place on a terminal, a line
// every few seconds otherwise).
type progress struct {
	mu    sync.Mutex // guards w and live
	w     io.Writer
	tty   bool
	start time.Time
	live  bool // a \r-line is on screen and must be cleared before the next line
}

func newProgress(w io.Writer) *progress {
	p := &progress{w: w, start: time.Now()}
	if f, ok := w.(*os.File); ok {
		if st, err := f.Stat(); err == nil && st.Mode()&os.ModeCharDevice != 0 {
			p.tty = true
		}
	}
	return p
}

func (p *progress) stamp() string {
	return fmt.Sprintf("[%6.1fs]", time.Since(p.start).Seconds())
}

// Logf prints one progress line.
func (p *progress) Logf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.live {
		fmt.Fprint(p.w, "\r\033[K")
		p.live = false
	}
	fmt.Fprintf(p.w, "%s %s\n", p.stamp(), fmt.Sprintf(format, args...))
}

// Live shows status() every second until the returned stop is called; stop
// waits for the ticker goroutine to exit.
func (p *progress) Live(label string, status func() string) (stop func()) {
	done := make(chan struct{})
	exited := make(chan struct{})
	go func() {
		defer close(exited)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		n := 0
		for {
			select {
			case <-done:
				return
			case <-t.C:
				n++
				p.mu.Lock()
				if p.tty {
					fmt.Fprintf(p.w, "\r\033[K%s   %s: %s", p.stamp(), label, status())
					p.live = true
				} else if n%5 == 0 {
					fmt.Fprintf(p.w, "%s   %s: %s\n", p.stamp(), label, status())
				}
				p.mu.Unlock()
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() {
			close(done)
			<-exited
			p.mu.Lock()
			if p.live {
				fmt.Fprint(p.w, "\r\033[K")
				p.live = false
			}
			p.mu.Unlock()
		})
	}
}

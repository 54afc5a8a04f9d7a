package zkx

import (
	"context"
	"time"
)

// Periodic calls fn(waited) in a goroutine after the first delay, then
// every every, until the returned stop is called (it waits for the
// goroutine) or ctx ends. It says what a long wait is waiting for
// (Dial's session wait, a command's progress lines).
func Periodic(ctx context.Context, first, every time.Duration, fn func(waited time.Duration)) (stop func()) {
	done := make(chan struct{})
	stopped := make(chan struct{})
	start := time.Now()
	go func() {
		defer close(stopped)
		t := time.NewTimer(first)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				fn(time.Since(start))
				t.Reset(every)
			}
		}
	}()
	return func() { close(done); <-stopped }
}

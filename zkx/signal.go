package zkx

// Signal is a coalescing wake-up (a 1-buffered channel): any number of
// Notify calls before the receiver looks become one. Notify never blocks,
// so the watch or session callback that calls it is never held up by a
// slow consumer. Copies share the channel. The zero Signal is not usable:
// make one with NewSignal.
type Signal struct{ ch chan struct{} }

// NewSignal returns a signal with nothing pending.
func NewSignal() Signal { return Signal{ch: make(chan struct{}, 1)} }

// Notify marks the signal pending.
func (s Signal) Notify() {
	select {
	case s.ch <- struct{}{}:
	default:
	}
}

// C is received from once per pending mark.
func (s Signal) C() <-chan struct{} { return s.ch }

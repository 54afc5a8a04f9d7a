package zkr

import "github.com/roomlog/roomlog/zkx"

// Signal is a coalescing wake-up (zkx.Signal): any number of Notify calls
// before the receiver looks become one, and Notify never blocks.
type Signal = zkx.Signal

// NewSignal returns a signal with nothing pending.
func NewSignal() Signal { return zkx.NewSignal() }

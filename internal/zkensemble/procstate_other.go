//go:build unix && !linux

package zkensemble

// allThreadsStopped is unknown without /proc: ok is false and Pause/Resume
// do not wait for the signal to take effect.
func allThreadsStopped(pid int) (stopped, anyStopped, ok bool) { return false, false, false }

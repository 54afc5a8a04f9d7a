package zkensemble

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// allThreadsStopped reports whether every thread of pid is in the stopped
// state ('T') according to /proc; ok is false when that cannot be read.
func allThreadsStopped(pid int) (stopped, anyStopped, ok bool) {
	stats, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "stat"))
	if err != nil || len(stats) == 0 {
		return false, false, false
	}
	stopped = true
	for _, p := range stats {
		b, err := os.ReadFile(p)
		if err != nil {
			continue // the thread exited
		}
		// "pid (comm) S ...": comm may hold spaces and parens; the state
		// follows the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, false, false
		}
		switch b[i+2] {
		case 'T', 't': // stopped by a signal, or by a tracer
			anyStopped = true
		case 'Z', 'X': // exiting: neither runs nor stops
		default:
			stopped = false
		}
	}
	return stopped, anyStopped, true
}

// Package procstat reads a process's thread states from /proc, so test
// harnesses can wait until SIGSTOP or SIGCONT has taken effect instead of
// sleeping. Where /proc does not exist, it reports that it cannot tell.
package procstat

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// ThreadsStopped reports whether every thread of pid is stopped ('T' or
// 't'), and whether any is, according to /proc/<pid>/task/*/stat; ok is
// false when /proc cannot tell (no /proc, no such process, unreadable).
// Exiting threads ('Z', 'X') neither run nor stop.
func ThreadsStopped(pid int) (all, anyStopped, ok bool) {
	stats, err := filepath.Glob(filepath.Join("/proc", strconv.Itoa(pid), "task", "*", "stat"))
	if err != nil || len(stats) == 0 {
		return false, false, false
	}
	all = true
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
		case 'Z', 'X':
		default:
			all = false
		}
	}
	return all, anyStopped, true
}

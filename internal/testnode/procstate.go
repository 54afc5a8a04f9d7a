package testnode

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
)

// threadsStopped reports whether every thread of pid is stopped ('T'), and
// whether any is, according to /proc; ok is false when /proc cannot tell.
func threadsStopped(pid int) (all, anyStopped, ok bool) {
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
		// "pid (comm) S ...": the state follows the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return false, false, false
		}
		switch b[i+2] {
		case 'T', 't':
			anyStopped = true
		case 'Z', 'X':
		default:
			all = false
		}
	}
	return all, anyStopped, true
}

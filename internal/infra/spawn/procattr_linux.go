package spawn

import "syscall"

// SysProcAttr puts a child in its own process group (so a Ctrl-C on the
// terminal reaches only the parent, which stops its children in order) and
// has the kernel SIGKILL it when the forking thread — a Spawner's, alive
// until Stop — dies.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

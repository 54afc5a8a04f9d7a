//go:build !linux

package spawn

import "syscall"

// SysProcAttr puts a child in its own process group. Without Pdeathsig a
// parent killed with SIGKILL can leak children; a clean exit still stops
// them.
func SysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

//go:build !linux

package testnode

import "syscall"

// sysProcAttr puts a node in its own process group. Without Pdeathsig a
// killed test can leak nodes; Close still ends them.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

//go:build unix && !linux

package zkensemble

import "syscall"

// sysProcAttr puts each server in its own process group. Without Linux's
// Pdeathsig a killed test can leak servers; Close still ends them.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

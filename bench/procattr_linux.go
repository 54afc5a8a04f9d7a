package main

import (
	"os/exec"
	"syscall"
)

// newNodeCmd builds a node process that the kernel kills when the bench
// dies without cleaning up (Pdeathsig), so no replica outlives a run.
func newNodeCmd(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

package testnode

import "syscall"

// sysProcAttr puts a node in its own process group and kills it when the
// forking thread (a spawner's, alive until the Node is closed) dies.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

package zkensemble

import "syscall"

// sysProcAttr puts each server in its own process group (signals aimed at
// the test's group, such as a terminal's ^C, do not hit it directly) and
// kills it when the forking thread dies (see spawner).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

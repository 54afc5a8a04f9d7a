//go:build !linux

package main

import "os/exec"

// newNodeCmd builds a node process (no parent-death signal on this OS).
func newNodeCmd(name string, args ...string) *exec.Cmd { return exec.Command(name, args...) }

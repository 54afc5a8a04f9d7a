// Package spawn starts, signals and reaps child processes. Children are
// forked from one goroutine locked to its OS thread: children started
// with Pdeathsig (Linux; see SysProcAttr) are killed when the *thread*
// that forked them dies, and a dedicated thread that lives until Stop
// makes that mean "when this process dies", so a killed test, demo or
// benchmark leaks no ZooKeeper server or replica process.
package spawn

import (
	"fmt"
	"os/exec"
	"runtime"
	"syscall"
	"time"
)

// Spawner owns the forking goroutine. Start may be called from many
// goroutines; Stop ends the goroutine once no more starts will come.
type Spawner struct {
	reqs chan req
	done chan struct{}
}

type req struct {
	cmd  *exec.Cmd
	errc chan error
}

// New starts the forking goroutine.
func New() *Spawner {
	s := &Spawner{reqs: make(chan req), done: make(chan struct{})}
	go func() { // owner: the Spawner; Stop waits for it
		defer close(s.done)
		runtime.LockOSThread() // never unlocked: the thread exits with the goroutine
		for r := range s.reqs {
			r.errc <- r.cmd.Start()
		}
	}()
	return s
}

// Start runs cmd.Start on the spawner's thread. The caller reaps the
// child (cmd.Wait); Launch does that for it.
func (s *Spawner) Start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	s.reqs <- req{cmd: cmd, errc: errc}
	return <-errc
}

// Stop ends the forking goroutine (and its thread); call it after every
// child it started has exited, and not together with Start: with
// Pdeathsig, the thread's exit SIGKILLs the children it forked.
func (s *Spawner) Stop() {
	close(s.reqs)
	<-s.done
}

// Proc is a child started by Launch. A goroutine of its own reaps it:
// Done is closed once cmd.Wait returned, and Err is Wait's result from
// then on. Its methods are safe for concurrent use.
type Proc struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // cmd.Wait's result, set before done is closed
}

// Launch starts cmd on the spawner's thread (Start) and reaps it in the
// background. cmd's output should go to files (or pipes the caller
// drains): Wait returns only once the copying of other writers ends.
func (s *Spawner) Launch(cmd *exec.Cmd) (*Proc, error) {
	if err := s.Start(cmd); err != nil {
		return nil, err
	}
	p := &Proc{cmd: cmd, done: make(chan struct{})}
	go func() { // owner: p; ends when the child exits
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the child's process id (its process group id too, with
// SysProcAttr's Setpgid).
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Done is closed once the child exited and was reaped.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Exited reports whether Done is closed.
func (p *Proc) Exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Err is cmd.Wait's result once Done is closed (nil before, and for a
// clean exit).
func (p *Proc) Err() error {
	if !p.Exited() {
		return nil
	}
	return p.err
}

// Signal sends sig to the child unless it was already reaped. os.Process
// uses a pidfd on Linux, so a recycled pid is never hit.
func (p *Proc) Signal(sig syscall.Signal) {
	if p.Exited() {
		return
	}
	_ = p.cmd.Process.Signal(sig) // os.ErrProcessDone when it just exited
}

// SignalGroup sends sig to the child's process group (it must have been
// started with Setpgid, as SysProcAttr does), reaching its own children
// too, while the child has not been reaped: its pid, which is the group
// id, cannot be reused before.
func (p *Proc) SignalGroup(sig syscall.Signal) {
	if p.Exited() {
		return
	}
	_ = syscall.Kill(-p.Pid(), sig)
}

// WaitExit waits up to d for the child to be reaped.
func (p *Proc) WaitExit(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("spawn: pid %d (%s) did not exit within %v", p.Pid(), p.name(), d)
	}
}

func (p *Proc) name() string {
	if len(p.cmd.Args) > 0 {
		return p.cmd.Args[0]
	}
	return p.cmd.Path
}

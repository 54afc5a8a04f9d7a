// Package spawn starts child processes from one goroutine locked to its OS
// thread. Children started with Pdeathsig (Linux) are killed when the
// *thread* that forked them dies; a dedicated thread that lives until Stop
// makes that mean "when this process dies", so a killed test, demo or
// benchmark leaks no ZooKeeper server or replica process.
package spawn

import (
	"os/exec"
	"runtime"
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

// Start runs cmd.Start on the spawner's thread.
func (s *Spawner) Start(cmd *exec.Cmd) error {
	errc := make(chan error, 1)
	s.reqs <- req{cmd: cmd, errc: errc}
	return <-errc
}

// Stop ends the forking goroutine (and its thread); call it after every
// child it started has exited, and not together with Start.
func (s *Spawner) Stop() {
	close(s.reqs)
	<-s.done
}

package zkensemble

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"time"

	"github.com/roomlog/roomlog/internal/infra/procstat"
)

// proc is one launched JVM. done is closed once cmd.Wait returned (the
// process is reaped); err is valid after that.
type proc struct {
	cmd    *exec.Cmd
	pid    int
	done   chan struct{}
	err    error
	paused bool // guarded by Ensemble.mu
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig unless the process was already reaped. os.Process uses a
// pidfd on Linux, so a recycled pid is never hit.
func (p *proc) signal(sig syscall.Signal) {
	if p.exited() {
		return
	}
	_ = p.cmd.Process.Signal(sig) // os.ErrProcessDone when it just exited
}

func (p *proc) kill() { p.signal(syscall.SIGKILL) }

func (p *proc) waitExit(timeout time.Duration) error {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
		return fmt.Errorf("zkensemble: pid %d did not exit within %v", p.pid, timeout)
	}
}

// launch starts server i's JVM and records it. The caller holds e.ops[i]
// (or is tryStart, before the ensemble is shared).
func (e *Ensemble) launch(i int) (*proc, error) {
	s := e.servers[i]
	e.mu.Lock()
	closed := e.closed
	e.mu.Unlock()
	if closed {
		return nil, ErrClosed
	}
	logf, err := os.OpenFile(s.logPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("zkensemble: server %d log: %w", i, err)
	}
	defer logf.Close() // the child holds its own descriptor
	fmt.Fprintf(logf, "==== zkensemble: launching server %d (myid %d) at %s ====\n",
		i, i+1, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(e.inst.java, jvmArgs(e.inst, e.classpath, s, e.opts.HeapMB, e.opts.JVMFlags)...)
	cmd.Dir = s.dir
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.SysProcAttr = sysProcAttr()
	if err := e.spawner.Start(cmd); err != nil {
		return nil, fmt.Errorf("zkensemble: server %d: start %s: %w", i, e.inst.java, err)
	}
	p := &proc{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	go func() { // owner: the Ensemble; Close waits for done
		p.err = cmd.Wait()
		close(p.done)
	}()
	e.mu.Lock()
	e.procs[i] = p
	e.all = append(e.all, p)
	e.mu.Unlock()
	e.log.Debug("zkensemble: launched", "server", i, "pid", p.pid, "addr", s.addr())
	return p, nil
}

func (e *Ensemble) current(i int) *proc {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.procs[i]
}

// Kill sends SIGKILL to server i and waits until it exited. Killing a server
// that is not running is a no-op.
func (e *Ensemble) Kill(i int) error {
	if err := e.checkIndex(i); err != nil {
		return err
	}
	e.ops[i].Lock()
	defer e.ops[i].Unlock()
	p := e.current(i)
	if p == nil || p.exited() {
		return nil
	}
	p.kill()
	err := p.waitExit(exitTimeout)
	e.log.Info("zkensemble: killed", "server", i, "pid", p.pid)
	return err
}

// Stop sends SIGTERM to server i (and SIGCONT if it is paused, so the
// signal is delivered) and waits until it exited, falling back to SIGKILL
// after 20s. Stopping a server that is not running is a no-op.
func (e *Ensemble) Stop(i int) error {
	if err := e.checkIndex(i); err != nil {
		return err
	}
	e.ops[i].Lock()
	defer e.ops[i].Unlock()
	p := e.current(i)
	if p == nil || p.exited() {
		return nil
	}
	p.signal(syscall.SIGTERM)
	p.signal(syscall.SIGCONT)
	if err := p.waitExit(stopTimeout); err != nil {
		e.log.Warn("zkensemble: SIGTERM ignored, killing", "server", i, "pid", p.pid)
		p.kill()
		return p.waitExit(exitTimeout)
	}
	e.log.Info("zkensemble: stopped", "server", i, "pid", p.pid)
	return nil
}

// Pause sends SIGSTOP to server i: it keeps its sockets but answers nothing.
func (e *Ensemble) Pause(i int) error { return e.pauseResume(i, syscall.SIGSTOP) }

// Resume sends SIGCONT to server i.
func (e *Ensemble) Resume(i int) error { return e.pauseResume(i, syscall.SIGCONT) }

func (e *Ensemble) pauseResume(i int, sig syscall.Signal) error {
	if err := e.checkIndex(i); err != nil {
		return err
	}
	e.mu.Lock()
	p := e.procs[i]
	if p == nil || p.exited() {
		e.mu.Unlock()
		return fmt.Errorf("%w: server %d", ErrNotRunning, i)
	}
	p.signal(sig)
	p.paused = sig == syscall.SIGSTOP
	e.mu.Unlock()
	e.log.Info("zkensemble: signalled", "server", i, "pid", p.pid, "signal", sig.String())
	return waitSignalled(p, sig == syscall.SIGSTOP)
}

// waitSignalled waits until every thread of p is stopped (or none is), as
// far as /proc tells; it gives up quietly where /proc is missing.
func waitSignalled(p *proc, stop bool) error {
	deadline := time.Now().Add(exitTimeout)
	for {
		all, any, ok := procstat.ThreadsStopped(p.pid)
		if !ok || p.exited() || (stop && all) || (!stop && !any) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("zkensemble: pid %d: threads still %s after %v",
				p.pid, map[bool]string{true: "running", false: "stopped"}[stop], exitTimeout)
		}
		time.Sleep(time.Millisecond) // polling /proc: there is no event for a stop
	}
}

// Paused reports whether server i is running and SIGSTOPped by Pause.
func (e *Ensemble) Paused(i int) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if i < 0 || i >= len(e.procs) {
		return false
	}
	p := e.procs[i]
	return p != nil && !p.exited() && p.paused
}

// Start restarts server i (after Kill, Stop or a crash) with the same data
// dir and ports, and waits until it answers srvr with a Mode, that is until
// it joined a quorum. A server of a 3-server ensemble cannot do that alone:
// to restart a fully stopped ensemble, use StartAll (or call Start for the
// servers concurrently). When ctx ends first, the server is left running
// (it may still join) and the error wraps ctx.Err().
func (e *Ensemble) Start(ctx context.Context, i int) error {
	if err := e.checkIndex(i); err != nil {
		return err
	}
	e.ops[i].Lock()
	defer e.ops[i].Unlock()
	if p := e.current(i); p != nil && !p.exited() {
		return fmt.Errorf("%w: server %d (pid %d)", ErrRunning, i, p.pid)
	}
	if _, err := e.launch(i); err != nil {
		return err
	}
	return e.waitServing(ctx, []int{i}, false)
}

// StartAll restarts every server that is not running, concurrently, and
// waits until each answers srvr with a Mode.
func (e *Ensemble) StartAll(ctx context.Context) error {
	errc := make(chan error, len(e.servers))
	n := 0
	for i := range e.servers {
		if e.Running(i) {
			continue
		}
		n++
		go func() { errc <- e.Start(ctx, i) }()
	}
	var errs []error
	for ; n > 0; n-- {
		if err := <-errc; err != nil && !errors.Is(err, ErrRunning) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// exitError describes a server that exited while it was waited for,
// with its log tail; a bind failure also wraps ErrPortInUse.
func (e *Ensemble) exitError(i int, p *proc) error {
	tail := e.LogTail(i, tailLines)
	err := fmt.Errorf("%w: server %d (pid %d) exited during start (%v); last lines of %s:\n%s",
		ErrExited, i, p.pid, p.err, e.LogPath(i), tail)
	if strings.Contains(tail, "Address already in use") || strings.Contains(tail, "BindException") {
		err = fmt.Errorf("%w: %w", ErrPortInUse, err)
	}
	return err
}

// waitServing polls until every server in idx answers srvr with a Mode and,
// with session, a client session is established. It fails fast when one of
// them exits.
func (e *Ensemble) waitServing(ctx context.Context, idx []int, session bool) error {
	// The session probe connects only once every server has a Mode:
	// go-zookeeper sleeps a second after failing every address, which
	// would otherwise dominate the start time.
	var sess *sessionProbe
	defer func() {
		if sess != nil {
			sess.close()
		}
	}()
	modes := make(map[int]string)
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		for _, i := range idx {
			if p := e.current(i); p == nil || p.exited() {
				if p == nil {
					return fmt.Errorf("%w: server %d", ErrNotRunning, i)
				}
				return e.exitError(i, p)
			}
			if modes[i] == "" {
				if m, err := e.mode(ctx, i); err == nil {
					modes[i] = m
				}
			}
		}
		if len(modes) == len(idx) {
			if !session {
				return nil
			}
			if sess == nil {
				var err error
				if sess, err = newSessionProbe(e.Addrs(), e.log); err != nil {
					return err
				}
			}
			if sess.ok() {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return e.notServingError(ctx.Err(), idx, modes, sess)
		case <-e.closing:
			return ErrClosed
		case <-tick.C:
		}
	}
}

func (e *Ensemble) notServingError(cause error, idx []int, modes map[int]string, sess *sessionProbe) error {
	var b strings.Builder
	fmt.Fprintf(&b, "zkensemble: servers %v not serving: %v", idx, cause)
	if sess != nil {
		fmt.Fprintf(&b, " (every server has a Mode; client session established: %v)", sess.ok())
	}
	for _, i := range idx {
		m := modes[i]
		if m == "" {
			m = "no Mode yet"
		}
		fmt.Fprintf(&b, "\n--- server %d: %s; last lines of %s:\n%s", i, m, e.LogPath(i), e.LogTail(i, tailLines))
	}
	return fmt.Errorf("%w: %s", cause, b.String())
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/roomlog/roomlog/internal/infra/spawn"
)

// Child processes of the pair demo, started, signalled and reaped through
// internal/infra/spawn: every child runs in its own process group (so a Ctrl-C
// on the terminal reaches only the demo, which then stops its children in
// order) and with Pdeathsig=SIGKILL (so children die with the demo even if
// the demo itself is killed with SIGKILL: the pair's spawn.Spawner forks
// them from one OS thread that lives until every child exited).

// child is one serve process.
type child struct {
	name    string
	proc    *spawn.Proc
	logPath string
	addr    string // from the serving line

	exited chan struct{} // closed once the process is reaped and its output drained
}

// startChild runs bin with args, appending its stderr and stdout to
// logPath, and waits (bounded by ctx) until it prints its serving line.
func startChild(ctx context.Context, sp *spawn.Spawner, name, bin string, args []string, logPath string) (*child, error) {
	return startChildWith(ctx, sp, name, bin, args, logPath, servingPrefix, nil)
}

// startChildWith is startChild for a child that announces itself with
// ready (the rest of that line, up to a space, is its addr) and whose
// stdout lines also go to onLine (when set), from the reading goroutine.
func startChildWith(ctx context.Context, sp *spawn.Spawner, name, bin string, args []string, logPath, ready string, onLine func(string)) (*child, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout = pw
	cmd.Stderr = logf
	cmd.SysProcAttr = spawn.SysProcAttr()
	fmt.Fprintf(logf, "==== pair: starting %s: %s %s\n", name, bin, strings.Join(args, " "))
	proc, err := sp.Launch(cmd)
	if err != nil {
		pr.Close()
		pw.Close()
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	pw.Close() // the child holds its own copy
	c := &child{name: name, proc: proc, logPath: logPath, exited: make(chan struct{})}
	addrCh := make(chan string, 1)
	scanned := make(chan struct{})
	go func() { // owned by c: ends at EOF, when the process is gone
		defer close(scanned)
		defer pr.Close()
		sc := bufio.NewScanner(pr)
		sent := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintf(logf, "stdout: %s\n", line)
			if onLine != nil {
				onLine(line)
			}
			if rest, ok := strings.CutPrefix(line, ready); ok && !sent {
				addr, _, _ := strings.Cut(rest, " ")
				addrCh <- addr
				sent = true
			}
		}
		io.Copy(io.Discard, pr)
	}()
	go func() { // owned by c: ends once spawn reaped the process
		<-proc.Done()
		<-scanned
		logf.Close()
		close(c.exited)
	}()
	select {
	case c.addr = <-addrCh:
		return c, nil
	case <-c.exited:
		return nil, fmt.Errorf("%s exited before serving (%v); last lines of %s:\n%s", name, proc.Err(), logPath, tail(logPath, 15))
	case <-ctx.Done():
		c.kill()
		return nil, fmt.Errorf("%s: not serving: %w", name, context.Cause(ctx))
	}
}

func (c *child) pid() int { return c.proc.Pid() }

func (c *child) alive() bool {
	select {
	case <-c.exited:
		return false
	default:
		return true
	}
}

// kill SIGKILLs the child's process group and waits until it is reaped.
func (c *child) kill() {
	c.proc.SignalGroup(syscall.SIGKILL)
	<-c.exited
}

// stop asks the child to shut down (SIGTERM to its group), waits up to
// grace, then kills it.
func (c *child) stop(grace time.Duration) error {
	c.proc.SignalGroup(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.exited:
		return c.proc.Err()
	case <-t.C:
		c.kill()
		return fmt.Errorf("%s did not stop within %v after SIGTERM; killed", c.name, grace)
	}
}

// tail returns the last n lines of a file (for error messages).
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	lines := bytes.Split(bytes.TrimRight(b, "\n"), []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "    " + string(bytes.Join(lines, []byte("\n    ")))
}

// children tracks the pair's processes for cleanup.
type children struct {
	mu   sync.Mutex // guards list
	list []*child
}

func (cs *children) add(c *child) {
	cs.mu.Lock()
	cs.list = append(cs.list, c)
	cs.mu.Unlock()
}

// stopAll stops every child still running, concurrently.
func (cs *children) stopAll(grace time.Duration) error {
	cs.mu.Lock()
	list := append([]*child(nil), cs.list...)
	cs.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, len(list))
	for i, c := range list {
		if !c.alive() {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.stop(grace)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

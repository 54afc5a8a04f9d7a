package spawn

import (
	"os/exec"
	"syscall"
	"testing"
	"time"
)

func TestLaunchReapsAndSignals(t *testing.T) {
	sleep, err := exec.LookPath("sleep")
	if err != nil {
		t.Skip("no sleep binary")
	}
	s := New()
	defer s.Stop()

	ok, err := s.Launch(exec.Command(sleep, "0"))
	if err != nil {
		t.Fatal(err)
	}
	if err := ok.WaitExit(10 * time.Second); err != nil {
		t.Fatal(err)
	}
	if !ok.Exited() || ok.Err() != nil {
		t.Fatalf("clean exit: exited %v, err %v", ok.Exited(), ok.Err())
	}
	ok.Signal(syscall.SIGKILL) // reaped: a no-op
	ok.SignalGroup(syscall.SIGKILL)

	cmd := exec.Command(sleep, "30")
	cmd.SysProcAttr = SysProcAttr()
	p, err := s.Launch(cmd)
	if err != nil {
		t.Fatal(err)
	}
	if p.Exited() || p.Err() != nil {
		t.Fatalf("running: exited %v, err %v", p.Exited(), p.Err())
	}
	if err := p.WaitExit(10 * time.Millisecond); err == nil {
		t.Fatal("WaitExit returned nil for a running child")
	}
	p.SignalGroup(syscall.SIGKILL)
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("child not reaped after SIGKILL to its group")
	}
	if p.Err() == nil {
		t.Fatal("killed child: Err is nil")
	}

	if _, err := s.Launch(exec.Command("/nonexistent/binary")); err == nil {
		t.Fatal("Launch of a missing binary succeeded")
	}
}

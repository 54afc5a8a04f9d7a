package zkensemble

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
)

// FourLetter sends a four-letter-word command (e.g. "srvr", "mntr") to
// server i and returns its reply. Each call waits at most about a second.
func (e *Ensemble) FourLetter(ctx context.Context, i int, cmd string) (string, error) {
	if err := e.checkIndex(i); err != nil {
		return "", err
	}
	return fourLetter(ctx, e.servers[i].addr(), cmd)
}

func fourLetter(ctx context.Context, addr, cmd string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, fourLWTimeout)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	out, err := io.ReadAll(io.LimitReader(c, 1<<20))
	if err != nil {
		return "", err
	}
	return string(out), nil
}

// mode returns the Mode line of server i's srvr reply: "leader",
// "follower", "observer" or "standalone". A server that is not in a quorum
// answers "This ZooKeeper instance is not currently serving requests".
func (e *Ensemble) mode(ctx context.Context, i int) (string, error) {
	out, err := fourLetter(ctx, e.servers[i].addr(), "srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if m, ok := strings.CutPrefix(strings.TrimSpace(line), "Mode:"); ok {
			return strings.TrimSpace(m), nil
		}
	}
	return "", fmt.Errorf("zkensemble: server %d not serving: %q", i, strings.TrimSpace(out))
}

// Mode returns server i's role from srvr: "leader", "follower" or
// "standalone"; an error while it is not in a quorum or not reachable.
func (e *Ensemble) Mode(ctx context.Context, i int) (string, error) {
	if err := e.checkIndex(i); err != nil {
		return "", err
	}
	return e.mode(ctx, i)
}

// Leader returns the index of the server whose srvr reply says
// "Mode: leader" ("standalone" for a 1-server ensemble). Paused and stopped
// servers are not asked. It polls until ctx ends, riding out an election.
func (e *Ensemble) Leader(ctx context.Context) (int, error) {
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		var seen []string
		for i := range e.servers {
			if !e.Running(i) || e.Paused(i) {
				seen = append(seen, fmt.Sprintf("%d: down", i))
				continue
			}
			m, err := e.mode(ctx, i)
			if err != nil {
				seen = append(seen, fmt.Sprintf("%d: %v", i, err))
				continue
			}
			if m == "leader" || (m == "standalone" && len(e.servers) == 1) {
				return i, nil
			}
			seen = append(seen, fmt.Sprintf("%d: %s", i, m))
		}
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("zkensemble: no leader (%s): %w", strings.Join(seen, "; "), ctx.Err())
		case <-e.closing:
			return -1, ErrClosed
		case <-tick.C:
		}
	}
}

// sessionProbe is a go-zookeeper client whose only job is to tell when it
// holds a session. The state arrives through an event callback (never the
// 6-event channel, which drops events).
type sessionProbe struct {
	conn *zk.Conn
	has  atomic.Bool
}

func newSessionProbe(addrs []string, log *slog.Logger) (*sessionProbe, error) {
	p := &sessionProbe{}
	conn, _, err := zk.Connect(addrs, 10*time.Second,
		zk.WithLogger(zkLogger{log}),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
				p.has.Store(true)
			}
		}))
	if err != nil {
		return nil, fmt.Errorf("zkensemble: client: %w", err)
	}
	p.conn = conn
	return p, nil
}

func (p *sessionProbe) ok() bool {
	return p.has.Load() || p.conn.State() == zk.StateHasSession
}

func (p *sessionProbe) close() { p.conn.Close() }

// zkLogger sends go-zookeeper's log to the ensemble's logger at debug level.
type zkLogger struct{ log *slog.Logger }

func (l zkLogger) Printf(format string, args ...any) {
	l.log.Debug("zkensemble: go-zookeeper: " + fmt.Sprintf(format, args...))
}

// freePorts picks n distinct free loopback ports by listening on :0 and
// closing. Another process can take one before the server binds it; Start
// then retries with new ports.
func freePorts(n int) ([]int, error) {
	addrs := make([]string, n)
	for i := range addrs {
		addrs[i] = "127.0.0.1:0"
	}
	ports, release, err := holdPorts(addrs)
	if err != nil {
		return nil, err
	}
	release()
	return ports, nil
}

// holdPorts listens on each of addrs (host:0) and returns the ports picked,
// still held until release is called: a caller that must open listeners of
// its own on :0 (faultnet proxies) does it in between, so the kernel cannot
// hand it a port picked for a server.
func holdPorts(addrs []string) (ports []int, release func(), err error) {
	var ls []net.Listener
	release = func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}
	for _, a := range addrs {
		l, err := net.Listen("tcp", a)
		if err != nil {
			release()
			return nil, nil, fmt.Errorf("zkensemble: pick a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, release, nil
}

// tailFile returns the last n lines of path, reading at most its last 256 KiB.
func tailFile(path string, n int) string {
	if path == "" {
		return ""
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	defer f.Close()
	const maxRead = 256 << 10
	st, err := f.Stat()
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	off := max(st.Size()-maxRead, 0)
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Sprintf("(%v)", err)
	}
	buf = bytes.TrimRight(buf, "\n")
	lines := bytes.Split(buf, []byte("\n"))
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return string(bytes.Join(lines, []byte("\n")))
}

package compat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/internal/infra/spawn"
	"github.com/roomlog/roomlog/version"
)

const (
	// stopWait bounds a graceful stop (SIGTERM to exit): a primary
	// drains its proposals, resigns and closes its HTTP server (2 s).
	stopWait = 30 * time.Second
	// upWait bounds a start: until the master answers /v1/status in the
	// role of primary or standby.
	upWait = 30 * time.Second
	// settleWait bounds waitSettled.
	settleWait = 60 * time.Second
	// probeTimeout bounds one status, health or hash request.
	probeTimeout = 2 * time.Second
	// poll is the interval of every polling wait.
	poll      = 20 * time.Millisecond
	tailLines = 40
	// checkpointEvery is the serve flag --checkpoint-every: far below its
	// default (100,000 entries), so that the primaries of both releases
	// checkpoint, seal and delete channels while members of the other
	// release follow them.
	checkpointEvery = 150
)

// member is one dfsmaster-demo serve process of the room, and what stays
// the same across its restarts: id, data directory and HTTP address.
type member struct {
	id      string
	dataDir string
	addr    string // 127.0.0.1:port, the same for every launch
	c       *client.Client

	// Of the current launch (nil proc: not running).
	rel     string // release of the binary it runs
	proc    *spawn.Proc
	logPath string
}

// room is the test's room: its members' processes, the spawner that forks
// them, and the log files of every launch.
type room struct {
	t       *testing.T
	sp      *spawn.Spawner
	zk      string // ZooKeeper connect string
	name    string
	session time.Duration
	dir     string
	hc      *http.Client
	members []*member
	extra   []*spawn.Proc // processes outside the room's members (checks)
	logs    []string      // every launch's output file, in launch order
}

// newRoom prepares members ids (nothing runs yet) and registers the
// cleanup that kills every process the room starts and, when the test
// failed, logs the tail of every launch's output.
func newRoom(t *testing.T, zk []string, name string, session time.Duration, ids ...string) *room {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}
	r := &room{
		t: t, sp: spawn.New(), zk: strings.Join(zk, ","), name: name, session: session,
		dir: t.TempDir(), hc: &http.Client{Timeout: 15 * time.Second, Transport: tr},
	}
	for _, id := range ids {
		addr, err := freeAddr()
		if err != nil {
			t.Fatal(err)
		}
		c, err := client.New(addr, r.hc, client.WithRetry(client.Retry{MaxAttempts: 3, MinBackoff: 20 * time.Millisecond, MaxBackoff: 100 * time.Millisecond}))
		if err != nil {
			t.Fatal(err)
		}
		m := &member{id: id, dataDir: filepath.Join(r.dir, "data-"+id), addr: addr, c: c}
		r.members = append(r.members, m)
	}
	t.Cleanup(func() {
		procs := append([]*spawn.Proc(nil), r.extra...)
		for _, m := range r.members {
			if m.proc != nil {
				procs = append(procs, m.proc)
			}
		}
		for _, p := range procs {
			p.SignalGroup(syscall.SIGKILL)
		}
		for _, p := range procs {
			if err := p.WaitExit(10 * time.Second); err != nil {
				t.Errorf("compat: cleanup: %v", err)
			}
		}
		r.sp.Stop()
		tr.CloseIdleConnections()
		if t.Failed() {
			for _, l := range r.logs {
				t.Logf("compat: last %d lines of %s:\n%s", tailLines, l, tail(l, tailLines))
			}
		}
	})
	return r
}

func (r *room) member(id string) *member {
	for _, m := range r.members {
		if m.id == id {
			return m
		}
	}
	r.t.Fatalf("compat: no member %q", id)
	return nil
}

// launch starts bin serve for id with the room's flags plus extra, output
// to a new file under the room's directory.
func (r *room) launch(bin, rel, id, dataDir, addr string, extra ...string) (*spawn.Proc, string, error) {
	logPath := filepath.Join(r.dir, fmt.Sprintf("%02d-%s-%s.log", len(r.logs)+1, id, rel))
	f, err := os.Create(logPath)
	if err != nil {
		return nil, "", err
	}
	defer f.Close() // the child holds its own descriptor
	args := append([]string{"serve", "--zk", r.zk, "--room", r.name, "--id", id, "--data", dataDir,
		"--http", addr, "--session-timeout", r.session.String(),
		"--checkpoint-every", fmt.Sprint(checkpointEvery)}, extra...)
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = spawn.SysProcAttr()
	p, err := r.sp.Launch(cmd)
	if err != nil {
		return nil, "", fmt.Errorf("compat: start %s (%s): %w", id, rel, err)
	}
	r.logs = append(r.logs, logPath)
	return p, logPath, nil
}

// start runs m on bin (release rel) and waits until it answers as a
// primary or a standby.
func (r *room) start(ctx context.Context, m *member, bin, rel string) error {
	if m.proc != nil && !m.proc.Exited() {
		return fmt.Errorf("compat: %s is already running", m.id)
	}
	var extra []string
	if rel == version.Release {
		extra = newReleaseFlags
	}
	p, logPath, err := r.launch(bin, rel, m.id, m.dataDir, m.addr, extra...)
	if err != nil {
		return err
	}
	m.proc, m.rel, m.logPath = p, rel, logPath
	ctx, cancel := context.WithTimeout(ctx, upWait)
	defer cancel()
	var last string
	for {
		if m.proc.Exited() {
			return fmt.Errorf("compat: %s (%s) exited while starting: %v; last lines of %s:\n%s",
				m.id, rel, m.proc.Err(), logPath, tail(logPath, tailLines))
		}
		st, err := m.status(ctx)
		switch {
		case err != nil:
			last = err.Error()
		case st.Failed():
			return fmt.Errorf("compat: %s (%s) failed while starting: %s", m.id, rel, st.Error)
		case st.Role == api.RolePrimary || st.Role == api.RoleStandby:
			return nil
		default:
			last = "role " + st.Role
		}
		if !sleep(ctx, poll) {
			return fmt.Errorf("compat: %s (%s) not up within %v (last: %s)", m.id, rel, upWait, last)
		}
	}
}

// stop sends m SIGTERM and waits (stopWait) for it to exit with status
// 0: a graceful stop.
func (r *room) stop(m *member) error {
	if m.proc == nil || m.proc.Exited() {
		return fmt.Errorf("compat: %s is not running (%v)", m.id, m.procErr())
	}
	m.proc.Signal(syscall.SIGTERM)
	if err := m.proc.WaitExit(stopWait); err != nil {
		m.proc.SignalGroup(syscall.SIGKILL)
		_ = m.proc.WaitExit(10 * time.Second)
		return fmt.Errorf("compat: %s (%s) after SIGTERM: %w; last lines of %s:\n%s",
			m.id, m.rel, err, m.logPath, tail(m.logPath, tailLines))
	}
	if err := m.proc.Err(); err != nil {
		return fmt.Errorf("compat: %s (%s) exited after SIGTERM with %v; last lines of %s:\n%s",
			m.id, m.rel, err, m.logPath, tail(m.logPath, tailLines))
	}
	return nil
}

func (m *member) procErr() error {
	if m.proc == nil {
		return errors.New("never started")
	}
	return m.proc.Err()
}

func (m *member) status(ctx context.Context) (api.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	return m.c.Status(ctx)
}

// checkAlive returns an error naming every member whose process exited or
// that reports itself failed.
func (r *room) checkAlive(ctx context.Context) error {
	var errs []error
	for _, m := range r.members {
		if m.proc == nil || m.proc.Exited() {
			errs = append(errs, fmt.Errorf("compat: %s (%s) is not running (%v); last lines of %s:\n%s",
				m.id, m.rel, m.procErr(), m.logPath, tail(m.logPath, tailLines)))
			continue
		}
		if st, err := m.status(ctx); err == nil && st.Failed() {
			errs = append(errs, fmt.Errorf("compat: %s (%s) failed: %s", m.id, m.rel, st.Error))
		}
	}
	return errors.Join(errs...)
}

// waitSettled waits until the room has one primary and every other member
// is a connected standby that has applied at least what the primary had
// applied when the room first showed that shape, and returns the
// primary's id. A member whose process exited, or that failed, ends the
// wait at once.
func (r *room) waitSettled(ctx context.Context) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, settleWait)
	defer cancel()
	var (
		primary string
		target  uint64 // the primary's applied index when the shape was first seen
		last    string
	)
	for {
		if err := r.checkAlive(ctx); err != nil {
			return "", err
		}
		sts := map[string]api.Status{}
		var p []string
		ok := true
		for _, m := range r.members {
			st, err := m.status(ctx)
			if err != nil {
				ok, last = false, fmt.Sprintf("%s: %v", m.id, err)
				break
			}
			sts[m.id] = st
			if st.Role == api.RolePrimary {
				p = append(p, m.id)
			}
			if !st.Connected {
				ok, last = false, m.id+" disconnected from ZooKeeper"
			}
		}
		if ok && len(p) == 1 {
			if p[0] != primary {
				primary, target = p[0], sts[p[0]].AppliedIndex
			}
			behind := []string{}
			for _, m := range r.members {
				st := sts[m.id]
				if m.id == primary {
					continue
				}
				if st.Role != api.RoleStandby || st.AppliedIndex < target {
					behind = append(behind, fmt.Sprintf("%s %s at %d", m.id, st.Role, st.AppliedIndex))
				}
			}
			if len(behind) == 0 {
				return primary, nil
			}
			last = fmt.Sprintf("primary %s had %d; %s", primary, target, strings.Join(behind, ", "))
		} else if ok {
			last = fmt.Sprintf("primaries %v", p)
		}
		if !sleep(ctx, poll) {
			return "", fmt.Errorf("compat: room not settled within %v (last: %s)", settleWait, last)
		}
	}
}

// checkHealth asks every member's /v1/health: each must answer 200.
func (r *room) checkHealth(ctx context.Context) error {
	// A member may answer 503 behind for a moment after the room settled
	// (a standby that had to bootstrap clears its tail error when its tail
	// reopens): asked again for a few seconds before it counts.
	deadline := time.Now().Add(healthGrace)
	for {
		err := r.checkHealthOnce(ctx)
		if err == nil || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// healthGrace is how long checkHealth asks again.
const healthGrace = 5 * time.Second

func (r *room) checkHealthOnce(ctx context.Context) error {
	var errs []error
	for _, m := range r.members {
		hctx, cancel := context.WithTimeout(ctx, probeTimeout)
		h, err := m.c.Health(hctx)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("compat: %s (%s) health: %w", m.id, m.rel, err))
		} else if h.Status != "ok" {
			errs = append(errs, fmt.Errorf("compat: %s (%s) health: status %q", m.id, m.rel, h.Status))
		}
	}
	return errors.Join(errs...)
}

// converge waits until every member reports the same applied index at or
// after min in /v1/hash, and returns that index and hash. Hashes that
// differ at one index are an error at once.
func (r *room) converge(ctx context.Context, min uint64) (uint64, string, error) {
	ctx, cancel := context.WithTimeout(ctx, settleWait)
	defer cancel()
	var last string
	for {
		hs := map[string]api.HashResponse{}
		var idx []uint64
		for _, m := range r.members {
			hctx, hcancel := context.WithTimeout(ctx, 5*time.Second)
			h, err := m.c.Hash(hctx, min)
			hcancel()
			if err != nil {
				last = fmt.Sprintf("%s: %v", m.id, err)
				break
			}
			hs[m.id] = h
			idx = append(idx, h.AppliedIndex)
		}
		if len(hs) == len(r.members) {
			sort.Slice(idx, func(i, j int) bool { return idx[i] < idx[j] })
			if idx[0] == idx[len(idx)-1] {
				want := hs[r.members[0].id].Hash
				for _, m := range r.members[1:] {
					if hs[m.id].Hash != want {
						return 0, "", fmt.Errorf("compat: state hashes differ at index %d: %s", idx[0], describeHashes(r.members, hs))
					}
				}
				return idx[0], want, nil
			}
			last = "applied indexes differ: " + describeHashes(r.members, hs)
			min = idx[len(idx)-1]
		}
		if !sleep(ctx, poll) {
			return 0, "", fmt.Errorf("compat: members did not reach one index within %v (last: %s)", settleWait, last)
		}
	}
}

func describeHashes(ms []*member, hs map[string]api.HashResponse) string {
	var b strings.Builder
	for _, m := range ms {
		fmt.Fprintf(&b, "%s (%s) %s at %d; ", m.id, m.rel, hs[m.id].Hash, hs[m.id].AppliedIndex)
	}
	return strings.TrimSuffix(b.String(), "; ")
}

// freeAddr is a 127.0.0.1 port nothing listens on right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// sleep waits d, or returns false when ctx ends first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// tail is the last n lines of the file at path.
func tail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(%v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

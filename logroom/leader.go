package logroom

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"
)

// LeaderProbeTimeout bounds one probe of the ensemble's roles (every
// server asked at once with srvr): a server that accepts the connection and
// says nothing, or a paused one, costs at most this before the client
// connects in the order it has.
const LeaderProbeTimeout = 250 * time.Millisecond

// leaderProbeMaxReply caps what a probe reads of one srvr reply (a real one
// is about 400 bytes).
const leaderProbeMaxReply = 16 << 10

// leaderFirst is the zk.HostProvider of a client that prefers the leader
// (the default; DialConfig.AnyServer turns it off). At the start of every
// pass over the servers (the first connection, each reconnect after a
// connected session, and each further pass while none answers) it asks
// every server its role with the srvr four-letter word, at once and within
// LeaderProbeTimeout, and tries the leader first, then the others in
// go-zookeeper's shuffled order. Whatever the probe reads only orders the
// servers: a wrong, forged or missing answer costs a follower's extra hop,
// never correctness.
type leaderFirst struct {
	probe func(servers []string) int // index of the leader in servers, -1: none known
	log   *slog.Logger

	mu      sync.Mutex
	servers []string // as go-zookeeper handed them (shuffled)
	order   []string // this pass's order
	tried   int      // Next calls since Init or the last Connected
	probes  int      // probes run (tests)
	leaders int      // probes that found a leader (tests)
}

func newLeaderFirst(log *slog.Logger) *leaderFirst {
	return &leaderFirst{probe: func(s []string) int { return probeLeader(s, LeaderProbeTimeout) }, log: log}
}

// Init is called by zk.Connect with the (shuffled) server list.
func (h *leaderFirst) Init(servers []string) error {
	if len(servers) == 0 {
		return errors.New("logroom: no ZooKeeper servers")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.servers = append([]string(nil), servers...)
	h.order = h.servers
	h.tried = 0
	return nil
}

// Len returns the number of servers.
func (h *leaderFirst) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

// Next returns the next server to try. retryStart is true when a pass over
// every server has ended without a connection (go-zookeeper then waits a
// second), as with its own DNSHostProvider.
func (h *leaderFirst) Next() (server string, retryStart bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := len(h.servers)
	if h.tried%n == 0 {
		h.reorder()
	}
	server = h.order[h.tried%n]
	retryStart = h.tried >= n && h.tried%n == 0
	h.tried++
	return server, retryStart
}

// Connected is called once a connection is made: the next Next starts a
// new pass (with a new probe).
func (h *leaderFirst) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tried = 0
}

// counts returns how many probes ran and how many found a leader.
func (h *leaderFirst) counts() (probes, leaders int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.probes, h.leaders
}

// reorder probes the servers and puts the leader first. Called with h.mu
// held (go-zookeeper calls Next under its own server lock too; the probe is
// bounded by LeaderProbeTimeout).
func (h *leaderFirst) reorder() {
	h.probes++
	i := -1
	if len(h.servers) > 1 {
		i = h.probe(h.servers)
	}
	if i < 0 || i >= len(h.servers) {
		h.order = h.servers
		return
	}
	h.leaders++
	order := make([]string, 0, len(h.servers))
	order = append(order, h.servers[i])
	order = append(order, h.servers[:i]...)
	order = append(order, h.servers[i+1:]...)
	h.order = order
	h.log.Debug("zookeeper leader found; connecting to it first", "leader", h.servers[i])
}

// probeLeader asks every server's role at once and returns the index of
// the first one (in servers' order) whose srvr reply says "Mode: leader"
// or "Mode: standalone", or -1 when none does within timeout.
func probeLeader(servers []string, timeout time.Duration) int {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	modes := make([]string, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			modes[i], _ = serverMode(ctx, s)
		}()
	}
	wg.Wait()
	for i, m := range modes {
		if m == "leader" || m == "standalone" {
			return i
		}
	}
	return -1
}

// errNoMode: a srvr reply without a Mode line (a server not serving, a
// four-letter word not in the server's whitelist, or not ZooKeeper at all).
var errNoMode = errors.New("logroom: srvr reply has no Mode line")

// serverMode returns the Mode of addr's srvr reply ("leader", "follower",
// "observer", "standalone"), reading at most leaderProbeMaxReply bytes
// before ctx's deadline.
func serverMode(ctx context.Context, addr string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		if err := conn.SetDeadline(dl); err != nil {
			return "", err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := conn.Write([]byte("srvr")); err != nil {
		return "", err
	}
	sc := bufio.NewScanner(io.LimitReader(conn, leaderProbeMaxReply))
	for sc.Scan() {
		if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "Mode:"); ok {
			return strings.TrimSpace(m), nil
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", errNoMode
}

package zkx

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"math/rand/v2"
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
// (the default; DialConfig.AnyServer turns it off). Like go-zookeeper's
// DNSHostProvider it resolves the servers' names once, in Init, into one
// address per A/AAAA record, shuffled (a name that does not resolve fails
// Dial at once). At the start of every pass over the servers (the first
// connection, each reconnect after a connected session, and each further
// pass while none connects) it asks every server its role with the srvr
// four-letter word, at once and within LeaderProbeTimeout, and orders the
// pass: the leader, then the servers that answered, then those that did
// not, each group starting after the server of the last connection (as
// DNSHostProvider does), so a server that just failed is tried last of
// its group. Whatever the probe reads only orders the servers: a wrong,
// forged or missing answer costs a follower's extra hop or a later try,
// never correctness.
type leaderFirst struct {
	probe  func(servers []string) []string // each server's Mode, "" when it did not answer
	lookup func(ctx context.Context, host string) ([]string, error)
	names  *hostNames // Init records each address's configured host (nil: not kept)
	log    *slog.Logger

	mu      sync.Mutex
	servers []string // resolved addresses, shuffled
	order   []string // this pass's order
	tried   int      // Next calls since Init or the last Connected
	next    string   // the server Next returned last
	last    string   // the server of the last connection ("" none yet)
	probes  int      // probes run (tests)
	leaders int      // probes that found a leader (tests)
}

// newLeaderFirst returns the host provider; wrap (nil: none) prepares
// each probe connection (the TLS handshake of a TLS client); Init records
// the configured host of each resolved address in names (nil: nowhere).
func newLeaderFirst(log *slog.Logger, wrap probeWrap, names *hostNames) *leaderFirst {
	var r net.Resolver
	return &leaderFirst{
		probe:  func(s []string) []string { return probeModesWith(s, LeaderProbeTimeout, wrap) },
		lookup: r.LookupHost,
		names:  names,
		log:    log,
	}
}

// probeWrap prepares a probe's connection to address before srvr is sent.
type probeWrap func(ctx context.Context, conn net.Conn, address string) (net.Conn, error)

// lookupTimeout bounds Init's name resolution (go-zookeeper's own).
const lookupTimeout = 3 * time.Second

// Init is called by zk.Connect with the configured servers ("host:port").
func (h *leaderFirst) Init(servers []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	found, names, err := resolveServers(ctx, h.lookup, servers)
	if err != nil {
		return err
	}
	h.names.set(names)
	rand.Shuffle(len(found), func(i, j int) { found[i], found[j] = found[j], found[i] })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.servers, h.order = found, found
	h.tried, h.next, h.last = 0, "", ""
	return nil
}

// Len returns the number of server addresses.
func (h *leaderFirst) Len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.servers)
}

// Next returns the next server to try. retryStart is true when a pass over
// every server has ended without a connection (go-zookeeper then fails
// the requests not yet sent with ErrNoServer and waits a second), as with
// its own DNSHostProvider.
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
	h.next = server
	return server, retryStart
}

// Connected is called once a connection is made (to the server Next
// returned last): the next Next starts a new pass, with a new probe, in
// which that server comes last of its group.
func (h *leaderFirst) Connected() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.tried = 0
	h.last = h.next
}

// reorder probes the servers and orders this pass. Called with h.mu held
// (go-zookeeper calls Next under its own server lock too, so Conn.Server
// may wait for a probe: at most LeaderProbeTimeout).
func (h *leaderFirst) reorder() {
	h.probes++
	modes := make([]string, len(h.servers))
	if len(h.servers) > 1 {
		modes = h.probe(h.servers)
	}
	var leader bool
	h.order, leader = orderServers(h.servers, modes, h.last)
	if leader {
		h.leaders++
		h.log.Debug("zookeeper leader found; connecting to it first", "leader", h.order[0])
	}
}

// orderServers orders one pass over servers given each one's srvr Mode
// ("" when it did not answer): "leader" first, then the servers that
// answered, then the silent ones; within each group servers' order rotated
// to start after last (the server of the last connection), so last comes
// at the end of its group. leader reports whether a leader was found.
func orderServers(servers, modes []string, last string) (order []string, leader bool) {
	n := len(servers)
	start := 0
	for i, s := range servers {
		if s == last {
			start = i + 1
		}
	}
	rank := func(mode string) int {
		switch mode {
		case "leader":
			return 0
		case "":
			return 2
		default:
			return 1
		}
	}
	order = make([]string, 0, n)
	for r := 0; r <= 2; r++ {
		for k := range n {
			i := (start + k) % n
			if rank(modes[i]) == r {
				order = append(order, servers[i])
				leader = leader || r == 0
			}
		}
	}
	return order, leader
}

// probeModes asks every server its role at once and returns each one's
// srvr Mode ("leader", "follower", "observer", "standalone", or "" when it
// did not answer with one within timeout).
func probeModes(servers []string, timeout time.Duration) []string {
	return probeModesWith(servers, timeout, nil)
}

// probeModesWith is probeModes with each connection prepared by wrap.
func probeModesWith(servers []string, timeout time.Duration, wrap probeWrap) []string {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	modes := make([]string, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			modes[i], _ = serverModeWith(ctx, s, wrap)
		}()
	}
	wg.Wait()
	return modes
}

// errNoMode: a srvr reply without a Mode line (a server not serving, a
// four-letter word not in the server's whitelist, or not ZooKeeper at all).
var errNoMode = errors.New("zkx: srvr reply has no Mode line")

// serverMode returns the Mode of addr's srvr reply ("leader", "follower",
// "observer", "standalone"), reading at most leaderProbeMaxReply bytes
// before ctx's deadline.
func serverMode(ctx context.Context, addr string) (string, error) {
	return serverModeWith(ctx, addr, nil)
}

// serverModeWith is serverMode on a connection prepared by wrap (nil:
// none); over TLS the four-letter word follows the handshake.
func serverModeWith(ctx context.Context, addr string, wrap probeWrap) (string, error) {
	var d net.Dialer
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer raw.Close()
	if dl, ok := ctx.Deadline(); ok {
		if err := raw.SetDeadline(dl); err != nil {
			return "", err
		}
	}
	stop := context.AfterFunc(ctx, func() { _ = raw.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	conn := raw
	if wrap != nil {
		if conn, err = wrap(ctx, raw, addr); err != nil {
			return "", err
		}
		if dl, ok := ctx.Deadline(); ok {
			_ = raw.SetDeadline(dl) // the handshake cleared it
		}
	}
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

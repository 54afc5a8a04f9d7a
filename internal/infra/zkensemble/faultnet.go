package zkensemble

import (
	"errors"
	"fmt"
	"net"
	"regexp"
	"sort"
	"time"

	"github.com/roomlog/roomlog/internal/infra/faultnet"
)

// Errors of the fault network helpers, wrapped with %w.
var (
	// ErrNoFaultNet: a fault network helper on an ensemble started without
	// Options.FaultNet.
	ErrNoFaultNet = errors.New("zkensemble: started without Options.FaultNet")
	// ErrBadLinkName: ClientLinks was given a client name that cannot be a
	// link's client side.
	ErrBadLinkName = errors.New("zkensemble: bad client name")
)

// DefaultClient is the client side of the client links every FaultNet
// ensemble starts with, one per server ("client->zk<i>"): ProxiedAddrs.
const DefaultClient = "client"

// ServerNode is server i's name in link names: "zk<i>", i the API index
// (its myid is i+1). faultnet.To(ServerNode(i)) selects every client link
// to server i; faultnet.From(ServerNode(i)) its outgoing peer links.
func ServerNode(i int) string { return fmt.Sprintf("zk%d", i) }

// ClientLinkName is the link from client to server i: "<client>->zk<i>".
func ClientLinkName(client string, i int) string { return client + "->" + ServerNode(i) }

// QuorumLinkName is the link server i dials to reach server j's quorum
// port (a follower i to its leader j): "zk<i>->zk<j>/quorum".
func QuorumLinkName(i, j int) string { return ServerNode(i) + "->" + ServerNode(j) + "/quorum" }

// ElectionLinkName is the link server i dials to reach server j's election
// port: "zk<i>->zk<j>/election". ZooKeeper keeps an election connection
// only when the higher myid dialed it, so between two running servers the
// one in use goes from the higher index to the lower.
func ElectionLinkName(i, j int) string { return ServerNode(i) + "->" + ServerNode(j) + "/election" }

// clientName is what ClientLinks accepts: no "->" or "/" (they delimit link
// names), and nothing that reads as a server node.
var (
	clientName    = regexp.MustCompile(`^[A-Za-z0-9_.-]+$`)
	serverNodeish = regexp.MustCompile(`^zk[0-9]+$`)
)

// startNet starts the ensemble's faultnet.Net with its links: a client
// link per server and a quorum and an election link per directed pair,
// each targeting the real port on 127.0.0.1 (quorum links through the
// server's relay, see relay). The servers' ports are held by the caller,
// so no proxy can be handed one of them.
func (e *Ensemble) startNet() error {
	e.net = faultnet.NewNet(e.opts.FaultNetSeed)
	e.clientAddrs = map[string]int{}
	target := func(port int) []string { return []string{fmt.Sprintf("127.0.0.1:%d", port)} }
	if len(e.servers) > 1 {
		for _, s := range e.servers {
			r, err := newRelay(target(s.quorumPort)[0], relayRedialFor)
			if err != nil {
				return fmt.Errorf("zkensemble: quorum relay: %w", err)
			}
			e.relays = append(e.relays, r)
		}
	}
	for i, s := range e.servers {
		p, err := e.net.Add(ClientLinkName(DefaultClient, i), faultnet.Config{Targets: target(s.clientPort)})
		if err != nil {
			return fmt.Errorf("zkensemble: faultnet: %w", err)
		}
		e.clientAddrs[p.Addr()] = i
		e.proxied = append(e.proxied, p.Addr())
		for j, o := range e.servers {
			if i == j {
				continue
			}
			if _, err := e.net.Add(QuorumLinkName(i, j), faultnet.Config{Targets: []string{e.relays[j].addr()}}); err != nil {
				return fmt.Errorf("zkensemble: faultnet: %w", err)
			}
			if _, err := e.net.Add(ElectionLinkName(i, j), faultnet.Config{Targets: target(o.electionPort)}); err != nil {
				return fmt.Errorf("zkensemble: faultnet: %w", err)
			}
		}
	}
	return nil
}

// proxiedView is the peerView of a FaultNet ensemble: server i lists
// itself on the wildcard address at its real ports (it binds them there)
// and every peer j at the proxies of the links i->j. The wildcard is what
// keeps election traffic on the proxies: a server sends its own election
// address when it dials a peer, and a peer with a lower myid drops that
// connection and dials back to the address it was sent, unless it is a
// wildcard; then it dials the address in its own zoo.cfg, the proxy.
func (e *Ensemble) proxiedView(i, j int) string {
	if i == j {
		s := e.servers[i]
		return fmt.Sprintf("0.0.0.0:%d:%d", s.quorumPort, s.electionPort)
	}
	q := e.net.Link(QuorumLinkName(i, j))
	el := e.net.Link(ElectionLinkName(i, j))
	return fmt.Sprintf("%s:%s", q.Addr(), portOf(el.Addr()))
}

// portOf returns the port of "host:port".
func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// Net returns the ensemble's fault network (every link by name, see the
// package documentation), or nil without Options.FaultNet.
func (e *Ensemble) Net() *faultnet.Net { return e.net }

// ProxiedAddrs returns the client addresses through the default client
// links ("client->zk<i>"; index i is server i), or nil without
// Options.FaultNet. Clients whose link faults matter connect here (or to
// their own ClientLinks); Addrs stays direct.
func (e *Ensemble) ProxiedAddrs() []string {
	if e.net == nil {
		return nil
	}
	return append([]string(nil), e.proxied...)
}

// ClientLinks returns the addresses of the links "<client>->zk<i>", one
// per server (index i is server i), creating those that do not exist yet:
// a client connecting there can be partitioned from one server alone with
// Net().Partition(ClientLinkName(client, i)). It is idempotent (a
// restarted client gets the same addresses). A delay set by DelayAll
// applies to the new links too. client is letters, digits, '.', '_' and
// '-', and not "zk<number>".
func (e *Ensemble) ClientLinks(client string) ([]string, error) {
	if e.net == nil {
		return nil, ErrNoFaultNet
	}
	if !clientName.MatchString(client) || serverNodeish.MatchString(client) {
		return nil, fmt.Errorf("%w: %q (want [A-Za-z0-9_.-]+, not zk<number>)", ErrBadLinkName, client)
	}
	e.netMu.Lock()
	defer e.netMu.Unlock()
	addrs := make([]string, len(e.servers))
	for i, s := range e.servers {
		name := ClientLinkName(client, i)
		p := e.net.Link(name)
		if p == nil {
			var err error
			p, err = e.net.Add(name, faultnet.Config{Targets: []string{s.addr()}})
			if err != nil {
				return nil, fmt.Errorf("zkensemble: faultnet: %w", err)
			}
			if e.delay != 0 || e.jitter != 0 {
				p.Delay(e.delay, e.jitter)
			}
			e.clientAddrs[p.Addr()] = i
		}
		addrs[i] = p.Addr()
	}
	return addrs, nil
}

// PeerLinks returns the sorted names of the links between server i and
// its peers, both directions, quorum and election: what Isolate(i)
// partitions. nil without Options.FaultNet or for a bad index.
func (e *Ensemble) PeerLinks(i int) []string {
	if e.net == nil || i < 0 || i >= len(e.servers) {
		return nil
	}
	var names []string
	for j := range e.servers {
		if j != i {
			names = append(names, QuorumLinkName(i, j), QuorumLinkName(j, i),
				ElectionLinkName(i, j), ElectionLinkName(j, i))
		}
	}
	sort.Strings(names)
	return names
}

// Isolate partitions server i from every peer (faultnet Blackhole on
// PeerLinks(i): silence both ways, connections held) while its client
// links stay up: it keeps accepting clients and answering four-letter
// words, and once it notices it lost its quorum (about syncLimit, 4 s)
// it says it is not serving. HealNet (or Net().Heal) ends it.
func (e *Ensemble) Isolate(i int) error {
	if e.net == nil {
		return ErrNoFaultNet
	}
	if err := e.checkIndex(i); err != nil {
		return err
	}
	err := e.net.Partition(e.PeerLinks(i)...)
	e.log.Info("zkensemble: isolated", "server", i, "err", err)
	return err
}

// HealNet heals every link, client and peer links alike (Cut, Blackhole
// and the drops end; a delay stays, see DelayAll).
func (e *Ensemble) HealNet() error {
	if e.net == nil {
		return ErrNoFaultNet
	}
	e.net.HealAll()
	e.log.Info("zkensemble: healed every link")
	return nil
}

// DelayAll sets faultnet's Delay(d, jitter) on every link, and on the
// links ClientLinks creates later; DelayAll(0, 0) removes it.
func (e *Ensemble) DelayAll(d, jitter time.Duration) error {
	if e.net == nil {
		return ErrNoFaultNet
	}
	e.netMu.Lock()
	defer e.netMu.Unlock()
	e.delay, e.jitter = d, jitter
	e.net.DelayAll(d, jitter)
	return nil
}

// proxiedIndex returns the server index behind a client link address, or -1.
func (e *Ensemble) proxiedIndex(addr string) int {
	if e.net == nil {
		return -1
	}
	e.netMu.Lock()
	defer e.netMu.Unlock()
	if i, ok := e.clientAddrs[addr]; ok {
		return i
	}
	return -1
}

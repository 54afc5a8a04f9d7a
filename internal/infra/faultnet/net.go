package faultnet

import (
	"errors"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"sync"
	"time"
)

// Net holds proxies by link name ("m1->zk2": client side, "->", server
// side) and applies faults to many links at once. Its methods are safe for
// concurrent use.
type Net struct {
	seed uint64

	mu     sync.Mutex // guards links and closed
	links  map[string]*Proxy
	closed bool
}

// NewNet returns an empty Net whose links draw their jitter from seed.
func NewNet(seed uint64) *Net {
	return &Net{seed: seed, links: map[string]*Proxy{}}
}

// Add starts a proxy for the link name (see New). cfg.Seed is ignored: the
// link's seed derives from the Net's seed and name.
func (n *Net) Add(name string, cfg Config) (*Proxy, error) {
	h := fnv.New64a()
	h.Write([]byte(name))
	cfg.Seed = n.seed ^ h.Sum64()
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil, ErrClosed
	}
	if _, ok := n.links[name]; ok {
		return nil, fmt.Errorf("%w: %q", ErrDuplicateLink, name)
	}
	p, err := New(cfg)
	if err != nil {
		return nil, fmt.Errorf("faultnet: link %q: %w", name, err)
	}
	n.links[name] = p
	return p, nil
}

// Link returns the proxy of the link name, or nil.
func (n *Net) Link(name string) *Proxy {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.links[name]
}

// Names returns the sorted names of the links that match (every link if
// match is nil).
func (n *Net) Names(match func(name string) bool) []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	var names []string
	for name := range n.links {
		if match == nil || match(name) {
			names = append(names, name)
		}
	}
	slices.Sort(names)
	return names
}

// From matches the links whose client side is node ("node->...").
func From(node string) func(name string) bool {
	return func(name string) bool { return strings.HasPrefix(name, node+"->") }
}

// To matches the links whose server side is node ("...->node").
func To(node string) func(name string) bool {
	return func(name string) bool { return strings.HasSuffix(name, "->"+node) }
}

// Apply calls fn on the proxy of each named link. If a name is unknown it
// returns ErrUnknownLink and applies nothing.
func (n *Net) Apply(fn func(*Proxy), names ...string) error {
	n.mu.Lock()
	ps := make([]*Proxy, 0, len(names))
	var errs []error
	for _, name := range names {
		p, ok := n.links[name]
		if !ok {
			errs = append(errs, fmt.Errorf("%w: %q", ErrUnknownLink, name))
		}
		ps = append(ps, p)
	}
	n.mu.Unlock()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	for _, p := range ps {
		fn(p)
	}
	return nil
}

// Partition blackholes the named links: silence both ways, nothing lost,
// until Heal.
func (n *Net) Partition(names ...string) error { return n.Apply((*Proxy).Blackhole, names...) }

// Cut cuts the named links: every connection reset until Heal.
func (n *Net) Cut(names ...string) error { return n.Apply((*Proxy).Cut, names...) }

// Heal heals the named links (Delay and Bandwidth stay).
func (n *Net) Heal(names ...string) error { return n.Apply((*Proxy).Heal, names...) }

// HealAll heals every link (Delay and Bandwidth stay).
func (n *Net) HealAll() { _ = n.Heal(n.Names(nil)...) }

// DelayAll sets Delay(d, jitter) on every link; DelayAll(0, 0) removes it.
func (n *Net) DelayAll(d, jitter time.Duration) {
	_ = n.Apply(func(p *Proxy) { p.Delay(d, jitter) }, n.Names(nil)...)
}

// Stats snapshots every link's counters by name.
func (n *Net) Stats() map[string]Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	out := make(map[string]Stats, len(n.links))
	for name, p := range n.links {
		out[name] = p.Stats()
	}
	return out
}

// Close closes every link and returns once all have stopped. It is
// idempotent; Add fails with ErrClosed afterwards.
func (n *Net) Close() error {
	n.mu.Lock()
	n.closed = true
	ps := make([]*Proxy, 0, len(n.links))
	for _, p := range n.links {
		ps = append(ps, p)
	}
	n.mu.Unlock()
	var errs []error
	for _, p := range ps {
		errs = append(errs, p.Close())
	}
	return errors.Join(errs...)
}

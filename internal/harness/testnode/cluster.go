package testnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomlog/roomlog/internal/infra/faultnet"
	"github.com/roomlog/roomlog/tlsfiles"
)

// ClusterOptions configure a Cluster.
type ClusterOptions struct {
	// Nodes is how many nodes Start launches (ids "n0", "n1", …). Default 3.
	Nodes int
	// ZK are the ZooKeeper client addresses. Required.
	ZK []string
	// Room is the room's name. Default "t" + 12 random hex digits.
	Room string
	// Dir holds one subdirectory per node. Required.
	Dir string
	// Node is the template for every node (ZK, Room, ID and Dir are set
	// per node).
	Node NodeOptions
	// Logger receives harness logs. nil: discard.
	Logger *slog.Logger
	// Net, if set, puts every node's links on faultnet proxies added to
	// it: "<id>->zk<i>" from the node to ZooKeeper server i (the node's
	// ZK list is those proxies), and "peers-><id>" in front of its HTTP
	// port, which it advertises (so peers' checkpoint fetches cross it;
	// the harness's own API calls go direct).
	Net *faultnet.Net
	// Tune, if set, adjusts every node's options after the template and
	// the per-node fields are set (before the links of Net): per-node
	// TLS files, say.
	Tune func(*NodeOptions) error
}

// Cluster is a set of nodes of one room on one ZooKeeper ensemble.
type Cluster struct {
	opts ClusterOptions
	log  *slog.Logger

	mu    sync.Mutex // guards nodes
	nodes []*Node
}

// RandomRoom returns a fresh room name.
func RandomRoom() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return "t" + hex.EncodeToString(b[:])
}

// StartCluster launches opts.Nodes nodes concurrently and waits until each
// serves (not until one is primary: see WaitPrimary). On error every node
// started is killed.
func StartCluster(ctx context.Context, opts ClusterOptions) (*Cluster, error) {
	if opts.Nodes == 0 {
		opts.Nodes = 3
	}
	if opts.Room == "" {
		opts.Room = RandomRoom()
	}
	if len(opts.ZK) == 0 || opts.Dir == "" || opts.Nodes < 0 {
		return nil, fmt.Errorf("%w: cluster needs ZK, Dir and Nodes >= 0", ErrInvalidOptions)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Node.Binary == "" {
		bin, err := Build(ctx)
		if err != nil {
			return nil, err
		}
		opts.Node.Binary = bin
	}
	c := &Cluster{opts: opts, log: opts.Logger.With("room", opts.Room)}
	nodes := make([]*Node, opts.Nodes)
	errs := make([]error, opts.Nodes)
	var wg sync.WaitGroup
	for i := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o, err := c.nodeOptions(fmt.Sprintf("n%d", i), nil)
			if err != nil {
				errs[i] = err
				return
			}
			nodes[i], errs[i] = Start(ctx, o)
		}()
	}
	wg.Wait()
	for _, n := range nodes {
		if n != nil {
			c.nodes = append(c.nodes, n)
		}
	}
	if err := errors.Join(errs...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// ClusterForTest is StartCluster for a test: Dir defaults to t.TempDir(),
// the cluster is closed on cleanup, and when the test failed the tail of
// every node's log is printed first.
func ClusterForTest(t testing.TB, opts ClusterOptions) *Cluster {
	t.Helper()
	if opts.Dir == "" {
		opts.Dir = t.TempDir()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := StartCluster(ctx, opts)
	if err != nil {
		t.Fatalf("start cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("node logs of room %s:\n%s", c.Room(), c.LogTails(60))
		}
		c.Close()
	})
	return c
}

// nodeOptions are node id's options: the template, the per-node fields,
// then tune (Add's), then ClusterOptions.Tune, then the links of Net.
func (c *Cluster) nodeOptions(id string, tune func(*NodeOptions)) (NodeOptions, error) {
	o := c.opts.Node
	o.ZK = c.opts.ZK
	o.Room = c.opts.Room
	o.ID = id
	o.Dir = filepath.Join(c.opts.Dir, id)
	if o.Logger == nil {
		o.Logger = c.log
	}
	if tune != nil {
		tune(&o)
	}
	if c.opts.Tune != nil {
		if err := c.opts.Tune(&o); err != nil {
			return o, fmt.Errorf("testnode: options of %s: %w", id, err)
		}
	}
	peerTLS := o.TLS != nil && o.TLS.Peer != (tlsfiles.Files{})
	if c.opts.Net == nil {
		if peerTLS && o.TLS.PeerListen == "" {
			port, err := freePort()
			if err != nil {
				return o, err
			}
			t := *o.TLS
			t.PeerListen = fmt.Sprintf("127.0.0.1:%d", port)
			o.TLS = &t
		}
		return o, nil
	}
	o.ZK = nil
	for i, zk := range c.opts.ZK {
		name := fmt.Sprintf("%s->zk%d", id, i)
		p := c.opts.Net.Link(name)
		if p == nil {
			var err error
			if p, err = c.opts.Net.Add(name, faultnet.Config{Targets: []string{zk}}); err != nil {
				return o, fmt.Errorf("testnode: link %s: %w", name, err)
			}
		}
		o.ZK = append(o.ZK, p.Addr())
	}
	// Peers reach the node's checkpoint endpoint through "peers-><id>":
	// its HTTP port, or with peer TLS the HTTPS port of its own.
	name := "peers->" + id
	p := c.opts.Net.Link(name)
	if p == nil {
		// The port is picked now so the proxy can target it.
		port, err := freePort()
		if err != nil {
			return o, err
		}
		target := fmt.Sprintf("127.0.0.1:%d", port)
		if p, err = c.opts.Net.Add(name, faultnet.Config{Targets: []string{target}}); err != nil {
			return o, fmt.Errorf("testnode: link %s: %w", name, err)
		}
	}
	if peerTLS {
		t := *o.TLS
		t.PeerListen = p.Targets()[0]
		o.TLS = &t
	} else {
		o.HTTPAddr = p.Targets()[0]
	}
	o.Advertise = p.Addr()
	return o, nil
}

// freePort returns a loopback port that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("testnode: pick a port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// Room is the room's name.
func (c *Cluster) Room() string { return c.opts.Room }

// Add launches a new member id (an empty disk unless its directory holds
// data) with the cluster's template, changed by tune if not nil.
func (c *Cluster) Add(ctx context.Context, id string, tune func(*NodeOptions)) (*Node, error) {
	if c.Node(id) != nil {
		return nil, fmt.Errorf("%w: node %q exists", ErrInvalidOptions, id)
	}
	o, err := c.nodeOptions(id, tune)
	if err != nil {
		return nil, err
	}
	n, err := Start(ctx, o)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	c.nodes = append(c.nodes, n)
	c.mu.Unlock()
	return n, nil
}

// Nodes returns every node (live or not), in the order they were added.
func (c *Cluster) Nodes() []*Node {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.nodes)
}

// Node returns the node with member id, or nil.
func (c *Cluster) Node(id string) *Node {
	for _, n := range c.Nodes() {
		if n.ID() == id {
			return n
		}
	}
	return nil
}

// Live returns the nodes that run and are not paused.
func (c *Cluster) Live() []*Node {
	var out []*Node
	for _, n := range c.Nodes() {
		if n.Live() {
			out = append(out, n)
		}
	}
	return out
}

// Statuses returns the status of every live node (errors for those that
// did not answer within 2 s).
func (c *Cluster) Statuses(ctx context.Context) (map[string]StatusJSON, error) {
	live := c.Live()
	sts := make([]StatusJSON, len(live))
	errs := make([]error, len(live))
	var wg sync.WaitGroup
	for i, n := range live {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			sts[i], errs[i] = n.Status(sctx)
		}()
	}
	wg.Wait()
	out := make(map[string]StatusJSON, len(live))
	for i, n := range live {
		if errs[i] == nil {
			out[n.ID()] = sts[i]
		}
	}
	return out, errors.Join(errs...)
}

// poll calls cond every interval until it returns true or an error, or
// ctx ends (then the last reason cond gave is in the error).
func poll(ctx context.Context, interval time.Duration, what string, cond func() (bool, string, error)) error {
	t := time.NewTicker(interval)
	defer t.Stop()
	last := "not checked yet"
	for {
		ok, why, err := cond()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		last = why
		select {
		case <-ctx.Done():
			return fmt.Errorf("testnode: waiting for %s: %w (last: %s)", what, ctx.Err(), last)
		case <-t.C:
		}
	}
}

// PrimaryNow returns the live node that reports role primary while every
// other live node is a standby naming it, or an explanation why there is
// none right now.
func (c *Cluster) PrimaryNow(ctx context.Context) (*Node, string) { return c.PrimaryAmong(ctx, "") }

// PrimaryAmong is PrimaryNow leaving node exclude out (a node cut off from
// ZooKeeper that cannot take part, but still answers).
func (c *Cluster) PrimaryAmong(ctx context.Context, exclude string) (*Node, string) {
	sts, err := c.Statuses(ctx)
	if err != nil {
		return nil, err.Error()
	}
	delete(sts, exclude)
	var primary string
	for id, s := range sts {
		if s.Role == RolePrimary {
			if primary != "" {
				return nil, fmt.Sprintf("two primaries: %s and %s", primary, id)
			}
			primary = id
		}
	}
	if primary == "" {
		return nil, fmt.Sprintf("no primary (%s)", describe(sts))
	}
	for id, s := range sts {
		if id != primary && (s.Role != RoleStandby || s.PrimaryID != primary) {
			return nil, fmt.Sprintf("%s is %s naming %q, not a standby of %s", id, s.Role, s.PrimaryID, primary)
		}
	}
	return c.Node(primary), ""
}

func describe(sts map[string]StatusJSON) string {
	var parts []string
	for id, s := range sts {
		parts = append(parts, fmt.Sprintf("%s=%s/e%d/a%d", id, s.Role, s.Epoch, s.Applied))
	}
	slices.Sort(parts)
	return strings.Join(parts, " ")
}

// WaitPrimary waits until exactly one live node is primary and every other
// live node is a standby that names it, and returns it.
func (c *Cluster) WaitPrimary(ctx context.Context) (*Node, error) {
	var p *Node
	err := poll(ctx, 20*time.Millisecond, "one primary in room "+c.Room(), func() (bool, string, error) {
		var why string
		p, why = c.PrimaryNow(ctx)
		return p != nil, why, nil
	})
	return p, err
}

// WaitConverged waits until every live node has applied the same index and
// reports the same state hash at it, and returns that hash and index.
func (c *Cluster) WaitConverged(ctx context.Context) (HashResponse, error) {
	var out HashResponse
	err := poll(ctx, 50*time.Millisecond, "convergence of room "+c.Room(), func() (bool, string, error) {
		live := c.Live()
		if len(live) == 0 {
			return false, "no live node", nil
		}
		sts, err := c.Statuses(ctx)
		if err != nil {
			return false, err.Error(), nil
		}
		var target uint64
		for _, s := range sts {
			target = max(target, s.Applied)
		}
		hashes := make(map[string]HashResponse, len(live))
		for _, n := range live {
			hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			h, err := n.Hash(hctx, target)
			cancel()
			if err != nil {
				return false, fmt.Sprintf("%s: %v", n.ID(), err), nil
			}
			hashes[n.ID()] = h
		}
		first := true
		for id, h := range hashes {
			if first {
				out, first = h, false
				continue
			}
			if h != out {
				return false, fmt.Sprintf("%s at %d (%.12s) vs %d (%.12s)", id, h.Index, h.Hash, out.Index, out.Hash), nil
			}
		}
		return true, "", nil
	})
	return out, err
}

// LogTails returns the last lines of every node's log, headed by its id.
func (c *Cluster) LogTails(lines int) string {
	var b strings.Builder
	for _, n := range c.Nodes() {
		fmt.Fprintf(&b, "===== node %s (pid %d, running %v, launches %d): %s =====\n%s\n",
			n.ID(), n.PID(), n.Running(), n.Launches(), n.LogPath(), n.LogTail(lines))
	}
	return b.String()
}

// Remove stops member id (SIGTERM: it leaves the room cleanly, falling
// back to SIGKILL as Node.Stop does), closes it and drops it from the
// cluster: Nodes no longer lists it. Its directory stays.
func (c *Cluster) Remove(id string) error {
	n := c.Node(id)
	if n == nil {
		return fmt.Errorf("%w: no node %q", ErrInvalidOptions, id)
	}
	err := n.Stop()
	c.mu.Lock()
	c.nodes = slices.DeleteFunc(c.nodes, func(m *Node) bool { return m == n })
	c.mu.Unlock()
	return errors.Join(err, n.Close())
}

// Close kills every node. Idempotent.
func (c *Cluster) Close() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_ = n.Close()
		}()
	}
	wg.Wait()
}

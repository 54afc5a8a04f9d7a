package main

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/third_party/zk"
)

type nopZKLogger struct{}

func (nopZKLogger) Printf(string, ...any) {}

// dialRaw opens a plain go-zookeeper connection (for the raw ceiling) and
// waits for its session. State is observed through the event callback, never
// the 6-event channel.
func dialRaw(ctx context.Context, servers []string, timeout time.Duration) (*zk.Conn, error) {
	return dialRawWith(ctx, servers, timeout, nil)
}

// dialRawWith is dialRaw with go-zookeeper's dialer replaced by dialer
// (nil: its own), e.g. a TLS one (dialRawTLS).
func dialRawWith(ctx context.Context, servers []string, timeout time.Duration, dialer zk.Dialer) (*zk.Conn, error) {
	hasSession := make(chan struct{})
	var once sync.Once
	cb := func(ev zk.Event) {
		if ev.Type == zk.EventSession && ev.State == zk.StateHasSession {
			once.Do(func() { close(hasSession) })
		}
	}
	opts := []func(*zk.Conn){zk.WithEventCallback(cb), zk.WithLogger(nopZKLogger{})}
	if dialer != nil {
		opts = append(opts, zk.WithDialer(dialer))
	}
	conn, _, err := zk.Connect(servers, timeout, func(c *zk.Conn) {
		for _, o := range opts {
			o(c)
		}
	})
	if err != nil {
		return nil, err
	}
	select {
	case <-hasSession:
		return conn, nil
	case <-ctx.Done():
		conn.Close()
		return nil, ctx.Err()
	}
}

// deleteChildren deletes the named children of parent in bulk: Multi calls
// of up to 500 deletes, 8 in flight. A Multi that fails (a child already
// gone, or not empty) is redone one delete at a time: ErrNoNode is ignored,
// children that have children of their own are returned in notEmpty.
func deleteChildren(conn *zk.Conn, parent string, names []string) (notEmpty []string, err error) {
	const chunk, workers = 500, 8
	jobs := make(chan []string)
	type outcome struct {
		notEmpty []string
		err      error
	}
	outs := make(chan outcome, workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var o outcome
			for part := range jobs {
				if o.err != nil {
					continue
				}
				ops := make([]any, len(part))
				for i, n := range part {
					ops[i] = &zk.DeleteRequest{Path: parent + "/" + n, Version: -1}
				}
				if _, err := conn.Multi(ops...); err == nil {
					continue
				}
				for _, n := range part {
					err := conn.Delete(parent+"/"+n, -1)
					switch {
					case err == nil, errors.Is(err, zk.ErrNoNode):
					case errors.Is(err, zk.ErrNotEmpty):
						o.notEmpty = append(o.notEmpty, n)
					default:
						o.err = fmt.Errorf("delete %s/%s: %w", parent, n, err)
					}
					if o.err != nil {
						break
					}
				}
			}
			outs <- o
		}()
	}
	for i := 0; i < len(names); i += chunk {
		jobs <- names[i:min(i+chunk, len(names))]
	}
	close(jobs)
	wg.Wait()
	close(outs)
	for o := range outs {
		notEmpty = append(notEmpty, o.notEmpty...)
		if o.err != nil && err == nil {
			err = o.err
		}
	}
	return notEmpty, err
}

// deleteTree deletes p and everything below it. A missing p is not an error.
func deleteTree(conn *zk.Conn, p string) error {
	kids, _, err := conn.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("children %s: %w", p, err)
	}
	inner, err := deleteChildren(conn, p, kids)
	if err != nil {
		return err
	}
	for _, k := range inner {
		if err := deleteTree(conn, p+"/"+k); err != nil {
			return err
		}
	}
	if err := conn.Delete(p, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("delete %s: %w", p, err)
	}
	return nil
}

// warmZooKeeper runs cfg.zkWarmup of 256 B creates, 64 in flight, on a
// session with the leader, then deletes them, off the record. A freshly
// started JVM interprets ZooKeeper's request path until the JIT compiled
// it: on this 2-core machine the first minute ran sequential creates at
// half the rate of a warm server (bench/README, issue 44), and the raw
// rows, which run first, took the whole penalty.
func (b *bench) warmZooKeeper(ctx context.Context) error { return b.warmEnsemble(ctx, b.ens) }

// warmEnsemble is warmZooKeeper for ens (the tls scenario's own
// ensemble too; its plaintext port serves the warm-up).
func (b *bench) warmEnsemble(ctx context.Context, ens *zkensemble.Ensemble) error {
	if b.cfg.zkWarmup <= 0 {
		return nil
	}
	b.prog.Logf("warming ZooKeeper up: %v of 256 B creates, 64 in flight", b.cfg.zkWarmup)
	addrs := ens.Addrs()
	if leader, err := ens.Leader(ctx); err == nil {
		addrs = addrs[leader : leader+1]
	}
	conn, err := dialRaw(ctx, addrs, 10*time.Second)
	if err != nil {
		return err
	}
	defer conn.Close()
	const base = "/bench-warmup"
	acl := zk.WorldACL(zk.PermAll)
	if _, err := conn.Create(base, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		return err
	}
	data := make([]byte, 256)
	end := time.Now().Add(b.cfg.zkWarmup)
	var n atomic.Int64
	var wg sync.WaitGroup
	for w := range 64 {
		// A parent per worker: a getChildren reply of one parent stays
		// far below the 1 MiB buffer when deleteTree lists it.
		parent := fmt.Sprintf("%s/p%d", base, w)
		if _, err := conn.Create(parent, nil, 0, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// (At most 200k znodes, ~3k per parent: ZooKeeper's heap
			// stays small.)
			for time.Now().Before(end) && ctx.Err() == nil && n.Load() < 200_000 {
				if _, err := conn.Create(parent+"/w-", data, zk.FlagSequence, acl); err == nil {
					n.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	b.prog.Logf("  %d creates", n.Load())
	return deleteTree(conn, base)
}

package main

import (
	"context"
	"errors"
	"fmt"
	"path"
	"sort"
	"strings"
	"sync"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
)

// Verification: every writer's model is turned into checks ("facts"), each
// owned by the operations that produced it, and the checks run against
// every master at min_index = the converged index.
//
//	live directory  ls: it exists, and it holds exactly the model's children
//	                (an extra name is a duplicate or phantom operation)
//	live file       stat: a file with the model's replication and exactly its
//	                blocks, ids and sizes, in order. Owners: its create, the
//	                rename that moved it to its path, each addblock
//	removed path    stat: not_found. Owner: the rename or delete that removed it
//
// An operation is lost when it was acknowledged and a fact it owns fails.
// Operations whose facts are implied by later ones (the create of a file
// that was deleted, an earlier rename) are covered by those: a later
// operation could not have succeeded without them. A failing fact owned
// only by operations that were not acknowledged, or a fact nothing explains
// (an extra entry or block: an operation applied twice, a phantom), is a
// mismatch. (The writers retry an unknown outcome with the same
// Idempotency-Key until it is acknowledged, so their models hold only
// acknowledged operations.)

// opKey names one operation of one writer.
type opKey struct{ writer, op int }

// verdict collects the outcome of the checks against one or more masters.
type verdict struct {
	mu         sync.Mutex // guards the fields below
	lost       map[opKey]bool
	mismatches []string
	checks     int
}

const maxMismatchesShown = 10

func newVerdict() *verdict { return &verdict{lost: map[opKey]bool{}} }

func (v *verdict) fail(w *writer, master string, owners []int, format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	explained := false
	for _, id := range owners {
		if id >= 0 && w.ops[id].acked {
			v.lost[opKey{w.k, id}] = true
			explained = true
		}
	}
	if !explained {
		v.mismatches = append(v.mismatches, master+": "+fmt.Sprintf(format, args...))
	}
}

func (v *verdict) mismatch(master, format string, args ...any) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.mismatches = append(v.mismatches, master+": "+fmt.Sprintf(format, args...))
}

// check is one read against one master.
type check func(ctx context.Context, c *client.Client, name string) error

// checksFor turns a writer's model into checks recording into v.
func checksFor(w *writer, v *verdict, minIndex uint64) []check {
	var out []check
	children := map[string][]string{} // dir path -> expected child names
	for _, d := range w.dirs[1:] {
		children[w.root] = append(children[w.root], path.Base(d.path))
	}
	for _, f := range w.files {
		dir := path.Dir(f.path)
		children[dir] = append(children[dir], path.Base(f.path))
	}
	for _, d := range w.dirs {
		d := d
		want := children[d.path]
		out = append(out, func(ctx context.Context, c *client.Client, name string) error {
			ls, err := c.Ls(ctx, d.path, minIndex)
			if errors.Is(err, namespace.ErrNotFound) {
				v.fail(w, name, []int{d.op}, "directory %s missing", d.path)
				return nil
			}
			if err != nil {
				return err
			}
			expected := map[string]bool{}
			for _, n := range want {
				expected[n] = true
			}
			for _, e := range ls.Entries {
				if !expected[e.Name] {
					v.mismatch(name, "unexpected %s %s in %s (not made by any acknowledged or applied operation)", e.Type, e.Name, d.path)
				}
			}
			return nil
		})
	}
	for _, f := range w.files {
		f := f
		owners := []int{f.create, f.move}
		for _, b := range f.blocks {
			owners = append(owners, b.op)
		}
		out = append(out, func(ctx context.Context, c *client.Client, name string) error {
			st, err := c.Stat(ctx, f.path, minIndex)
			if errors.Is(err, namespace.ErrNotFound) {
				v.fail(w, name, owners, "file %s missing", f.path)
				return nil
			}
			if err != nil {
				return err
			}
			if st.Type != "file" || st.Replication != f.repl {
				v.fail(w, name, []int{f.create}, "%s: %s with replication %d, want a file with replication %d", f.path, st.Type, st.Replication, f.repl)
			}
			have := map[uint64]namespace.Block{}
			for _, b := range st.BlockList {
				have[b.ID] = b
			}
			for i, b := range f.blocks {
				got, ok := have[b.id]
				switch {
				case !ok:
					v.fail(w, name, []int{b.op}, "%s: block %d (%d bytes) missing", f.path, b.id, b.size)
				case got.Size != b.size:
					v.fail(w, name, []int{b.op}, "%s: block %d has %d bytes, want %d", f.path, b.id, got.Size, b.size)
				case i >= len(st.BlockList) || st.BlockList[i].ID != b.id:
					v.mismatch(name, "%s: block %d not at position %d", f.path, b.id, i)
				}
				delete(have, b.id)
			}
			for id := range have {
				v.mismatch(name, "%s: unexpected block %d", f.path, id)
			}
			return nil
		})
	}
	for _, g := range w.gone {
		g := g
		out = append(out, func(ctx context.Context, c *client.Client, name string) error {
			st, err := c.Stat(ctx, g.path, minIndex)
			if errors.Is(err, namespace.ErrNotFound) {
				return nil
			}
			if err != nil {
				return err
			}
			v.fail(w, name, []int{g.op}, "%s still exists (%s) after %s", g.path, st.Type, w.ops[g.op].kind)
			return nil
		})
	}
	return out
}

// verify runs every writer's checks against each master (name -> client),
// with parallel requests. An error means a master could not be read at all.
func verify(ctx context.Context, writers []*writer, masters map[string]*client.Client, minIndex uint64, parallel int) (*verdict, error) {
	v := newVerdict()
	type job struct {
		name string
		c    *client.Client
		fn   check
	}
	var jobs []job
	names := make([]string, 0, len(masters))
	for name := range masters {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, w := range writers {
		checks := checksFor(w, v, minIndex)
		for _, name := range names {
			for _, fn := range checks {
				jobs = append(jobs, job{name, masters[name], fn})
			}
		}
	}
	v.checks = len(jobs)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ch := make(chan job)
	var wg sync.WaitGroup
	for range parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				if err := j.fn(ctx, j.c, j.name); err != nil {
					cancel(fmt.Errorf("verify on %s: %w", j.name, err))
				}
			}
		}()
	}
feed:
	for _, j := range jobs {
		select {
		case ch <- j:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	if err := context.Cause(ctx); err != nil {
		return v, err
	}
	return v, nil
}

// summary is a one-line account of a verdict.
func (v *verdict) summary() string {
	v.mu.Lock()
	defer v.mu.Unlock()
	var b strings.Builder
	fmt.Fprintf(&b, "%d checks, %d acknowledged operations lost, %d mismatches", v.checks, len(v.lost), len(v.mismatches))
	for i, m := range v.mismatches {
		if i == maxMismatchesShown {
			fmt.Fprintf(&b, "\n      … %d more", len(v.mismatches)-i)
			break
		}
		fmt.Fprintf(&b, "\n      %s", m)
	}
	return b.String()
}

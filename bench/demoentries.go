package main

import (
	"crypto/rand"
	"fmt"
	"path"
	"time"

	mrand "math/rand/v2"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
	"github.com/roomlog/roomlog/store"
)

// demoEntries makes log entries like the ones cmd/dfsmaster-demo's masters
// append: a namespace command (msgpack, namespace.EncodeCommand) in the
// request envelope replica.ProposeRequest writes (store.EncodeRequest: a
// random 16-byte id from the client's Idempotency-Key, a millisecond stamp,
// the default TTL and window). The commands follow an HDFS-like job
// workload: per user and job, mkdir of an output dir, create of part files
// (replication 3) under _temporary, addblock of 128 MiB blocks (the last
// one shorter), rename of the parts into place, and now and then a
// recursive delete of an old job's output. They are what compression sees
// on the demo's log: repeated field names and path prefixes, random ids.
type demoEntries struct {
	rng   *mrand.Rand
	stamp int64
	// size > 0: every entry is exactly size bytes: enveloped commands
	// back to back until size (the last one cut), as if a client packed
	// several proposals in one entry; the density of random ids is the
	// same as in the demo's log. 0: one enveloped command per entry.
	size  int
	queue [][]byte // pending commands of the current job
	job   int
}

var demoUsers = []string{"alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi"}
var demoProjects = []string{"clickstream", "billing", "search-index", "ml-features", "etl", "logs"}

func newDemoEntries(seed uint64, size int) *demoEntries {
	return &demoEntries{rng: mrand.New(mrand.NewPCG(seed, 0xd15c)), stamp: time.Date(2026, 11, 22, 7, 0, 0, 0, time.UTC).UnixMilli(), size: size}
}

// command returns the next encoded namespace command.
func (d *demoEntries) command() []byte {
	if len(d.queue) == 0 {
		d.planJob()
	}
	c := d.queue[0]
	d.queue = d.queue[1:]
	return c
}

// planJob queues the commands of one job.
func (d *demoEntries) planJob() {
	d.job++
	r := d.rng
	user := demoUsers[r.IntN(len(demoUsers))]
	proj := demoProjects[r.IntN(len(demoProjects))]
	day := fmt.Sprintf("dt=2026-11-%02d", 1+r.IntN(28))
	out := path.Join("/user", user, proj, "output", day, fmt.Sprintf("job-%06d", d.job))
	tmp := path.Join(out, "_temporary")
	add := func(c namespace.Command) {
		b, err := namespace.EncodeCommand(c)
		if err != nil {
			panic(fmt.Sprintf("demo command %+v: %v", c, err))
		}
		d.queue = append(d.queue, b)
	}
	add(namespace.Command{Op: namespace.OpMkdir, Path: tmp, Parents: true})
	parts := 4 + r.IntN(60)
	for p := range parts {
		f := path.Join(tmp, fmt.Sprintf("part-%05d", p))
		add(namespace.Command{Op: namespace.OpCreate, Path: f, Replication: 3})
		blocks := 1 + r.IntN(8)
		for b := range blocks {
			size := int64(128 << 20)
			if b == blocks-1 {
				size = 1 + r.Int64N(128<<20)
			}
			add(namespace.Command{Op: namespace.OpAddBlock, Path: f, Size: size})
		}
	}
	for p := range parts {
		add(namespace.Command{Op: namespace.OpRename,
			Path: path.Join(tmp, fmt.Sprintf("part-%05d", p)), Dst: path.Join(out, fmt.Sprintf("part-%05d", p))})
	}
	add(namespace.Command{Op: namespace.OpDelete, Path: tmp, Recursive: true})
	if r.IntN(4) == 0 {
		add(namespace.Command{Op: namespace.OpDelete, Recursive: true,
			Path: path.Join("/user", user, proj, "output", fmt.Sprintf("dt=2026-10-%02d", 1+r.IntN(28)))})
	}
}

// next returns the next entry.
func (d *demoEntries) next() []byte {
	e := d.one()
	for len(e) < d.size {
		e = append(e, d.one()...)
	}
	if d.size > 0 {
		e = e[:d.size]
	}
	return e
}

// one returns one command in its request envelope.
func (d *demoEntries) one() []byte {
	var id store.RequestID
	_, _ = rand.Read(id[:])
	d.stamp += int64(d.rng.IntN(3))
	env, err := store.EncodeRequest(store.Request{ID: id, Stamp: d.stamp, TTL: 10 * time.Minute, Window: 1 << 20}, d.command())
	if err != nil {
		panic(err)
	}
	return env
}

// randomEntries returns n entries of size random bytes (incompressible).
func randomEntries(n, size int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = make([]byte, size)
		_, _ = rand.Read(out[i])
	}
	return out
}

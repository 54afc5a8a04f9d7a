package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/logroom"
)

// The observers' record (doc.go, rule 10). Two independent sources say
// who led: each observer's own status, sampled every observerSample while
// it runs (its role must stay standby, and it must report itself an
// observer, or the run proves nothing), and the room's epoch znode, whose
// owner is the member id of the writer that set each epoch, read after
// every change through a ZooKeeper client of the watch's own (an observer
// that took over, even briefly, would own an epoch).

// observerSample is how often each observer's status is read.
const observerSample = 100 * time.Millisecond

// ObserverReport is what the watch saw of the observers; AddObservers
// turns it into violations.
type ObserverReport struct {
	IDs []string // the observers' member ids
	// Samples: observer status reads answered; NotObserver of them said
	// the node was not an observer (it ran without the flag).
	Samples, NotObserver int
	// Led: evidence that an observer led (a status sample in role
	// takeover or primary), one line each, in time order.
	Led []string
	// Owners: each epoch the watch read from the epoch znode, and its
	// owner; Reads of the epoch znode; ReadErrors retried.
	Owners     map[uint64]string
	Reads      int
	ReadErrors int
}

// observerWatch samples the observers' status and the epoch znode while
// the run goes on; stop ends it and returns the report.
type observerWatch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu  sync.Mutex // guards rep
	rep ObserverReport
}

func startObserverWatch(ctx context.Context, r *runner) *observerWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &observerWatch{cancel: cancel, rep: ObserverReport{IDs: slices.Sorted(maps.Keys(r.observers)), Owners: map[uint64]string{}}}
	for _, id := range w.rep.IDs {
		n := r.c.Node(id)
		w.wg.Add(1)
		go func() { // owner: w; stop cancels and waits
			defer w.wg.Done()
			w.sampleStatus(ctx, r, n)
		}()
	}
	w.wg.Add(1)
	go func() { // owner: w; stop cancels and waits
		defer w.wg.Done()
		w.followEpochs(ctx, r.zkDial(), r.c.Room())
	}()
	return w
}

// sampleStatus reads n's status every observerSample while it is live.
func (w *observerWatch) sampleStatus(ctx context.Context, r *runner, n *testnode.Node) {
	tick := time.NewTicker(observerSample)
	defer tick.Stop()
	for {
		if n.Live() {
			sctx, cancel := context.WithTimeout(ctx, time.Second)
			s, err := n.Status(sctx)
			cancel()
			if err == nil {
				w.mu.Lock()
				w.rep.Samples++
				if !s.Observer {
					w.rep.NotObserver++
				}
				if s.Role == testnode.RolePrimary || s.Role == testnode.RoleTakeover {
					w.rep.Led = append(w.rep.Led, fmt.Sprintf("[%8.3fs] observer %s reports role %s (epoch %d)",
						time.Since(r.out.start).Seconds(), n.ID(), s.Role, s.Epoch))
				}
				w.mu.Unlock()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// followEpochs reads the epoch znode after every change (an exists watch
// armed before each read) and records each epoch's owner. Two changes
// between a watch and the next read show only the second: an epoch that
// wrote nothing may be missed (AddObservers reports the log's epochs it
// never read), one that wrote an entry leaves it in the log.
func (w *observerWatch) followEpochs(ctx context.Context, dc logroom.DialConfig, room string) {
	var cl *logroom.Client
	defer func() {
		if cl != nil {
			cl.Close()
		}
	}()
	path := logroom.RoomPath(logroom.DefaultBase, room, epochZnode)
	for ctx.Err() == nil {
		if cl == nil {
			var err error
			if cl, err = logroom.Dial(ctx, dc); err != nil {
				cl = nil
				w.failed(ctx)
				continue
			}
		}
		_, _, ch, err := cl.Conn().ExistsW(path)
		if err != nil {
			w.failed(ctx)
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		info, err := logroom.ReadEpoch(rctx, cl, logroom.DefaultBase, room)
		cancel()
		if err != nil && !errors.Is(err, logroom.ErrNoRoom) {
			w.failed(ctx)
			continue
		}
		if err == nil {
			path = info.Path // a re-seeded room names its epoch znode anew
			w.mu.Lock()
			w.rep.Reads++
			if info.Epoch != 0 {
				w.rep.Owners[info.Epoch] = info.Owner
			}
			w.mu.Unlock()
		}
		select {
		case <-ctx.Done():
		case ev := <-ch:
			if ev.Type == zk.EventNotWatching {
				w.failed(ctx) // the session went: watch again
			}
		case <-time.After(5 * time.Second): // a watch lost with a connection
		}
	}
}

// epochZnode is logroom's epoch znode under a room (its package doc,
// "Znodes").
const epochZnode = "epoch"

func (w *observerWatch) failed(ctx context.Context) {
	w.mu.Lock()
	w.rep.ReadErrors++
	w.mu.Unlock()
	sleep(ctx, 100*time.Millisecond)
}

// stop ends the watch and returns what it saw. Idempotent.
func (w *observerWatch) stop() ObserverReport {
	if w == nil {
		return ObserverReport{}
	}
	w.cancel()
	w.wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	rep := w.rep
	rep.IDs = slices.Clone(rep.IDs)
	rep.Led = slices.Clone(rep.Led)
	rep.Owners = maps.Clone(rep.Owners)
	return rep
}

// AddObservers applies rule 10: no observer led (no status sample in role
// takeover or primary, no epoch the epoch znode names it the owner of),
// each observer really ran as one (its samples say so, and there were
// some), and each holds the same state as the other replicas at the end
// (the applied index and state hash rule 5 expects). Epochs the log holds
// whose owner the watch never read are counted (UnseenEpochs), not
// violations: the status samples still cover them. It needs Check to have
// run (r.Index, and the records' epochs in nodes).
func (r *Report) AddObservers(o ObserverReport, nodes []NodeDump, zk ZKLog) {
	r.Observers = len(o.IDs)
	r.ObserverSamples = o.Samples
	if len(o.IDs) == 0 {
		return
	}
	isObserver := map[string]bool{}
	for _, id := range o.IDs {
		isObserver[id] = true
	}
	bad := func(format string, args ...any) {
		r.ObserverViolations++
		r.violation(format, args...)
	}
	for _, e := range o.Led {
		bad("observer led: %s", e)
	}
	for _, epoch := range slices.Sorted(maps.Keys(o.Owners)) {
		if owner := o.Owners[epoch]; isObserver[owner] {
			bad("observer led: the epoch znode names observer %s the owner of epoch %d", owner, epoch)
		}
	}
	if o.Samples == 0 {
		bad("observers %v: no status sample was answered (nothing proves they never led)", o.IDs)
	}
	if o.NotObserver > 0 {
		bad("observers %v: %d of %d status samples say the node is not an observer", o.IDs, o.NotObserver, o.Samples)
	}
	// The log's epochs whose owner the watch never read.
	epochs := map[uint64]bool{}
	for _, n := range nodes {
		for _, rec := range n.Records {
			epochs[rec.Epoch] = true
		}
	}
	for _, e := range zk.Recorded {
		epochs[e.Epoch] = true
	}
	for e := range epochs {
		if _, ok := o.Owners[e]; !ok {
			r.UnseenEpochs++
		}
	}
	r.EpochOwners = len(o.Owners)
	// The observers' final state against the others'.
	for _, obs := range nodes {
		if !isObserver[obs.ID] {
			continue
		}
		found := false
		for _, n := range nodes {
			if isObserver[n.ID] {
				continue
			}
			found = true
			if obs.Applied != n.Applied || obs.HashIndex != n.HashIndex || obs.Hash != n.Hash || obs.Hash == "" {
				bad("observer state: %s applied %d, hash %.16s at %d; %s applied %d, hash %.16s at %d",
					obs.ID, obs.Applied, obs.Hash, obs.HashIndex, n.ID, n.Applied, n.Hash, n.HashIndex)
				break
			}
		}
		if !found {
			bad("observer state: %s has no other replica to compare with", obs.ID)
		}
	}
}

// observerLine is the run's one line about the observers.
func observerLine(o ObserverReport, rp Report) string {
	if len(o.IDs) == 0 {
		return "observers: none"
	}
	owners := make([]string, 0, len(o.Owners))
	for _, e := range slices.Sorted(maps.Keys(o.Owners)) {
		owners = append(owners, fmt.Sprintf("%d:%s", e, o.Owners[e]))
	}
	verdict := "never led, same final state"
	if rp.ObserverViolations > 0 {
		verdict = fmt.Sprintf("%d violations", rp.ObserverViolations)
	}
	return fmt.Sprintf("observers %s: %s (%d status samples; epoch znode read %d times, %d errors retried; epoch owners %s; %d epochs of the log not read there)",
		strings.Join(o.IDs, ","), verdict, o.Samples, o.Reads, o.ReadErrors, strings.Join(owners, " "), rp.UnseenEpochs)
}

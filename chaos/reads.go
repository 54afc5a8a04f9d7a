package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/roomlog/roomlog/internal/harness/testnode"
)

// Readers and the read check (doc.go, rule 8): a few goroutines read the
// keys the proposers write, through GET /get?barrier=1 on every live
// replica (standbys and the primary alike: the replica has no safe
// barrier-free read on a primary that may be deposed), and record each
// read's invoke and return times. At the end CheckReads checks the reads
// against the write history with porcupine.

// Reader parameters: cheap on purpose (each read costs the node a
// ZooKeeper sync and a few reads of the room).
const (
	readerCount = 2
	readPause   = 40 * time.Millisecond
	readTimeout = time.Second // a barrier read takes ~10 ms; one that hangs is on a cut-off node
	// readCheckTimeout bounds porcupine (all keys together); past it the
	// verdict is "unknown".
	readCheckTimeout = 60 * time.Second
)

// Read is one read by a reader: what was asked, of whom, when, and what
// came back.
type Read struct {
	Reader int
	Node   string
	Key    string
	// Start: just before the request was sent; End: when its answer (or
	// error) arrived.
	Start, End time.Time
	// OK: the node answered. Only then do the fields below mean anything;
	// a read without an answer changed nothing and constrains nothing, so
	// the check leaves it out.
	OK bool
	// Found: the key had a value; Entry is then the EntrySHA of the
	// SetEntry(Key, value) payload that writes that value (a proposal's
	// SHA256 if some proposal wrote it).
	Found bool
	Entry string
	// Index: the applied index the node read at; Barrier: its read point.
	Index, Barrier uint64
	// Role: the node's role as it saw it just before reading.
	Role string
	// Err: why there is no answer (the node's error code, "unreachable",
	// "not_sent"; "other").
	Err string
}

// readers reads while the proposers write.
type readers struct {
	c      *testnode.Cluster
	p      *proposers
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu    sync.Mutex // guards reads
	reads []Read
}

// startReaders starts n readers of the keys p proposes; stop ends them.
func startReaders(ctx context.Context, c *testnode.Cluster, p *proposers, n int) *readers {
	ctx, cancel := context.WithCancel(ctx)
	rs := &readers{c: c, p: p, cancel: cancel}
	for i := range n {
		var seed [16]byte
		_, _ = rand.Read(seed[:])
		rng := mrand.New(mrand.NewPCG(binary.LittleEndian.Uint64(seed[:8]), binary.LittleEndian.Uint64(seed[8:])))
		rs.wg.Add(1)
		go func() { // owner: rs; stop cancels and waits
			defer rs.wg.Done()
			rs.reader(ctx, i, rng)
		}()
	}
	return rs
}

// stop ends the readers and waits for them (a read in flight is cut
// short: it has no answer and is left out of the check). Idempotent.
func (rs *readers) stop() {
	if rs == nil {
		return
	}
	rs.cancel()
	rs.wg.Wait()
}

// history returns a copy of every read so far.
func (rs *readers) history() []Read {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return slices.Clone(rs.reads)
}

func (rs *readers) reader(ctx context.Context, id int, rng *mrand.Rand) {
	for ctx.Err() == nil {
		key, ok := rs.p.pickKey(rng)
		live := rs.c.Live()
		if !ok || len(live) == 0 {
			sleep(ctx, readPause)
			continue
		}
		n := live[rng.IntN(len(live))]
		cl := n.Client()
		if cl == nil {
			sleep(ctx, readPause)
			continue
		}
		rd := Read{Reader: id, Node: n.ID(), Key: key, Start: time.Now()}
		rctx, cancel := context.WithTimeout(ctx, readTimeout)
		res, err := cl.Get(rctx, key, true)
		cancel()
		rd.End = time.Now()
		if err != nil {
			rd.Err = testnode.ErrorCode(err)
		} else {
			rd.OK, rd.Found, rd.Index, rd.Barrier, rd.Role = true, res.Found, res.Index, res.Barrier, res.Role
			if res.Found {
				rd.Entry = entrySHA(key, res.Value)
			}
		}
		if ctx.Err() == nil || rd.OK {
			rs.mu.Lock()
			rs.reads = append(rs.reads, rd)
			rs.mu.Unlock()
		}
		sleep(ctx, readPause)
	}
}

// entrySHA is the EntrySHA of the payload setting key to value ("" if it
// cannot be encoded).
func entrySHA(key string, value []byte) string {
	e, err := testnode.SetEntry(key, value)
	if err != nil {
		return ""
	}
	return testnode.EntrySHA(e)
}

// ReadReport is the verdict of the read check.
type ReadReport struct {
	// Reads: answered reads, checked (Primary of them answered by a node
	// that called itself primary); Failed: reads without an answer (error,
	// timeout), left out; FailedBy counts them by Read.Err.
	Reads, Primary, Failed int
	FailedBy               map[string]int
	// Keys: distinct keys read; Writes: writes of those keys in the
	// checked history (UnknownWrites of them of unknown outcome, may or
	// may not have taken effect).
	Keys, Writes, UnknownWrites int
	// Result: porcupine's verdict ("" before the check ran, which counts
	// as linearizable: nothing was read).
	Result porcupine.CheckResult
	// Illegal: keys whose operations have no linearization; Explanations
	// describe some of them.
	Illegal      int
	Explanations []string
	// Visualization: porcupine's HTML of the illegal keys ("": none
	// written).
	Visualization string
	Took          time.Duration
}

// Linearizable is the verdict for the summary line: true, false or
// unknown (the check timed out).
func (rr ReadReport) Linearizable() string {
	switch rr.Result {
	case porcupine.Illegal:
		return "false"
	case porcupine.Unknown:
		return "unknown"
	default:
		return "true"
	}
}

// ReadCheckOptions tune CheckReads.
type ReadCheckOptions struct {
	// Timeout bounds porcupine (0: readCheckTimeout).
	Timeout time.Duration
	// Dir: where porcupine's visualization of illegal keys is written
	// ("": nowhere).
	Dir string
	// Copies: log indexes the checker found to hold a deduplicated copy
	// of a request (no record anywhere, nothing applied): they do not make
	// the dumps incomplete.
	Copies map[uint64]bool
}

// kvInput is an operation of the model: a write of Key (Value: the
// payload's sha) or a read of it.
type kvInput struct {
	Key   string
	Write bool
	Value string
}

// kvOutput is a read's result: the sha of the payload whose value it
// found ("": the key was absent).
type kvOutput struct {
	Value string
}

// opInfo describes an operation for explanations and the visualization.
type opInfo string

// kvModel is a register per key: a write sets it to the payload's sha, a
// read must return the current one ("" before any write). Partitioned by
// key: a history is linearizable iff every key's is.
var kvModel = porcupine.Model{
	Partition: func(h []porcupine.Operation) [][]porcupine.Operation {
		// In order of first appearance (CheckReads passes keys sorted).
		at := map[string]int{}
		var out [][]porcupine.Operation
		for _, op := range h {
			k := op.Input.(kvInput).Key
			i, ok := at[k]
			if !ok {
				i = len(out)
				at[k] = i
				out = append(out, nil)
			}
			out[i] = append(out[i], op)
		}
		return out
	},
	Init: func() any { return "" },
	Step: func(state, input, output any) (bool, any) {
		in := input.(kvInput)
		if in.Write {
			return true, in.Value
		}
		return output.(kvOutput).Value == state.(string), state
	},
	DescribeOperation: func(input, output any) string {
		in := input.(kvInput)
		if in.Write {
			return fmt.Sprintf("set(%s, %s)", in.Key, short(in.Value))
		}
		return fmt.Sprintf("get(%s) -> %s", in.Key, short(output.(kvOutput).Value))
	},
	DescribeState: func(state any) string { return short(state.(string)) },
}

func short(sha string) string {
	if sha == "" {
		return "absent"
	}
	return sha[:min(len(sha), 8)]
}

// CheckReads checks the answered reads against the write history with
// porcupine: every read's result must be explained by one order of all
// writes and reads that respects real time (an operation that returned
// before another was invoked comes first).
//
// The writes: every proposal acknowledged or committed, from its Start to
// its End; every proposal of unknown outcome from its Start to the end of
// time (porcupine may place it anywhere after its start, including after
// every read: "may or may not have happened" — it never constrains a read
// that did not see it). When nodes (the final dumps) hold a record of every
// index but the deduplicated copies (opts.Copies), an unknown-outcome
// proposal whose payload is in no replica's log never took effect and is
// left out, as is every definitely failed one: a read that saw its value
// read something that was never committed. Only
// keys that were read are checked.
func CheckReads(props []testnode.Proposal, reads []Read, nodes []NodeDump, opts ReadCheckOptions) ReadReport {
	start := time.Now()
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = readCheckTimeout
	}
	var rr ReadReport
	inLog := loggedPayloads(nodes, opts.Copies)

	// Operations by key: the answered reads, then the writes of those keys.
	type op struct {
		in      kvInput
		out     kvOutput
		call    time.Time
		ret     time.Time // zero: never returned (unknown outcome)
		info    opInfo
		failed  bool // a write that is left out (failed, or not in the log)
		isWrite bool
	}
	byKey := map[string][]op{}
	for _, rd := range reads {
		if !rd.OK {
			rr.Failed++
			if rr.FailedBy == nil {
				rr.FailedBy = map[string]int{}
			}
			rr.FailedBy[rd.Err]++
			continue
		}
		rr.Reads++
		if rd.Role == testnode.RolePrimary {
			rr.Primary++
		}
		val := ""
		if rd.Found {
			val = rd.Entry
			if val == "" {
				val = "?" // a value that no payload encodes
			}
		}
		byKey[rd.Key] = append(byKey[rd.Key], op{
			in: kvInput{Key: rd.Key}, out: kvOutput{Value: val}, call: rd.Start, ret: rd.End,
			info: opInfo(fmt.Sprintf("read on %s (%s, barrier %d, read at index %d) [%s, %s] -> %s",
				rd.Node, rd.Role, rd.Barrier, rd.Index, wall(rd.Start), wall(rd.End), short(val))),
		})
	}
	rr.Keys = len(byKey)
	for _, p := range props {
		ops, ok := byKey[p.Key]
		if !ok {
			continue
		}
		o := op{in: kvInput{Key: p.Key, Write: true, Value: p.SHA256}, call: p.Start, isWrite: true}
		switch p.Outcome {
		case testnode.OutcomeAcked, testnode.OutcomeCommitted:
			o.ret = p.End
			o.info = opInfo(fmt.Sprintf("write %s %s at index %d by %s [%s, %s]", short(p.SHA256), p.Outcome, p.Index, p.Node, wall(p.Start), wall(p.End)))
		case testnode.OutcomeUnknown:
			if inLog != nil && !inLog[p.SHA256] {
				o.failed = true
				o.info = opInfo(fmt.Sprintf("write %s of unknown outcome by %s [%s, …), in no replica's log: left out (%s)", short(p.SHA256), p.Node, wall(p.Start), p.Err))
			} else {
				o.info = opInfo(fmt.Sprintf("write %s of unknown outcome by %s [%s, ∞) (%s)", short(p.SHA256), p.Node, wall(p.Start), p.Err))
			}
		default:
			o.failed = true
			o.info = opInfo(fmt.Sprintf("write %s failed definitely by %s [%s, %s]: left out (%s)", short(p.SHA256), p.Node, wall(p.Start), wall(p.End), p.Err))
		}
		byKey[p.Key] = append(ops, o)
	}

	// To porcupine's times: nanoseconds since the earliest call (monotonic
	// clock readings when the times carry them); "never returned" is after
	// everything else.
	var t0, tEnd time.Time
	for _, ops := range byKey {
		for _, o := range ops {
			if !o.failed {
				if t0.IsZero() || o.call.Before(t0) {
					t0 = o.call
				}
				if o.ret.After(tEnd) {
					tEnd = o.ret
				}
			}
		}
	}
	inf := tEnd.Sub(t0).Nanoseconds() + 1
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	porc := make(map[string][]porcupine.Operation, len(keys))
	notes := map[string][]opInfo{} // every operation of a key, left-out writes included
	for _, k := range keys {
		ops := byKey[k]
		slices.SortStableFunc(ops, func(a, b op) int { return a.call.Compare(b.call) })
		for _, o := range ops {
			notes[k] = append(notes[k], o.info)
			if o.failed {
				continue
			}
			ret := inf
			if !o.ret.IsZero() {
				ret = o.ret.Sub(t0).Nanoseconds()
			}
			if o.isWrite {
				rr.Writes++
				if o.ret.IsZero() {
					rr.UnknownWrites++
				}
			}
			porc[k] = append(porc[k], porcupine.Operation{
				ClientId: len(porc[k]), Input: o.in, Output: o.out,
				Call: o.call.Sub(t0).Nanoseconds(), Return: ret, Metadata: o.info,
			})
		}
	}

	// Check in chunks of keys (porcupine runs a goroutine per partition),
	// all under one deadline.
	deadline := start.Add(timeout)
	var illegal []string
	sawIllegal := false
	rr.Result = porcupine.Ok
	const chunk = 2000
	for lo := 0; lo < len(keys); lo += chunk {
		left := time.Until(deadline)
		if left <= 0 {
			rr.Result = porcupine.Unknown
			break
		}
		part := keys[lo:min(lo+chunk, len(keys))]
		var hist []porcupine.Operation
		for _, k := range part {
			hist = append(hist, porc[k]...)
		}
		res, info := porcupine.CheckOperationsVerbose(kvModel, hist, left)
		switch res {
		case porcupine.Unknown:
			rr.Result = porcupine.Unknown
		case porcupine.Illegal:
			sawIllegal = true
			// A partition without a complete linearization is a suspect;
			// recheck it alone (it may merely have been cut by the
			// timeout).
			partials := info.PartialLinearizations()
			for i, k := range part {
				if i < len(partials) && longest(partials[i]) >= len(porc[k]) {
					continue
				}
				if len(illegal) > 0 && time.Now().After(deadline) {
					break // the verdict stands; enough time spent naming keys
				}
				kres := porcupine.CheckOperationsTimeout(kvModel, porc[k], max(time.Until(deadline), time.Second))
				if kres == porcupine.Illegal {
					illegal = append(illegal, k)
				}
			}
		}
	}
	if sawIllegal {
		rr.Result = porcupine.Illegal
		rr.Illegal = max(len(illegal), 1) // 0 named: every recheck ran out of time
	}
	for _, k := range illegal[:min(len(illegal), 5)] {
		rr.Explanations = append(rr.Explanations, explain(k, porc[k], notes[k], props))
	}
	if len(illegal) > 0 && opts.Dir != "" {
		var hist []porcupine.Operation
		for _, k := range illegal[:min(len(illegal), 10)] {
			hist = append(hist, porc[k]...)
		}
		_, info := porcupine.CheckOperationsVerbose(kvModel, hist, 10*time.Second)
		path := filepath.Join(opts.Dir, "reads-linearizability.html")
		if err := porcupine.VisualizePath(kvModel, info, path); err == nil {
			rr.Visualization = path
		}
	}
	rr.Took = time.Since(start)
	return rr
}

// exactCheck compares every answered read with the log itself: a node
// that read at applied index A holds exactly the log's first A entries, so
// the key must be found, with its write's value, iff the log writes it at
// an index <= A, and A must not be below the read's barrier. Porcupine
// cannot see this for a write of unknown outcome that is in the log (it may
// place such a write after any read that missed it); this check can. It
// needs complete dumps (every index held by some replica, or a
// deduplicated copy: copies). The run's final verdict applies it after
// CheckReads (checkReads).
func exactCheck(rr *ReadReport, props []testnode.Proposal, reads []Read, nodes []NodeDump, copies map[uint64]bool) {
	at := map[string]uint64{} // entry SHA -> its index in the log
	var top uint64
	for _, n := range nodes {
		top = max(top, n.Applied)
		for _, rec := range n.Records {
			at[rec.SHA256] = rec.Index
		}
	}
	if uint64(len(at)+len(copies)) < top {
		return // incomplete dumps: nothing exact to say
	}
	type write struct {
		index uint64
		sha   string
	}
	byKey := map[string]write{}
	for _, p := range props {
		if i, ok := at[p.SHA256]; ok {
			byKey[p.Key] = write{i, p.SHA256}
		}
	}
	for _, rd := range reads {
		if !rd.OK || rd.Index == 0 {
			continue
		}
		w, written := byKey[rd.Key]
		want := written && w.index <= rd.Index
		bad := ""
		switch {
		case rd.Index < rd.Barrier:
			bad = fmt.Sprintf("read at applied index %d below its barrier %d", rd.Index, rd.Barrier)
		case rd.Found != want && want:
			bad = fmt.Sprintf("not found at applied index %d, but the log writes it at index %d", rd.Index, w.index)
		case rd.Found != want:
			bad = fmt.Sprintf("found at applied index %d, but the log does not write it by then", rd.Index)
		case rd.Found && rd.Entry != w.sha:
			bad = fmt.Sprintf("read another value (%s) than the log's write at index %d (%s)", short(rd.Entry), w.index, short(w.sha))
		}
		if bad == "" {
			continue
		}
		rr.Illegal++
		if rr.Result != porcupine.Illegal {
			rr.Result = porcupine.Illegal
		}
		if len(rr.Explanations) < 10 {
			rr.Explanations = append(rr.Explanations, fmt.Sprintf("read of key %q on %s (%s, %s..%s): %s",
				rd.Key, rd.Node, rd.Role, rd.Start.UTC().Format("15:04:05.000"), rd.End.UTC().Format("15:04:05.000"), bad))
		}
	}
}

// longest is the length of the longest partial linearization.
func longest(ls [][]int) int {
	n := 0
	for _, l := range ls {
		n = max(n, len(l))
	}
	return n
}

// loggedPayloads returns the payloads (sha) in some replica's records, or
// nil when the records (and the deduplicated copies, which apply nothing)
// do not cover every index from 1 to the highest applied one (then nobody
// can tell a payload that is nowhere).
func loggedPayloads(nodes []NodeDump, copies map[uint64]bool) map[string]bool {
	var top uint64
	held := map[uint64]bool{}
	out := map[string]bool{}
	for _, n := range nodes {
		top = max(top, n.Applied)
		for _, rec := range n.Records {
			held[rec.Index] = true
			out[rec.SHA256] = true
		}
	}
	if len(nodes) == 0 {
		return nil
	}
	for i := uint64(1); i <= top; i++ {
		if !held[i] && !copies[i] {
			return nil
		}
	}
	return out
}

// explain describes, on one line, why key's operations have no
// linearization: the first read that contradicts the writes, when one
// alone does, and every operation of the key (at most 8).
func explain(key string, ops []porcupine.Operation, notes []opInfo, props []testnode.Proposal) string {
	why := "no order of these operations that respects real time explains every read (e.g. a later read saw less than an earlier one)"
	written := map[string]bool{}
	for _, o := range ops {
		if in := o.Input.(kvInput); in.Write {
			written[in.Value] = true
		}
	}
reads:
	for _, o := range ops {
		in := o.Input.(kvInput)
		if in.Write {
			continue
		}
		got := o.Output.(kvOutput).Value
		if got != "" && !written[got] {
			why = fmt.Sprintf("%s: it returned %s, which no write in the history wrote", o.Metadata, short(got))
			for _, p := range props {
				if p.SHA256 == got {
					why += fmt.Sprintf(" (proposal %s: %s, %s)", p.Key, p.Outcome, p.Err)
					break
				}
			}
			break
		}
		// A read that began after every write of the key had returned
		// must see the last of them, when one write was invoked after all
		// the others had returned.
		var last *porcupine.Operation
		for i := range ops {
			w := &ops[i]
			if !w.Input.(kvInput).Write {
				continue
			}
			if w.Return >= o.Call {
				continue reads // a write still open: no simple verdict
			}
			if last == nil || w.Call > last.Call {
				last = w
			}
		}
		for i := range ops {
			w := &ops[i]
			if last != nil && w != last && w.Input.(kvInput).Write && w.Return >= last.Call {
				continue reads // two overlapping writes: either may be last
			}
		}
		if last != nil && last.Input.(kvInput).Value != got {
			why = fmt.Sprintf("stale read: %s, although %s had returned before the read began", o.Metadata, last.Metadata)
			break
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "not linearizable: key %s: %s; its operations: ", key, why)
	for i, n := range notes {
		if i == 8 {
			fmt.Fprintf(&b, " | …(%d more)", len(notes)-8)
			break
		}
		if i > 0 {
			b.WriteString(" | ")
		}
		b.WriteString(string(n))
	}
	return b.String()
}

// checkReads runs the read check of the final verdict: r.reads' history
// against the proposals and the final dumps; a visualization goes into
// the run's work dir (the parent of the node dirs' parent, see Run).
func (r *runner) checkReads(nodes []NodeDump) {
	if r.reads == nil {
		return
	}
	r.reads.stop()
	dir := ""
	if ns := r.c.Nodes(); len(ns) > 0 {
		dir = filepath.Dir(filepath.Dir(ns[0].Options().Dir))
	}
	props, reads := r.h.Proposals(), r.reads.history()
	copies := r.res.Report.copies
	rr := CheckReads(props, reads, nodes, ReadCheckOptions{Dir: dir, Copies: copies})
	exactCheck(&rr, props, reads, nodes, copies)
	r.res.Report.AddReads(rr)
	what := fmt.Sprintf("reads: %d answered (%d by a primary), %d without an answer %v, %d keys, %d writes of them (%d of unknown outcome); linearizable=%s (porcupine, %v)",
		rr.Reads, rr.Primary, rr.Failed, rr.FailedBy, rr.Keys, rr.Writes, rr.UnknownWrites, rr.Linearizable(), rr.Took.Round(time.Millisecond))
	if rr.Illegal > 0 {
		what += fmt.Sprintf("; %d keys not linearizable", rr.Illegal)
	}
	if rr.Visualization != "" {
		what += "; visualization: " + rr.Visualization
	}
	r.out.f("%s", what)
}

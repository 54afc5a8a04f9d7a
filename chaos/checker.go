package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/roomlog/roomlog/internal/harness/testnode"
)

// maxViolations bounds the violations a Report lists (its counters are
// complete).
const maxViolations = 60

// NodeDump is what the checker knows of one replica at the end of a run.
type NodeDump struct {
	ID string
	// Applied is the replica's applied index; Records its /dump (every
	// record its state holds, ascending).
	Applied uint64
	Records []testnode.Record
	// Hash and HashIndex: its StateHash and the index it was taken at.
	Hash      string
	HashIndex uint64
	// Bootstrapped: the replica restored a checkpoint during the run. Only
	// such a replica may lack a prefix of the records (see doc.go, rule 1).
	Bootstrapped bool
}

// LogEntry is one entry read back from ZooKeeper, its request envelope
// decoded: SHA256 and Size are the payload's (what a Record holds),
// RequestID the envelope's id ("" for a plain entry).
type LogEntry = testnode.LogEntry

// ZKLog is the log as ZooKeeper holds it at the end of a run: entries
// First..End (End: the committed end), or nothing when Read is false; and
// what a testnode.LogRecorder read of it while the run went on.
type ZKLog struct {
	Read       bool
	First, End uint64
	Entries    []LogEntry
	// OldestChannel is the number of the oldest channel left (channels
	// are numbered from 1 and deleted oldest first).
	OldestChannel uint64
	// Recorded: the entries the recorder read during the run, including
	// those whose channels were deleted later; Skipped: index ranges
	// (inclusive) it missed because their channel was deleted first.
	Recorded []LogEntry
	Skipped  [][2]uint64
}

// Report is the checker's verdict.
type Report struct {
	Proposals int
	// Acked: proposals acknowledged with an index (Committed of them
	// without a response: committed at a known index, nothing more).
	Acked, Committed int
	// Unknown: outcome unknown; UnknownApplied of them are in the log.
	Unknown, UnknownApplied int
	// Failed: definitely not committed.
	Failed int
	// Index: the highest applied index of any replica; Epochs: distinct
	// epochs in the log.
	Index  uint64
	Epochs int
	// Partial: replicas whose records start above index 1 (allowed only
	// after a checkpoint restore, rule 1).
	Partial int

	// Request ids (rule 9). Retried: proposals sent more than once; Dedup:
	// final answers that were Duplicate (the id had been applied by an
	// earlier attempt); MetUnknown: proposals with at least one attempt of
	// unknown outcome; ResolvedByRetry: those of them a later attempt
	// acknowledged or showed committed (the rest are in Unknown). Counts,
	// not violations.
	Retried, Dedup, MetUnknown, ResolvedByRetry int
	// DedupCopies: log indexes without a record on any replica that the
	// log shows holding a copy of a request applied at an earlier index
	// (the replicas skipped it). Not a violation.
	DedupCopies int
	// copies are those indexes (for the read checks).
	copies map[uint64]bool

	// Violations, by rule (doc.go).
	Lost             int // acknowledged, yet missing at its index on some replica
	Duplicated       int // a payload at two indexes, or an index applied twice
	Divergent        int // an index whose entry differs between replicas
	EpochRegressions int // an index of an older epoch after a newer one
	Gaps             int // an index missing where it must be present
	Phantom          int // definitely failed, yet in the log
	Foreign          int // an entry in the log that nobody proposed
	HashMismatch     int // replicas whose final state differs
	ZKMismatch       int // ZooKeeper's log and the replicas disagree
	IDsTwice         int // a request id applied at more than one index
	AckedIDsNotOnce  int // an acknowledged proposal's id not applied exactly once at its index

	// Reads: the linearizability check of the reads (reads.go, AddReads);
	// each key whose reads and writes have no linearization is a
	// violation.
	Reads ReadReport

	// Observers (rule 10, observer.go, AddObservers): how many ran, the
	// status samples taken of them, and the violations: an observer that
	// led, one that did not run as an observer, one whose final state
	// differs from the others'. EpochOwners: epochs whose owner the
	// epoch znode showed; UnseenEpochs: epochs of the log it did not show
	// (counts, not violations).
	Observers, ObserverSamples int
	ObserverViolations         int
	EpochOwners, UnseenEpochs  int

	Violations []string
}

func (r *Report) violation(format string, args ...any) {
	if len(r.Violations) < maxViolations {
		r.Violations = append(r.Violations, fmt.Sprintf(format, args...))
	}
}

// Total is the number of violations found.
func (r Report) Total() int {
	return r.Lost + r.Duplicated + r.Divergent + r.EpochRegressions + r.Gaps +
		r.Phantom + r.Foreign + r.HashMismatch + r.ZKMismatch + r.IDsTwice + r.AckedIDsNotOnce +
		r.Reads.Illegal + r.ObserverViolations
}

// AddReads records the verdict of CheckReads: its explanations become
// violations, and each key found not linearizable counts in Total. An
// unknown verdict (the check timed out) is no violation.
func (r *Report) AddReads(rr ReadReport) {
	r.Reads = rr
	for _, e := range rr.Explanations {
		r.violation("%s", e)
	}
}

// OK reports whether no violation was found.
func (r Report) OK() bool { return r.Total() == 0 }

// Check verifies the proposals' outcomes against the replicas' dumps and
// ZooKeeper's log, by the rules of doc.go. It needs the replicas to have
// converged and the proposers to have stopped (every outcome final).
func Check(props []testnode.Proposal, nodes []NodeDump, zk ZKLog) Report {
	var r Report
	nodes = slices.Clone(nodes)
	slices.SortFunc(nodes, func(a, b NodeDump) int { return strings.Compare(a.ID, b.ID) })
	for i := range nodes {
		nodes[i].Records = slices.Clone(nodes[i].Records)
		slices.SortStableFunc(nodes[i].Records, func(a, b testnode.Record) int {
			return cmpU64(a.Index, b.Index)
		})
		r.Index = max(r.Index, nodes[i].Applied)
	}

	// The log as read back (the recorder's part and the final read), and
	// where the records show each request id applied: an index without a
	// record is no gap when the log shows a deduplicated copy there.
	log := mergeLog(&r, zk)
	ri := testnode.NewRequestIndex(log)
	for _, n := range nodes {
		ri.AddRecords(n.Records)
	}

	// Rule 1: each replica's own records.
	holds := make([]map[uint64]testnode.Record, len(nodes))
	regressed := map[uint64]bool{}
	for i, n := range nodes {
		holds[i] = checkNode(&r, n, regressed, ri)
	}

	// Rules 2 and 3: agreement between replicas and coverage.
	ref := map[uint64]testnode.Record{}
	refNode := map[uint64]string{}
	shaAt := map[string][]uint64{} // payload -> the indexes any replica holds it at
	for i, n := range nodes {
		for idx, rec := range holds[i] {
			o, ok := ref[idx]
			if !ok {
				ref[idx], refNode[idx] = rec, n.ID
				continue
			}
			if o.SHA256 != rec.SHA256 || o.Epoch != rec.Epoch || o.Size != rec.Size || o.RequestID != rec.RequestID {
				r.Divergent++
				r.violation("divergent: index %d is (epoch %d, sha %.12s, request %q) on %s but (epoch %d, sha %.12s, request %q) on %s",
					idx, o.Epoch, o.SHA256, o.RequestID, refNode[idx], rec.Epoch, rec.SHA256, rec.RequestID, n.ID)
			}
		}
	}
	for idx, rec := range ref {
		shaAt[rec.SHA256] = append(shaAt[rec.SHA256], idx)
	}
	for i := range nodes {
		for idx, rec := range holds[i] {
			if o := ref[idx]; o.SHA256 != rec.SHA256 && !slices.Contains(shaAt[rec.SHA256], idx) {
				shaAt[rec.SHA256] = append(shaAt[rec.SHA256], idx)
			}
		}
	}
	for _, at := range shaAt {
		slices.Sort(at)
	}
	var uncovered []uint64
	for idx := uint64(1); idx <= r.Index; idx++ {
		if _, ok := ref[idx]; !ok && !ri.IsCopy(idx) {
			uncovered = append(uncovered, idx)
		}
	}
	if len(uncovered) > 0 {
		r.Gaps += len(uncovered)
		r.violation("gap: %d indexes held by no replica: %s", len(uncovered), ri.Explain(uncovered))
	}
	r.copies = map[uint64]bool{}
	for _, idx := range ri.Copies() {
		r.copies[idx] = true
	}
	r.DedupCopies = len(r.copies)

	// Rule 4: epochs never decrease along the log (the merged view catches
	// a regression between the parts different replicas hold).
	epochs := map[uint64]bool{}
	var prev testnode.Record
	for idx := uint64(1); idx <= r.Index; idx++ {
		rec, ok := ref[idx]
		if !ok {
			continue
		}
		epochs[rec.Epoch] = true
		if prev.Index != 0 && rec.Epoch < prev.Epoch && !regressed[idx] {
			regressed[idx] = true
			r.violation("epoch regression: index %d has epoch %d after index %d of epoch %d", idx, rec.Epoch, prev.Index, prev.Epoch)
		}
		if rec.Epoch >= prev.Epoch {
			prev = rec
		}
	}
	r.Epochs = len(epochs)
	r.EpochRegressions = len(regressed)

	// Rule 5: final state.
	checkHashes(&r, nodes)

	// Rule 9a: every request id applied at most once (on each replica and
	// over all of them).
	twice := ri.AppliedTwice()
	for _, id := range slices.Sorted(maps.Keys(twice)) {
		r.IDsTwice++
		r.violation("request applied twice: id %s is at indexes %v", id, twice[id])
	}

	// Rules 6 and 9b: every proposal against the log (the counts and the
	// exactly-once rule are testnode.Tally's, shared with the harness).
	known := map[string]bool{}
	var tally testnode.Tally
	for _, p := range props {
		known[p.SHA256] = true
		at := shaAt[p.SHA256]
		v := tally.Add(p, at, ri)
		switch {
		case v.Committed:
			if v.NotOnce {
				r.violation("not exactly once: %s (%s at %d%s, answered %s by %s after %d attempts, request %s): %s",
					p.Key, p.Outcome, p.Index, dupNote(p), wall(p.End), p.Node, p.Attempts, p.RequestID, v.Why)
			}
			checkAcked(&r, p, v.Index, nodes, holds)
			if slices.ContainsFunc(at, func(i uint64) bool { return i != v.Index }) {
				r.Duplicated++
				r.violation("duplicated: %s (%s at %d, answered %s by %s) is at indexes %v", p.Key, p.Outcome, p.Index, wall(p.End), p.Node, at)
			}
		case p.Outcome == testnode.OutcomeUnknown:
			if len(at) > 1 {
				r.Duplicated++
				r.violation("duplicated: %s (outcome unknown, answered %s by %s: %s) is at indexes %v", p.Key, wall(p.End), p.Node, p.Err, at)
			}
		case v.Phantom:
			r.violation("phantom: %s failed definitely (answered %s: %s) yet is at indexes %v", p.Key, wall(p.End), p.Err, at)
		}
	}
	r.Proposals = len(props)
	r.Acked, r.Committed = tally.Acked+tally.Committed, tally.Committed
	r.Unknown, r.UnknownApplied, r.Failed, r.Phantom = tally.Unknown, tally.UnknownApplied, tally.NotCommitted, tally.Phantom
	r.Retried, r.Dedup, r.MetUnknown, r.ResolvedByRetry = tally.Retried, tally.DedupAcks, tally.MetUnknown, tally.ResolvedByRetry
	r.AckedIDsNotOnce = tally.AckedIDsNotOnce
	for sha, at := range shaAt {
		if !known[sha] {
			r.Foreign += len(at)
			r.violation("foreign: entry %.12s at indexes %v was never proposed", sha, at)
		}
	}

	checkZK(&r, zk, log, ref)
	return r
}

func dupNote(p testnode.Proposal) string {
	if p.Duplicate {
		return ", duplicate"
	}
	return ""
}

// mergeLog returns the entries of the log read back: the recorder's and
// the final read's, one per index. Two reads of one index that disagree
// are a ZooKeeper mismatch (rule 7).
func mergeLog(r *Report, zk ZKLog) []LogEntry {
	at := make(map[uint64]LogEntry, len(zk.Recorded)+len(zk.Entries))
	for _, e := range zk.Recorded {
		at[e.Index] = e
	}
	for _, e := range zk.Entries {
		if o, ok := at[e.Index]; ok && o != e {
			r.ZKMismatch++
			r.violation("zookeeper: index %d read as (epoch %d, sha %.12s, request %q) during the run but (epoch %d, sha %.12s, request %q) at the end",
				e.Index, o.Epoch, o.SHA256, o.RequestID, e.Epoch, e.SHA256, e.RequestID)
		}
		at[e.Index] = e
	}
	out := make([]LogEntry, 0, len(at))
	for _, e := range at {
		out = append(out, e)
	}
	slices.SortFunc(out, func(a, b LogEntry) int { return cmpU64(a.Index, b.Index) })
	return out
}

// checkNode applies rule 1 to one replica and returns the records it holds
// by index. Missing indexes that ri shows to be deduplicated copies are no
// gaps.
func checkNode(r *Report, n NodeDump, regressed map[uint64]bool, ri *testnode.RequestIndex) map[uint64]testnode.Record {
	held := make(map[uint64]testnode.Record, len(n.Records))
	gaps := func(from, to uint64, format string, args ...any) {
		var missing []uint64
		for i := from; i <= to; i++ {
			if !ri.IsCopy(i) {
				missing = append(missing, i)
			}
		}
		if len(missing) > 0 {
			r.Gaps += len(missing)
			r.violation("gap: "+format+" %s", append(args, ri.Explain(missing))...)
		}
	}
	var next, prevEpoch uint64
	for _, rec := range n.Records {
		if rec.Index == 0 || rec.Index > n.Applied {
			r.Gaps++
			r.violation("gap: %s holds a record of index %d beyond its applied index %d", n.ID, rec.Index, n.Applied)
			continue
		}
		if _, dup := held[rec.Index]; dup {
			r.Duplicated++
			r.violation("duplicated: %s lists index %d twice", n.ID, rec.Index)
			continue
		}
		if next == 0 && rec.Index > 1 && n.Bootstrapped {
			r.Partial++
		}
		switch {
		case next == 0 && rec.Index > 1 && !n.Bootstrapped:
			gaps(1, rec.Index-1, "%s (never bootstrapped) has no record of", n.ID)
		case next != 0 && rec.Index > next:
			gaps(next, rec.Index-1, "%s has no record of", n.ID)
		}
		next = rec.Index + 1
		held[rec.Index] = rec
		if rec.Count != 1 {
			r.Duplicated++
			r.violation("duplicated: %s applied index %d %d times", n.ID, rec.Index, rec.Count)
		}
		if rec.Epoch < prevEpoch && !regressed[rec.Index] {
			regressed[rec.Index] = true
			r.violation("epoch regression: %s has index %d of epoch %d after epoch %d", n.ID, rec.Index, rec.Epoch, prevEpoch)
		}
		prevEpoch = max(prevEpoch, rec.Epoch)
	}
	switch {
	case next == 0 && n.Applied > 0:
		gaps(1, n.Applied, "%s applied %d but holds no record of", n.ID, n.Applied)
	case next != 0 && next <= n.Applied:
		gaps(next, n.Applied, "%s applied %d but its records end at %d; no record of", n.ID, n.Applied, next-1)
	}
	return held
}

// checkHashes applies rule 5: every replica applied the same index and
// reports the same StateHash at it.
func checkHashes(r *Report, nodes []NodeDump) {
	if len(nodes) == 0 {
		return
	}
	// The reference is the hash most replicas report at the top index.
	votes := map[string]int{}
	for _, n := range nodes {
		if n.HashIndex == r.Index && n.Applied == r.Index {
			votes[n.Hash]++
		}
	}
	var want string
	for h, v := range votes {
		if v > votes[want] || (v == votes[want] && h < want) {
			want = h
		}
	}
	for _, n := range nodes {
		if n.Applied != r.Index || n.HashIndex != r.Index || n.Hash != want || want == "" {
			r.HashMismatch++
			r.violation("state: %s applied %d, hash %.16s at %d; expected hash %.16s at %d",
				n.ID, n.Applied, n.Hash, n.HashIndex, want, r.Index)
		}
	}
}

// checkAcked applies rule 6 to an acknowledged proposal: at its index
// (index: the one answered, or for an answer naming a deduplicated copy
// the request's application) on every replica that holds the index, every
// replica applied that far, and at least one replica holds it.
func checkAcked(r *Report, p testnode.Proposal, index uint64, nodes []NodeDump, holds []map[uint64]testnode.Record) {
	var why []string
	found := false
	for i, n := range nodes {
		if n.Applied < index {
			why = append(why, fmt.Sprintf("%s applied only %d", n.ID, n.Applied))
			continue
		}
		rec, ok := holds[i][index]
		if !ok {
			continue // below a bootstrapped replica's records: rule 1 and the coverage rule judge it
		}
		if rec.SHA256 != p.SHA256 {
			why = append(why, fmt.Sprintf("%s has %.12s there", n.ID, rec.SHA256))
			continue
		}
		found = true
	}
	if !found {
		why = append(why, "no replica holds it")
	}
	if len(why) > 0 {
		r.Lost++
		at := fmt.Sprint(p.Index)
		if index != p.Index {
			at = fmt.Sprintf("%d, a copy of %d", p.Index, index)
		}
		r.violation("lost: %s (%s at %s by %s, answered %s, sha %.12s): %s", p.Key, p.Outcome, at, p.Node, wall(p.End), p.SHA256, strings.Join(why, "; "))
	}
}

// checkZK applies rule 7: the log read back from ZooKeeper (log: what the
// recorder read during the run and what ZooKeeper still holds) agrees with
// the replicas, and they applied its whole committed log.
func checkZK(r *Report, zk ZKLog, log []LogEntry, ref map[uint64]testnode.Record) {
	if zk.Read && zk.End != r.Index {
		r.ZKMismatch++
		r.violation("zookeeper: the committed log ends at %d, the replicas applied %d", zk.End, r.Index)
	}
	for _, e := range log {
		rec, ok := ref[e.Index]
		if !ok {
			if e.Index <= r.Index {
				continue // a deduplicated copy or a gap, counted already
			}
			r.ZKMismatch++
			r.violation("zookeeper: index %d (epoch %d, sha %.12s) is in the log but no replica applied it", e.Index, e.Epoch, e.SHA256)
			continue
		}
		if rec.Epoch != e.Epoch || rec.SHA256 != e.SHA256 || rec.RequestID != e.RequestID {
			r.ZKMismatch++
			r.violation("zookeeper: index %d is (epoch %d, sha %.12s, request %q) in ZooKeeper but (epoch %d, sha %.12s, request %q) on the replicas",
				e.Index, e.Epoch, e.SHA256, e.RequestID, rec.Epoch, rec.SHA256, rec.RequestID)
		}
	}
}

// wall formats t as the node logs do (UTC), to find it there.
func wall(t time.Time) string {
	if t.IsZero() {
		return "?"
	}
	return t.UTC().Format("15:04:05.000Z")
}

func cmpU64(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

package testnode

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// maxProblems bounds the problems a CheckResult lists (the counts are
// complete).
const maxProblems = 30

// ErrCheck: the checker found a violation (CheckResult.Err).
var ErrCheck = errors.New("testnode: history check failed")

// CheckResult is the verdict of Check over a History and the nodes' dumps.
type CheckResult struct {
	// Tally: proposals by outcome, request-id counts, and the violations
	// AckedIDsNotOnce and Phantom.
	Tally
	// Lost: acknowledged or committed proposals not found at their index on
	// some node.
	Lost int
	// Duplicated: proposals found at more than one index, plus indexes a
	// node applied more than once (Record.Count > 1).
	Duplicated int
	// Divergent: indexes where nodes hold different entries.
	Divergent int
	// EpochRegressions: indexes whose epoch is lower than an earlier index's
	// (a deposed primary's write landing after a newer epoch's).
	EpochRegressions int
	// Gaps: indexes missing from a node's records below its applied index,
	// other than deduplicated copies (DedupCopies).
	Gaps int

	// Request ids (proposals sent with ProposeRequest).
	//
	// DedupCopies: indexes without a record that the log shows to hold a
	// copy (same request id, same payload) of a request applied at an
	// earlier index: the store skipped them. Not a violation.
	DedupCopies int
	// IDsTwice: request ids applied (recorded) at more than one index.
	IDsTwice int
	// Problems describes the first violations.
	Problems []string
}

func (r *CheckResult) problem(format string, args ...any) {
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// Violations is the number of violations found.
func (r CheckResult) Violations() int {
	return r.Lost + r.Duplicated + r.Divergent + r.EpochRegressions + r.Gaps + r.Phantom +
		r.IDsTwice + r.AckedIDsNotOnce
}

// Err returns nil when no violation was found, else an error wrapping
// ErrCheck that lists the problems.
func (r CheckResult) Err() error {
	if r.Violations() == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s\n  %s", ErrCheck, r.Summary(), strings.Join(r.Problems, "\n  "))
}

// Summary is a one-line account of the result.
func (r CheckResult) Summary() string {
	return fmt.Sprintf("acked=%d committed=%d unknown=%d (applied %d) not_committed=%d lost=%d duplicated=%d divergent=%d epoch_regressions=%d gaps=%d phantom=%d"+
		" ids_applied_twice=%d acked_ids_not_once=%d dedup_copies=%d retried=%d dedup=%d unknown_resolved_by_retry=%d",
		r.Acked, r.Committed, r.Unknown, r.UnknownApplied, r.NotCommitted, r.Lost, r.Duplicated, r.Divergent, r.EpochRegressions, r.Gaps, r.Phantom,
		r.IDsTwice, r.AckedIDsNotOnce, r.DedupCopies, r.Retried, r.DedupAcks, r.ResolvedByRetry)
}

// Dumps fetches the full dump of every node given.
func Dumps(ctx context.Context, nodes []*Node) (map[string]DumpResponse, error) {
	out := make(map[string]DumpResponse, len(nodes))
	for _, n := range nodes {
		d, err := n.Dump(ctx, 1, ^uint64(0))
		if err != nil {
			return nil, fmt.Errorf("dump %s: %w", n.ID(), err)
		}
		out[n.ID()] = d
	}
	return out, nil
}

// Check fetches every node's dump and checks h against them (CheckDumps).
// Call it after the nodes converged (Cluster.WaitConverged). When some
// node lacks records below its applied index (deduplicated copies of a
// request, or real gaps), it also reads back what ZooKeeper still holds of
// the log (ReadLog) so that CheckDumpsLog can tell the copies; an index
// whose channel was deleted by then cannot be shown to be a copy and
// counts as a gap (follow the log while the test runs with a LogRecorder
// and call CheckDumpsLog to avoid that). The error is a harness failure (a
// dump could not be read); violations are in the result
// (CheckResult.Err).
func Check(ctx context.Context, nodes []*Node, h *History) (CheckResult, error) {
	dumps, err := Dumps(ctx, nodes)
	if err != nil {
		return CheckResult{}, err
	}
	var log []LogEntry
	var logErr error
	if hasHoles(dumps) && len(nodes) > 0 {
		var hint uint64
		for _, d := range dumps {
			hint = max(hint, d.Applied)
		}
		o := nodes[0].Options()
		var l RoomLog
		if l, logErr = ReadLog(ctx, o.ZK, o.Room, hint); logErr == nil {
			log = l.Entries
		}
	}
	r := CheckDumpsLog(dumps, h, log)
	if logErr != nil && r.Gaps > 0 {
		r.problem("(the log could not be read back to tell deduplicated copies from gaps: %v)", logErr)
	}
	return r, nil
}

// hasHoles reports whether some dump lacks a record below its applied index.
func hasHoles(dumps map[string]DumpResponse) bool {
	for _, d := range dumps {
		if uint64(len(d.Records)) < d.Applied {
			return true
		}
	}
	return false
}

// CheckDumps is CheckDumpsLog without the log: every index without a
// record is a gap.
func CheckDumps(dumps map[string]DumpResponse, h *History) CheckResult {
	return CheckDumpsLog(dumps, h, nil)
}

// CheckDumpsLog verifies, for the dumps of nodes (by id), the history and
// the entries of the log that could be read back (log: any subset, in any
// order; see LogRecorder and ReadLog):
//
//  1. each node holds exactly one record per index 1..applied, each
//     applied once (Count == 1), with non-decreasing epochs — except
//     indexes that hold a deduplicated copy of a request: the log entry
//     there carries a request id that some node's records show applied,
//     with the same payload, at an earlier index (the store skipped it, so
//     no node records it, and none may); any other index without a
//     record, and one the log does not show, is a gap;
//  2. all nodes agree on the entry (SHA-256) and epoch at every index;
//  3. every acknowledged or committed proposal is at its index on every
//     node that applied that index, and nodes applied at least up to it;
//  4. no proposal's payload appears at two indexes (unknown-outcome ones
//     appear once or not at all);
//  5. request ids: every id is applied (recorded) at most once, on every
//     node and over all of them; every acknowledged or committed proposal
//     sent with an id has it applied exactly once, at the index its answer
//     reported — for a Duplicate answer the original index; a committed
//     answer (no response) may report the index of a deduplicated copy,
//     which the log must then show, after the one application.
func CheckDumpsLog(dumps map[string]DumpResponse, h *History, log []LogEntry) CheckResult {
	var r CheckResult
	ids := make([]string, 0, len(dumps))
	for id := range dumps {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	dd := NewRequestIndex(log)
	for _, id := range ids {
		dd.AddRecords(dumps[id].Records)
	}

	// ref: the first node's record of each index; shaAt: payload -> indexes.
	ref := map[uint64]Record{}
	refNode := map[uint64]string{}
	divergent := map[uint64]bool{}
	missing := func(node string, from, to uint64, what string) {
		var gaps []uint64
		for i := from; i <= to; i++ {
			if !dd.IsCopy(i) {
				gaps = append(gaps, i)
			}
		}
		if len(gaps) > 0 {
			r.Gaps += len(gaps)
			r.problem("%s: %s: %s", node, what, dd.Explain(gaps))
		}
	}
	for _, id := range ids {
		d := dumps[id]
		var prevEpoch uint64
		next := uint64(1)
		for _, rec := range d.Records {
			if rec.Index < next {
				r.Duplicated++
				r.problem("%s: index %d listed twice", id, rec.Index)
				continue
			}
			if rec.Index > next {
				missing(id, next, rec.Index-1, "indexes missing")
			}
			next = rec.Index + 1
			if rec.Count != 1 {
				r.Duplicated++
				r.problem("%s: index %d applied %d times", id, rec.Index, rec.Count)
			}
			if rec.Epoch < prevEpoch {
				r.EpochRegressions++
				r.problem("%s: index %d has epoch %d after epoch %d", id, rec.Index, rec.Epoch, prevEpoch)
			}
			prevEpoch = max(prevEpoch, rec.Epoch)
			if o, ok := ref[rec.Index]; !ok {
				ref[rec.Index], refNode[rec.Index] = rec, id
			} else if (o.SHA256 != rec.SHA256 || o.Epoch != rec.Epoch || o.RequestID != rec.RequestID) && !divergent[rec.Index] {
				divergent[rec.Index] = true
				r.Divergent++
				r.problem("index %d: %s has epoch %d sha %.12s id %q, %s has epoch %d sha %.12s id %q",
					rec.Index, refNode[rec.Index], o.Epoch, o.SHA256, o.RequestID, id, rec.Epoch, rec.SHA256, rec.RequestID)
			}
		}
		if d.Applied+1 > next {
			missing(id, next, d.Applied, fmt.Sprintf("applied %d but records end at %d", d.Applied, next-1))
		}
	}
	r.DedupCopies = len(dd.Copies())
	shaAt := map[string][]uint64{}
	for idx, rec := range ref {
		shaAt[rec.SHA256] = append(shaAt[rec.SHA256], idx)
	}
	// Rule 5a: every request id applied at most once (over every node's
	// records: one node holding it twice, or two nodes at two indexes).
	twice := dd.AppliedTwice()
	for _, rid := range slices.Sorted(maps.Keys(twice)) {
		r.IDsTwice++
		r.problem("request %s applied at indexes %v", rid, twice[rid])
	}

	for _, p := range h.Proposals() {
		at := shaAt[p.SHA256]
		slices.Sort(at)
		if len(at) > 1 {
			r.Duplicated++
			r.problem("%s (%s) is at indexes %v", p.Key, p.Outcome, at)
		}
		v := r.Tally.Add(p, at, dd)
		if v.NotOnce {
			r.problem("%s (%s at %d by %s, request %s): %s", p.Key, p.Outcome, p.Index, p.Node, p.RequestID, v.Why)
		}
		if v.Phantom {
			// "Surely not committed" yet committed: a broken contract.
			r.problem("%s was reported not committed (%s) but is at %v", p.Key, p.Err, at)
		}
		if !v.Committed {
			continue
		}
		lost := false
		for _, id := range ids {
			d := dumps[id]
			if d.Applied < v.Index {
				lost = true
				r.problem("%s: %s (%s at %d) not applied: node at %d", id, p.Key, p.Outcome, v.Index, d.Applied)
				continue
			}
			rec, ok := findRecord(d.Records, v.Index)
			if !ok || rec.SHA256 != p.SHA256 {
				lost = true
				r.problem("%s: %s (%s at %d by %s) not there (found sha %.12s)", id, p.Key, p.Outcome, v.Index, p.Node, rec.SHA256)
			}
		}
		if lost {
			r.Lost++
		}
	}
	return r
}

// RequestIndex knows which request ids the records show applied at which
// indexes, and tells, with the log's help, the indexes that hold a
// deduplicated copy of a request from gaps: the request-id rules of
// CheckDumpsLog, shared with the chaos checker. Feed it every node's
// records (AddRecords) before asking.
type RequestIndex struct {
	log      map[uint64]LogEntry
	applied  map[string]map[uint64]string // request id -> index -> payload sha, over all records
	recorded map[uint64]bool              // indexes some node holds a record of
	copies   map[uint64]bool              // indexes found to be copies
}

// NewRequestIndex returns a RequestIndex over the log entries that could be
// read back (any subset, any order).
func NewRequestIndex(log []LogEntry) *RequestIndex {
	d := &RequestIndex{log: make(map[uint64]LogEntry, len(log)), applied: map[string]map[uint64]string{},
		recorded: map[uint64]bool{}, copies: map[uint64]bool{}}
	for _, e := range log {
		d.log[e.Index] = e
	}
	return d
}

// AddRecords adds one node's records.
func (d *RequestIndex) AddRecords(recs []Record) {
	for _, rec := range recs {
		d.recorded[rec.Index] = true
		if rec.RequestID == "" {
			continue
		}
		m := d.applied[rec.RequestID]
		if m == nil {
			m = map[uint64]string{}
			d.applied[rec.RequestID] = m
		}
		m[rec.Index] = rec.SHA256
	}
}

// IsCopy reports whether index holds, according to the log, a copy of a
// request applied at an earlier index, and no node applied it (one that did
// disagrees with the nodes that skipped it). The store skips such a copy
// whatever its payload: the same payload is a duplicate, another a
// conflict (store.Outcome).
func (d *RequestIndex) IsCopy(index uint64) bool {
	if d.copies[index] {
		return true
	}
	e, ok := d.log[index]
	if !ok || e.RequestID == "" || d.recorded[index] {
		return false
	}
	for at := range d.applied[e.RequestID] {
		if at < index {
			d.copies[index] = true
			return true
		}
	}
	return false
}

// Copies returns the indexes IsCopy found to be copies so far, ascending.
func (d *RequestIndex) Copies() []uint64 {
	return slices.Sorted(maps.Keys(d.copies))
}

// AppliedTwice returns the request ids recorded at more than one index,
// with those indexes (ascending).
func (d *RequestIndex) AppliedTwice() map[string][]uint64 {
	out := map[string][]uint64{}
	for id, at := range d.applied {
		if len(at) > 1 {
			out[id] = slices.Sorted(maps.Keys(at))
		}
	}
	return out
}

// Explain describes indexes that are missing and no copies: which the log
// does not show, which hold a plain entry, which a request another node
// applied, which a request not applied before them.
func (d *RequestIndex) Explain(idx []uint64) string {
	var unread, plain, held, orphan []uint64
	for _, i := range idx {
		e, ok := d.log[i]
		switch {
		case !ok:
			unread = append(unread, i)
		case e.RequestID == "":
			plain = append(plain, i)
		case d.recorded[i]:
			held = append(held, i)
		default:
			orphan = append(orphan, i)
		}
	}
	var parts []string
	if len(unread) > 0 {
		parts = append(parts, fmt.Sprintf("%s (not in the log read back)", indexRanges(unread)))
	}
	if len(plain) > 0 {
		parts = append(parts, fmt.Sprintf("%s (plain entries)", indexRanges(plain)))
	}
	if len(held) > 0 {
		parts = append(parts, fmt.Sprintf("%s (requests another node applied)", indexRanges(held)))
	}
	for _, i := range orphan {
		if len(parts) >= 8 {
			parts = append(parts, "…")
			break
		}
		e := d.log[i]
		parts = append(parts, fmt.Sprintf("%d (request %s, payload %.12s, not applied before it)", i, e.RequestID, e.SHA256))
	}
	return strings.Join(parts, "; ")
}

// AckedAt applies the exactly-once rule to an acknowledged or committed
// proposal with a request id: its id must be recorded at exactly one
// index, the one the answer reported (for a Duplicate answer that is the
// original's); a committed answer (no response, not Duplicate) may report
// a later copy's index instead, which the log must show holding the same
// id and payload. It returns the index where the proposal's payload must
// be found, whether the rule holds, and why not.
func (d *RequestIndex) AckedAt(p Proposal) (index uint64, ok bool, why string) {
	at := slices.Sorted(maps.Keys(d.applied[p.RequestID]))
	switch {
	case len(at) == 0:
		return p.Index, false, "the id is applied nowhere"
	case len(at) > 1:
		return p.Index, false, fmt.Sprintf("the id is applied at indexes %v", at)
	case at[0] == p.Index:
		return p.Index, true, ""
	case p.Outcome == OutcomeCommitted && !p.Duplicate && at[0] < p.Index:
		if e, ok := d.log[p.Index]; ok && e.RequestID == p.RequestID && e.SHA256 == p.SHA256 {
			return at[0], true, ""
		}
		return p.Index, false, fmt.Sprintf("the id is applied at %d; the log does not show a copy of it at %d", at[0], p.Index)
	}
	return p.Index, false, fmt.Sprintf("the id is applied at %d, not at the index answered", at[0])
}

// indexRanges formats sorted indexes as "1..3, 7" (at most 10 ranges).
func indexRanges(idx []uint64) string {
	var parts []string
	for i := 0; i < len(idx); {
		j := i
		for j+1 < len(idx) && idx[j+1] == idx[j]+1 {
			j++
		}
		if len(parts) == 10 {
			parts = append(parts, "…")
			break
		}
		if i == j {
			parts = append(parts, fmt.Sprint(idx[i]))
		} else {
			parts = append(parts, fmt.Sprintf("%d..%d", idx[i], idx[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ", ")
}

// findRecord finds index in records (sorted by index).
func findRecord(recs []Record, index uint64) (Record, bool) {
	i, ok := slices.BinarySearchFunc(recs, index, func(r Record, idx uint64) int {
		switch {
		case r.Index < idx:
			return -1
		case r.Index > idx:
			return 1
		}
		return 0
	})
	if !ok {
		return Record{}, false
	}
	return recs[i], true
}

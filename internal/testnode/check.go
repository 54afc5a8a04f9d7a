package testnode

import (
	"context"
	"errors"
	"fmt"
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
	Acked, Committed, Unknown, NotCommitted int
	// UnknownApplied counts unknown-outcome proposals found in the log (once).
	UnknownApplied int
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
	// Gaps: indexes missing from a node's records below its applied index.
	Gaps int
	// Phantom: proposals reported surely not committed yet found in the log.
	Phantom int
	// Problems describes the first violations.
	Problems []string
}

func (r *CheckResult) problem(format string, args ...any) {
	if len(r.Problems) < maxProblems {
		r.Problems = append(r.Problems, fmt.Sprintf(format, args...))
	}
}

// Err returns nil when no violation was found, else an error wrapping
// ErrCheck that lists the problems.
func (r CheckResult) Err() error {
	if r.Lost+r.Duplicated+r.Divergent+r.EpochRegressions+r.Gaps+r.Phantom == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s\n  %s", ErrCheck, r.Summary(), strings.Join(r.Problems, "\n  "))
}

// Summary is a one-line account of the result.
func (r CheckResult) Summary() string {
	return fmt.Sprintf("acked=%d committed=%d unknown=%d (applied %d) not_committed=%d lost=%d duplicated=%d divergent=%d epoch_regressions=%d gaps=%d phantom=%d",
		r.Acked, r.Committed, r.Unknown, r.UnknownApplied, r.NotCommitted, r.Lost, r.Duplicated, r.Divergent, r.EpochRegressions, r.Gaps, r.Phantom)
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
// Call it after the nodes converged (Cluster.WaitConverged). The error is
// a harness failure (a dump could not be read); violations are in the
// result (CheckResult.Err).
func Check(ctx context.Context, nodes []*Node, h *History) (CheckResult, error) {
	dumps, err := Dumps(ctx, nodes)
	if err != nil {
		return CheckResult{}, err
	}
	return CheckDumps(dumps, h), nil
}

// CheckDumps verifies, for the dumps of nodes (by id) and the history:
//
//  1. each node holds exactly one record per index 1..applied, each
//     applied once (Count == 1), with non-decreasing epochs;
//  2. all nodes agree on the entry (SHA-256) and epoch at every index;
//  3. every acknowledged or committed proposal is at its index on every
//     node that applied that index, and nodes applied at least up to it;
//  4. no proposal's payload appears at two indexes (unknown-outcome ones
//     appear once or not at all).
func CheckDumps(dumps map[string]DumpResponse, h *History) CheckResult {
	var r CheckResult
	ids := make([]string, 0, len(dumps))
	for id := range dumps {
		ids = append(ids, id)
	}
	slices.Sort(ids)

	// ref: the first node's record of each index; shaAt: payload -> indexes.
	ref := map[uint64]Record{}
	refNode := map[uint64]string{}
	divergent := map[uint64]bool{}
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
				r.Gaps += int(rec.Index - next)
				r.problem("%s: indexes %d..%d missing", id, next, rec.Index-1)
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
			} else if (o.SHA256 != rec.SHA256 || o.Epoch != rec.Epoch) && !divergent[rec.Index] {
				divergent[rec.Index] = true
				r.Divergent++
				r.problem("index %d: %s has epoch %d sha %.12s, %s has epoch %d sha %.12s",
					rec.Index, refNode[rec.Index], o.Epoch, o.SHA256, id, rec.Epoch, rec.SHA256)
			}
		}
		if d.Applied+1 > next {
			r.Gaps += int(d.Applied + 1 - next)
			r.problem("%s: applied %d but records end at %d", id, d.Applied, next-1)
		}
	}
	shaAt := map[string][]uint64{}
	for idx, rec := range ref {
		shaAt[rec.SHA256] = append(shaAt[rec.SHA256], idx)
	}

	for _, p := range h.Proposals() {
		at := shaAt[p.SHA256]
		slices.Sort(at)
		if len(at) > 1 {
			r.Duplicated++
			r.problem("%s (%s) is at indexes %v", p.Key, p.Outcome, at)
		}
		switch p.Outcome {
		case OutcomeAcked, OutcomeCommitted:
			if p.Outcome == OutcomeAcked {
				r.Acked++
			} else {
				r.Committed++
			}
			lost := false
			for _, id := range ids {
				d := dumps[id]
				if d.Applied < p.Index {
					lost = true
					r.problem("%s: %s (%s at %d) not applied: node at %d", id, p.Key, p.Outcome, p.Index, d.Applied)
					continue
				}
				rec, ok := findRecord(d.Records, p.Index)
				if !ok || rec.SHA256 != p.SHA256 {
					lost = true
					r.problem("%s: %s (%s at %d by %s) not there (found sha %.12s)", id, p.Key, p.Outcome, p.Index, p.Node, rec.SHA256)
				}
			}
			if lost {
				r.Lost++
			}
		case OutcomeUnknown:
			r.Unknown++
			if len(at) > 0 {
				r.UnknownApplied++
			}
		case OutcomeNotCommitted:
			r.NotCommitted++
			if len(at) > 0 {
				// "Surely not committed" yet committed: a broken contract.
				r.Phantom++
				r.problem("%s was reported not committed (%s) but is at %v", p.Key, p.Err, at)
			}
		}
	}
	return r
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

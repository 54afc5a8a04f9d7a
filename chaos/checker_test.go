package main

import (
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/replica"
)

// world is a synthetic end state: proposals, three replicas' dumps and the
// ZooKeeper log.
type world struct {
	props []testnode.Proposal
	nodes []NodeDump
	zk    ZKLog
}

func sha(s string) string { return testnode.EntrySHA([]byte(s)) }

// cleanWorld: indexes 1..10, epoch 1 up to 5 and 2 after, each an acked
// proposal; plus an unknown-outcome proposal that landed at 11, one that
// did not land, and a failed one. ZooKeeper still holds 6..11.
func cleanWorld() world {
	var w world
	var recs []testnode.Record
	for i := uint64(1); i <= 11; i++ {
		key := fmt.Sprintf("p%d", i)
		epoch := uint64(1)
		if i > 5 {
			epoch = 2
		}
		recs = append(recs, testnode.Record{Index: i, Epoch: epoch, Count: 1, Size: 10, SHA256: sha(key)})
		p := testnode.Proposal{Key: key, SHA256: sha(key), Outcome: testnode.OutcomeAcked, Index: i, Node: "n0"}
		if i == 11 {
			p.Outcome, p.Index = testnode.OutcomeUnknown, 0
		}
		if i == 4 {
			p.Outcome = testnode.OutcomeCommitted
		}
		w.props = append(w.props, p)
		if i >= 6 {
			w.zk.Entries = append(w.zk.Entries, LogEntry{Index: i, Epoch: epoch, SHA256: sha(key)})
		}
	}
	w.props = append(w.props,
		testnode.Proposal{Key: "u", SHA256: sha("u"), Outcome: testnode.OutcomeUnknown},
		testnode.Proposal{Key: "f", SHA256: sha("f"), Outcome: testnode.OutcomeNotCommitted, Err: "not_primary"},
	)
	for _, id := range []string{"n0", "n1", "n2"} {
		w.nodes = append(w.nodes, NodeDump{ID: id, Applied: 11, Records: slices.Clone(recs), Hash: "h11", HashIndex: 11})
	}
	w.zk.Read, w.zk.First, w.zk.End = true, 6, 11
	return w
}

// appendAll appends an entry at the next index on every replica.
func (w *world) appendAll(payload string, epoch uint64) uint64 {
	var idx uint64
	for i := range w.nodes {
		n := &w.nodes[i]
		n.Applied++
		idx = n.Applied
		n.Records = append(n.Records, testnode.Record{Index: idx, Epoch: epoch, Count: 1, Size: 10, SHA256: sha(payload)})
		n.Hash, n.HashIndex = fmt.Sprintf("h%d", idx), idx
	}
	w.zk.End = idx
	w.zk.Entries = append(w.zk.Entries, LogEntry{Index: idx, Epoch: epoch, SHA256: sha(payload)})
	return idx
}

func (w *world) record(node int, index uint64) *testnode.Record {
	for i := range w.nodes[node].Records {
		if w.nodes[node].Records[i].Index == index {
			return &w.nodes[node].Records[i]
		}
	}
	panic(fmt.Sprintf("no record %d on node %d", index, node))
}

func (w *world) dropRecords(node int, drop func(idx uint64) bool) {
	w.nodes[node].Records = slices.DeleteFunc(w.nodes[node].Records, func(r testnode.Record) bool { return drop(r.Index) })
}

func TestCheckerClean(t *testing.T) {
	w := cleanWorld()
	r := Check(w.props, w.nodes, w.zk)
	require.True(t, r.OK(), "%v", r.Violations)
	require.Equal(t, 10, r.Acked)
	require.Equal(t, 1, r.Committed)
	require.Equal(t, 2, r.Unknown)
	require.Equal(t, 1, r.UnknownApplied)
	require.Equal(t, 1, r.Failed)
	require.Equal(t, uint64(11), r.Index)
	require.Equal(t, 2, r.Epochs)

	// A replica that bootstrapped may lack a prefix the others hold.
	w.dropRecords(0, func(i uint64) bool { return i <= 3 })
	w.nodes[0].Bootstrapped = true
	r = Check(w.props, w.nodes, w.zk)
	require.True(t, r.OK(), "%v", r.Violations)
	require.Equal(t, 1, r.Partial)
}

// TestCheckerDetects proves that the checker can fail: each synthetic
// violation is counted under its rule and fails the report.
func TestCheckerDetects(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mutate func(w *world)
		count  func(r Report) int
	}{
		{"lost ack: acked payload nowhere", func(w *world) {
			w.props = append(w.props, testnode.Proposal{Key: "ghost", SHA256: sha("ghost"), Outcome: testnode.OutcomeAcked, Index: 3})
		}, func(r Report) int { return r.Lost }},
		{"lost ack: a replica stopped short of it", func(w *world) {
			w.dropRecords(2, func(i uint64) bool { return i >= 10 })
			w.nodes[2].Applied, w.nodes[2].Hash, w.nodes[2].HashIndex = 9, "h9", 9
		}, func(r Report) int { return r.Lost }},
		{"lost ack: overwritten on one replica", func(w *world) {
			w.record(1, 7).SHA256 = sha("other")
		}, func(r Report) int { return r.Lost }},
		{"duplicate: acked payload at a second index", func(w *world) {
			w.appendAll("p3", 2)
		}, func(r Report) int { return r.Duplicated }},
		{"duplicate: index applied twice", func(w *world) {
			w.record(0, 5).Count = 2
		}, func(r Report) int { return r.Duplicated }},
		{"duplicate: unknown outcome at two indexes", func(w *world) {
			w.appendAll("u", 2)
			w.appendAll("u", 2)
		}, func(r Report) int { return r.Duplicated }},
		{"divergent index", func(w *world) {
			w.record(2, 8).SHA256 = sha("p8-other")
			w.record(2, 8).Epoch = 3
		}, func(r Report) int { return r.Divergent }},
		{"divergent epoch only", func(w *world) {
			w.record(1, 2).Epoch = 2
		}, func(r Report) int { return r.Divergent }},
		{"epoch regression on every replica", func(w *world) {
			for i := range w.nodes {
				w.record(i, 8).Epoch = 1
			}
		}, func(r Report) int { return r.EpochRegressions }},
		{"epoch regression across replicas' parts", func(w *world) {
			// n0 stopped at 8; n1 and n2 restored a checkpoint at 8 and
			// hold 9..11 only, of epoch 1: no replica regresses on its
			// own, the merged log does.
			w.dropRecords(0, func(i uint64) bool { return i > 8 })
			w.nodes[0].Applied = 8
			for i := 1; i < 3; i++ {
				w.dropRecords(i, func(idx uint64) bool { return idx <= 8 })
				w.nodes[i].Bootstrapped = true
				for idx := uint64(9); idx <= 11; idx++ {
					w.record(i, idx).Epoch = 1
				}
			}
		}, func(r Report) int { return r.EpochRegressions }},
		{"phantom: failed proposal applied", func(w *world) {
			w.appendAll("f", 2)
		}, func(r Report) int { return r.Phantom }},
		{"foreign entry", func(w *world) {
			w.appendAll("nobody", 2)
		}, func(r Report) int { return r.Foreign }},
		{"gap inside a replica's records", func(w *world) {
			w.dropRecords(1, func(i uint64) bool { return i == 5 })
		}, func(r Report) int { return r.Gaps }},
		{"prefix missing on a replica that never bootstrapped", func(w *world) {
			w.dropRecords(0, func(i uint64) bool { return i <= 2 })
		}, func(r Report) int { return r.Gaps }},
		{"index held by no replica", func(w *world) {
			for i := range w.nodes {
				w.dropRecords(i, func(idx uint64) bool { return idx <= 2 })
				w.nodes[i].Bootstrapped = true
			}
		}, func(r Report) int { return r.Gaps }},
		{"records end below applied", func(w *world) {
			w.dropRecords(2, func(i uint64) bool { return i == 11 })
		}, func(r Report) int { return r.Gaps }},
		{"state hash differs", func(w *world) {
			w.nodes[1].Hash = "other"
		}, func(r Report) int { return r.HashMismatch }},
		{"applied index differs", func(w *world) {
			w.dropRecords(2, func(i uint64) bool { return i == 11 })
			w.nodes[2].Applied, w.nodes[2].Hash, w.nodes[2].HashIndex = 10, "h10", 10
		}, func(r Report) int { return r.HashMismatch }},
		{"zookeeper holds another entry", func(w *world) {
			w.zk.Entries[2].SHA256 = sha("zk")
		}, func(r Report) int { return r.ZKMismatch }},
		{"zookeeper committed past the replicas", func(w *world) {
			w.zk.End = 12
			w.zk.Entries = append(w.zk.Entries, LogEntry{Index: 12, Epoch: 2, SHA256: sha("late")})
		}, func(r Report) int { return r.ZKMismatch }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := cleanWorld()
			tc.mutate(&w)
			r := Check(w.props, w.nodes, w.zk)
			require.False(t, r.OK())
			require.Positive(t, tc.count(r), "violations: %v", r.Violations)
			require.NotEmpty(t, r.Violations)
			t.Logf("%d violations: %v", r.Total(), r.Violations)
		})
	}
}

func rid(key string) string { return replica.RequestIDFromKey(key).String() }

// requestWorld is cleanWorld with a request id on every proposal, record
// and log entry, plus index 12: a deduplicated copy of p7's request (its
// first attempt's outcome was unknown, the resend was answered Duplicate
// with index 7). ZooKeeper's final read holds 9..12 only; the recorder
// read 1..12 during the run.
func requestWorld() world {
	w := cleanWorld()
	for i := range w.props {
		w.props[i].RequestID = rid(w.props[i].Key)
		w.props[i].Attempts = 1
	}
	for n := range w.nodes {
		for i := range w.nodes[n].Records {
			w.nodes[n].Records[i].RequestID = rid(fmt.Sprintf("p%d", w.nodes[n].Records[i].Index))
		}
	}
	p7 := &w.props[6]
	p7.Duplicate, p7.Attempts, p7.Unknowns = true, 2, 1
	for i := range w.nodes {
		n := &w.nodes[i]
		n.Applied = 12
		n.Hash, n.HashIndex = "h12", 12
	}
	var log []LogEntry
	for i := uint64(1); i <= 11; i++ {
		epoch := uint64(1)
		if i > 5 {
			epoch = 2
		}
		key := fmt.Sprintf("p%d", i)
		log = append(log, LogEntry{Index: i, Epoch: epoch, SHA256: sha(key), RequestID: rid(key)})
	}
	log = append(log, LogEntry{Index: 12, Epoch: 2, SHA256: sha("p7"), RequestID: rid("p7")})
	w.zk = ZKLog{Read: true, First: 9, End: 12, Entries: slices.Clone(log[8:]), Recorded: log}
	return w
}

// TestCheckerRequests: the request-id rules (9) pass on a correct history
// with a deduplicated copy, and each fails on a crafted violation.
func TestCheckerRequests(t *testing.T) {
	w := requestWorld()
	r := Check(w.props, w.nodes, w.zk)
	require.True(t, r.OK(), "%v", r.Violations)
	require.Equal(t, 1, r.DedupCopies)
	require.Equal(t, 1, r.Dedup)
	require.Equal(t, 1, r.Retried)
	require.Equal(t, 1, r.MetUnknown)
	require.Equal(t, 1, r.ResolvedByRetry)
	require.Equal(t, uint64(12), r.Index)

	// Only the recorder saw the copy's channel: still a copy.
	w = requestWorld()
	w.zk.First, w.zk.Entries = 13, nil
	r = Check(w.props, w.nodes, w.zk)
	require.True(t, r.OK(), "%v", r.Violations)
	require.Equal(t, 1, r.DedupCopies)

	// A committed answer (no response) naming the copy's index.
	w = requestWorld()
	w.props[6].Outcome, w.props[6].Index, w.props[6].Duplicate = testnode.OutcomeCommitted, 12, false
	r = Check(w.props, w.nodes, w.zk)
	require.True(t, r.OK(), "%v", r.Violations)

	for _, tc := range []struct {
		name   string
		mutate func(w *world)
		count  func(r Report) int
	}{
		{"id applied twice: the copy applied on every replica", func(w *world) {
			for i := range w.nodes {
				n := &w.nodes[i]
				n.Records = append(n.Records, testnode.Record{Index: 12, Epoch: 2, Count: 1, Size: 10, SHA256: sha("p7"), RequestID: rid("p7")})
			}
		}, func(r Report) int { return r.IDsTwice }},
		{"id applied twice: two payloads of one id", func(w *world) {
			// A later proposal reusing p3's id with another payload.
			w.appendAll("q", 2)
			for i := range w.nodes {
				w.record(i, 13).RequestID = rid("p3")
			}
			w.zk.Entries[len(w.zk.Entries)-1].RequestID = rid("p3")
			w.props = append(w.props, testnode.Proposal{Key: "q", SHA256: sha("q"), Outcome: testnode.OutcomeUnknown, RequestID: rid("p3")})
		}, func(r Report) int { return r.IDsTwice }},
		{"acked id applied nowhere", func(w *world) {
			w.props = append(w.props, testnode.Proposal{Key: "ghost", SHA256: sha("ghost"), Outcome: testnode.OutcomeAcked, Index: 5, RequestID: rid("ghost")})
		}, func(r Report) int { return r.AckedIDsNotOnce }},
		{"acked id recorded under another id", func(w *world) {
			for i := range w.nodes {
				w.record(i, 4).RequestID = rid("other")
			}
			w.zk.Recorded[3].RequestID = rid("other")
		}, func(r Report) int { return r.AckedIDsNotOnce }},
		{"duplicate answer naming the copy", func(w *world) {
			w.props[6].Index = 12
		}, func(r Report) int { return r.AckedIDsNotOnce }},
		{"committed at an index that holds no copy of it", func(w *world) {
			w.props[6].Outcome, w.props[6].Index, w.props[6].Duplicate = testnode.OutcomeCommitted, 11, false
		}, func(r Report) int { return r.AckedIDsNotOnce }},
		{"dedup hole with no earlier original", func(w *world) {
			// The log's 12 repeats a request nobody applied.
			for _, l := range [][]LogEntry{w.zk.Recorded, w.zk.Entries} {
				l[len(l)-1].RequestID, l[len(l)-1].SHA256 = rid("x"), sha("x")
			}
			w.props = append(w.props, testnode.Proposal{Key: "x", SHA256: sha("x"), Outcome: testnode.OutcomeUnknown, RequestID: rid("x")})
		}, func(r Report) int { return r.Gaps }},
		{"dedup hole: a copy of a later application", func(w *world) {
			// Index 8 missing everywhere; the log says it repeats p9's
			// request, which is applied only at 9: not a copy.
			for i := range w.nodes {
				w.dropRecords(i, func(idx uint64) bool { return idx == 8 })
			}
			w.zk.Recorded[7] = LogEntry{Index: 8, Epoch: 2, SHA256: sha("p9"), RequestID: rid("p9")}
			w.props = slices.DeleteFunc(w.props, func(p testnode.Proposal) bool { return p.Key == "p8" })
		}, func(r Report) int { return r.Gaps }},
		{"dedup hole the log does not show", func(w *world) {
			w.zk.Recorded = w.zk.Recorded[:11]
			w.zk.Entries = w.zk.Entries[:3]
			w.zk.End = 11
		}, func(r Report) int { return r.Gaps }},
		{"dedup hole holding a plain entry", func(w *world) {
			for _, l := range [][]LogEntry{w.zk.Recorded, w.zk.Entries} {
				l[len(l)-1].RequestID = ""
			}
		}, func(r Report) int { return r.Gaps }},
		{"a copy one replica applied", func(w *world) {
			n := &w.nodes[1]
			n.Records = append(n.Records, testnode.Record{Index: 12, Epoch: 2, Count: 1, Size: 10, SHA256: sha("p7"), RequestID: rid("p7")})
		}, func(r Report) int { return r.Gaps + r.IDsTwice }},
		{"recorder and final read disagree", func(w *world) {
			w.zk.Recorded[10].SHA256 = sha("other")
		}, func(r Report) int { return r.ZKMismatch }},
		{"log entry's id differs from the record's", func(w *world) {
			w.zk.Entries[0].RequestID = rid("other")
			w.zk.Recorded[8].RequestID = rid("other")
		}, func(r Report) int { return r.ZKMismatch }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := requestWorld()
			tc.mutate(&w)
			r := Check(w.props, w.nodes, w.zk)
			require.False(t, r.OK())
			require.Positive(t, tc.count(r), "violations: %v", r.Violations)
			t.Logf("%d violations: %v", r.Total(), r.Violations)
		})
	}
}

func TestScheduleReproducible(t *testing.T) {
	const n = 500
	draw := func(seed uint64) []Fault {
		s := NewSchedule(seed, sessionForTest)
		out := make([]Fault, n)
		for i := range out {
			out[i] = s.Next()
		}
		return out
	}
	a, b := draw(42), draw(42)
	require.Equal(t, a, b, "same seed, same faults")
	require.NotEqual(t, a, draw(43))

	kinds := map[Kind]int{}
	spans := 0
	for i, f := range a {
		kinds[f.Kind]++
		require.Equal(t, i+1, f.Seq)
		require.Positive(t, f.Heal)
		require.NotEmpty(t, f.String())
		if f.Kind == PausePrimaryShort {
			require.Less(t, f.Down, sessionForTest, "a short pause stays short of the session")
		}
		if f.Kind.isZK() && f.Span > 0 && i+1 < len(a) {
			require.False(t, a[i+1].Kind.isZK(), "fault %d: a second ZooKeeper server down", i+2)
		}
		if f.Kind == KillStandby && f.Span > 0 && i+1 < len(a) {
			require.False(t, a[i+1].Kind == KillStandby && a[i+1].Span > 0, "fault %d: a second replica held down", i+2)
			spans++
		}
	}
	require.Positive(t, spans, "no replica held down across a fault")
	// The default schedule draws every fault kind; the lifecycle kinds
	// only with -lifecycle (TestChaosLifecycle).
	for k := Kind(0); k < firstLifecycle; k++ {
		require.Positive(t, kinds[k], "kind %s never drawn in %d faults", k, n)
	}
}

func TestMainBadFlags(t *testing.T) {
	require.Equal(t, exitHarness, mainCode([]string{"-nope"}, io.Discard, io.Discard))
	require.Equal(t, exitHarness, mainCode([]string{"-replicas", "1", "-duration", "1s"}, io.Discard, io.Discard))
}

package main

import (
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/testnode"
)

// The read check on hand-built histories (no ZooKeeper): it must pass
// what linearizability allows and fail what it does not.

var readBase = time.Date(2026, 5, 22, 12, 0, 0, 0, time.UTC)

func atMS(ms int) time.Time { return readBase.Add(time.Duration(ms) * time.Millisecond) }

// wr is a proposal setting key to value, answered with outcome at index.
func wr(key, value string, outcome testnode.Outcome, index uint64, from, to int) testnode.Proposal {
	e, err := testnode.SetEntry(key, []byte(value))
	if err != nil {
		panic(err)
	}
	p := testnode.Proposal{Key: key, SHA256: testnode.EntrySHA(e), Outcome: outcome, Node: "n1", Attempts: 1,
		Start: atMS(from), End: atMS(to)}
	if outcome == testnode.OutcomeAcked || outcome == testnode.OutcomeCommitted {
		p.Index = index
	}
	if outcome == testnode.OutcomeUnknown {
		p.Err = "timeout"
	}
	return p
}

// rd is an answered read of key that found value ("": absent).
func rd(key, value string, from, to int) Read {
	r := Read{Node: "n2", Key: key, Start: atMS(from), End: atMS(to), OK: true, Role: testnode.RoleStandby, Index: 7, Barrier: 7}
	if value != "" {
		r.Found, r.Entry = true, entrySHA(key, []byte(value))
	}
	return r
}

func checkReads(t *testing.T, props []testnode.Proposal, reads []Read) ReadReport {
	t.Helper()
	rr := CheckReads(props, reads, nil, ReadCheckOptions{Timeout: 10 * time.Second})
	require.NotEqual(t, porcupine.Unknown, rr.Result, "the check timed out")
	return rr
}

func TestReadsStaleAfterAck(t *testing.T) {
	// The write was acknowledged before the read began: the read must see it.
	props := []testnode.Proposal{wr("k", "v1", testnode.OutcomeAcked, 1, 0, 10)}
	rr := checkReads(t, props, []Read{rd("k", "", 20, 30)})
	require.Equal(t, porcupine.Illegal, rr.Result)
	require.Equal(t, "false", rr.Linearizable())
	require.Equal(t, 1, rr.Illegal)
	require.Len(t, rr.Explanations, 1)
	require.Contains(t, rr.Explanations[0], "key k")
	require.Contains(t, rr.Explanations[0], "stale read")
	t.Log(rr.Explanations[0])

	// An older value is just as stale.
	props = append(props, wr("k", "v2", testnode.OutcomeAcked, 2, 11, 15))
	rr = checkReads(t, props, []Read{rd("k", "v1", 20, 30)})
	require.Equal(t, porcupine.Illegal, rr.Result)
	require.Contains(t, rr.Explanations[0], "stale read")

	// The same read of the newest value is fine.
	rr = checkReads(t, props, []Read{rd("k", "v2", 20, 30)})
	require.Equal(t, porcupine.Ok, rr.Result)
	require.Equal(t, "true", rr.Linearizable())
}

func TestReadsConcurrentOverlap(t *testing.T) {
	// A read overlapping the write may see it or not.
	props := []testnode.Proposal{wr("k", "v1", testnode.OutcomeAcked, 1, 0, 100)}
	for _, reads := range [][]Read{
		{rd("k", "", 10, 20)},
		{rd("k", "v1", 10, 20)},
		{rd("k", "", 10, 20), rd("k", "v1", 30, 40)},
		{rd("k", "v1", 10, 20), rd("k", "v1", 30, 40), rd("k", "v1", 150, 160)},
		// The read returned at the instant the write was invoked: closed
		// intervals, concurrent.
		{rd("k", "v1", -10, 0)},
	} {
		rr := checkReads(t, props, reads)
		require.Equal(t, porcupine.Ok, rr.Result, "%+v", reads)
	}

	// But once a read saw it, a read that began after that one returned
	// must see it too.
	rr := checkReads(t, props, []Read{rd("k", "v1", 10, 20), rd("k", "", 30, 40)})
	require.Equal(t, porcupine.Illegal, rr.Result)
	require.Contains(t, rr.Explanations[0], "no order of these operations")

	// Two overlapping writes: a read after both may see either, not both
	// in turn (v2 then v1 then v2 again).
	props = []testnode.Proposal{
		wr("k", "v1", testnode.OutcomeAcked, 1, 0, 50),
		wr("k", "v2", testnode.OutcomeAcked, 2, 10, 60),
	}
	require.Equal(t, porcupine.Ok, checkReads(t, props, []Read{rd("k", "v1", 70, 80)}).Result)
	require.Equal(t, porcupine.Ok, checkReads(t, props, []Read{rd("k", "v2", 70, 80)}).Result)
	require.Equal(t, porcupine.Illegal, checkReads(t, props, []Read{
		rd("k", "v2", 70, 80), rd("k", "v1", 90, 100), rd("k", "v2", 110, 120),
	}).Result)
}

func TestReadsUnknownOutcome(t *testing.T) {
	// A write of unknown outcome may have taken effect at any time after it
	// began, or never.
	props := []testnode.Proposal{wr("k", "v1", testnode.OutcomeUnknown, 0, 0, 10)}
	for _, reads := range [][]Read{
		{rd("k", "v1", 20, 30)},
		{rd("k", "", 20, 30)},
		{rd("k", "", 20, 30), rd("k", "v1", 40, 50), rd("k", "v1", 500, 510)},
	} {
		rr := checkReads(t, props, reads)
		require.Equal(t, porcupine.Ok, rr.Result, "%+v", reads)
		require.Equal(t, 1, rr.UnknownWrites)
	}
	// Not before it began, though.
	rr := checkReads(t, props, []Read{rd("k", "v1", -20, -10)})
	require.Equal(t, porcupine.Illegal, rr.Result)
	// And once seen it stays.
	rr = checkReads(t, props, []Read{rd("k", "v1", 20, 30), rd("k", "", 40, 50)})
	require.Equal(t, porcupine.Illegal, rr.Result)

	// With the final dumps covering the whole log, an unknown-outcome write
	// that is in no replica's log never happened: a read that saw it read
	// something never committed. One that is in the log is a write like
	// any other, of unknown time.
	other := wr("x", "y", testnode.OutcomeAcked, 1, 0, 5)
	nodes := []NodeDump{{ID: "n1", Applied: 1, Records: []testnode.Record{{Index: 1, Epoch: 1, Count: 1, SHA256: other.SHA256}}}}
	rr = CheckReads(append(props, other), []Read{rd("k", "v1", 20, 30)}, nodes, ReadCheckOptions{})
	require.Equal(t, porcupine.Illegal, rr.Result)
	require.Contains(t, rr.Explanations[0], "which no write in the history wrote")
	require.Contains(t, rr.Explanations[0], "in no replica's log")
	nodes[0].Applied = 2
	nodes[0].Records = append(nodes[0].Records, testnode.Record{Index: 2, Epoch: 1, Count: 1, SHA256: props[0].SHA256})
	rr = CheckReads(append(props, other), []Read{rd("k", "", 20, 30), rd("k", "v1", 40, 50)}, nodes, ReadCheckOptions{})
	require.Equal(t, porcupine.Ok, rr.Result)
	// Records with a gap prove nothing about absence: the write stays.
	nodes[0].Applied = 3
	nodes[0].Records = []testnode.Record{{Index: 1, Epoch: 1, Count: 1, SHA256: other.SHA256}, {Index: 3, Epoch: 1, Count: 1, SHA256: "ab"}}
	rr = CheckReads(append(props, other), []Read{rd("k", "v1", 20, 30)}, nodes, ReadCheckOptions{})
	require.Equal(t, porcupine.Ok, rr.Result)
}

func TestReadsNeverWritten(t *testing.T) {
	props := []testnode.Proposal{wr("k", "v1", testnode.OutcomeAcked, 1, 0, 10)}
	rr := checkReads(t, props, []Read{rd("k", "bogus", 20, 30)})
	require.Equal(t, porcupine.Illegal, rr.Result)
	require.Contains(t, rr.Explanations[0], "which no write in the history wrote")

	// A definitely failed write never happened either.
	props = append(props, wr("k2", "v", testnode.OutcomeNotCommitted, 0, 0, 10))
	props[1].Err = "fenced"
	rr = checkReads(t, props, []Read{rd("k", "v1", 20, 30), rd("k2", "v", 20, 30)})
	require.Equal(t, porcupine.Illegal, rr.Result)
	require.Equal(t, 1, rr.Illegal)
	require.Contains(t, rr.Explanations[0], "key k2")
	require.Contains(t, rr.Explanations[0], "failed definitely")
	require.Contains(t, rr.Explanations[0], "fenced")
	t.Log(rr.Explanations[0])

	// A read of a key nobody wrote finds nothing.
	require.Equal(t, porcupine.Ok, checkReads(t, props, []Read{rd("nobody", "", 0, 1)}).Result)
}

func TestReadsCountsAndReport(t *testing.T) {
	props := []testnode.Proposal{
		wr("a", "1", testnode.OutcomeAcked, 1, 0, 10),
		wr("b", "1", testnode.OutcomeCommitted, 2, 0, 10),
		wr("c", "1", testnode.OutcomeUnknown, 0, 0, 10),
		wr("unread", "1", testnode.OutcomeAcked, 3, 0, 10),
	}
	primary := rd("a", "1", 20, 30)
	primary.Role = testnode.RolePrimary
	failed := Read{Node: "n3", Key: "a", Start: atMS(20), End: atMS(3020), Err: "timeout"}
	reads := []Read{primary, rd("b", "", 20, 30), rd("c", "1", 20, 30), failed}
	dir := t.TempDir()
	rr := CheckReads(props, reads, nil, ReadCheckOptions{Dir: dir})
	require.Equal(t, porcupine.Illegal, rr.Result)
	require.Equal(t, 3, rr.Reads)
	require.Equal(t, 1, rr.Primary)
	require.Equal(t, 1, rr.Failed)
	require.Equal(t, 3, rr.Keys)
	require.Equal(t, 3, rr.Writes)
	require.Equal(t, 1, rr.UnknownWrites)
	require.Equal(t, 1, rr.Illegal)
	require.Contains(t, rr.Explanations[0], "key b")

	// The visualization of the illegal keys is written.
	require.Equal(t, filepath.Join(dir, "reads-linearizability.html"), rr.Visualization)
	html, err := os.ReadFile(rr.Visualization)
	require.NoError(t, err)
	require.Contains(t, string(html), "get(b)")

	// A violation like the others: counted, listed, on the summary line.
	var rep Report
	rep.AddReads(rr)
	require.False(t, rep.OK())
	require.Equal(t, 1, rep.Total())
	require.Len(t, rep.Violations, 1)
	require.True(t, strings.HasPrefix(rep.Violations[0], "not linearizable: key b"))
	line := Result{Report: rep}.Line()
	require.Contains(t, line, " reads=3 reads_failed=1 reads_linearizable=false")

	// Nothing read: vacuously linearizable.
	rr = CheckReads(props, nil, nil, ReadCheckOptions{})
	require.Equal(t, porcupine.Ok, rr.Result)
	require.Equal(t, "true", rr.Linearizable())
	rep = Report{}
	rep.AddReads(rr)
	require.True(t, rep.OK())
}

func TestReadsTimeoutIsUnknown(t *testing.T) {
	// The check is bounded: out of time, the verdict is unknown, which is
	// no violation.
	props := []testnode.Proposal{wr("k", "v1", testnode.OutcomeAcked, 1, 0, 10)}
	rr := CheckReads(props, []Read{rd("k", "", 20, 30)}, nil, ReadCheckOptions{Timeout: time.Nanosecond})
	require.Equal(t, porcupine.Unknown, rr.Result)
	require.Equal(t, "unknown", rr.Linearizable())
	var rep Report
	rep.AddReads(rr)
	require.True(t, rep.OK())
}

func TestReadsManyKeys(t *testing.T) {
	// More keys than one porcupine call takes (chunks), every one fine
	// but one.
	var props []testnode.Proposal
	var reads []Read
	for i := range 4500 {
		k := "p/w0/" + strconv.Itoa(i)
		props = append(props, wr(k, "v", testnode.OutcomeAcked, uint64(i+1), i, i+10))
		reads = append(reads, rd(k, "v", i+20, i+30), rd(k, "", i-5, i+1))
	}
	reads[2*4321+1] = rd(props[4321].Key, "", 4321+40, 4321+50)
	rr := checkReads(t, props, reads)
	require.Equal(t, porcupine.Illegal, rr.Result)
	require.Equal(t, 1, rr.Illegal)
	require.Contains(t, rr.Explanations[0], "key "+props[4321].Key+":")
	require.Equal(t, 4500, rr.Keys)
}

func TestPickKey(t *testing.T) {
	p := &proposers{}
	rng := mrand.New(mrand.NewPCG(1, 2))
	_, ok := p.pickKey(rng)
	require.False(t, ok)
	for i := range 1000 {
		p.keys = append(p.keys, strconv.Itoa(i))
	}
	seen := map[string]int{}
	for range 4000 {
		k, ok := p.pickKey(rng)
		require.True(t, ok)
		seen[k]++
	}
	newest := 0
	for i := 992; i < 1000; i++ {
		newest += seen[strconv.Itoa(i)]
	}
	require.Greater(t, newest, 1600, "half the picks among the 8 newest keys")
	require.Greater(t, len(seen), 300, "and the rest spread over the older ones")
}

// TestReadsExact: the per-read index check catches what porcupine must
// let through: a read that missed a write of unknown outcome although the
// node had applied past that write's index.
func TestReadsExact(t *testing.T) {
	t0 := time.Date(2026, 5, 22, 12, 0, 0, 0, time.UTC)
	sha := entrySHA("k", []byte("v"))
	props := []testnode.Proposal{{Key: "k", SHA256: sha, Outcome: testnode.OutcomeUnknown, Start: t0}}
	nodes := []NodeDump{{ID: "n1", Applied: 2, Records: []testnode.Record{{Index: 1, SHA256: "other"}, {Index: 2, SHA256: sha}}}}
	read := func(found bool, index uint64) Read {
		rd := Read{Node: "n2", Key: "k", Start: t0.Add(time.Second), End: t0.Add(2 * time.Second), OK: true, Found: found, Index: index, Barrier: index, Role: testnode.RoleStandby}
		if found {
			rd.Entry = sha
		}
		return rd
	}
	for _, tc := range []struct {
		name string
		rd   Read
		bad  bool
	}{
		{"found after its index", read(true, 2), false},
		{"absent before its index", read(false, 1), false},
		{"absent after its index (stale)", read(false, 2), true},
		{"found before its index", read(true, 1), true},
		{"below its barrier", Read{Node: "n2", Key: "k", OK: true, Index: 1, Barrier: 2}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var rr ReadReport
			exactCheck(&rr, props, []Read{tc.rd}, nodes, nil)
			require.Equal(t, tc.bad, rr.Illegal > 0, "%+v", rr.Explanations)
			// Porcupine alone accepts the stale read: the write's outcome
			// is unknown, so it may linearize after the read.
			if tc.name == "absent after its index (stale)" {
				pr := CheckReads(props, []Read{tc.rd}, nodes, ReadCheckOptions{})
				require.Equal(t, "true", pr.Linearizable())
			}
		})
	}
}

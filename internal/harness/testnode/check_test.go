package testnode

import (
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/replica"
)

func rec(index, epoch uint64, sha string) Record {
	return Record{Index: index, Epoch: epoch, Count: 1, SHA256: sha}
}

func TestCheckDumps(t *testing.T) {
	good := func() map[string]DumpResponse {
		recs := []Record{rec(1, 1, "a"), rec(2, 1, "b"), rec(3, 2, "c")}
		return map[string]DumpResponse{
			"n0": {Applied: 3, Records: recs},
			"n1": {Applied: 3, Records: append([]Record(nil), recs...)},
		}
	}
	history := func(ps ...Proposal) *History {
		h := &History{}
		for _, p := range ps {
			h.Add(p)
		}
		return h
	}
	acked := func(key, sha string, idx uint64) Proposal {
		return Proposal{Key: key, SHA256: sha, Outcome: OutcomeAcked, Index: idx}
	}
	for _, tc := range []struct {
		name  string
		dumps func() map[string]DumpResponse
		h     *History
		check func(t *testing.T, r CheckResult)
	}{
		{"clean", good, history(acked("a", "a", 1), acked("c", "c", 3),
			Proposal{Key: "u", SHA256: "b", Outcome: OutcomeUnknown},
			Proposal{Key: "u2", SHA256: "zz", Outcome: OutcomeUnknown},
			Proposal{Key: "x", SHA256: "x", Outcome: OutcomeNotCommitted}),
			func(t *testing.T, r CheckResult) {
				require.NoError(t, r.Err())
				require.Equal(t, 2, r.Acked)
				require.Equal(t, 2, r.Unknown)
				require.Equal(t, 1, r.UnknownApplied)
				require.Equal(t, 1, r.NotCommitted)
			}},
		{"lost at the index", good, history(acked("z", "z", 2)), func(t *testing.T, r CheckResult) {
			require.Equal(t, 1, r.Lost)
			require.Error(t, r.Err())
		}},
		{"lost beyond the applied index", good, history(acked("d", "d", 4)), func(t *testing.T, r CheckResult) {
			require.Equal(t, 1, r.Lost)
		}},
		{"divergent", func() map[string]DumpResponse {
			d := good()
			d["n1"].Records[1] = rec(2, 1, "B")
			return d
		}, history(), func(t *testing.T, r CheckResult) {
			require.Equal(t, 1, r.Divergent)
		}},
		{"applied twice", func() map[string]DumpResponse {
			d := good()
			d["n1"].Records[2].Count = 2
			return d
		}, history(), func(t *testing.T, r CheckResult) {
			require.Equal(t, 1, r.Duplicated)
		}},
		{"payload at two indexes", func() map[string]DumpResponse {
			recs := []Record{rec(1, 1, "a"), rec(2, 1, "a")}
			return map[string]DumpResponse{"n0": {Applied: 2, Records: recs}}
		}, history(Proposal{Key: "a", SHA256: "a", Outcome: OutcomeUnknown}), func(t *testing.T, r CheckResult) {
			require.Equal(t, 1, r.Duplicated)
		}},
		{"epoch regression", func() map[string]DumpResponse {
			recs := []Record{rec(1, 2, "a"), rec(2, 1, "b")}
			return map[string]DumpResponse{"n0": {Applied: 2, Records: recs}}
		}, history(), func(t *testing.T, r CheckResult) {
			require.Equal(t, 1, r.EpochRegressions)
		}},
		{"gap and short records", func() map[string]DumpResponse {
			recs := []Record{rec(1, 1, "a"), rec(3, 1, "c")}
			return map[string]DumpResponse{"n0": {Applied: 5, Records: recs}}
		}, history(), func(t *testing.T, r CheckResult) {
			require.Equal(t, 3, r.Gaps) // 2, 4, 5
		}},
		{"phantom", good, history(Proposal{Key: "b", SHA256: "b", Outcome: OutcomeNotCommitted}), func(t *testing.T, r CheckResult) {
			require.Equal(t, 1, r.Phantom)
			require.Error(t, r.Err())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := CheckDumps(tc.dumps(), tc.h)
			tc.check(t, r)
			t.Log(r.Summary())
		})
	}
}

// TestCheckDumpsRequests covers the request-id rules: a deduplicated copy
// of a request leaves an index without a record, which only the log can
// justify; an id applied twice, an acknowledged id missing or applied
// elsewhere, and a hole the log does not justify all fail.
func TestCheckDumpsRequests(t *testing.T) {
	const idA, idB, idC = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "cccccccccccccccccccccccccccccccc"
	reqRec := func(index uint64, sha, id string) Record {
		r := rec(index, 1, sha)
		r.RequestID = id
		return r
	}
	// Index 1: request A (payload "a"); 2: plain "b"; 3: a copy of A,
	// skipped; 4: request B ("c"); 5: request C ("d").
	world := func() (map[string]DumpResponse, []LogEntry, []Proposal) {
		recs := []Record{reqRec(1, "a", idA), rec(2, 1, "b"), reqRec(4, "c", idB), reqRec(5, "d", idC)}
		dumps := map[string]DumpResponse{
			"n0": {Applied: 5, Records: recs},
			"n1": {Applied: 5, Records: slices.Clone(recs)},
		}
		log := []LogEntry{
			{Index: 1, Epoch: 1, SHA256: "a", RequestID: idA},
			{Index: 2, Epoch: 1, SHA256: "b"},
			{Index: 3, Epoch: 1, SHA256: "a", RequestID: idA},
			{Index: 4, Epoch: 1, SHA256: "c", RequestID: idB},
			{Index: 5, Epoch: 1, SHA256: "d", RequestID: idC},
		}
		props := []Proposal{
			// A: first attempt unknown, the resend answered Duplicate with
			// the original index.
			{Key: "a", SHA256: "a", RequestID: idA, Outcome: OutcomeAcked, Index: 1, Duplicate: true, Attempts: 2, Unknowns: 1},
			{Key: "b", SHA256: "b", Outcome: OutcomeAcked, Index: 2},
			{Key: "c", SHA256: "c", RequestID: idB, Outcome: OutcomeAcked, Index: 4, Attempts: 1},
			{Key: "d", SHA256: "d", RequestID: idC, Outcome: OutcomeUnknown, Attempts: 20, Unknowns: 20},
		}
		return dumps, log, props
	}
	for _, tc := range []struct {
		name   string
		mutate func(d map[string]DumpResponse, log *[]LogEntry, props *[]Proposal)
		check  func(t *testing.T, r CheckResult)
	}{
		{"clean: the copy at 3 is no gap", nil, func(t *testing.T, r CheckResult) {
			require.NoError(t, r.Err())
			require.Equal(t, 1, r.DedupCopies)
			require.Equal(t, 2, r.Retried)
			require.Equal(t, 1, r.DedupAcks)
			require.Equal(t, 1, r.ResolvedByRetry)
			require.Equal(t, 1, r.UnknownApplied)
		}},
		{"clean: committed at the copy's index", func(_ map[string]DumpResponse, _ *[]LogEntry, props *[]Proposal) {
			(*props)[0].Outcome, (*props)[0].Index, (*props)[0].Duplicate = OutcomeCommitted, 3, false
		}, func(t *testing.T, r CheckResult) {
			require.NoError(t, r.Err())
			require.Equal(t, 1, r.Committed)
		}},
		{"without the log the hole is a gap", func(_ map[string]DumpResponse, log *[]LogEntry, _ *[]Proposal) {
			*log = nil
		}, func(t *testing.T, r CheckResult) {
			require.Equal(t, 2, r.Gaps) // index 3 on both nodes
			require.Zero(t, r.DedupCopies)
			require.Error(t, r.Err())
		}},
		{"hole holding a plain entry", func(_ map[string]DumpResponse, log *[]LogEntry, _ *[]Proposal) {
			(*log)[2].RequestID = ""
		}, func(t *testing.T, r CheckResult) {
			require.Equal(t, 2, r.Gaps)
		}},
		{"hole: a copy with no earlier original", func(d map[string]DumpResponse, log *[]LogEntry, _ *[]Proposal) {
			// The log says 3 repeats D, whose only application is at 5,
			// after it: nothing explains why 3 was skipped.
			(*log)[2] = LogEntry{Index: 3, Epoch: 1, SHA256: "d", RequestID: idC}
		}, func(t *testing.T, r CheckResult) {
			require.Equal(t, 2, r.Gaps)
			require.Zero(t, r.DedupCopies)
		}},
		{"clean: a copy of the id with another payload (a conflict, skipped)", func(d map[string]DumpResponse, log *[]LogEntry, _ *[]Proposal) {
			(*log)[2].SHA256 = "z"
		}, func(t *testing.T, r CheckResult) {
			require.Zero(t, r.Gaps)
			require.Equal(t, 1, r.DedupCopies)
		}},
		{"id applied twice", func(d map[string]DumpResponse, log *[]LogEntry, _ *[]Proposal) {
			// The copy at 3 applied instead of skipped, on both nodes.
			for id, dump := range d {
				dump.Records = slices.Insert(dump.Records, 2, reqRec(3, "a", idA))
				d[id] = dump
			}
		}, func(t *testing.T, r CheckResult) {
			require.Equal(t, 1, r.IDsTwice)
			require.Equal(t, 1, r.AckedIDsNotOnce)
			require.Positive(t, r.Duplicated) // the payload at two indexes, too
			require.Error(t, r.Err())
		}},
		{"id applied twice on one node only", func(d map[string]DumpResponse, log *[]LogEntry, _ *[]Proposal) {
			dump := d["n1"]
			dump.Records = slices.Insert(slices.Clone(dump.Records), 2, reqRec(3, "a", idA))
			d["n1"] = dump
		}, func(t *testing.T, r CheckResult) {
			require.Equal(t, 1, r.IDsTwice)
			require.Equal(t, 1, r.Gaps, "n0 skipped an index n1 applied")
			require.Zero(t, r.DedupCopies)
			require.Error(t, r.Err())
		}},
		{"acked id applied nowhere", func(d map[string]DumpResponse, log *[]LogEntry, props *[]Proposal) {
			*props = append(*props, Proposal{Key: "e", SHA256: "e", RequestID: "eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", Outcome: OutcomeAcked, Index: 5})
		}, func(t *testing.T, r CheckResult) {
			require.Equal(t, 1, r.AckedIDsNotOnce)
			require.Equal(t, 1, r.Lost)
			require.Error(t, r.Err())
		}},
		{"acked id recorded without its id", func(d map[string]DumpResponse, _ *[]LogEntry, _ *[]Proposal) {
			for _, dump := range d {
				dump.Records[2].RequestID = ""
			}
		}, func(t *testing.T, r CheckResult) {
			require.Equal(t, 1, r.AckedIDsNotOnce)
			require.Error(t, r.Err())
		}},
		{"duplicate ack reporting the copy's index", func(_ map[string]DumpResponse, _ *[]LogEntry, props *[]Proposal) {
			(*props)[0].Index = 3 // a Duplicate answer must carry the original's index
		}, func(t *testing.T, r CheckResult) {
			require.Equal(t, 1, r.AckedIDsNotOnce)
			require.Error(t, r.Err())
		}},
		{"committed at an index the log does not show as a copy", func(_ map[string]DumpResponse, log *[]LogEntry, props *[]Proposal) {
			(*props)[0].Outcome, (*props)[0].Index, (*props)[0].Duplicate = OutcomeCommitted, 3, false
			(*log)[2].RequestID = idB
			(*log)[2].SHA256 = "c"
		}, func(t *testing.T, r CheckResult) {
			require.Equal(t, 1, r.AckedIDsNotOnce)
			require.Error(t, r.Err())
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dumps, log, props := world()
			if tc.mutate != nil {
				tc.mutate(dumps, &log, &props)
			}
			h := &History{}
			for _, p := range props {
				h.Add(p)
			}
			r := CheckDumpsLog(dumps, h, log)
			t.Log(r.Summary(), r.Problems)
			tc.check(t, r)
		})
	}
}

func TestParseRequestID(t *testing.T) {
	id := replica.NewRequestID()
	got, err := ParseRequestID(id.String())
	require.NoError(t, err)
	require.Equal(t, id, got)
	for _, bad := range []string{"", "abc", strings.ToUpper(id.String()), id.String() + "0", "zz" + id.String()[2:],
		"00000000000000000000000000000000"} {
		_, err := ParseRequestID(bad)
		require.Error(t, err, "%q", bad)
	}
}

func TestClassify(t *testing.T) {
	for _, tc := range []struct {
		code  string
		index uint64
		want  Outcome
	}{
		{CodeNotPrimary, 0, OutcomeNotCommitted},
		{CodeQueueFull, 0, OutcomeNotCommitted},
		{CodeFenced, 0, OutcomeNotCommitted},
		{CodeCanceled, 0, OutcomeNotCommitted},
		{CodeRoomFull, 0, OutcomeNotCommitted},
		{CodeOutcomeUnknown, 0, OutcomeUnknown},
		{CodeOutcomeUnknown, 7, OutcomeCommitted},
		{CodeNoResponse, 7, OutcomeCommitted},
		{CodeClosed, 0, OutcomeUnknown},
		{CodeInternal, 0, OutcomeUnknown},
		{CodeConflict, 3, OutcomeNotCommitted},
		{CodeBadRequestID, 0, OutcomeNotCommitted},
	} {
		err := &APIError{ErrorResponse: ErrorResponse{Error: tc.code, Index: tc.index}}
		require.Equal(t, tc.want, Classify(ProposeResponse{Index: tc.index}, err), tc.code)
	}
	require.Equal(t, OutcomeAcked, Classify(ProposeResponse{Index: 1}, nil))
}

func TestIndexRanges(t *testing.T) {
	require.Equal(t, "1..3, 5, 7..8", indexRanges([]uint64{1, 2, 3, 5, 7, 8}))
	require.Equal(t, "", indexRanges(nil))
}

package testnode

import (
	"testing"

	"github.com/stretchr/testify/require"
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
	} {
		err := &APIError{ErrorResponse: ErrorResponse{Error: tc.code, Index: tc.index}}
		require.Equal(t, tc.want, Classify(ProposeResponse{Index: tc.index}, err), tc.code)
	}
	require.Equal(t, OutcomeAcked, Classify(ProposeResponse{Index: 1}, nil))
}

package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/testnode"
)

// TestCheckerObservers: rule 10 finds an observer that led (by its status
// or by owning an epoch), one that ran without the flag, one never
// sampled, and one whose final state differs; a clean record passes.
func TestCheckerObservers(t *testing.T) {
	nodes := func(obsHash string) []NodeDump {
		recs := []testnode.Record{{Index: 1, Epoch: 1, Count: 1}, {Index: 2, Epoch: 2, Count: 1}}
		return []NodeDump{
			{ID: "n0", Applied: 2, Hash: "h", HashIndex: 2, Records: recs},
			{ID: "n1", Applied: 2, Hash: "h", HashIndex: 2, Records: recs},
			{ID: "o0", Applied: 2, Hash: obsHash, HashIndex: 2, Records: recs},
		}
	}
	clean := func() ObserverReport {
		return ObserverReport{IDs: []string{"o0"}, Samples: 10, Owners: map[uint64]string{1: "n0", 2: "n1"}}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*ObserverReport)
		hash   string
		want   string // "" : clean
	}{
		{"clean", func(*ObserverReport) {}, "h", ""},
		{"led by status", func(o *ObserverReport) { o.Led = []string{"observer o0 reports role primary (epoch 3)"} }, "h", "observer led: observer o0 reports role primary"},
		{"owns an epoch", func(o *ObserverReport) { o.Owners[3] = "o0" }, "h", "names observer o0 the owner of epoch 3"},
		{"not an observer", func(o *ObserverReport) { o.NotObserver = 4 }, "h", "4 of 10 status samples say the node is not an observer"},
		{"never sampled", func(o *ObserverReport) { o.Samples = 0 }, "h", "no status sample was answered"},
		{"other state", func(*ObserverReport) {}, "x", "observer state: o0 applied 2, hash x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := clean()
			tc.mutate(&o)
			var r Report
			r.AddObservers(o, nodes(tc.hash), ZKLog{})
			require.Equal(t, 1, r.Observers)
			if tc.want == "" {
				require.True(t, r.OK(), "%v", r.Violations)
				require.Zero(t, r.UnseenEpochs)
				require.Equal(t, 2, r.EpochOwners)
				return
			}
			require.False(t, r.OK())
			require.Equal(t, 1, r.ObserverViolations, "%v", r.Violations)
			require.Len(t, r.Violations, 1)
			require.Contains(t, r.Violations[0], tc.want)
		})
	}
	// An epoch of the log the watch never read is counted, not a violation.
	o := clean()
	delete(o.Owners, 2)
	var r Report
	r.AddObservers(o, nodes("h"), ZKLog{})
	require.True(t, r.OK())
	require.Equal(t, 1, r.UnseenEpochs)
	// No observer: nothing to check.
	r = Report{}
	r.AddObservers(ObserverReport{}, nodes("h"), ZKLog{})
	require.True(t, r.OK())
	require.Zero(t, r.Observers)
}

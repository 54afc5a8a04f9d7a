package replica

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestEnqueueElectionAheadOfPublishes: lane 0 runs its jobs in order,
// except that an election read goes ahead of member-data writes still
// queued behind the running job (a takeover's first read must not wait
// for the publishes a role change sets off); it never passes any other
// job, and publishes keep their order.
func TestEnqueueElectionAheadOfPublishes(t *testing.T) {
	names := func(js []zkJob) []string {
		var out []string
		for _, j := range js {
			out = append(out, j.name)
		}
		return out
	}
	for _, tc := range []struct {
		queued []string
		add    string
		want   []string
	}{
		{[]string{"publish", "publish"}, "election", []string{"election", "publish", "publish"}},
		{[]string{"write-transfer", "publish"}, "election", []string{"write-transfer", "election", "publish"}},
		{[]string{"publish", "requeue", "publish"}, "election", []string{"publish", "requeue", "election", "publish"}},
		{[]string{"resign"}, "election", []string{"resign", "election"}},
		{[]string{"election", "publish"}, "publish", []string{"election", "publish", "publish"}},
		{nil, "election", []string{"election"}},
	} {
		lp := &loopState{pending: map[string]int{}}
		lp.running[0] = true // a job is out: nothing starts, the queue is what we see
		for _, n := range tc.queued {
			lp.jobs[0] = append(lp.jobs[0], zkJob{name: n})
		}
		r := &Replica{lp: lp}
		r.enqueue(zkJob{name: tc.add})
		require.Equal(t, tc.want, names(lp.jobs[0]), "queued %v, then %s", tc.queued, tc.add)
		require.Equal(t, 1, lp.pending[tc.add])
	}
}

package replica

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestHashCheckVotes: hashCheck's decisions, pure. Our hashes: index i has
// "h<i>" up to 10; a peer that diverged at 6 publishes "x<i>" from 6 on.
func TestHashCheckVotes(t *testing.T) {
	own := func(i uint64) (string, bool) {
		if i == 0 || i > 10 {
			return "", false
		}
		return "h" + string(rune('0'+i)), true
	}
	good := func(at uint64) hashObs { h, _ := own(at); return hashObs{At: at, Hash: h} }
	bad := func(at uint64) hashObs { return hashObs{At: at, Hash: "x" + string(rune('0'+at))} }
	t0 := time.Unix(1000, 0)
	in := func(now time.Duration, primary bool, peers map[string]hashObs) hashInput {
		return hashInput{Now: t0.Add(now), Self: "me", Primary: primary, Own: hashObs{At: 10, Hash: "h:"}, OwnAt: own, Peers: peers}
	}

	// Majority with us: we report and stay.
	hc := newHashCheck()
	v := hc.evaluate(in(0, false, map[string]hashObs{"a": good(8), "b": bad(7)}))
	require.NoError(t, v.Fail)
	require.Contains(t, v.Report, "minority")
	require.EqualValues(t, 2, hc.compared)
	require.EqualValues(t, 1, hc.mismatches)
	// The same publications again are not compared twice.
	hc.evaluate(in(time.Second, false, map[string]hashObs{"a": good(8), "b": bad(7)}))
	require.EqualValues(t, 2, hc.compared)

	// Minority: we fail, naming both members, the index and both hashes.
	hc = newHashCheck()
	v = hc.evaluate(in(0, true, map[string]hashObs{"a": bad(6), "b": bad(9)}))
	require.ErrorIs(t, v.Fail, ErrDiverged)
	require.Contains(t, v.Fail.Error(), "index 6: member me has h6, member a has x6")

	// Tie with a member behind: wait, then the standby fails and the
	// primary stays.
	for _, primary := range []bool{false, true} {
		hc = newHashCheck()
		peers := map[string]hashObs{"a": bad(6), "b": good(3)}
		v = hc.evaluate(in(0, primary, peers))
		require.NoError(t, v.Fail)
		require.Contains(t, v.Report, "waiting")
		v = hc.evaluate(in(hashDecideWait+time.Millisecond, primary, peers))
		if primary {
			require.NoError(t, v.Fail)
			require.Contains(t, v.Report, "primary stays")
		} else {
			require.ErrorIs(t, v.Fail, ErrDiverged)
		}
	}
	// Tie with a member behind that then votes with us: we stay.
	hc = newHashCheck()
	hc.evaluate(in(0, false, map[string]hashObs{"a": bad(6), "b": good(3)}))
	v = hc.evaluate(in(time.Second, false, map[string]hashObs{"a": bad(6), "b": good(7)}))
	require.NoError(t, v.Fail)

	// Not comparable: another base, ahead of us, or too old to check.
	hc = newHashCheck()
	v = hc.evaluate(in(0, false, map[string]hashObs{
		"a": {At: 6, Base: 4, Hash: "zz"}, "b": {At: 11, Hash: "zz"}, "c": {At: 0, Hash: "zz"}}))
	require.Equal(t, hashVerdict{}, v)
	require.Zero(t, hc.mismatches)

	// A peer that left no longer votes; one that restarted on a new chain
	// is forgotten.
	hc = newHashCheck()
	hc.evaluate(in(0, true, map[string]hashObs{"a": bad(6)}))
	v = hc.evaluate(in(time.Second, false, map[string]hashObs{}))
	require.Equal(t, hashVerdict{}, v)
	v = hc.evaluate(in(time.Second, false, map[string]hashObs{"a": {At: 9, Base: 9, Hash: "new"}}))
	require.Equal(t, hashVerdict{}, v)
}

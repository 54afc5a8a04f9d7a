package replica

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHashCheckVotes: hashCheck's decisions, pure. Our hashes: index i has
// "h<i>" up to 10; a peer that diverged publishes "x<i>" (or "y<i>": a
// second, different divergence).
func TestHashCheckVotes(t *testing.T) {
	own := func(i uint64) (string, bool) {
		if i == 0 || i > 10 {
			return "", false
		}
		return "h" + strconv.Itoa(int(i)), true
	}
	good := func(at uint64, agree ...string) hashObs {
		h, _ := own(at)
		return hashObs{At: at, Hash: h, Agree: agree}
	}
	bad := func(at uint64, agree ...string) hashObs {
		return hashObs{At: at, Hash: "x" + strconv.Itoa(int(at)), Agree: agree}
	}
	other := func(at uint64) hashObs { return hashObs{At: at, Hash: "y" + strconv.Itoa(int(at))} }
	eval := func(hc *hashCheck, primary bool, peers map[string]hashObs) hashVerdict {
		return hc.evaluate(hashInput{Self: "me", Primary: primary, Own: hashObs{At: 10, Hash: "h10"}, OwnAt: own, Peers: peers})
	}

	t.Run("majority with us", func(t *testing.T) {
		hc := newHashCheck()
		v := eval(hc, false, map[string]hashObs{"a": good(8), "b": bad(7)})
		require.NoError(t, v.Fail)
		require.Contains(t, v.Report, "minority")
		require.Equal(t, []string{"a"}, v.Agree)
		require.EqualValues(t, 2, hc.compared)
		require.EqualValues(t, 1, hc.mismatches)
		eval(hc, false, map[string]hashObs{"a": good(8), "b": bad(7)})
		require.EqualValues(t, 2, hc.compared, "a publication is compared once")
	})
	t.Run("outvoted by peers that agree among themselves", func(t *testing.T) {
		hc := newHashCheck()
		v := eval(hc, true, map[string]hashObs{"a": bad(6, "b"), "b": bad(9, "a")})
		require.ErrorIs(t, v.Fail, ErrDiverged)
		require.Contains(t, v.Fail.Error(), "index 6: member me has h6, member a has x6")
		require.Contains(t, v.Fail.Error(), "2 members agree with each other against 1")
	})
	t.Run("two other histories: no majority, nobody fails", func(t *testing.T) {
		hc := newHashCheck()
		v := eval(hc, false, map[string]hashObs{"a": bad(6), "b": other(6)})
		require.NoError(t, v.Fail)
		require.Contains(t, v.Report, "no majority")
	})
	t.Run("a peer behind is undecided: wait", func(t *testing.T) {
		hc := newHashCheck()
		peers := map[string]hashObs{"a": bad(6, "b"), "b": good(11)} // b ahead of our history
		v := eval(hc, false, peers)
		require.NoError(t, v.Fail)
		require.Contains(t, v.Report, "waiting")
		// b reaches a comparable index and agrees with us: we stay, a is
		// in the minority.
		peers["b"] = good(9)
		v = eval(hc, false, peers)
		require.NoError(t, v.Fail)
		require.Contains(t, v.Report, "minority")
	})
	t.Run("room of two", func(t *testing.T) {
		v := eval(newHashCheck(), false, map[string]hashObs{"p": bad(6)})
		require.ErrorIs(t, v.Fail, ErrDiverged)
		require.Contains(t, v.Fail.Error(), "two members disagree and this one is not the primary")
		v = eval(newHashCheck(), true, map[string]hashObs{"s": bad(6)})
		require.NoError(t, v.Fail)
		require.Contains(t, v.Report, "primary of a room of two stays")
		// A peer with nothing comparable yet decides nothing.
		v = eval(newHashCheck(), false, map[string]hashObs{"p": {At: 12, Hash: "zz"}})
		require.Equal(t, hashVerdict{}, v)
	})
	t.Run("a repaired peer that agrees again counts as agreeing", func(t *testing.T) {
		hc := newHashCheck()
		v := eval(hc, true, map[string]hashObs{"x": bad(6)})
		require.NotEmpty(t, v.Report)
		v = eval(hc, false, map[string]hashObs{"x": good(9)}) // bootstrapped from a healthy member
		require.NoError(t, v.Fail)
		require.Empty(t, v.Report)
		require.Equal(t, []string{"x"}, v.Agree)
	})
	t.Run("a peer that left no longer votes", func(t *testing.T) {
		hc := newHashCheck()
		eval(hc, true, map[string]hashObs{"x": bad(6), "a": good(7)})
		v := eval(hc, false, map[string]hashObs{"a": good(7)})
		require.Equal(t, hashVerdict{Agree: []string{"a"}}, v)
		require.NotContains(t, hc.state, "x")
	})
	t.Run("not comparable", func(t *testing.T) {
		hc := newHashCheck()
		v := eval(hc, false, map[string]hashObs{
			"a": {At: 6, Base: 4, Hash: "zz"}, "b": {At: 11, Hash: "zz"}, "c": {At: 3}})
		require.Equal(t, hashVerdict{}, v)
		require.Zero(t, hc.mismatches)
	})
}

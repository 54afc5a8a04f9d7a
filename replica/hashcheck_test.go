package replica

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestHashCheckVotes: hashCheck's decisions, pure. Our hash at index i is
// "h<i>" (up to 20); a peer that diverged publishes "x<i>" (or "y<i>": a
// second, different divergence).
func TestHashCheckVotes(t *testing.T) {
	own := func(i uint64) (string, bool) {
		if i == 0 || i > 20 {
			return "", false
		}
		return "h" + strconv.Itoa(int(i)), true
	}
	h := func(p string, i uint64) string { return p + strconv.Itoa(int(i)) }
	obs := func(p string, at uint64, agree map[string]hashAgreement) hashObs {
		return hashObs{At: at, Hash: h(p, at), Agree: agree}
	}
	good := func(at uint64) hashObs { return obs("h", at, nil) }
	bad := func(at uint64) hashObs { return obs("x", at, nil) }
	// agreeing: peer publishes it agreed with other at index i on history p.
	agreeing := func(o hashObs, other, p string, i uint64) hashObs {
		o.Agree = map[string]hashAgreement{other: {At: i, Hash: h(p, i)}}
		return o
	}
	evalAt := func(hc *hashCheck, ownAt uint64, primary bool, peers map[string]hashObs) hashVerdict {
		return hc.evaluate(hashInput{Self: "me", Primary: primary, Own: hashObs{At: ownAt, Hash: h("h", ownAt)}, OwnAt: own, Peers: peers})
	}
	eval := func(hc *hashCheck, primary bool, peers map[string]hashObs) hashVerdict {
		return evalAt(hc, 10, primary, peers)
	}

	t.Run("majority with us", func(t *testing.T) {
		hc := newHashCheck()
		v := eval(hc, false, map[string]hashObs{"a": good(8), "b": bad(7)})
		require.NoError(t, v.Fail)
		require.Contains(t, v.Report, "minority")
		require.Equal(t, map[string]hashAgreement{"a": {At: 8, Hash: "h8"}}, v.Agree)
		require.EqualValues(t, 2, hc.compared)
		require.EqualValues(t, 1, hc.mismatches)
		eval(hc, false, map[string]hashObs{"a": good(8), "b": bad(7)})
		require.EqualValues(t, 2, hc.compared, "a publication is compared once")
	})
	t.Run("outvoted by peers that agree among themselves on another history", func(t *testing.T) {
		hc := newHashCheck()
		v := eval(hc, true, map[string]hashObs{"a": agreeing(bad(6), "b", "x", 5), "b": bad(9)})
		require.ErrorIs(t, v.Fail, ErrDiverged)
		require.Contains(t, v.Fail.Error(), "index 6: member me has h6, member a has x6")
		require.Contains(t, v.Fail.Error(), "2 members agree with each other against 1")
		require.False(t, v.TwoVerdict)
	})
	t.Run("an agreement from before the divergence proves nothing", func(t *testing.T) {
		// a and b diverged differently after 5; each still publishes that
		// it agreed with the other at 5, when all three agreed.
		hc := newHashCheck()
		v := eval(hc, true, map[string]hashObs{
			"a": agreeing(bad(8), "b", "h", 5),
			"b": agreeing(obs("y", 8, nil), "a", "h", 5)})
		require.NoError(t, v.Fail)
		require.Contains(t, v.Report, "no majority")
	})
	t.Run("two other histories: no majority, nobody fails", func(t *testing.T) {
		hc := newHashCheck()
		v := eval(hc, false, map[string]hashObs{"a": bad(6), "b": obs("y", 6, nil)})
		require.NoError(t, v.Fail)
		require.Contains(t, v.Report, "no majority")
	})
	t.Run("a peer ahead of us is undecided until we get there", func(t *testing.T) {
		hc := newHashCheck()
		peers := map[string]hashObs{"a": agreeing(bad(6), "b", "x", 12), "b": bad(12)}
		v := evalAt(hc, 10, false, peers)
		require.NoError(t, v.Fail)
		require.Contains(t, v.Report, "waiting")
		// b moves on, still ahead; we reach 12: its publication at 12,
		// kept, is compared.
		peers["b"] = bad(15)
		v = evalAt(hc, 12, false, peers)
		require.ErrorIs(t, v.Fail, ErrDiverged)
	})
	t.Run("a lagging member still compares under load", func(t *testing.T) {
		// Every publication of the peer is ahead of us when we see it.
		hc := newHashCheck()
		v := evalAt(hc, 10, false, map[string]hashObs{"p": bad(11)})
		require.Equal(t, hashVerdict{}, v)
		v = evalAt(hc, 12, false, map[string]hashObs{"p": bad(14)})
		require.Len(t, hc.state, 1, "the publication at 11 was compared once we passed it")
		require.False(t, hc.state["p"].agree)
	})
	t.Run("room of two", func(t *testing.T) {
		prim := bad(6)
		prim.Primary = true
		v := eval(newHashCheck(), false, map[string]hashObs{"p": prim})
		require.ErrorIs(t, v.Fail, ErrDiverged)
		require.Contains(t, v.Fail.Error(), "two members disagree and the other one is the primary")
		require.True(t, v.TwoVerdict, "not recorded in the data dir: a third member may only be away")
		// Neither is primary (a takeover under way): nobody fails.
		v = eval(newHashCheck(), false, map[string]hashObs{"s": bad(6)})
		require.NoError(t, v.Fail)
		v = eval(newHashCheck(), true, map[string]hashObs{"s": bad(6)})
		require.NoError(t, v.Fail)
		require.Contains(t, v.Report, "primary of a room of two stays")
		// A peer with nothing comparable yet decides nothing.
		v = eval(newHashCheck(), false, map[string]hashObs{"p": {At: 22, Hash: "zz"}})
		require.Equal(t, hashVerdict{}, v)
	})
	t.Run("a tie the primary's side wins", func(t *testing.T) {
		// Four members: the primary a and b agree with each other on
		// another history; c is stuck behind the divergence (it agreed
		// with us at 5, before it) or has nothing comparable. At best a
		// tie: we stop, and the verdict is not recorded (c may decide).
		prim := agreeing(bad(8), "b", "x", 7)
		prim.Primary = true
		for name, c := range map[string]hashObs{"stuck behind": good(5), "undecided": {At: 22, Hash: "zz"}} {
			v := eval(newHashCheck(), false, map[string]hashObs{"a": prim, "b": bad(8), "c": c})
			require.ErrorIs(t, v.Fail, ErrDiverged, name)
			require.Contains(t, v.Fail.Error(), "the primary's side wins a tie", name)
			require.True(t, v.TwoVerdict, "%s: not recorded in the data dir", name)
		}
		// The primary itself stays on a tie; so does a member whose
		// opponents do not include the primary.
		v := eval(newHashCheck(), true, map[string]hashObs{"a": agreeing(bad(8), "b", "x", 7), "b": bad(8), "c": good(5)})
		require.NoError(t, v.Fail)
		require.Contains(t, v.Report, "no majority")
		v = eval(newHashCheck(), false, map[string]hashObs{"a": agreeing(bad(8), "b", "x", 7), "b": bad(8), "c": good(5)})
		require.NoError(t, v.Fail)
		// Two more members on our side: the primary's is the minority.
		v = eval(newHashCheck(), false, map[string]hashObs{"a": prim, "b": bad(8), "c": good(8), "d": good(9)})
		require.NoError(t, v.Fail)
		require.Contains(t, v.Report, "minority")
		// The primary alone against us and an undecided peer: it could be
		// one against two.
		lone := bad(8)
		lone.Primary = true
		v = eval(newHashCheck(), false, map[string]hashObs{"a": lone, "c": {At: 22, Hash: "zz"}})
		require.NoError(t, v.Fail)
		require.Contains(t, v.Report, "waiting")
	})
	t.Run("outvoted before the others' agreement arrives", func(t *testing.T) {
		// Three members: the primary a and b both disagree with us, but b
		// has not yet published that it agrees with a (or it holds a third
		// history). Most live members disagree with us and the primary is
		// among them: we stop, and the verdict is recorded, as it would be
		// one publication later when b's agreement joins them.
		prim := bad(8)
		prim.Primary = true
		for name, b := range map[string]hashObs{"same history": bad(7), "third history": obs("y", 7, nil)} {
			v := eval(newHashCheck(), false, map[string]hashObs{"a": prim, "b": b})
			require.ErrorIs(t, v.Fail, ErrDiverged, name)
			require.False(t, v.TwoVerdict, "%s: outvoted, recorded in the data dir", name)
		}
	})
	t.Run("a repaired peer that agrees again counts as agreeing", func(t *testing.T) {
		hc := newHashCheck()
		v := eval(hc, true, map[string]hashObs{"x": bad(6)})
		require.NotEmpty(t, v.Report)
		v = eval(hc, false, map[string]hashObs{"x": good(9)}) // bootstrapped from a healthy member
		require.NoError(t, v.Fail)
		require.Empty(t, v.Report)
		require.Contains(t, v.Agree, "x")
	})
	t.Run("a peer repaired in place is not held to its old chain", func(t *testing.T) {
		// A room of two (the integrity simulation's seed 29): we compared
		// the peer's divergent chain at 6. It then got a healthy store
		// without us seeing it leave (a bootstrap in place, or a quick
		// restart): same chain base, a later index, so nothing says its
		// chain is new. We are held at 12 and miss its publications up
		// to there; the next one is ahead of us, it is the primary, and
		// it publishes that it agreed with us at 11 with our own hash.
		// Its chain equals ours at 11, so (cumulative) at 6 too: the
		// disagreement was with a chain it no longer has.
		hc := newHashCheck()
		v := evalAt(hc, 10, true, map[string]hashObs{"p": bad(6)})
		require.Contains(t, v.Report, "primary of a room of two stays")
		repaired := agreeing(good(15), "me", "h", 11)
		repaired.Primary = true
		v = evalAt(hc, 12, false, map[string]hashObs{"p": repaired})
		require.NoError(t, v.Fail, "a healthy standby failed against the repaired primary")
		require.Empty(t, v.Report)
		require.NotContains(t, hc.state, "p", "undecided until we reach its publication")
		v = evalAt(hc, 15, false, map[string]hashObs{"p": repaired})
		require.NoError(t, v.Fail)
		require.Equal(t, map[string]hashAgreement{"p": {At: 15, Hash: "h15"}}, v.Agree)

		// What does not clear a disagreement: an agreement from before it
		// (our hash there too), or one on the peer's own history.
		for name, ag := range map[string]hashObs{
			"before the disagreement": agreeing(bad(15), "me", "h", 5),
			"on its own history":      agreeing(bad(15), "q", "x", 11),
		} {
			hc := newHashCheck()
			evalAt(hc, 10, true, map[string]hashObs{"p": bad(6)})
			ag.Primary = true
			v := evalAt(hc, 12, false, map[string]hashObs{"p": ag})
			require.ErrorIs(t, v.Fail, ErrDiverged, name)
			require.Contains(t, v.Fail.Error(), "index 6: member me has h6, member p has x6", name)
		}
	})
	t.Run("a publication kept ahead is dropped when the peer's new chain jumps past it", func(t *testing.T) {
		// From a review of the fix above: we (a lagging standby at 12)
		// keep the divergent primary's publication at 15. It is repaired
		// in place onto a chain that starts past 15 and publishes 18 with
		// an agreement at 16 carrying our hash: its chain is ours through
		// 15. When we reach 16, the kept publication must not be compared
		// as if it were the current chain (before: ErrDiverged, the room
		// of two's tie rule).
		hc := newHashCheck()
		old := bad(15)
		old.Primary = true
		require.Equal(t, hashVerdict{}, evalAt(hc, 12, false, map[string]hashObs{"p": old}))
		repaired := agreeing(good(18), "me", "h", 16)
		repaired.Primary = true
		require.NoError(t, evalAt(hc, 12, false, map[string]hashObs{"p": repaired}).Fail)
		require.NoError(t, evalAt(hc, 16, false, map[string]hashObs{"p": repaired}).Fail)
	})
	t.Run("a publication kept ahead is dropped when the peer's chain goes back", func(t *testing.T) {
		// The simulation's seed 14075: we keep the peer's divergent
		// publication at 15, ahead of us. It is then bootstrapped in place
		// behind it (same base, index 10): a new chain, even though we
		// never compared the old one. Our store opened at 11, so we cannot
		// check it at 10; when we reach 15, the old chain's publication
		// must not be compared.
		opened := func(i uint64) (string, bool) {
			if i < 11 {
				return "", false
			}
			return own(i)
		}
		at := func(hc *hashCheck, ownAt uint64, primary bool, p hashObs) hashVerdict {
			return hc.evaluate(hashInput{Self: "me", Primary: primary, Own: hashObs{At: ownAt, Hash: h("h", ownAt)}, OwnAt: opened, Peers: map[string]hashObs{"p": p}})
		}
		hc := newHashCheck()
		require.Equal(t, hashVerdict{}, at(hc, 12, true, bad(15)))
		repaired := good(10)
		repaired.Primary = true
		require.Equal(t, hashVerdict{}, at(hc, 12, false, repaired))
		v := at(hc, 15, false, repaired)
		require.NoError(t, v.Fail, "the old chain's publication kept ahead was compared")
		require.Equal(t, hashVerdict{}, v, "undecided: nothing of its new chain we can check yet")
		// The same index with another hash is a new chain too.
		hc = newHashCheck()
		at(hc, 12, true, bad(15))
		at(hc, 12, false, good(15))
		require.Equal(t, good(15), hc.ahead["p"])
	})
	t.Run("a peer that left no longer votes", func(t *testing.T) {
		hc := newHashCheck()
		eval(hc, true, map[string]hashObs{"x": bad(6), "a": good(7)})
		v := eval(hc, false, map[string]hashObs{"a": good(7)})
		require.Equal(t, hashVerdict{Agree: map[string]hashAgreement{"a": {At: 7, Hash: "h7"}}}, v)
		require.NotContains(t, hc.state, "x")
	})
	t.Run("not comparable", func(t *testing.T) {
		hc := newHashCheck()
		v := eval(hc, false, map[string]hashObs{
			"a": {At: 6, Base: 4, Hash: "zz"}, "c": {At: 3}})
		require.Equal(t, hashVerdict{}, v)
		require.Zero(t, hc.mismatches)
	})
}

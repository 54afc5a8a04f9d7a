package replica

import (
	"fmt"
	"sort"
	"strings"
)

// The integrity check (package doc, "Integrity"): every member publishes
// its running state hash (store.RunHash) with its member data, and
// compares what its peers publish at indexes it has applied. hashCheck is
// the decision, pure: the loop feeds it the peers' publications and a
// lookup of our own hashes, and it says whether this member is the one
// that diverged.

// hashObs is one member's published running hash: the hash (hex, the
// first 16 bytes of store.RunHash.Sum) at index At of a chain that started
// at Base; the peers whose latest comparable hash it found equal to its
// own, each with the index and hash they agreed at (Agree); and whether it
// is the primary.
type hashObs struct {
	At, Base uint64
	Hash     string
	Agree    map[string]hashAgreement
	Primary  bool
}

// hashAgreement is one agreement a member publishes: its peer's hash at
// At equalled its own, Hash. It is a comparison others can check: if Hash
// is not their own hash at At, both members share a history that is not
// theirs.
type hashAgreement struct {
	At   uint64 `msgpack:"at"`
	Hash string `msgpack:"hash"`
}

func (o hashObs) same(p hashObs) bool { return o.At == p.At && o.Base == p.Base && o.Hash == p.Hash }

// hashVerdict is what one evaluation found.
type hashVerdict struct {
	// Fail: this member is provably in the minority (or, in a room of two,
	// the one that is not primary): it must stop (ErrDiverged) and never
	// lead.
	Fail error
	// Report: a peer disagrees with this member, which stays (it is not
	// provably in the minority, yet). Empty when nothing disagrees.
	Report string
	// Agree: the peers whose latest comparable hash equals ours, with the
	// index and hash of that comparison; published with our member data so
	// that others can tell which of them agree among themselves.
	Agree map[string]hashAgreement
	// TwoVerdict: Fail came from the primary settling a tie (the standby
	// of a room of two that disagree; in a larger room, the primary's side
	// at least as large as ours could become), not from being outvoted:
	// it says nothing about this member's state if another member is only
	// away, so it is not recorded in the data dir. A tie verdict while
	// most live members disagree with this one (all of them, when the
	// others' agreement among themselves has not arrived yet) is an
	// outvote and is recorded.
	TwoVerdict bool
}

// peerState is what the latest comparison with one peer found.
type peerState struct {
	agree       bool
	at          uint64
	mine, their string
}

// hashCheck compares this member's running hashes with its peers'. The
// run loop owns it; a new store (a bootstrap replaced our chain) needs a
// new hashCheck.
type hashCheck struct {
	// compared counts comparisons made (a peer's publication at an index
	// this member had the hash of), mismatches those that differed.
	compared, mismatches uint64
	// done: the last publication compared, per peer (each is compared
	// once).
	done map[string]hashObs
	// state: per live peer, its latest comparison. The chain is
	// cumulative, so a peer that disagreed keeps disagreeing; one that
	// agrees again replaced its chain (a repaired member bootstrapped from
	// a healthy one), and only its latest comparison counts. A
	// disagreement is dropped when the peer publishes an agreement that
	// proves its chain was replaced (replacedInPlace).
	state map[string]peerState
	// ahead: per peer, the oldest publication seen ahead of our applied
	// index and not compared yet: compared once we reach it, so a member
	// that lags behind every publication under load still compares (each
	// peer publishes its newest index only).
	ahead map[string]hashObs
	// last: per peer, the publication seen at the last evaluation. A
	// member's applied index only grows on one chain, so a publication of
	// another base, a lower index, or another hash at the same index is a
	// new chain (its store was replaced), whether or not we compared the
	// earlier one.
	last map[string]hashObs
	// bugs: planted bugs (simhash_test.go); always zero in production.
	bugs hashBugs
}

// hashBugs plants a bug in the vote, to prove that the integrity
// simulation's checks can fail (TestSimulationIntegrityFindsPlantedBugs).
// Always zero outside that test.
type hashBugs struct {
	tieToStandby     bool // a tie goes to the standby's side: the primary fails
	undecidedAgainst bool // undecided peers counted against us, not as possibly ours
	keepStale        bool // a peer's comparisons kept when it leaves or comes back on a new chain
	agreeUnchecked   bool // disagreeing peers joined on any published agreement, one with our history too
	noJoin           bool // disagreeing peers never joined (their agreement among themselves ignored)
	recordTie        bool // a tie's verdict recorded as an outvote
	keepReplaced     bool // a disagreement kept after the peer's chain was replaced in place
	onlyCompared     bool // a new chain told only from the publication last compared (one kept ahead survives it)
}

func newHashCheck() *hashCheck {
	return &hashCheck{done: map[string]hashObs{}, state: map[string]peerState{}, ahead: map[string]hashObs{}, last: map[string]hashObs{}}
}

// hashInput is one evaluation's facts.
type hashInput struct {
	Self    string
	Primary bool // this member is the primary
	// Own: this member's current hash (At = its applied index), and a
	// lookup of its hash at an earlier index (false: not kept).
	Own   hashObs
	OwnAt func(index uint64) (string, bool)
	// Peers: the latest member data of every other live member (Hash ""
	// for one that publishes none).
	Peers map[string]hashObs
}

// evaluate compares the peers' new publications and decides.
//
// The vote: our group is this member and the peers whose latest
// comparison agreed; the other groups are the peers that disagree with
// us, joined where one published an agreement with another that we can
// check is not with our history (a peer's Agree). Peers with nothing
// comparable yet (behind, ahead of our history, another chain base, no
// hash) are undecided. This member fails only when some other group is
// larger than ours would be even if every undecided peer joined us, or
// when, not being the primary, the primary's group is at least as large
// as ours would be (a tie at best, which the primary's side wins: the log
// cannot say which state is right, and the primary's is what clients
// read; in a room of two that disagree, the standby fails). Anything else
// is a report, re-evaluated as publications arrive: a divergence with no
// majority and the primary not on the larger side (three members with
// three histories) is not this member's to settle, and the operator sees
// it (Status, metrics, log).
func (hc *hashCheck) evaluate(in hashInput) hashVerdict {
	for id := range hc.state {
		if _, live := in.Peers[id]; !live && !hc.bugs.keepStale {
			hc.forget(id)
		}
	}
	for id := range hc.done {
		if _, live := in.Peers[id]; !live && !hc.bugs.keepStale {
			hc.forget(id)
		}
	}
	for id := range hc.ahead {
		if _, live := in.Peers[id]; !live && !hc.bugs.keepStale {
			hc.forget(id)
		}
	}
	for id := range hc.last {
		if _, live := in.Peers[id]; !live {
			delete(hc.last, id)
		}
	}
	for id, o := range in.Peers {
		// A new chain (restarted without it, restored, or bootstrapped
		// in place behind where it was): what we compared or kept ahead
		// was the old one's.
		prev, ok := hc.last[id]
		if hc.bugs.onlyCompared {
			prev, ok = hc.done[id]
		}
		if ok && (o.Base != prev.Base || o.At < prev.At || (o.At == prev.At && o.Hash != prev.Hash)) && !hc.bugs.keepStale {
			hc.forget(id)
		}
		hc.last[id] = o
		if o.Hash == "" || o.Base != in.Own.Base {
			continue // not comparable
		}
		if hc.replacedInPlace(id, o, in) && !hc.bugs.keepReplaced {
			hc.forget(id) // a new chain of the same base, past where the old one was
		}
		// A publication kept from when it was ahead of us, once we got
		// there; then the newest, or keep it until we get there.
		if a, ok := hc.ahead[id]; ok && (a.Base != o.Base || a.At <= in.Own.At) {
			delete(hc.ahead, id)
			if a.Base == o.Base {
				hc.compare(id, a, in)
				// The kept publication may be the old chain's: one the
				// current publication proves replaced (an agreement
				// carrying our hash at or past where it disagreed) is
				// dropped at once, before the vote.
				if hc.replacedInPlace(id, o, in) && !hc.bugs.keepReplaced {
					hc.forget(id)
				}
			}
		}
		if o.At > in.Own.At {
			if _, ok := hc.ahead[id]; !ok {
				hc.ahead[id] = o
			}
			continue
		}
		hc.compare(id, o, in)
	}

	var agreeing, disagreeing, undecided []string
	for id := range in.Peers {
		st, ok := hc.state[id]
		switch {
		case !ok:
			undecided = append(undecided, id)
		case st.agree:
			agreeing = append(agreeing, id)
		default:
			disagreeing = append(disagreeing, id)
		}
	}
	sort.Strings(agreeing)
	sort.Strings(disagreeing)
	sort.Strings(undecided)
	v := hashVerdict{}
	if len(agreeing) > 0 {
		v.Agree = make(map[string]hashAgreement, len(agreeing))
		for _, id := range agreeing {
			v.Agree[id] = hashAgreement{At: hc.state[id].at, Hash: hc.state[id].mine}
		}
	}
	if len(disagreeing) == 0 {
		return v
	}
	// The other groups: disagreeing peers joined by published agreement.
	group := map[string]string{} // id -> group root
	var find func(string) string
	find = func(id string) string {
		if r, ok := group[id]; ok && r != id {
			root := find(r)
			group[id] = root
			return root
		}
		return id
	}
	isDis := map[string]bool{}
	for _, id := range disagreeing {
		isDis[id], group[id] = true, id
	}
	// Two disagreeing peers join only on a comparison we can check: one
	// published that the other's hash at some index equalled its own, and
	// that hash is not ours at that index. Then both differ from us there
	// and share one history. An agreement from before the divergence (our
	// hash too) or one we cannot check proves nothing.
	for _, id := range disagreeing {
		for other, ag := range in.Peers[id].Agree {
			if !isDis[other] || hc.bugs.noJoin {
				continue
			}
			if mine, ok := in.OwnAt(ag.At); hc.bugs.agreeUnchecked || (ok && mine != ag.Hash) {
				group[find(id)] = find(other)
			}
		}
	}
	sizes := map[string]int{}
	largest := 0
	for _, id := range disagreeing {
		r := find(id)
		sizes[r]++
		largest = max(largest, sizes[r])
	}
	ours := 1 + len(agreeing)
	// The primary's group, when the primary is among those that disagree
	// with us (0: it is not).
	primSide := 0
	for _, id := range disagreeing {
		if in.Peers[id].Primary {
			primSide = sizes[find(id)]
		}
	}

	// The report names the lowest index a disagreeing peer was compared at.
	first := disagreeing[0]
	for _, id := range disagreeing {
		if hc.state[id].at < hc.state[first].at {
			first = id
		}
	}
	fs := hc.state[first]
	what := fmt.Sprintf("running state hash at index %d: member %s has %s, member %s has %s (agreeing with %s: %s; disagreeing: %s; undecided: %s)",
		fs.at, in.Self, fs.mine, first, fs.their, in.Self, orNone(agreeing), strings.Join(disagreeing, ", "), orNone(undecided))
	fail := func(why string) hashVerdict {
		v.Fail = fmt.Errorf("%w: %s; %s: this member stops and cannot become primary "+
			"(its Applier or its state differs from the others': compare them, then replace its data dir from a healthy member)",
			ErrDiverged, what, why)
		return v
	}
	switch {
	case largest > ours+len(undecided) || (hc.bugs.undecidedAgainst && largest+len(undecided) > ours):
		return fail(fmt.Sprintf("%d members agree with each other against %d on this one's side (itself included)", largest, ours))
	case len(in.Peers) == 1 && len(undecided) == 0 && !in.Primary && in.Peers[disagreeing[0]].Primary:
		v.TwoVerdict = !hc.bugs.recordTie
		return fail("the room's two members disagree and the other one is the primary")
	case hc.bugs.tieToStandby && in.Primary && largest >= ours+len(undecided):
		v.TwoVerdict = true
		return fail("the standby's side wins a tie")
	case primSide > 0 && !in.Primary && primSide >= ours+len(undecided):
		// A tie at best: the primary's side is at least as large as ours
		// would be with every undecided peer on it. The log cannot say
		// which state is right; the primary's is what clients read.
		// When most live members disagree with us (the primary's side
		// and peers whose agreement with it has not arrived yet, or a
		// third history), we are outvoted all the same: recorded.
		v.TwoVerdict = len(disagreeing) <= ours+len(undecided) && !hc.bugs.recordTie
		return fail(fmt.Sprintf("%d members on the primary's side (the primary included) agree with each other against %d on this one's side "+
			"(itself included), %d undecided: at best a tie, and the primary's side wins a tie", primSide, ours, len(undecided)))
	case largest < ours:
		v.Report = what + "; they are in the minority"
	case len(undecided) > 0:
		v.Report = what + "; waiting for the undecided members"
	case len(in.Peers) == 1:
		v.Report = what + "; the primary of a room of two stays"
	default:
		v.Report = what + "; no majority: an operator must decide which history is right"
	}
	return v
}

// compare compares publication o of peer id with our hash at its index,
// once.
func (hc *hashCheck) compare(id string, o hashObs, in hashInput) {
	if prev, ok := hc.done[id]; ok && prev.same(o) {
		return // compared already
	}
	hc.done[id] = o
	mine, ok := in.OwnAt(o.At)
	if !ok {
		return // applied too long ago: cannot be checked
	}
	hc.compared++
	st := peerState{agree: mine == o.Hash, at: o.At, mine: mine, their: o.Hash}
	if !st.agree {
		hc.mismatches++
	}
	hc.state[id] = st
}

// replacedInPlace reports whether peer id, recorded as disagreeing with us
// at index st.at, publishes (o.Agree) an agreement at an index at or past
// st.at whose hash is ours there. Each agreement carries the publisher's
// own hash at that index, so its chain equalled ours there; chains are
// cumulative, so that chain equals ours at st.at too and is not the one we
// compared: it was replaced by one of the same base at a later index (a
// bootstrap in place, or a quick restart we did not see it leave), which
// the new-chain check in evaluate cannot tell. Forgetting it is safe: it
// only turns a peer that votes against us into an undecided one, so it
// can delay a verdict, never cause one; and a chain that does differ from
// ours is compared again at its next publication we reach and disagrees
// there (cumulative again). A divergent peer cannot clear a real
// disagreement this way: only a chain equal to ours through st.at carries
// our hash past it (short of a SHA-256 collision); an agreement from
// before the disagreement is our hash too and is not taken. A publication
// that carries agreements from the peer's previous store (published in
// the moment between its bootstrap and its next vote) can at worst drop
// the disagreement until we compare its current chain.
func (hc *hashCheck) replacedInPlace(id string, o hashObs, in hashInput) bool {
	st, ok := hc.state[id]
	if !ok || st.agree {
		return false
	}
	for _, ag := range o.Agree {
		if ag.At < st.at {
			continue
		}
		if mine, ok := in.OwnAt(ag.At); ok && mine == ag.Hash {
			return true
		}
	}
	return false
}

// forget drops what was recorded about peer id.
func (hc *hashCheck) forget(id string) {
	delete(hc.done, id)
	delete(hc.state, id)
	delete(hc.ahead, id)
}

func orNone(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}

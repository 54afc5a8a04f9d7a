package replica

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// The integrity check (package doc, "Integrity"): every member publishes
// its running state hash (store.RunHash) with its member data, and
// compares what its peers publish at indexes it has applied. hashCheck is
// the decision, pure: the loop feeds it the peers' publications and a
// lookup of our own hashes, and it says whether this member is the one
// that diverged.

// hashObs is one member's published running hash: the hash (hex, the
// first 16 bytes of store.RunHash.Sum) at index At of a chain that started
// at Base.
type hashObs struct {
	At, Base uint64
	Hash     string
}

// hashDecideWait bounds how long a member that disagrees with as many
// peers as agree with it waits for the members that have not reached the
// index yet before it decides by role.
const hashDecideWait = 2 * time.Second

// hashVerdict is what one evaluation found.
type hashVerdict struct {
	// Fail: this member is in the minority (or, in a tie, not the
	// primary): it must stop (ErrDiverged) and never lead.
	Fail error
	// Report: a peer disagrees with this member, which stays (the peer is
	// in the minority, or this member is the primary in a tie). Empty when
	// nothing disagrees.
	Report string
}

// hashCheck compares this member's running hashes with its peers'. The
// run loop owns it.
type hashCheck struct {
	// compared counts comparisons made (a peer's publication at an index
	// this member had the hash of), mismatches those that differed.
	compared, mismatches uint64
	// done: the last publication compared, per peer (a publication is
	// compared once).
	done map[string]hashObs
	// agreeAt and disagreeAt: per peer, the highest index it agreed with
	// us at, and the lowest index it disagreed at (0: never).
	agreeAt    map[string]uint64
	disagreeAt map[string]uint64
	theirs     map[string]string // their hash at disagreeAt
	// firstMismatch: when the first disagreement was found (decision
	// deadline for a tie with members still behind).
	firstMismatch time.Time
}

func newHashCheck() *hashCheck {
	return &hashCheck{done: map[string]hashObs{}, agreeAt: map[string]uint64{},
		disagreeAt: map[string]uint64{}, theirs: map[string]string{}}
}

// hashInput is one evaluation's facts.
type hashInput struct {
	Now     time.Time
	Self    string
	Primary bool // this member is the primary
	// Own: this member's current hash (At = its applied index), and a
	// lookup of its hash at an earlier index (false: not kept).
	Own   hashObs
	OwnAt func(index uint64) (string, bool)
	// Peers: the latest publication of every other live member (a member
	// publishing no hash is absent).
	Peers map[string]hashObs
}

// evaluate compares the peers' new publications and decides.
func (hc *hashCheck) evaluate(in hashInput) hashVerdict {
	for id, o := range in.Peers {
		if prev, ok := hc.done[id]; ok && (o.Base != prev.Base || o.At < prev.At) {
			hc.forget(id) // a new chain (restarted without it, or restored)
		}
		if o.Hash == "" || o.Base != in.Own.Base || o.At > in.Own.At || hc.done[id] == o {
			continue // not comparable, not reached yet, or compared already
		}
		mine, ok := in.OwnAt(o.At)
		if !ok {
			hc.done[id] = o // applied too long ago: cannot be checked
			continue
		}
		hc.done[id] = o
		hc.compared++
		if mine == o.Hash {
			if o.At > hc.agreeAt[id] {
				hc.agreeAt[id] = o.At
			}
			continue
		}
		hc.mismatches++
		if d := hc.disagreeAt[id]; d == 0 || o.At < d {
			hc.disagreeAt[id], hc.theirs[id] = o.At, o.Hash
		}
		if hc.firstMismatch.IsZero() {
			hc.firstMismatch = in.Now
		}
	}
	// The lowest index a live peer disagreed at: the votes are about it.
	// A peer that agreed with us at that index or later agrees (the chain
	// is cumulative); one that disagreed is against; any other (behind it,
	// or not comparable) has not voted yet.
	at, against := uint64(0), ""
	for id := range in.Peers {
		d := hc.disagreeAt[id]
		if d != 0 && (at == 0 || d < at || (d == at && id < against)) {
			at, against = d, id
		}
	}
	if at == 0 {
		return hashVerdict{}
	}
	agree, disagree, unknown := 1, 0, 0
	var agreeing, disagreeing []string
	for id := range in.Peers {
		switch {
		case hc.disagreeAt[id] != 0:
			disagree++
			disagreeing = append(disagreeing, id)
		case hc.agreeAt[id] >= at:
			agree++
			agreeing = append(agreeing, id)
		default:
			unknown++
		}
	}
	sort.Strings(agreeing)
	sort.Strings(disagreeing)
	mine, _ := in.OwnAt(at)
	what := fmt.Sprintf("running state hash at index %d: member %s has %s, member %s has %s (agreeing with %s: %s; disagreeing: %s)",
		at, in.Self, mine, against, hc.theirs[against], in.Self, orNone(agreeing), strings.Join(disagreeing, ", "))
	fail := func(why string) hashVerdict {
		return hashVerdict{Fail: fmt.Errorf("%w: %s; %s: this member stops and cannot become primary "+
			"(its Applier or its state differs from the others': compare them, then replace its data dir from a healthy member)",
			ErrDiverged, what, why)}
	}
	switch {
	case agree < disagree:
		return fail(fmt.Sprintf("%d of %d members that reached it agree with it", agree, agree+disagree))
	case agree > disagree:
		return hashVerdict{Report: what + "; they are in the minority"}
	case unknown > 0 && in.Now.Sub(hc.firstMismatch) < hashDecideWait:
		return hashVerdict{Report: what + "; waiting for the members behind it"}
	case !in.Primary:
		return fail("as many members disagree as agree, and it is not the primary")
	default:
		return hashVerdict{Report: what + "; the primary stays in a tie"}
	}
}

// forget drops what was recorded about peer id.
func (hc *hashCheck) forget(id string) {
	delete(hc.done, id)
	delete(hc.agreeAt, id)
	delete(hc.disagreeAt, id)
	delete(hc.theirs, id)
}

func orNone(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(ids, ", ")
}

package replica

import (
	"flag"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The integrity simulation: 2–5 members apply one shared log, each with a
// running hash chain, and every one of them runs the real vote
// (hashCheck.evaluate) on its own view of the others' member data, as the
// loop's checkHashes does. A seed draws the rest:
//
//   - divergent Appliers: none, or one or more members whose Applier skews
//     one entry (a fork index and a flavor; members with the same fork and
//     flavor share one divergent history, as a version skew would; two
//     flavors at one fork are a third history);
//   - members apply at their own pace (lag behind, run ahead of the
//     others' publications, get stuck before an index for a while) and
//     publish their hash, hash_at, hash_base, hash_agree and role at their
//     own pace (and at once when their role or the set of peers they agree
//     with changes);
//   - each member sees each peer's publications in order, late, skipping
//     some (lost: superseded before it read them), at its own time; a
//     member that sees a peer gone evaluates while it is away (a restart
//     lasts many loop ticks), and misses a departure only when the peer
//     came back at once (a quick restart);
//   - members restart (a new hashCheck, the window of past hashes from the
//     restart on, as store.runHashes keeps it), with their store, or
//     bootstrapped from a healthy peer's checkpoint (its chain base;
//     behind or ahead of where they were), or on a store written without
//     the running hash (a new chain base: comparable with nobody else); a
//     lagging member bootstraps in place (a new store, no departure). A
//     member on a divergent history repaired without a departure its peers
//     see (in place, or a quick restart) keeps its chain base and moves to
//     a later index, so its peers cannot tell its new chain from the old
//     one by base and index (-simhash.repairinplace=false: it gets a chain
//     of another base instead);
//   - the primary changes, steps down, and is missing for a while;
//   - a member that fails leaves (a failed replica deletes its member
//     znode); the operator later repairs it (a recorded verdict: its data
//     dir replaced by a healthy peer's checkpoint; a tie's: a restart).
//
// The hashes are readable strings with the chain's semantics ("b<base>.<i>"
// on the healthy history, "b<base>.<fork><flavor>.<i>" past a skewed
// entry): two chains of one base are equal at an index exactly when the
// same entries had the same effects up to it. Each member keeps the hashes
// of its last simHashWindow entries since its store opened (the store keeps
// 16384: scaled down, so that comparisons out of the window happen).
//
// Every publication carries, for the checks only, the history its
// publisher's state was on (healthy, or its fork), and after every
// evaluation the verdict is checked against those histories over the
// members the evaluating member sees (V: itself and its live peers; same:
// those on its history). From the package doc's "Integrity":
//
//  1. a member with the majority's state never fails (same > |V|/2): a
//     divergent minority never outvotes it;
//  2. the primary never fails on a tie (in a room of two that disagree,
//     the standby fails);
//  3. a tie (same = |V|/2) fails a member only when the primary it sees
//     is on the other side;
//  4. a verdict is recorded (TwoVerdict false: an outvote) only when most
//     of V disagree with the member;
//  5. no majority: when every fork in V is at one index (histories that
//     split once), a member fails only when another history has more
//     members than its own, or, not being the primary, the primary's
//     history has at least as many (three members, three histories and no
//     primary: nobody fails, reports only);
//  6. naming: every simHashCalmEvery steps the room calms down (members
//     catch up to the log's end, publish, read everything, evaluate, until
//     nothing changes for three rounds, at most simHashCalmRounds); then
//     every member that the doc's rule puts in the minority (another
//     history larger than its own with the undecided, or, not being the
//     primary, the primary's at least as large) has failed.
//
// Known limit, checked as stated: a member that bootstraps from a
// divergent member's checkpoint inherits its history (package doc); the
// simulation bootstraps from healthy members only. Known limit, not
// checked: a chain replaced in place whose evidence lies behind a peer's
// window of hashes (simHashRepairInPlace).
//
// A failing seed prints its trace; rerun one seed with
//
//	go test ./replica -run 'TestSimulationIntegrity$' -simhash.seed=N -v
var (
	simHashSeeds = flag.Int("simhash.seeds", 600, "how many random seeds TestSimulationIntegrity runs")
	simHashSeed  = flag.Uint64("simhash.seed", 0, "run only this seed of TestSimulationIntegrity (0: all)")
	simHashSteps = flag.Int("simhash.steps", 400, "steps per seed of TestSimulationIntegrity")
	// simHashRepairInPlace: let a member on a divergent history get a
	// healthy store without a departure its peers see (a bootstrap in
	// place, or a quick restart). The new chain has the old base and a
	// later index, so hashCheck's new-chain check does not fire; a peer
	// that lags behind its new publications must drop the disagreement it
	// compared on the old chain when the repaired member publishes an
	// agreement with our hash past it (replacedInPlace), and a member that
	// kept an old-chain publication ahead of it must drop it when the new
	// chain's index is lower (hashCheck.last). Before those rules a
	// healthy member failed (seed 29: a room of two, the healthy standby
	// failed against the repaired primary, planted bug keepReplaced; seed
	// 14075: the old chain's publication kept ahead was compared, planted
	// bug onlyCompared). Known limit, not checked: a peer whose only
	// evidence of the new chain (its publications and agreements past the
	// disagreement) lies behind our window of hashes keeps the old chain's
	// disagreement (package doc); with this simulation's window of 16 that
	// fails seeds 53965 and 58241 of the first 200000 (the store's window
	// is 16384 entries). false: such a repair gets a chain of another base.
	simHashRepairInPlace = flag.Bool("simhash.repairinplace", true, "let a divergent member be repaired without a departure its peers see (false: it gets a new chain base)")
)

const (
	simHashWindow     = 16  // hashes a member keeps (store: 16384)
	simHashCalmEvery  = 100 // steps between calm stretches
	simHashCalmRounds = 12  // at most, per calm stretch
)

// shFork is a history: the entry a member's Applier skewed and how (fork
// 0: the healthy history).
type shFork struct {
	at     uint64
	flavor byte
}

func (f shFork) String() string {
	if f.at == 0 {
		return "healthy"
	}
	return fmt.Sprintf("fork %d%c", f.at, f.flavor)
}

// shHash is the hash at index i of a chain started at base whose Applier
// skews entry poison.at.
func shHash(base uint64, poison shFork, i uint64) string {
	if poison.at != 0 && i >= poison.at {
		return fmt.Sprintf("b%d.%d%c.%d", base, poison.at, poison.flavor, i)
	}
	return fmt.Sprintf("b%d.%d", base, i)
}

// shPub is one publication of a member's data (gone: its member znode
// was deleted).
type shPub struct {
	gone    bool
	quick   bool    // gone: back at once (a quick restart)
	obs     hashObs // At, Base, Hash, Agree
	primary bool
	epoch   uint64
	hist    shFork // for the checks: the publisher's history at obs.At
}

func (p shPub) String() string {
	if p.gone {
		return "gone"
	}
	role := "standby"
	if p.primary {
		role = fmt.Sprintf("primary@%d", p.epoch)
	}
	ag := make([]string, 0, len(p.obs.Agree))
	for _, id := range slices.Sorted(maps.Keys(p.obs.Agree)) {
		a := p.obs.Agree[id]
		ag = append(ag, fmt.Sprintf("%s@%d=%s", id, a.At, a.Hash))
	}
	return fmt.Sprintf("at %d base %d hash %q %s agree [%s] (%s)", p.obs.At, p.obs.Base, p.obs.Hash, role, strings.Join(ag, " "), p.hist)
}

type shMember struct {
	id string
	// up: running with its member znode; failed: stopped by the vote
	// (recorded: the verdict is in its data dir).
	up, failed, recorded bool
	primary              bool
	epoch                uint64
	// The store: its chain's base, applied index, and the index it opened
	// (or was bootstrapped) at: it keeps the hashes from there on, the
	// last simHashWindow of them.
	base, applied, opened uint64
	poison                shFork // the entry its Applier skews (at 0: none)
	stuck                 bool   // cannot apply (held before an entry)
	hc                    *hashCheck
	agree                 map[string]hashAgreement
	pubs                  []shPub
	seen                  map[string]int // per peer: how many of its publications it read
}

// hist is the history m's state is on.
func (m *shMember) hist() shFork {
	if m.poison.at != 0 && m.applied >= m.poison.at {
		return m.poison
	}
	return shFork{}
}

func (m *shMember) hash() string { return shHash(m.base, m.poison, m.applied) }

// hashAt is the loop's OwnAt: the store's runHashes.at.
func (m *shMember) hashAt(i uint64) (string, bool) {
	if i == 0 || i > m.applied || i < m.opened || i+simHashWindow <= m.applied {
		return "", false
	}
	return shHash(m.base, m.poison, i), true
}

type hashSim struct {
	fail  func(string)
	seed  uint64
	rnd   *rand.Rand
	bugs  hashBugs
	step  int
	trace []simLine
	ms    []*shMember
	end   uint64 // the log's last index
	epoch uint64

	// What the seed exercised.
	evals, fails, recorded, ties, reports, noMajority, named int
	bootstraps, rebases, restarts, repairs, calms            int
	inPlace                                                  int // divergent members repaired without a departure seen
}

func (s *hashSim) logf(format string, args ...any) {
	s.trace = append(s.trace, simLine{s.step, format, args})
}

func (s *hashSim) fatalf(format string, args ...any) {
	tail := s.trace
	if len(tail) > 250 {
		tail = tail[len(tail)-250:]
	}
	lines := make([]string, len(tail))
	for i, l := range tail {
		lines[i] = l.String()
	}
	s.fail(fmt.Sprintf("seed %d step %d: %s\n(replay: go test ./replica -run 'TestSimulationIntegrity$' -simhash.seed=%d -v)\nmembers: %s\ntrace (last %d lines):\n%s",
		s.seed, s.step, fmt.Sprintf(format, args...), s.seed, s.members(), len(lines), strings.Join(lines, "\n")))
}

func (s *hashSim) members() string {
	var b []string
	for _, m := range s.ms {
		st := "up"
		switch {
		case m.failed && m.recorded:
			st = "failed (recorded)"
		case m.failed:
			st = "failed (tie)"
		case !m.up:
			st = "down"
		}
		if m.primary {
			st += " primary"
		}
		b = append(b, fmt.Sprintf("%s %s applied %d base %d opened %d poison %s (%s)", m.id, st, m.applied, m.base, m.opened, m.poison, m.hist()))
	}
	return strings.Join(b, "; ")
}

func newHashSim(fail func(string), seed uint64, bugs hashBugs) *hashSim {
	s := &hashSim{fail: fail, seed: seed, rnd: rand.New(rand.NewPCG(seed, 0x4a54)), bugs: bugs}
	n := 2 + s.rnd.IntN(4)
	for i := range n {
		s.ms = append(s.ms, &shMember{id: fmt.Sprintf("m%d", i+1), seen: map[string]int{}})
	}
	// Divergent Appliers: none in a quarter of the seeds.
	if s.rnd.IntN(4) != 0 {
		k := 1 + s.rnd.IntN(n)
		if k == n && s.rnd.IntN(2) == 0 {
			k = n - 1
		}
		fork := uint64(3 + s.rnd.IntN(40))
		oneFlavor := s.rnd.IntN(2) == 0
		for _, i := range s.rnd.Perm(n)[:k] {
			p := shFork{at: fork, flavor: 'a'}
			if !oneFlavor {
				p.flavor = "abc"[s.rnd.IntN(3)]
			}
			if s.rnd.IntN(3) == 0 {
				p.at = uint64(3 + s.rnd.IntN(40))
			}
			s.ms[i].poison = p
		}
	}
	for _, m := range s.ms {
		s.logf("%s: Applier skews %s", m.id, m.poison)
		s.start(m, false)
	}
	s.elect()
	return s
}

// live are the members running (not failed, not down).
func (s *hashSim) live() []*shMember {
	var out []*shMember
	for _, m := range s.ms {
		if m.up {
			out = append(out, m)
		}
	}
	return out
}

func (s *hashSim) pick(ms []*shMember) *shMember {
	if len(ms) == 0 {
		return nil
	}
	return ms[s.rnd.IntN(len(ms))]
}

func (s *hashSim) publish(m *shMember, why string) {
	p := shPub{obs: hashObs{At: m.applied, Base: m.base, Hash: m.hash(), Agree: m.agree}, primary: m.primary, epoch: m.epoch, hist: m.hist()}
	if m.applied == 0 {
		p.obs.Hash = "" // nothing applied: nothing to compare
	}
	m.pubs = append(m.pubs, p)
	s.logf("%s publishes (%s): %v", m.id, why, p)
}

func (s *hashSim) leave(m *shMember, why string) {
	m.up, m.primary = false, false
	m.pubs = append(m.pubs, shPub{gone: true})
	s.logf("%s leaves (%s)", m.id, why)
}

// start opens m's store as it is (or bootstrapped first) and joins: a new
// hashCheck, the window from here on, everyone's current member data read.
func (s *hashSim) start(m *shMember, rebase bool) {
	m.up, m.failed, m.recorded, m.stuck = true, false, false, false
	m.hc = newHashCheck()
	m.hc.bugs = s.bugs
	m.agree = nil
	m.opened = m.applied
	if rebase {
		m.base = m.applied
		s.rebases++
	}
	for _, p := range s.ms {
		if p != m {
			m.seen[p.id] = len(p.pubs)
		}
	}
	s.publish(m, "joins")
}

// bootstrap replaces m's store with a healthy member's checkpoint (its
// chain base, an index at or behind its applied one); newBase: only from a
// member whose chain base differs from m's. false: no member to take it
// from.
func (s *hashSim) bootstrap(m *shMember, newBase bool) bool {
	var srcs []*shMember
	for _, p := range s.live() {
		if p != m && p.hist().at == 0 && p.applied > 0 && (!newBase || p.base != m.base) {
			srcs = append(srcs, p)
		}
	}
	src := s.pick(srcs)
	if src == nil {
		return false
	}
	k := src.applied - min(uint64(s.rnd.IntN(6)), src.applied-src.base)
	if k == 0 {
		k = src.applied
	}
	s.logf("%s bootstraps from %s's checkpoint at %d (base %d; it was at %d base %d, %s)", m.id, src.id, k, src.base, m.applied, m.base, m.hist())
	m.base, m.applied, m.opened = src.base, k, k
	if m.poison.at != 0 && m.poison.at <= k {
		m.poison = shFork{} // past the entry its Applier skews
	}
	s.bootstraps++
	return true
}

// elect makes a running member the primary (a new epoch).
func (s *hashSim) elect() {
	for _, m := range s.ms {
		if m.primary {
			return
		}
	}
	m := s.pick(s.live())
	if m == nil {
		return
	}
	s.epoch++
	m.primary, m.epoch = true, s.epoch
	s.logf("%s becomes primary (epoch %d)", m.id, s.epoch)
	s.publish(m, "role")
}

func (s *hashSim) primary() *shMember {
	for _, m := range s.ms {
		if m.primary {
			return m
		}
	}
	return nil
}

// deliver: o reads p's member data up to a later publication (all: the
// newest), skipping some, and a departure only when p came back at once.
// A member that sees a peer gone evaluates while it is away.
func (s *hashSim) deliver(o, p *shMember, all bool) {
	n := o.seen[p.id]
	if n >= len(p.pubs) {
		return
	}
	to := len(p.pubs)
	if !all && s.rnd.IntN(2) == 0 {
		to = n + 1 + s.rnd.IntN(len(p.pubs)-n)
	}
	for i := n; i < to; i++ {
		// A departure is read (and evaluated on) unless the member came
		// back at once (a quick restart: the observer's next read already
		// shows it again).
		if p.pubs[i].gone && (i == to-1 || !p.pubs[i].quick || s.rnd.IntN(2) == 0) {
			to = i + 1
			break
		}
	}
	o.seen[p.id] = to
	if p.pubs[to-1].gone {
		s.logf("%s sees %s gone", o.id, p.id)
		s.evaluate(o)
	}
}

// evaluate runs the real vote on m's view, as checkHashes does, and checks
// the verdict.
func (s *hashSim) evaluate(m *shMember) {
	if m == nil || !m.up {
		return
	}
	view := map[string]shPub{}
	primID, primEpoch := "", uint64(0)
	if m.primary {
		primID, primEpoch = m.id, m.epoch
	}
	for _, p := range s.ms {
		n := m.seen[p.id]
		if p == m || n == 0 || p.pubs[n-1].gone {
			continue
		}
		d := p.pubs[n-1]
		view[p.id] = d
		// primaryOf: the highest epoch, then the lowest ID.
		if d.primary && (primID == "" || d.epoch > primEpoch || (d.epoch == primEpoch && p.id < primID)) {
			primID, primEpoch = p.id, d.epoch
		}
	}
	peers := make(map[string]hashObs, len(view))
	for id, d := range view {
		o := d.obs
		o.Primary = id == primID
		peers[id] = o
	}
	own := hashObs{At: m.applied, Base: m.base, Hash: m.hash()}
	v := m.hc.evaluate(hashInput{Self: m.id, Primary: m.primary, Own: own, OwnAt: m.hashAt, Peers: peers})
	s.evals++
	s.check(m, view, primID, v)
	changed := !slices.Equal(slices.Sorted(maps.Keys(v.Agree)), slices.Sorted(maps.Keys(m.agree)))
	m.agree = v.Agree
	if v.Report != "" {
		s.reports++
		if strings.Contains(v.Report, "no majority") {
			s.noMajority++
		}
	}
	if v.Fail != nil {
		s.fails++
		if v.TwoVerdict {
			s.ties++
		} else {
			s.recorded++
		}
		s.logf("%s FAILS (recorded %v): %v", m.id, !v.TwoVerdict, v.Fail)
		m.failed, m.recorded = true, !v.TwoVerdict
		s.leave(m, "failed")
		return
	}
	if changed {
		s.publish(m, "agreement changed")
	}
}

// check: the invariants 1–5 on a verdict.
func (s *hashSim) check(m *shMember, view map[string]shPub, primID string, v hashVerdict) {
	if v.Fail == nil {
		return
	}
	mine := m.hist()
	size, same := 1+len(view), 1
	count := map[shFork]int{mine: 1}
	forks := map[uint64]bool{}
	if mine.at != 0 {
		forks[mine.at] = true
	}
	var sides []string
	for _, id := range slices.Sorted(maps.Keys(view)) {
		h := view[id].hist
		count[h]++
		if h == mine {
			same++
		}
		if h.at != 0 {
			forks[h.at] = true
		}
		sides = append(sides, fmt.Sprintf("%s %s", id, h))
	}
	primHist, primOther := shFork{}, false
	if d, ok := view[primID]; ok {
		primHist, primOther = d.hist, d.hist != mine
	}
	what := fmt.Sprintf("%s (%s, primary %v) failed: %v\nits view: %s; primary it sees: %q", m.id, mine, m.primary, v.Fail, strings.Join(sides, ", "), primID)
	switch {
	case 2*same > size:
		s.fatalf("integrity: a member with the majority's state failed (%d of %d on its history): %s", same, size, what)
	case m.primary && 2*same == size:
		s.fatalf("integrity: the primary failed on a tie (%d of %d on its history): %s", same, size, what)
	case 2*same == size && !primOther:
		s.fatalf("integrity: a tie went to the side without the primary (%d of %d on its history): %s", same, size, what)
	}
	if !v.TwoVerdict && 2*(size-same) <= size {
		s.fatalf("integrity: an outvote recorded without being outvoted (%d of %d disagree): %s", size-same, size, what)
	}
	if len(forks) <= 1 {
		larger := false
		for h, c := range count {
			larger = larger || (h != mine && c > same)
		}
		if !larger && !(primOther && !m.primary && count[primHist] >= same) {
			s.fatalf("integrity: a member failed with no majority against it and no primary's side as large (no majority: reports only): %s", what)
		}
	}
}

// calm: the room calms down; then check invariant 6.
func (s *hashSim) calm() {
	s.calms++
	s.logf("calm stretch: members catch up to %d, publish, read everything, evaluate", s.end)
	for _, m := range s.ms {
		m.stuck = false
		if !m.up && !m.failed {
			s.start(m, false)
		}
	}
	quiet := 0
	for round := 0; round < simHashCalmRounds && quiet < 3; round++ {
		s.elect()
		fails := s.fails
		for _, m := range s.live() {
			if m.applied != s.end {
				m.applied = s.end
			}
			s.publish(m, "calm")
		}
		for _, o := range s.live() {
			for _, p := range s.ms {
				for p != o && o.up && o.seen[p.id] < len(p.pubs) {
					s.deliver(o, p, true) // stops at each departure
				}
			}
		}
		for _, i := range s.rnd.Perm(len(s.ms)) {
			s.evaluate(s.ms[i])
		}
		if s.fails == fails {
			quiet++
		} else {
			quiet = 0
		}
	}
	if s.end == 0 {
		return
	}
	live := s.live()
	for _, d := range live {
		ours, undecided, largest := 1, 0, 0
		groups := map[string]int{}
		primGroup := ""
		for _, p := range live {
			switch {
			case p == d:
			case p.base != d.base:
				undecided++
			case p.hash() == d.hash():
				ours++
			default:
				groups[p.hash()]++
				largest = max(largest, groups[p.hash()])
				if p.primary {
					primGroup = p.hash()
				}
			}
		}
		tie := !d.primary && primGroup != "" && groups[primGroup] >= ours+undecided
		if largest > ours+undecided || tie {
			s.fatalf("integrity: a divergent member in the minority was not named after a calm stretch: %s (%s, base %d, primary %v) stays with %d on its side, %d undecided, %d on the largest other history (primary's: %d)",
				d.id, d.hist(), d.base, d.primary, ours, undecided, largest, groups[primGroup])
		}
	}
	for _, m := range s.ms {
		if m.failed && m.hist().at != 0 {
			s.named++
		}
	}
}

func (s *hashSim) run(steps int) {
	for s.step = 1; s.step <= steps; s.step++ {
		s.stepOnce()
		if s.step%simHashCalmEvery == 0 {
			s.calm()
		}
	}
}

// comeBack: a restarting member opens its store as it is, bootstrapped
// from a healthy member, or (its state healthy) on a store written without
// the running hash. quick: it left a moment ago (a peer may miss that it
// left): a divergent one then comes back on its store, or bootstrapped on
// another chain base (see simHashRepairInPlace).
func (s *hashSim) comeBack(m *shMember, quick bool) {
	divergent := m.hist().at != 0
	newBase := quick && divergent && !*simHashRepairInPlace
	switch r := s.rnd.IntN(6); {
	case r <= 1 && m.hist().at == 0:
		s.logf("%s restarts on a store written without the running hash", m.id)
		s.start(m, true)
	case r <= 3 && s.bootstrap(m, newBase):
		if quick && divergent && !newBase {
			s.inPlace++
		}
		s.start(m, false)
	default:
		s.start(m, false)
	}
}

func (s *hashSim) stepOnce() {
	live := s.live()
	var running []*shMember
	for _, m := range live {
		if !m.stuck {
			running = append(running, m)
		}
	}
	switch r := s.rnd.IntN(100); {
	case r < 12: // the primary appends
		if p := s.primary(); p != nil {
			s.end += uint64(1 + s.rnd.IntN(3))
			s.logf("%s appends: the log ends at %d", p.id, s.end)
		}
	case r < 35: // a member applies
		if m := s.pick(running); m != nil && m.applied < s.end {
			m.applied = min(s.end, m.applied+uint64(1+s.rnd.IntN(4)))
			s.logf("%s applies to %d (%s)", m.id, m.applied, m.hist())
		}
	case r < 50: // a member publishes
		if m := s.pick(live); m != nil {
			s.publish(m, "its pace")
		}
	case r < 72: // a member reads a peer's data
		if o, p := s.pick(live), s.pick(s.ms); o != nil && o != p {
			s.deliver(o, p, false)
		}
	case r < 90: // a member's loop ticks
		s.evaluate(s.pick(live))
	case r < 92: // a member restarts (it leaves first; a quick restart comes back at once)
		if m := s.pick(live); m != nil {
			s.restarts++
			s.leave(m, "restarting")
			if s.rnd.IntN(3) == 0 {
				m.pubs[len(m.pubs)-1].quick = true
				s.comeBack(m, true)
			}
		}
	case r < 95: // a member that was restarting comes back
		var down []*shMember
		for _, m := range s.ms {
			if !m.up && !m.failed {
				down = append(down, m)
			}
		}
		if m := s.pick(down); m != nil {
			s.comeBack(m, false)
		}
	case r < 96: // a lagging member bootstraps in place (a new store)
		m := s.pick(live)
		divergent := m != nil && m.hist().at != 0
		newBase := divergent && !*simHashRepairInPlace
		if m != nil && m.applied+8 <= s.end && s.bootstrap(m, newBase) {
			if divergent && !newBase {
				s.inPlace++
			}
			m.hc = newHashCheck()
			m.hc.bugs = s.bugs
			m.agree = nil
		}
	case r < 97: // the operator repairs a failed member
		var failed []*shMember
		for _, m := range s.ms {
			if m.failed {
				failed = append(failed, m)
			}
		}
		if m := s.pick(failed); m != nil {
			// A recorded verdict: Open refuses until the data dir is
			// replaced. A tie's: a restart on the same store.
			if !m.recorded || s.bootstrap(m, false) {
				s.repairs++
				s.start(m, false)
			}
		}
	case r < 99: // the primary changes or steps down
		if p := s.primary(); p != nil {
			p.primary = false
			s.logf("%s steps down", p.id)
			s.publish(p, "role")
		}
		if s.rnd.IntN(3) != 0 {
			s.elect()
		}
	default: // a member is held before an entry, or released
		if m := s.pick(live); m != nil {
			m.stuck = !m.stuck
			s.logf("%s stuck: %v", m.id, m.stuck)
		}
	}
}

// TestSimulationIntegrity runs -simhash.seeds seeds of -simhash.steps steps.
func TestSimulationIntegrity(t *testing.T) {
	fail := func(msg string) { t.Fatal(msg) }
	if *simHashSeed != 0 {
		s := newHashSim(fail, *simHashSeed, hashBugs{})
		s.run(*simHashSteps)
		if testing.Verbose() {
			lines := make([]string, len(s.trace))
			for i, l := range s.trace {
				lines[i] = l.String()
			}
			t.Log(strings.Join(lines, "\n"))
		}
		return
	}
	seeds := *simHashSeeds
	if os.Getenv("SIMHASH_SEEDS") != "" {
		seeds, _ = strconv.Atoi(os.Getenv("SIMHASH_SEEDS"))
	}
	var tot hashSim
	for seed := uint64(1); seed <= uint64(seeds); seed++ {
		s := newHashSim(fail, seed, hashBugs{})
		s.run(*simHashSteps)
		tot.evals += s.evals
		tot.fails += s.fails
		tot.recorded += s.recorded
		tot.ties += s.ties
		tot.reports += s.reports
		tot.noMajority += s.noMajority
		tot.named += s.named
		tot.bootstraps += s.bootstraps
		tot.rebases += s.rebases
		tot.restarts += s.restarts
		tot.repairs += s.repairs
		tot.calms += s.calms
		tot.inPlace += s.inPlace
	}
	t.Logf("%d seeds: %d evaluations, %d failures (%d recorded, %d ties), %d reports (%d with no majority), %d divergent members failed at a calm stretch's end (summed over stretches), "+
		"%d bootstraps, %d new chain bases, %d restarts, %d repairs, %d divergent members repaired in place, %d calm stretches",
		seeds, tot.evals, tot.fails, tot.recorded, tot.ties, tot.reports, tot.noMajority, tot.named, tot.bootstraps, tot.rebases, tot.restarts, tot.repairs, tot.inPlace, tot.calms)
	// The simulation must exercise what it checks.
	require.Positive(t, tot.recorded)
	require.Positive(t, tot.ties)
	require.Positive(t, tot.noMajority)
	require.Positive(t, tot.named)
	require.Positive(t, tot.bootstraps)
	require.Positive(t, tot.rebases)
	require.Positive(t, tot.repairs)
	if *simHashRepairInPlace {
		require.Positive(t, tot.inPlace)
	}
}

// TestSimulationIntegrityFindsPlantedBugs plants one bug at a time in the
// vote and requires the integrity simulation to find it, naming the
// invariant it broke.
func TestSimulationIntegrityFindsPlantedBugs(t *testing.T) {
	for _, tc := range []struct {
		name string
		bugs hashBugs
		want string
		from uint64 // the first seed searched (0: 1): for a bug only a rare schedule shows
	}{
		{"the tie goes to the standby", hashBugs{tieToStandby: true}, "the primary failed on a tie", 0},
		{"undecided peers counted against us", hashBugs{undecidedAgainst: true}, "integrity: a member with the majority's state failed", 0},
		{"a peer's stale comparison kept after it left or bootstrapped", hashBugs{keepStale: true}, "integrity: a member with the majority's state failed", 0},
		{"Agree not checked against our history", hashBugs{agreeUnchecked: true}, "no majority: reports only", 0},
		{"the others' agreement among themselves ignored", hashBugs{noJoin: true}, "was not named after a calm stretch", 0},
		{"a tie's verdict recorded", hashBugs{recordTie: true}, "an outvote recorded without being outvoted", 0},
		{"a disagreement kept after the peer's chain was replaced in place", hashBugs{keepReplaced: true}, "integrity: a member with the majority's state failed", 0},
		// A divergent member repaired in place behind a publication its
		// peer kept ahead, its new chain out of the peer's window: the
		// first such seed of 20000 is 14075.
		{"a new chain told only from the publication last compared", hashBugs{onlyCompared: true}, "integrity: a member with the majority's state failed", 14075},
	} {
		t.Run(tc.name, func(t *testing.T) {
			found := ""
			from := max(tc.from, 1)
			for seed := from; seed < from+1000 && found == ""; seed++ {
				func() {
					defer func() {
						if r := recover(); r != nil && r != errPlantedFound {
							panic(r)
						}
					}()
					s := newHashSim(func(msg string) { found = msg; panic(errPlantedFound) }, seed, tc.bugs)
					s.run(*simHashSteps)
				}()
			}
			require.NotEmpty(t, found, "the planted bug was not found in 1000 seeds")
			first := strings.SplitN(found, "\n", 2)[0]
			require.Contains(t, first, tc.want)
			t.Logf("found: %s", first)
			require.Contains(t, found, "-simhash.seed=", "a failure names its seed for replay")
		})
	}
}

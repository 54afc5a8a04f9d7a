package replica

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
)

// The session renewal mode: go-zookeeper renewing an expired session
// takes time. A client that reconnects after its session expired (cut off
// past the session timeout, or expired by the servers while connected)
// learns the expiry on that connection and opens a new session on a later
// one, after its reconnect pauses and whatever else delays it. In the
// main run both come at the same instant (reconnect, expire); here the
// member is told StateExpired at once and gets its new session
// (StateHasSession with the new id) only after a delay drawn from the
// seed, from none up to three session timeouts (past the core's refusal
// bound, refusedAfter: the bound alone does not cover it). Meanwhile
// nothing of the member reaches ZooKeeper, and its cut-off probes, new
// sessions from its host, reach the room (evProbed Reached). The
// invariant (sim.do, aFail): a member told StateExpired since its last
// disconnect is never failed with ErrSessionRefused.
//
// Not modelled: a renewal cut short or stretched by a fault of its own
// (a disconnect during it changes nothing; a rollback ends it at once);
// the new session's handshake failing.

// simRenewMax is the longest renewal: three session timeouts.
const simRenewMax = 3 * 4 * time.Second

// newRenewSim is the simulation in the session renewal mode. The renewal
// delays come from a stream of their own.
func newRenewSim(fail func(string), seed uint64, bugs simBugs) *sim {
	s := newSim(fail, seed, bugs)
	s.renew, s.rnrnd = true, rand.New(rand.NewPCG(seed, 0x4e4e))
	return s
}

// startRenewal: m reconnected and learned that its session expired; it
// gets a new one after a delay (at once for one renewal in eight).
func (s *sim) startRenewal(m *simMember) {
	d := time.Duration(0)
	if s.rnrnd.IntN(8) != 0 {
		d = time.Duration(s.rnrnd.Int64N(int64(simRenewMax/time.Millisecond))+1) * time.Millisecond
	}
	s.renewals++
	m.candidate = ""
	m.renewing, m.renewAt, m.renewProbeAt = true, s.now.Add(d), time.Time{}
	m.pending = append(m.pending, evSession{Now: s.now, State: zk.StateExpired, SessionID: 0})
	s.logf("%s session 0x%x expired: go-zookeeper opens a new one at %v (in %v)", m.id, m.sid, m.renewAt, d)
	// The loop hears of the expiry now: its select takes the client's
	// event within a turn, while a probe that reaches the room takes a
	// round trip. m's session events are stepped at once, in order (the
	// order deliver keeps), ahead of its other pending events.
	for {
		i := slices.IndexFunc(m.pending, func(ev any) bool { _, ok := ev.(evSession); return ok })
		if i < 0 {
			break
		}
		ev := m.pending[i].(evSession)
		m.pending = append(m.pending[:i], m.pending[i+1:]...)
		ev.Now = s.now
		s.stepCore(m, ev)
	}
	s.renewDue(m)
}

// renewDue opens m's new session once its renewal is over.
func (s *sim) renewDue(m *simMember) {
	if !m.renewing || s.now.Before(m.renewAt) {
		return
	}
	if !m.renewProbeAt.IsZero() && s.now.Sub(m.renewProbeAt) >= m.c.refusedAfter() {
		s.renewLong++
	}
	m.renewing, m.connected = false, true
	m.sid = s.zk.open()
	m.pending = append(m.pending, evSession{Now: s.now, State: zk.StateHasSession, SessionID: m.sid})
	s.logf("%s renewed: new session 0x%x", m.id, m.sid)
}

// renewProbe notes a cut-off probe that reaches the room while m renews.
func (s *sim) renewProbe(m *simMember) {
	if m.renewProbeAt.IsZero() {
		m.renewProbeAt = s.now
	}
}

// simRenewSeeds is how many seeds TestSimulationSessionRenewal runs.
const simRenewSeeds = 300

// TestSimulationSessionRenewal runs the invariants of sim_test.go with
// session renewals that take time (newRenewSim). Rerun one seed with
//
//	go test ./replica -run TestSimulationSessionRenewal -sim.seed=N -v
func TestSimulationSessionRenewal(t *testing.T) {
	first, last := uint64(1), uint64(simRenewSeeds)
	if *simSeed != 0 {
		first, last = *simSeed, *simSeed
	}
	var renewals, long, refusedFailed int
	for seed := first; seed <= last; seed++ {
		s := newRenewSim(func(msg string) { t.Fatal(msg) }, seed, simBugs{})
		s.run(*simSteps)
		if *simSeed != 0 && testing.Verbose() {
			t.Log(strings.Join(s.lines(-1), "\n"))
		}
		renewals += s.renewals
		long += s.renewLong
		refusedFailed += s.refusedFailed
	}
	t.Logf("%d seeds: %d session renewals, %d with probes reaching the room for the refusal bound or longer; %d members failed as refused (refused sessions)",
		last-first+1, renewals, long, refusedFailed)
	if *simSeed == 0 {
		require.Positive(t, renewals)
		require.Positive(t, long, "renewals outlast the refusal bound while probes reach the room")
	}
}

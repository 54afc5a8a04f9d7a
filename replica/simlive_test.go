package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	elect "github.com/roomlog/roomlog/recipe/election"
)

// Crash detection in the simulation (liveness.go, through its pure
// decisions). Every process of a member has an election guid (carried in
// its candidate node's data) and serves its liveness endpoint at the
// member's address from listenAt on. A standby computes the candidate it
// watches with livenessTargetOf, from its own view of the line (the names
// it last read in an election evaluation) and of the member data (a copy
// refreshed now and then: stale in between). Its watcher holds the stream
// and probes (liveStep, at each reconcile of the member, in three steps
// apart: follow a target, probe it, act on the evidence); what a probe of
// the address returns is drawn from the world:
//
//   - the process at the address is dead and nothing listens yet (the
//     member was killed and its new process is starting): refused, or,
//     for a member behind a TCP proxy, hung up;
//   - the address's process is partitioned from its peers (or paused): a
//     timeout;
//   - a proxy in front of it resets connections while it lives (the
//     forged proof, a wrong one): hung up;
//   - otherwise it answers, naming its process's guid (another guid when
//     the member restarted: the address reused by another process).
//
// decideLiveness classifies it; livenessDeposes decides, on the target the
// member watches by then, whether to depose; deposeOps is carried out
// against the model's tree in the standby's session and classifyDepose
// reads the reply. The deposer then looks up the deposed member's node at
// each tick (the model: held by the live session of the member's oldest
// process, a killed one's until it expires) and decideDeposeVerdict judges
// it against deposeDeadline. Checked:
//
//   - a deposition deletes exactly the candidate node the standby observed
//     (never the one the line holds by then: a successor's, a requeued
//     one);
//   - only a dead process's candidate is deposed, unless the proof was the
//     forged kind (a proxy resetting connections in front of the live
//     process);
//   - a deposition counted wrong deposed a process that was alive; one
//     counted right deposed a process that is dead or whose session ended;
//   - a killed primary in a calm room is deposed by the next in line
//     before its session expires (the point of crash detection);
//   - with the rest of the simulation's checks: a live primary wrongly
//     deposed stops acting as primary within a few of its reconciles
//     (checkDeposedTerm) and nothing it acknowledges is missing from the
//     log (the new primary's epoch fences it).

// simLive is a member's process identity and its liveness watcher.
type simLive struct {
	guid     string    // this process's election guid (a new one per process)
	listenAt time.Time // its liveness endpoint answers from then on
	// The address's faults: until partitionedUntil a probe times out;
	// until resetUntil a proxy resets every connection to it.
	partitionedUntil, resetUntil time.Time
	// What the member's loop last read: the line (its election view) and
	// the member data (nil: none read yet).
	view    electionView
	members map[string]memberData
	// gen counts the reads of either; target (ok) is livenessTargetOf's
	// answer on them, computed at read tgen.
	gen, tgen int
	target    livenessTarget
	ok        bool
	// probe: the watcher's target and what a probe of it found (nil: no
	// target).
	probe *simProbe
}

// simProbe is the watcher's state for one target.
type simProbe struct {
	target livenessTarget
	probed bool // a probe ran: ev is its evidence
	ev     livenessEvidence
	forged bool   // the probe met a proxy resetting connections in front of the live target
	detail string // what the probe found, for the trace
}

// simGhost is a killed process whose session the servers have not yet
// expired: its ephemerals (its candidate, its member node) stay until
// then.
type simGhost struct {
	id, guid string
	sid      int64
	role     string
	epoch    uint64
	expireAt time.Time
	// calm: killed at the end of a calm stretch, with a standby to watch
	// it (the crash detection check); candidate its node.
	calm      bool
	candidate string
}

// simDeposal is a deposition whose verdict is pending.
type simDeposal struct {
	by, byGUID string // the deposer (its process)
	target     livenessTarget
	at         time.Time
	deadline   time.Time
	alive      bool // the deposed process was alive
	forged     bool
}

// simAddr is a member's advertised address (the same for each of its
// processes).
func simAddr(id string) string { return id + ":7070" }

// newGUID names a new process.
func (s *sim) newGUID() string {
	s.guids++
	return fmt.Sprintf("g%d", s.guids)
}

// member returns the member of that id (nil: none).
func (s *sim) member(id string) *simMember {
	for _, m := range s.ms {
		if m.id == id {
			return m
		}
	}
	return nil
}

// procAlive: the process of that guid runs.
func (s *sim) procAlive(guid string) bool {
	for _, m := range s.ms {
		if m.lv.guid == guid {
			return true
		}
	}
	return false
}

// simCandidateData is what a member's candidate node holds in the model: the
// member's id and its process's guid (the real node carries the guid in
// its name, the address in its data).
func simCandidateData(m *simMember) []byte { return []byte(m.id + " " + m.lv.guid) }

// readLine is what m's election evaluation read: the line, as the recipe
// reports it (Candidates in order, each with its id, address, node name,
// guid and session).
func (s *sim) readLine(m *simMember, names []string) {
	v := electionView{mine: -1}
	for _, n := range names {
		p := simElection + "/" + n
		nd := s.zk.nodes[p]
		if nd == nil {
			continue
		}
		id, guid, _ := strings.Cut(string(nd.data), " ")
		c := elect.Candidate{ID: id, Data: []byte(simAddr(id)), Node: n, GUID: guid, Session: nd.owner}
		if p == m.candidate {
			v.mine = len(v.cands)
		}
		v.cands = append(v.cands, c)
	}
	v.leader = v.mine == 0
	m.lv.view = v
	m.lv.gen++
}

// opening: m's process is in Open, which does no ZooKeeper work of the
// loop: until it listens, and while a killed process of its id still
// holds the member node (membership.join waits for it to go).
func (s *sim) opening(m *simMember) bool {
	if s.now.Before(m.lv.listenAt) {
		return true
	}
	for _, g := range s.ghosts {
		if g.id == m.id && s.zk.sessions[g.sid] {
			return true
		}
	}
	return false
}

// memberDataNow is what the member nodes say now: a live session holds
// each (a killed process's until it expires, then its successor's).
func (s *sim) memberDataNow() map[string]memberData {
	out := map[string]memberData{}
	for _, g := range s.ghosts {
		if s.zk.sessions[g.sid] {
			if _, dup := out[g.id]; !dup {
				out[g.id] = memberData{ID: g.id, Addr: simAddr(g.id), Role: g.role, Epoch: g.epoch}
			}
		}
	}
	for _, m := range s.ms {
		if _, dup := out[m.id]; dup || !s.zk.sessions[m.sid] {
			continue
		}
		d := memberData{ID: m.id, Addr: simAddr(m.id), Role: roleStrStandby}
		if m.term != nil {
			d.Role, d.Epoch = roleStrPrimary, m.term.epoch
		}
		out[m.id] = d
	}
	return out
}

// memberNode is a lookup of id's member node: exists, and its ephemeral
// owner.
func (s *sim) memberNode(id string) (bool, int64) {
	for _, g := range s.ghosts {
		if g.id == id && s.zk.sessions[g.sid] {
			return true, g.sid
		}
	}
	if m := s.member(id); m != nil && s.zk.sessions[m.sid] {
		return true, m.sid
	}
	return false, 0
}

// liveTarget is updateLiveTarget's choice for m (ok false: none): a
// standby that may lead watches what livenessTargetOf returns on its view.
func (s *sim) liveTarget(m *simMember) (livenessTarget, bool) {
	if m.c.role != RoleStandby || m.c.failed || m.lv.members == nil {
		return livenessTarget{}, false
	}
	v, mem := m.lv.view, m.lv.members
	if !s.bugs.liveWatchSuccessor {
		if m.lv.tgen != m.lv.gen {
			m.lv.target, m.lv.ok = livenessTargetOf(v, m.id, mem)
			m.lv.tgen = m.lv.gen
		}
		return m.lv.target, m.lv.ok
	}
	// The bug: the member behind the next in line watches the next in
	// line (the primary's successor), and the next in line watches
	// nobody.
	for _, c := range v.cands {
		if c.ID == m.id {
			continue
		}
		if _, ok := livenessTargetOf(v, c.ID, mem); !ok {
			continue
		}
		prim, _ := primaryOf(mem)
		seen := false
		for _, d := range v.cands {
			if d.Node == c.Node {
				seen = true
				continue
			}
			if _, live := mem[d.ID]; seen && live && d.ID != c.ID && d.ID != prim.ID {
				if d.ID == m.id {
					return livenessTarget{ID: c.ID, Addr: string(c.Data), Node: c.Node, GUID: c.GUID, Session: c.Session}, true
				}
				break
			}
		}
		break
	}
	return livenessTarget{}, false
}

// probeWorld draws what a probe of t's address returns: the request's
// error, or the guid the responder names; forged when the proof is a
// proxy's reset in front of the live target.
func (s *sim) probeWorld(t livenessTarget) (err error, guid string, forged bool) {
	o := s.member(t.ID)
	u := "http://" + t.Addr + "/room/liveness"
	switch {
	case o == nil:
		return &url.Error{Op: "Get", URL: u, Err: context.DeadlineExceeded}, "", false
	case s.now.Before(o.lv.listenAt):
		if s.proxied[o.id] {
			return &url.Error{Op: "Get", URL: u, Err: io.EOF}, "", false
		}
		return &url.Error{Op: "Get", URL: u, Err: &net.OpError{Op: "dial", Net: "tcp", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}}, "", false
	case s.now.Before(o.lv.partitionedUntil):
		return &url.Error{Op: "Get", URL: u, Err: context.DeadlineExceeded}, "", false
	case s.now.Before(o.lv.resetUntil):
		return &url.Error{Op: "Get", URL: u, Err: &net.OpError{Op: "read", Net: "tcp", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}}, "", o.lv.guid == t.GUID
	}
	return nil, o.lv.guid, false
}

// classifyProbe is decideLiveness, with the planted bug that counts a
// timeout as proof.
func (s *sim) classifyProbe(err error, t livenessTarget, guid string) livenessEvidence {
	ev := decideLiveness(err, t, guid)
	if s.bugs.liveTimeoutProof && ev == evidenceNone && errors.Is(err, context.DeadlineExceeded) {
		ev = evidenceHungUp
	}
	return ev
}

// liveStep is one step of m's liveness watcher (runLiveness): follow the
// target the loop sets; once followed, probe it; once probed, act on the
// evidence if the target is still the one watched.
func (s *sim) liveStep(m *simMember) {
	t, ok := s.liveTarget(m)
	p := m.lv.probe
	switch {
	case p == nil || !p.probed:
		if !ok {
			m.lv.probe = nil
			return
		}
		if p == nil || p.target != t {
			// A new target: its stream is followed; a probe follows
			// when it breaks.
			m.lv.probe = &simProbe{target: t}
			return
		}
		err, guid, forged := s.probeWorld(t)
		p.probed, p.ev, p.forged = true, s.classifyProbe(err, t, guid), forged
		p.detail = fmt.Sprintf("err=%v guid=%q", err, guid)
		if p.ev != evidenceNone {
			s.logf("%s liveness: probe of %s (%s, node %s) proves %d: %s", m.id, t.ID, t.GUID, t.Node, p.ev, p.detail)
		}
		return
	}
	m.lv.probe = nil
	if p.ev == evidenceNone {
		return // alive or unknown: follow again
	}
	if !livenessDeposes(p.ev, p.target, t, ok) {
		s.logf("%s liveness: the line moved on from %s's node %s before the deposition", m.id, p.target.ID, p.target.Node)
		return
	}
	s.depose(m, p)
}

// depose carries out the deposition's Multi in m's session.
func (s *sim) depose(m *simMember, p *simProbe) {
	t := p.target
	observed := simElection + "/" + t.Node
	path := observed
	if s.bugs.liveDeposeCurrent {
		// The bug: the deposition deletes the candidate at the head of
		// the line now, looked up again, not the node it observed.
		if names, err := s.zk.children(m.sid, simElection); err == nil && len(names) > 0 {
			path = simElection + "/" + names[0]
		}
	}
	var ops []simOp
	for _, op := range deposeOps(path) {
		switch op := op.(type) {
		case *zk.CheckVersionRequest:
			ops = append(ops, simOp{kind: "check", path: op.Path, version: op.Version})
		case *zk.DeleteRequest:
			ops = append(ops, simOp{kind: "delete", path: op.Path, version: op.Version})
		default:
			s.fatalf("deposeOps: an op the model does not know: %T", op)
		}
	}
	var err error
	var owner int64
	if nd := s.zk.nodes[path]; nd != nil {
		owner = nd.owner
	}
	if m.connected && !m.silent {
		err = s.zk.multi(m.sid, ops...)
	} else {
		err = zk.ErrConnectionClosed
	}
	switch classifyDepose(err) {
	case deposeGone:
		s.logf("%s liveness: %s's node %s is already gone", m.id, t.ID, t.Node)
		return
	case deposeFailed:
		s.logf("%s liveness: deposing %s's node %s failed: %v", m.id, t.ID, t.Node, err)
		return
	}
	alive := s.procAlive(t.GUID)
	s.logf("%s liveness: deposed %s's node %s (session 0x%x, process %s alive: %v, forged proof: %v)", m.id, t.ID, path, owner, t.GUID, alive, p.forged)
	if path != observed {
		s.fatalf("liveness: %s deposed %s, not the candidate it observed (%s of %s, process %s)", m.id, path, observed, t.ID, t.GUID)
	}
	if alive && !p.forged {
		s.fatalf("liveness: %s deposed %s's candidate %s while its process %s was alive, on a proof no proxy forged (%s)", m.id, t.ID, t.Node, t.GUID, p.detail)
	}
	s.deposed++
	if alive {
		s.deposals++
	}
	s.verdicts = append(s.verdicts, &simDeposal{by: m.id, byGUID: m.lv.guid, target: t, at: s.now,
		deadline: deposeDeadline(s.now, m.c.sessionTimeout), alive: alive, forged: p.forged})
}

// judgeDeposals is each deposer's verdict goroutine, at a tick: a lookup
// of the deposed member's node (when the deposer's connection works),
// judged by decideDeposeVerdict.
func (s *sim) judgeDeposals() {
	kept := s.verdicts[:0]
	for _, v := range s.verdicts {
		by := s.member(v.by)
		if by.lv.guid != v.byGUID {
			continue // the deposer's process ended: so did its goroutine
		}
		if !by.connected || by.silent || !s.zk.sessions[by.sid] {
			kept = append(kept, v) // no verdict this time
			continue
		}
		seen, owner := s.memberNode(v.target.ID)
		vd := decideDeposeVerdict(seen, owner, v.target, s.now, v.deadline)
		if s.bugs.liveVerdictInverted {
			switch vd {
			case verdictRight:
				vd = verdictWrong
			case verdictWrong:
				vd = verdictRight
			}
		}
		switch vd {
		case verdictPending:
			kept = append(kept, v)
			continue
		case verdictWrong:
			s.deposedWrong++
			s.logf("%s liveness: the deposition of %s (process %s) counted wrong", v.by, v.target.ID, v.target.GUID)
			if !v.alive {
				s.fatalf("liveness: the deposition of %s's node %s counted wrong, but its process %s was dead (the proof was right)", v.target.ID, v.target.Node, v.target.GUID)
			}
		case verdictRight:
			s.deposedRight++
			s.logf("%s liveness: the deposition of %s (process %s) counted right", v.by, v.target.ID, v.target.GUID)
			if v.alive && s.zk.sessions[v.target.Session] {
				s.fatalf("liveness: the deposition of %s's node %s counted right, but its process %s was alive and its session 0x%x still is", v.target.ID, v.target.Node, v.target.GUID, v.target.Session)
			}
		}
	}
	s.verdicts = kept
}

// expireGhosts: the servers expire a killed process's session a session
// timeout after it died. A primary killed in a calm stretch must have
// been deposed by then.
func (s *sim) expireGhosts() {
	kept := s.ghosts[:0]
	for _, g := range s.ghosts {
		if s.now.Before(g.expireAt) && s.zk.sessions[g.sid] {
			kept = append(kept, g)
			continue
		}
		if g.calm && s.zk.sessions[g.sid] && s.zk.nodes[g.candidate] != nil {
			s.fatalf("liveness: %s's primary process %s, killed in a calm room, still holds the line with %s at its session's expiry: no standby deposed it", g.id, g.guid, g.candidate)
		}
		if s.zk.sessions[g.sid] {
			s.logf("%s: the killed process %s's session 0x%x expires", g.id, g.guid, g.sid)
			s.zk.expire(g.sid)
		}
	}
	s.ghosts = kept
}

// kill: m's process dies (its session lingers until the servers expire
// it: a ghost); the member's next process starts at once on its data dir,
// in a new session, and listens on the address after a while (until then
// the address refuses, or the proxy in front of it hangs up).
func (s *sim) kill(m *simMember, calm bool) {
	if s.zk.sessions[m.sid] {
		g := &simGhost{id: m.id, guid: m.lv.guid, sid: m.sid, role: roleStrStandby, expireAt: s.now.Add(m.c.sessionTimeout), calm: calm, candidate: m.candidate}
		if !m.connected {
			g.expireAt = m.discAt.Add(m.c.sessionTimeout)
		}
		if m.term != nil {
			g.role, g.epoch = roleStrPrimary, m.term.epoch
		}
		s.ghosts = append(s.ghosts, g)
	}
	s.kills++
	old := m.lv.guid
	*m = simMember{id: m.id, sid: s.zk.open(), connected: true, serves: m.serves, tail: true, hi: m.hi, applied: m.applied, ckpt: m.ckpt}
	s.newCore(m)
	m.lv.listenAt = s.now.Add(time.Duration(200+s.lrnd.IntN(6000)) * time.Millisecond)
	s.logf("%s: process %s killed; process %s starts (its Open returns, and it listens, at %v)", m.id, old, m.lv.guid, m.lv.listenAt)
}

// liveFault: a fault the liveness watch meets: a process killed (the
// primary's, most often), a proxy that resets connections in front of the
// live primary (a forged proof), or the primary partitioned from its
// peers.
func (s *sim) liveFault(m *simMember) {
	p := s.primary(m)
	switch s.lrnd.IntN(8) {
	case 0, 1:
		s.kill(p, false)
	case 2:
		s.kill(m, false)
	case 3, 4, 5, 6:
		p.lv.resetUntil = s.now.Add(time.Duration(1000+s.lrnd.IntN(6000)) * time.Millisecond)
		s.logf("%s: a proxy resets connections to it until %v", p.id, p.lv.resetUntil)
	case 7:
		p.lv.partitionedUntil = s.now.Add(time.Duration(500+s.lrnd.IntN(5000)) * time.Millisecond)
		s.logf("%s: partitioned from its peers until %v", p.id, p.lv.partitionedUntil)
	}
}

// calmKill ends some calm stretches by killing the primary: the next in
// line must depose its candidate before its session expires
// (expireGhosts). Only when the candidate behind the primary's is a
// running, connected standby's that may lead.
func (s *sim) calmKill() {
	if s.lrnd.IntN(3) != 0 {
		return
	}
	p := s.primary(nil)
	if p == nil || p.candidate == "" {
		return
	}
	names, err := s.zk.children(s.admin, simElection)
	if err != nil || len(names) < 2 || simElection+"/"+names[0] != p.candidate {
		return
	}
	// (A killed standby's node right behind the primary's, its session
	// lingering, leaves nobody watching: the session timeout decides.)
	id, guid, _ := strings.Cut(string(s.zk.nodes[simElection+"/"+names[1]].data), " ")
	if w := s.member(id); w == nil || w.lv.guid != guid || !s.usable(w) || w.c.failed || w.silent || w.c.role != RoleStandby || s.opening(w) {
		return
	}
	s.kill(p, true)
	for round := 0; round < 400 && !s.settled(); round++ {
		s.calmRound(round)
	}
}

// simAuditSeed is a seed whose rollback leaves a finder that audited
// less than simAuditEvery before it: without the audit on reconnect its
// first reconcile after the rollback does not audit, and the primary
// elected in the finder's window acknowledges meanwhile.
const simAuditSeed = 1284

// TestSimulationReconnectAudit: the finder's window (acknowledgements by
// a member elected after a rollback, before the mark) closes at the
// finder's first reconcile after it reconnects, because the audit is due
// at once on a reconnect. The same seed passes with the audit and fails
// without it (the noReconnectAudit bug: the audit waits for its period).
func TestSimulationReconnectAudit(t *testing.T) {
	s := newSim(func(msg string) { t.Fatal(msg) }, simAuditSeed, simBugs{})
	s.run(*simSteps)
	require.Positive(t, s.lossy, "seed %d makes a rollback that loses what a member applied", simAuditSeed)

	found := ""
	func() {
		defer func() {
			if r := recover(); r != nil && r != errPlantedFound {
				panic(r)
			}
		}()
		s := newSim(func(msg string) { found = msg; panic(errPlantedFound) }, simAuditSeed, simBugs{noReconnectAudit: true})
		s.run(*simSteps)
	}()
	require.NotEmpty(t, found, "without the audit on reconnect, seed %d must fail", simAuditSeed)
	first := strings.SplitN(found, "\n", 2)[0]
	require.Contains(t, first, "after a finder's first reconcile since it reconnected")
	t.Logf("without the audit on reconnect: %s", first)
}

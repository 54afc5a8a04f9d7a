package replica

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/logroom"
)

// core is the replica's role state machine in the shape of etcd-io/raft's
// RawNode: the run loop feeds it events (Step) and carries out the actions
// it returns, in order. It holds every decision about the role — session
// loss and expiry, SUSPENDED becoming LOST after a session timeout, the
// election's outcome, a takeover's outcome and a takeover overtaken, a
// fenced or stopped writer, step-down and transfer requests, a duplicate
// member id, failure (and marking the room lost when the log lost what
// this member applied) and resignation — and the state those decisions
// need, with one owner: the goroutine that calls Step (the run loop; the
// simulation in sim_test.go). It has no goroutines, no locks, no clock
// reads and no I/O: the time is a field of every event that needs one, and
// the result of every ZooKeeper operation comes back as an event. The
// resources the actions act on (the writer, the takeover goroutine, the
// apply goroutine, the ZooKeeper client) belong to the loop.
//
// Invariants (the simulation checks them after every step, with the
// safety properties of ../shared/DESIGN.md and, after each calm stretch,
// that exactly one member leads; see sim_test.go):
//
//	role == RolePrimary    <=> the loop holds a term of epoch c.epoch
//	role == RoleTakingOver <=> the loop holds a takeover in progress
//	failed                 => role == RoleFailed, and nothing leads again
type core struct {
	id string
	// sessionTimeout: a member disconnected this long has lost its session
	// on the servers' side (LOST after SUSPENDED).
	sessionTimeout time.Duration
	// dupWait: how long a node of our id may be held by another session
	// before that session is called a live duplicate (our own previous
	// incarnation's node lingers until its session expires).
	dupWait time.Duration
	// retryPause: the pause before a new takeover after a failed one.
	retryPause time.Duration

	sessionID int64     // the session our ephemeral nodes belong to
	connected bool      // the session is usable
	discSince time.Time // zero while connected
	// watchGen numbers the watches armed since the last (re)connect: a
	// watch event of another generation is stale and ignored (everything
	// was re-read and re-armed since).
	watchGen uint64

	role      Role
	epoch     uint64 // the epoch of the current term (role == RolePrimary), else 0
	lastEpoch uint64 // the epoch of the last term led (for a planted bug)

	// stoppingTail: the takeover succeeded and the loop is stopping the
	// standby tail (aStopTail); evTailStopped is expected.
	stoppingTail bool

	electionDirty    bool      // the election must be (re-)evaluated
	notBefore        time.Time // takeovers wait until then (after a failed one)
	corruptTakeovers int       // consecutive takeovers failed with ErrCorrupt

	failed   bool
	resigned bool // a failed replica deleted its candidate and member nodes
	// lostFound: the failure is a verdict that ZooKeeper's log lost what
	// this member applied (marksRoomLost): the room is marked lost
	// (aMarkLost) before each resignation, so that no member whose own
	// state the older log still holds takes over. Set only with failed.
	lostFound error
	// The resignation's steps, one out at a time: markOut, a mark-lost is
	// out (aMarkLost; answer evMarked); marked, the marker is in place (or
	// could never be: the room is gone, or a refusal no retry mends);
	// markRetryAt, a mark whose outcome is unknown is tried again from
	// then on (markRetryPause); resignOut, a resignation is out (aResign;
	// answer evResigned).
	markOut, marked, resignOut bool
	markRetryAt                time.Time

	// The link check (reads): while connected, a read on our own session
	// every linkEvery (aLinkProbe; answer evLinkProbed); one out for
	// linkBound means the link is silently cut, and reads that need
	// ZooKeeper are refused (aReads) until one answers. linkBound 0: off.
	linkEvery, linkBound time.Duration
	linkSent             time.Time // the probe out (zero: none)
	linkGen              uint64    // the connection (watchGen) it went out on
	linkLast             time.Time // when the last probe was answered
	linkCut              bool      // reads are refused: a probe went unanswered

	// The cut-off probe (lost.go): while our session stays disconnected, a
	// new session probes the room (aProbe; answer evProbed) every
	// probeEvery, to tell a network cut from servers that refuse our
	// session (an ensemble restored from an older copy) or a lost room.
	room         string
	probeEvery   time.Duration
	probeOut     bool
	probeLast    time.Time
	probeOKSince time.Time // probes have reached an intact room since (zero: not so)
	// renewing: told StateExpired since the last disconnect (or shown
	// session id 0 while disconnected, which go-zookeeper keeps from the
	// expiry to the new session), so go-zookeeper is opening a new
	// session. No server refuses that: a
	// refused client is never told its session expired (the server closes
	// the connection in the handshake), and after the expiry the client
	// presents no zxid to refuse. Not a refusal however long it takes.
	renewing bool

	// Room versions (roomversion.go): this member's advertised range, and
	// what the core decided last. versionMoving: a move (aMoveRoomVersion)
	// is out until evRoomVersionMoved; blocked: why the room is not
	// where it is going, as last published.
	rv            rvIdentity
	versionMoving bool
	blocked       string

	// bugs plants wrong decisions for TestSimulationFindsPlantedBugs,
	// which requires the simulation to catch each; always zero otherwise.
	bugs       coreBugs
	staleSince time.Time // when our member node was first seen held by another session (zero: not now)
}

// coreBugs are the wrong decisions the simulation must catch.
type coreBugs struct {
	ignoreExpiry       bool // keep leading after the session expired
	ignoreLost         bool // keep leading when disconnected past the session timeout
	ignoreFence        bool // keep leading when the writer was fenced
	ignoreDeposed      bool // keep leading when the term was found deposed
	ignoreApplierReady bool // take over while no standby tail runs
	acceptWhileEnding  bool // end a term without first closing its door
	ignoreLinkCut      bool // keep serving reads while a link probe goes unanswered
	stickyLinkCut      bool // never serve reads again once a probe went unanswered
	moveWhileMoving    bool // start a room-version move while one is out
	ignoreChannelRV    bool // keep running on a room whose channels are beyond our room versions
	refuseEarly        bool // call our session refused on the first probe that reaches the room
	noMark             bool // fail on a verdict that the log lost what we applied without marking the room lost
	resignUnmarked     bool // resign while the mark's outcome is unknown (not waiting for evMarked)
	noMarkRetry        bool // never mark again after a mark whose outcome is unknown
	refuseRenewing     bool // call a session refused while go-zookeeper renews it after an expiry
}

func newCore(id string, sessionTimeout time.Duration, sessionID int64) *core {
	return &core{
		id: id, sessionTimeout: sessionTimeout,
		dupWait:    sessionTimeout*3/2 + time.Second,
		retryPause: 200 * time.Millisecond,
		sessionID:  sessionID, connected: true,
		role: RoleStandby, electionDirty: true,
		linkEvery:  linkProbeEvery, // linkBound: 0 (off) until the loop sets Config.LinkProbeBound
		probeEvery: max(sessionTimeout/probeAfterFraction, 250*time.Millisecond),
	}
}

// linkProbeEvery is how often a connected member reads on its own session
// to check its link (Config.LinkProbeBound).
const linkProbeEvery = 100 * time.Millisecond

// reqKind is what an API call asks the primary (evRequest).
type reqKind int

const (
	reqStepDown reqKind = iota
	reqTransfer
)

// Events. Each carries what the loop observed; none is a request to do
// I/O.
type (
	// evSession: the client's session state now (events may coalesce: the
	// state and the session id are the truth).
	evSession struct {
		Now       time.Time
		State     zk.State
		SessionID int64
	}
	// evTick: time passed.
	evTick struct{ Now time.Time }
	// evWatch: an election watch of generation Gen fired.
	evWatch struct{ Gen uint64 }
	// evElection: the election was read (Facts: what the loop read; the
	// core fills in its own fields). Err: the read failed.
	evElection struct {
		Facts electionFacts
		Err   error
	}
	// evTakeoverDone: the takeover goroutine ended with Err.
	evTakeoverDone struct {
		Now time.Time
		Err error
	}
	// evTailStopped: the standby tail stopped before leading (Err: it
	// failed or is stuck); Applied is the applied index then, Start and
	// Epoch the new writer's first index and epoch.
	evTailStopped struct {
		Err                   error
		Applied, Start, Epoch uint64
	}
	// evWriterFailed: the writer of the term of Epoch cannot go on: fenced
	// by a newer epoch (Fenced), or stopped on an outcome it could not learn.
	evWriterFailed struct {
		Epoch  uint64
		Fenced bool
		Err    error
	}
	// evClosed: the replica was closed (its term, takeover and tail are
	// stopped, its nodes resigned): the role is closed for good.
	evClosed struct{}
	// evDeposed: the term of Epoch was found deposed without writing: its
	// candidate node is gone (deleted by a liveness deposition, right or
	// wrong, or by an operator) or its writer is fenced (the epoch znode
	// moved, or the room was replaced). Reason says which.
	evDeposed struct {
		Epoch  uint64
		Reason string
	}
	// evRequest: an API call asks the primary of term Epoch to step down
	// or to hand over to To.
	evRequest struct {
		Kind  reqKind
		Epoch uint64
		To    string
	}
	// evTransferWritten: the transfer record of a transfer request was
	// written (Err nil) or not.
	evTransferWritten struct {
		Epoch uint64
		To    string
		Err   error
	}
	// evApplierExit: the apply goroutine returned on its own.
	evApplierExit struct{ Err error }
	// evFail: an unrecoverable error.
	evFail struct{ Err error }
	// evHeld: the membership registration's view of our member node: Err
	// non-nil while another session holds our id (Persistent: a
	// persistent node sits at our path).
	evHeld struct {
		Now        time.Time
		Persistent bool
		Err        error
	}
	// evResigned: a failed replica's resignation ended (Err nil: done).
	evResigned struct{ Err error }
	// evMarked: a mark-lost (aMarkLost) ended at Now. Err nil: the marker
	// is in place, or it could never be (the room is gone: a tombstone
	// was written instead; a refusal no retry mends, logged); else the
	// outcome is unknown (the connection was lost, the bound passed) and
	// the mark is tried again after markRetryPause.
	evMarked struct {
		Now time.Time
		Err error
	}
	// evLinkProbed: the link probe (aLinkProbe) was answered at Now (Err:
	// the read failed: the connection was lost, and a session event
	// follows).
	evLinkProbed struct {
		Now time.Time
		Gen uint64 // the action's: the connection it went out on
		Err error
	}
	// evRoomVersion: the loop read the room's version (the room meta's:
	// Meta, or MetaErr when it does not read as one this binary knows),
	// the operator's target (TargetErr: the znode is malformed), the
	// highest room version among the channels, and what the live members
	// advertise (Members, by id, this member's own included).
	evRoomVersion struct {
		Meta       logroom.RoomVersion
		MetaErr    error
		Target     int
		TargetErr  error
		MaxChannel int
		Members    map[string]memberVersions
	}
	// evRoomVersionMoved: the move (aMoveRoomVersion) ended (Err: not
	// made; a later read decides again).
	evRoomVersionMoved struct {
		To  int
		Err error
	}
	// evProbed: the cut-off probe (aProbe) ended at Now: Reached, a new
	// session reached the ensemble and found the room intact; Verdict
	// non-nil, it found the room lost (ErrRoomLost).
	evProbed struct {
		Now     time.Time
		Reached bool
		Verdict error
	}
)

// actKind is what the loop does.
type actKind int

const (
	aRole            actKind = iota // announce Role (Status, RoleChanges, member data), with Reason and Epoch (the term's; 0: the applied one)
	aSessionNew                     // the session was replaced (expired): metrics and log (Old, New)
	aConnected                      // log: connected (Watch generation bumped; everything is re-read)
	aDisconnected                   // log: connection lost; suspended
	aStopAccepting                  // the term takes no new proposals (visible at once)
	aEndTerm                        // leave the primary role (Reason): off the loop, the writer closes and the committed entries drain; then the standby tail restarts
	aAbortTakeover                  // cancel the takeover in progress and wait for it (Reason)
	aDropTakeover                   // the finished takeover is not used: close the writer it opened
	aRequeue                        // move our candidate to the back of the line (Reason, logged)
	aStartTakeover                  // start a takeover
	aStopTail                       // stop the standby tail (answer: evTailStopped)
	aLead                           // become primary with the finished takeover's writer
	aStartTail                      // start the standby tail
	aClearTransfer                  // delete a transfer record that names us (best effort)
	aWriteTransfer                  // write the transfer record naming To under Epoch (answer: evTransferWritten)
	aReply                          // answer the pending request (Err; NotPrimary: the NotPrimaryError)
	aFail                           // fail the replica with Err: tear down, fail waiters
	aResign                         // delete our candidate and member nodes (answer: evResigned)
	aLog                            // log Reason at warn level (Err attached)
	aLinkProbe                      // read on our session to check the link (answer: evLinkProbed)
	aReads                          // reads that need ZooKeeper are served (Serve) or refused (the link is cut; Reason)
	aProbe                          // probe the room with a new session (answer: evProbed)
	aRoomVersion                    // publish the room's version (RV) and record RV.Record in the data dir's marker
	aVersionBlocked                 // publish why the room is not where it is going (Reason; logged at warn when Warn)
	aMoveRoomVersion                // move the room to room version RV.To: a checkpoint whose fenced rotation records it (answer: evRoomVersionMoved)
	aMarkLost                       // mark the room lost in ZooKeeper with the finding Err (logroom.MarkLost; answer: evMarked; aResign waits for it)
)

var actNames = [...]string{"role", "session-new", "connected", "disconnected", "stop-accepting", "end-term", "abort-takeover",
	"drop-takeover", "requeue", "start-takeover", "stop-tail", "lead", "start-tail", "clear-transfer",
	"write-transfer", "reply", "fail", "resign", "log", "link-probe", "reads", "probe", "room-version", "version-blocked", "move-room-version", "mark-lost"}

func (k actKind) String() string {
	if int(k) < len(actNames) {
		return actNames[k]
	}
	return fmt.Sprintf("act(%d)", int(k))
}

// action is one thing the loop does; the fields used depend on Kind.
type action struct {
	Kind       actKind
	Role       Role
	Reason     string
	Err        error
	NotPrimary bool
	To         string
	Old, New   int64
	Epoch      uint64
	Serve      bool   // aReads
	Gen        uint64 // aLinkProbe: the connection generation, reported back in evLinkProbed
	Warn       bool   // aVersionBlocked
	RV         rvNote // aRoomVersion, aMoveRoomVersion
}

// rvNote is the room version an action publishes, records or moves to.
type rvNote struct {
	Version, Target int    // the room meta's version, the operator's target
	Since           uint64 // first index written under Version
	Record          int    // the version the room's formats are at (the marker's)
	To              int    // aMoveRoomVersion: the version to move to
}

// rvIdentity is what the core needs to know of this member's binary to
// decide on room versions and to say why it cannot run on a room.
type rvIdentity struct {
	Lo, Hi   int    // the room versions this member advertises
	Release  string // the binary's release
	CapNote  string // ", capped by Config.MaxRoomVersion N" when capped, else ""
	RoomPath string // the room znode
}

func (a action) String() string {
	var b strings.Builder
	b.WriteString(a.Kind.String())
	switch a.Kind {
	case aRole:
		fmt.Fprintf(&b, " %s", a.Role)
		if a.Epoch != 0 {
			fmt.Fprintf(&b, " epoch=%d", a.Epoch)
		}
	case aSessionNew:
		fmt.Fprintf(&b, " 0x%x->0x%x", a.Old, a.New)
	case aLead:
		fmt.Fprintf(&b, " epoch=%d", a.Epoch)
	case aWriteTransfer:
		fmt.Fprintf(&b, " to=%s epoch=%d", a.To, a.Epoch)
	case aReads:
		if a.Serve {
			b.WriteString(" serve")
		} else {
			b.WriteString(" refuse")
		}
	case aRoomVersion:
		fmt.Fprintf(&b, " %d since=%d target=%d record=%d", a.RV.Version, a.RV.Since, a.RV.Target, a.RV.Record)
	case aMoveRoomVersion:
		fmt.Fprintf(&b, " to=%d", a.RV.To)
	case aVersionBlocked:
		if a.Warn {
			b.WriteString(" warn")
		}
	case aReply:
		switch {
		case a.NotPrimary:
			b.WriteString(" not-primary")
		case a.Err != nil:
			fmt.Fprintf(&b, " err=%q", a.Err.Error())
		default:
			b.WriteString(" ok")
		}
	}
	if a.Reason != "" {
		fmt.Fprintf(&b, " (%s)", a.Reason)
	}
	if a.Err != nil && a.Kind != aReply {
		fmt.Fprintf(&b, " err=%q", a.Err.Error())
	}
	return b.String()
}

// Step feeds one event to the core and returns the actions to carry out,
// in order.
func (c *core) Step(ev any) []action {
	var out []action
	switch ev := ev.(type) {
	case evSession:
		out = c.onSession(ev)
	case evTick:
		out = c.onTick(ev)
	case evWatch:
		if ev.Gen == c.watchGen {
			c.electionDirty = true
		}
	case evElection:
		out = c.onElection(ev)
	case evTakeoverDone:
		out = c.onTakeoverDone(ev)
	case evTailStopped:
		out = c.onTailStopped(ev)
	case evWriterFailed:
		out = c.onWriterFailed(ev)
	case evDeposed:
		out = c.onDeposed(ev)
	case evClosed:
		c.epoch = 0
		if c.role != RoleClosed {
			c.role = RoleClosed
			out = []action{{Kind: aRole, Role: RoleClosed, Reason: "closed"}}
		}
	case evRequest:
		out = c.onRequest(ev)
	case evTransferWritten:
		out = c.onTransferWritten(ev)
	case evApplierExit:
		switch {
		case ev.Err != nil:
			out = c.fail(ev.Err)
		case c.role == RoleStandby || c.role == RoleTakingOver:
			out = []action{{Kind: aStartTail}}
		}
	case evFail:
		out = c.fail(ev.Err)
	case evHeld:
		out = c.onHeld(ev)
	case evResigned:
		c.resignOut = false
		if ev.Err == nil {
			c.resigned = true
		}
	case evMarked:
		c.markOut = false
		if ev.Err == nil {
			c.marked = true
		} else {
			c.markRetryAt = ev.Now.Add(markRetryPause)
		}
		out = c.resignDue(ev.Now)
	case evLinkProbed:
		out = c.onLinkProbed(ev)
	case evProbed:
		out = c.onProbed(ev)
	case evRoomVersion:
		out = c.onRoomVersion(ev)
	case evRoomVersionMoved:
		c.versionMoving = false
		if ev.Err != nil {
			out = []action{{Kind: aLog, Reason: fmt.Sprintf("room version move to %d not made; will retry", ev.To), Err: ev.Err}}
		}
	default:
		panic(fmt.Sprintf("replica: core: unknown event %T", ev))
	}
	return out
}

// setRole returns the aRole action of a change (none when role is
// unchanged).
func (c *core) setRole(role Role, reason string) []action {
	if c.role == role {
		return nil
	}
	c.role = role
	return []action{{Kind: aRole, Role: role, Reason: reason, Epoch: c.epoch}}
}

// endTerm leaves the primary role: no new proposals and role standby are
// visible at once, before the writer's close, which waits for its
// in-flight requests.
func (c *core) endTerm(reason string) []action {
	out := []action{{Kind: aStopAccepting}}
	if c.bugs.acceptWhileEnding {
		out = nil
	}
	out = append(out, c.setRole(RoleStandby, reason)...) // announced with the ending term's epoch
	c.epoch = 0
	return append(out, action{Kind: aEndTerm, Reason: reason})
}

func (c *core) abortTakeover(reason string) []action {
	c.stoppingTail = false
	out := []action{{Kind: aAbortTakeover, Reason: reason}}
	return append(out, c.setRole(RoleStandby, reason)...)
}

// leaveLeadership ends a term or aborts a takeover, whichever is in
// progress.
func (c *core) leaveLeadership(reason string) []action {
	switch c.role {
	case RolePrimary:
		return c.endTerm(reason)
	case RoleTakingOver:
		return c.abortTakeover(reason)
	}
	return nil
}

func (c *core) requeue(reason string) action {
	c.electionDirty = true
	return action{Kind: aRequeue, Reason: reason}
}

// onSession: an expired session ends any leadership; a new session id
// means our ephemerals and watches are gone (rebuild everything); a
// reconnect re-reads and re-arms everything.
func (c *core) onSession(ev evSession) []action {
	var out []action
	ok := ev.State == zk.StateHasSession
	was := c.connected
	c.connected = ok
	if ev.State == zk.StateExpired && (c.role == RolePrimary || c.role == RoleTakingOver) {
		out = append(out, c.sessionLost()...)
	}
	// Renewing: told StateExpired, or disconnected with session id 0 —
	// go-zookeeper keeps the id 0 from the expiry until the new session is
	// made, and the loop steps the state it reads when woken, which may be
	// StateConnecting already (the expiry's event coalesced).
	if (ev.State == zk.StateExpired || (!ok && ev.SessionID == 0 && c.sessionID != 0)) && !c.bugs.refuseRenewing {
		c.renewing, c.probeOKSince = true, time.Time{}
	}
	if ok && ev.SessionID != c.sessionID {
		out = append(out, action{Kind: aSessionNew, Old: c.sessionID, New: ev.SessionID})
		out = append(out, c.sessionLost()...)
		c.sessionID = ev.SessionID
	}
	if ok != was {
		if ok {
			c.watchGen++
			c.electionDirty = true
			c.discSince = time.Time{}
			c.probeOKSince, c.renewing = time.Time{}, false
			out = append(out, action{Kind: aConnected})
			// A probe out on the old connection is abandoned (go-zookeeper
			// fails it; its answer is ignored): the new one gets its own.
			c.linkSent = time.Time{}
			if c.linkCut && !c.bugs.stickyLinkCut {
				// A new connection was answered: the link works again.
				c.linkCut = false
				out = append(out, action{Kind: aReads, Serve: true, Reason: "reconnected to ZooKeeper"})
			}
		} else {
			c.discSince = ev.Now
			out = append(out, action{Kind: aDisconnected, Reason: ev.State.String()})
		}
	}
	return out
}

// sessionLost: our ephemerals and watches are gone. Leave any primary role
// and rebuild membership and election from scratch.
func (c *core) sessionLost() []action {
	out := c.leaveLeadership("session expired")
	if c.bugs.ignoreExpiry && c.role == RoleStandby && len(out) > 0 && out[0].Kind == aStopAccepting {
		out, c.role, c.epoch = nil, RolePrimary, c.lastEpoch
	}
	c.staleSince = time.Time{}
	c.watchGen++
	c.electionDirty = true
	return out
}

// onTick: cut off for a whole session timeout means our session has
// expired on the servers' side and another member may lead: stop leading
// now rather than when we reconnect (Curator's LOST after SUSPENDED).
func (c *core) onTick(ev evTick) []action {
	var out []action
	if !c.connected && !c.discSince.IsZero() && ev.Now.Sub(c.discSince) >= c.sessionTimeout && !c.bugs.ignoreLost {
		out = c.leaveLeadership("disconnected past the session timeout")
	}
	out = append(out, c.linkDue(ev.Now)...)
	return append(out, c.probeDue(ev.Now)...)
}

// linkDue: while connected, a link probe goes out every linkEvery; one out
// for linkBound cuts reads off (go-zookeeper would notice the silent
// partition only at its read timeout, two thirds of the session).
func (c *core) linkDue(now time.Time) []action {
	if c.linkBound <= 0 || c.failed || c.role == RoleClosed || !c.connected {
		return nil
	}
	if !c.linkSent.IsZero() {
		if !c.linkCut && now.Sub(c.linkSent) >= c.linkBound && !c.bugs.ignoreLinkCut {
			c.linkCut = true
			return []action{{Kind: aReads, Serve: false, Reason: fmt.Sprintf(
				"a read on our ZooKeeper session unanswered for %v: the link looks cut; refusing reads that need ZooKeeper until one answers", now.Sub(c.linkSent))}}
		}
		return nil
	}
	if now.Sub(c.linkLast) >= c.linkEvery {
		c.linkSent, c.linkGen = now, c.watchGen
		return []action{{Kind: aLinkProbe, Gen: c.watchGen}}
	}
	return nil
}

// onLinkProbed: an answer (even a failed read: the connection's loss is
// told by a session event, which refuses reads on its own) ends the
// suspicion.
func (c *core) onLinkProbed(ev evLinkProbed) []action {
	if ev.Gen != c.linkGen || c.linkSent.IsZero() {
		return nil // a probe of an earlier connection, abandoned at the reconnect
	}
	c.linkSent, c.linkLast = time.Time{}, ev.Now
	if c.linkCut && ev.Err == nil && !c.bugs.stickyLinkCut {
		c.linkCut = false
		return []action{{Kind: aReads, Serve: true, Reason: "a read on our ZooKeeper session was answered again"}}
	}
	return nil
}

// probeDue: disconnected for probeEvery, a cut-off probe goes out every
// probeEvery, one at a time.
func (c *core) probeDue(now time.Time) []action {
	if c.failed || c.role == RoleClosed || c.connected || c.discSince.IsZero() {
		c.probeOKSince = time.Time{}
		return nil
	}
	if c.probeOut || now.Sub(c.discSince) < c.probeEvery || now.Sub(c.probeLast) < c.probeEvery {
		return nil
	}
	c.probeOut, c.probeLast = true, now
	return []action{{Kind: aProbe}}
}

// onProbed: a probe that found the room lost fails the replica; new
// sessions reaching an intact room for a whole session timeout while ours
// stays refused mean every server refuses our session (it saw a newer
// zxid than the ensemble holds), and go-zookeeper would retry forever:
// fail with ErrSessionRefused.
func (c *core) onProbed(ev evProbed) []action {
	c.probeOut = false
	if c.failed || c.role == RoleClosed {
		return nil
	}
	if ev.Verdict != nil {
		return c.fail(ev.Verdict)
	}
	if !ev.Reached || c.connected || c.discSince.IsZero() || c.renewing {
		c.probeOKSince = time.Time{}
		return nil
	}
	if c.probeOKSince.IsZero() {
		c.probeOKSince = ev.Now
		if !c.bugs.refuseEarly {
			return nil
		}
	}
	if c.bugs.refuseEarly || (ev.Now.Sub(c.probeOKSince) >= c.refusedAfter() && ev.Now.Sub(c.discSince) >= c.sessionTimeout) {
		return c.fail(fmt.Errorf("%w: disconnected for %v while new sessions reached the ensemble for %v and found room %q intact: "+
			"every server refuses this member's session (it saw a newer zxid than the ensemble holds: the ensemble was restored from an older copy?); "+
			"the log still holds everything this member applied; restart the member",
			ErrSessionRefused, ev.Now.Sub(c.discSince).Round(time.Millisecond), ev.Now.Sub(c.probeOKSince).Round(time.Millisecond), c.room))
	}
	return nil
}

// zkReconnectPause is go-zookeeper's pause after each pass over the
// servers (third_party/zk, Conn.connect): with one server, every
// reconnect waits it.
const zkReconnectPause = time.Second

// refusedAfter is how long new sessions must reach an intact room while
// ours stays disconnected before the core calls our session refused. A
// session timeout is not enough: a client whose session expired while it
// was cut off learns the expiry on its first connection after the cut
// and opens a new session on the next, with go-zookeeper's pause before
// each (two pauses with a single server), while probes already reach the
// room; at a session timeout under two seconds that renewal alone looked
// like a refusal and failed a healthy member for good.
func (c *core) refusedAfter() time.Duration {
	return c.sessionTimeout + 2*zkReconnectPause
}

// electionDue says whether the loop should read the election now.
func (c *core) electionDue() bool { return c.electionDirty }

// fillFacts sets the facts of the election the core owns.
func (c *core) fillFacts(f *electionFacts) {
	f.Self, f.Role, f.Failed, f.NotBefore = c.id, c.role, c.failed, c.notBefore
}

func (c *core) onElection(ev evElection) []action {
	if ev.Err != nil {
		c.electionDirty = true
		return nil
	}
	c.electionDirty = false
	f := ev.Facts
	c.fillFacts(&f)
	if c.bugs.ignoreApplierReady {
		f.ApplierReady = true
	}
	switch decideElection(f) {
	case elEndTerm:
		// Our node is no longer the lowest (it was deleted and re-created).
		return c.endTerm("lost the lowest election position")
	case elAbortTakeover:
		return c.abortTakeover("lost the lowest election position")
	case elRetryLater:
		c.electionDirty = true
	case elRequeueTransfer:
		return []action{c.requeue("lowest, but leadership is being transferred to " + f.Transfer.To)}
	case elRequeueBehind:
		return []action{c.requeue("lowest, but our state is behind the deleted log and another candidate is not")}
	case elRequeueLagging:
		return []action{c.requeue(fmt.Sprintf("lowest, but another candidate has applied more than %d entries more: it leads without a catch-up", f.LagBound))}
	case elTakeOver:
		return append([]action{{Kind: aStartTakeover}}, c.setRole(RoleTakingOver, "elected")...)
	}
	return nil
}

func (c *core) onTakeoverDone(ev evTakeoverDone) []action {
	if c.role != RoleTakingOver {
		// Aborted meanwhile (the loop only reports a takeover it holds).
		return nil
	}
	act, corrupt := decideTakeover(ev.Err, c.corruptTakeovers)
	c.corruptTakeovers = corrupt
	switch act {
	case toLead:
		c.stoppingTail = true
		return []action{{Kind: aStopTail}}
	case toFail:
		return append([]action{{Kind: aDropTakeover}}, c.fail(ev.Err)...)
	}
	out := append([]action{{Kind: aDropTakeover}}, c.setRole(RoleStandby, "takeover failed")...)
	switch act {
	case toRequeue:
		out = append(out, c.requeue("takeover fenced by a concurrent writer"))
		out[len(out)-1].Err = ev.Err
	case toRetry:
		c.notBefore = ev.Now.Add(c.retryPause)
		c.electionDirty = true
		out = append(out, action{Kind: aLog, Reason: fmt.Sprintf("takeover failed; will retry (corrupt in a row: %d)", corrupt), Err: ev.Err})
	}
	return out
}

// onTailStopped: the standby tail applied exactly up to the writer's start
// - 1 (nothing beyond exists: we have not appended) — lead; it applied
// entries past it — a newer primary wrote them (our session expired while
// we caught up): step back.
func (c *core) onTailStopped(ev evTailStopped) []action {
	if c.role != RoleTakingOver || !c.stoppingTail {
		return nil
	}
	c.stoppingTail = false
	if ev.Err != nil {
		return append([]action{{Kind: aDropTakeover}}, c.fail(ev.Err)...)
	}
	if ev.Applied != ev.Start-1 {
		reason := "takeover overtaken by a newer primary"
		out := []action{{Kind: aDropTakeover}, {Kind: aLog, Reason: fmt.Sprintf(
			"takeover overtaken: the standby tail applied %d, past the writer's start %d (epoch %d); re-queueing", ev.Applied, ev.Start, ev.Epoch)}}
		out = append(out, c.setRole(RoleStandby, reason)...)
		out = append(out, action{Kind: aStartTail}, c.requeue(reason))
		return out
	}
	c.epoch, c.lastEpoch = ev.Epoch, ev.Epoch
	out := []action{{Kind: aLead, Epoch: ev.Epoch}}
	out = append(out, c.setRole(RolePrimary, "elected")...)
	return append(out, action{Kind: aClearTransfer})
}

func (c *core) onWriterFailed(ev evWriterFailed) []action {
	if c.role != RolePrimary || ev.Epoch != c.epoch {
		return nil // an older term's writer
	}
	if ev.Fenced && c.bugs.ignoreFence {
		return nil
	}
	if ev.Fenced {
		out := []action{{Kind: aLog, Reason: "primary fenced by a newer epoch; stepping down to standby", Err: ev.Err}}
		out = append(out, c.endTerm("fenced")...)
		return append(out, c.requeue("fenced"))
	}
	// The writer stopped (an outcome it could not learn): end the term; if
	// we are still the lowest candidate a new takeover (epoch+1) finds the
	// true log end.
	out := []action{{Kind: aLog, Reason: "primary's writer stopped; ending the term", Err: ev.Err}}
	out = append(out, c.endTerm("writer stopped")...)
	c.electionDirty = true
	return out
}

// onDeposed ends a term that lost its candidate node or its fence: it
// must stop saying primary now (its writes would be fenced anyway, but an
// idle primary would not learn it until it wrote), and re-queue.
func (c *core) onDeposed(ev evDeposed) []action {
	if c.role != RolePrimary || ev.Epoch != c.epoch || c.bugs.ignoreDeposed {
		return nil
	}
	out := []action{{Kind: aLog, Reason: "primary deposed (" + ev.Reason + "); stepping down to standby"}}
	out = append(out, c.endTerm("deposed: "+ev.Reason)...)
	return append(out, c.requeue("deposed"))
}

func (c *core) onRequest(ev evRequest) []action {
	if c.role != RolePrimary || ev.Epoch != c.epoch {
		return []action{{Kind: aReply, NotPrimary: true}}
	}
	switch ev.Kind {
	case reqStepDown:
		out := c.endTerm("step down")
		return append(out, c.requeue("step down"), action{Kind: aReply})
	case reqTransfer:
		return []action{{Kind: aWriteTransfer, To: ev.To, Epoch: c.epoch}}
	}
	return []action{{Kind: aReply, Err: fmt.Errorf("replica: unknown request %d", ev.Kind)}}
}

func (c *core) onTransferWritten(ev evTransferWritten) []action {
	if c.role != RolePrimary || ev.Epoch != c.epoch {
		// The term that asked ended meanwhile (a newer one must not end
		// for a record written under the old epoch).
		return []action{{Kind: aReply, NotPrimary: true}}
	}
	if ev.Err != nil {
		return []action{{Kind: aReply, Err: fmt.Errorf("%w: write transfer record: %w", ErrTransfer, ev.Err)}}
	}
	reason := "leadership transfer to " + ev.To
	out := c.endTerm(reason)
	return append(out, c.requeue(reason), action{Kind: aReply})
}

// fail stops the replica's participation after an unrecoverable error:
// leave any primary role, stop applying, resign election and membership.
// Only the first error counts. A verdict that the log lost what this
// member applied (marksRoomLost) also marks the room lost, before every
// resignation attempt (package doc, "Disaster recovery": marked lost).
func (c *core) fail(err error) []action {
	if err == nil || c.failed {
		return nil
	}
	c.failed = true
	if marksRoomLost(err) && !c.bugs.noMark {
		c.lostFound = err
	}
	c.epoch = 0
	c.stoppingTail = false
	c.electionDirty = false
	out := []action{{Kind: aFail, Err: err}}
	out = append(out, c.setRole(RoleFailed, err.Error())...)
	return append(out, c.resignDue(time.Time{})...)
}

// resignDue: a failed replica deletes its candidate and member nodes so
// that failover proceeds without it, retried while it has not succeeded
// (a lowest candidate that never takes over would block every other one).
// A member that found the log lost what it applied marks the room lost
// first, until a mark lands (a marker already there is left alone): its
// candidate must not go before the marker is in place, or a member whose
// own state the older log still holds could take over in its stead.
//
// One step is out at a time: the resignation waits for the mark's answer
// (evMarked), and a mark whose outcome is unknown keeps the candidate in
// the line (no other member takes over in our stead meanwhile) and is
// tried again markRetryPause after its answer. now is the time of the
// caller's event (zero: a failure, which has none; nothing waits then).
func (c *core) resignDue(now time.Time) []action {
	if !c.failed || c.resigned || !c.connected || c.markOut || c.resignOut {
		return nil
	}
	if c.lostFound != nil && !c.marked {
		if now.Before(c.markRetryAt) || (c.bugs.noMarkRetry && !c.markRetryAt.IsZero()) {
			return nil
		}
		c.markOut = true
		out := []action{{Kind: aMarkLost, Err: c.lostFound}}
		if c.bugs.resignUnmarked {
			c.resignOut = true
			out = append(out, action{Kind: aResign})
		}
		return out
	}
	c.resignOut = true
	return []action{{Kind: aResign}}
}

// markRetryPause is how long a mark-lost whose outcome is unknown waits
// before it is tried again (with the resignation behind it).
const markRetryPause = time.Second

// onHeld: the registration re-creates our member node after an expiry;
// while another session holds our id it cannot. Our previous session's
// node lingers until that session expires on every server (or a stale
// server still shows it): only a node held past dupWait belongs to another
// live process; a persistent node never expires, so at once.
func (c *core) onHeld(ev evHeld) []action {
	if ev.Err == nil {
		c.staleSince = time.Time{}
		return nil
	}
	var out []action
	if c.staleSince.IsZero() {
		c.staleSince = ev.Now
		out = append(out, action{Kind: aLog, Reason: "membership: our member node is held by another session; waiting for it to expire", Err: ev.Err})
	}
	if ev.Persistent || ev.Now.Sub(c.staleSince) > c.dupWait {
		out = append(out, c.fail(fmt.Errorf("%w: %q (%v)", ErrDuplicateID, c.id, ev.Err))...)
	}
	return out
}

// unsupportedRoom is the error of a member whose range excludes the
// room's version v.
func (c *core) unsupportedRoom(v int) error {
	return fmt.Errorf("replica: %w: room %q (%s) is at room version %d; this member (%s) supports room versions %d..%d%s",
		ErrUnsupportedVersion, c.room, c.rv.RoomPath, v, c.rv.Release, c.rv.Lo, c.rv.Hi, c.rv.CapNote)
}

// onRoomVersion decides on a read of the room's version: channels beyond
// this member's range fail it (a room meta alone beyond it, which no
// rotation wrote, is reported as forged, and so is one that does not
// read); otherwise the version is published and recorded, and as primary
// a target every live member supports, or the end of a downgrade, starts
// a move (decideRoomVersion), one at a time.
func (c *core) onRoomVersion(ev evRoomVersion) []action {
	if c.failed || c.role == RoleClosed {
		return nil
	}
	lo, hi := c.rv.Lo, c.rv.Hi
	var report string
	switch {
	case ev.MaxChannel > hi && !c.bugs.ignoreChannelRV:
		return c.fail(c.unsupportedRoom(ev.MaxChannel))
	case errors.Is(ev.MetaErr, ErrUnsupportedVersion):
		report = fmt.Sprintf("the room meta %s is beyond this member (%v), but no channel is: written by another client?", c.rv.RoomPath, ev.MetaErr)
	case ev.MetaErr != nil:
		report = fmt.Sprintf("the room meta %s does not read: %v", c.rv.RoomPath, ev.MetaErr)
	case ev.Meta.Version > hi || ev.Meta.Version < lo:
		if ev.MaxChannel > 0 && ev.MaxChannel <= hi && ev.MaxChannel >= lo {
			report = fmt.Sprintf("the room meta %s says room version %d, outside this member's %d..%d, but no channel is: written by another client?",
				c.rv.RoomPath, ev.Meta.Version, lo, hi)
		} else if !c.bugs.ignoreChannelRV {
			return c.fail(c.unsupportedRoom(ev.Meta.Version))
		}
	}
	if report != "" {
		return c.versionBlocked(report, true)
	}
	// Every read: the loop's marker write retries a failed one (and
	// skips an unchanged one).
	out := []action{{Kind: aRoomVersion, RV: rvNote{Version: ev.Meta.Version, Since: ev.Meta.Since, Target: ev.Target,
		Record: max(ev.Meta.Version, ev.MaxChannel)}}}
	primary := c.role == RolePrimary
	f := versionFacts{Primary: primary, Current: ev.Meta.Version, Lowering: ev.Meta.Lowering, Since: ev.Meta.Since,
		Target: ev.Target, Members: ev.Members, MaxChannel: ev.MaxChannel, Moving: c.versionMoving && !c.bugs.moveWhileMoving}
	move, blocked := decideRoomVersion(f)
	if ev.TargetErr != nil {
		move, blocked = 0, fmt.Sprintf("the room version target does not read, ignored: %v", ev.TargetErr)
	}
	// A primary warns of what blocks the move (not of a move under way).
	out = append(out, c.versionBlocked(blocked, (primary && !f.Moving) || ev.TargetErr != nil)...)
	if move != 0 {
		c.versionMoving = true
		out = append(out, action{Kind: aMoveRoomVersion, Epoch: c.epoch, RV: rvNote{Version: ev.Meta.Version, To: move}})
	}
	return out
}

// versionBlocked publishes why the room is not where it is going, once
// per change (logged at warn when warn says so).
func (c *core) versionBlocked(blocked string, warn bool) []action {
	if blocked == c.blocked {
		return nil
	}
	c.blocked = blocked
	return []action{{Kind: aVersionBlocked, Reason: blocked, Warn: warn && blocked != ""}}
}

// appendOutcome is what a Writer.Append result means for the proposal and
// the term (classifyAppend).
type appendOutcome int

const (
	appendCommitted         appendOutcome = iota // committed: acknowledge once applied (and connected, or the term ended)
	appendFenced                                 // not committed; a newer epoch fenced the writer: the term ends
	appendRefused                                // not sent: too large, or the room is full; the term goes on
	appendStopped                                // not sent: the writer had stopped on an earlier unknown outcome; the term ends
	appendUnknownWriterDead                      // may be committed; the writer could not learn it and stopped: the term ends
	appendUnknown                                // may be committed (the caller's deadline ended the wait); the term goes on
	appendNotSentClosed                          // not sent: the writer closed while it was queued
	appendNotSent                                // not sent: the caller's context ended first
)

// classifyAppend classifies Writer.Append's error; ctxDone says the
// caller's context has ended. Only appendCommitted may be acknowledged.
func classifyAppend(err error, ctxDone bool) appendOutcome {
	switch {
	case err == nil:
		return appendCommitted
	case errors.Is(err, logroom.ErrFenced):
		return appendFenced
	case errors.Is(err, logroom.ErrEntryTooLarge), errors.Is(err, logroom.ErrRoomFull):
		return appendRefused
	case errors.Is(err, logroom.ErrWriterStopped):
		return appendStopped
	case errors.Is(err, logroom.ErrOutcomeUnknown):
		if ctxDone {
			return appendUnknown
		}
		return appendUnknownWriterDead
	case errors.Is(err, logroom.ErrClosed):
		return appendNotSentClosed
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return appendNotSent
	default:
		return appendUnknown
	}
}

package main

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"time"
)

// Kind is a kind of fault.
type Kind int

// The fault kinds (see doc.go for what each does).
const (
	KillPrimary Kind = iota
	KillStandby
	PausePrimaryLong
	PausePrimaryShort
	PauseStandby
	KillZKLeader
	KillZKFollower
	WipeStandby
	Checkpoint
	Transfer
	PartitionPrimaryLong
	PartitionPrimaryShort
	PartitionLink
	DropRepliesPrimary
	StallCheckpoint
	PartitionZKLeader
	StallDiskPrimary
	// Lifecycle operations (lifecycle.go), drawn only with -lifecycle.
	ReplaceMember
	ObserverJoin
	ObserverLeave
	RoomVersionRaise
	RoomVersionLower
	ZKWipeReseed
	ZKRollbackReseed
	Upgrade
	Downgrade
	// RestoreCheck (restorecheck.go): restore from the archive and
	// compare with the members' running hash.
	RestoreCheck
	// With -tls (tls.go).
	RotateCert
	RotateCA
	numKinds
)

// firstLifecycle is the first lifecycle kind: kinds from it on are an
// operator's doing, not a fault.
const firstLifecycle = ReplaceMember

var kindNames = [numKinds]string{
	KillPrimary:       "kill-primary",
	KillStandby:       "kill-standby",
	PausePrimaryLong:  "pause-primary-long",
	PausePrimaryShort: "pause-primary-short",
	PauseStandby:      "pause-standby",
	KillZKLeader:      "kill-zk-leader",
	KillZKFollower:    "kill-zk-follower",
	WipeStandby:       "wipe-standby",
	Checkpoint:        "checkpoint",
	Transfer:          "transfer",
	// Network faults, made on faultnet proxies: the processes keep
	// running.
	PartitionPrimaryLong:  "partition-primary-long",
	PartitionPrimaryShort: "partition-primary-short",
	PartitionLink:         "partition-link",
	DropRepliesPrimary:    "drop-replies-primary",
	StallCheckpoint:       "stall-checkpoint",
	PartitionZKLeader:     "partition-zk-leader",
	// A disk fault, made by internal/infra/faultfs inside the node.
	StallDiskPrimary: "stall-disk-primary",
	// Lifecycle operations (lifecycle.go).
	ReplaceMember:    "replace-member",
	ObserverJoin:     "observer-join",
	ObserverLeave:    "observer-leave",
	RoomVersionRaise: "room-version-raise",
	RoomVersionLower: "room-version-lower",
	ZKWipeReseed:     "zk-wipe-reseed",
	ZKRollbackReseed: "zk-rollback-reseed",
	Upgrade:          "upgrade",
	Downgrade:        "downgrade",
	RestoreCheck:     "restore-check",
	RotateCert:       "rotate-cert",
	RotateCA:         "rotate-ca",
}

// weights is how often each kind is drawn, relative to the others.
var weights = [numKinds]int{
	KillPrimary:       3,
	KillStandby:       3,
	PausePrimaryLong:  2,
	PausePrimaryShort: 2,
	PauseStandby:      1,
	KillZKLeader:      2,
	KillZKFollower:    2,
	WipeStandby:       2,
	Checkpoint:        3,
	Transfer:          1,

	PartitionPrimaryLong:  2,
	PartitionPrimaryShort: 2,
	PartitionLink:         1,
	DropRepliesPrimary:    2,
	StallCheckpoint:       1,
	PartitionZKLeader:     2,

	StallDiskPrimary: 1,
}

// lifecycleWeights is how often each lifecycle kind is drawn with
// -lifecycle (0 without: the seeded sequence of a run without it is the
// one it always was). observer-join stands for both observer kinds and
// room-version-raise for both room-version kinds: the schedule picks
// which from what it drew before (Schedule.observers, Schedule.roomVersion).
var lifecycleWeights = [numKinds]int{
	ReplaceMember:    3,
	ObserverJoin:     3,
	RoomVersionRaise: 3,
	ZKWipeReseed:     2,
	ZKRollbackReseed: 2,
	Downgrade:        3,
	RestoreCheck:     2,
}

// tlsWeights are added with -lifecycle -tls (Schedule.TLS), which also
// takes upgrade and downgrade out: the previous release's testnode has
// no TLS.
var tlsWeights = [numKinds]int{
	RotateCert: 3,
	RotateCA:   2,
}

// IsLifecycle reports whether k is a lifecycle operation (an operator's
// step, not a fault).
func (k Kind) IsLifecycle() bool { return k >= firstLifecycle && k < numKinds }

// isZKLoss reports whether k takes every ZooKeeper server's data.
func (k Kind) isZKLoss() bool { return k == ZKWipeReseed || k == ZKRollbackReseed }

func (k Kind) String() string {
	if k < 0 || k >= numKinds {
		return fmt.Sprintf("Kind(%d)", int(k))
	}
	return kindNames[k]
}

// isZK reports whether k takes a ZooKeeper server down.
func (k Kind) isZK() bool { return k == KillZKLeader || k == KillZKFollower || k == PartitionZKLeader }

// Fault is one step of a schedule. Every field is drawn from the seed; which
// process a role ("the primary", "standby 1") names is resolved when the
// fault runs.
type Fault struct {
	Seq  int // 1, 2, 3…
	Kind Kind
	// Pick chooses among candidates of the role (standbys sorted by id,
	// ZooKeeper followers by index): candidate Pick % len(candidates).
	Pick int
	// Down: how long a killed process stays down (kill-*; stall-disk-primary:
	// from the failover to the restart of the failed one), or how long a
	// pause lasts (pause-primary-short, pause-standby), or how long a
	// pause lasts past the session timeout (pause-primary-long).
	Down time.Duration
	// Span (kill-zk-*, kill-standby): how many following faults the
	// server or replica stays down across (0: restarted before the next
	// fault).
	Span int
	// Primary: checkpoint on the primary (else on a standby); rotate-cert:
	// cut the member from ZooKeeper while its files change; wipe-standby:
	// ask the primary to checkpoint (rotate, delete) while the standby is
	// down, so it must bootstrap from a checkpoint.
	Primary bool
	// Mid (lifecycle steps but the ZooKeeper losses): the ZooKeeper
	// leader is killed as the step begins and restarted when it ends (a
	// fault landing mid-step).
	Mid bool
	// Heal is the pause after the fault (the system heals before the next).
	Heal time.Duration
}

func (f Fault) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "#%d %s", f.Seq, f.Kind)
	switch f.Kind {
	case KillStandby:
		fmt.Fprintf(&b, " down=%v span=%d", f.Down, f.Span)
	case KillPrimary, PauseStandby, PausePrimaryShort, StallDiskPrimary:
		fmt.Fprintf(&b, " down=%v", f.Down)
	case PausePrimaryLong, PartitionPrimaryLong:
		fmt.Fprintf(&b, " past-session=%v", f.Down)
	case PartitionPrimaryShort, PartitionLink, DropRepliesPrimary, PartitionZKLeader:
		fmt.Fprintf(&b, " for=%v", f.Down)
	case KillZKLeader, KillZKFollower:
		fmt.Fprintf(&b, " down=%v span=%d", f.Down, f.Span)
	case WipeStandby:
		fmt.Fprintf(&b, " force-checkpoint=%v", f.Primary)
	case Checkpoint:
		if f.Primary {
			b.WriteString(" on=primary")
		} else {
			b.WriteString(" on=standby")
		}
	}
	switch f.Kind {
	case KillStandby, PauseStandby, WipeStandby, KillZKFollower, Transfer, PartitionLink, StallCheckpoint, ObserverLeave, RestoreCheck:
		fmt.Fprintf(&b, " pick=%d", f.Pick)
	case ReplaceMember, Upgrade, Downgrade:
		fmt.Fprintf(&b, " pick=%d kill=%v", f.Pick, f.Primary)
	case RotateCert:
		fmt.Fprintf(&b, " pick=%d cut=%v", f.Pick, f.Primary)
	case ZKWipeReseed, ZKRollbackReseed:
		fmt.Fprintf(&b, " keep-copy=%v", f.Primary)
	case Checkpoint:
		if !f.Primary {
			fmt.Fprintf(&b, " pick=%d", f.Pick)
		}
	}
	if f.Mid {
		b.WriteString(" mid=kill-zk-leader")
	}
	fmt.Fprintf(&b, " heal=%v", f.Heal)
	return b.String()
}

// Schedule draws a reproducible sequence of faults from a seed: the same
// seed and session timeout give the same sequence, whatever happens while
// it runs (nothing observed at run time feeds back into the draws).
type Schedule struct {
	rng     *rand.Rand
	session time.Duration
	seq     int
	// zkHeld: faults left during which a ZooKeeper server stays down; no
	// ZooKeeper fault is drawn while it is > 0 (at most one server down).
	zkHeld int
	// nodeHeld: the same for a replica (kill-standby with a span): at most
	// one replica is held down.
	nodeHeld int
	// forced: kinds drawn first, in order, before the seeded draws (a
	// bounded run that must include some kinds).
	forced []Kind
	// weights: the kinds' weights (lifecycleWeights added by Lifecycle).
	weights [numKinds]int
	// observers: observer processes once the kinds drawn so far ran;
	// roomVersion: the room version target they leave (1 or 2). They
	// decide between observer-join and -leave, and between
	// room-version-raise and -lower.
	observers, roomVersion int
	// replicas: replica processes (never observers: the previous
	// release's testnode has no --observer); old: those of them the
	// kinds drawn so far leave on the previous release. They decide
	// between upgrade and downgrade.
	replicas, old int
}

// NewSchedule returns the schedule of seed for replicas with the given
// session timeout.
func NewSchedule(seed uint64, session time.Duration) *Schedule {
	return &Schedule{rng: rand.New(rand.NewPCG(seed, 0x6368616f73)), session: session, weights: weights, roomVersion: 1}
}

// Lifecycle adds the lifecycle kinds to the draws; observers is how many
// observer processes the run starts with.
func (s *Schedule) Lifecycle(observers, replicas int) {
	for k, w := range lifecycleWeights {
		s.weights[k] += w
	}
	s.observers, s.replicas = observers, replicas
}

// TLS adds the certificate rotations to the draws and takes upgrade and
// downgrade out (call it after Lifecycle).
func (s *Schedule) TLS() {
	for k, w := range tlsWeights {
		s.weights[k] += w
	}
	s.weights[Upgrade], s.weights[Downgrade] = 0, 0
}

// maxObservers bounds the observer processes observer-join adds.
const maxObservers = 3

// between draws a duration in [lo, hi), rounded to milliseconds.
func (s *Schedule) between(lo, hi time.Duration) time.Duration {
	d := lo + time.Duration(s.rng.Int64N(int64(hi-lo)))
	return d.Round(time.Millisecond)
}

// Force makes the next faults these kinds, in order (their parameters
// are still drawn from the seed); the seeded kinds follow.
func (s *Schedule) Force(kinds ...Kind) { s.forced = append(s.forced, kinds...) }

// Next draws the next fault.
func (s *Schedule) Next() Fault {
	s.seq++
	total := 0
	for _, w := range s.weights {
		total += w
	}
	var k Kind
	for len(s.forced) == 0 {
		x := s.rng.IntN(total)
		for k = 0; k < numKinds; k++ {
			if x < s.weights[k] {
				break
			}
			x -= s.weights[k]
		}
		if !(k.isZK() && s.zkHeld > 0) {
			break
		}
	}
	if len(s.forced) > 0 {
		k, s.forced = s.forced[0], s.forced[1:]
	} else {
		k = s.pair(k)
	}
	if s.zkHeld > 0 {
		s.zkHeld--
	}
	heldNode := s.nodeHeld > 0
	if heldNode {
		s.nodeHeld--
	}
	f := Fault{Seq: s.seq, Kind: k, Pick: s.rng.IntN(1 << 16)}
	switch k {
	case KillPrimary, StallDiskPrimary:
		f.Down = s.between(0, 4*time.Second)
	case KillStandby:
		f.Down = s.between(500*time.Millisecond, 8*time.Second)
		if s.rng.IntN(4) == 0 && !heldNode {
			f.Span = 1
			s.nodeHeld = 1
		}
	case PausePrimaryLong:
		f.Down = s.between(200*time.Millisecond, 3*time.Second)
	case PausePrimaryShort:
		f.Down = s.between(100*time.Millisecond, s.session*6/10)
	case PauseStandby:
		f.Down = s.between(200*time.Millisecond, 2*s.session)
	case KillZKLeader, KillZKFollower:
		f.Down = s.between(time.Second, 8*time.Second)
		if s.rng.IntN(3) == 0 {
			f.Span = 1
			s.zkHeld = 1
		}
	case WipeStandby:
		f.Primary = s.rng.IntN(4) != 0
	case PartitionPrimaryLong:
		f.Down = s.between(200*time.Millisecond, 3*time.Second)
	case PartitionPrimaryShort:
		f.Down = s.between(100*time.Millisecond, s.session*6/10)
	case PartitionLink:
		f.Down = s.between(s.session/2, 2*s.session)
	case DropRepliesPrimary:
		f.Down = s.between(300*time.Millisecond, s.session*3/2)
	case PartitionZKLeader:
		f.Down = s.between(3*time.Second, 8*time.Second)
	case Checkpoint:
		f.Primary = s.rng.IntN(3) != 0
	case ReplaceMember, Upgrade, Downgrade:
		// Primary here: kill -9 instead of a graceful stop (one in four).
		f.Primary = s.rng.IntN(4) == 0
	case RotateCert:
		// Primary here: cut the member from ZooKeeper while its files
		// change (one in four).
		f.Primary = s.rng.IntN(4) == 0
	case ZKWipeReseed, ZKRollbackReseed:
		// Primary here: keep the copy of ZooKeeper's data across the
		// re-seed, so that a later rollback restores the tree of an
		// earlier incarnation.
		f.Primary = s.rng.IntN(2) == 0
	}
	if k.IsLifecycle() && !k.isZKLoss() && k != RestoreCheck {
		// (A restore-check changes nothing in the room: it reads the
		// archive and asks the members.)
		f.Mid = s.rng.IntN(4) == 0 && s.zkHeld == 0
	}
	switch k {
	case ObserverJoin:
		s.observers++
	case ObserverLeave:
		s.observers = max(s.observers-1, 0)
	case RoomVersionRaise:
		s.roomVersion = 2
	case RoomVersionLower:
		s.roomVersion = 1
	case Downgrade:
		s.old = min(s.old+1, s.replicas)
		s.roomVersion = 1 // lowered first
	case Upgrade:
		s.old = max(s.old-1, 0)
	case ZKWipeReseed, ZKRollbackReseed:
		s.old = 0 // the re-seeded room needs this release
	}
	f.Heal = s.between(500*time.Millisecond, 3*time.Second)
	return f
}

// pair turns a drawn observer or room-version kind into the one the
// schedule's state calls for: join while fewer than two observers run
// (never more than maxObservers), else leave; raise at room version 1,
// lower at 2; downgrade while no replica runs the previous release,
// upgrade when all do, else either.
func (s *Schedule) pair(k Kind) Kind {
	switch k {
	case ObserverJoin, ObserverLeave:
		switch {
		case s.observers <= 1:
			return ObserverJoin
		case s.observers >= maxObservers:
			return ObserverLeave
		case s.rng.IntN(2) == 0:
			return ObserverJoin
		default:
			return ObserverLeave
		}
	case RoomVersionRaise, RoomVersionLower:
		if s.roomVersion >= 2 {
			return RoomVersionLower
		}
		return RoomVersionRaise
	case Upgrade, Downgrade:
		switch {
		case s.old == 0:
			return Downgrade
		case s.old >= s.replicas:
			return Upgrade
		case s.rng.IntN(2) == 0:
			return Downgrade
		default:
			return Upgrade
		}
	}
	return k
}

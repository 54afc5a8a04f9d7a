package replica

import (
	"context"
	"errors"
	"maps"
	"slices"
	"time"

	"github.com/roomlog/roomlog/logroom"
)

// confirmCorruptTakeovers is how many consecutive takeovers must fail with
// ErrCorrupt before the replica calls the room damaged and fails.
const confirmCorruptTakeovers = 3

// appliedQuiet is how long the applied index must stay put to count as
// settled (published without waiting for MemberUpdateInterval).
const appliedQuiet = 20 * time.Millisecond

// The replica's decisions, as pure functions of a snapshot of what it
// knows (etcd-io/raft's model): the core (core.go) calls decideElection
// and decideTakeover with the facts the loop read (each ZooKeeper read
// bounded by a context) and its own state; the loop calls decidePublish,
// and the checkpointer decideDeletions. Nothing here touches ZooKeeper,
// the store or a clock: every input is a field, so each decision is
// covered by table tests (decide_test.go) without a server.

// electionFacts is what the loop knows when it evaluates the election.
type electionFacts struct {
	Self         string // our member id
	Leader       bool   // our candidate is the lowest
	Role         Role
	Failed       bool // the replica has failed (it only resigns)
	ApplierReady bool // a standby tail runs (the takeover needs its position)
	Now          time.Time
	NotBefore    time.Time // takeovers wait until then (after a failed one)

	// Transfer is the transfer record, nil when none. TransferToLive: its
	// target is a live candidate; RoomEpoch: the room's epoch as read with
	// it (a record names the epoch it was written under).
	Transfer       *transferRecord
	TransferToLive bool
	RoomEpoch      uint64

	// Compaction: OldestFirst is the first index of the oldest channel (0:
	// unknown); Applied ours; OthersApplied the applied index of every
	// other live candidate (from its member data, so up to one
	// MemberUpdateInterval old: never ahead of the truth).
	// LagBound: a lowest candidate that another live candidate is ahead of
	// by more than this many entries requeues behind it (0: no bound).
	LagBound      uint64
	OldestFirst   uint64
	Applied       uint64
	OthersApplied []uint64
}

// electionAction is what the loop does after evaluating the election.
type electionAction int

const (
	elNone            electionAction = iota
	elEndTerm                        // primary, but no longer the lowest: step down
	elAbortTakeover                  // taking over, but no longer the lowest
	elRetryLater                     // lowest, but not ready: evaluate again on the next tick
	elRequeueTransfer                // lowest, but leadership is being handed to another live candidate
	elRequeueBehind                  // lowest, but our state is behind the deleted log and another candidate's is not
	elTakeOver                       // lowest and ready: start a takeover
	elRequeueLagging                 // lowest, but another live candidate has applied more than LagBound entries more
)

var electionActionNames = [...]string{"none", "end term", "abort takeover", "retry later", "requeue: transfer", "requeue: behind compaction", "take over",
	"requeue: lagging"}

func (a electionAction) String() string {
	if int(a) < len(electionActionNames) {
		return electionActionNames[a]
	}
	return "unknown"
}

// needsTakeoverFacts says whether decideElection may reach the takeover
// branch, so the loop reads the transfer record and the room's epoch only
// then.
func (f electionFacts) needsTakeoverFacts() bool {
	return f.Leader && f.Role == RoleStandby && !f.Failed && f.ApplierReady && !f.Now.Before(f.NotBefore)
}

// decideElection: lose the position → end the term or abort the
// takeover; win it as a standby → take over unless a fresh transfer
// record names another live candidate under the current epoch, or our
// state is behind the deleted log while another candidate's is not (then
// requeue behind them); not ready (failed, no standby tail yet, backing
// off after a failed takeover) → retry later.
func decideElection(f electionFacts) electionAction {
	switch {
	case !f.Leader && f.Role == RolePrimary:
		return elEndTerm
	case !f.Leader && f.Role == RoleTakingOver:
		return elAbortTakeover
	case !f.Leader || f.Role != RoleStandby:
		return elNone
	case f.Failed:
		return elNone
	case !f.ApplierReady || f.Now.Before(f.NotBefore):
		return elRetryLater
	}
	if t := f.Transfer; t != nil && t.To != f.Self && f.Now.UnixMilli() < t.Deadline &&
		f.TransferToLive && f.RoomEpoch == t.Epoch {
		return elRequeueTransfer
	}
	if behindCompaction(f.OldestFirst, f.Applied, f.OthersApplied) {
		return elRequeueBehind
	}
	if t := f.Transfer; t != nil && t.To == f.Self && f.Now.UnixMilli() < t.Deadline {
		return elTakeOver // handed to us: the old primary waited for our catch-up
	}
	if lagging(f.Applied, f.OthersApplied, f.LagBound) {
		return elRequeueLagging
	}
	return elTakeOver
}

// lagging: another live candidate has applied more than bound entries more
// than we have, so a takeover by us would include that catch-up while it
// could lead at once. Their indexes come from member data, published at
// most an interval late, so they only ever look less ahead than they are:
// a candidate requeues only behind one that is truly ahead. bound 0: never.
func lagging(applied uint64, others []uint64, bound uint64) bool {
	if bound == 0 {
		return false
	}
	for _, a := range others {
		if a > applied && a-applied > bound {
			return true
		}
	}
	return false
}

// behindCompaction: we would have to bootstrap from a checkpoint before
// leading (our next entry was deleted: applied < oldestFirst-1) while
// another live candidate would not. When unsure (oldestFirst 0): false.
func behindCompaction(oldestFirst, applied uint64, others []uint64) bool {
	if oldestFirst == 0 || applied >= oldestFirst-1 {
		return false
	}
	for _, a := range others {
		if a >= oldestFirst-1 {
			return true
		}
	}
	return false
}

// takeoverAction is what the loop does with a finished takeover's error.
type takeoverAction int

const (
	toLead    takeoverAction = iota // no error: become primary
	toFail                          // fatal: the replica fails
	toRequeue                       // fenced by a concurrent writer: go behind it
	toRetry                         // transient: retry after a pause
	toStop                          // cancelled (we stopped it): nothing more
)

// decideTakeover classifies a takeover's outcome. corrupt counts the
// consecutive takeovers that failed with logroom.ErrCorrupt before this
// one; the result says how many do now (ErrCorrupt is fatal once
// confirmCorruptTakeovers in a row saw it: a damaged room is a visible
// failed state, not an endless quiet retry loop).
func decideTakeover(err error, corrupt int) (takeoverAction, int) {
	switch {
	case err == nil:
		return toLead, 0
	case isFatal(err) || errors.Is(err, logroom.ErrDiverged) || errors.Is(err, logroom.ErrUnsupportedVersion) ||
		errors.Is(err, logroom.ErrRoomLost):
		return toFail, corrupt
	case errors.Is(err, logroom.ErrCorrupt):
		if corrupt+1 >= confirmCorruptTakeovers {
			return toFail, corrupt + 1
		}
		return toRetry, corrupt + 1
	case errors.Is(err, logroom.ErrFenced):
		return toRequeue, 0
	case errors.Is(err, context.Canceled):
		return toStop, 0
	default:
		return toRetry, 0
	}
}

// publishFacts is what decides whether a member rewrites its member data.
type publishFacts struct {
	Published   bool       // our member node exists with data we wrote
	Last        memberData // what it holds (valid when Published)
	Own         memberData // what we would write now
	Asked       uint64     // the primary's CatchUp (0: none)
	Now         time.Time
	LastPublish time.Time // when we last wrote it
	SeenMoved   time.Time // when our applied index last changed
	SettleSpent bool      // the last publish was a settled one
	Interval    time.Duration
}

// decidePublish says whether to rewrite our member data now, and whether
// this publish is a "settled" one (see publishDue): no node yet; role,
// checkpoint, our own CatchUp or our bootstrap hold changed; the applied
// index (or a bootstrap's progress) changed and
// the primary asks for an index we reached, or an interval passed since
// the last publish, or the index settled (not moved for appliedQuiet, a
// tenth of the interval passed, and the previous publish was not itself a
// settled one).
func decidePublish(f publishFacts) (due, settled bool) {
	switch {
	case !f.Published:
		return true, false
	case f.Last.Role != f.Own.Role || f.Last.Checkpoint != f.Own.Checkpoint || f.Last.CatchUp != f.Own.CatchUp ||
		f.Last.Hold != f.Own.Hold:
		return true, false
	case !sameKeys(f.Last.HashAgree, f.Own.HashAgree):
		// Who agrees with us changed (a member joined, left, or
		// diverged): the others' votes need it even in a quiet room.
		return true, false
	case f.Last.Applied == f.Own.Applied && !maps.Equal(f.Last.HashAgree, f.Own.HashAgree):
		// A quiet room: the indexes of our agreements moved (we compared
		// a peer's newest publication) while our own index did not, so no
		// publish of it would carry them. Under load they ride along.
		return true, false
	case f.Last.Applied == f.Own.Applied && f.Last.HoldProgress == f.Own.HoldProgress:
		return false, false
	case f.Asked > f.Last.Applied && f.Own.Applied >= f.Asked:
		return true, false
	}
	since := f.Now.Sub(f.LastPublish)
	if since >= f.Interval {
		return true, false
	}
	settled = !f.SettleSpent && f.Now.Sub(f.SeenMoved) >= appliedQuiet && since >= f.Interval/10
	return settled, settled
}

// sameKeys reports whether two agreement maps name the same peers (the
// indexes they carry move with every comparison and ride along with the
// next publish of the applied index).
func sameKeys(a, b map[string]hashAgreement) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if _, ok := b[k]; !ok {
			return false
		}
	}
	return true
}

// deletion is one channel decideDeletions chose.
type deletion struct {
	Num    uint64
	Forced bool // past the retention limit: a live member has not applied it (it will bootstrap)
}

// decideDeletions picks the sealed channels to delete, oldest first and
// never one in the middle: a channel goes when ckpt (our durable
// checkpoint) and served (the newest checkpoint a live member proved it
// serves) both cover its last index AND either every live member applied
// it (minApplied) or the room's charged bytes (logroom.ChannelInfo.Charged,
// the writer's MaxRoomBytes measure) are over retain (> 0). chans is the
// channel listing, oldest first.
//
// hold (0: none) is the lowest log index a live bootstrap that is making
// progress still needs (decideHold): a channel holding it or anything
// after it is never deleted, not even over retain, so a bootstrap is never
// outrun; the room then grows until appends get ErrRoomFull, as with any
// other retention.
func decideDeletions(chans []logroom.ChannelInfo, ckpt, served, minApplied, hold uint64, retain int64) []deletion {
	cover := min(ckpt, served)
	var total int64
	for _, c := range chans {
		total += c.Charged()
	}
	var out []deletion
	for _, c := range chans {
		if !c.Sealed || c.LastIndex > cover {
			break
		}
		if hold > 0 && c.LastIndex >= hold {
			break
		}
		over := retain > 0 && total > retain
		if c.LastIndex > minApplied && !over {
			break
		}
		out = append(out, deletion{Num: c.Num, Forced: c.LastIndex > minApplied})
		total -= c.Charged()
	}
	return out
}

// bootHold is a live member's bootstrap hold as the primary last saw it
// (memberData.Hold, HoldProgress, Applied), when it last saw it grow, and
// when it first saw this bootstrap's hold (Since).
type bootHold struct {
	Hold, Progress, Applied uint64
	Changed, Since          time.Time
}

// decideHold returns the lowest index the live members' bootstraps still
// need (0: none) and the members whose hold lapsed. A member's hold counts
// while all of these hold:
//   - its hold, progress (a counter that only grows during one bootstrap:
//     bytes received, a heartbeat while it verifies or installs, entries
//     applied) or applied index grew within stall of now, by the deciding
//     member's own clock (seen is what it observed before, updated in
//     place; members gone or without a hold are dropped from it); a hold
//     seen for the first time, or whose progress or hold went down (a new
//     bootstrap), counts: it was just published;
//   - the bootstrap has held for less than maxHeld (0: no bound) since this
//     bootstrap's hold was first seen;
//   - the hold is not below oldestFirst, the first index the log still
//     holds (0: unknown): such a bootstrap is outrun already, and keeping
//     the rest for it would only fill the room.
//
// A bootstrap that stops making progress, that retries a failing source
// forever, or that a forged member claims, holds the room for at most
// stall, or maxHeld in all: the room is not held full for a member that is
// stuck.
func decideHold(members map[string]memberData, seen map[string]bootHold, now time.Time, stall, maxHeld time.Duration, oldestFirst uint64) (hold uint64, lapsed []string) {
	for id := range seen {
		if d, ok := members[id]; !ok || d.Hold == 0 {
			delete(seen, id)
		}
	}
	ids := make([]string, 0, len(members))
	for id := range members {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	for _, id := range ids {
		d := members[id]
		if d.Hold == 0 {
			continue
		}
		cur := bootHold{Hold: d.Hold, Progress: d.HoldProgress, Applied: d.Applied}
		prev, ok := seen[id]
		fresh := !ok || cur.Progress < prev.Progress || cur.Hold < prev.Hold
		switch {
		case fresh:
			cur.Changed, cur.Since = now, now
		case cur.Hold > prev.Hold || cur.Progress > prev.Progress || cur.Applied > prev.Applied:
			cur.Changed, cur.Since = now, prev.Since
		default:
			cur.Changed, cur.Since = prev.Changed, prev.Since
		}
		seen[id] = cur
		if (stall > 0 && now.Sub(cur.Changed) >= stall) || (maxHeld > 0 && now.Sub(cur.Since) >= maxHeld) ||
			(oldestFirst > 0 && d.Hold < oldestFirst) {
			lapsed = append(lapsed, id)
			continue
		}
		if hold == 0 || d.Hold < hold {
			hold = d.Hold
		}
	}
	return hold, lapsed
}

// offerCheckpoint decides whether this member takes a checkpoint now,
// without waiting for the policy: the log no longer holds the entries
// before oldestFirst (the room was re-seeded or restored at oldestFirst-1,
// or channels were deleted under another member's checkpoint), its store
// covers them, and no local checkpoint of its own does. The primary
// offers one so; a standby only when no live member serves a checkpoint
// covering them (served: the newest the members advertise). A member
// started on an empty disk then finds a source at once; before, a
// restored seed offered none until something was written and a
// checkpoint came due, and standbys started empty sat at index 0. After a
// re-seed the seed may be a standby while a member whose store is a
// prefix of it is elected: that member cannot take over until it
// bootstraps, nothing is written meanwhile, and without the standby's
// offer the room stayed without a primary.
// A standby that advertises no address (canServe false) never offers:
// its checkpoint would help nobody.
func offerCheckpoint(primary, canServe bool, oldestFirst, localCkpt, applied, served uint64) bool {
	if oldestFirst <= 1 || localCkpt >= oldestFirst-1 || applied < oldestFirst-1 {
		return false
	}
	return primary || canServe && served < oldestFirst-1
}

// primaryOf is the one rule for "who is primary" by the members' data:
// among the live members whose data says primary, the one that leads the
// newest epoch (a deposed primary's data says primary until it learns it
// was deposed or its session expires; ties go to the smaller id, so the
// answer does not depend on map order). ok false: none says primary.
func primaryOf(members map[string]memberData) (p memberData, ok bool) {
	for _, d := range members {
		if d.Role != roleStrPrimary {
			continue
		}
		if !ok || d.Epoch > p.Epoch || (d.Epoch == p.Epoch && d.ID < p.ID) {
			p, ok = d, true
		}
	}
	return p, ok
}

package replica

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/roomlog/roomlog/logroom"
)

// Never outrun (package doc, "Bootstrap holds"): a member that bootstraps
// from a checkpoint at index C needs the log from C+1 on once the
// checkpoint is installed. Without a hold, a primary over RetainRoomBytes
// deletes the channels a slow bootstrap still needs, and the member
// bootstraps again, and again (hashicorp/raft#212). So the member
// publishes a hold (memberData.Hold) before it fetches, keeps it while it
// catches up to where the primary was when it installed the checkpoint,
// and the primary deletes nothing from the hold on while the hold makes
// progress (decideHold, decideDeletions).

// maxOutruns is how many bootstraps in a row may be outrun before the
// member fails with ErrBootstrapOutrun.
const maxOutruns = 3

// holdPublishWait bounds the wait for our hold to reach our member node
// before a fetch starts (the fetch goes on either way: an outrun is
// detected and named).
const holdPublishWait = 5 * time.Second

// setHold sets the hold our member data carries and asks the loop to
// publish it; 0 ends the bootstrap's hold (and zeroes its progress
// counter, which only grows while a hold lasts: decideHold).
func (r *Replica) setHold(hold uint64) {
	r.hold.Store(hold)
	if hold == 0 {
		r.holdProgress.Store(0)
		r.holdTarget.Store(0)
		r.holdInstalled.Store(0)
	}
	r.ckptReady.Notify()
}

// awaitHoldPublished waits (bounded by holdPublishWait and ctx) until our
// member node carries hold; false if it did not in time.
func (r *Replica) awaitHoldPublished(ctx context.Context, hold uint64) bool {
	deadline := time.NewTimer(holdPublishWait)
	defer deadline.Stop()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for r.holdPublished.Load() != hold {
		select {
		case <-ctx.Done():
			return false
		case <-deadline.C:
			return false
		case <-tick.C:
			r.ckptReady.Notify()
		}
	}
	return true
}

// holdUntilCaughtUp turns a bootstrap's hold into the catch-up hold after
// the checkpoint at index installed: applied+1 until the member applied
// target (where the primary was, by its member data, when the checkpoint
// was installed).
func (r *Replica) holdUntilCaughtUp(installed, target uint64) {
	if target <= installed {
		r.setHold(0)
		r.outrunsInARow.Store(0)
		return
	}
	r.holdTarget.Store(target)
	r.holdInstalled.Store(installed)
	r.holdProgress.Add(1)
	r.setHold(installed + 1)
}

// holdHeartbeat counts a heartbeat into our hold's progress every
// heartbeatEvery while beat says a bootstrap phase with no byte progress
// runs (verifying local files, installing); it stops when stop is closed.
func (r *Replica) holdHeartbeat(beat func() bool, stop <-chan struct{}) {
	t := time.NewTicker(heartbeatEvery)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			if beat() {
				r.holdProgress.Add(1)
			}
		}
	}
}

// heartbeatEvery: well below any BootstrapHoldStall Validate accepts.
const heartbeatEvery = 500 * time.Millisecond

// holdAdvance moves the catch-up hold with the applied index and drops it
// once the target is reached. Called by the apply goroutine after every
// applied run.
func (r *Replica) holdAdvance(applied uint64) {
	target := r.holdTarget.Load()
	if target == 0 || r.hold.Load() == 0 {
		return
	}
	if applied >= target {
		r.log.Info("bootstrap: caught up; the log is no longer held for us", "applied", applied, "target", target)
		r.setHold(0)
		r.outrunsInARow.Store(0)
		return
	}
	if prev := r.hold.Swap(applied + 1); applied+1 > prev {
		r.holdProgress.Add(applied + 1 - prev)
	}
}

// outrun handles a compacted position met while a hold was ours (a
// bootstrap's fetch or catch-up): it counts it and returns the error to
// report (wrapping ErrBootstrapOutrun), fatal after maxOutruns in a row.
func (r *Replica) outrun(cause error) error {
	hold := r.hold.Load()
	n := r.outrunsInARow.Add(1)
	r.outruns.Add(1)
	err := fmt.Errorf("%w: needed index %d (applied %d), %d in a row: %w", ErrBootstrapOutrun, hold, r.applied.Load(), n, cause)
	r.log.Error("bootstrap outrun: the log this member needs was deleted before it applied it; bootstrapping again",
		"hold", hold, "applied", r.applied.Load(), "in_a_row", n, "err", cause)
	r.setHold(0)
	if n >= maxOutruns {
		return fatal(fmt.Errorf("%w; the member cannot keep up with the room's retention (RetainRoomBytes) or its bootstrap stalls (BootstrapHoldStall)", err))
	}
	return err
}

// isOutrun says whether err, met by the standby tail, is a bootstrap's
// position deleted under it: after its checkpoint was installed, while
// it still held the log for its catch-up. (Before the install, a tail
// that finds its position compacted is the failed fetch's: the member
// bootstraps again, its hold kept.)
func (r *Replica) isOutrun(err error) bool {
	return r.hold.Load() != 0 && r.holdInstalled.Load() != 0 && errors.Is(err, logroom.ErrCompacted)
}

// bootstrapHold is the primary's side: the lowest index live bootstraps
// that make progress still need (decideHold), with lapsed holds logged and
// counted. oldestFirst is the first index the log holds. Only the
// checkpointer goroutine calls it.
func (r *Replica) bootstrapHold(members map[string]memberData, oldestFirst uint64) uint64 {
	if r.holdsSeen == nil {
		r.holdsSeen = map[string]bootHold{}
	}
	hold, lapsed := decideHold(members, r.holdsSeen, time.Now(), max(r.cfg.BootstrapHoldStall, 0), max(r.cfg.BootstrapHoldMax, 0), oldestFirst)
	now := make(map[string]bool, len(lapsed))
	for _, id := range lapsed {
		now[id] = true
		if r.holdsLapsedPrev[id] {
			continue // reported when it lapsed
		}
		r.holdsLapsed.Add(1)
		h := r.holdsSeen[id]
		r.log.Warn("a member's bootstrap hold lapsed: the log is no longer held for it",
			"member", id, "hold", h.Hold, "oldest_first", oldestFirst, "no_progress_for", time.Since(h.Changed).Round(time.Millisecond),
			"held_for", time.Since(h.Since).Round(time.Millisecond), "stall", r.cfg.BootstrapHoldStall, "max", r.cfg.BootstrapHoldMax)
	}
	r.holdsLapsedPrev = now
	if hold != 0 && r.heldByBoot.Load() != hold {
		r.log.Info("channel deletion held for a member's bootstrap", "hold", hold)
	}
	r.heldByBoot.Store(hold)
	return hold
}

// forgetHolds drops the primary's view of holds when it stops deciding
// deletions (not primary), so Status and the metric do not show a stale
// hold and a later term starts from what it reads then.
func (r *Replica) forgetHolds() {
	r.heldByBoot.Store(0)
	r.holdsSeen, r.holdsLapsedPrev = nil, nil
}

// primaryApplied is the highest applied index a live member publishes (the
// primary's, which no other member's passes), at least floor; floor when
// the members cannot be read.
func (r *Replica) primaryApplied(floor uint64) uint64 {
	members, err := readMembers(r.conn, r.room.Path(membersDir))
	if err != nil {
		r.log.Warn("bootstrap: members unreadable; no catch-up hold", "err", err)
		return floor
	}
	hi := floor
	for _, m := range members {
		if m.ID != r.cfg.ID {
			hi = max(hi, m.Applied)
		}
	}
	return hi
}

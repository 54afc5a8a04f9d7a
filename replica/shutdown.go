package replica

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Shutdown leaves the room gracefully. A primary first hands its role to
// the live standby that has applied the most (never an observer):
// TransferLeadership, bounded by ctx, so the next primary is chosen and
// caught up while this one still answers (proposals meanwhile get
// ErrNotPrimary naming the target), instead of the election starting
// only once this member's candidate is gone. Then, in every case, Close.
//
// A standby, or a primary with no standby to hand to, just closes. A
// hand-off that fails (ctx ends, the target does not catch up within
// TransferTimeout or leaves) is logged and returned wrapped in
// ErrTransfer, joined with Close's error; the replica is closed all the
// same, and a standby takes over as it would after Close.
func (r *Replica) Shutdown(ctx context.Context) error {
	herr := r.handOff(ctx)
	return errors.Join(herr, r.Close())
}

// handOff is Shutdown's transfer (nil when there is nothing to do).
func (r *Replica) handOff(ctx context.Context) error {
	if r.usable() != nil || r.currentTerm() == nil {
		return nil
	}
	to := handOffTarget(r.cfg.ID, r.snap.Load().members)
	if to == "" {
		r.log.Info("shutdown: no standby to hand the primary role to; leaving the room")
		return nil
	}
	start := time.Now()
	err := r.TransferLeadership(ctx, to)
	switch {
	case err == nil:
		r.log.Info("shutdown: handed the primary role over", "to", to, "took", time.Since(start))
		return nil
	case errors.Is(err, ErrNotPrimary):
		return nil // the role went elsewhere meanwhile: nothing to hand over
	}
	r.log.Warn("shutdown: hand-off of the primary role failed; leaving the room instead", "to", to, "err", err)
	if !errors.Is(err, ErrTransfer) {
		err = fmt.Errorf("%w: %w", ErrTransfer, err)
	}
	return fmt.Errorf("replica: shutdown: hand-off to %q: %w", to, err)
}

// handOffTarget picks the live standby (not self, not an observer) with
// the highest applied index; "" if there is none.
func handOffTarget(self string, members []MemberStatus) string {
	to, applied := "", uint64(0)
	for _, m := range members {
		if m.ID == self || m.Role != RoleStandby || m.Observer {
			continue
		}
		if to == "" || m.Applied > applied {
			to, applied = m.ID, m.Applied
		}
	}
	return to
}

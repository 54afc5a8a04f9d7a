package election

import (
	"context"
	"errors"
	"fmt"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
)

// Term is one stretch of leadership: from the moment the participant's
// node was found to be the lowest candidate until StepDown, Designate or
// Resign (Err wraps ErrSteppedDown), or until leadership is lost — the
// node deleted or written by someone else, the session expired, or the
// client disconnected longer than Config.SuspendGrace (Err wraps
// ErrLeadershipLost). Done closes when
// it ends; it never restarts (a new term is a new Term, possibly with the
// same token if the same node is still the lowest).
type Term struct {
	p    *Participant
	hold *zkr.Hold
	cand Candidate
}

// Token is the czxid of the leader's candidate node: it grows with every
// node created in the directory, so a later leader (a later node) has a
// larger token. Hand it to systems the leader writes to.
func (t *Term) Token() int64 { return t.hold.Token() }

// Node returns the path of the leader's candidate node.
func (t *Term) Node() string { return t.hold.Path() }

// Candidate describes the leader's candidate node.
func (t *Term) Candidate() Candidate { return t.cand.clone() }

// Done is closed when the term ends.
func (t *Term) Done() <-chan struct{} { return t.hold.Done() }

// Err returns nil while the term lasts, then why it ended.
func (t *Term) Err() error { return termErr(t.hold.Err()) }

func termErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, zkr.ErrHoldReleased):
		return ErrSteppedDown
	default:
		return fmt.Errorf("%w: %w", ErrLeadershipLost, err)
	}
}

// Active reports whether the term lasts and the client is connected in
// the session that holds the node: the only time the leader may act as
// leader. While disconnected it cannot know it still leads (another may,
// once its session expired on the servers); it must pause until Active
// again, or until Done.
func (t *Term) Active() bool { return t.hold.Active() }

// Guard returns ops preceded by a check that the leader's node still
// exists (version 0: candidate nodes are never written), for a Multi that
// commits only while this node is the leader's.
func (t *Term) Guard(ops ...any) []any { return zkr.Guard(t.Node(), 0, ops...) }

// Multi runs ops atomically only while this term's node exists: ZooKeeper
// checks it in the same transaction. Once the term ended, or its node is
// gone, the error wraps ErrLeadershipLost (or ErrSteppedDown) and nothing
// was written. On a connection loss the outcome is unknown
// (zkx.IsConnLoss): read back before retrying.
func (t *Term) Multi(ctx context.Context, ops ...any) ([]zk.MultiResponse, error) {
	res, err := t.hold.Multi(ctx, ops...)
	switch {
	case errors.Is(err, zkr.ErrHoldEnded):
		return nil, fmt.Errorf("election: guarded write on %s not sent: %w", t.Node(), t.Err())
	case errors.Is(err, zkr.ErrGuardFailed):
		return nil, fmt.Errorf("election: guarded write refused by ZooKeeper, nothing written: %w: %w", ErrLeadershipLost, err)
	}
	if err != nil {
		return nil, fmt.Errorf("election: guarded write on %s: %w", t.Node(), err)
	}
	return res, nil
}

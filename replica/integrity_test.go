package replica

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/store"
)

// skewApplier is store.OpsApplier except on the entries it is told to
// skew: there it writes one more key, as a nondeterministic Applier (a
// map iteration, a clock read, a version skew) would on one member only.
type skewApplier struct {
	bad atomic.Pointer[[]byte] // entry data to skew (nil: none)
}

func (a *skewApplier) Apply(b store.Batch, e store.Entry) ([]byte, error) {
	resp, err := store.OpsApplier{}.Apply(b, e)
	if p := a.bad.Load(); err == nil && p != nil && bytes.Equal(*p, e.Data) {
		err = b.Set([]byte("skew"), []byte(fmt.Sprint(time.Now().UnixNano())))
	}
	return resp, err
}

// TestIntegrityNondeterministicApplier (issue 25): one member's Applier
// writes something the others' do not, at one entry. Nothing else shows
// it: the log is fine and every member keeps applying. The running state
// hash each member publishes catches it at that very index: the member in
// the minority fails with ErrDiverged naming both members, the index and
// both hashes, cannot become primary, and the others carry on. Run once
// with the skew on a standby, once on the primary (which then fails and is
// replaced), and once with two members (the one that is not primary
// stops).
func TestIntegrityNondeterministicApplier(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members int
		onPrim  bool
	}{
		{"standby of three", 3, false},
		{"primary of three", 3, true},
		{"standby of two", 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			skews := map[string]*skewApplier{}
			cl := newCluster(t, sharedEnsemble(t), func(cfg *Config) {
				a := &skewApplier{}
				skews[cfg.ID] = a
				cfg.Applier = a
			})
			reps := cl.openN(tc.members)
			p := cl.waitPrimary(30 * time.Second)
			ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
			defer cancel()
			proposeN(t, ctx, p, 5)
			bad := cl.other(p)
			if tc.onPrim {
				bad = p
			}
			poison := setOp("poison", "v")
			skews[bad.ID()].bad.Store(&poison)
			res, err := p.Propose(ctx, poison)
			if !tc.onPrim {
				require.NoError(t, err)
			}
			badIndex := res.Index
			// Traffic goes on; the check needs nothing else to happen.
			err = waitFailed(t, bad, 15*time.Second, ErrDiverged)
			t.Logf("%s: %v", bad.ID(), err)
			if badIndex != 0 {
				require.Contains(t, err.Error(), fmt.Sprintf("running state hash at index %d", badIndex))
			}
			require.Contains(t, err.Error(), "member "+bad.ID()+" has")
			require.Contains(t, err.Error(), "cannot become primary")
			for _, r := range reps {
				if r == bad {
					continue
				}
				s := r.Status()
				require.NotEqual(t, RoleFailed, s.Role, "%s: %v", r.ID(), s.Err)
				require.Positive(t, s.HashCompared)
			}
			// The room goes on without it, and it never leads.
			var next *Replica
			require.Eventually(t, func() bool {
				for _, r := range reps {
					if r != bad && r.Status().Role == RolePrimary {
						next = r
						return true
					}
				}
				return false
			}, 30*time.Second, 10*time.Millisecond, "a healthy member leads")
			res, err = cl.proposeRetry(ctx, setOp("after", "v"))
			require.NoError(t, err)
			for _, r := range reps {
				if r != bad {
					require.NoError(t, r.WaitApplied(ctx, res.Index))
				}
			}
			require.Equal(t, RoleFailed, bad.Status().Role)
			_ = next

			id := bad.ID()
			if tc.members == 2 {
				// The verdict of a room of two is not recorded (a third
				// member may only be away): restarted, the member opens
				// and is failed again by the same rule, never leading.
				time.Sleep(200 * time.Millisecond)
				_, err := os.Stat(filepath.Join(cl.root, id, divergedName))
				require.ErrorIs(t, err, os.ErrNotExist)
				cl.close(id)
				again := cl.open(id)
				err = waitFailed(t, again, 15*time.Second, ErrDiverged)
				require.Contains(t, err.Error(), "the other one is the primary")
				return
			}
			// Restarted on its data dir, it refuses by name (it could
			// otherwise lead before its peers outvote it again).
			require.Eventually(t, func() bool {
				_, err := os.Stat(filepath.Join(cl.root, id, divergedName))
				return err == nil
			}, 10*time.Second, 10*time.Millisecond, "the divergence is recorded in the data dir")
			cl.close(id)
			octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
			defer ocancel()
			_, err = Open(octx, cl.config(id))
			require.ErrorIs(t, err, ErrDiverged)
			require.Contains(t, err.Error(), "replace the data dir")
			require.Contains(t, err.Error(), fmt.Sprintf("member %s has", id))
		})
	}
}

package replica

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/logroom"
)

// TestCoreMarksRoomLost: a failure that is a verdict that ZooKeeper's log
// lost what the member applied (logLost) marks the room lost (aMarkLost,
// carrying the verdict) before every resignation attempt, and only while
// connected; other failures, a room already marked among them, do not.
func TestCoreMarksRoomLost(t *testing.T) {
	base := time.Unix(1_000_000, 0)
	lost := fatal(logLost("the log audit found", fmt.Errorf("%w: room %q: the log ends at 11, below index 19 this member applied", logroom.ErrDiverged, "r")))
	audit := fmt.Errorf("replica: the room's log changed under a running member: %w", lost)
	kinds := func(acts []action) []actKind {
		var out []actKind
		for _, a := range acts {
			out = append(out, a.Kind)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		err  error
		bugs coreBugs
		want []actKind
	}{
		{"the log audit found the log short", audit, coreBugs{}, []actKind{aFail, aRole, aMarkLost}},
		{"a takeover found it", fmt.Errorf("takeover: %w", lost), coreBugs{}, []actKind{aFail, aRole, aMarkLost}},
		{"the room already marked lost", fmt.Errorf("replica: the log audit found: %w: room marked lost", logroom.ErrRoomLost), coreBugs{}, []actKind{aFail, aRole, aResign}},
		{"another failure", fatal(errors.New("apply failed")), coreBugs{}, []actKind{aFail, aRole, aResign}},
		{"planted: no mark", audit, coreBugs{noMark: true}, []actKind{aFail, aRole, aResign}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCore("a", 4*time.Second, 1)
			c.bugs = tc.bugs
			acts := c.Step(evFail{Err: tc.err})
			require.Equal(t, tc.want, kinds(acts))
			marking := false
			for _, a := range acts {
				if a.Kind == aMarkLost {
					require.Same(t, tc.err, a.Err, "the finding is what the marker records")
					marking = true
				}
			}
			require.Empty(t, c.resignDue(base), "one step out at a time")
			if marking {
				// The mark's outcome is unknown: the candidate stays, and
				// the mark is tried again only after markRetryPause.
				require.Empty(t, c.Step(evMarked{Now: base, Err: zk.ErrConnectionClosed}))
				require.Empty(t, c.resignDue(base.Add(markRetryPause/2)))
				require.Equal(t, []actKind{aMarkLost}, kinds(c.resignDue(base.Add(markRetryPause))))
				// In place: now the resignation, once.
				require.Equal(t, []actKind{aResign}, kinds(c.Step(evMarked{Now: base.Add(markRetryPause)})))
				require.Empty(t, c.resignDue(base.Add(markRetryPause)))
			}
			// A resignation that failed is tried again; the mark, once in
			// place, is not.
			require.Empty(t, c.Step(evResigned{Err: zk.ErrConnectionClosed}))
			require.Equal(t, []actKind{aResign}, kinds(c.resignDue(base.Add(2*markRetryPause))))
			c.Step(evResigned{Err: zk.ErrConnectionClosed})
			// Disconnected: nothing is tried.
			c.Step(evSession{Now: base, State: zk.StateDisconnected, SessionID: 1})
			require.Empty(t, c.resignDue(base.Add(2*markRetryPause)))
			c.Step(evSession{Now: base.Add(time.Second), State: zk.StateHasSession, SessionID: 1})
			require.Equal(t, []actKind{aResign}, kinds(c.resignDue(base.Add(2*markRetryPause))))
			// Resigned: done.
			c.Step(evResigned{})
			require.Empty(t, c.resignDue(base.Add(2*markRetryPause)))
		})
	}

	// The probe's verdict comes while our own session is refused: the
	// probe marked through its own session; the core marks again (a
	// marker already there is left alone) once connected.
	c := newCore("a", 4*time.Second, 1)
	c.Step(evSession{Now: base, State: zk.StateDisconnected, SessionID: 1})
	acts := c.Step(evProbed{Now: base.Add(2 * time.Second), Reached: true, Verdict: logLost("a probe with a new session found", logroom.ErrDiverged)})
	require.Equal(t, []actKind{aFail, aRole}, kinds(acts))
	acts = c.Step(evSession{Now: base.Add(3 * time.Second), State: zk.StateHasSession, SessionID: 1})
	require.Equal(t, []actKind{aConnected}, kinds(acts))
	require.Equal(t, []actKind{aMarkLost}, kinds(c.resignDue(base.Add(3*time.Second))))
	require.Equal(t, []actKind{aResign}, kinds(c.Step(evMarked{Now: base.Add(3 * time.Second)})))
}

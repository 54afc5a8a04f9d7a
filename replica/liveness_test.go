package replica

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	elect "github.com/roomlog/roomlog/recipe/election"
)

// TestLivenessTargetOf: the member right behind the primary in the line
// (skipping candidates of members no longer live, which a stale view still
// lists, and observers) watches the primary's candidate; nobody else does.
func TestLivenessTargetOf(t *testing.T) {
	cand := func(id string, seq int64) elect.Candidate {
		return elect.Candidate{ID: id, Data: []byte(id + ":80"), Node: fmt.Sprintf("c-g%s-%010d", id, seq), GUID: "g" + id, Seq: seq, Session: seq}
	}
	view := electionView{cands: []elect.Candidate{cand("a", 1), cand("b", 2), cand("c", 3), cand("d", 4)}}
	members := map[string]memberData{
		"a": {ID: "a", Role: roleStrPrimary}, "b": {ID: "b", Role: roleStrStandby},
		"c": {ID: "c", Role: roleStrStandby}, "d": {ID: "d", Role: roleStrStandby},
	}
	tgt, ok := livenessTargetOf(view, "b", members)
	require.True(t, ok)
	require.Equal(t, livenessTarget{ID: "a", Addr: "a:80", Node: "c-ga-0000000001", GUID: "ga", Session: 1}, tgt)
	for _, self := range []string{"a", "c", "d"} {
		_, ok := livenessTargetOf(view, self, members)
		require.False(t, ok, self)
	}

	// a died and b leads; c's view still lists a (its predecessor b did
	// not change): c is the first live candidate behind b.
	delete(members, "a")
	members["b"] = memberData{ID: "b", Role: roleStrPrimary}
	tgt, ok = livenessTargetOf(view, "c", members)
	require.True(t, ok)
	require.Equal(t, "b", tgt.ID)
	_, ok = livenessTargetOf(view, "d", members)
	require.False(t, ok)

	// An observer behind the primary is skipped (it never leads).
	members["c"] = memberData{ID: "c", Role: roleStrStandby, Observer: true}
	tgt, ok = livenessTargetOf(view, "d", members)
	require.True(t, ok)
	require.Equal(t, "b", tgt.ID)

	// No primary among the members: nothing to watch.
	members["b"] = memberData{ID: "b", Role: roleStrStandby}
	_, ok = livenessTargetOf(view, "c", members)
	require.False(t, ok)
}

// TestDecideLiveness: only a refusal, a hang-up before any answer or
// another process's guid is proof; a timeout or an answer from the
// process itself is not.
func TestDecideLiveness(t *testing.T) {
	tgt := livenessTarget{GUID: "g1"}
	refused := &net.OpError{Op: "dial", Err: &os.SyscallError{Syscall: "connect", Err: syscall.ECONNREFUSED}}
	reset := &net.OpError{Op: "read", Err: &os.SyscallError{Syscall: "read", Err: syscall.ECONNRESET}}
	timeout := &net.OpError{Op: "dial", Err: errors.New("i/o timeout")}
	require.Equal(t, evidenceRefused, decideLiveness(fmt.Errorf("get: %w", refused), tgt, ""))
	require.Equal(t, evidenceHungUp, decideLiveness(fmt.Errorf("get: %w", reset), tgt, ""))
	require.Equal(t, evidenceHungUp, decideLiveness(fmt.Errorf("get: %w", io.EOF), tgt, ""))
	require.Equal(t, evidenceNone, decideLiveness(fmt.Errorf("get: %w", timeout), tgt, ""))
	require.Equal(t, evidenceNone, decideLiveness(nil, tgt, "g1"))
	require.Equal(t, evidenceNone, decideLiveness(nil, tgt, ""), "a member that does not lead says nothing of the process")
	require.Equal(t, evidenceOther, decideLiveness(nil, tgt, "g2"))
}

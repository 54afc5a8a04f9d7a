package replica

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"syscall"
	"testing"
	"time"

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

	// A deposed primary's data still says primary until its session
	// expires: the one leading the newer epoch is the primary.
	members["b"] = memberData{ID: "b", Role: roleStrPrimary, Epoch: 3}
	members["a"] = memberData{ID: "a", Role: roleStrPrimary, Epoch: 2}
	members["c"] = memberData{ID: "c", Role: roleStrStandby}
	tgt, ok = livenessTargetOf(view, "c", members)
	require.True(t, ok, "c watches b, the newest primary, not the deposed a")
	require.Equal(t, "b", tgt.ID)
	delete(members, "a")

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

// wrappedWriter is an embedder's middleware writer: it hides Hijack and
// Flush but unwraps, as net/http's ResponseController expects.
type wrappedWriter struct{ http.ResponseWriter }

func (w *wrappedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// TestLivenessStreamBehindMiddleware: the primary's liveness stream works
// behind a wrapping middleware (the demo counts every route), names the
// process, beats, and ends when the replica stops; a standby answers 409.
func TestLivenessStreamBehindMiddleware(t *testing.T) {
	cl := newCluster(t, sharedEnsemble(t), func(cfg *Config) { cfg.ListenAddr = "" })
	p := cl.open("m0")
	require.Equal(t, p, cl.waitPrimary(30*time.Second))
	s := cl.open("m1")
	mux := http.NewServeMux()
	mux.Handle(CheckpointPath(cl.room), p.CheckpointHandler())
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(&wrappedWriter{w}, r)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+CheckpointPath(cl.room)+"liveness", nil)
	require.NoError(t, err)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, *p.live.guid.Load(), resp.Header.Get(livenessGUIDHeader))
	b := make([]byte, 1)
	_, err = io.ReadFull(resp.Body, b)
	require.NoError(t, err, "a beat within a second")
	require.Equal(t, byte('.'), b[0])

	// A standby's endpoint answers 409 (it does not lead).
	rec := httptest.NewRecorder()
	s.CheckpointHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, CheckpointPath(cl.room)+"liveness", nil))
	require.Equal(t, http.StatusConflict, rec.Code)

	// The stream ends when the primary stops (it does not hold Close).
	cl.close("m0")
	_, err = io.ReadAll(resp.Body)
	require.NoError(t, err, "a clean end of the hijacked stream")
}

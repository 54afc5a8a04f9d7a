package testnode

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
)

// TestNodeCluster drives two node processes on a 1-server ensemble through
// the whole API and every lifecycle operation.
func TestNodeCluster(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	c := ClusterForTest(t, ClusterOptions{Nodes: 2, ZK: ens.Addrs(), Node: NodeOptions{SessionTimeout: 2 * time.Second}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	p, err := c.WaitPrimary(ctx)
	require.NoError(t, err)
	var s *Node
	for _, n := range c.Nodes() {
		if n != p {
			s = n
		}
	}

	// A standby refuses with the primary's id and address: nothing sent.
	e, err := SetEntry("p/x", []byte("v"))
	require.NoError(t, err)
	res, err := s.Propose(ctx, e)
	require.ErrorIs(t, err, replica.ErrNotPrimary)
	var ae *APIError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, p.ID(), ae.PrimaryID)
	require.Equal(t, p.Addr(), ae.PrimaryAddr)
	require.Equal(t, OutcomeNotCommitted, Classify(res, err))

	// The primary acknowledges in index order.
	h := &History{}
	var last uint64
	for i := range 5 {
		e, err := SetEntry("p/k"+string(rune('a'+i)), []byte("v"))
		require.NoError(t, err)
		res, err := p.Propose(ctx, e)
		require.NoError(t, err)
		require.Greater(t, res.Index, last)
		last = res.Index
		h.Add(Proposal{Key: "k", SHA256: EntrySHA(e), Outcome: OutcomeAcked, Index: res.Index, Node: p.ID()})
	}
	// Requests: the log recorder follows from index 1; a resend of the
	// same id and entry is a Duplicate of the first application, on the
	// primary and (once it applied it) on the standby; the same id with
	// another entry is a conflict; a malformed id a bad_request_id.
	lr, err := StartLogRecorder(ctx, ens.Addrs(), c.Room())
	require.NoError(t, err)
	defer lr.Stop()
	rid := replica.NewRequestID()
	re, err := SetEntry("p/req", []byte("r"))
	require.NoError(t, err)
	r1, err := p.ProposeRequest(ctx, rid, re)
	require.NoError(t, err)
	require.False(t, r1.Duplicate)
	require.Greater(t, r1.Index, last)
	last = r1.Index
	r2, err := p.ProposeRequest(ctx, rid, re)
	require.NoError(t, err)
	require.True(t, r2.Duplicate)
	require.Equal(t, r1.Index, r2.Index)
	_, err = s.Hash(ctx, r1.Index)
	require.NoError(t, err)
	r3, err := s.ProposeRequest(ctx, rid, re)
	require.NoError(t, err, "a standby answers a request it applied")
	require.True(t, r3.Duplicate)
	require.Equal(t, r1.Index, r3.Index)
	h.Add(Proposal{Key: "req", SHA256: EntrySHA(re), RequestID: rid.String(), Outcome: OutcomeAcked,
		Index: r2.Index, Duplicate: true, Attempts: 2, Node: p.ID()})
	other, err := SetEntry("p/req", []byte("other"))
	require.NoError(t, err)
	res, err = p.ProposeRequest(ctx, rid, other)
	require.ErrorIs(t, err, replica.ErrRequestConflict)
	require.ErrorAs(t, err, &ae)
	require.Equal(t, http.StatusConflict, ae.Status)
	require.Equal(t, CodeConflict, ae.ErrorResponse.Error)
	require.Equal(t, OutcomeNotCommitted, Classify(res, err))
	for _, bad := range []string{"XYZ", strings.ToUpper(rid.String()), strings.Repeat("0", 32)} {
		err = p.Client().doHeader(ctx, http.MethodPost, "/propose", nil, http.Header{RequestIDHeader: {bad}}, re, nil)
		require.ErrorIs(t, err, ErrBadRequest, bad)
		require.ErrorAs(t, err, &ae)
		require.Equal(t, http.StatusBadRequest, ae.Status)
		require.Equal(t, CodeBadRequestID, ae.ErrorResponse.Error)
	}

	// The primary has applied the resend and the conflicting entry (two
	// indexes past last); wait for the standby to reach the same index,
	// not just last, before comparing and dumping.
	hp, err := p.Hash(ctx, last)
	require.NoError(t, err)
	require.Equal(t, last+2, hp.Index)
	hs, err := s.Hash(ctx, hp.Index)
	require.NoError(t, err)
	require.Equal(t, hp, hs)

	d, err := s.Client().DumpPage(ctx, 1, last, 2)
	require.NoError(t, err)
	require.Len(t, d.Records, 2)
	require.True(t, d.More)
	full, err := s.Dump(ctx, 1, ^uint64(0))
	require.NoError(t, err)
	// The retry and the conflicting entry sent to the primary are in the
	// log but were skipped at apply time: two indexes without a record.
	require.Len(t, full.Records, int(full.Applied)-2)
	idx, err := s.Barrier(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, idx, last)

	// Malformed requests.
	err = p.Client().do(ctx, http.MethodPost, "/transfer", nil, nil, nil)
	require.ErrorIs(t, err, ErrBadRequest)
	_, err = p.Client().DumpPage(ctx, 1, 2, MaxDumpLimit+1)
	require.ErrorIs(t, err, ErrBadRequest)
	err = s.StepDown(ctx)
	require.ErrorIs(t, err, replica.ErrNotPrimary)
	big, err := SetEntry("p/big", make([]byte, 1<<20)) // above the 256 KiB batch limit
	require.NoError(t, err)
	res, err = p.Propose(ctx, big)
	require.ErrorIs(t, err, logroom.ErrEntryTooLarge)
	require.Equal(t, OutcomeNotCommitted, Classify(res, err))

	// Pause and resume the standby; a running node cannot be wiped.
	require.NoError(t, s.Pause())
	require.True(t, s.Paused())
	require.False(t, s.Live())
	require.NotContains(t, c.Live(), s)
	require.NoError(t, s.Resume())
	require.True(t, s.Live())
	require.ErrorIs(t, s.WipeData(), ErrRunning)

	// kill -9 the primary under a load that resends unknown outcomes with
	// their request id: the standby takes over; the old one restarts as a
	// standby on the same address and everything converges.
	l := StartLoad(ctx, c, h, LoadOptions{Workers: 2, KeyPrefix: "l", RetryUnknown: true, Interval: 5 * time.Millisecond})
	defer l.Stop()
	require.NoError(t, l.WaitAcked(ctx, 10))
	oldAddr := p.Addr()
	require.NoError(t, p.Kill())
	require.False(t, p.Running())
	select {
	case <-p.Exited():
	default:
		t.Fatal("Exited not closed after Kill")
	}
	_, err = p.Status(ctx)
	require.ErrorIs(t, err, ErrUnreachable)
	require.ErrorIs(t, err, ErrNotSent)
	np, err := c.WaitPrimary(ctx)
	require.NoError(t, err)
	require.Equal(t, s, np)
	require.NoError(t, p.Restart(ctx))
	require.Equal(t, 2, p.Launches())
	require.Equal(t, oldAddr, p.Addr())
	_, err = c.WaitPrimary(ctx)
	require.NoError(t, err)
	require.NoError(t, l.WaitAcked(ctx, 10))
	l.Stop()
	conv, err := c.WaitConverged(ctx)
	require.NoError(t, err)
	r, err := Check(ctx, c.Live(), h)
	require.NoError(t, err)
	require.NoError(t, r.Err())
	require.Equal(t, 6+int(l.Acked()), r.Acked)
	t.Logf("load errors %v; check: %s", l.Errors(), r.Summary())
	for _, pr := range h.Proposals() {
		if strings.HasPrefix(pr.Key, "l/") {
			require.NotEmpty(t, pr.RequestID, "RetryUnknown proposals carry an id")
		}
	}
	// The recorder saw every entry, each as the records describe it.
	require.Eventually(t, func() bool { return lr.Position() > conv.Index }, 30*time.Second, 10*time.Millisecond)
	lr.Stop()
	entries := lr.Entries()
	require.Empty(t, lr.Skipped())
	dumps, err := Dumps(ctx, c.Live())
	require.NoError(t, err)
	for _, e := range entries[:conv.Index] {
		rec, ok := findRecord(dumps[s.ID()].Records, e.Index)
		if !ok {
			continue // a deduplicated copy (CheckDumpsLog proves it)
		}
		require.Equal(t, LogEntry{Index: rec.Index, Epoch: rec.Epoch, Size: rec.Size, SHA256: rec.SHA256, RequestID: rec.RequestID}, e)
	}
	r = CheckDumpsLog(dumps, h, entries)
	require.NoError(t, r.Err())

	// A member started on its own (StartForTest) joins and catches up.
	extra := StartForTest(t, NodeOptions{Binary: p.Options().Binary, ZK: ens.Addrs(), Room: c.Room(), ID: "extra", Dir: t.TempDir()})
	he, err := extra.Hash(ctx, conv.Index)
	require.NoError(t, err)
	hs, err = s.Hash(ctx, he.Index)
	require.NoError(t, err)
	require.Equal(t, hs, he)

	// SIGTERM: the node closes its replica and exits 0.
	require.NoError(t, p.Stop())
	require.NoError(t, p.ExitErr())
	require.ErrorIs(t, p.Pause(), ErrNotRunning)
	require.NoError(t, p.WipeData())
}

// A node that cannot open its replica fails Start with its log's tail
// and leaves no process.
func TestStartFailureCarriesLog(t *testing.T) {
	bin := BuildT(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err = Start(ctx, NodeOptions{Binary: bin, ZK: []string{dead}, Room: "r", ID: "n0", Dir: t.TempDir(),
		StartTimeout: 2 * time.Second, ExtraArgs: []string{"--open-timeout", "1s"}})
	require.Error(t, err)
	require.Contains(t, err.Error(), "==== testnode: launching n0")
	require.True(t, strings.Contains(err.Error(), ErrExited.Error()) || strings.Contains(err.Error(), "deadline"), err.Error())
}

func TestNodeOptionsValidate(t *testing.T) {
	err := NodeOptions{Sync: "bogus", ID: "a/b"}.Validate()
	require.ErrorIs(t, err, ErrInvalidOptions)
	for _, field := range []string{"ZK", "Room", "ID", "Dir", "Sync"} {
		require.Contains(t, err.Error(), field)
	}
	require.NoError(t, NodeOptions{ZK: []string{"x:1"}, Room: "r", ID: "n", Dir: "/tmp/x"}.Validate())
}

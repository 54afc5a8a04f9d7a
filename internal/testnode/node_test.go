package testnode

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/zkensemble"
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
	hp, err := p.Hash(ctx, last)
	require.NoError(t, err)
	hs, err := s.Hash(ctx, last)
	require.NoError(t, err)
	require.Equal(t, hp, hs)

	d, err := s.Client().DumpPage(ctx, 1, last, 2)
	require.NoError(t, err)
	require.Len(t, d.Records, 2)
	require.True(t, d.More)
	full, err := s.Dump(ctx, 1, ^uint64(0))
	require.NoError(t, err)
	require.Len(t, full.Records, int(full.Applied))
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

	// kill -9 the primary: the standby takes over; the old one restarts
	// as a standby on the same address and everything converges.
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
	_, err = c.WaitConverged(ctx)
	require.NoError(t, err)
	r, err := Check(ctx, c.Live(), h)
	require.NoError(t, err)
	require.NoError(t, r.Err())
	require.Equal(t, 5, r.Acked)

	// A member started on its own (StartForTest) joins and catches up.
	extra := StartForTest(t, NodeOptions{Binary: p.Options().Binary, ZK: ens.Addrs(), Room: c.Room(), ID: "extra", Dir: t.TempDir()})
	he, err := extra.Hash(ctx, last)
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

package failover

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/internal/infra/faultnet"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
)

// TestRetryAfterKillBetweenCommitAndAck: the primary's Multi commits in
// ZooKeeper but every reply to the primary is dropped, so the client's
// proposal ends without an answer; the primary is then killed -9. The
// client retries the same request id at the new primary: it gets the
// original index and response (Duplicate), the log holds the request once,
// and every node applied it once.
func TestRetryAfterKillBetweenCommitAndAck(t *testing.T) {
	bin := testnode.BuildT(t)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelInfo}))
	ens := zkensemble.ForTest(t, zkensemble.Options{Servers: 3, TickTime: 200 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	fnet := faultnet.NewNet(7)
	t.Cleanup(func() { fnet.Close() })
	c := testnode.ClusterForTest(t, testnode.ClusterOptions{Nodes: 3, ZK: ens.Addrs(), Net: fnet, Logger: log,
		Node: testnode.NodeOptions{Binary: bin, SessionTimeout: sessionTimeout, CheckpointEvery: -1, CheckpointEveryBytes: -1, Logger: log}})
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	p, err := c.WaitPrimary(wctx)
	wcancel()
	require.NoError(t, err)
	for i := 0; i < 10; i++ {
		e, err := testnode.SetEntry(fmt.Sprintf("before/%d", i), []byte("v"))
		require.NoError(t, err)
		_, err = p.Propose(ctx, e)
		require.NoError(t, err)
	}

	// Replies from ZooKeeper to the primary are lost from now on: its
	// requests still reach the servers and commit.
	require.NoError(t, fnet.Apply((*faultnet.Proxy).DropReplies, fnet.Names(faultnet.From(p.ID()))...))
	id := replica.NewRequestID()
	entry, err := testnode.SetEntry("the/request", []byte("applied once"))
	require.NoError(t, err)
	pctx, pcancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err = p.ProposeRequest(pctx, id, entry)
	pcancel()
	require.Error(t, err, "the primary acknowledged without ZooKeeper's reply")
	t.Logf("first attempt: %v", err)

	// The request is committed: find it in the log.
	room := openRoom(t, ctx, ens, c.Room())
	var committedAt uint64
	deadline := time.Now().Add(20 * time.Second)
	for committedAt == 0 && time.Now().Before(deadline) {
		committedAt, _ = findRequest(t, ctx, room, id)
		if committedAt == 0 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	require.NotZero(t, committedAt, "the request never reached the log")

	// kill -9 the primary before it could acknowledge anything.
	require.NoError(t, p.Kill())
	var q *testnode.Node
	deadline = time.Now().Add(30 * time.Second)
	for q == nil && time.Now().Before(deadline) {
		q, _ = c.PrimaryAmong(ctx, p.ID())
		if q == nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
	require.NotNil(t, q, "no new primary")

	// The retry: same id, same entry.
	var res testnode.ProposeResponse
	for attempt := 0; ; attempt++ {
		rctx, rcancel := context.WithTimeout(ctx, 5*time.Second)
		res, err = q.ProposeRequest(rctx, id, entry)
		rcancel()
		if err == nil || attempt > 20 || !errors.Is(err, replica.ErrNotPrimary) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	require.NoError(t, err)
	require.True(t, res.Duplicate, "the retry was applied again")
	require.Equal(t, committedAt, res.Index, "the retry's answer is not the original's index")

	// A retry's stale duplicate and a restart change nothing: the old
	// primary comes back (replies healed) and everyone converges.
	fnet.HealAll()
	require.NoError(t, p.Restart(ctx))
	hctx, hcancel := context.WithTimeout(ctx, 60*time.Second)
	_, err = c.WaitConverged(hctx)
	hcancel()
	require.NoError(t, err)
	first, copies := findRequest(t, ctx, room, id)
	require.Equal(t, committedAt, first)
	require.LessOrEqual(t, copies, 2, "the original, and at most the retry's inert copy")
	for _, n := range c.Live() {
		d, err := n.Dump(ctx, 1, ^uint64(0))
		require.NoError(t, err)
		applied := 0
		for _, rec := range d.Records {
			if rec.RequestID == id.String() {
				applied++
				require.Equal(t, committedAt, rec.Index)
				require.EqualValues(t, 1, rec.Count)
			}
		}
		require.Equal(t, 1, applied, "%s applied the request %d times", n.ID(), applied)
	}
}

func openRoom(t *testing.T, ctx context.Context, ens *zkensemble.Ensemble, name string) *logroom.Room {
	t.Helper()
	cl, err := logroom.Dial(ctx, logroom.DialConfig{Servers: ens.Addrs(), SessionTimeout: 10 * time.Second})
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	r, err := logroom.OpenRoom(ctx, cl, name, logroom.RoomOptions{})
	require.NoError(t, err)
	return r
}

// findRequest reads the whole log and returns the index of the first entry
// carrying request id (0 if none) and how many entries carry it (a retry
// on a primary is appended and skipped at apply time).
func findRequest(t *testing.T, ctx context.Context, room *logroom.Room, id store.RequestID) (first uint64, copies int) {
	t.Helper()
	end, err := room.CommittedIndex(ctx, 0)
	require.NoError(t, err)
	if end == 0 {
		return 0, 0
	}
	rd, err := room.Tail(ctx, 1)
	require.NoError(t, err)
	defer rd.Close()
	for next := uint64(1); next <= end; {
		rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		es, err := rd.Next(rctx)
		cancel()
		require.NoError(t, err)
		for _, e := range es {
			next = e.Index + 1
			if req, _, ok := store.DecodeRequest(e.Data); ok && req.ID == id {
				if first == 0 {
					first = e.Index
				}
				copies++
			}
		}
	}
	return first, copies
}

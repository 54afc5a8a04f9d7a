package logroom

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCommittedIndexUnderGrowth: CommittedIndex and MatchLog (a member
// restored from a checkpoint, no batch id, at the end of the sealed log)
// return while a writer keeps adding one-entry batches to the open channel
// faster than a walk of one Get per batch reads them. Before they bounded
// the walk by what the channel held when the call began, a new standby sat
// in MatchLog until the channel was sealed (30 s in the bench).
func TestCommittedIndexUnderGrowth(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "growth")
	w := newWriter(t, r, WriterConfig{Compression: CompressionNone, MaxInFlight: 32, EagerInFlight: 32, maxBatchEntries: 1})
	ctx := testCtx(t, 2*time.Minute)
	for i := range 10 {
		_, err := w.Append(ctx, payload(i))
		require.NoError(t, err)
	}
	sealed, err := w.Rotate(ctx)
	require.NoError(t, err)

	// 2000 one-entry batches in the open channel, then keep it growing.
	lctx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; lctx.Err() == nil; i++ {
				_, _ = w.Append(lctx, payload(g<<20|i))
			}
		}()
	}
	defer func() { stop(); wg.Wait() }()
	require.Eventually(t, func() bool { return w.LastCommitted() >= sealed.LastIndex+2000 }, time.Minute, 10*time.Millisecond)

	// From the channel's start (about 2000 batches), and from a recent
	// index as a caught-up standby's Barrier asks.
	for i := range 2 {
		hint := uint64(0)
		if i == 1 {
			hint = w.LastCommitted()
		}
		before := w.LastCommitted()
		cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		t0 := time.Now()
		end, err := r.CommittedIndex(cctx, hint)
		cancel()
		took := time.Since(t0)
		require.NoError(t, err, "hint %d: a walk that chases the growing channel never ends", hint)
		require.Less(t, took, 20*time.Second, "hint %d: the walk ignored its ctx", hint)
		require.GreaterOrEqual(t, end, before, "every entry acknowledged before the call is covered")
		t.Logf("CommittedIndex(hint %d) = %d after %v (acknowledged before the call: %d)", hint, end, took.Round(time.Millisecond), before)
	}
	// A member restored at the end of the sealed log (no batch id).
	mctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	require.NoError(t, r.MatchLog(mctx, BatchID{}, sealed.LastIndex))
	require.NoError(t, r.MatchLog(mctx, BatchID{}, sealed.LastIndex+100), "inside the open channel")
}

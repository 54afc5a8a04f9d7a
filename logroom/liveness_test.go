package logroom

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCloseDoesNotSpin: Close while a Multi is in flight on a link that
// answers nothing. The loop must wait for the in-flight request without
// spinning (before the fix, the closed stop channel was ready on every pass
// and the loop burned a core until the request returned — during failover).
func TestCloseDoesNotSpin(t *testing.T) {
	e := sharedZK(t)
	p := newProxy(t, e.Addrs()[0])
	c := dial(t, []string{p.Addr()})
	r := openRoom(t, c, "nospin")
	ctx := testCtx(t, 60*time.Second)
	w := newWriter(t, r, WriterConfig{})
	_, err := w.Append(ctx, payload(1))
	require.NoError(t, err)

	p.DropRequests()
	before := p.Stats().DroppedUp
	appended := make(chan error, 1)
	go func() {
		_, err := w.Append(ctx, payload(2))
		appended <- err
	}()
	require.Eventually(t, func() bool { return p.Stats().DroppedUp > before }, 10*time.Second, 10*time.Millisecond, "the append's Multi sent into the blackhole")
	closed := make(chan error, 1)
	go func() { closed <- w.Close() }()
	// Measure the loop over a window while the request is stuck.
	time.Sleep(50 * time.Millisecond)
	l0 := w.stats.loops.Load()
	time.Sleep(300 * time.Millisecond)
	passes := w.stats.loops.Load() - l0
	select {
	case err := <-closed:
		t.Logf("Close returned early: %v", err)
	default:
	}
	require.Less(t, passes, int64(100), "the writer loop spun %d times in 300ms while closing", passes)
	p.Heal()
	p.Reset()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close did not return after the link came back")
	}
	err = <-appended
	require.True(t, err == nil || errors.Is(err, ErrOutcomeUnknown), "append in flight at Close: %v", err)
}

// TestStoppedWriterNothingSent: after the writer stops on an unknown
// outcome, appends that never reached ZooKeeper must say so (a definite
// "nothing sent"), not ErrOutcomeUnknown.
func TestStoppedWriterNothingSent(t *testing.T) {
	e := sharedZK(t)
	p := newProxy(t, e.Addrs()[0])
	c := dial(t, []string{p.Addr()})
	other := dial(t, e.Addrs())
	r := openRoom(t, c, "stopped")
	ro := openRoom(t, other, "stopped")
	ctx := testCtx(t, 60*time.Second)
	w := newWriter(t, r, WriterConfig{})
	_, err := w.Append(ctx, payload(1))
	require.NoError(t, err)
	_, err = w.Rotate(ctx)
	require.NoError(t, err)
	// The next batch lands, its reply is lost, and before the writer can
	// read it back its channel is sealed and deleted by a newer writer: the
	// outcome is unknown and the writer stops.
	p.DropReplies()
	appended := make(chan error, 1)
	go func() {
		_, err := w.Append(ctx, payload(2))
		appended <- err
	}()
	require.Eventually(t, func() bool {
		end, err := ro.CommittedIndex(ctx, 1)
		return err == nil && end >= 2
	}, 10*time.Second, 10*time.Millisecond, "batch 2 landed")
	nw := newWriter(t, ro, WriterConfig{})
	_, err = nw.Rotate(ctx)
	require.NoError(t, err)
	require.NoError(t, ro.DeleteChannel(ctx, 1)) // only the oldest is deleted
	require.NoError(t, ro.DeleteChannel(ctx, 2))
	p.Cut()
	p.Heal()
	err = <-appended
	require.ErrorIs(t, err, ErrOutcomeUnknown, "the batch in flight: unknown")
	// Appends after the stop were never sent.
	_, err = w.Append(ctx, payload(3))
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrOutcomeUnknown)
	require.ErrorIs(t, err, ErrWriterStopped)
	require.Contains(t, err.Error(), "nothing")
	nw.Close()
}

// TestSpanningAppendPartlyFenced: one Append spans several batches; the
// first lands and is acknowledged, a later one is fenced. The Append must
// not get ErrFenced ("none of it is in the log"): part of it is.
func TestSpanningAppendPartlyFenced(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	other := dial(t, e.Addrs())
	r := openRoom(t, c, "spanning")
	ro := openRoom(t, other, "spanning")
	ctx := testCtx(t, 60*time.Second)
	// Small batches, one in flight at a time: a 40-entry append spans
	// many batches sent one after the other.
	w := newWriter(t, r, WriterConfig{MaxBatchBytes: 1 << 10, MaxInFlight: 1, EagerInFlight: 1, Compression: CompressionNone})
	big := make([][]byte, 400)
	for i := range big {
		big[i] = make([]byte, 200)
	}
	res := make(chan error, 1)
	go func() {
		_, err := w.Append(ctx, big...)
		res <- err
	}()
	// Take over once the first batches are in the log.
	require.Eventually(t, func() bool {
		end, err := ro.CommittedIndex(ctx, 0)
		return err == nil && end >= 5
	}, 20*time.Second, 10*time.Millisecond, "first batches committed")
	nw := newWriter(t, ro, WriterConfig{})
	defer nw.Close()
	err := <-res
	committed := nw.StartIndex() - 1
	require.Greater(t, committed, uint64(0))
	require.Less(t, committed, uint64(len(big)), "the test needs the append cut in the middle")
	require.Error(t, err)
	require.NotErrorIs(t, err, ErrFenced, "part of the append is in the log (up to %d)", committed)
	require.ErrorIs(t, err, ErrOutcomeUnknown)
	var pe *PartialAppendError
	require.True(t, errors.As(err, &pe), "%v", err)
	require.Equal(t, committed, pe.CommittedThrough)
	require.Equal(t, uint64(1), pe.First)
	_ = context.Background
}

// TestReaderRelistsWhileBehind: a reader behind a writer that keeps
// appending must keep reading ahead. Before the fix it listed the channel
// once, prefetched what that listing named, and then read one batch per
// round trip however far behind it was.
func TestReaderRelistsWhileBehind(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	r := openRoom(t, c, "relist")
	ctx := testCtx(t, 60*time.Second)
	w := newWriter(t, r, WriterConfig{})
	for i := 1; i <= 60; i++ {
		_, err := w.Append(ctx, payload(i))
		require.NoError(t, err)
	}
	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	defer rd.Close()
	readN(t, ctx, rd, 5) // behind: the channel is listed, 55 batches ahead
	for i := 61; i <= 260; i++ {
		_, err := w.Append(ctx, payload(i))
		require.NoError(t, err)
	}
	readN(t, ctx, rd, 255)
	t.Logf("prefetched %d of 260 batches in %d listings", rd.prefetched, rd.listings)
	require.GreaterOrEqual(t, rd.prefetched, 230, "batches past the first listing were read one round trip at a time")
}

package logroom

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
)

// metricNames are every metric NewMetrics registers.
var metricNames = []string{
	"roomlog_writer_append_seconds",
	"roomlog_writer_entries_total",
	"roomlog_writer_batches_total",
	"roomlog_writer_batch_entries",
	"roomlog_writer_batch_bytes",
	"roomlog_writer_batches_in_flight",
	"roomlog_writer_queued_bytes",
	"roomlog_writer_errors_total",
	"roomlog_writer_rotations_total",
	"roomlog_room_bytes",
	"roomlog_room_znodes",
	"roomlog_room_channels",
	"roomlog_room_channels_deleted_total",
	"roomlog_reader_batches_total",
	"roomlog_reader_entries_total",
	"roomlog_reader_listings_total",
	"roomlog_reader_catchup_reads_total",
	"roomlog_reader_batch_commit_age_seconds",
}

func newTestMetrics(t *testing.T) (*Metrics, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	require.NoError(t, err)
	return m, reg
}

// openMetricsRoom opens a room whose Room, Readers and Writers report to m.
func openMetricsRoom(t *testing.T, c *Client, name string, m *Metrics) *Room {
	t.Helper()
	r, err := OpenRoom(testCtx(t, 30*time.Second), c, name, RoomOptions{Base: testBase(t), Metrics: m})
	require.NoError(t, err)
	return r
}

// histCount returns the number of observations of the histogram name.
func histCount(t *testing.T, g prometheus.Gatherer, name string) uint64 {
	t.Helper()
	mfs, err := g.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			require.Len(t, mf.GetMetric(), 1)
			return mf.GetMetric()[0].GetHistogram().GetSampleCount()
		}
	}
	t.Fatalf("histogram %s not gathered", name)
	return 0
}

// errCount returns roomlog_writer_errors_total{reason}.
func errCount(m *Metrics, reason string) float64 {
	switch reason {
	case reasonFenced:
		return testutil.ToFloat64(m.errFenced)
	case reasonOutcomeUnknown:
		return testutil.ToFloat64(m.errUnknown)
	case reasonRoomFull:
		return testutil.ToFloat64(m.errRoomFull)
	case reasonEntryTooLarge:
		return testutil.ToFloat64(m.errTooLarge)
	}
	panic(reason)
}

func requireLint(t *testing.T, reg *prometheus.Registry) {
	t.Helper()
	problems, err := testutil.CollectAndLint(reg)
	require.NoError(t, err)
	require.Empty(t, problems)
}

// TestMetricsRegistered: every metric is registered, the error reasons
// exist at 0 before any error, the names pass promlint, and a second
// NewMetrics on the same registry fails without touching the first.
func TestMetricsRegistered(t *testing.T) {
	m, reg := newTestMetrics(t)
	for _, name := range metricNames {
		n, err := testutil.GatherAndCount(reg, name)
		require.NoError(t, err)
		want := 1
		if name == "roomlog_writer_errors_total" {
			want = 4 // one series per reason, pre-initialised
		}
		require.Equal(t, want, n, name)
	}
	n, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	require.Equal(t, len(metricNames)+3, n, "no metric outside the documented list")
	for _, reason := range []string{reasonFenced, reasonOutcomeUnknown, reasonRoomFull, reasonEntryTooLarge} {
		require.Zero(t, errCount(m, reason))
	}
	requireLint(t, reg)

	_, err = NewMetrics(reg)
	var are prometheus.AlreadyRegisteredError
	require.ErrorAs(t, err, &are)
	m.entries.Inc()
	require.Equal(t, 1.0, testutil.ToFloat64(m.entries), "the first Metrics still works")

	// A registration that fails half way leaves nothing registered.
	reg2 := prometheus.NewPedanticRegistry()
	clash := m.roomBytes // registered after 9 others
	reg2.MustRegister(clash)
	_, err = NewMetrics(reg2)
	require.ErrorAs(t, err, &are)
	n, err = testutil.GatherAndCount(reg2)
	require.NoError(t, err)
	require.Equal(t, 1, n, "only the clashing gauge is left")
	require.True(t, reg2.Unregister(clash))
	_, err = NewMetrics(reg2)
	require.NoError(t, err, "a failed NewMetrics left no collector behind")

	_, err = NewMetrics(nil)
	require.Error(t, err)
}

// TestMetricsNil: a nil *Metrics is valid everywhere.
func TestMetricsNil(t *testing.T) {
	var m *Metrics
	m.appendDone(time.Now(), nil)
	m.appendDone(time.Now(), ErrFenced)
	m.batchAcked(3, 100)
	m.batchSent(100)
	m.batchesFailed(2)
	m.queued(-5)
	m.rotated()
	m.roomMeasured(1, 2, 3)
	m.channelsListed(4)
	m.channelDeleted(10, 2)
	m.batchDelivered(3, time.Now().UnixMilli())
	m.listed()
	m.catchupReads(16)
}

// TestMetricsAppendErrorReasons: each error class counts under its reason;
// an error that may have committed never counts as a definite failure.
func TestMetricsAppendErrorReasons(t *testing.T) {
	m, _ := newTestMetrics(t)
	t0 := time.Now()
	m.appendDone(t0, fmt.Errorf("x: %w", ErrFenced))
	m.appendDone(t0, &PartialAppendError{First: 1, Last: 2, CommittedThrough: 1, Err: ErrFenced})
	m.appendDone(t0, fmt.Errorf("%w: ctx", ErrOutcomeUnknown))
	m.appendDone(t0, fmt.Errorf("%w: full", ErrRoomFull))
	m.appendDone(t0, fmt.Errorf("%w: big", ErrEntryTooLarge))
	m.appendDone(t0, context.Canceled) // no reason
	require.Equal(t, 1.0, errCount(m, reasonFenced))
	require.Equal(t, 2.0, errCount(m, reasonOutcomeUnknown))
	require.Equal(t, 1.0, errCount(m, reasonRoomFull))
	require.Equal(t, 1.0, errCount(m, reasonEntryTooLarge))
}

// TestMetricsWriterReader appends through a Writer on ZooKeeper and checks
// the writer, room and reader metrics against what the log holds.
func TestMetricsWriterReader(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	m, reg := newTestMetrics(t)
	r := openMetricsRoom(t, c, "metrics", m)
	w := newWriter(t, r, WriterConfig{Metrics: m})
	ctx := testCtx(t, 60*time.Second)

	// One Append of 3 entries (one batch), 37 sequential appends (one
	// batch each), then 160 entries from 8 concurrent callers (batched
	// naturally).
	const seq, conc, callers = 40, 160, 8
	_, err := w.Append(ctx, payload(1), payload(2), payload(3))
	require.NoError(t, err)
	for i := 4; i <= seq; i++ {
		_, err := w.Append(ctx, payload(i))
		require.NoError(t, err)
	}
	var wg sync.WaitGroup
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < conc/callers; i++ {
				if _, err := w.Append(ctx, payload(seq+1+g*1000+i)); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	const n = seq + conc
	require.Equal(t, uint64(n), w.LastCommitted())

	require.Equal(t, float64(n), testutil.ToFloat64(m.entries))
	batches := testutil.ToFloat64(m.batches)
	require.GreaterOrEqual(t, batches, float64(seq-2), "each sequential append was a batch")
	require.LessOrEqual(t, batches, float64(n))
	require.Equal(t, uint64(seq-2+conc), histCount(t, reg, "roomlog_writer_append_seconds"), "one observation per successful Append")
	require.Equal(t, uint64(batches), histCount(t, reg, "roomlog_writer_batch_entries"))
	require.Equal(t, uint64(batches), histCount(t, reg, "roomlog_writer_batch_bytes"))
	require.Zero(t, testutil.ToFloat64(m.batchesInFlight), "everything acknowledged")
	require.Zero(t, testutil.ToFloat64(m.queuedBytes), "nothing queued")
	require.Zero(t, testutil.ToFloat64(m.rotations))
	require.Equal(t, 1.0, testutil.ToFloat64(m.roomChannels))

	// The writer's accounting matches the room's measurement.
	writerBytes, writerZnodes := testutil.ToFloat64(m.roomBytes), testutil.ToFloat64(m.roomZnodes)
	require.Equal(t, batches+1, writerZnodes, "batch znodes + one channel znode")
	total, err := r.Bytes(ctx)
	require.NoError(t, err)
	require.Positive(t, total)
	require.Equal(t, float64(total), writerBytes)
	require.Equal(t, float64(total), testutil.ToFloat64(m.roomBytes))
	require.Equal(t, writerZnodes, testutil.ToFloat64(m.roomZnodes))

	// A forced rotation counts, and the room gains a channel znode.
	sealed, err := w.Rotate(ctx)
	require.NoError(t, err)
	require.Equal(t, int(batches), sealed.Batches)
	require.Equal(t, 1.0, testutil.ToFloat64(m.rotations))
	require.Equal(t, 2.0, testutil.ToFloat64(m.roomChannels))
	require.Equal(t, batches+2, testutil.ToFloat64(m.roomZnodes))
	require.Equal(t, float64(total), testutil.ToFloat64(m.roomBytes), "a rotation moves no byte")

	// A reader from the start: it is behind, so it lists and reads ahead.
	rd, err := r.Tail(ctx, 1)
	require.NoError(t, err)
	defer rd.Close()
	got := readN(t, ctx, rd, n)
	require.Equal(t, uint64(n), got[n-1].Index)
	require.Equal(t, float64(n), testutil.ToFloat64(m.readerEntries))
	require.Equal(t, batches, testutil.ToFloat64(m.readerBatches), "the reader saw the batches the writer acknowledged")
	require.Equal(t, uint64(batches), histCount(t, reg, "roomlog_reader_batch_commit_age_seconds"))
	require.GreaterOrEqual(t, testutil.ToFloat64(m.readerListings), 1.0, "catching up lists the channel")
	require.Equal(t, float64(rd.listings), testutil.ToFloat64(m.readerListings))
	require.GreaterOrEqual(t, testutil.ToFloat64(m.readerCatchup), float64(rd.prefetched))
	require.Greater(t, rd.prefetched, int(batches)/2, "the backlog was read ahead")

	// Caught up: a new entry (in the new channel) is delivered too.
	_, err = w.Append(ctx, payload(n+1))
	require.NoError(t, err)
	es := readN(t, ctx, rd, 1)
	require.Equal(t, uint64(n+1), es[0].Index)
	require.Equal(t, float64(n+1), testutil.ToFloat64(m.readerEntries))
	require.Equal(t, batches+1, testutil.ToFloat64(m.readerBatches))
	require.Equal(t, uint64(batches+1), histCount(t, reg, "roomlog_reader_batch_commit_age_seconds"))

	// A Tail into the middle of the first batch (entries 1..3) lists the
	// channel once to find the batch; it delivers entries 2 and 3 of it.
	listings := testutil.ToFloat64(m.readerListings)
	rd2, err := r.Tail(ctx, 2)
	require.NoError(t, err)
	defer rd2.Close()
	require.Equal(t, listings+1, testutil.ToFloat64(m.readerListings))
	es = readN(t, ctx, rd2, 2)
	require.Equal(t, uint64(2), es[0].Index)
	require.Equal(t, float64(n+3), testutil.ToFloat64(m.readerEntries), "entries delivered, not entries read")

	requireLint(t, reg)
}

// TestMetricsRoomFullAndDelete: ErrRoomFull and ErrEntryTooLarge count
// under their reasons; DeleteChannel counts and lowers the room gauges.
func TestMetricsRoomFullAndDelete(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	m, reg := newTestMetrics(t)
	r := openMetricsRoom(t, c, "full", m)
	const bound = 32 << 10
	// WriterConfig.Metrics unset: the writer takes the room's.
	w := newWriter(t, r, WriterConfig{MaxRoomBytes: bound, MaxBatchBytes: 8 << 10, Compression: CompressionNone})
	ctx := testCtx(t, 60*time.Second)

	_, err := w.Append(ctx, make([]byte, MaxEntryBytes(8<<10)+1))
	require.ErrorIs(t, err, ErrEntryTooLarge)
	require.Equal(t, 1.0, errCount(m, reasonEntryTooLarge))

	entry := make([]byte, 1000)
	ok := 0
	for {
		require.Less(t, ok, 100, "never hit the bound")
		if _, err = w.Append(ctx, entry); err != nil {
			break
		}
		ok++
	}
	require.ErrorIs(t, err, ErrRoomFull)
	require.Equal(t, 1.0, errCount(m, reasonRoomFull))
	require.Zero(t, errCount(m, reasonFenced))
	require.Zero(t, errCount(m, reasonOutcomeUnknown))
	require.Equal(t, float64(ok), testutil.ToFloat64(m.entries))
	require.Equal(t, uint64(ok), histCount(t, reg, "roomlog_writer_append_seconds"), "failed Appends are not timed")
	// The bound charges the bytes plus ZnodeHeapBytes per znode; the
	// gauges show both.
	full := testutil.ToFloat64(m.roomBytes) + ZnodeHeapBytes*testutil.ToFloat64(m.roomZnodes)
	require.LessOrEqual(t, full, float64(bound))
	require.Greater(t, full, float64(bound-3000), "near the bound")

	sealed, err := w.Rotate(ctx)
	require.NoError(t, err)
	require.Equal(t, 2.0, testutil.ToFloat64(m.roomChannels))
	require.NoError(t, r.DeleteChannel(ctx, sealed.Num))
	require.Equal(t, 1.0, testutil.ToFloat64(m.channelsDeleted))
	require.Equal(t, 1.0, testutil.ToFloat64(m.roomChannels))
	require.Zero(t, testutil.ToFloat64(m.roomBytes), "the deleted channel's bytes are gone")
	require.Equal(t, 1.0, testutil.ToFloat64(m.roomZnodes), "the open channel's znode is left")
	require.NoError(t, r.DeleteChannel(ctx, sealed.Num), "idempotent")
	require.Equal(t, 1.0, testutil.ToFloat64(m.channelsDeleted), "a channel already gone is not counted")

	// Space is back; the writer's refreshed accounting agrees with the room.
	_, err = w.Append(ctx, entry)
	require.NoError(t, err)
	afterAppend := testutil.ToFloat64(m.roomBytes)
	total, err := r.Bytes(ctx)
	require.NoError(t, err)
	require.Equal(t, float64(total), afterAppend)
	require.Equal(t, 2.0, testutil.ToFloat64(m.roomZnodes), "one batch and the open channel")
	requireLint(t, reg)
}

// TestMetricsWritersInSequence: a replica creates one Writer per term with
// one Metrics; the writers register nothing and keep counting into the same
// collectors, and a fenced Append counts as fenced.
func TestMetricsWritersInSequence(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	m, reg := newTestMetrics(t)
	r := openRoom(t, c, "terms") // no room metrics: the writers' config says
	ctx := testCtx(t, 60*time.Second)
	before, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)

	w1 := newWriter(t, r, WriterConfig{Owner: "a", Metrics: m})
	for i := 1; i <= 10; i++ {
		_, err := w1.Append(ctx, payload(i))
		require.NoError(t, err)
	}
	w2 := newWriter(t, r, WriterConfig{Owner: "b", Metrics: m})
	_, err = w1.Append(ctx, payload(0))
	require.ErrorIs(t, err, ErrFenced)
	require.NoError(t, w1.Close())
	for i := 11; i <= 25; i++ {
		_, err := w2.Append(ctx, payload(i))
		require.NoError(t, err)
	}
	w3 := newWriter(t, r, WriterConfig{Owner: "c", Metrics: m})
	_, err = w3.Append(ctx, payload(26), payload(27))
	require.NoError(t, err)
	gaugeBytes, gaugeZnodes := testutil.ToFloat64(m.roomBytes), testutil.ToFloat64(m.roomZnodes)

	require.Equal(t, 27.0, testutil.ToFloat64(m.entries))
	require.Equal(t, 26.0, testutil.ToFloat64(m.batches))
	require.Equal(t, 1.0, errCount(m, reasonFenced))
	require.Zero(t, errCount(m, reasonOutcomeUnknown))
	require.Zero(t, testutil.ToFloat64(m.batchesInFlight), "the fenced batch left the in-flight gauge")
	require.Zero(t, testutil.ToFloat64(m.queuedBytes))
	// Each takeover opened a channel (sealing the previous writer's).
	require.Equal(t, 3.0, testutil.ToFloat64(m.roomChannels))
	// w3's takeover measured the room; its batch was added to that.
	total, err := r.Bytes(ctx)
	require.NoError(t, err)
	require.Equal(t, float64(total), gaugeBytes)
	require.Equal(t, 26.0+3, gaugeZnodes, "26 batches and 3 channel znodes")
	after, err := testutil.GatherAndCount(reg)
	require.NoError(t, err)
	require.Equal(t, before, after, "writers register nothing")
	requireLint(t, reg)
}

// appendPathMetrics is what the metrics add to one Append that forms one
// batch: the Append's latency, its bytes queued and taken, the batch sent
// and acknowledged.
func appendPathMetrics(m *Metrics) {
	var t0 time.Time
	if m != nil {
		t0 = time.Now()
	}
	m.queued(300)
	m.queued(-300)
	m.batchSent(340)
	m.batchAcked(1, 340)
	m.appendDone(t0, nil)
}

// TestMetricsHotPathAllocs: the metrics allocate nothing per Append or
// batch, with or without a *Metrics.
func TestMetricsHotPathAllocs(t *testing.T) {
	m, _ := newTestMetrics(t)
	require.Zero(t, testing.AllocsPerRun(1000, func() { appendPathMetrics(m) }))
	require.Zero(t, testing.AllocsPerRun(1000, func() { appendPathMetrics(nil) }))
	require.Zero(t, testing.AllocsPerRun(1000, func() { m.batchDelivered(5, 1) }))
}

// BenchmarkMetricsAppendPath measures the metrics' cost per Append (one
// batch each, the worst case), to compare with an Append's round trip.
func BenchmarkMetricsAppendPath(b *testing.B) {
	reg := prometheus.NewPedanticRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		b.Fatal(err)
	}
	for _, bc := range []struct {
		name string
		m    *Metrics
	}{{"nil", nil}, {"metrics", m}} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				appendPathMetrics(bc.m)
			}
		})
	}
}

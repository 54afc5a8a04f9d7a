package logroom

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics holds the Prometheus collectors of one room in one process (see
// "Metrics" in the package doc for the list). Create it once with
// NewMetrics and hand the same *Metrics to RoomOptions.Metrics and
// WriterConfig.Metrics: every Writer (one per primary term), Reader and
// Room of the process then feed the same collectors, and nothing is
// registered twice. For per-room labels wrap the registerer
// (prometheus.WrapRegistererWith) before calling NewMetrics.
//
// A nil *Metrics is valid everywhere and means no metrics: its methods do
// nothing and the instrumented code pays a nil check (every method inlines
// to that check, the work is outlined).
type Metrics struct {
	// Writer.
	appendSeconds   prometheus.Histogram
	entries         prometheus.Counter
	batches         prometheus.Counter
	batchEntries    prometheus.Histogram
	batchBytes      prometheus.Histogram
	batchesInFlight prometheus.Gauge
	queuedBytes     prometheus.Gauge
	errFenced       prometheus.Counter
	errUnknown      prometheus.Counter
	errRoomFull     prometheus.Counter
	errTooLarge     prometheus.Counter
	rotations       prometheus.Counter

	// Room.
	roomBytes       prometheus.Gauge
	roomZnodes      prometheus.Gauge
	roomChannels    prometheus.Gauge
	channelsDeleted prometheus.Counter

	// Reader.
	readerBatches   prometheus.Counter
	readerEntries   prometheus.Counter
	readerListings  prometheus.Counter
	readerCatchup   prometheus.Counter
	readerCommitAge prometheus.Histogram
}

// Writer error reasons (the reason label of roomlog_writer_errors_total).
const (
	reasonFenced         = "fenced"
	reasonOutcomeUnknown = "outcome_unknown"
	reasonRoomFull       = "room_full"
	reasonEntryTooLarge  = "entry_too_large"
)

// appendBuckets span 100µs to 10s: a local ensemble answers in well under
// a millisecond, a loaded or distant one in tens of milliseconds, and a
// writer resolving a connection loss takes seconds.
var appendBuckets = []float64{
	.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10,
}

// commitAgeBuckets span 1ms (ZooKeeper's ctime resolution) to an hour
// (a standby far behind, catching up).
var commitAgeBuckets = []float64{
	.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600,
}

// NewMetrics creates the collectors and registers them with reg (never the
// global registry unless reg is prometheus.DefaultRegisterer). A
// registration error (e.g. a name already registered) is returned, and
// nothing of this call stays registered.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	if reg == nil {
		return nil, errors.New("logroom: NewMetrics: nil Registerer")
	}
	m := &Metrics{
		appendSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "roomlog_writer_append_seconds",
			Help:    "Latency of successful Writer.Append calls, from the call until its entries are durable.",
			Buckets: appendBuckets,
		}),
		entries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_writer_entries_total",
			Help: "Entries the writers acknowledged (committed).",
		}),
		batches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_writer_batches_total",
			Help: "Batch znodes the writers acknowledged (committed).",
		}),
		batchEntries: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "roomlog_writer_batch_entries",
			Help:    "Entries per acknowledged batch.",
			Buckets: prometheus.ExponentialBuckets(1, 2, 19), // 1 .. 262144
		}),
		batchBytes: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "roomlog_writer_batch_bytes",
			Help:    "Encoded size of acknowledged batch znodes in bytes.",
			Buckets: prometheus.ExponentialBuckets(256, 2, 13), // 256 B .. 1 MiB
		}),
		batchesInFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomlog_writer_batches_in_flight",
			Help: "Batches formed and sent but not yet acknowledged.",
		}),
		queuedBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomlog_writer_queued_bytes",
			Help: "Entry bytes handed to Append and not yet fully batched.",
		}),
		rotations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_writer_rotations_total",
			Help: "Channels the writers sealed and replaced by a new channel (Rotate or automatic).",
		}),
		roomBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomlog_room_bytes",
			Help: "Batch znode bytes the room holds, as the writer's or the room's accounting last measured them (MaxRoomBytes bounds this plus 480 bytes per znode).",
		}),
		roomZnodes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomlog_room_znodes",
			Help: "Batch and channel znodes the room holds, as the writer's or the room's accounting last measured them.",
		}),
		roomChannels: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomlog_room_channels",
			Help: "Channels the room holds, as last listed or changed by this process.",
		}),
		channelsDeleted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_room_channels_deleted_total",
			Help: "Channels DeleteChannel deleted (compaction).",
		}),
		readerBatches: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_reader_batches_total",
			Help: "Batches the readers delivered.",
		}),
		readerEntries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_reader_entries_total",
			Help: "Entries the readers delivered.",
		}),
		readerListings: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_reader_listings_total",
			Help: "Listings of a channel's batch znodes made by the readers (seeking into a batch, catching up).",
		}),
		readerCatchup: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_reader_catchup_reads_total",
			Help: "Batch reads the readers made ahead, concurrently, while behind the writer.",
		}),
		readerCommitAge: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "roomlog_reader_batch_commit_age_seconds",
			Help:    "Time from a batch's commit (its znode's ctime, ZooKeeper's clock) to its delivery by a reader.",
			Buckets: commitAgeBuckets,
		}),
	}
	errs := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "roomlog_writer_errors_total",
		Help: "Append calls that failed, by reason: fenced, outcome_unknown, room_full, entry_too_large.",
	}, []string{"reason"})
	// Resolving the children here creates each series at 0 and keeps the
	// label lookup off the Append path.
	m.errFenced = errs.WithLabelValues(reasonFenced)
	m.errUnknown = errs.WithLabelValues(reasonOutcomeUnknown)
	m.errRoomFull = errs.WithLabelValues(reasonRoomFull)
	m.errTooLarge = errs.WithLabelValues(reasonEntryTooLarge)

	cs := []prometheus.Collector{
		m.appendSeconds, m.entries, m.batches, m.batchEntries, m.batchBytes, m.batchesInFlight,
		m.queuedBytes, errs, m.rotations,
		m.roomBytes, m.roomZnodes, m.roomChannels, m.channelsDeleted,
		m.readerBatches, m.readerEntries, m.readerListings, m.readerCatchup, m.readerCommitAge,
	}
	for i, c := range cs {
		if err := reg.Register(c); err != nil {
			for _, done := range cs[:i] {
				reg.Unregister(done)
			}
			return nil, err
		}
	}
	return m, nil
}

// appendDone records one Append call that took since t0 and returned err.
func (m *Metrics) appendDone(t0 time.Time, err error) {
	if m != nil {
		m.appendDoneSlow(t0, err)
	}
}

func (m *Metrics) appendDoneSlow(t0 time.Time, err error) {
	if err == nil {
		m.appendSeconds.Observe(time.Since(t0).Seconds())
		return
	}
	// Outcome unknown first: an error that says "may be committed" must
	// never be counted as a definite failure.
	switch {
	case errors.Is(err, ErrOutcomeUnknown):
		m.errUnknown.Inc()
	case errors.Is(err, ErrFenced):
		m.errFenced.Inc()
	case errors.Is(err, ErrRoomFull):
		m.errRoomFull.Inc()
	case errors.Is(err, ErrEntryTooLarge):
		m.errTooLarge.Inc()
	}
}

// batchAcked records one acknowledged batch.
func (m *Metrics) batchAcked(count, size int) {
	if m != nil {
		m.batchAckedSlow(count, size)
	}
}

func (m *Metrics) batchAckedSlow(count, size int) {
	m.entries.Add(float64(count))
	m.batches.Inc()
	m.batchEntries.Observe(float64(count))
	m.batchBytes.Observe(float64(size))
	m.batchesInFlight.Dec()
}

// batchSent records one batch formed and sent by a writer: it is in flight
// and, in the room's accounting, holds size bytes and one znode more.
func (m *Metrics) batchSent(size int) {
	if m != nil {
		m.batchSentSlow(size)
	}
}

func (m *Metrics) batchSentSlow(size int) {
	m.batchesInFlight.Inc()
	m.roomBytes.Add(float64(size))
	m.roomZnodes.Inc()
}

// batchesFailed records n in-flight batches that will not be acknowledged.
func (m *Metrics) batchesFailed(n int) {
	if m == nil || n == 0 {
		return
	}
	m.batchesInFlight.Sub(float64(n))
}

// queued adds d (possibly negative) to the queued entry bytes.
func (m *Metrics) queued(d int) {
	if m == nil || d == 0 {
		return
	}
	m.queuedBytes.Add(float64(d))
}

// rotated records a rotation: one channel (znode) more.
func (m *Metrics) rotated() {
	if m != nil {
		m.rotatedSlow()
	}
}

func (m *Metrics) rotatedSlow() {
	m.rotations.Inc()
	m.roomChannels.Inc()
	m.roomZnodes.Inc()
}

// roomMeasured sets the room gauges from a full measurement.
func (m *Metrics) roomMeasured(bytes int64, znodes, channels int) {
	if m != nil {
		m.roomMeasuredSlow(bytes, znodes, channels)
	}
}

func (m *Metrics) roomMeasuredSlow(bytes int64, znodes, channels int) {
	m.roomBytes.Set(float64(bytes))
	m.roomZnodes.Set(float64(znodes))
	m.roomChannels.Set(float64(channels))
}

// channelsListed sets the channel count from a listing.
func (m *Metrics) channelsListed(n int) {
	if m == nil {
		return
	}
	m.roomChannels.Set(float64(n))
}

// channelDeleted records the deletion of a sealed channel that held bytes
// in batches batch znodes.
func (m *Metrics) channelDeleted(bytes int64, batches int) {
	if m != nil {
		m.channelDeletedSlow(bytes, batches)
	}
}

func (m *Metrics) channelDeletedSlow(bytes int64, batches int) {
	m.channelsDeleted.Inc()
	m.roomChannels.Dec()
	m.roomBytes.Sub(float64(bytes))
	m.roomZnodes.Sub(float64(batches + 1))
}

// batchDelivered records one batch a reader delivered, with n entries,
// committed at ctimeMs (unix milliseconds, ZooKeeper's clock; 0: unknown).
func (m *Metrics) batchDelivered(n int, ctimeMs int64) {
	if m != nil {
		m.batchDeliveredSlow(n, ctimeMs)
	}
}

func (m *Metrics) batchDeliveredSlow(n int, ctimeMs int64) {
	m.readerBatches.Inc()
	m.readerEntries.Add(float64(n))
	if ctimeMs > 0 {
		age := time.Since(time.UnixMilli(ctimeMs)).Seconds()
		if age < 0 {
			age = 0 // clock skew between ZooKeeper and this host
		}
		m.readerCommitAge.Observe(age)
	}
}

// listed records one listing of a channel's batch znodes by a reader.
func (m *Metrics) listed() {
	if m == nil {
		return
	}
	m.readerListings.Inc()
}

// catchupReads records n batch reads a reader made ahead while behind.
func (m *Metrics) catchupReads(n int) {
	if m == nil {
		return
	}
	m.readerCatchup.Add(float64(n))
}

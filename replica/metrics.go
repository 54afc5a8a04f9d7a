package replica

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/tlsfiles"
)

// metrics are a replica's Prometheus collectors. A nil *metrics (no
// Config.Registerer) records nothing; every method is nil-safe.
//
// What the loop already publishes in Status (role, epoch, indexes, lag,
// members, connection) is read at scrape time by statusCollector, so it
// costs nothing between scrapes; events (proposals, takeovers, expiries,
// checkpoints, bootstraps, leader changes) are counted where they happen.
type metrics struct {
	reg  *trackingRegisterer
	room *logroom.Metrics // the writer's, reader's and room's

	proposals       *prometheus.CounterVec
	proposeSeconds  prometheus.Histogram
	leaderChanges   prometheus.Counter
	takeoverSeconds prometheus.Histogram
	expiries        prometheus.Counter
	ckptSeconds     prometheus.Histogram
	ckptBytes       prometheus.Gauge
	ckptFailures    prometheus.Counter
	bootBytes       prometheus.Counter
	bootFetched     prometheus.Counter
	bootReused      prometheus.Counter
	bootSeconds     prometheus.Histogram
	applyLag        prometheus.Histogram
	// archive (issue 27; replica/archive.go)
	archiveFailures prometheus.Counter
	archivedBytes   prometheus.Counter
}

// Proposal outcomes, the values of roomlog_replica_proposals_total's
// outcome label.
var proposalOutcomes = []string{"ok", "duplicate", "not_primary", "queue_full", "fenced",
	"outcome_unknown", "no_response", "conflict", "rejected", "closed", "canceled"}

// trackingRegisterer records what was registered through it, so that
// Close can unregister everything (logroom's collectors included).
type trackingRegisterer struct {
	prometheus.Registerer
	done []prometheus.Collector
}

func (t *trackingRegisterer) Register(c prometheus.Collector) error {
	if err := t.Registerer.Register(c); err != nil {
		return err
	}
	t.done = append(t.done, c)
	return nil
}

func (t *trackingRegisterer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		if err := t.Register(c); err != nil {
			panic(err)
		}
	}
}

func (t *trackingRegisterer) unregisterAll() {
	for _, c := range t.done {
		t.Registerer.Unregister(c)
	}
	t.done = nil
}

func newMetrics(reg prometheus.Registerer, r *Replica) (*metrics, error) {
	if reg == nil {
		return nil, nil
	}
	latency := []float64{.0005, .001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10}
	m := &metrics{
		proposals: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomlog_replica_proposals_total",
			Help: "Proposals (Propose and ProposeRequest calls) by outcome.",
		}, []string{"outcome"}),
		proposeSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "roomlog_replica_propose_seconds",
			Help:    "Latency of successful proposals: call to committed and applied locally.",
			Buckets: latency,
		}),
		leaderChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_replica_leader_changes_total",
			Help: "Changes of the primary this replica has seen (itself included).",
		}),
		takeoverSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "roomlog_replica_takeover_seconds",
			Help:    "Takeover duration: election won to accepting proposals (epoch, seal, catch-up).",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
		}),
		expiries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_replica_zk_session_expiries_total",
			Help: "ZooKeeper sessions of this replica that expired (membership and election rebuilt).",
		}),
		ckptSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "roomlog_replica_checkpoint_seconds",
			Help:    "Duration of local checkpoints (rotate, wait, Pebble checkpoint, manifest).",
			Buckets: []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120},
		}),
		ckptBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "roomlog_replica_checkpoint_bytes",
			Help: "Size of the newest local checkpoint.",
		}),
		ckptFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_replica_checkpoint_failures_total",
			Help: "Local checkpoints that failed.",
		}),
		bootBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_replica_bootstrap_bytes_total",
			Help: "Checkpoint bytes restored (bootstraps): fetched from peers or reused locally.",
		}),
		bootFetched: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_replica_bootstrap_fetched_bytes_total",
			Help: "Checkpoint file bytes bootstraps received from peers.",
		}),
		bootReused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_replica_bootstrap_reused_bytes_total",
			Help: "Checkpoint file bytes bootstraps did not fetch: linked from the local store or checkpoints, or kept from an interrupted fetch.",
		}),
		bootSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "roomlog_replica_bootstrap_seconds",
			Help:    "Duration of bootstraps: fetch, verify and restore of a peer's checkpoint.",
			Buckets: []float64{.1, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
		}),
		applyLag: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "roomlog_replica_apply_lag_seconds",
			Help: "Standby: time from the proposer stamping a request (ProposeRequest) to its apply here. " +
				"Spans two clocks; plain Propose entries carry no stamp and are not observed.",
			Buckets: []float64{.001, .002, .005, .01, .02, .05, .1, .2, .5, 1, 2, 5, 10, 30},
		}),
		// archive (issue 27)
		archiveFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_replica_archive_failures_total",
			Help: "Failed copies to the archive (Config.Archive); channel deletion waits while they fail.",
		}),
		archivedBytes: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomlog_replica_archived_bytes_total",
			Help: "Bytes this replica copied to the archive (channel batches and checkpoint files).",
		}),
	}
	for _, o := range proposalOutcomes {
		m.proposals.WithLabelValues(o)
	}
	tr := &trackingRegisterer{Registerer: reg}
	for _, c := range []prometheus.Collector{m.proposals, m.proposeSeconds, m.leaderChanges, m.takeoverSeconds,
		m.expiries, m.ckptSeconds, m.ckptBytes, m.ckptFailures, m.bootBytes, m.bootFetched, m.bootReused, m.bootSeconds, m.applyLag,
		m.archiveFailures, m.archivedBytes, // archive
		&statusCollector{r: r}} {
		if err := tr.Register(c); err != nil {
			tr.unregisterAll()
			return nil, err
		}
	}
	room, err := logroom.NewMetrics(tr)
	if err != nil {
		tr.unregisterAll()
		return nil, err
	}
	m.reg, m.room = tr, room
	return m, nil
}

// roomMetrics is what the room (and so its readers and writers) reports to.
func (m *metrics) roomMetrics() *logroom.Metrics {
	if m == nil {
		return nil
	}
	return m.room
}

// unregister removes the collectors (Close), so that a replica of the same
// room and id can open again in the same process and registry.
func (m *metrics) unregister() {
	if m == nil {
		return
	}
	m.reg.unregisterAll()
}

// now is the start time of a timed call: the zero time without metrics, so
// Propose reads no clock for nothing.
func (m *metrics) now() time.Time {
	if m == nil {
		return time.Time{}
	}
	return time.Now()
}

// proposal counts one finished proposal.
func (m *metrics) proposal(start time.Time, res Result, err error) {
	if m == nil {
		return
	}
	if err == nil {
		m.proposeSeconds.Observe(time.Since(start).Seconds())
		if res.Duplicate {
			m.proposals.WithLabelValues("duplicate").Inc()
		} else {
			m.proposals.WithLabelValues("ok").Inc()
		}
		return
	}
	m.proposals.WithLabelValues(outcomeLabel(err)).Inc()
}

func outcomeLabel(err error) string {
	switch {
	case errors.Is(err, ErrNotPrimary):
		return "not_primary"
	case errors.Is(err, ErrQueueFull):
		return "queue_full"
	case errors.Is(err, ErrFenced):
		return "fenced"
	case errors.Is(err, ErrOutcomeUnknown):
		return "outcome_unknown"
	case errors.Is(err, ErrNoResponse):
		return "no_response"
	case errors.Is(err, ErrRequestConflict):
		return "conflict"
	case errors.Is(err, ErrClosed), errors.Is(err, ErrFailed):
		return "closed"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "canceled"
	default:
		return "rejected" // entry too large, room full, invalid id, ...
	}
}

func (m *metrics) leaderChanged() {
	if m != nil {
		m.leaderChanges.Inc()
	}
}

func (m *metrics) tookOver(d time.Duration) {
	if m != nil {
		m.takeoverSeconds.Observe(d.Seconds())
	}
}

func (m *metrics) sessionExpired() {
	if m != nil {
		m.expiries.Inc()
	}
}

func (m *metrics) checkpointed(d time.Duration, bytes int64, err error) {
	if m == nil {
		return
	}
	if err != nil {
		m.ckptFailures.Inc()
		return
	}
	m.ckptSeconds.Observe(d.Seconds())
	m.ckptBytes.Set(float64(bytes))
}

func (m *metrics) bootstrapped(d time.Duration, bytes int64) {
	if m != nil {
		m.bootSeconds.Observe(d.Seconds())
		m.bootBytes.Add(float64(bytes))
	}
}

// bootstrapFetched counts what a bootstrap fetched and what it reused.
func (m *metrics) bootstrapFetched(st checkpoint.FetchStats) {
	if m != nil {
		m.bootFetched.Add(float64(st.FetchedBytes))
		m.bootReused.Add(float64(st.LinkedKnownBytes + st.LinkedLocalBytes + st.ResumedBytes))
	}
}

func (m *metrics) applied(stampMillis int64, now time.Time) {
	if m != nil && stampMillis > 0 {
		m.applyLag.Observe(max(0, now.Sub(time.UnixMilli(stampMillis)).Seconds()))
	}
}

// archive (issue 27): a failed and a successful copy to the archive.
func (m *metrics) archiveFailed() {
	if m != nil {
		m.archiveFailures.Inc()
	}
}

func (m *metrics) archived(bytes int64) {
	if m != nil {
		m.archivedBytes.Add(float64(bytes))
	}
}

// statusCollector turns Status into gauges at scrape time.
type statusCollector struct{ r *Replica }

var (
	descRole = prometheus.NewDesc("roomlog_replica_role",
		"1 for the replica's current role, 0 for the others.", []string{"role"}, nil)
	descObserver = prometheus.NewDesc("roomlog_replica_observer",
		"1 when this replica is an observer (Config.Observer: it never leads), else 0.", nil, nil)
	descEpoch = prometheus.NewDesc("roomlog_replica_epoch",
		"Epoch led (primary) or of the last applied entry (standby).", nil, nil)
	descApplied = prometheus.NewDesc("roomlog_replica_applied_index",
		"Index of the last entry applied to the local store.", nil, nil)
	descCommitted = prometheus.NewDesc("roomlog_replica_committed_index",
		"Highest committed index this replica has seen.", nil, nil)
	descLag = prometheus.NewDesc("roomlog_replica_apply_lag_entries",
		"Committed index seen minus applied index.", nil, nil)
	descMemberDelta = prometheus.NewDesc("roomlog_replica_member_applied_delta",
		"Primary only: own applied index minus each live member's published applied index.", []string{"peer"}, nil)
	descMembers = prometheus.NewDesc("roomlog_replica_members",
		"Live members of the room seen by this replica (itself included).", nil, nil)
	descForeign = prometheus.NewDesc("roomlog_replica_foreign_znodes",
		"Znodes under members/ and election/ ignored as foreign (see the package doc's Trust boundary).", nil, nil)
	descConnected = prometheus.NewDesc("roomlog_replica_zk_connected",
		"1 while the ZooKeeper session is usable.", nil, nil)
	descSuspended = prometheus.NewDesc("roomlog_replica_zk_suspended_seconds",
		"How long the ZooKeeper connection has been down (0 when connected).", nil, nil)
	descPending = prometheus.NewDesc("roomlog_replica_proposals_pending",
		"Proposals in flight on this replica.", nil, nil)
	descBootstraps = prometheus.NewDesc("roomlog_replica_bootstraps",
		"Times this replica restored its store from a peer's checkpoint since it opened.", nil, nil)
	descBootHold = prometheus.NewDesc("roomlog_replica_bootstrap_hold",
		"The first log index this replica's bootstrap (or its catch-up after one) still needs; the primary keeps it (0: none).", nil, nil)
	descBootOutruns = prometheus.NewDesc("roomlog_replica_bootstrap_outruns_total",
		"Bootstraps of this replica whose log was deleted before it applied it (ErrBootstrapOutrun).", nil, nil)
	descHeldByBoot = prometheus.NewDesc("roomlog_replica_deletion_held_by_bootstrap",
		"Primary only: the lowest index a member's bootstrap holds, which its last deletion check kept (0: none).", nil, nil)
	descHoldsLapsed = prometheus.NewDesc("roomlog_replica_bootstrap_holds_lapsed_total",
		"Primary only: members' bootstrap holds no longer honoured: no progress for BootstrapHoldStall, held for BootstrapHoldMax, or outrun already.", nil, nil)
	descCkptIndex = prometheus.NewDesc("roomlog_replica_checkpoint_index",
		"Index of the newest local checkpoint.", nil, nil)
	descRoomBytes = prometheus.NewDesc("roomlog_replica_room_bytes",
		"Data bytes of the room's batch znodes in ZooKeeper, the open channel's included (refreshed about every second).", nil, nil)
	descRoomCharged = prometheus.NewDesc("roomlog_replica_room_charged_bytes",
		"What MaxRoomBytes bounds: roomlog_replica_room_bytes plus 480 bytes of ZooKeeper heap per znode (refreshed about every second).", nil, nil)
	descRoomMax = prometheus.NewDesc("roomlog_replica_room_max_bytes",
		"The room's byte bound this replica's writer enforces (Config.Writer.MaxRoomBytes); appends past it get ErrRoomFull.", nil, nil)
	descChannels = prometheus.NewDesc("roomlog_replica_room_channels",
		"Channels in the room (refreshed about every second).", nil, nil)
	descHashCompared = prometheus.NewDesc("roomlog_replica_hash_compared_total",
		"Peers' running state hashes this replica compared with its own (integrity check).", nil, nil)
	descHashMismatches = prometheus.NewDesc("roomlog_replica_hash_mismatches_total",
		"Peers' running state hashes that differed from this replica's at the same index.", nil, nil)
	descDepositions = prometheus.NewDesc("roomlog_replica_depositions_total",
		"Times this replica, next in line, proved the primary's process gone (its liveness stream broke, then its address refused, hung up before answering, or answered as another process) and deposed its candidate before the session expired.", nil, nil)
	descDepositionsWrong = prometheus.NewDesc("roomlog_replica_depositions_wrong_total",
		"Depositions whose primary's session was still live a session timeout later: the evidence was wrong (an unneeded takeover; the old primary's writes were fenced).", nil, nil)
	descRoomVersion = prometheus.NewDesc("roomlog_room_version",
		"The room's version as this replica last read it (package version: the formats writers may use; 0 before the first read).", nil, nil)
	descRoomVersionTarget = prometheus.NewDesc("roomlog_room_version_target",
		"The operator's target room version (0: none set); differs from roomlog_room_version while a move is blocked or under way.", nil, nil)
	// archive (issue 27): from ArchiveStatus.
	descArchiveBehindBytes = prometheus.NewDesc("roomlog_replica_archive_behind_bytes",
		"Primary with Config.Archive: bytes of sealed channels not archived yet (as MaxRoomBytes counts them).", nil, nil)
	descArchiveBehindEntries = prometheus.NewDesc("roomlog_replica_archive_behind_entries",
		"Primary with Config.Archive: entries of sealed channels not archived yet.", nil, nil)
	descArchiveIndex = prometheus.NewDesc("roomlog_replica_archive_index",
		"Last index through which the room's sealed channels are archived.", nil, nil)
	descDiverged = prometheus.NewDesc("roomlog_replica_diverged",
		"1 when this replica stopped because its state diverged (ErrDiverged: the integrity check or the log), else 0.", nil, nil)
	descRoomLost = prometheus.NewDesc("roomlog_replica_room_lost",
		"1 when this replica stopped because ZooKeeper lost or rolled back the room (ErrRoomLost), else 0.", nil, nil)
	descVersionBlocked = prometheus.NewDesc("roomlog_replica_room_version_blocked",
		"1 while the operator's target room version is set and the room is not there (Status().RoomVersionBlocked says why), else 0.", nil, nil)
	descCertNotAfter = prometheus.NewDesc("roomlog_replica_tls_cert_not_after_seconds",
		"Unix time the certificate in use expires, per link (zookeeper: Config.ZooKeeperTLS; peer: Config.PeerTLS); absent without TLS.", []string{"link"}, nil)
	descTLSError = prometheus.NewDesc("roomlog_replica_tls_files_error",
		"1 while the link's TLS files are refused (the last reload failed, or the certificate in use expired: tlsfiles.Source.Err), else 0.", []string{"link"}, nil)
)

var roleLabels = []Role{RoleStandby, RoleTakingOver, RolePrimary, RoleFailed, RoleClosed}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRole, descObserver, descEpoch, descApplied, descCommitted, descLag, descMemberDelta,
		descMembers, descForeign, descConnected, descSuspended, descPending, descBootstraps, descCkptIndex,
		descBootHold, descBootOutruns, descHeldByBoot, descHoldsLapsed,
		descRoomBytes, descRoomCharged, descRoomMax, descChannels, descHashCompared, descHashMismatches, descDiverged, descRoomVersion, descRoomVersionTarget,
		descRoomLost, descVersionBlocked, descCertNotAfter, descTLSError,
		descDepositions, descDepositionsWrong,
		descArchiveBehindBytes, descArchiveBehindEntries, descArchiveIndex} { // archive
		ch <- d
	}
}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.r.Status()
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, role := range roleLabels {
		v := 0.0
		if s.Role == role {
			v = 1
		}
		gauge(descRole, v, role.String())
	}
	observer := 0.0
	if s.Observer {
		observer = 1
	}
	gauge(descObserver, observer)
	gauge(descEpoch, float64(s.Epoch))
	gauge(descApplied, float64(s.Applied))
	gauge(descCommitted, float64(s.Committed))
	gauge(descLag, float64(s.Lag))
	if s.Role == RolePrimary {
		for _, m := range s.Members {
			if m.ID != s.ID {
				gauge(descMemberDelta, float64(int64(s.Applied)-int64(m.Applied)), m.ID)
			}
		}
	}
	gauge(descMembers, float64(len(s.Members)))
	gauge(descForeign, float64(len(s.Foreign)))
	connected := 0.0
	if s.Connected {
		connected = 1
	}
	gauge(descConnected, connected)
	gauge(descSuspended, s.Suspended.Seconds())
	gauge(descPending, float64(s.Pending))
	gauge(descBootstraps, float64(s.Bootstraps))
	gauge(descCkptIndex, float64(s.CheckpointIndex))
	gauge(descBootHold, float64(s.BootstrapHold))
	ch <- prometheus.MustNewConstMetric(descBootOutruns, prometheus.CounterValue, float64(s.BootstrapOutruns))
	gauge(descHeldByBoot, float64(s.HeldByBootstrap))
	ch <- prometheus.MustNewConstMetric(descHoldsLapsed, prometheus.CounterValue, float64(s.BootstrapHoldsLapsed))
	if s.Role != RoleFailed {
		// A failed member no longer reads the channels: its last
		// measurement would stand for good (a room full when it failed
		// would keep RoomlogRoomNearFull firing after every live member
		// saw the room freed), so it exports none.
		gauge(descRoomBytes, float64(s.RoomBytes))
		gauge(descRoomCharged, float64(s.RoomCharged))
		gauge(descChannels, float64(s.Channels))
	}
	gauge(descRoomMax, float64(s.MaxRoomBytes))
	ch <- prometheus.MustNewConstMetric(descHashCompared, prometheus.CounterValue, float64(s.HashCompared))
	ch <- prometheus.MustNewConstMetric(descHashMismatches, prometheus.CounterValue, float64(s.HashMismatches))
	diverged := 0.0
	if s.Err != nil && errors.Is(s.Err, ErrDiverged) {
		diverged = 1
	}
	gauge(descDiverged, diverged)
	gauge(descRoomLost, boolGauge(s.Err != nil && errors.Is(s.Err, ErrRoomLost)))
	gauge(descVersionBlocked, boolGauge(s.RoomVersionBlocked != ""))
	for _, l := range []struct {
		name string
		src  *tlsfiles.Source
	}{{"zookeeper", c.r.cfg.ZooKeeperTLS}, {"peer", c.r.cfg.PeerTLS}} {
		if l.src == nil {
			continue
		}
		if cert := l.src.Certificate(); cert != nil {
			gauge(descCertNotAfter, float64(cert.NotAfter.Unix()), l.name)
		}
		gauge(descTLSError, boolGauge(l.src.Err() != nil), l.name)
	}
	ch <- prometheus.MustNewConstMetric(descDepositions, prometheus.CounterValue, float64(s.Depositions))
	ch <- prometheus.MustNewConstMetric(descDepositionsWrong, prometheus.CounterValue, float64(s.DepositionsWrong))
	gauge(descRoomVersion, float64(s.RoomVersion))
	gauge(descRoomVersionTarget, float64(s.RoomVersionTarget))
	// archive (issue 27)
	if as := c.r.ArchiveStatus(); as.Enabled {
		gauge(descArchiveBehindBytes, float64(as.BehindBytes))
		gauge(descArchiveBehindEntries, float64(as.BehindEntries))
		gauge(descArchiveIndex, float64(as.Index))
	}
}

func boolGauge(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

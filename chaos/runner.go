package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/internal/infra/faultnet"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
)

// Config configures one chaos run.
type Config struct {
	Seed     uint64
	Duration time.Duration // faults are started until it has passed
	Faults   int           // > 0: stop after this many faults (whichever comes first)
	Replicas int           // replica processes, default 3 (at least 2)
	// Observers: observer processes (replica.Config.Observer) besides
	// Replicas, ids "o0", "o1", …; default 1, <0 none. They take faults
	// like standbys, are never a transfer target, and must never lead.
	Observers int
	Workers   int           // concurrent proposers, default 4
	Session   time.Duration // replicas' ZooKeeper session timeout, default 2s
	// HealTimeout bounds the wait, after each fault, for one primary and
	// proposals acknowledged again; past it the fault counts as a stall.
	// Default 60s.
	HealTimeout time.Duration
	// CheckpointEvery and MaxChannelBatches: small, so checkpoints, channel
	// rotations and deletions happen all the time. Defaults 300 and 20.
	CheckpointEvery   int
	MaxChannelBatches int
	// Dir is the parent of the run's work dir (default os.TempDir()). The
	// work dir is removed at the end unless Keep or a violation.
	Dir  string
	Keep bool
	// Out receives the fault log and the result; Verbose adds harness logs
	// and the replicas' status after each heal.
	Out     io.Writer
	Verbose bool
	// Ensemble, if set, is a 3-server ensemble to use (and leave running);
	// else Run starts one and closes it.
	Ensemble *zkensemble.Ensemble
	// Binary is the roomlog-testnode executable ("": testnode.Build).
	Binary string
	// Latency, when > 0, delays every link (each replica to each
	// ZooKeeper server, and peers to each replica's checkpoint port) by
	// Latency ± Latency/2 for the whole run: a data center, not loopback.
	Latency time.Duration
	// Force: kinds the schedule draws first (a bounded run that must
	// include, say, a partition and a stall); the seeded draws follow.
	Force []Kind
	// FetchIdle bounds a replica's checkpoint fetch without progress
	// (what a stalled source costs before the next is tried). Default 2s.
	FetchIdle time.Duration
	// Lifecycle adds the lifecycle operations (lifecycle.go) to the
	// schedule's draws.
	Lifecycle bool
	// OldBinary is the previous release's roomlog-testnode for upgrade
	// and downgrade (BuildPrevious), OldRelease its name. "": Run builds
	// it when Lifecycle; "-": none (the two kinds are skipped).
	OldBinary, OldRelease string
	// TLS: ZooKeeper over TLS with x509 ACLs and mutual TLS between
	// members (tls.go); with Lifecycle, rotate-cert and rotate-ca are
	// drawn and upgrade and downgrade are not (the previous release's
	// testnode has no TLS).
	TLS bool
	// PerturbRestoreHash is a test hook (-perturb-restore-hash): every
	// restore-check flips a bit of the restored running hash before it
	// compares it, so each comparison must report a mismatch and fail
	// the run (it proves the check can fail).
	PerturbRestoreHash bool
}

func (c *Config) setDefaults() {
	if c.Replicas == 0 {
		c.Replicas = 3
	}
	if c.Observers == 0 {
		c.Observers = 1
	}
	if c.Observers < 0 {
		c.Observers = 0
	}
	if c.Workers == 0 {
		c.Workers = 4
	}
	if c.Session == 0 {
		c.Session = 2 * time.Second
	}
	if c.HealTimeout == 0 {
		c.HealTimeout = 60 * time.Second
	}
	if c.CheckpointEvery == 0 {
		c.CheckpointEvery = 300
	}
	if c.MaxChannelBatches == 0 {
		c.MaxChannelBatches = 20
	}
	if c.FetchIdle == 0 {
		c.FetchIdle = 2 * time.Second
	}
	if c.Out == nil {
		c.Out = io.Discard
	}
}

// Validate names every bad field.
func (c Config) Validate() error {
	var errs []error
	if c.Duration <= 0 && c.Faults <= 0 {
		errs = append(errs, errors.New("Duration or Faults must be > 0"))
	}
	if c.Replicas < 2 || c.Replicas > 7 {
		errs = append(errs, fmt.Errorf("Replicas %d: want 2..7", c.Replicas))
	}
	if c.Observers > 3 {
		errs = append(errs, fmt.Errorf("Observers %d: want at most 3", c.Observers))
	}
	if c.Workers < 1 {
		errs = append(errs, fmt.Errorf("Workers %d: want >= 1", c.Workers))
	}
	if c.Session < 400*time.Millisecond {
		errs = append(errs, fmt.Errorf("Session %v: want >= 400ms (2 ZooKeeper ticks)", c.Session))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", ErrConfig, err)
	}
	return nil
}

// ErrConfig: Config.Validate found bad fields.
var ErrConfig = errors.New("chaos: invalid config")

// Result is the outcome of a run.
type Result struct {
	Seed   uint64
	Faults int
	// Stalls: faults after which no primary acknowledged proposals within
	// HealTimeout. Crashes: replica processes that exited or failed
	// without being told to.
	Stalls, Crashes int
	// MaxFailover: the longest time from killing or pausing the primary to
	// one new primary that every live replica follows.
	MaxFailover time.Duration
	// SlowFailovers: failovers slower than the session timeout + 3 s
	// (printed with the replicas' roles meanwhile; not a violation).
	SlowFailovers int
	// Bootstraps: checkpoint restores the replicas' status showed (sampled
	// after each fault: one a replica did and lost to a restart before the
	// next sample is missed).
	Bootstraps int
	// ChannelsDeleted: channels deleted by the end of the run (-1: unknown).
	ChannelsDeleted int
	// Converged: every replica applied the same index with the same state
	// hash within the final deadline.
	Converged bool
	Elapsed   time.Duration
	Report    Report
	// Anomalies describe stalls, crashes and convergence failures.
	Anomalies []string
	// WorkDir holds the node and ZooKeeper logs if it was kept.
	WorkDir string
	// Kinds counts the faults that ran, by kind.
	Kinds [numKinds]int
	// SlowStepDowns: primaries cut off from ZooKeeper (process running)
	// that still reported role primary two session timeouts later (not a
	// violation: they acknowledge nothing while disconnected).
	SlowStepDowns int
	// Observer is what the observer watch saw (rule 10; its violations
	// are in Report).
	Observer ObserverReport

	// Lifecycle: the run drew lifecycle operations (Config.Lifecycle).
	Lifecycle bool
	// LifecycleGaps: per lifecycle kind, the longest stretch without an
	// acknowledged proposal during one of its steps; MaxLifecycleGap the
	// longest of them. ZooKeeper losses are apart: MaxReseedGap is the
	// longest time from a loss to the first acknowledgement after its
	// re-seed.
	// Steps that killed a member (kill -9) instead of stopping it, or
	// during which the ZooKeeper leader was killed, count apart, in
	// MaxFaultedStepGap: a killed primary costs a failover.
	LifecycleGaps     [numKinds]time.Duration
	MaxLifecycleGap   time.Duration
	MaxFaultedStepGap time.Duration
	MaxReseedGap      time.Duration
	// AckedWhileLost: proposals acknowledged while ZooKeeper had lost the
	// room; NotRefused: members that did not refuse it by name
	// (ErrRoomLost) in time; ReseedFailures: re-seeds that failed. Each is
	// a failure of the run.
	AckedWhileLost, NotRefused, ReseedFailures int
	// RoomVersionRefused: room-version steps not set because a live
	// member does not support the version (not a failure).
	RoomVersionRefused int
	// DowngradesRefused: downgrades after a re-seed whose previous
	// release refused the room, as it must (not a failure).
	// RoomVersionViolations: rooms that moved to a version a live member
	// does not support (a failure).
	DowngradesRefused, RoomVersionViolations int
	// ReseedsTrusted: re-seeds refused because survivors could not be
	// compared (a member had run the previous release, which writes no
	// history records) and done again trusting the highest survivor,
	// as docs/disaster-recovery.md says (not a failure).
	ReseedsTrusted int
	// TLS: the run used -tls. TLSViolations: rotations that did not take
	// (a member not presenting its new certificate, refusing the new CA
	// or accepting the old one after it was removed); a failure.
	TLS           bool
	TLSViolations int
	// Restore-check (restorecheck.go). RestoreSteps: steps that ran;
	// RestoreChecks: restores whose running hash was compared with a
	// member's at the index and equal; RestoreMismatch: restores whose
	// hash differed from a member's of the same chain (a failure);
	// RestoreSkipped: indexes not compared (not archived yet, or no
	// member keeps a hash of the same chain at the index any more);
	// RestoreFailures: restores that failed otherwise (a failure);
	// RestoreUncompared: steps that compared no restore.
	RestoreSteps, RestoreChecks, RestoreMismatch, RestoreSkipped, RestoreFailures, RestoreUncompared int
}

// OK reports whether the run found nothing wrong.
func (r Result) OK() bool {
	return r.Report.OK() && r.Stalls == 0 && r.Crashes == 0 && r.Converged &&
		r.AckedWhileLost == 0 && r.NotRefused == 0 && r.ReseedFailures == 0 && r.RoomVersionViolations == 0 &&
		r.TLSViolations == 0 && r.RestoreMismatch == 0 && r.RestoreFailures == 0
}

// Line is the one-line summary.
func (r Result) Line() string {
	p := r.Report
	return fmt.Sprintf("CHAOS seed=%d faults=%d acked=%d lost=%d duplicated=%d divergent=%d unknown=%d"+
		" unknown_applied=%d failed=%d epoch_regressions=%d gaps=%d phantom=%d foreign=%d state_mismatch=%d zk_mismatch=%d"+
		" ids_applied_twice=%d acked_ids_not_once=%d retried=%d dedup=%d unknown_resolved_by_retry=%d dedup_copies=%d"+
		" reads=%d reads_failed=%d reads_linearizable=%s"+
		" observers=%d observer_samples=%d observer_violations=%d epoch_owners=%d unseen_epochs=%d"+
		" stalls=%d crashes=%d converged=%v index=%d epochs=%d bootstraps=%d partial_replicas=%d channels_deleted=%d max_failover=%v slow_failovers=%d elapsed=%v",
		r.Seed, r.Faults, p.Acked, p.Lost, p.Duplicated, p.Divergent, p.Unknown,
		p.UnknownApplied, p.Failed, p.EpochRegressions, p.Gaps, p.Phantom, p.Foreign, p.HashMismatch, p.ZKMismatch,
		p.IDsTwice, p.AckedIDsNotOnce, p.Retried, p.Dedup, p.ResolvedByRetry, p.DedupCopies,
		p.Reads.Reads, p.Reads.Failed, p.Reads.Linearizable(),
		p.Observers, p.ObserverSamples, p.ObserverViolations, p.EpochOwners, p.UnseenEpochs,
		r.Stalls, r.Crashes, r.Converged, p.Index, p.Epochs, r.Bootstraps, p.Partial, r.ChannelsDeleted,
		r.MaxFailover.Round(time.Millisecond), r.SlowFailovers, r.Elapsed.Round(time.Second)) + fmt.Sprintf(" slow_stepdowns=%d kinds=%s", r.SlowStepDowns, r.kindCounts()) +
		r.lifecycleLine() + r.tlsLine()
}

// tlsLine is the summary's TLS part ("" without -tls).
func (r Result) tlsLine() string {
	if !r.TLS {
		return ""
	}
	return fmt.Sprintf(" tls=true tls_violations=%d", r.TLSViolations)
}

// lifecycleLine is the summary's lifecycle part ("" without -lifecycle).
func (r Result) lifecycleLine() string {
	if !r.Lifecycle {
		return ""
	}
	var gaps []string
	for k := firstLifecycle; k < numKinds; k++ {
		if r.Kinds[k] > 0 && !k.isZKLoss() && k != RestoreCheck {
			g := r.LifecycleGaps[k].Round(time.Millisecond).String()
			if r.LifecycleGaps[k] == 0 {
				g = "-" // every step of the kind was faulted or skipped
			}
			gaps = append(gaps, fmt.Sprintf("%s:%s", k, g))
		}
	}
	if len(gaps) == 0 {
		gaps = append(gaps, "none")
	}
	return fmt.Sprintf(" max_lifecycle_gap=%v max_faulted_step_gap=%v max_reseed_gap=%v acked_while_lost=%d not_refused=%d reseed_failures=%d room_version_refused=%d room_version_violations=%d downgrades_refused=%d reseeds_trusted=%d"+
		" restores=%d restore_mismatch=%d restore_skipped=%d restore_failures=%d restore_steps_uncompared=%d lifecycle_gaps=%s",
		r.MaxLifecycleGap.Round(time.Millisecond), r.MaxFaultedStepGap.Round(time.Millisecond), r.MaxReseedGap.Round(time.Millisecond),
		r.AckedWhileLost, r.NotRefused, r.ReseedFailures, r.RoomVersionRefused, r.RoomVersionViolations, r.DowngradesRefused,
		r.ReseedsTrusted, r.RestoreChecks, r.RestoreMismatch, r.RestoreSkipped, r.RestoreFailures, r.RestoreUncompared, strings.Join(gaps, ","))
}

// kindCounts is "kill-primary:3,partition-link:1,…" over the kinds that ran.
func (r Result) kindCounts() string {
	var parts []string
	for k := Kind(0); k < numKinds; k++ {
		if n := r.Kinds[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s:%d", k, n))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ",")
}

// printer writes timestamped lines to the run's output.
type printer struct {
	mu    sync.Mutex // guards w
	w     io.Writer
	start time.Time
}

func (p *printer) f(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, "[%8.3fs] %s\n", time.Since(p.start).Seconds(), fmt.Sprintf(format, args...))
}

// runner is one run's world. Only Run's goroutine touches its fields.
type runner struct {
	cfg  Config
	out  *printer
	log  *slog.Logger
	ens  *zkensemble.Ensemble
	c    *testnode.Cluster
	h    *testnode.History
	load *proposers
	res  *Result

	// reads: the readers (reads.go), started and stopped with load.
	reads *readers
	// rec follows the log in ZooKeeper during the run (nil: it could not
	// start), so the checker sees entries whose channels get deleted.
	rec *testnode.LogRecorder

	// net holds the faultnet links of every replica (see ClusterOptions.Net).
	net *faultnet.Net

	zkDown int // server that is down, -1: none
	zkHold int // faults left before it is restarted
	// nodeHeld: a replica a kill-standby holds down across nodeHold more
	// faults (nil: none).
	nodeHeld *testnode.Node
	nodeHold int
	// needRestart: nodes a fault failed to restart (heal retries).
	needRestart map[string]bool
	// bootstrapped: nodes whose state may start at a checkpoint (wiped, or
	// seen with Bootstraps > 0).
	bootstrapped map[string]bool
	// restores: the bootstraps already counted, per node and launch.
	restores map[string]restoreCount
	// observers: the ids of the observer nodes; obsWatch samples them
	// (observer.go) from the first primary to the final checks.
	observers map[string]bool
	obsWatch  *observerWatch

	// Lifecycle (lifecycle.go). work: the run's work dir. obsPast: what
	// earlier observer watches saw (one is restarted when observers come
	// and go, and across a ZooKeeper loss); nextObserver: the number of
	// the next observer id. recPast, recSkipped: what earlier log
	// recorders read (one per incarnation). zkCopy: ZooKeeper's data as
	// it was at zkCopyAt (zk-rollback-reseed restores it).
	// roomVersionTarget: the target last set (0: none this incarnation).
	// steps, losses: the lifecycle steps that ran. broken: a re-seed
	// failed; the schedule stops.
	work              string
	obsPast           ObserverReport
	nextObserver      int
	recPast           []LogEntry
	recSkipped        [][2]uint64
	zkCopy            *zkensemble.DataCopy
	zkCopyAt          time.Time
	roomVersionTarget int
	steps             []lifeStep
	losses            []lossStep
	broken            bool
	// newBin, oldBin: this tree's and the previous release's testnode
	// (oldBin "": none, oldWhy says why); oldRelease names it. reseeded:
	// the room was re-seeded (the previous release cannot open it).
	newBin, oldBin, oldRelease, oldWhy string
	reseeded                           bool
	// tls: the run's certificates (-tls; nil without).
	tls *tlsWorld
	// ranOld: replicas started on the previous release since the room
	// was created or last re-seeded (their stores hold a stretch without
	// history records).
	ranOld map[string]bool
	// archiveDir: the room's continuous archive every member is given
	// (lifecycle runs; "": none). incSeed, incStart: the incarnation in
	// service began after index incSeed, at incStart (zero before any
	// re-seed).
	archiveDir string
	incSeed    uint64
	incStart   time.Time
}

type restoreCount struct{ launch, count int }

// Run builds the world (ensemble unless given, replicas, proposers), runs
// the schedule of cfg.Seed, heals every fault, waits for convergence and
// checks. The error is a harness failure (nothing could be checked);
// violations are in the Result.
func Run(ctx context.Context, cfg Config) (res Result, err error) {
	cfg.setDefaults()
	if err := cfg.Validate(); err != nil {
		return Result{}, err
	}
	res = Result{Seed: cfg.Seed, ChannelsDeleted: -1}
	start := time.Now()
	out := &printer{w: cfg.Out, start: start}
	var logger *slog.Logger
	if cfg.Verbose {
		logger = slog.New(slog.NewTextHandler(cfg.Out, &slog.HandlerOptions{Level: slog.LevelInfo}))
	} else {
		logger = slog.New(slog.DiscardHandler)
	}
	parent := cfg.Dir
	if parent == "" {
		parent = os.TempDir()
	}
	work, err := os.MkdirTemp(parent, fmt.Sprintf("chaos-%d-", cfg.Seed))
	if err != nil {
		return res, fmt.Errorf("chaos: work dir: %w", err)
	}
	keep := cfg.Keep
	defer func() {
		if keep {
			res.WorkDir = work
			return
		}
		_ = os.RemoveAll(work)
	}()

	bin := cfg.Binary
	if bin == "" {
		if bin, err = testnode.Build(ctx); err != nil {
			return res, err
		}
	}
	oldBin, oldRelease, oldWhy := cfg.OldBinary, cfg.OldRelease, ""
	switch {
	case !cfg.Lifecycle:
	case cfg.TLS:
		oldBin, oldWhy = "", "the previous release has no TLS"
	case oldBin == "-":
		oldBin, oldWhy = "", "none given"
	case oldBin == "":
		t0 := time.Now()
		oldBin, oldRelease, err = BuildPrevious(ctx, work)
		if err != nil {
			oldBin, oldWhy = "", firstLine(err)
			out.f("upgrade and downgrade will be skipped: %v", err)
		} else {
			out.f("previous release %s built in %v", oldRelease, time.Since(t0).Round(time.Second))
		}
	}
	if oldRelease == "" {
		oldRelease = "the previous release"
	}
	ens := cfg.Ensemble
	if ens == nil {
		sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		zopts := zkensemble.Options{
			Servers: 3, TickTime: 200 * time.Millisecond, Dir: work, Logger: logger,
			FaultNet: true, FaultNetSeed: cfg.Seed,
		}
		if cfg.TLS {
			zopts.TLS = &zkensemble.TLSOptions{}
		}
		ens, err = zkensemble.Start(sctx, zopts)
		cancel()
		if err != nil {
			return res, fmt.Errorf("chaos: start ZooKeeper: %w", err)
		}
		defer func() {
			if keep {
				// Copy the server logs out before Close removes them.
				for i := range 3 {
					copyFile(ens.LogPath(i), filepath.Join(work, fmt.Sprintf("zk-%d.log", i)))
				}
			}
			_ = ens.Close()
		}()
	}
	out.f("ZooKeeper: 3 servers at %s; run started %s (node logs are in UTC)", ens.ConnString(), wall(start))
	zkAddrs := ens.Addrs()
	var tw *tlsWorld
	var tune func(*testnode.NodeOptions) error
	if cfg.TLS {
		if ens.TLSCA() == nil {
			return res, errors.New("chaos: -tls needs an ensemble started with TLS")
		}
		if tw, err = newTLSWorld(filepath.Join(work, "tls"), ens.TLSCA(), cfg.Replicas); err != nil {
			return res, fmt.Errorf("chaos: certificates: %w", err)
		}
		zkAddrs, tune = ens.SecureAddrs(), tw.tune
		out.f("TLS: members reach ZooKeeper at %s with client certificates (quorum links TLS too); the room's ACL is x509 %s; mutual TLS between members (CA generation 1)",
			strings.Join(zkAddrs, ","), strings.Join(tw.acl, " | "))
	}

	archiveDir := ""
	if cfg.Lifecycle {
		// The room's continuous archive, as an operator configures it:
		// one directory every member is given (restore-check reads it).
		archiveDir = filepath.Join(work, "archive")
	}

	fnet := faultnet.NewNet(cfg.Seed)
	defer fnet.Close()
	sctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	c, err := testnode.StartCluster(sctx, testnode.ClusterOptions{
		Nodes: cfg.Replicas,
		ZK:    zkAddrs,
		Dir:   filepath.Join(work, "nodes"),
		Tune:  tune,
		Node: testnode.NodeOptions{
			Binary:            bin,
			SessionTimeout:    cfg.Session,
			CheckpointEvery:   cfg.CheckpointEvery,
			KeepCheckpoints:   2,
			MaxChannelBatches: cfg.MaxChannelBatches,
			FetchIdleTimeout:  cfg.FetchIdle,
			Archive:           archiveDir,
			Logger:            logger,
			ExtraArgs:         []string{"--disk-faults", "--disk-stall-timeout", diskStallTimeout(cfg.Session).String()},
		},
		Logger: logger,
		Net:    fnet,
	})
	cancel()
	if cfg.Latency > 0 {
		fnet.DelayAll(cfg.Latency, cfg.Latency/2)
		what := "every replica link"
		if ens.Net() != nil {
			if err := ens.DelayAll(cfg.Latency, cfg.Latency/2); err == nil {
				what = "every link (replicas, clients and ZooKeeper quorum and election)"
			}
		}
		out.f("latency %v ± %v on %s for the whole run", cfg.Latency, cfg.Latency/2, what)
	}
	if err != nil {
		return res, fmt.Errorf("chaos: start replicas: %w", err)
	}
	defer c.Close()
	observers := map[string]bool{}
	for i := range cfg.Observers {
		id := fmt.Sprintf("o%d", i)
		actx, cancel := context.WithTimeout(ctx, 3*time.Minute)
		_, err := c.Add(actx, id, func(o *testnode.NodeOptions) { o.Observer = true })
		cancel()
		if err != nil {
			return res, fmt.Errorf("chaos: start observer %s: %w", id, err)
		}
		observers[id] = true
	}

	r := &runner{
		cfg: cfg, out: out, log: logger, ens: ens, c: c, h: &testnode.History{}, res: &res, net: fnet,
		zkDown: -1, needRestart: map[string]bool{}, bootstrapped: map[string]bool{}, restores: map[string]restoreCount{},
		observers: observers, work: work, nextObserver: cfg.Observers,
		newBin: bin, oldBin: oldBin, oldRelease: oldRelease, oldWhy: oldWhy, tls: tw, ranOld: map[string]bool{},
		archiveDir: archiveDir,
	}
	res.Lifecycle, res.TLS = cfg.Lifecycle, cfg.TLS
	defer func() { r.zkCopy.Remove() }()
	if err := r.run(ctx); err != nil {
		keep = true
		if ctx.Err() == nil {
			out.f("tails of the node logs:\n%s", c.LogTails(40))
		}
		return res, err
	}
	res.Elapsed = time.Since(start)
	if !res.OK() {
		keep = true
		out.f("tails of the node logs (all of them in %s):\n%s", filepath.Join(work, "nodes", "*", "node.log"), c.LogTails(40))
	}
	return res, nil
}

func (r *runner) run(ctx context.Context) error {
	pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	p, err := r.c.WaitPrimary(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("chaos: first primary: %w", err)
	}
	r.out.f("room %s: %d replicas and %d observers, primary %s; %d proposers", r.c.Room(), r.cfg.Replicas, r.cfg.Observers, p.ID(), r.cfg.Workers)
	r.obsWatch = startObserverWatch(ctx, r)
	defer func() { r.obsWatch.stop() }()

	r.rec, err = testnode.StartLogRecorderWith(ctx, r.zkDial(), r.c.Room(), 1)
	if err != nil {
		r.out.f("log recorder not started (the checker sees only what ZooKeeper holds at the end): %v", firstLine(err))
		r.rec = nil
	}
	defer func() {
		if r.rec != nil {
			r.rec.Stop()
		}
	}()

	r.load = startProposers(ctx, r.c, r.h, r.cfg.Workers)
	defer r.load.stop()
	r.reads = startReaders(ctx, r.c, r.load, readerCount)
	defer r.reads.stop()
	if err := r.progress(ctx, 20, 2*time.Minute); err != nil {
		return fmt.Errorf("chaos: first proposals: %w", err)
	}

	sched := NewSchedule(r.cfg.Seed, r.cfg.Session)
	if r.cfg.Lifecycle {
		sched.Lifecycle(r.cfg.Observers, r.cfg.Replicas)
		if r.cfg.TLS {
			sched.TLS()
		}
		r.copyZK()
	}
	sched.Force(r.cfg.Force...)
	end := time.Now().Add(r.cfg.Duration)
	for ctx.Err() == nil {
		if r.cfg.Faults > 0 && r.res.Faults >= r.cfg.Faults {
			break
		}
		if r.cfg.Duration > 0 && !time.Now().Before(end) {
			break
		}
		if r.broken {
			r.out.f("schedule stopped: the room could not be re-seeded")
			break
		}
		f := sched.Next()
		r.res.Faults++
		r.exec(ctx, f)
		r.heal(ctx, f)
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("chaos: interrupted: %w", err)
	}
	return r.finish(ctx)
}

// sleep waits d (part of the schedule, not synchronisation) or until ctx
// ends.
func sleep(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// progress waits up to d until the proposers got n more acknowledgements.
func (r *runner) progress(ctx context.Context, n int64, d time.Duration) error {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := r.load.waitAcked(wctx, n); err != nil {
		return fmt.Errorf("%w (failed attempts so far: %v)", err, r.load.errorCounts())
	}
	return nil
}

// primary returns the one primary every live replica follows (waiting up
// to d).
func (r *runner) primary(ctx context.Context, d time.Duration) (*testnode.Node, error) {
	wctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	return r.c.WaitPrimary(wctx)
}

// standbys returns the live replicas other than p, by id (observers
// included: they take a standby's faults).
func (r *runner) standbys(p *testnode.Node) []*testnode.Node {
	var out []*testnode.Node
	for _, n := range r.c.Live() {
		if n != p {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *testnode.Node) int { return strings.Compare(a.ID(), b.ID()) })
	return out
}

// restart relaunches n; a failure is left to heal.
func (r *runner) restart(ctx context.Context, n *testnode.Node) error {
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := n.Restart(rctx); err != nil {
		r.needRestart[n.ID()] = true
		r.out.f("    restart of %s failed: %v", n.ID(), firstLine(err))
		return err
	}
	delete(r.needRestart, n.ID())
	return nil
}

// diskStallTimeout is every replica's store DiskStallTimeout in a run:
// longer than any pause the schedule makes (at most two sessions, or a
// session plus 3 s past a failover), because a process paused across a
// disk write sees that write as stalled when it resumes (the stall clock
// counts the pause, as a real machine's would).
func diskStallTimeout(session time.Duration) time.Duration { return 3*session + 4*time.Second }

// stallDisk stalls every disk write of the primary's store (its node's
// faultfs): the store must declare the stall and the replica fail (role
// failed, naming the disk) within its DiskStallTimeout + Pebble's 2 s check,
// and a standby lead. The failed process is killed (the operator's fix),
// and restarted f.Down after the failover on a healthy disk.
func (r *runner) stallDisk(ctx context.Context, f Fault, p *testnode.Node) {
	timeout := diskStallTimeout(r.cfg.Session)
	r.out.f("%s: stall every disk write of primary %s", f, p.ID())
	t0 := time.Now()
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	err := p.Client().StallDisk(sctx, true)
	cancel()
	if err != nil {
		r.out.f("    stall: %v", err)
		return
	}
	bound := timeout + 2*time.Second + 5*time.Second
	var st testnode.StatusJSON
	for {
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err = p.Status(qctx)
		cancel()
		if (err == nil && st.Role == testnode.RoleFailed) || time.Since(t0) > bound || ctx.Err() != nil {
			break
		}
		sleep(ctx, 50*time.Millisecond) // polling the node's status: no event to wait on
	}
	if st.Role != testnode.RoleFailed || !strings.Contains(st.Err, "disk stalled") {
		r.res.Stalls++
		msg := fmt.Sprintf("disk stall: %s still reports role %q (err %q) %v after its disk stalled", p.ID(), st.Role, st.Err, time.Since(t0).Round(time.Millisecond))
		r.res.Anomalies = append(r.res.Anomalies, msg)
		r.out.f("    %s", msg)
	} else {
		r.out.f("    %s failed %v after the stall: %s", p.ID(), time.Since(t0).Round(time.Millisecond), firstLine(errors.New(st.Err)))
	}
	// The failover is timed from the failure (the detection took the
	// timeout, by design), so that it is comparable with a kill's.
	tFailed := time.Now()
	if err := p.Kill(); err != nil {
		r.out.f("    kill: %v", err)
	}
	what := r.failover(ctx, p, tFailed)
	sleep(ctx, f.Down)
	if r.restart(ctx, p) == nil {
		what += fmt.Sprintf("; %s restarted on a healthy disk after %v", p.ID(), time.Since(t0).Round(time.Millisecond))
	}
	r.out.f("    %s", what)
}

// failover waits for a new primary after old was killed or paused at t0:
// one replica primary and every other live one its standby. It records
// the time; a failover slower than the session timeout + slowFailover is
// reported with the timeline of the replicas' roles while it lasted.
func (r *runner) failover(ctx context.Context, old *testnode.Node, t0 time.Time) string {
	wctx, cancel := context.WithTimeout(ctx, r.cfg.HealTimeout)
	defer cancel()
	var timeline []string
	last := ""
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		np, why := r.c.PrimaryNow(wctx)
		if np != nil {
			took := time.Since(t0)
			r.res.MaxFailover = max(r.res.MaxFailover, took)
			what := fmt.Sprintf("%s primary after %v", np.ID(), took.Round(time.Millisecond))
			if took > r.cfg.Session+slowFailover {
				r.res.SlowFailovers++
				what += fmt.Sprintf(" (SLOW; roles while it lasted:\n%s)", indent(strings.Join(timeline, "\n")))
			}
			return what
		}
		if roles := r.roles(wctx); roles != last {
			timeline = append(timeline, fmt.Sprintf("+%v %s", time.Since(t0).Round(time.Millisecond), roles))
			last = roles
		}
		select {
		case <-wctx.Done():
			return fmt.Sprintf("no new primary after %v: %s; roles:\n%s", time.Since(t0).Round(time.Millisecond), why,
				indent(strings.Join(timeline, "\n")))
		case <-tick.C:
		}
	}
}

// slowFailover: a failover that takes longer than the session timeout plus
// this is reported in detail (and counted in Result.SlowFailovers).
const slowFailover = 3 * time.Second

// roles is a compact view of each live replica's role, epoch, the primary
// it follows and its connection state (not its applied index: that moves
// all the time).
func (r *runner) roles(ctx context.Context) string {
	sts, _ := r.c.Statuses(ctx)
	var parts []string
	for _, n := range r.c.Nodes() {
		s, ok := sts[n.ID()]
		switch {
		case ok:
			parts = append(parts, fmt.Sprintf("%s=%s/e%d->%s/%s", n.ID(), s.Role, s.Epoch, s.PrimaryID, s.ConnState))
		case n.Paused():
			parts = append(parts, n.ID()+"=paused")
		case n.Running():
			parts = append(parts, n.ID()+"=silent")
		default:
			parts = append(parts, n.ID()+"=down")
		}
	}
	return strings.Join(parts, " ")
}

// exec runs one fault and undoes it (except a ZooKeeper server held down
// across the next fault). What it did is printed; failures of the harness
// are printed and left to heal.
func (r *runner) exec(ctx context.Context, f Fault) {
	p, err := r.primary(ctx, 30*time.Second)
	if err != nil && !f.Kind.isZK() {
		r.out.f("%s: skipped, no primary: %v", f, firstLine(err))
		return
	}
	var sb []*testnode.Node
	var s *testnode.Node
	if p != nil {
		sb = r.standbys(p)
		if len(sb) > 0 {
			s = sb[f.Pick%len(sb)]
		}
	}
	if f.Kind == Transfer {
		// Leadership goes to a standby that may lead: never an observer.
		sb = slices.DeleteFunc(sb, func(n *testnode.Node) bool { return r.observers[n.ID()] })
		s = nil
		if len(sb) > 0 {
			s = sb[f.Pick%len(sb)]
		}
	}
	needsStandby := f.Kind == KillStandby || f.Kind == PauseStandby || f.Kind == WipeStandby ||
		f.Kind == Transfer || f.Kind == Checkpoint && !f.Primary || f.Kind == StallCheckpoint
	if needsStandby && s == nil {
		r.out.f("%s: skipped, no live standby", f)
		return
	}
	// Counted as run from here; a fault that turns out to have done
	// nothing (a ZooKeeper fault while a server is down, a stall that
	// found no stream) takes itself back.
	r.res.Kinds[f.Kind]++
	switch f.Kind {
	case KillPrimary:
		r.out.f("%s: kill -9 primary %s", f, p.ID())
		t0 := time.Now()
		if err := p.Kill(); err != nil {
			r.out.f("    kill: %v", err)
		}
		what := r.failover(ctx, p, t0)
		sleep(ctx, time.Until(t0.Add(f.Down)))
		if r.restart(ctx, p) == nil {
			what += fmt.Sprintf("; %s restarted after %v", p.ID(), time.Since(t0).Round(time.Millisecond))
		}
		r.out.f("    %s", what)
	case KillStandby:
		r.out.f("%s: kill -9 standby %s", f, s.ID())
		_ = s.Kill()
		if f.Span > 0 && r.nodeHeld == nil {
			r.nodeHeld, r.nodeHold = s, f.Span
			r.out.f("    held down across the next %d fault(s)", f.Span)
			return
		}
		sleep(ctx, f.Down)
		if r.restart(ctx, s) == nil {
			r.out.f("    %s restarted", s.ID())
		}
	case PausePrimaryLong:
		r.out.f("%s: SIGSTOP primary %s past its session", f, p.ID())
		t0 := time.Now()
		if err := p.Pause(); err != nil {
			r.out.f("    pause: %v", err)
		}
		what := r.failover(ctx, p, t0)
		sleep(ctx, time.Until(t0.Add(r.cfg.Session+f.Down)))
		if err := p.Resume(); err != nil {
			r.out.f("    resume: %v", err)
		}
		r.out.f("    %s; %s resumed after %v", what, p.ID(), time.Since(t0).Round(time.Millisecond))
	case PausePrimaryShort:
		r.out.f("%s: SIGSTOP primary %s for %v", f, p.ID(), f.Down)
		_ = p.Pause()
		sleep(ctx, f.Down)
		if err := p.Resume(); err != nil {
			r.out.f("    resume: %v", err)
		}
	case PauseStandby:
		r.out.f("%s: SIGSTOP standby %s for %v", f, s.ID(), f.Down)
		_ = s.Pause()
		sleep(ctx, f.Down)
		if err := s.Resume(); err != nil {
			r.out.f("    resume: %v", err)
		}
	case KillZKLeader, KillZKFollower:
		r.killZK(ctx, f)
	case PartitionZKLeader:
		r.partitionZKLeader(ctx, f)
	case PartitionPrimaryLong, PartitionPrimaryShort, PartitionLink, DropRepliesPrimary, StallCheckpoint:
		r.netFault(ctx, f, p, s)
	case StallDiskPrimary:
		r.stallDisk(ctx, f, p)
	case WipeStandby:
		r.out.f("%s: kill -9 standby %s, wipe its disk, restart", f, s.ID())
		var cp *testnode.Node
		if f.Primary {
			cp = p
		}
		r.wipe(ctx, s, cp)
		if r.restart(ctx, s) == nil {
			r.out.f("    %s restarted with an empty disk", s.ID())
		}
	case Checkpoint:
		n := p
		if !f.Primary {
			n = s
		}
		r.out.f("%s: checkpoint on %s", f, n.ID())
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err := n.Checkpoint(cctx)
		cancel()
		r.out.f("    checkpoint: %v", errText(err))
	case Transfer:
		r.out.f("%s: transfer leadership %s -> %s", f, p.ID(), s.ID())
		tctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err := p.Transfer(tctx, s.ID())
		cancel()
		r.out.f("    transfer: %v", errText(err))
	default:
		if f.Kind.IsLifecycle() {
			r.lifecycle(ctx, f, p)
		}
	}
}

// wipe kills standby s and deletes its data dir; if p is set, the primary
// checkpoints meanwhile (rotates and deletes covered channels), so s must
// bootstrap from a peer's checkpoint when it restarts.
func (r *runner) wipe(ctx context.Context, s, p *testnode.Node) {
	_ = s.Kill()
	if err := s.WipeData(); err != nil {
		r.out.f("    wipe: %v", err)
	}
	r.bootstrapped[s.ID()] = true
	if p != nil {
		cctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		err := p.Checkpoint(cctx)
		cancel()
		r.out.f("    checkpoint on primary %s: %v", p.ID(), errText(err))
	}
}

// killZK kills the ZooKeeper leader or a follower (never a second server:
// the schedule holds at most one down) and restarts it after f.Down unless
// f.Span holds it down across following faults.
func (r *runner) killZK(ctx context.Context, f Fault) {
	if r.zkDown >= 0 {
		// Cannot happen with a schedule from NewSchedule; keep the quorum.
		r.out.f("%s: skipped, server %d is down", f, r.zkDown)
		return
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	leader, err := r.ens.Leader(lctx)
	cancel()
	if err != nil {
		r.out.f("%s: skipped, no ZooKeeper leader: %v", f, firstLine(err))
		return
	}
	target := leader
	if f.Kind == KillZKFollower {
		var followers []int
		for i := range 3 {
			if i != leader {
				followers = append(followers, i)
			}
		}
		target = followers[f.Pick%len(followers)]
	}
	role := "leader"
	if target != leader {
		role = "follower"
	}
	r.out.f("%s: kill -9 ZooKeeper server %d (%s)", f, target, role)
	if err := r.ens.Kill(target); err != nil {
		r.out.f("    kill: %v", err)
	}
	r.zkDown, r.zkHold = target, f.Span
	if f.Span > 0 {
		r.out.f("    held down across the next %d fault(s)", f.Span)
		return
	}
	sleep(ctx, f.Down)
	r.startZK(ctx)
}

func (r *runner) startZK(ctx context.Context) {
	if r.zkDown < 0 {
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := r.ens.Start(sctx, r.zkDown); err != nil {
		r.out.f("    restart of ZooKeeper server %d failed: %v", r.zkDown, firstLine(err))
		return
	}
	r.out.f("    ZooKeeper server %d restarted", r.zkDown)
	r.zkDown = -1
}

// releaseNode restarts the replica held down.
func (r *runner) releaseNode(ctx context.Context) {
	if n := r.nodeHeld; n != nil {
		r.nodeHeld, r.nodeHold = nil, 0
		if r.restart(ctx, n) == nil {
			r.out.f("    %s restarted", n.ID())
		}
	}
}

// reviveNodes resumes paused replicas and restarts those that are down:
// a replica down that no fault killed is a crash.
func (r *runner) reviveNodes(ctx context.Context) {
	for _, n := range r.c.Nodes() {
		if n.Paused() {
			_ = n.Resume()
		}
		if n.Running() || n == r.nodeHeld {
			continue
		}
		if !r.needRestart[n.ID()] {
			r.res.Crashes++
			msg := fmt.Sprintf("crash: %s exited on its own (%v); log tail:\n%s", n.ID(), n.ExitErr(), indent(n.LogTail(15)))
			r.res.Anomalies = append(r.res.Anomalies, msg)
			r.out.f("%s", msg)
		}
		if r.restart(ctx, n) == nil {
			r.out.f("    %s restarted by heal", n.ID())
		}
	}
}

// heal undoes what a fault left behind, waits the schedule's pause, then
// up to HealTimeout for one primary and new acknowledgements.
func (r *runner) heal(ctx context.Context, f Fault) {
	if r.nodeHeld != nil {
		if r.nodeHold > 0 {
			r.nodeHold-- // stays down across the next fault
		} else {
			r.releaseNode(ctx)
		}
	}
	r.reviveNodes(ctx)
	if r.zkDown >= 0 {
		if r.zkHold > 0 {
			r.zkHold-- // stays down across the next fault
		} else {
			r.startZK(ctx)
		}
	}
	sleep(ctx, f.Heal)
	if r.cfg.Lifecycle && (r.zkCopy == nil || f.Seq%6 == 0) && !r.broken {
		// A copy for a later zk-rollback-reseed: taken again now and
		// then, so that rollbacks go back by different amounts.
		old := r.zkCopy
		r.copyZK()
		if r.zkCopy != old {
			_ = old.Remove()
		}
	}
	var why string
	if _, err := r.primary(ctx, r.cfg.HealTimeout); err != nil {
		why = "no primary: " + firstLine(err)
	} else if err := r.progress(ctx, 10, r.cfg.HealTimeout); err != nil {
		why = "no progress: " + firstLine(err)
	}
	r.sample(ctx)
	if why != "" && ctx.Err() == nil {
		r.res.Stalls++
		msg := fmt.Sprintf("stall after %s: %s", f, why)
		r.res.Anomalies = append(r.res.Anomalies, msg)
		r.out.f("%s\n%s", msg, indent(r.describe(ctx)))
		return
	}
	if r.cfg.Verbose {
		r.out.f("    healed: %s", r.describe(ctx))
	}
}

// sample records what the replicas' status says: bootstraps, failed roles.
func (r *runner) sample(ctx context.Context) {
	sts, _ := r.c.Statuses(ctx)
	for id, s := range sts {
		if n := r.c.Node(id); n != nil && s.Bootstraps > 0 {
			r.bootstrapped[id] = true
			seen := r.restores[id]
			if seen.launch != n.Launches() {
				seen = restoreCount{launch: n.Launches()}
			}
			if s.Bootstraps > seen.count {
				r.res.Bootstraps += s.Bootstraps - seen.count
				r.out.f("    %s restored a checkpoint (at index %d)", id, s.CheckpointIndex)
				seen.count = s.Bootstraps
			}
			r.restores[id] = seen
		}
		if s.Role == testnode.RoleFailed {
			r.res.Crashes++
			msg := fmt.Sprintf("failed: %s reports role failed: %s", id, s.Err)
			r.res.Anomalies = append(r.res.Anomalies, msg)
			r.out.f("%s", msg)
			if n := r.c.Node(id); n != nil {
				_ = r.restart(ctx, n)
			}
		}
	}
}

// describe summarises every replica's status.
func (r *runner) describe(ctx context.Context) string {
	sts, _ := r.c.Statuses(ctx)
	var parts []string
	for _, n := range r.c.Nodes() {
		s, ok := sts[n.ID()]
		switch {
		case ok:
			parts = append(parts, fmt.Sprintf("%s=%s(e%d a%d c%d ckpt%d ch%d %s)", n.ID(), s.Role, s.Epoch, s.Applied, s.Committed, s.CheckpointIndex, s.Channels, s.ConnState))
		case n.Paused():
			parts = append(parts, n.ID()+"=paused")
		case n.Running():
			parts = append(parts, n.ID()+"=silent")
		default:
			parts = append(parts, n.ID()+"=down")
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}

func firstLine(err error) string {
	s := err.Error()
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	return firstLine(err)
}

func indent(s string) string {
	return "      " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n      ")
}

func copyFile(from, to string) {
	b, err := os.ReadFile(from)
	if err == nil {
		_ = os.WriteFile(to, b, 0o644)
	}
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// config is the parsed command line.
type config struct {
	servers        int
	anyServer      bool // clients connect in shuffled order, not leader first
	quick          bool
	jsonPath       string
	plotPath       string
	scenarios      map[string]bool
	failoverRows   map[string]bool // the failover rows to run (-failover-rows); nil: all
	duration       time.Duration
	cpuProfile     string
	heapMB         int
	sessionTimeout time.Duration
	verbose        bool
	fromJSON       string
	sizes          []int            // append entry sizes (default 64,256,1024,4096; 256 with -quick)
	proposers      []int            // append proposer counts (default 1,16,256)
	maxInFlight    int              // WriterConfig.MaxInFlight (0: logroom's default)
	eagerInFlight  int              // WriterConfig.EagerInFlight (0: logroom's default)
	linger         time.Duration    // WriterConfig.Linger (0: logroom's default)
	storeSync      store.SyncPolicy // replicas' store.Options.Sync
	ckptFlushBytes int64            // replicas' store.Options.CheckpointFlushBytes (0: the store's default)
	largeBytes     int64            // large-state: the state's size on disk (-large-bytes)
	zkWarmup       time.Duration    // pipelined creates before the first row (-zk-warmup)
	args           []string
}

// scenario is one group of rows.
type scenario struct {
	name string
	help string
	run  func(ctx context.Context, b *bench) ([]Result, error)
}

// allScenarios lists the scenarios in the order they run.
func allScenarios() []scenario {
	return []scenario{
		{"raw", "raw ZooKeeper ceiling: sequential and pipelined creates, 256 B and batch-sized znodes", runRaw},
		{"append", "logroom Writer.Append: 64 B..4 KiB entries x 1, 16, 256 proposers", runAppend},
		{"bulk", "logroom Writer.Append: many entries per call, and thousands of proposers", runBulk},
		{"compress", "logroom Writer.Append in bulk, 256 B: demo commands and random bytes, compression off and S2", runCompress},
		{"lag", "replica: standby apply time - primary ack time at half the max Propose rate", runLag},
		{"requests", "replica: Propose vs ProposeRequest (exactly-once request ids) at 256 proposers, alternated", runRequests},
		{"metrics", "replica: Propose at 256 proposers with and without Prometheus metrics, alternated", runMetrics},
		{"checkpoint", "replica: Propose p99 with and without back-to-back checkpoints", runCheckpoint},
		{"archive", "replica: Propose at 256 proposers with and without Config.Archive, alternated; restore 100k entries past a checkpoint", runArchive},
		{"bootstrap", "replica: a new standby restores a peer's checkpoint (MB/s) and catches up", runBootstrap},
		{"tlsboot", "replica: bootstrap MB/s over HTTPS with mutual TLS (PeerTLS) vs plain HTTP, alternated", runTLSBootstrap},
		{"footprint", "replica: room bytes in ZooKeeper and ZooKeeper heap over a run with checkpoints on", runFootprint},
		{"rooms", "replica: 100 rooms x 3 members on one ensemble: ZooKeeper cost per room at rest, aggregate Propose", runRooms},
		{"failover", "replica processes: kill -9 of the primary and graceful transfer -> first ack on the new primary", runFailover},
		{"reseed", "replica: 1 GiB of state, the room deleted: ErrRoomLost, Reseed, first ack, the member behind bootstrapped", runReseed},
		{"large-state", "replica: -large-bytes of ingested state: disk probe, open, checkpoint, full and incremental bootstrap, catch-up (only when named)", runLargeState},
		{"tls", "TLS vs plaintext to ZooKeeper on one TLS ensemble: raw creates, Writer.Append of -sizes entries x 16, 256 proposers", runTLS},
	}
}

// bench is the state shared by the scenarios of one run.
type bench struct {
	cfg   config
	ens   *zkensemble.Ensemble
	addrs []string // ZooKeeper client addresses
	pids  []int    // ZooKeeper server processes (CPU accounting)
	prog  *progress
	log   *slog.Logger
	// rawCeilingMBps is the MB/s of the raw batched row (0 until measured).
	rawCeilingMBps float64
	// proposeMax is the closed-loop Propose rate (0 until measured).
	proposeMax float64
	// zk is a plain client for cleanup (deleting rooms between scenarios).
	zk *zk.Conn
	// rowErrors are failed rows of scenarios that go on after a failure.
	rowErrors []string
	// tmp is the run's temp dir (replica data dirs), removed at the end.
	tmp string
}

// emit reports a finished row on the progress stream.
func (b *bench) emit(r Result) {
	var parts []string
	if r.EntriesPerS > 0 {
		parts = append(parts, fmt.Sprintf("%s entries/s, %.1f MB/s", fmtRate(r.EntriesPerS), r.MBPerS))
	} else if r.MBPerS > 0 {
		parts = append(parts, fmt.Sprintf("%.1f MB/s", r.MBPerS))
	}
	if r.Note != "" && r.P50ms == 0 && r.EntriesPerS == 0 {
		parts = append(parts, r.Note)
	}
	if r.P50ms > 0 || r.P99ms > 0 {
		parts = append(parts, fmt.Sprintf("p50 %s ms, p99 %s ms", fmtMs(r.P50ms), fmtMs(r.P99ms)))
	}
	head := fmt.Sprintf("%s %s %s", r.System, r.Scenario, fmtBytes(r.EntryBytes))
	if r.Concurrency > 0 {
		head += fmt.Sprintf(" x%d", r.Concurrency)
	}
	b.prog.Logf("  -> %s: %s", head, strings.Join(parts, ", "))
}

func parseFlags(args []string, stderr io.Writer) (config, error) {
	fs := flag.NewFlagSet("bench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var cfg config
	var scen, sizes, proposers string
	fs.IntVar(&cfg.servers, "servers", 3, "ZooKeeper servers in the ensemble: 1 or 3")
	fs.BoolVar(&cfg.quick, "quick", false, "smoke run (under 2 minutes): 256 B rows, short durations")
	fs.StringVar(&cfg.jsonPath, "json", "", "write every figure as JSON to `FILE`")
	fs.StringVar(&cfg.plotPath, "plot", "", "draw throughput vs p99 latency as SVG to `FILE.svg`")
	fs.StringVar(&scen, "scenarios", "all", "comma-separated scenarios to run (see below), or all")
	fs.Func("failover-rows", "the failover scenario's rows to run, comma-separated: kill, pause, transfer, handoff (default all)", func(v string) error {
		cfg.failoverRows = map[string]bool{}
		for _, f := range strings.Split(v, ",") {
			switch f = strings.TrimSpace(f); f {
			case "kill", "pause", "transfer", "handoff":
				cfg.failoverRows[f] = true
			default:
				return fmt.Errorf("unknown failover row %q (kill, pause, transfer, handoff)", f)
			}
		}
		return nil
	})
	fs.DurationVar(&cfg.duration, "duration", 5*time.Second, "measured time per row (default 2s with -quick)")
	fs.StringVar(&cfg.cpuProfile, "cpuprofile", "", "write a CPU profile of the bench process to `FILE`")
	fs.IntVar(&cfg.heapMB, "zk-heap-mb", 1024, "heap of each ZooKeeper server, MiB (>= 1024)")
	fs.DurationVar(&cfg.sessionTimeout, "session-timeout", 4*time.Second, "ZooKeeper session timeout of roomlog clients and replicas")
	warmSet := false
	fs.Func("zk-warmup", "pipelined creates on the fresh ensemble before the first row, so the rows meet JIT-compiled servers (default 30s; 5s with -quick; 0 = none)", func(v string) error {
		d, err := time.ParseDuration(v)
		cfg.zkWarmup, warmSet = d, true
		return err
	})
	fs.StringVar(&sizes, "sizes", "", "append rows: entry sizes in bytes, comma-separated (default 64,256,1024,4096; 256 with -quick)")
	fs.StringVar(&proposers, "proposers", "1,16,256", "append rows: proposer counts, comma-separated")
	fs.IntVar(&cfg.maxInFlight, "writer-inflight", 0, "logroom WriterConfig.MaxInFlight for every writer (0: logroom's default)")
	fs.IntVar(&cfg.eagerInFlight, "writer-eager", 0, "logroom WriterConfig.EagerInFlight (partly filled batches in flight) for every writer (0: logroom's default)")
	fs.DurationVar(&cfg.linger, "writer-linger", 0, "logroom WriterConfig.Linger for every writer (0: logroom's default, 1ms; -1ns: logroom.NoLinger, off)")
	var storeSync string
	fs.Int64Var(&cfg.ckptFlushBytes, "checkpoint-flush-bytes", 0, "replicas' store.Options.CheckpointFlushBytes: a checkpoint flushes the memtable first only past this much WAL (0: the store's default, 16 MiB; 1: flush before every checkpoint, the old behaviour)")
	large := byteSize(defaultLargeBytes)
	fs.Var(&large, "large-bytes", "large-state: the state's size on disk (KiB, MiB, GiB suffixes)")
	fs.StringVar(&storeSync, "store-sync", "batch", "replicas' store durability: batch (store.SyncEveryBatch, the default) or group (store.SyncGroup)")
	fs.BoolVar(&cfg.anyServer, "any-server", false, "connect every client (raw and roomlog) to the servers in go-zookeeper's shuffled order instead of the leader first (logroom.DialConfig.AnyServer)")
	fs.BoolVar(&cfg.verbose, "v", false, "log roomlog's and the ensemble's debug output to stderr")
	fs.StringVar(&cfg.fromJSON, "from-json", "", "run nothing: print the table, targets and -plot of a saved -json `FILE`")
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "usage: go run ./bench [flags]\n\nflags:\n")
		fs.PrintDefaults()
		fmt.Fprintf(fs.Output(), "\nscenarios:\n")
		for _, s := range allScenarios() {
			fmt.Fprintf(fs.Output(), "  %-11s %s\n", s.name, s.help)
		}
	}
	if err := fs.Parse(args); err != nil {
		return cfg, err
	}
	cfg.largeBytes = int64(large)
	if fs.NArg() > 0 {
		return cfg, fmt.Errorf("unexpected arguments: %q", fs.Args())
	}
	switch storeSync {
	case "batch":
		cfg.storeSync = store.SyncEveryBatch
	case "group":
		cfg.storeSync = store.SyncGroup
	default:
		return cfg, fmt.Errorf("-store-sync %q: want batch or group", storeSync)
	}
	durationSet := false
	fs.Visit(func(f *flag.Flag) { durationSet = durationSet || f.Name == "duration" })
	if cfg.quick && !durationSet {
		cfg.duration = 2 * time.Second
	}
	if !warmSet {
		cfg.zkWarmup = 30 * time.Second
		if cfg.quick {
			cfg.zkWarmup = 5 * time.Second
		}
	}
	var errs []error
	if cfg.servers != 1 && cfg.servers != 3 {
		errs = append(errs, fmt.Errorf("-servers %d: must be 1 or 3", cfg.servers))
	}
	if cfg.duration <= 0 {
		errs = append(errs, fmt.Errorf("-duration %v: must be > 0", cfg.duration))
	}
	if cfg.heapMB < 1024 {
		errs = append(errs, fmt.Errorf("-zk-heap-mb %d: must be >= 1024", cfg.heapMB))
	}
	if cfg.sessionTimeout < time.Second {
		errs = append(errs, fmt.Errorf("-session-timeout %v: must be >= 1s", cfg.sessionTimeout))
	}
	if sizes == "" {
		sizes = "64,256,1024,4096"
		if cfg.quick {
			sizes = "256"
		}
	}
	if cfg.maxInFlight < 0 || cfg.eagerInFlight < 0 || cfg.linger < 0 {
		errs = append(errs, errors.New("-writer-inflight, -writer-eager and -writer-linger must be >= 0"))
	}
	var err error
	if cfg.sizes, err = parseInts(sizes, 1, 512<<10); err != nil {
		errs = append(errs, fmt.Errorf("-sizes: %w", err))
	}
	if cfg.proposers, err = parseInts(proposers, 1, 100_000); err != nil {
		errs = append(errs, fmt.Errorf("-proposers: %w", err))
	}
	known := map[string]bool{}
	for _, s := range allScenarios() {
		known[s.name] = true
	}
	cfg.scenarios = map[string]bool{}
	for _, name := range strings.Split(scen, ",") {
		name = strings.TrimSpace(name)
		switch {
		case name == "":
		case name == "all":
			for k := range known {
				cfg.scenarios[k] = cfg.scenarios[k] || !optInScenario(k)
			}
		case known[name]:
			cfg.scenarios[name] = true
		default:
			errs = append(errs, fmt.Errorf("-scenarios: unknown scenario %q", name))
		}
	}
	if len(cfg.scenarios) == 0 {
		errs = append(errs, errors.New("-scenarios: nothing selected"))
	}
	cfg.args = args
	return cfg, errors.Join(errs...)
}

// cpuNow samples CPU time (see cpu.go).
func (b *bench) cpuNow() cpuSample { return takeCPU(b.pids) }

// cpuSince is the CPU use since a, in percent of one core.
func (b *bench) cpuSince(a cpuSample) cpuUse { return b.cpuNow().since(a, runtime.NumCPU()) }

// writerConfig is the logroom writer configuration every scenario uses:
// logroom's defaults unless -writer-inflight / -writer-linger say otherwise.
func (b *bench) writerConfig() logroom.WriterConfig {
	return logroom.WriterConfig{MaxInFlight: b.cfg.maxInFlight, EagerInFlight: b.cfg.eagerInFlight, Linger: b.cfg.linger, Logger: b.log}
}

// parseInts parses a comma-separated list of integers in [lo, hi].
func parseInts(s string, lo, hi int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		v, err := strconv.Atoi(f)
		if err != nil {
			return nil, err
		}
		if v < lo || v > hi {
			return nil, fmt.Errorf("%d not in [%d, %d]", v, lo, hi)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("empty list")
	}
	return out, nil
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "-append-row" {
		return runAppendRow(args[1:], stdout, stderr)
	}
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	if cfg.fromJSON != "" {
		return replay(cfg, stdout, stderr)
	}
	if err := zkensemble.Available(); err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	if cfg.cpuProfile != "" {
		f, err := os.Create(cfg.cpuProfile)
		if err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
		defer pprof.StopCPUProfile()
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	level := slog.LevelWarn
	if cfg.verbose {
		level = slog.LevelDebug
	}
	b := &bench{
		cfg:  cfg,
		prog: newProgress(stderr),
		log:  slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level})),
	}
	rep := &Report{
		Started:  time.Now().UTC(),
		Command:  strings.TrimSpace("go run ./bench " + strings.Join(args, " ")),
		Servers:  cfg.servers,
		Quick:    cfg.quick,
		Duration: cfg.duration.String(),
		GoMaxP:   runtime.GOMAXPROCS(0),
		CPUs:     runtime.NumCPU(),
		LoadAvg:  loadAvg(),
		Clients:  map[bool]string{false: "leader first", true: "any server"}[cfg.anyServer],
		Writer:   fmt.Sprintf("MaxInFlight=%d EagerInFlight=%d Linger=%v (0 = logroom default) StoreSync=%v", cfg.maxInFlight, cfg.eagerInFlight, cfg.linger, cfg.storeSync),
	}
	b.prog.Logf("roomlog bench: %d ZooKeeper server(s), %v per row, load average %s", cfg.servers, cfg.duration, rep.LoadAvg)
	b.prog.Logf("starting ZooKeeper (%d server(s), %d MiB heap each)", cfg.servers, cfg.heapMB)
	ens, err := zkensemble.Start(ctx, zkensemble.Options{Servers: cfg.servers, HeapMB: cfg.heapMB, Logger: b.log})
	if err != nil {
		fmt.Fprintf(stderr, "bench: start ZooKeeper: %v\n", err)
		return 1
	}
	defer ens.Close()
	b.ens = ens
	b.addrs = ens.Addrs()
	for i := range ens.Size() {
		b.pids = append(b.pids, ens.PID(i))
	}
	tmp, err := os.MkdirTemp("", "roomlog-bench-")
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	defer os.RemoveAll(tmp)
	b.tmp = tmp
	if b.zk, err = dialRaw(ctx, ens.Addrs(), 10*time.Second); err != nil {
		fmt.Fprintf(stderr, "bench: dial ZooKeeper: %v\n", err)
		return 1
	}
	defer b.zk.Close()
	b.prog.Logf("ZooKeeper up at %s", ens.ConnString())
	if err := b.warmZooKeeper(ctx); err != nil {
		fmt.Fprintf(stderr, "bench: warm up ZooKeeper: %v\n", err)
		return 1
	}

	for _, s := range allScenarios() {
		if !cfg.scenarios[s.name] || ctx.Err() != nil {
			continue
		}
		b.prog.Logf("== %s: %s", s.name, s.help)
		rows, err := s.run(ctx, b)
		rep.Results = append(rep.Results, rows...)
		if err != nil {
			msg := fmt.Sprintf("%s: %v", s.name, err)
			rep.Errors = append(rep.Errors, msg)
			b.prog.Logf("!! %s", msg)
		}
	}
	rep.Errors = append(rep.Errors, b.rowErrors...)
	rep.Finished = time.Now().UTC()
	rep.Targets = evalTargets(rep.Results, cfg.sessionTimeout)
	code := report(stdout, rep)
	if cfg.jsonPath != "" {
		if err := writeJSON(cfg.jsonPath, rep); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			code = 1
		} else {
			b.prog.Logf("wrote %s", cfg.jsonPath)
		}
	}
	if cfg.plotPath != "" {
		if err := writePlotFile(cfg.plotPath, rep); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			code = 1
		} else {
			b.prog.Logf("wrote %s", cfg.plotPath)
		}
	}
	if ctx.Err() != nil {
		code = 130
	}
	return code
}

// report prints the table, the targets and the errors of rep; it returns
// the exit code (1 when a scenario failed).
func report(stdout io.Writer, rep *Report) int {
	fmt.Fprintf(stdout, "roomlog bench, %d ZooKeeper server(s), %s per row, %d CPUs, load average at start %s\n",
		rep.Servers, rep.Duration, rep.CPUs, rep.LoadAvg)
	if rep.Clients != "" {
		fmt.Fprintf(stdout, "clients connect: %s\n", rep.Clients)
	}
	fmt.Fprintf(stdout, "command: %s\n\n", rep.Command)
	_ = writeTable(stdout, rep.Results)
	fmt.Fprintln(stdout)
	_ = writeTargets(stdout, rep.Targets)
	if len(rep.Errors) == 0 {
		return 0
	}
	fmt.Fprintln(stdout, "\nerrors:")
	for _, e := range rep.Errors {
		fmt.Fprintf(stdout, "  %s\n", e)
	}
	return 1
}

// replay prints a saved report and redraws its plot.
func replay(cfg config, stdout, stderr io.Writer) int {
	data, err := os.ReadFile(cfg.fromJSON)
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	var rep Report
	if err := json.Unmarshal(data, &rep); err != nil {
		fmt.Fprintf(stderr, "bench: %s: %v\n", cfg.fromJSON, err)
		return 1
	}
	report(stdout, &rep)
	if cfg.plotPath != "" {
		if err := writePlotFile(cfg.plotPath, &rep); err != nil {
			fmt.Fprintf(stderr, "bench: %v\n", err)
			return 1
		}
	}
	return 0
}

func writePlotFile(path string, rep *Report) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	sub := fmt.Sprintf("%s, %d CPUs, load %s at start, %s per row. Lower right is better.",
		rep.Started.Format("2006-01-02 15:04 UTC"), rep.CPUs, rep.LoadAvg, rep.Duration)
	if err := resultsPlot(rep.Results, rep.Servers, sub).WriteSVG(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// loadAvg returns the 1, 5 and 15 minute load averages ("?" if unknown).
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// failoverRow reports whether the failover scenario runs row (kill,
// pause, transfer, handoff): all unless -failover-rows names some.
func (c config) failoverRow(row string) bool { return c.failoverRows == nil || c.failoverRows[row] }

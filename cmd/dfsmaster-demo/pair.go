package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/internal/infra/spawn"
	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/tlsfiles"
)

const pairUsage = `usage: dfsmaster-demo pair [flags]

Runs the primary/standby demo: a local ZooKeeper ensemble (unless --zk is
given), two masters as separate processes (this binary's serve command), a
namespace workload, kill -9 of the primary, takeover by the standby, restart
of the old primary as a standby, and a check that no acknowledged operation
was lost and both masters hold the same state. The last line of the output
is "RESULT {json}" (with --json: the progress on stderr, and on stdout only
the result, one JSON object); the exit status is 0 only when the check passed.

The masters always run with a checkpoint bearer token generated in the
work dir; with --acl also with generated ZooKeeper digest credentials, so
every znode of the room has a digest ACL (checked: a client without them is
refused). With --tls the demo makes a CA and certificates in the work dir
(internal/infra/testpki) and the masters serve their API and checkpoint
endpoints over HTTPS with mutual TLS (serve --tls-ca, --tls-cert,
--tls-key): the workload, the checks and the masters' checkpoint fetches
present client certificates (checked: a client without one is refused).
With a local ensemble (no --zk) ZooKeeper is TLS too: every process
connects to its secureClientPort with its own certificate and the room's
ACL names their identities, x509 (checked: a client of the same CA with
another identity, and a plain one, get NoAuth).

flags:
`

// Pair demo defaults.
const (
	// defaultPairSessionTimeout: a killed primary is replaced about one
	// session timeout after it died (its ZooKeeper session must expire
	// first), so the demo uses a short one. See doc.go.
	defaultPairSessionTimeout = 2 * time.Second
	defaultPairPhase          = 4 * time.Second
	defaultPairWorkers        = 4
	defaultPairCheckpoint     = 500
	startTimeout              = 45 * time.Second // a master serving and in its role
	takeoverTimeout           = 45 * time.Second
	convergeTimeout           = 45 * time.Second
	stopGrace                 = 10 * time.Second
	statusTimeout             = 500 * time.Millisecond
)

// pairResult is the RESULT line.
type pairResult struct {
	OK               bool   `json:"ok"`
	OpsAcked         int64  `json:"ops_acked"`
	OpsLost          int    `json:"ops_lost"`
	OpsUnknown       int64  `json:"ops_unknown"`           // abandoned with an attempt's outcome unknown: 0 unless a writer stopped mid-retry
	OpsResolved      int64  `json:"ops_resolved_by_retry"` // an attempt's outcome was unknown; a retry with the same Idempotency-Key got the answer
	OpsReplayed      int64  `json:"ops_replayed"`          // ... the original's answer, replayed: that attempt had been applied, the retry was deduplicated
	Mismatches       int    `json:"mismatches"`            // state nothing explains (duplicates, phantom entries)
	FailoverMS       int64  `json:"failover_ms"`           // kill -9 -> first acknowledged op on the new primary
	KilledNode       string `json:"killed_node"`
	TakeoverNode     string `json:"takeover_node"`
	Replicas         int    `json:"replicas"` // masters converged and checked at the end
	HashesEqual      bool   `json:"hashes_equal"`
	Hash             string `json:"hash,omitempty"`
	AppliedIndex     uint64 `json:"applied_index"`
	Epoch            uint64 `json:"epoch"`      // the final primary's epoch: 2 when the forced failover was the only one
	Bootstraps       int    `json:"bootstraps"` // checkpoint restores of the restarted master
	Checks           int    `json:"checks"`
	DurationMS       int64  `json:"duration_ms"`
	SessionTimeoutMS int64  `json:"session_timeout_ms"`
	ZKServers        int    `json:"zk_servers"`
	ACL              bool   `json:"acl"`    // the masters ran with ZooKeeper digest credentials (--acl or --zk-digest-file)
	TLS              bool   `json:"tls"`    // the masters' API and checkpoint endpoints were HTTPS with mutual TLS (--tls)
	ZKTLS            bool   `json:"zk_tls"` // ... and every ZooKeeper session was TLS, the room's ACL x509 identities (--tls, local ensemble)
	// ZKWorkerACLs: each chunk server had a certificate of its own and
	// was granted its own task directory only; one's certificate was
	// refused (NoAuth) another's directory and the room (--tls with
	// chunk servers, local ensemble).
	ZKWorkerACLs bool `json:"zk_worker_acls"`
	// Chunk servers (--chunkservers): how many, killed, blocks placed,
	// re-replication tasks done (and done twice), blocks left
	// under-replicated at the end.
	chunkResult
	Error string `json:"error,omitempty"`
}

type pairConfig struct {
	zk              []string
	zkServers       int
	sessionTimeout  time.Duration
	phase           time.Duration
	workers         int
	checkpointEvery int
	room            string
	keep            bool
	bin             string
	acl             bool   // generate digest credentials in the work dir
	digestFile      string // the operator's credentials file (--zk-digest-file), "" for none
	chunkServers    int    // chunk-server processes (0: none)
	tls             bool   // generate a CA and certificates: HTTPS with mutual TLS between everyone
}

func runPair(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("pair", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, pairUsage); fs.PrintDefaults() }
	var cfg pairConfig
	zk := fs.String("zk", "", "use these ZooKeeper servers (comma-separated host:port) instead of starting a local ensemble")
	fs.IntVar(&cfg.zkServers, "zk-servers", 3, "servers of the local ensemble: 1 or 3")
	fs.DurationVar(&cfg.sessionTimeout, "session-timeout", defaultPairSessionTimeout, "the masters' ZooKeeper session timeout (bounds the takeover time)")
	fs.DurationVar(&cfg.phase, "phase", defaultPairPhase, "workload time before the kill, after the takeover, and after the restart")
	fs.IntVar(&cfg.workers, "workers", defaultPairWorkers, "concurrent writers")
	fs.IntVar(&cfg.checkpointEvery, "checkpoint-every", defaultPairCheckpoint, "masters checkpoint every N entries (and the primary then deletes covered channels)")
	fs.StringVar(&cfg.room, "room", "", "room name (default: a fresh random one)")
	fs.IntVar(&cfg.chunkServers, "chunkservers", 4, "chunk-server processes; one is killed with kill -9 before the primary and the masters re-replicate its blocks (0: none; else at least 4)")
	fs.BoolVar(&cfg.keep, "keep", false, "keep the temp dir (data dirs and the masters' logs) for inspection")
	fs.BoolVar(&cfg.acl, "acl", false, "create ZooKeeper digest credentials (random password) in the work dir and run both masters with them: "+
		"every znode of the room gets a digest ACL; the demo checks that a client without them is refused")
	fs.BoolVar(&cfg.tls, "tls", false, "generate a CA and certificates in the work dir: the masters serve their API and checkpoint endpoints over HTTPS "+
		"with mutual TLS, and every client (the workload, the checks, the masters' checkpoint fetches) presents a certificate; "+
		"with a local ensemble, ZooKeeper sessions are TLS too and the room's ACL names the certificates' identities")
	asJSON := fs.Bool("json", false, "print the result as one JSON object on stdout, the progress lines on stderr (default: all on stdout, the last line RESULT {json})")
	fs.StringVar(&cfg.digestFile, "zk-digest-file", "", "`FILE` holding ZooKeeper digest credentials user:password for both masters "+
		"(env "+envDigestFile+"; for --zk servers whose rooms need them; --acl generates its own)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	digestFlag := false
	fs.Visit(func(f *flag.Flag) { digestFlag = digestFlag || f.Name == "zk-digest-file" })
	flagFromEnv(fs, stderr, "zk-digest-file", &cfg.digestFile, envDigestFile)
	cfg.zk = logroom.SplitServers(*zk)
	var bad []string
	if fs.NArg() > 0 {
		bad = append(bad, fmt.Sprintf("unexpected arguments %q", fs.Args()))
	}
	if cfg.zkServers != 1 && cfg.zkServers != 3 {
		bad = append(bad, "--zk-servers must be 1 or 3")
	}
	if cfg.chunkServers != 0 && (cfg.chunkServers < chunkRF+1 || cfg.chunkServers > 64) {
		bad = append(bad, fmt.Sprintf("--chunkservers %d: 0, or %d..64 (blocks are placed on %d, and one server is killed)", cfg.chunkServers, chunkRF+1, chunkRF))
	}
	if cfg.sessionTimeout <= 0 || cfg.phase <= 0 || cfg.workers <= 0 {
		bad = append(bad, "--session-timeout, --phase and --workers must be positive")
	}
	if cfg.room != "" {
		if err := logroom.ValidateName(cfg.room); err != nil {
			bad = append(bad, fmt.Sprintf("--room: %v", err))
		}
	}
	switch {
	case cfg.acl && digestFlag:
		bad = append(bad, "--acl generates credentials; --zk-digest-file gives them: use one")
	case cfg.acl:
		cfg.digestFile = "" // --acl wins over the environment's file
	case cfg.digestFile != "":
		if abs, err := filepath.Abs(cfg.digestFile); err == nil {
			cfg.digestFile = abs
		}
		if _, err := logroom.LoadDigestFile(cfg.digestFile); err != nil {
			bad = append(bad, fmt.Sprintf("--zk-digest-file: %v", err))
		}
	}
	if len(bad) > 0 {
		fmt.Fprintf(stderr, "dfsmaster-demo pair: %s\n", strings.Join(bad, "; "))
		return exitUsage
	}
	if cfg.room == "" {
		var b [4]byte
		rand.Read(b[:])
		cfg.room = "pair-" + hex.EncodeToString(b[:])
	}
	bin, err := os.Executable()
	if err != nil {
		fmt.Fprintf(stderr, "dfsmaster-demo pair: cannot find my own binary to start the masters: %v\n", err)
		return exitError
	}
	cfg.bin = bin

	progress := stdout
	if *asJSON {
		progress = stderr
	}
	p := &pair{cfg: cfg, out: &printer{w: progress}, errOut: stderr, led: newLedger(), eps: newEndpoints(), nodes: map[string]*node{}}
	start := time.Now()
	res, err := p.run(ctx)
	res.DurationMS = time.Since(start).Milliseconds()
	res.OpsAcked = p.led.acked.Load()
	res.OpsUnknown = p.led.unknown.Load()
	res.OpsResolved = p.led.resolved.Load()
	res.OpsReplayed = p.led.replayed.Load()
	res.SessionTimeoutMS = cfg.sessionTimeout.Milliseconds()
	res.ACL = p.digestFile != ""
	res.TLS = cfg.tls
	res.ZKTLS = p.zkTLS
	res.ZKServers = cfg.zkServers
	if len(cfg.zk) > 0 {
		res.ZKServers = len(cfg.zk)
	}
	if err != nil {
		res.OK = false
		res.Error = err.Error()
		fmt.Fprintf(stderr, "\ndfsmaster-demo pair: FAILED: %v\n", err)
	}
	p.summary(res)
	return printPairResult(stdout, p.out, res, *asJSON)
}

// printPairResult prints res: as the RESULT line of the progress output,
// or with --json as one indented object on stdout. The exit code is 0
// only when the check passed.
func printPairResult(stdout io.Writer, progress *printer, res pairResult, asJSON bool) int {
	if asJSON {
		b, _ := json.MarshalIndent(res, "", "  ")
		fmt.Fprintf(stdout, "%s\n", b)
	} else {
		line, _ := json.Marshal(res)
		progress.printf("RESULT %s\n", line)
	}
	if res.OK {
		return exitOK
	}
	return exitError
}

// printer serialises the demo's output lines.
type printer struct {
	mu sync.Mutex // guards w
	w  io.Writer
}

func (p *printer) printf(format string, args ...any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	fmt.Fprintf(p.w, format, args...)
}

// node is one master of the pair.
type node struct {
	id, data, log string
	proc          *child // current process (nil before the first start)
	down          bool   // being killed or dead: progress shows "down"
}

type pair struct {
	cfg    pairConfig
	out    *printer
	errOut io.Writer
	led    *ledger
	eps    *endpoints
	tmp    string
	zkConn string
	sp     *spawn.Spawner
	procs  children
	t0     time.Time // workload start

	// digestFile holds the masters' ZooKeeper credentials ("" for none),
	// tokenFile their checkpoint bearer token; both 0600 files, passed by
	// path (never the secrets) on the masters' command lines.
	digestFile, tokenFile string

	// tls holds the certificate files of the masters, of each chunk
	// server ("cs1", ...) and of the demo's client ("client") (--tls; nil
	// without); clientTLS is the demo's loaded. With a local ensemble
	// ZooKeeper is TLS too (zkTLS): zkConn names its TLS ports, zkPlain
	// its plain ones, and zkACL the identities every znode grants.
	tls       map[string]tlsfiles.Files
	clientTLS *tlsfiles.Source
	ca        *testpki.CA
	zkTLS     bool
	zkPlain   string
	zkACL     []string
	// zkWorkers are the chunk servers' ids (cs1, cs2, ...) and
	// zkWorkerIdents their certificates' identities, each granted its
	// own task directory only (--zk-acl-x509-worker); idents every
	// certificate's identity by id; opsTLS the demo's own ZooKeeper
	// certificate (an operator's).
	zkWorkers      []string
	zkWorkerIdents map[string]string
	idents         map[string]string
	opsTLS         *tlsfiles.Source

	// writers are owned by their goroutines until run returns (run waits
	// for them on every path); runPair reads them afterwards.
	writers []*writer

	mu    sync.Mutex // guards the nodes' proc and down fields
	nodes map[string]*node
	order []string // node ids in display order
}

func (p *pair) step(format string, args ...any) {
	p.out.printf("==> "+format+"\n", args...)
}

// run is the whole demo; cleanup (children, ensemble, temp dir) happens
// before it returns, on every path, Ctrl-C included.
func (p *pair) run(ctx context.Context) (res pairResult, err error) {
	p.step("dfsmaster pair demo: room %q, session timeout %v, %d writers", p.cfg.room, p.cfg.sessionTimeout, p.cfg.workers)
	p.tmp, err = os.MkdirTemp("", "dfsmaster-pair-")
	if err != nil {
		return res, err
	}
	defer func() {
		if p.cfg.keep {
			p.step("kept %s (data dirs, m*.log)", p.tmp)
			return
		}
		if rerr := os.RemoveAll(p.tmp); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}()

	// 0. Secrets, as files in the work dir.
	if err := p.writeSecrets(); err != nil {
		return res, err
	}
	if p.cfg.tls {
		if err := p.makeCerts(); err != nil {
			return res, err
		}
	}

	// 1. ZooKeeper.
	if len(p.cfg.zk) > 0 {
		p.zkConn = strings.Join(p.cfg.zk, ",")
		p.step("using ZooKeeper at %s", p.zkConn)
	} else {
		if aerr := zkensemble.Available(); aerr != nil {
			return res, fmt.Errorf("ZooKeeper is not installed (%w). Install it with `sudo scripts/install-zookeeper.sh` "+
				"(Debian/Ubuntu: `sudo apt-get install zookeeper default-jre-headless`), or pass --zk host:port of running servers", aerr)
		}
		p.step("starting a local %d-server ZooKeeper ensemble ...", p.cfg.zkServers)
		zt := time.Now()
		zopts := zkensemble.Options{Servers: p.cfg.zkServers, Dir: p.tmp}
		if p.cfg.tls {
			zopts.TLS = &zkensemble.TLSOptions{CA: p.ca} // secureClientPort, client certificates of the pair's CA required
		}
		ens, zerr := zkensemble.Start(ctx, zopts)
		if zerr != nil {
			return res, fmt.Errorf("start ZooKeeper: %w", zerr)
		}
		defer func() {
			if cerr := ens.Close(); cerr != nil {
				err = errors.Join(err, fmt.Errorf("stop ZooKeeper: %w", cerr))
			}
		}()
		p.zkConn = ens.ConnString()
		if p.cfg.tls {
			p.zkTLS, p.zkPlain, p.zkConn = true, p.zkConn, ens.SecureConnString()
		}
		p.step("ZooKeeper ready in %.1fs at %s", time.Since(zt).Seconds(), p.zkConn)
		if p.zkTLS {
			p.step("ZooKeeper TLS: the masters, chunk servers and the demo connect to its secureClientPort with their certificates; the room's ACL names the masters and the operator (x509): %s; each chunk server is granted its own task directory only (per-worker ACLs): %s",
				strings.Join(p.zkACL, " | "), p.workerIdentsText())
			if err := checkQuorumTLS(ens); err != nil {
				return res, err
			}
			if ens.Size() > 1 {
				p.step("ZooKeeper quorum TLS: every server's quorum and election links are TLS (sslQuorum=true; each logged %q)", quorumTLSLine)
			}
		}
	}

	// 2. Masters (children are stopped before the ensemble: defers run last-in first-out).
	p.sp = spawn.New()
	defer func() {
		if serr := p.procs.stopAll(stopGrace); serr != nil {
			err = errors.Join(err, serr)
		}
		p.sp.Stop()
		p.eps.close()
		if err != nil {
			p.dumpLogs()
		}
	}()
	for _, id := range []string{"m1", "m2"} {
		p.nodes[id] = &node{id: id, data: filepath.Join(p.tmp, id), log: filepath.Join(p.tmp, id+".log")}
		p.order = append(p.order, id)
	}
	if err := p.startNode(ctx, "m1", api.RolePrimary); err != nil {
		return res, err
	}
	if err := p.startNode(ctx, "m2", api.RoleStandby); err != nil {
		return res, err
	}
	p.eps.set([]string{p.addr("m1"), p.addr("m2")}, p.addr("m1"))
	if p.digestFile != "" {
		if err := p.checkACL(ctx); err != nil {
			return res, err
		}
	}
	if p.cfg.tls {
		if err := p.checkTLS(ctx); err != nil {
			return res, err
		}
	}
	var chunks *pairChunks
	if p.cfg.chunkServers > 0 {
		if chunks, err = p.startChunks(ctx, p.cfg.chunkServers); err != nil {
			return res, err
		}
		defer func() {
			if werr := chunks.stopWriter(); werr != nil && err == nil {
				err = werr
			}
		}()
		if p.zkTLS {
			if err := p.checkWorkerACL(ctx); err != nil {
				return res, err
			}
			res.ZKWorkerACLs = true
		}
	}

	// 3. Workload, with a progress line every second.
	p.step("workload: %d writers doing mkdir/create/addblock/rename/delete through the Go client (every acknowledged op is recorded)", p.cfg.workers)
	wctx, wcancel := context.WithCancel(ctx)
	stop := make(chan struct{})
	writers := make([]*writer, p.cfg.workers)
	p.writers = writers
	var wg sync.WaitGroup
	p.t0 = time.Now()
	for k := range writers {
		writers[k] = newWriter(k+1, p.eps, p.led, stop)
		wg.Add(1)
		go func() {
			defer wg.Done()
			writers[k].run(wctx)
		}()
	}
	stopWriters := sync.OnceFunc(func() { close(stop); wg.Wait() })
	stopProgress := p.progress(ctx)
	defer func() {
		// On an error or Ctrl-C, abort the writers' operations first.
		stopProgress()
		wcancel()
		stopWriters()
	}()

	phase1 := p.cfg.phase
	if chunks != nil {
		// A chunk server dies so that its loss is noticed (its session
		// expires) shortly before the primary is killed: the primary
		// starts re-replicating its blocks and the next primary finishes.
		at := max(p.cfg.phase-p.cfg.sessionTimeout-pairChunkGrace-p.cfg.sessionTimeout/8, p.cfg.phase/4)
		if err := sleepCtx(ctx, at); err != nil {
			return res, interrupted(ctx)
		}
		chunks.kill(ctx, "cs2")
		phase1 -= at
	}
	if err := sleepCtx(ctx, phase1); err != nil {
		return res, interrupted(ctx)
	}
	if err := writersFailed(writers); err != nil {
		return res, err
	}

	// 4. kill -9 the primary.
	victim, survivor, err := p.roles(ctx)
	if err != nil {
		return res, err
	}
	res.KilledNode, res.TakeoverNode = victim, survivor
	vproc := p.proc(victim)
	p.mu.Lock() // see progress
	p.nodes[victim].down = true
	p.step("kill -9 %s (the primary, pid %d) with %d ops acknowledged up to index %d", victim, vproc.pid(), p.led.acked.Load(), p.led.maxIndex.Load())
	p.mu.Unlock()
	killAt := time.Now()
	p.led.killAt.Store(killAt.UnixNano())
	if chunks != nil {
		chunks.primaryKilled(killAt)
	}
	vproc.kill()
	p.eps.set([]string{p.addr(survivor)}, p.addr(survivor))
	p.eps.hc.CloseIdleConnections() // keep-alive connections to the dead master would fail after sending

	// 5. Takeover: the first acknowledgement of a request sent after the kill.
	select {
	case <-p.led.takeover:
	case <-ctx.Done():
		return res, interrupted(ctx)
	case <-time.After(takeoverTimeout):
		return res, fmt.Errorf("no operation was acknowledged within %v after the primary was killed: %w", takeoverTimeout, writersFailed(writers))
	}
	failover := p.led.takeoverAt.Sub(killAt)
	res.FailoverMS = max(failover.Milliseconds(), 1)
	st, _ := p.status(ctx, survivor)
	p.step("%s took over: first acknowledged op %.2fs after the kill (index %d, %s, epoch %d; session timeout %v)",
		survivor, failover.Seconds(), p.led.takeoverIdx, st.Role, st.Epoch, p.cfg.sessionTimeout)

	// 6. More workload on the new primary, then restart the old one as a standby.
	if err := sleepCtx(ctx, p.cfg.phase); err != nil {
		return res, interrupted(ctx)
	}
	if err := writersFailed(writers); err != nil {
		return res, err
	}
	p.step("restarting %s (same id and data dir) while the workload goes on", victim)
	if err := p.startNode(ctx, victim, api.RoleStandby); err != nil {
		return res, err
	}
	p.eps.set([]string{p.addr(survivor), p.addr(victim)}, p.addr(survivor))
	if err := sleepCtx(ctx, p.cfg.phase); err != nil {
		return res, interrupted(ctx)
	}

	// 7. Stop the workload; wait for convergence.
	p.step("stopping the workload")
	stopWriters()
	stopProgress()
	if err := writersFailed(writers); err != nil {
		return res, err
	}
	if chunks != nil {
		if err := chunks.stopWriter(); err != nil {
			return res, err
		}
		// Re-replication finishes before the masters are compared: it
		// proposes to the log until every block is back.
		if err := chunks.check(ctx, p.addr(survivor), 0, &res.chunkResult); err != nil {
			return res, err
		}
	}
	final, statuses, err := p.converge(ctx)
	if err != nil {
		return res, err
	}
	res.AppliedIndex = final
	res.Replicas = len(statuses)
	res.Bootstraps = statuses[victim].Bootstraps
	for _, st := range statuses {
		if st.Role == api.RolePrimary {
			res.Epoch = st.Epoch
		}
	}
	p.step("converged: %s and %s both applied index %d (%s restored %d checkpoint(s) from its peer)",
		survivor, victim, final, victim, statuses[victim].Bootstraps)

	// 8. Hashes and the acknowledged operations on both masters.
	masters := map[string]*client.Client{}
	hashes := map[string]api.HashResponse{}
	for _, id := range p.order {
		c, cerr := client.New(p.addr(id), p.eps.hc)
		if cerr != nil {
			return res, cerr
		}
		masters[id] = c
		hctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		h, herr := c.Hash(hctx, final)
		cancel()
		if herr != nil {
			return res, fmt.Errorf("hash of %s: %w", id, herr)
		}
		hashes[id] = h
	}
	h1, h2 := hashes[p.order[0]], hashes[p.order[1]]
	res.HashesEqual = h1.Hash == h2.Hash && h1.AppliedIndex == h2.AppliedIndex
	res.Hash = h1.Hash
	for _, id := range p.order {
		p.out.printf("    /v1/hash %s: index %d  %s\n", id, hashes[id].AppliedIndex, hashes[id].Hash)
	}
	vt := time.Now()
	v, verr := verify(ctx, writers, masters, final, 8)
	if verr != nil {
		return res, verr
	}
	res.OpsLost = len(v.lost)
	res.Mismatches = len(v.mismatches)
	res.Checks = v.checks
	p.step("checked every acknowledged op on %s and %s (stat/ls) in %.1fs: %s", p.order[0], p.order[1], time.Since(vt).Seconds(), v.summary())
	for _, line := range lostLines(writers, v, 10) {
		p.out.printf("      lost: %s\n", line)
	}
	res.OK = res.OpsLost == 0 && res.Mismatches == 0 && res.OpsUnknown == 0 && res.HashesEqual && res.Replicas == 2 && res.FailoverMS > 0
	if chunks != nil {
		res.OK = res.OK && res.TasksDoneTwice == 0 && res.BlocksUnderReplicated == 0 && (res.RereplicationTasks > 0 || res.BlocksOnKilled == 0)
	}
	return res, nil
}

// interrupted is the error of a demo whose context ended (Ctrl-C, SIGTERM).
func interrupted(ctx context.Context) error { return fmt.Errorf("interrupted: %w", context.Cause(ctx)) }

func writersFailed(ws []*writer) error {
	var errs []error
	for _, w := range ws {
		if err := w.failure(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func lostLines(ws []*writer, v *verdict, n int) []string {
	keys := make([]opKey, 0, len(v.lost))
	for k := range v.lost {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if keys[i].writer != keys[j].writer {
			return keys[i].writer < keys[j].writer
		}
		return keys[i].op < keys[j].op
	})
	var out []string
	for i, k := range keys {
		if i == n {
			out = append(out, fmt.Sprintf("… %d more", len(keys)-n))
			break
		}
		op := ws[k.writer-1].ops[k.op]
		out = append(out, strings.TrimSpace(fmt.Sprintf("%s %s %s", op.kind, op.path, op.dst))+fmt.Sprintf(" (index %d)", op.index))
	}
	return out
}

func (p *pair) addr(id string) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := p.nodes[id]; n.proc != nil {
		return p.url(n.proc.addr)
	}
	return ""
}

// url is a master's host:port as the base URL the clients use.
func (p *pair) url(addr string) string {
	if p.cfg.tls {
		return "https://" + addr
	}
	return "http://" + addr
}

func (p *pair) proc(id string) *child {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.nodes[id].proc
}

// startNode starts (or restarts) a master and waits until it has the role.
func (p *pair) startNode(ctx context.Context, id, role string) error {
	p.mu.Lock()
	n := p.nodes[id]
	p.mu.Unlock()
	args := []string{"serve", "--zk", p.zkConn, "--room", p.cfg.room, "--id", id, "--data", n.data,
		"--http", "127.0.0.1:0", "--session-timeout", p.cfg.sessionTimeout.String(),
		"--checkpoint-every", fmt.Sprint(p.cfg.checkpointEvery), "--checkpoint-token-file", p.tokenFile}
	if p.digestFile != "" {
		args = append(args, "--zk-digest-file", p.digestFile)
	}
	if p.cfg.chunkServers > 0 {
		args = append(args, "--chunkservers", "--chunk-grace", pairChunkGrace.String())
	}
	ready := servingPrefix
	if f, ok := p.tls[id]; ok {
		args = append(args, "--tls-ca", f.CA, "--tls-cert", f.Cert, "--tls-key", f.Key)
		args = append(args, p.peerArgs()...)
		ready = servingPrefixTLS
	}
	args = append(args, p.zkTLSArgs(id)...)
	st := time.Now()
	sctx, cancel := context.WithTimeout(ctx, startTimeout)
	defer cancel()
	c, err := startChildWith(sctx, p.sp, id, p.cfg.bin, args, n.log, ready, nil)
	if err != nil {
		return err
	}
	p.procs.add(c)
	p.mu.Lock()
	n.proc, n.down = c, false
	p.mu.Unlock()
	cl, err := client.New(p.url(c.addr), p.eps.hc)
	if err != nil {
		return err
	}
	var s api.Status
	for {
		qctx, qcancel := context.WithTimeout(sctx, statusTimeout)
		s, err = cl.Status(qctx)
		qcancel()
		if err == nil && s.Role == role && s.PrimaryAddr != "" {
			break
		}
		if err == nil && s.Failed() {
			return fmt.Errorf("%s failed: %s; last lines of %s:\n%s", id, s.Error, n.log, tail(n.log, 15))
		}
		if !c.alive() {
			return fmt.Errorf("%s exited (%v); last lines of %s:\n%s", id, c.proc.Err(), n.log, tail(n.log, 15))
		}
		if serr := sleepCtx(sctx, 50*time.Millisecond); serr != nil {
			return fmt.Errorf("%s did not become %s within %v (last status %+v, err %v)", id, role, startTimeout, s, err)
		}
	}
	p.step("%s serving %s (pid %d, data %s): %s, epoch %d, applied %d, after %.1fs",
		id, p.url(c.addr), c.pid(), n.data, s.Role, s.Epoch, s.AppliedIndex, time.Since(st).Seconds())
	return nil
}

// writeSecrets creates the checkpoint token file (always) and, with
// --acl, a digest credentials file, each with a random secret.
func (p *pair) writeSecrets() error {
	secret := func(n int) string {
		b := make([]byte, n)
		rand.Read(b)
		return hex.EncodeToString(b)
	}
	p.tokenFile = filepath.Join(p.tmp, "checkpoint-token")
	if err := os.WriteFile(p.tokenFile, []byte(secret(32)+"\n"), 0o600); err != nil {
		return fmt.Errorf("write the checkpoint token: %w", err)
	}
	p.step("checkpoint bearer token in %s: the masters' checkpoint endpoints answer 401 without it", p.tokenFile)
	switch {
	case p.cfg.acl:
		p.digestFile = filepath.Join(p.tmp, "zk-digest")
		if err := os.WriteFile(p.digestFile, []byte(pairDigestUser+":"+secret(24)+"\n"), 0o600); err != nil {
			return fmt.Errorf("write the ZooKeeper credentials: %w", err)
		}
		p.step("ZooKeeper digest credentials (user %q, random password) in %s: every znode of the room gets a digest ACL", pairDigestUser, p.digestFile)
	case p.cfg.digestFile != "":
		p.digestFile = p.cfg.digestFile
		p.step("ZooKeeper digest credentials from %s: every znode of the room gets a digest ACL", p.digestFile)
	}
	return nil
}

// pairDigestUser is the ZooKeeper digest user of pair --acl.
const pairDigestUser = "dfsmaster"

// checkACL connects to ZooKeeper without credentials and checks that the
// room's znodes refuse it (zk.ErrNoAuth).
func (p *pair) checkACL(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c, err := logroom.Dial(dctx, logroom.DialConfig{Servers: logroom.SplitServers(p.plainZK())})
	if err != nil {
		return fmt.Errorf("ACL check: connect to ZooKeeper: %w", err)
	}
	defer c.Close()
	room := replica.DefaultBase + "/" + p.cfg.room
	for _, path := range []string{room, room + "/members/m1"} {
		_, _, err := c.Conn().Get(path)
		if !errors.Is(err, zk.ErrNoAuth) {
			return fmt.Errorf("ACL check: an unauthenticated client reading %s got %v, want %v", path, err, zk.ErrNoAuth)
		}
	}
	if _, _, err := c.Conn().Children(room); !errors.Is(err, zk.ErrNoAuth) {
		return fmt.Errorf("ACL check: an unauthenticated client listing %s got %v, want %v", room, err, zk.ErrNoAuth)
	}
	p.step("ACL check: a ZooKeeper client without the credentials is refused on %s (%v)", room, zk.ErrNoAuth)
	return nil
}

// status asks one master for its status (bounded by statusTimeout).
func (p *pair) status(ctx context.Context, id string) (api.Status, error) {
	c, err := client.New(p.addr(id), p.eps.hc)
	if err != nil {
		return api.Status{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	return c.Status(ctx)
}

// roles returns the current primary and the other node.
func (p *pair) roles(ctx context.Context) (primary, other string, err error) {
	deadline := time.Now().Add(takeoverTimeout)
	for time.Now().Before(deadline) {
		for _, id := range p.order {
			if s, err := p.status(ctx, id); err == nil && s.Role == api.RolePrimary {
				for _, o := range p.order {
					if o != id {
						return id, o, nil
					}
				}
			}
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return "", "", interrupted(ctx)
		}
	}
	return "", "", errors.New("no master reports itself primary")
}

// converge waits until every master reports the same applied index, at
// least the highest acknowledged one, with one primary.
func (p *pair) converge(ctx context.Context) (uint64, map[string]api.Status, error) {
	deadline := time.Now().Add(convergeTimeout)
	var last map[string]api.Status
	for {
		sts := map[string]api.Status{}
		var idx uint64
		ok, primaries := true, 0
		for i, id := range p.order {
			s, err := p.status(ctx, id)
			if err != nil {
				ok = false
				break
			}
			sts[id] = s
			if s.Failed() {
				return 0, nil, fmt.Errorf("masters cannot converge: %s failed: %s", id, s.Error)
			}
			if s.Role == api.RolePrimary {
				primaries++
			}
			if i == 0 {
				idx = s.AppliedIndex
			} else if s.AppliedIndex != idx {
				ok = false
			}
		}
		last = sts
		if ok && primaries == 1 && idx >= p.led.maxIndex.Load() {
			return idx, sts, nil
		}
		if time.Now().After(deadline) {
			return 0, nil, fmt.Errorf("masters did not converge within %v (highest acknowledged index %d): %s",
				convergeTimeout, p.led.maxIndex.Load(), describe(last, p.order))
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return 0, nil, interrupted(ctx)
		}
	}
}

func describe(sts map[string]api.Status, order []string) string {
	var parts []string
	for _, id := range order {
		s, ok := sts[id]
		if !ok {
			parts = append(parts, id+" unreachable")
			continue
		}
		part := fmt.Sprintf("%s %s applied %d", id, s.Role, s.AppliedIndex)
		if s.Failed() {
			part += " (failed: " + s.Error + ")"
		}
		parts = append(parts, part)
	}
	return strings.Join(parts, ", ")
}

// progress prints a line every second until ctx ends or the returned stop
// is called; stop waits for the printer to return.
func (p *pair) progress(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(time.Second)
		defer t.Stop()
		var lastAcked int64
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			acked := p.led.acked.Load()
			parts := make([]string, len(p.order))
			for i, id := range p.order {
				c := p.proc(id)
				switch s, err := p.status(ctx, id); {
				case c == nil || !c.alive():
					parts[i] = id + " down"
				case err != nil:
					parts[i] = id + " unreachable"
				case s.Failed():
					parts[i] = fmt.Sprintf("%s FAILED (%s) applied %6d", id, s.Error, s.AppliedIndex)
				default:
					parts[i] = fmt.Sprintf("%s %-8s applied %6d", id, s.Role, s.AppliedIndex)
				}
			}
			if ctx.Err() != nil {
				return
			}
			// Under p.mu, so a master marked down (before its kill line is
			// printed, under the same lock) never shows up here after it.
			p.mu.Lock()
			for i, id := range p.order {
				if p.nodes[id].down {
					parts[i] = id + " down"
				}
			}
			p.out.printf("    [%5.1fs] acked %6d (%4d/s)  unknown->retried %d (replayed %d)  |  %s\n", time.Since(p.t0).Seconds(),
				acked, acked-lastAcked, p.led.resolved.Load(), p.led.replayed.Load(), strings.Join(parts, "  |  "))
			p.mu.Unlock()
			lastAcked = acked
		}
	}()
	return sync.OnceFunc(func() { cancel(); <-done })
}

func (p *pair) summary(res pairResult) {
	p.out.printf("\nsummary:\n")
	p.out.printf("  acknowledged ops   %d  (mkdir %d, create %d, addblock %d, rename %d, delete %d, delete -r %d, sync %d)\n",
		res.OpsAcked, p.led.kindCount(opMkdir), p.led.kindCount(opCreate), p.led.kindCount(opAddBlock),
		p.led.kindCount(opRename), p.led.kindCount(opDelete), p.led.kindCount(opRmdir), p.led.kindCount(opSync))
	p.out.printf("  outcome unknown    %d resolved by retry with the same Idempotency-Key: %d replayed (the first attempt had been\n"+
		"                     applied; the retry was deduplicated), %d applied by the retry; %d left unknown\n",
		res.OpsResolved, res.OpsReplayed, res.OpsResolved-res.OpsReplayed, res.OpsUnknown)
	p.out.printf("  lost               %d\n", res.OpsLost)
	if res.FailoverMS > 0 {
		p.out.printf("  failover           %d ms  (kill -9 %s -> first op acknowledged by %s; session timeout %d ms)\n",
			res.FailoverMS, res.KilledNode, res.TakeoverNode, res.SessionTimeoutMS)
	}
	if res.Epoch > 2 {
		p.out.printf("  note               the primary is in epoch %d: %d takeover(s) besides the forced one (a ZooKeeper\n"+
			"                     session expired under load, see the masters' logs); they too may lose nothing\n", res.Epoch, res.Epoch-2)
	}
	p.out.printf("  replicas           %d, applied index %d, hashes equal: %v\n", res.Replicas, res.AppliedIndex, res.HashesEqual)
	verdict := "PASS: nothing acknowledged was lost and both masters hold the same state"
	if !res.OK {
		var why []string
		if res.Error != "" {
			why = append(why, res.Error)
		} else {
			if res.OpsLost > 0 {
				why = append(why, fmt.Sprintf("%d acknowledged op(s) lost", res.OpsLost))
			}
			if res.Mismatches > 0 {
				why = append(why, fmt.Sprintf("%d mismatch(es)", res.Mismatches))
			}
			if res.OpsUnknown > 0 {
				why = append(why, fmt.Sprintf("%d op(s) left with an unknown outcome", res.OpsUnknown))
			}
			if !res.HashesEqual {
				why = append(why, "the hashes differ")
			}
			if res.ChunkServers > 0 {
				c := res.chunkResult
				if c.TasksDoneTwice > 0 {
					why = append(why, fmt.Sprintf("%d re-replication task(s) done twice", c.TasksDoneTwice))
				}
				if c.BlocksUnderReplicated > 0 {
					why = append(why, fmt.Sprintf("%d block(s) under-replicated", c.BlocksUnderReplicated))
				}
				if c.RereplicationTasks == 0 && c.BlocksOnKilled > 0 {
					why = append(why, fmt.Sprintf("no re-replication task done, though the killed chunk server held %d block(s)", c.BlocksOnKilled))
				}
			}
			if len(why) == 0 {
				why = append(why, fmt.Sprintf("%d replica(s) compared, failover %d ms", res.Replicas, res.FailoverMS))
			}
		}
		verdict = "FAIL: " + strings.Join(why, "; ")
	}
	p.out.printf("  %s (%.1fs)\n", verdict, float64(res.DurationMS)/1000)
}

// dumpLogs prints the tail of each master's log to stderr (after a failure).
func (p *pair) dumpLogs() {
	for _, id := range p.order {
		n := p.nodes[id]
		fmt.Fprintf(p.errOut, "--- last lines of %s ---\n%s\n", n.log, tail(n.log, 25))
	}
}

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/roomlog/roomlog/archive"
	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
	"github.com/roomlog/roomlog/tlsfiles"
	"github.com/roomlog/roomlog/version"
)

const serveUsage = `usage: dfsmaster-demo serve --zk host:port[,host:port...] --id ID --data DIR [flags]

Runs one namespace master: a roomlog replica (primary or standby) behind the
HTTP JSON API, with the replica's checkpoint handler on the same server.
SIGINT or SIGTERM shuts it down gracefully: a primary first hands its role
to the most caught-up standby (replica.TransferLeadership, bounded by
--handoff-timeout; clients are redirected to it meanwhile), then the
replica leaves the room (were the hand-off to fail, a standby takes over at
once all the same), then the HTTP server stops. That is the step of a
rolling upgrade (docs/upgrades.md).

--observer starts an observer (replica.Config.Observer): a master that
applies the log, serves reads and checkpoints, but never becomes primary
(a read replica, or a checkpoint producer in another rack). It holds no
election candidate; /v1/status and the page say "observer"; a stopping
primary never hands its role to it.

When the replica fails (an unrecoverable error: a broken applier,
corruption, divergence from the log, a local disk stalled past
--disk-stall-timeout), serve keeps running so the failure
stays visible: GET /v1/status and the status page show role "failed" and
the reason, GET /v1/health answers 503 {"error":"failed"} with it, and
commands and reads answer 503 failed. With --exit-on-failure it exits with
status 1 instead, for a supervisor. Either way the exit status is 1 once
the replica failed.

GET /metrics serves this master's Prometheus metrics (its own registry:
the replica's and logroom's, labelled room and member, the API's request
counts, Go runtime and process). --zk-digest-file FILE (user:password) puts
a digest ACL on every znode the master creates; --checkpoint-token-file
FILE makes the checkpoint endpoint require "Authorization: Bearer <token>".
Secrets are read from files only; every master of a room needs the same.

--tls-ca, --tls-cert and --tls-key (PEM files) serve the HTTP API and the
checkpoint endpoint over HTTPS only, with mutual TLS: every client (ctl
with the same flags, the Go client with client.HTTPS, the other masters'
checkpoint fetches) must present a certificate the CA file signed, and the
master presents its own (it must name the advertised host) and verifies
theirs (replica.Config.PeerTLS). The master advertises https://host:port.
New files written over the old ones (rotation) are used by new connections
within a second, without a restart; files that are refused (expired,
another CA's, a key that does not match) are logged and the last good ones
stay in use.

flags:
`

// servingPrefix starts the line serve prints on stdout once it serves; the
// pair demo (and tests) read the address after it: "<prefix>127.0.0.1:8080 ...".
// With --tls-* the line starts with servingPrefixTLS instead.
const (
	servingPrefix    = "dfsmaster-demo: serving http://"
	servingPrefixTLS = "dfsmaster-demo: serving https://"
)

// shutdownTimeout bounds the graceful HTTP shutdown (in-flight requests).
const shutdownTimeout = 2 * time.Second

// serveConfig is what a master needs; runServe fills it from flags.
type serveConfig struct {
	Servers         []string
	Room, ID, Data  string
	HTTPAddr        string        // listen address; port 0 picks one
	AdvertiseAddr   string        // "" = derived from the listener (see advertiseFor)
	SessionTimeout  time.Duration // 0 = replica default
	CheckpointEvery int           // entries; 0 = replica default, <0 disables
	// RequestTTL and RequestWindow: how long (log time) and for how many
	// entries an Idempotency-Key is remembered (replica.Config's); 0 =
	// replica default (10m, 2^20).
	RequestTTL    time.Duration
	RequestWindow int
	// DiskStallTimeout: a store disk operation running longer fails the
	// replica (store.Options.DiskStallTimeout); 0 = store default (20s).
	DiskStallTimeout time.Duration
	Logger           *slog.Logger
	// Auth: ZooKeeper digest credentials (--zk-digest-file); every znode
	// the replica creates then carries a digest ACL. nil: none.
	Auth *logroom.Digest
	// CheckpointToken: the bearer token the checkpoint endpoint requires
	// and checkpoint fetches send (--checkpoint-token-file). "": none.
	CheckpointToken string
	// MaxRoomVersion caps the room versions this master advertises and
	// accepts (replica.Config.MaxRoomVersion; 0: the binary's).
	MaxRoomVersion int
	// Compression is the primary's batch compression (logroom); the room
	// version decides whether zstd may be used.
	Compression logroom.Compression
	// HandoffTimeout bounds Close's hand-off of the primary role to the
	// most caught-up standby (0: no hand-off, the replica just leaves).
	HandoffTimeout time.Duration
	// Observer makes the master an observer (replica.Config.Observer): it
	// never becomes primary (--observer).
	Observer bool
	// Applier is the replica's applier; nil means namespace.Applier{}.
	// Tests set one that breaks, to make a replica fail for real.
	Applier store.Applier
	// ArchiveDir, when set, is the room's archive directory (--archive;
	// replica.Config.Archive with archive.OpenDir): give every master of
	// the room the same one.
	ArchiveDir string
	// ChunkServers: as primary, control the room's chunk servers
	// (rereplicate.go: lost servers, re-replication tasks). --chunkservers.
	ChunkServers bool
	// ChunkGrace: how long a chunk server must be absent before it is
	// declared lost (--chunk-grace; 0: 2s).
	ChunkGrace time.Duration
	// TLS, when set (--tls-ca, --tls-cert, --tls-key), serves the HTTP API
	// and the checkpoint endpoint over HTTPS only, requiring a client
	// certificate the CA file signed (mutual TLS), and is the replica's
	// PeerTLS: checkpoint fetches from peers present this certificate and
	// verify theirs. The files are re-read when they change.
	TLS *tlsfiles.Source
	// ZK: TLS to ZooKeeper and x509 ACL identities (--zk-tls-*,
	// --zk-acl-x509): replica.Config.ZooKeeperTLS, ZooKeeperTLSServerName
	// and ACLIdentities, and the chunk-server controller's session.
	ZK zkTLS
	// ZKWorkers are x509 identities granted all permissions on the chunk
	// servers' task znodes beside ZK's (--zk-acl-x509-workers): the
	// recipes' session creates with both lists, the replica with ZK's
	// only, so a worker's certificate cannot write the room.
	ZKWorkers []string
	// ZKWorker maps a chunk server's id to its own x509 identity
	// (--zk-acl-x509-worker ID=SUBJECT): the assigner's per-worker ACLs
	// (tasks.AssignerConfig.WorkerACL, WorkerIdentities). Each chunk
	// server may then act in its own task directory only, and one that
	// is not listed gets no tasks. Exclusive with ZKWorkers.
	ZKWorker map[string]string
	// PeerIdentities: replica.Config.PeerIdentities (--tls-peer).
	PeerIdentities []string
	// MaxConnAge bounds the age of a connection to the HTTP server (0:
	// httpMaxConnAge): see tlsfiles.LimitConnAge.
	MaxConnAge time.Duration
	// MaxRoomBytes bounds the room in ZooKeeper (the writer's
	// MaxRoomBytes; 0: the default). Tests fill a room with a small one.
	MaxRoomBytes int64

	// BootstrapProgress is told how a bootstrap's checkpoint fetch goes
	// (bootprogress.go); nil: not at all.
	BootstrapProgress func(checkpoint.Progress)
}

// serveOptions is serveConfig plus what only the serve command uses.
type serveOptions struct {
	cfg           serveConfig
	exitOnFailure bool // exit 1 as soon as the replica fails (else keep serving status)
}

// master is one running dfsmaster: listener, HTTP server, replica and the
// adapter between them. Close stops them in that order.
type master struct {
	handoff time.Duration // see serveConfig.HandoffTimeout
	rep     *replica.Replica
	adapter *replicaMaster
	srv     *http.Server
	reg     *prometheus.Registry // this master's metrics, served at /metrics
	addr    string               // advertised address ("https://host:port" with TLS)
	served  chan error           // receives the HTTP server's exit (buffered, once)
	log     *slog.Logger
	// rr and rrClient: the chunk-server controller and its session
	// (--chunkservers), nil without.
	rr       *rereplicator
	rrClient *logroom.Client
}

// metricsPath is where every master serves its Prometheus metrics.
const metricsPath = "/metrics"

// newRegistry is a master's own metrics registry (never the global one):
// the Go runtime's and the process's collectors and the binary's build
// info; the replica and the API register theirs into it.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		buildInfoGauge(version.Info()))
	return reg
}

// buildInfoGauge is roomlog_build_info: always 1, labelled with the
// binary's release, commit (buildCommit) and Go version, as Prometheus'
// own prometheus_build_info.
func buildInfoGauge(b version.Build) prometheus.Collector {
	g := prometheus.NewGauge(prometheus.GaugeOpts{
		Name:        "roomlog_build_info",
		Help:        "Always 1; the labels name this binary's release, commit and Go version.",
		ConstLabels: prometheus.Labels{"release": b.Release, "commit": buildCommit(b), "goversion": b.GoVersion},
	})
	g.Set(1)
	return g
}

// openMaster listens, opens the replica (advertising the address actually
// bound) and serves the API and the checkpoint handler.
func openMaster(ctx context.Context, cfg serveConfig) (*master, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("serve: listen on %s: %w", cfg.HTTPAddr, err)
	}
	adv := cfg.AdvertiseAddr
	if adv == "" {
		if adv, err = advertiseFor(ln.Addr()); err != nil {
			ln.Close()
			return nil, err
		}
	}
	if cfg.TLS != nil && !strings.Contains(adv, "://") {
		adv = "https://" + adv // what the replica advertises too (replica.Config.PeerTLS)
	}
	applier := cfg.Applier
	if applier == nil {
		applier = namespace.Applier{}
	}
	reg := newRegistry()
	var arch archive.Archive // archive (issue 27): --archive
	if cfg.ArchiveDir != "" {
		d, err := archive.OpenDir(cfg.ArchiveDir)
		if err != nil {
			ln.Close()
			return nil, fmt.Errorf("serve: --archive: %w", err)
		}
		arch = d
	}
	rep, err := replica.Open(ctx, replica.Config{
		Archive:                arch,
		Servers:                cfg.Servers,
		Observer:               cfg.Observer,
		SessionTimeout:         cfg.SessionTimeout,
		Room:                   cfg.Room,
		ID:                     cfg.ID,
		DataDir:                cfg.Data,
		AdvertiseAddr:          adv,
		Applier:                applier,
		CheckpointEveryEntries: cfg.CheckpointEvery,
		RequestTTL:             cfg.RequestTTL,
		RequestWindow:          cfg.RequestWindow,
		StoreOptions:           &store.Options{DiskStallTimeout: cfg.DiskStallTimeout},
		Auth:                   cfg.Auth,
		CheckpointToken:        cfg.CheckpointToken,
		PeerTLS:                cfg.TLS,
		PeerIdentities:         cfg.PeerIdentities,
		ZooKeeperTLS:           cfg.ZK.src,
		ZooKeeperTLSServerName: cfg.ZK.serverName,
		ACLIdentities:          cfg.ZK.acl,
		Registerer:             reg,
		Logger:                 log.With("component", "replica"),
		MaxRoomVersion:         cfg.MaxRoomVersion,
		Writer:                 logroom.WriterConfig{Compression: cfg.Compression, MaxRoomBytes: cfg.MaxRoomBytes},
		CheckpointFetch:        checkpoint.FetchOptions{Progress: cfg.BootstrapProgress},
	})
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("serve: open replica: %w", err)
	}
	adapter := newReplicaMaster(rep, adv, log.With("component", "master"))
	apiSrv, err := api.New(api.Config{Master: adapter, Logger: log.With("component", "api"), MetricsPath: metricsPath,
		// The API's metrics carry the replica's labels, so every series
		// of a scrape names its master.
		Registerer: prometheus.WrapRegistererWith(prometheus.Labels{"room": cfg.Room, "member": cfg.ID}, reg)})
	if err != nil {
		adapter.Close()
		ln.Close()
		return nil, errors.Join(err, rep.Close())
	}
	h := rootHandler(apiSrv, cfg.Room, refuseWhileFailed(rep, rep.CheckpointHandler()),
		promhttp.InstrumentMetricHandler(reg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{
			Registry: reg, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)})))
	m := &master{
		handoff: cfg.HandoffTimeout,
		rep:     rep, adapter: adapter, addr: adv, log: log, served: make(chan error, 1), reg: reg,
		srv: newHTTPServer(h, log, cfg.MaxConnAge),
	}
	if cfg.ChunkServers {
		// Its own ZooKeeper session for the recipes (the replica's is
		// the replica's).
		d := cfg.ZK.dial(logroom.DialConfig{Servers: cfg.Servers, SessionTimeout: cfg.SessionTimeout, Auth: cfg.Auth,
			Logger: log.With("component", "chunk")})
		if len(cfg.ZKWorkers) > 0 { // the task znodes: masters and workers
			d.ACLIdentities = append(slices.Clone(d.ACLIdentities), cfg.ZKWorkers...)
		}
		c, err := logroom.Dial(ctx, d)
		if err != nil {
			adapter.Close()
			ln.Close()
			return nil, errors.Join(fmt.Errorf("serve: chunk servers: %w", err), rep.Close())
		}
		m.rrClient = c
		grace := cfg.ChunkGrace
		if grace <= 0 {
			grace = 2 * time.Second
		}
		m.rr = startRereplicator(rep, c, cfg.Room, cfg.ID, grace, cfg.ZKWorker, log.With("component", "rereplicate"))
	}
	if cfg.TLS != nil {
		// The API and the checkpoint endpoint: HTTPS, client certificates
		// required and verified (the replica's peer configuration).
		ln = tls.NewListener(ln, rep.PeerServerTLS())
	}
	go func() { m.served <- m.srv.Serve(ln) }() // owned by m: Close shuts it down and receives
	return m, nil
}

// httpIdleTimeout closes a kept-alive connection idle this long: a
// client whose certificate expired or whose CA was removed from the CA
// file (verified once, at the handshake) keeps access over an open
// connection only while it keeps it busy.
const httpIdleTimeout = 2 * time.Minute

// httpMaxConnAge bounds the age of a connection however busy its client
// keeps it (tlsfiles.LimitConnAge): after it the connection takes no new
// request, and at twice it the connection is closed whatever it does. So
// a client whose CA was removed, or whose certificate expired, loses
// access within 2 minutes even over a connection it never lets idle.
const httpMaxConnAge = time.Minute

// maxConnAgeOr is d, or httpMaxConnAge when d is 0.
func maxConnAgeOr(d time.Duration) time.Duration {
	if d == 0 {
		return httpMaxConnAge
	}
	return d
}

// newHTTPServer is a master's HTTP server: bounded header size, header
// read time, idle time of kept-alive connections and age of any
// connection (maxConnAge, 0: httpMaxConnAge). What net/http answers by
// itself (malformed requests, headers over MaxHeaderBytes) is plain text,
// not the API's JSON: see package api's doc, "Errors net/http writes
// itself".
func newHTTPServer(h http.Handler, log *slog.Logger, maxConnAge time.Duration) *http.Server {
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       httpIdleTimeout,
		MaxHeaderBytes:    api.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	tlsfiles.LimitConnAge(srv, maxConnAgeOr(maxConnAge))
	return srv
}

// rootHandler routes a master's requests: metricsPath to metrics, the
// room's checkpoint path (replica.CheckpointPath) and below to ckpt,
// everything else to the API, which answers unknown paths with its JSON
// 404. No http.ServeMux: its plain-text redirects of unclean paths
// ("//v1/status", "/v1/../v1/ls") would bypass the API's error shape, and
// the API's routes are exact paths anyway. The checkpoint handler and the
// metrics are counted in the API's metrics as routes "checkpoint" and
// "/metrics".
func rootHandler(apiSrv *api.Server, room string, ckpt, metrics http.Handler) http.Handler {
	prefix := strings.TrimSuffix(replica.CheckpointPath(room), "/")
	if p, err := url.PathUnescape(prefix); err == nil { // r.URL.Path is decoded
		prefix = p
	}
	ckpt = apiSrv.Instrument("checkpoint", ckpt)
	metrics = apiSrv.Instrument(metricsPath, metrics)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch p := r.URL.Path; {
		case p == metricsPath:
			metrics.ServeHTTP(w, r)
		case p == prefix || strings.HasPrefix(p, prefix+"/"):
			ckpt.ServeHTTP(w, r)
		default:
			apiSrv.ServeHTTP(w, r)
		}
	})
}

// refuseWhileFailed serves h until the replica fails, then 503: a failed
// replica's checkpoints may hold the side of a divergence, so no peer
// bootstraps from them.
func refuseWhileFailed(rep *replica.Replica, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := rep.Status().Err; err != nil {
			http.Error(w, fmt.Sprintf("replica failed, its checkpoints are not served: %v", err), http.StatusServiceUnavailable)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// advertiseFor turns a bound listener address into one peers can dial: the
// listener's host, or this machine's host name when it listens on every
// interface.
func advertiseFor(a net.Addr) (string, error) {
	tcp, ok := a.(*net.TCPAddr)
	if !ok {
		return a.String(), nil
	}
	if !tcp.IP.IsUnspecified() {
		return tcp.String(), nil
	}
	host, err := os.Hostname()
	if err != nil {
		return "", fmt.Errorf("serve: listening on every interface and no host name to advertise (use --advertise): %w", err)
	}
	return net.JoinHostPort(host, fmt.Sprint(tcp.Port)), nil
}

// Addr is the advertised HTTP address: host:port, or "https://host:port"
// with TLS.
func (m *master) Addr() string { return m.addr }

// baseURL is m's advertised address as a URL.
func (m *master) baseURL() string {
	if strings.Contains(m.addr, "://") {
		return m.addr
	}
	return "http://" + m.addr
}

// Close leaves the room first (replica.Shutdown: a primary hands its role
// to the most caught-up standby, bounded by m.handoff, so the new primary
// is chosen and caught up while this one still redirects clients to it;
// then replica.Close: in-flight proposals get their outcome, the election
// candidate goes, so a standby takes over at once instead of after a
// session timeout), then shuts the HTTP server down: requests still
// arriving meanwhile get 503 unavailable. Connections that stay busy or
// half-open beyond shutdownTimeout are closed forcibly (Go's Shutdown
// otherwise waits up to 5s for a connection the client opened but never
// used). Idempotent.
func (m *master) Close() error {
	var errs []error
	if m.rr != nil {
		m.rr.Close()
		m.rrClient.Close()
		m.rr = nil
	}
	m.adapter.Close()
	if err := m.leave(); err != nil {
		errs = append(errs, fmt.Errorf("serve: close replica: %w", err))
	}
	ctx, cancel := context.WithTimeout(context.Background(), shutdownTimeout)
	defer cancel()
	if err := m.srv.Shutdown(ctx); err != nil {
		m.log.Warn("http connections still open after the shutdown timeout; closing them", "timeout", shutdownTimeout, "err", err)
		m.srv.Close()
	}
	if err := <-m.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
		errs = append(errs, fmt.Errorf("serve: http: %w", err))
	}
	m.served <- http.ErrServerClosed // Close stays idempotent
	return errors.Join(errs...)
}

// leave closes the replica: with a hand-off first (replica.Shutdown,
// bounded by m.handoff) unless m.handoff is 0. A failed hand-off is only
// logged (by the replica): the replica left the room all the same and a
// standby takes over at once.
func (m *master) leave() error {
	if m.handoff <= 0 {
		return m.rep.Close()
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.handoff)
	defer cancel()
	err := m.rep.Shutdown(ctx)
	if errors.Is(err, replica.ErrTransfer) {
		return m.rep.Close() // closed already: its result alone
	}
	return err
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	opts, code, ok := parseServeFlags(args, stderr)
	if !ok {
		return code
	}
	return serve(ctx, opts, stdout, stderr)
}

// parseServeFlags parses serve's command line. ok false means: exit with
// code (help was printed, or the command line was bad and stderr says why).
func parseServeFlags(args []string, stderr io.Writer) (opts serveOptions, code int, ok bool) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, serveUsage); fs.PrintDefaults() }
	zkServers := fs.String("zk", "127.0.0.1:2181", "ZooKeeper servers, comma-separated host:port (env "+envZK+")")
	room := fs.String("room", "dfs", "room (replicated log) name; every master of one namespace uses the same")
	id := fs.String("id", "", "this master's member id, unique in the room and stable across restarts (required)")
	data := fs.String("data", "", "data directory (Pebble store and checkpoints; created if missing) (required)")
	httpAddr := fs.String("http", defaultAddr, "HTTP listen address (port 0 picks a free one)")
	advertise := fs.String("advertise", "", "address peers and clients reach this master at (default: the bound listen address)")
	sessionTimeout := fs.Duration("session-timeout", replica.DefaultSessionTimeout, "ZooKeeper session timeout: a killed primary is replaced about this long after it died")
	ckptEvery := fs.Int("checkpoint-every", replica.DefaultCheckpointEveryEntries, "checkpoint the store every N applied entries (<0: never)")
	requestTTL := fs.Duration("request-ttl", replica.DefaultRequestTTL, "how long a mutation's Idempotency-Key is remembered (log time): a retry within it is applied at most once")
	requestWindow := fs.Int("request-window", replica.DefaultRequestWindow, "how many log entries an Idempotency-Key is remembered for at most (bounds the request table)")
	diskStall := fs.Duration("disk-stall-timeout", store.DefaultDiskStallTimeout, "a write or sync of the local store still running after this long fails this master (it resigns; restart it once the disk is fixed); within [100ms, 1h]")
	exitOnFailure := fs.Bool("exit-on-failure", false, "exit with status 1 as soon as the replica fails, for a supervisor (default: keep serving /v1/status and a 503 /v1/health)")
	digestFile := fs.String("zk-digest-file", "", "`FILE` holding ZooKeeper digest credentials user:password (one line; env "+envDigestFile+"): "+
		"the master authenticates with them and creates every znode with a digest ACL. There is no flag for the password itself")
	tokenFile := fs.String("checkpoint-token-file", "", "`FILE` holding the checkpoint bearer token (env "+envTokenFile+"): "+
		"the checkpoint endpoint then answers 401 without it, and fetches from peers send it. Every master of the room needs the same")
	logLevel := fs.String("log-level", "info", "log level on stderr: debug, info, warn, error")
	maxRoomVersion := fs.Int("max-room-version", 0, fmt.Sprintf("highest room version this master supports and advertises (0: the binary's, %d); "+
		"caps the room so that binaries of an older release can still join", version.RoomMax))
	compression := fs.String("compression", "s2", "batch compression when primary: none, s2, or zstd (zstd only in rooms at room version 2 or later; s2 below)")
	handoff := fs.Duration("handoff-timeout", 2*time.Second, "on SIGINT/SIGTERM a primary first hands its role to the most caught-up standby, for at most this long (0: it just leaves)")
	archiveDir := fs.String("archive", "", "`DIR`: archive every sealed channel and checkpoint there before a channel is deleted (the same directory for every master of the room; restore with 'dfsmaster-demo restore')")
	observer := fs.Bool("observer", false, "join as an observer: apply the log, serve reads and checkpoints, never become primary")
	chunkGrace := fs.Duration("chunk-grace", 2*time.Second, "with --chunkservers: how long a chunk server must be absent (its session gone) before its blocks are re-replicated")
	chunk := fs.Bool("chunkservers", false, "as primary, control the room's chunk servers ('dfsmaster-demo chunkserver'): a lost server's blocks are re-replicated through recipe/tasks")
	tlsFlags := addTLSFlags(fs, "HTTP API and checkpoint endpoint over HTTPS with mutual TLS")
	zkFlags := addZKTLSFlags(fs)
	workerACL := &aclList{}
	fs.Var(workerACL, "zk-acl-x509-workers", "certificate identity granted all permissions on the chunk servers' task znodes (recipe/tasks) only, "+
		"beside --zk-acl-x509 (repeatable): the chunk servers' certificates, never the room's")
	workerIdent := &workerIdentFlag{}
	fs.Var(workerIdent, "zk-acl-x509-worker", "`ID=SUBJECT`: chunk server ID's own certificate identity (e.g. cs1=CN=cs1,O=dfs; repeatable, one per chunk server): "+
		"each chunk server is granted its own task directory only (recipe/tasks per-worker ACLs) and one not listed gets no tasks; instead of --zk-acl-x509-workers")
	peerIDs := &aclList{}
	fs.Var(peerIDs, "tls-peer", "certificate identity (RFC 2253 subject) accepted as a member over --tls-* (repeatable; replica Config.PeerIdentities): "+
		"the checkpoint endpoint refuses other certificates of the CA with 403, and fetches only from these")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return opts, exitOK, false
		}
		return opts, exitUsage, false
	}
	flagFromEnv(fs, stderr, "zk", zkServers, envZK)
	flagFromEnv(fs, stderr, "zk-digest-file", digestFile, envDigestFile)
	flagFromEnv(fs, stderr, "checkpoint-token-file", tokenFile, envTokenFile)
	var bad []string
	if fs.NArg() > 0 {
		bad = append(bad, fmt.Sprintf("unexpected arguments %q", fs.Args()))
	}
	if *id == "" {
		bad = append(bad, "--id is required")
	}
	if *data == "" {
		bad = append(bad, "--data is required")
	}
	if err := logroom.ValidateName(*room); err != nil {
		bad = append(bad, fmt.Sprintf("--room: %v", err))
	}
	servers := logroom.SplitServers(*zkServers)
	if len(servers) == 0 {
		bad = append(bad, "--zk: no servers")
	}
	if *requestTTL < time.Millisecond || *requestTTL > store.MaxRequestTTL {
		bad = append(bad, fmt.Sprintf("--request-ttl %v: must be within [1ms, %v]", *requestTTL, store.MaxRequestTTL))
	}
	if *requestWindow < 1 || *requestWindow > store.MaxRequestWindow {
		bad = append(bad, fmt.Sprintf("--request-window %d: must be within [1, %d]", *requestWindow, store.MaxRequestWindow))
	}
	if err := (&store.Options{DiskStallTimeout: *diskStall}).Validate(); err != nil || *diskStall <= 0 {
		bad = append(bad, fmt.Sprintf("--disk-stall-timeout %v: must be within [100ms, 1h]", *diskStall))
	}
	var auth *logroom.Digest
	if *digestFile != "" {
		var err error
		if auth, err = logroom.LoadDigestFile(*digestFile); err != nil {
			bad = append(bad, fmt.Sprintf("--zk-digest-file: %v", err))
		}
	}
	var token string
	if *tokenFile != "" {
		var err error
		if token, err = loadTokenFile(*tokenFile); err != nil {
			bad = append(bad, fmt.Sprintf("--checkpoint-token-file: %v", err))
		}
	}
	if *maxRoomVersion < 0 || *maxRoomVersion > version.RoomMax || (*maxRoomVersion != 0 && *maxRoomVersion < version.RoomMin) {
		bad = append(bad, fmt.Sprintf("--max-room-version %d: this binary supports room versions %d..%d (0: all)", *maxRoomVersion, version.RoomMin, version.RoomMax))
	}
	comp, compOK := map[string]logroom.Compression{"none": logroom.CompressionNone, "s2": logroom.CompressionS2, "zstd": logroom.CompressionZstd}[*compression]
	if !compOK {
		bad = append(bad, fmt.Sprintf("--compression %q: want none, s2 or zstd", *compression))
	}
	if *chunkGrace <= 0 || *chunkGrace > 10*time.Minute {
		bad = append(bad, fmt.Sprintf("--chunk-grace %v: must be within (0, 10m]", *chunkGrace))
	}
	if *handoff < 0 || *handoff > time.Minute {
		bad = append(bad, fmt.Sprintf("--handoff-timeout %v: must be within [0, 1m]", *handoff))
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		bad = append(bad, fmt.Sprintf("--log-level %q: %v", *logLevel, err))
	}
	logOut, prog := serveLogOutput(stderr)
	log := slog.New(slog.NewTextHandler(logOut, &slog.HandlerOptions{Level: level})).With("id", *id)
	peerTLS, err := tlsFlags.load(log.With("component", "tls"))
	if err != nil {
		bad = append(bad, err.Error())
	}
	zkTLS, err := zkFlags.load(log.With("component", "zk-tls"))
	if err != nil {
		bad = append(bad, err.Error())
	}
	if len(*workerACL) > 0 && len(zkTLS.acl) == 0 {
		bad = append(bad, "--zk-acl-x509-workers needs --zk-acl-x509 (the masters' identities)")
	}
	workerIdents, err := workerIdent.parse()
	if err != nil {
		bad = append(bad, err.Error())
	}
	if len(*workerIdent) > 0 && len(zkTLS.acl) == 0 {
		bad = append(bad, "--zk-acl-x509-worker needs --zk-acl-x509 (the masters' identities)")
	}
	if len(*workerIdent) > 0 && len(*workerACL) > 0 {
		bad = append(bad, "--zk-acl-x509-worker and --zk-acl-x509-workers exclude each other: --zk-acl-x509-workers grants every chunk server all of the task znodes")
	}
	if len(*peerIDs) > 0 && peerTLS == nil {
		bad = append(bad, "--tls-peer needs --tls-ca, --tls-cert and --tls-key")
	}
	if len(bad) > 0 {
		fmt.Fprintf(stderr, "dfsmaster-demo serve: %s\n", strings.Join(bad, "; "))
		return opts, exitUsage, false
	}
	return serveOptions{
		cfg: serveConfig{
			Servers: servers, Room: *room, ID: *id, Data: *data, HTTPAddr: *httpAddr,
			AdvertiseAddr: *advertise, SessionTimeout: *sessionTimeout, CheckpointEvery: *ckptEvery,
			RequestTTL: *requestTTL, RequestWindow: *requestWindow, DiskStallTimeout: *diskStall, Logger: log,
			Auth: auth, CheckpointToken: token, BootstrapProgress: bootstrapProgress(log.With("component", "bootstrap"), prog),
			MaxRoomVersion: *maxRoomVersion, Compression: comp, HandoffTimeout: *handoff,
			Observer: *observer, ArchiveDir: *archiveDir, ChunkServers: *chunk, ChunkGrace: *chunkGrace,
			TLS: peerTLS, ZK: zkTLS, ZKWorkers: *workerACL, ZKWorker: workerIdents, PeerIdentities: *peerIDs,
		},
		exitOnFailure: *exitOnFailure,
	}, exitOK, true
}

// serve runs one master until ctx ends (SIGINT/SIGTERM) or its HTTP server
// stops — or, with exitOnFailure, its replica fails — and returns the exit
// code: the class of the failure (exitCode) when the master could not open
// or the replica failed (at once with exitOnFailure, else when stopped); 1
// when the HTTP server stopped by itself or the shutdown reported an error;
// 0 otherwise.
//
// A failed replica no longer takes part in the room, but serve keeps its
// HTTP server up (unless exitOnFailure): /v1/status and the status page say
// why it failed, /v1/health answers 503, commands and reads get 503 failed.
func serve(ctx context.Context, opts serveOptions, stdout, stderr io.Writer) int {
	cfg := opts.cfg
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	openCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	m, err := openMaster(openCtx, cfg)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "dfsmaster-demo serve: %v\n", err)
		return exitCode(err)
	}
	fmt.Fprintf(stdout, "dfsmaster-demo: serving %s id=%s room=%s\n", m.baseURL(), cfg.ID, cfg.Room)
	log.Info("serving", "addr", m.Addr(), "room", cfg.Room, "data", cfg.Data, "metrics", m.baseURL()+metricsPath,
		"zk_acl", cfg.Auth != nil, "checkpoint_token", cfg.CheckpointToken != "", "tls", cfg.TLS != nil)

	code := exitOK
	failed := false // the replica failed (reported once)
	// The adapter drains the replica's RoleChanges (keeping the last ones
	// for Status) and passes each on.
	roles := m.adapter.RoleChanges()
wait:
	for {
		select {
		case <-ctx.Done():
			log.Info("shutting down", "cause", context.Cause(ctx))
			break wait
		case err := <-m.served:
			m.served <- err // for Close
			log.Error("http server stopped", "err", err)
			code = exitError
			break wait
		case rc := <-roles:
			log.Info("role change", "role", rc.Role.String(), "epoch", rc.Epoch, "reason", rc.Reason)
			// RoleChanges drops the oldest change when nobody reads it in
			// time; Status().Err is the truth.
			ferr := m.rep.Status().Err
			if failed || (ferr == nil && rc.Role != replica.RoleFailed) {
				continue
			}
			failed, code = true, exitCode(ferr)
			if opts.exitOnFailure {
				log.Error("replica failed; exiting (--exit-on-failure)", "err", ferr)
				break wait
			}
			log.Error("replica failed; it no longer takes part in the room. Still serving /v1/status and the status page; "+
				"/v1/health, commands and reads answer 503 failed. Find the cause before restarting it", "err", ferr)
		}
	}
	if err := m.Close(); err != nil {
		log.Error("shutdown", "err", err)
		code = exitError
	}
	log.Info("stopped")
	return code
}

// maxTokenFile bounds a checkpoint token file.
const maxTokenFile = 4096

// loadTokenFile reads a checkpoint bearer token from path: a regular file
// of at most 4 KiB holding the token, one trailing newline allowed ("\n"
// or "\r\n"). The token must be non-empty visible ASCII (0x21-0x7e: it
// travels in an Authorization header). Errors never show the token.
func loadTokenFile(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return "", err
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxTokenFile+1))
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	if len(b) > maxTokenFile {
		return "", fmt.Errorf("%s is larger than %d bytes: want one token", path, maxTokenFile)
	}
	tok := strings.TrimSuffix(string(b), "\n")
	if len(tok) < len(b) {
		tok = strings.TrimSuffix(tok, "\r")
	}
	if tok == "" {
		return "", fmt.Errorf("%s holds no token (empty)", path)
	}
	for i := 0; i < len(tok); i++ {
		if c := tok[i]; c < 0x21 || c > 0x7e {
			return "", fmt.Errorf("%s: the token must be visible ASCII without spaces (0x21-0x7e), one line; byte %d is 0x%02x", path, i, c)
		}
	}
	return tok, nil
}

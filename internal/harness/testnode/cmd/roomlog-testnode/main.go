// Command roomlog-testnode runs one roomlog replica as its own OS process, for
// tests, the chaos suite and benchmarks. It applies entries with
// store.OpsApplier wrapped in testnode.RecordingApplier (so /dump can tell
// what was applied at every index) and serves the HTTP API documented in
// package internal/harness/testnode.
//
// Usage:
//
//	roomlog-testnode --zk 127.0.0.1:2181,... --room R --id n0 --data DIR \
//	    --http 127.0.0.1:0 [--addr-file FILE] [--session-timeout 2s] ...
//
// Once the HTTP listener is bound it writes its address to --addr-file (a
// temp file renamed into place), then opens the replica; until Open returns
// the API answers 503 {"error":"starting"}. --zk-tls-ca/-cert/-key (with
// --zk-acl-x509, repeatable) connect to ZooKeeper's TLS port with x509
// ACLs; --peer-tls-ca/-cert/-key serve the checkpoint endpoint with
// mutual TLS on --peer-listen (the API stays plain HTTP for the harness).
// --archive DIR gives the replica the room's continuous archive
// (replica.Config.Archive, an archive.Dir shared by the room's members).
// SIGTERM or SIGINT leaves the room cleanly and exits 0: a primary first
// hands its role to the most caught-up standby (replica.Shutdown, at most
// --handoff-timeout, default 2 s, as the demo's serve does), then the
// replica closes. Logs go to stderr.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/roomlog/roomlog/archive"
	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/internal/infra/faultfs"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
	"github.com/roomlog/roomlog/tlsfiles"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "roomlog-testnode:", err)
		os.Exit(1)
	}
}

type flags struct {
	zk, room, id, data, httpAddr, advertise, addrFile, base, logLevel, sync string
	sessionTimeout, transferTimeout, openTimeout, memberUpdate              time.Duration
	fetchIdleTimeout                                                        time.Duration
	checkpointEvery, keepCheckpoints, maxPending, maxBatchBytes             int
	maxChannelBatches                                                       int
	checkpointEveryBytes, retainBytes, maxRoomBytes, maxChannelBytes        int64
	diskFaults, observer                                                    bool
	diskStallTimeout, handoffTimeout                                        time.Duration
	zkTLS, peerTLS                                                          tlsfiles.Files
	zkACL                                                                   stringList
	peerListen                                                              string
	archiveDir                                                              string
}

// stringList is a repeatable string flag (x509 subjects hold commas).
type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, " | ") }
func (l *stringList) Set(v string) error { *l = append(*l, v); return nil }

func parseFlags() (flags, error) {
	var f flags
	fs := flag.NewFlagSet("roomlog-testnode", flag.ContinueOnError)
	fs.StringVar(&f.zk, "zk", "", "ZooKeeper servers, comma-separated host:port (required)")
	fs.StringVar(&f.room, "room", "", "room name (required)")
	fs.StringVar(&f.id, "id", "", "member id (required)")
	fs.StringVar(&f.data, "data", "", "data directory (required)")
	fs.StringVar(&f.httpAddr, "http", "127.0.0.1:0", "HTTP listen address")
	fs.StringVar(&f.advertise, "advertise", "", "advertised address (default: the bound HTTP address)")
	fs.StringVar(&f.addrFile, "addr-file", "", "write the bound HTTP address to this file")
	fs.StringVar(&f.base, "base", "", "room parent znode (default "+replica.DefaultBase+")")
	fs.StringVar(&f.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.StringVar(&f.sync, "sync", "every", "store sync policy: every or group")
	fs.DurationVar(&f.sessionTimeout, "session-timeout", testnode.DefaultSessionTimeout, "ZooKeeper session timeout")
	fs.DurationVar(&f.transferTimeout, "transfer-timeout", 0, "leadership transfer timeout (0: replica default)")
	fs.DurationVar(&f.openTimeout, "open-timeout", 60*time.Second, "bound on replica.Open")
	fs.DurationVar(&f.memberUpdate, "member-update", 0, "membership update interval (0: replica default)")
	fs.DurationVar(&f.fetchIdleTimeout, "fetch-idle-timeout", 0, "checkpoint fetch: longest stretch without progress (0: checkpoint default)")
	fs.IntVar(&f.checkpointEvery, "checkpoint-every", 0, "checkpoint every N entries (0: replica default, <0: off)")
	fs.Int64Var(&f.checkpointEveryBytes, "checkpoint-every-bytes", 0, "checkpoint every N entry bytes (0: replica default, <0: off)")
	fs.IntVar(&f.keepCheckpoints, "keep-checkpoints", 0, "local checkpoints kept (0: replica default)")
	fs.Int64Var(&f.retainBytes, "retain-bytes", 0, "room bytes above which covered channels are deleted even if a member lags (0: default, <0: off)")
	fs.Int64Var(&f.maxRoomBytes, "max-room-bytes", 0, "writer backpressure bound on room bytes (0: default)")
	fs.IntVar(&f.maxPending, "max-pending", 0, "max proposals in flight (0: default)")
	fs.IntVar(&f.maxBatchBytes, "max-batch-bytes", 0, "max batch znode bytes (0: default)")
	fs.IntVar(&f.maxChannelBatches, "max-channel-batches", 0, "auto-rotate after N batches (0: default)")
	fs.Int64Var(&f.maxChannelBytes, "max-channel-bytes", 0, "auto-rotate after N bytes (0: default)")
	fs.BoolVar(&f.diskFaults, "disk-faults", false, "serve POST /fault/disk?stall=true|false, stalling the store's disk writes")
	fs.DurationVar(&f.diskStallTimeout, "disk-stall-timeout", 0, "store: longest disk operation before the store fails (0: store default)")
	fs.DurationVar(&f.handoffTimeout, "handoff-timeout", 2*time.Second, "on SIGTERM/SIGINT a primary first hands its role to the most caught-up standby (replica.Shutdown) for at most this long; 0: it just closes")
	fs.BoolVar(&f.observer, "observer", false, "join as an observer (replica.Config.Observer): never a candidate, never primary")
	fs.StringVar(&f.zkTLS.CA, "zk-tls-ca", "", "connect to ZooKeeper's secureClientPort (--zk names those ports), verifying the servers against this CA file (replica.Config.ZooKeeperTLS)")
	fs.StringVar(&f.zkTLS.Cert, "zk-tls-cert", "", "client certificate presented to ZooKeeper (its x509 identity)")
	fs.StringVar(&f.zkTLS.Key, "zk-tls-key", "", "key of --zk-tls-cert")
	fs.Var(&f.zkACL, "zk-acl-x509", "certificate identity granted ALL on every znode this member creates (repeatable; replica.Config.ACLIdentities)")
	fs.StringVar(&f.peerTLS.CA, "peer-tls-ca", "", "mutual TLS between members (replica.Config.PeerTLS): CA file peers are verified against")
	fs.StringVar(&f.peerTLS.Cert, "peer-tls-cert", "", "this member's certificate for --peer-tls-ca")
	fs.StringVar(&f.peerTLS.Key, "peer-tls-key", "", "key of --peer-tls-cert")
	fs.StringVar(&f.archiveDir, "archive", "", "the room's continuous archive, a directory every member shares (replica.Config.Archive, archive.OpenDir); none if empty")
	fs.StringVar(&f.peerListen, "peer-listen", "", "with --peer-tls-*: the HTTPS checkpoint endpoint's listen address (replica.Config.ListenAddr; --advertise names where peers reach it)")
	if err := fs.Parse(os.Args[1:]); err != nil {
		return f, err
	}
	var missing []string
	for _, req := range []struct{ name, v string }{{"--zk", f.zk}, {"--room", f.room}, {"--id", f.id}, {"--data", f.data}} {
		if req.v == "" {
			missing = append(missing, req.name)
		}
	}
	if len(missing) > 0 {
		return f, fmt.Errorf("missing %s", strings.Join(missing, ", "))
	}
	if (f.peerTLS != tlsfiles.Files{}) && f.peerListen == "" {
		return f, errors.New("--peer-tls-* needs --peer-listen")
	}
	if f.sync != "every" && f.sync != "group" {
		return f, fmt.Errorf("--sync must be every or group, not %q", f.sync)
	}
	return f, nil
}

func run() error {
	f, err := parseFlags()
	if err != nil {
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(f.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("node", f.id)

	ln, err := net.Listen("tcp", f.httpAddr)
	if err != nil {
		return fmt.Errorf("listen %s: %w", f.httpAddr, err)
	}
	addr := ln.Addr().String()
	advertise := f.advertise
	if advertise == "" {
		advertise = addr
		if f.peerListen != "" {
			advertise = f.peerListen
		}
	}
	api := testnode.NewServer(f.room, os.Getpid(), log)
	srv := &http.Server{Handler: api, ReadHeaderTimeout: 10 * time.Second}
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(ln) }() // ends when srv is closed below
	if f.addrFile != "" {
		if err := writeFileAtomic(f.addrFile, []byte(addr)); err != nil {
			_ = srv.Close()
			return err
		}
	}
	log.Info("listening", "addr", addr, "pid", os.Getpid())

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	syncPolicy := store.SyncEveryBatch
	if f.sync == "group" {
		syncPolicy = store.SyncGroup
	}
	cfg := replica.Config{
		Servers:                strings.Split(f.zk, ","),
		Observer:               f.observer,
		SessionTimeout:         f.sessionTimeout,
		Base:                   f.base,
		Room:                   f.room,
		ID:                     f.id,
		DataDir:                f.data,
		AdvertiseAddr:          advertise,
		Applier:                testnode.RecordingApplier{Inner: store.OpsApplier{}},
		StoreOptions:           &store.Options{Sync: syncPolicy, DiskStallTimeout: f.diskStallTimeout},
		CheckpointEveryEntries: f.checkpointEvery,
		CheckpointEveryBytes:   f.checkpointEveryBytes,
		KeepCheckpoints:        f.keepCheckpoints,
		RetainRoomBytes:        f.retainBytes,
		MaxPendingProposals:    f.maxPending,
		TransferTimeout:        f.transferTimeout,
		MemberUpdateInterval:   f.memberUpdate,
		Logger:                 log,
	}
	if f.zkTLS != (tlsfiles.Files{}) {
		src, err := tlsfiles.LoadWithOptions(f.zkTLS, tlsfiles.Options{Logger: log.With("tls", "zookeeper")})
		if err != nil {
			_ = srv.Close()
			return fmt.Errorf("--zk-tls-*: %w", err)
		}
		cfg.ZooKeeperTLS, cfg.ACLIdentities = src, f.zkACL
	}
	if f.peerTLS != (tlsfiles.Files{}) {
		src, err := tlsfiles.LoadWithOptions(f.peerTLS, tlsfiles.Options{Logger: log.With("tls", "peers")})
		if err != nil {
			_ = srv.Close()
			return fmt.Errorf("--peer-tls-*: %w", err)
		}
		cfg.PeerTLS, cfg.ListenAddr = src, f.peerListen
	}
	if f.archiveDir != "" {
		a, err := archive.OpenDir(f.archiveDir)
		if err != nil {
			_ = srv.Close()
			return fmt.Errorf("--archive: %w", err)
		}
		cfg.Archive = a
	}
	if f.diskFaults {
		ffs := faultfs.New(nil)
		cfg.StoreOptions.FS = ffs
		api.SetDiskFaults(ffs)
	}
	cfg.CheckpointFetch.IdleTimeout = f.fetchIdleTimeout
	cfg.Writer.MaxRoomBytes = f.maxRoomBytes
	cfg.Writer.MaxBatchBytes = f.maxBatchBytes
	cfg.Writer.MaxChannelBatches = f.maxChannelBatches
	cfg.Writer.MaxChannelBytes = f.maxChannelBytes
	if err := cfg.Validate(); err != nil {
		_ = srv.Close()
		return err
	}

	openCtx, cancelOpen := context.WithTimeout(ctx, f.openTimeout)
	start := time.Now()
	r, err := replica.Open(openCtx, cfg)
	cancelOpen()
	if err != nil {
		_ = srv.Close()
		return fmt.Errorf("open replica: %w", err)
	}
	api.SetReplica(r)
	log.Info("replica open", "took", time.Since(start), "applied", r.Status().Applied)

	select {
	case <-ctx.Done():
		log.Info("signal: closing")
	case err := <-serveErr:
		log.Error("http server stopped", "err", err)
	}
	// Leave the room first: proposals in flight get their outcome and
	// their handlers answer; then stop the HTTP server. A primary hands
	// its role to the most caught-up standby before it closes
	// (replica.Shutdown, as the demo's serve does), so a graceful stop
	// costs a transfer, not an election; a hand-off that fails is logged
	// and the replica is closed all the same.
	var cerr error
	if f.handoffTimeout > 0 {
		hctx, hcancel := context.WithTimeout(context.Background(), f.handoffTimeout)
		cerr = r.Shutdown(hctx)
		hcancel()
		if errors.Is(cerr, replica.ErrTransfer) {
			log.Warn("hand-off failed; closed all the same", "err", cerr)
			cerr = nil
		}
	} else {
		cerr = r.Close()
	}
	shutCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := srv.Shutdown(shutCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		_ = srv.Close()
	}
	if cerr != nil {
		return fmt.Errorf("close replica: %w", cerr)
	}
	log.Info("closed")
	return nil
}

// writeFileAtomic writes data to path through a temp file and a rename, so
// a reader never sees a partial address.
func writeFileAtomic(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".addr-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

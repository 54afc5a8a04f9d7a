package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/recipe/tasks"
)

// chunkDonePrefix starts the line a chunk server prints on stdout for each
// task it reported: "<prefix><task id> attempt=<n> ok=<bool>". The pair
// demo counts them (a task reported by two servers would be done twice).
const chunkDonePrefix = "dfsmaster-demo: chunk task done "

// chunkServingPrefix starts the line a chunk server prints once it joined.
const chunkServingPrefix = "dfsmaster-demo: chunkserver joined "

const chunkUsage = `usage: dfsmaster-demo chunkserver --zk host:port[,...] --room NAME --id ID [flags]

A simulated chunk server: it registers as a worker of the room's chunk-server
task directory (recipe/tasks; membership is its ZooKeeper session) and executes
the re-replication tasks the primary master assigns to it ("copy block B from a
holder"): it waits --copy-time, then reports success. Kill it (kill -9) to make
the master re-replicate the blocks it held. It joins once the primary master
(serve --chunkservers) has created the task directory.

flags:
`

func runChunkServer(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chunkserver", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, chunkUsage); fs.PrintDefaults() }
	zkServers := fs.String("zk", "127.0.0.1:2181", "ZooKeeper servers, comma-separated host:port (env "+envZK+")")
	room := fs.String("room", "dfs", "room name (the masters')")
	id := fs.String("id", "", "this chunk server's id (required; a znode name)")
	digestFile := fs.String("zk-digest-file", "", "`FILE` holding ZooKeeper digest credentials user:password (env "+envDigestFile+")")
	session := fs.Duration("session-timeout", 2*time.Second, "ZooKeeper session timeout (how soon a killed server is noticed)")
	copyTime := fs.Duration("copy-time", 20*time.Millisecond, "simulated time to copy one block")
	zkFlags := addZKTLSFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK
		}
		return exitUsage
	}
	flagFromEnv(fs, stderr, "zk", zkServers, envZK)
	flagFromEnv(fs, stderr, "zk-digest-file", digestFile, envDigestFile)
	var bad []string
	if fs.NArg() > 0 {
		bad = append(bad, fmt.Sprintf("unexpected arguments %q", fs.Args()))
	}
	if *id == "" {
		bad = append(bad, "--id is required")
	}
	if err := logroom.ValidateName(*room); err != nil {
		bad = append(bad, fmt.Sprintf("--room: %v", err))
	}
	servers := logroom.SplitServers(*zkServers)
	if len(servers) == 0 {
		bad = append(bad, "--zk: no servers")
	}
	if *copyTime < 0 || *copyTime > time.Minute {
		bad = append(bad, fmt.Sprintf("--copy-time %v: must be within [0, 1m]", *copyTime))
	}
	var auth *logroom.Digest
	if *digestFile != "" {
		var err error
		if auth, err = logroom.LoadDigestFile(*digestFile); err != nil {
			bad = append(bad, fmt.Sprintf("--zk-digest-file: %v", err))
		}
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("chunkserver", *id)
	zkTLS, err := zkFlags.load(log)
	if err != nil {
		bad = append(bad, err.Error())
	}
	if len(bad) > 0 {
		fmt.Fprintf(stderr, "dfsmaster-demo chunkserver: %s\n", strings.Join(bad, "; "))
		return exitUsage
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	c, err := logroom.Dial(dctx, zkTLS.dial(logroom.DialConfig{Servers: servers, SessionTimeout: *session, Auth: auth, Logger: log}))
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "dfsmaster-demo chunkserver: %v\n", err)
		return exitCode(err)
	}
	defer c.Close()
	if err := waitTaskDir(ctx, c, chunkDir(*room), log); err != nil {
		return exitOK // stopped while waiting
	}
	jctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	w, err := tasks.JoinWorker(jctx, c, chunkDir(*room), *id, tasks.WorkerOptions{Logger: log})
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "dfsmaster-demo chunkserver: join: %v\n", err)
		return exitCode(err)
	}
	defer w.Close()
	fmt.Fprintf(stdout, "%s%s room=%s\n", chunkServingPrefix, *id, *room)
	for {
		select {
		case <-ctx.Done():
			return exitOK
		case a, ok := <-w.Assignments():
			if !ok {
				fmt.Fprintf(stderr, "dfsmaster-demo chunkserver: the worker stopped\n")
				return exitError
			}
			var t rrTask
			okTask := json.Unmarshal(a.Data, &t) == nil && t.Block > 0
			if sleepCtx(ctx, *copyTime) != nil {
				return exitOK
			}
			result := fmt.Sprintf("copied block %d", t.Block)
			if !okTask {
				result = "not a re-replication task"
			}
			// Report until it lands or can never land: the recipe does not
			// deliver this assignment again in this session.
			var err error
			for attempt := 0; ; attempt++ {
				rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				err = w.Report(rctx, a, okTask, []byte(result))
				cancel()
				if err == nil || errors.Is(err, tasks.ErrReassigned) || errors.Is(err, tasks.ErrClosed) || ctx.Err() != nil || attempt == 20 {
					break
				}
				log.Warn("report failed; retrying", "task", a.ID, "err", err)
				if sleepCtx(ctx, 250*time.Millisecond) != nil {
					return exitOK
				}
			}
			if err != nil {
				log.Warn("report not recorded (the task was reassigned, or this server is closing)", "task", a.ID, "err", err)
				continue
			}
			fmt.Fprintf(stdout, "%s%s attempt=%d ok=%v\n", chunkDonePrefix, a.ID, a.Attempt, okTask)
		}
	}
}

// waitTaskDir waits until a master created dir's workers directory (the
// assigner creates it; exists needs no permission) and returns an error
// only when ctx ends. A chunk server joining first would create the task
// directory with its own ACL, granting itself all of it, where the
// masters' per-worker ACLs (serve --zk-acl-x509-worker) grant it its own
// directory only.
func waitTaskDir(ctx context.Context, c *logroom.Client, dir string, log *slog.Logger) error {
	p := dir + "/workers"
	var next time.Time
	for {
		ok, _, err := c.Conn().Exists(p)
		if err == nil && ok {
			return nil
		}
		if now := time.Now(); now.After(next) {
			log.Info("waiting for the primary master (serve --chunkservers) to create the task directory", "path", p, "err", err)
			next = now.Add(30 * time.Second)
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
}

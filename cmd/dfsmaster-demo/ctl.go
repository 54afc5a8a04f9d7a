package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/internal/cli"
)

// defaultAddr is where ctl looks for a master when neither --addr nor
// DFSMASTER_ADDR says.
const defaultAddr = "127.0.0.1:8080"

const ctlUsage = `usage: dfsmaster-demo ctl [--addr host:port[,host:port...]] [--timeout d] [--idempotency-key KEY]
                           [--tls-ca FILE --tls-cert FILE --tls-key FILE] <command> [flags] [args]

With --tls-ca, --tls-cert and --tls-key ctl speaks HTTPS to masters served
with the same flags (mutual TLS): host:port addresses mean https://host:port.

commands (flags go before the arguments; 'ctl COMMAND -h' is a command's own help):
  mkdir [-p] PATH               create a directory (-p: with its parents, no error if it exists)
  create [-r N] PATH            create an empty file with replication N (default: the server's, 3)
  addblock PATH SIZE            append a block of SIZE bytes to a file; prints its block id
  rename SRC DST                move a file or a directory
  delete [-r] PATH              remove a file or an empty directory (-r: a directory and its subtree)
  ls [--min-index N] PATH       list a directory (waiting until index N is applied)
  stat [--min-index N] PATH     describe a path
  status                        the master's role, indexes, members and channels ("failure": why it failed)
  health                        exit 0 while the master takes part in the room, connected to ZooKeeper;
                                exit 1 with the reason once it failed, while it is cut off from
                                ZooKeeper, or while it shuts down
  hash [--min-index N]          the state hash and the index it reflects

Every command uses every --addr master. ls, stat, hash, status and health go
to the masters in turn and move on from one that cannot serve (cut off from
ZooKeeper, failed, shutting down, unreachable): health succeeds once one
master is healthy. With --min-index each master gets at most 500 ms per
attempt and the rounds go on until the index is reached or 5 s pass.
Mutations go to the masters in the order given and move on from one that
cannot take them (unreachable, no primary known, failed, the outcome unknown
there), so a dead master listed first does not fail a mutation while another
is primary; one sent to a standby follows its redirect to the primary. Every
mutation carries one Idempotency-Key (random, or --idempotency-key's) to
every master and is re-sent with it while its outcome is unknown (503
outcome_unknown, 504, a lost connection), until --timeout: it is applied at
most once. A mutation no master could take at all (every one unreachable or
without a primary, or a standby redirecting to a primary that does not answer,
as for a session timeout after the primary was killed) is sent again, round
after round with the same key, for up to --wait-primary (default 20s), saying
from 2 s on what it waits for. If ctl still gives up, it prints the key: re-running the command
with --idempotency-key KEY is safe, and prints the original answer with
"replayed": true if it had been applied. The answer is printed as JSON; on
failure the error goes to stderr and the exit status is 1. --json (before or
after the command) is accepted: the answer is JSON either way.
`

// ctlHelp is each command's own help ('ctl COMMAND -h').
var ctlHelp = map[string]string{
	"mkdir":    ctlCommandHelp("mkdir [-p] PATH", "Creates directory PATH; -p creates missing parents and is no error if PATH exists.", true),
	"create":   ctlCommandHelp("create [-r N] PATH", "Creates an empty file PATH with replication N (default: the server's, 3).", true),
	"addblock": ctlCommandHelp("addblock PATH SIZE", "Appends a block of SIZE bytes to file PATH; prints its block id.", true),
	"rename":   ctlCommandHelp("rename SRC DST", "Moves a file or a directory.", true),
	"delete":   ctlCommandHelp("delete [-r] PATH", "Removes a file or an empty directory; -r a directory and its subtree.", true),
	"ls": ctlCommandHelp("ls [--min-index N] PATH", "Lists directory PATH, at a master that applied index N or more (--min-index:\n"+
		"each master gets 500 ms per attempt, the rounds go on for up to 5 s).", false),
	"stat": ctlCommandHelp("stat [--min-index N] PATH", "Describes PATH, at a master that applied index N or more (as ls).", false),
	"status": ctlCommandHelp("status", "The first answering master's role, epoch, indexes, members and channels\n"+
		"(\"failure\": why it failed).", false),
	"health": ctlCommandHelp("health", "Exit 0 once one master takes part in the room, connected to ZooKeeper; exit 1\n"+
		"with each master's reason while none does (failed, cut off, shutting down).", false),
	"hash": ctlCommandHelp("hash [--min-index N]", "The state hash and the index it reflects, at a master that applied index N or\nmore.", false),
}

func ctlCommandHelp(synopsis, what string, mutation bool) string {
	h := "usage: dfsmaster-demo ctl [ctl flags] " + synopsis + " [--json]\n\n" + what + "\n"
	if mutation {
		h += "\nA mutation: sent to the primary among every --addr (a standby's redirect\n" +
			"followed), with one Idempotency-Key, re-sent while its outcome is unknown:\n" +
			"applied at most once.\n"
	} else {
		h += "\nA read: the --addr masters are asked in turn, moving on from one that cannot serve.\n"
	}
	return h + "The answer is printed as JSON. ctl flags: 'dfsmaster-demo ctl -h'.\n"
}

// defaultWaitPrimary: how long ctl re-sends a mutation no master took (a
// takeover after a kill -9 takes about a session timeout).
const defaultWaitPrimary = 20 * time.Second

// ctlMutations are the commands that change the namespace.
var ctlMutations = map[string]bool{"mkdir": true, "create": true, "addblock": true, "rename": true, "delete": true}

// errUsage marks a bad command line.
var errUsage = errors.New("usage")

func runCtl(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("ctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := fs.String("addr", envOr("DFSMASTER_ADDR", defaultAddr), "master address, host:port or URL, or several separated by commas (env DFSMASTER_ADDR)")
	timeout := fs.Duration("timeout", 30*time.Second, "give up after this long")
	waitPrimary := fs.Duration("wait-primary", defaultWaitPrimary, "a mutation no master can take (no primary, or a standby naming a primary that does not answer, as after a kill -9) is sent again for up to this long, with its one key (0: once; --timeout bounds it too)")
	key := fs.String("idempotency-key", "", "a mutation's Idempotency-Key (default: a random one); re-running a mutation with the same key applies it at most once")
	tlsFlags := addTLSFlags(fs, "masters served with serve --tls-*: HTTPS with this client certificate")
	fs.Bool("json", false, "print the answer as JSON (it always is: accepted for the convention both binaries share)")
	keySet := false
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, ctlUsage)
			return exitOK
		}
		return ctlUsageError(stderr, err.Error())
	}
	if fs.NArg() == 0 {
		return ctlUsageError(stderr, "missing command")
	}
	fs.Visit(func(f *flag.Flag) { keySet = keySet || f.Name == "idempotency-key" })
	name := fs.Arg(0)
	if cli.WantsHelp(fs.Args()[1:]) {
		if h, ok := ctlHelp[name]; ok {
			fmt.Fprint(stdout, h)
			return exitOK
		}
		return ctlUsageError(stderr, fmt.Sprintf("unknown command %q", name))
	}
	if keySet && !ctlMutations[name] {
		return ctlUsageError(stderr, fmt.Sprintf("--idempotency-key applies to mutations only, not %q", name))
	}
	if keySet {
		if err := api.ValidIdempotencyKey(*key); err != nil {
			return ctlUsageError(stderr, "--idempotency-key: "+err.Error())
		}
	} else {
		*key = client.NewIdempotencyKey()
	}
	if *timeout <= 0 {
		return ctlUsageError(stderr, "--timeout must be positive")
	}
	src, err := tlsFlags.load(nil)
	if err != nil {
		return ctlUsageError(stderr, err.Error())
	}
	var hc *http.Client // nil: http.DefaultClient
	if src != nil {
		hc = client.HTTPS(src, 0)
	}
	var addrs []string
	for _, a := range strings.Split(*addr, ",") {
		if a = strings.TrimSpace(a); a != "" {
			if src != nil && !strings.Contains(a, "://") {
				a = "https://" + a
			}
			addrs = append(addrs, a)
		}
	}
	pool, err := client.NewPool(addrs, hc)
	if err != nil {
		return ctlUsageError(stderr, err.Error())
	}
	if *waitPrimary < 0 {
		return ctlUsageError(stderr, "--wait-primary must be >= 0")
	}
	pool.PrimaryWait = *waitPrimary
	var said time.Duration
	pool.OnRetry = func(waited time.Duration, err error) {
		// No silent waits: from 2 s on, every 3 s, what it waits for.
		if waited >= cli.ProgressAfter && (said == 0 || waited-said >= cli.ProgressEvery) {
			said = waited
			fmt.Fprintf(stderr, "dfsmaster-demo ctl %s: waiting %v (--wait-primary %v) for a master to take it: %v\n", name, waited.Round(time.Second), *waitPrimary, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	out, err := ctlCommand(ctx, pool, name, fs.Args()[1:], client.IdempotencyKey(*key))
	if errors.Is(err, errUsage) {
		return ctlUsageError(stderr, err.Error())
	}
	if err != nil {
		fmt.Fprintf(stderr, "dfsmaster-demo ctl %s: %v\n", name, err)
		if errors.Is(err, client.ErrOutcomeUnknown) {
			fmt.Fprintf(stderr, "dfsmaster-demo ctl %s: the command may or may not have been applied; "+
				"re-run it with --idempotency-key %s to find out safely (it is applied at most once)\n", name, *key)
		}
		return exitError
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		fmt.Fprintf(stderr, "dfsmaster-demo ctl %s: %v\n", name, err)
		return exitError
	}
	fmt.Fprintf(stdout, "%s\n", b)
	return exitOK
}

func ctlUsageError(stderr io.Writer, msg string) int {
	fmt.Fprintf(stderr, "dfsmaster-demo ctl: %s\n\n%s", msg, ctlUsage)
	return exitUsage
}

// ctlCommand parses one command's flags and arguments and runs it; a
// mutation is sent with key.
func ctlCommand(ctx context.Context, pool *client.Pool, name string, args []string, key client.MutationOption) (any, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var (
		parents, recursive bool
		replication        int
		minIndex           uint64
		nargs              int
	)
	switch name {
	case "mkdir":
		fs.BoolVar(&parents, "p", false, "create missing parents")
		nargs = 1
	case "create":
		fs.IntVar(&replication, "r", 0, "replication factor")
		nargs = 1
	case "addblock", "rename":
		nargs = 2
	case "delete":
		fs.BoolVar(&recursive, "r", false, "recursive")
		nargs = 1
	case "ls", "stat":
		fs.Uint64Var(&minIndex, "min-index", 0, "wait until this index is applied")
		nargs = 1
	case "hash":
		fs.Uint64Var(&minIndex, "min-index", 0, "wait until this index is applied")
	case "status", "health":
	default:
		return nil, fmt.Errorf("%w: unknown command %q", errUsage, name)
	}
	fs.Bool("json", false, "print the answer as JSON (it always is)")
	if err := fs.Parse(args); err != nil {

		return nil, fmt.Errorf("%w: %s: %v", errUsage, name, err)
	}
	if fs.NArg() != nargs {
		return nil, fmt.Errorf("%w: %s takes %d argument(s), got %d %q", errUsage, name, nargs, fs.NArg(), fs.Args())
	}
	a := fs.Args()
	switch name {
	case "mkdir":
		return pool.Mkdir(ctx, a[0], parents, key)
	case "create":
		return pool.Create(ctx, a[0], replication, key)
	case "addblock":
		size, err := strconv.ParseInt(a[1], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: addblock: size %q is not an integer", errUsage, a[1])
		}
		return pool.AddBlock(ctx, a[0], size, key)
	case "rename":
		return pool.Rename(ctx, a[0], a[1], key)
	case "delete":
		return pool.Delete(ctx, a[0], recursive, key)
	case "ls":
		return pool.Ls(ctx, a[0], minIndex)
	case "stat":
		return pool.Stat(ctx, a[0], minIndex)
	case "hash":
		return pool.Hash(ctx, minIndex)
	case "health":
		return pool.Health(ctx)
	default: // "status"
		return pool.Status(ctx)
	}
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

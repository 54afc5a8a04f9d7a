package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/roomlog/roomlog/version"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// subcommand is one verb of the binary.
type subcommand struct {
	name, summary string
	run           func(ctx context.Context, args []string, stdout, stderr io.Writer) int
}

func subcommands() []subcommand {
	return []subcommand{
		{"serve", "run one namespace master (a roomlog replica behind the HTTP API)", runServe},
		{"pair", "demo: a primary/standby pair on a local ZooKeeper survives kill -9", runPair},
		{"ctl", "command-line client for a master's HTTP API", runCtl},
		{"chunkserver", "a simulated chunk server: executes the masters' re-replication tasks (recipe/tasks worker)", runChunkServer},
		{"restore", "point-in-time restore of the namespace from an --archive into a new data dir", runRestore}, // archive (issue 27)
		{"version", "print the release, commit, Go version and room versions (also --version)", runVersion},
	}
}

// Exit codes.
const (
	exitOK    = 0
	exitError = 1 // the request failed (the message says why)
	exitUsage = 2 // bad command line
)

// run is main without the process: it returns the exit code.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stderr)
		if len(args) == 0 {
			return exitUsage
		}
		return exitOK
	}
	if args[0] == "--version" || args[0] == "-version" {
		return runVersion(ctx, args[1:], stdout, stderr)
	}
	for _, sc := range subcommands() {
		if sc.name == args[0] {
			return sc.run(ctx, args[1:], stdout, stderr)
		}
	}
	fmt.Fprintf(stderr, "dfsmaster-demo: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: dfsmaster-demo <command> [flags] [args]")
	fmt.Fprintln(w, "\ncommands:")
	for _, sc := range subcommands() {
		fmt.Fprintf(w, "  %-8s %s\n", sc.name, sc.summary)
	}
}

// runVersion prints version.Info's line: the release, the commit the binary
// was built from, the Go version and the room versions it reads and writes.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 {
		fmt.Fprintf(stderr, "dfsmaster-demo version: unexpected arguments %q\n", args)
		return exitUsage
	}
	fmt.Fprintln(stdout, version.Info().String())
	return exitOK
}

// buildCommit is the commit label of the build info metric and of
// /v1/status: the full commit, "+dirty" when the work tree had
// uncommitted changes, "unknown" when the binary was not built from a
// checkout.
func buildCommit(b version.Build) string {
	c := b.Commit
	if c == "" {
		c = "unknown"
	}
	if b.Modified {
		c += "+dirty"
	}
	return c
}

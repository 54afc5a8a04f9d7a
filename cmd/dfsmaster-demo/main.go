package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/roomlog/roomlog/internal/cli"
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

// Exit codes by class, as roomlog's (internal/cli; 'dfsmaster-demo --help'
// lists them).
const (
	exitOK    = cli.ExitOK
	exitError = cli.ExitFault // a failure of no class below (the message says why)
	exitUsage = cli.ExitUsage // bad command line
)

// exitCode is the exit code of a command that failed with err: its class
// (3 ZooKeeper unreachable, 4 room not found, 5 access denied), else 1.
func exitCode(err error) int {
	if c := cli.Class(err); c != exitOK {
		return c
	}
	return exitError
}

// run is main without the process: it returns the exit code. Help (-h,
// --help, help, and a command's -h) goes to stdout with exit 0; a bad
// command line to stderr with exit 2.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		usage(stderr)
		return exitUsage
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			return run(ctx, []string{args[1], "-h"}, stdout, stderr)
		}
		usage(stdout)
		return exitOK
	case "--version", "-version":
		return runVersion(ctx, args[1:], stdout, stderr)
	}
	for _, sc := range subcommands() {
		if sc.name != args[0] {
			continue
		}
		if cli.WantsHelp(args[1:]) {
			if sc.name == "version" {
				fmt.Fprintf(stdout, "usage: dfsmaster-demo version [--json] (or --version)\n\n%s.\n", sc.summary)
				return exitOK
			}
			if sc.name == "ctl" {
				// ctl COMMAND -h is the command's own help.
				return sc.run(ctx, args[1:], stdout, stderr)
			}
			// Every command's flag set prints its help on -h (to its
			// stderr argument, here stdout) and returns exitOK.
			return sc.run(ctx, []string{"-h"}, stdout, stdout)
		}
		return sc.run(ctx, args[1:], stdout, stderr)
	}
	fmt.Fprintf(stderr, "dfsmaster-demo: unknown command %q\n\n", args[0])
	usage(stderr)
	return exitUsage
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: dfsmaster-demo <command> [flags] [args]")
	fmt.Fprintln(w, "       dfsmaster-demo <command> -h    (a command's own help)")
	fmt.Fprintln(w, "       dfsmaster-demo --version")
	fmt.Fprintln(w, "\ncommands:")
	for _, sc := range subcommands() {
		fmt.Fprintf(w, "  %-11s %s\n", sc.name, sc.summary)
	}
	fmt.Fprintf(w, "\n%s", cli.ExitCodesHelp)
	fmt.Fprintln(w, "  ctl exits 1 for a failed request (the master's answer or why none answered goes to stderr).")
	fmt.Fprintln(w, "\n--json: every command that prints a result takes it (ctl, restore, pair, version); ctl's and")
	fmt.Fprintln(w, "restore's results are JSON with or without it, pair's then come as one object on stdout.")
}

// runVersion prints version.Info's line: the release, the commit the binary
// was built from, the Go version and the room versions it reads and writes.
// With --json it prints the object roomlog version --json prints.
func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	asJSON := len(args) == 1 && (args[0] == "--json" || args[0] == "-json")
	if len(args) > 0 && !asJSON {
		fmt.Fprintf(stderr, "dfsmaster-demo version: unexpected arguments %q\n", args)
		return exitUsage
	}
	if asJSON {
		return writeJSON(stdout, stderr, "version", cli.VersionOf(version.Info()))
	}
	fmt.Fprintln(stdout, version.Info().String())
	return exitOK
}

// writeJSON prints v as indented JSON on stdout (exit 0), or says on
// stderr why it could not (exit 1).
func writeJSON(stdout, stderr io.Writer, cmd string, v any) int {
	b, err := json.MarshalIndent(v, "", "  ")
	if err == nil {
		_, err = fmt.Fprintf(stdout, "%s\n", b)
	}
	if err != nil {
		fmt.Fprintf(stderr, "dfsmaster-demo %s: %v\n", cmd, err)
		return exitError
	}
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

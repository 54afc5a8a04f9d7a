package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/version"
)

// Exit codes.
const (
	exitOK    = 0
	exitFail  = 1 // an error, or verify found a fault
	exitUsage = 2
)

// Environment fallbacks for --zk and --digest (a password on the command
// line is visible to every local user through ps).
const (
	envZK         = "ROOMLOG_ZK"
	envDigest     = "ROOMLOG_DIGEST"
	envDigestFile = "ROOMLOG_DIGEST_FILE"
)

const usageText = `usage: roomlog [flags] COMMAND [ARGS]

Inspection of roomlog rooms in ZooKeeper. Read-only, except 'room-version --set'
(a room version target) and 'reseed' (re-creates a lost room).

commands:
  rooms                       the rooms under --base
  channels ROOM               num, first, last, sealed, epoch, batches, bytes
  members ROOM                live members: id, addr, role, epoch, applied, checkpoint, election rank
  dump ROOM [--from N] [--to N]
                              decoded entries, one JSON object per line
  verify ROOM                 check every channel and batch znode; exit 1 on any fault
  checkpoints ROOM            the checkpoint record and the members' checkpoints
  room-version ROOM           the room version, since index, target, whether complete, why
                              blocked, the oldest channel's room version, and each live
                              member's role, applied index and room versions (min..max)
  room-version ROOM --set N [--wait DURATION]
                              WRITES: records room version N as the room's target (needs
                              write access: --zk-digest-file for a room with an ACL); the
                              primary moves the room when every live member supports N.
                              --wait polls until the room is at N and complete (exit 0),
                              or exits 1 after DURATION with why not (default 0: no wait)
  version                     this binary's release, commit, Go version and room versions
                              (needs no ZooKeeper)
  reseed ROOM --from DATADIR[,DATADIR...] [--trust DATADIR]
                              WRITES: re-creates a room ZooKeeper lost from its stopped members'
                              data dirs, the log continuing past their applied index
                              ('roomlog reseed -h')
  restore --archive DIR --room ROOM --to-index N|--to-time T --out DATADIR
                              point-in-time restore from an archive into a new local data dir
                              (needs no ZooKeeper, writes only DATADIR; 'roomlog restore -h')

flags (anywhere on the line):
`

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := runContext(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run runs the tool with args (without the program name) and returns the
// exit code.
func run(args []string, stdout, stderr io.Writer) int {
	return runContext(context.Background(), args, stdout, stderr)
}

// options are the parsed flags.
type options struct {
	zk         string
	base       string
	digest     string
	digestFile string
	timeout    time.Duration
	json       bool
	from       uint64
	to         uint64
	noOps      bool
	setVersion int
	wait       time.Duration
	set        map[string]bool
	zkTLS      zkTLSFlags
}

// parseArgs parses flags given anywhere among the positional arguments
// ("--" ends the flags).
func parseArgs(args []string, stderr io.Writer) (options, []string, error) {
	var o options
	fs := flag.NewFlagSet("roomlog", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defZK := os.Getenv(envZK)
	if defZK == "" {
		defZK = "127.0.0.1:2181"
	}
	fs.StringVar(&o.zk, "zk", defZK, "ZooKeeper servers, comma-separated host:port (env "+envZK+")")
	fs.StringVar(&o.base, "base", logroom.DefaultBase, "parent znode of the rooms")
	fs.StringVar(&o.digest, "digest", "", "digest credentials user:password for rooms with an ACL (env "+envDigest+"; prefer --zk-digest-file)")
	fs.StringVar(&o.digestFile, "zk-digest-file", "", "file holding digest credentials user:password (env "+envDigestFile+")")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for a ZooKeeper session")
	fs.BoolVar(&o.json, "json", false, "machine-readable JSON output")
	fs.Uint64Var(&o.from, "from", 0, "dump: first index (default: the oldest retained)")
	fs.Uint64Var(&o.to, "to", 0, "dump: last index (default: the end of the log)")
	fs.BoolVar(&o.noOps, "no-ops", false, "dump: do not decode entries as store ops")
	fs.IntVar(&o.setVersion, "set", 0, fmt.Sprintf("room-version: record this room version (%d..%d) as the room's target: the tool's only write", version.RoomMin, version.RoomMax))
	fs.DurationVar(&o.wait, "wait", 0, "room-version --set: wait this long for the room to reach the target, complete (0: do not wait)")
	o.zkTLS.register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fs.PrintDefaults()
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return o, nil, err
		}
		rest := fs.Args()
		if consumed := len(args) - len(rest); consumed > 0 && args[consumed-1] == "--" {
			pos = append(pos, rest...)
			break
		}
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	o.set = map[string]bool{}
	fs.Visit(func(f *flag.Flag) { o.set[f.Name] = true })
	if o.digest == "" && !o.set["digest"] {
		o.digest = os.Getenv(envDigest)
	}
	if o.digestFile == "" && !o.set["zk-digest-file"] {
		o.digestFile = os.Getenv(envDigestFile)
	}
	return o, pos, nil
}

// command is one subcommand: the number of positional arguments it takes
// and its implementation. A command with local set runs before anything
// about ZooKeeper is checked or dialled, and gets a nil inspector.
type command struct {
	args  int
	run   func(ctx context.Context, in *inspector, o options, args []string, stdout, stderr io.Writer) error
	local bool
}

var commands = map[string]command{
	"rooms":       {args: 0, run: cmdRooms},
	"channels":    {args: 1, run: cmdChannels},
	"members":     {args: 1, run: cmdMembers},
	"dump":        {args: 1, run: cmdDump},
	"verify":      {args: 1, run: cmdVerify},
	"checkpoints": {args: 1, run: cmdCheckpoints},
	// The one command that may write (with --set).
	"room-version": {args: 1, run: cmdRoomVersion},
	"version":      {args: 0, run: cmdVersion, local: true},
}

// errFaults is returned by verify when it found faults (already printed).
var errFaults = errors.New("faults found")

func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if i := commandAt(args); i >= 0 && args[i] == "reseed" { // disaster recovery: its own flags, reseed.go
		return cmdReseedArgs(ctx, append(slices.Clone(args[:i]), args[i+1:]...), stdout, stderr)
	}
	if len(args) > 0 && args[0] == "restore" { // archive (issue 27): its own flags, restore.go
		return cmdRestoreArgs(ctx, args[1:], stdout, stderr)
	}
	o, pos, err := parseArgs(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	if err != nil {
		return exitUsage
	}
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "roomlog: "+format+"\n", a...)
		fmt.Fprintln(stderr, "run 'roomlog -h' for usage")
		return exitUsage
	}
	if len(pos) == 0 {
		return usageErr("missing command")
	}
	name := pos[0]
	if name == "help" {
		fmt.Fprint(stdout, usageText)
		return exitOK
	}
	cmd, ok := commands[name]
	if !ok {
		return usageErr("unknown command %q", name)
	}
	if len(pos)-1 != cmd.args {
		return usageErr("%s takes %d argument(s), got %d: %q", name, cmd.args, len(pos)-1, pos[1:])
	}
	if name != "dump" && (o.set["from"] || o.set["to"] || o.set["no-ops"]) {
		return usageErr("--from, --to and --no-ops apply to dump only")
	}
	if o.set["from"] && o.from == 0 {
		return usageErr("--from must be >= 1 (indexes start at 1)")
	}
	if o.set["from"] && o.set["to"] && o.to < o.from {
		return usageErr("--to %d is below --from %d", o.to, o.from)
	}
	if o.set["to"] && o.to == 0 {
		return usageErr("--to must be >= 1")
	}
	if name != "room-version" && (o.set["set"] || o.set["wait"]) {
		return usageErr("--set and --wait apply to room-version only")
	}
	if o.set["wait"] && !o.set["set"] {
		return usageErr("--wait applies to room-version --set only")
	}
	if o.wait < 0 {
		return usageErr("--wait must be >= 0")
	}
	if o.set["set"] && (o.setVersion < version.RoomMin || o.setVersion > version.RoomMax) {
		return usageErr("--set %d: this binary (%s) knows room versions %d..%d", o.setVersion, version.Release, version.RoomMin, version.RoomMax)
	}
	if cmd.local {
		return finish(name, cmd.run(ctx, nil, o, pos[1:], stdout, stderr), stderr)
	}
	if err := logroom.ValidateBase(o.base); err != nil {
		return usageErr("--base: %v", err)
	}
	servers := logroom.SplitServers(o.zk)
	if len(servers) == 0 {
		return usageErr("--zk: no ZooKeeper server given")
	}
	var auth *logroom.Digest
	switch {
	case o.digest != "" && o.digestFile != "":
		return usageErr("--digest and --zk-digest-file: give one")
	case o.digestFile != "":
		d, err := logroom.LoadDigestFile(o.digestFile)
		if err != nil {
			return usageErr("--zk-digest-file: %v", err)
		}
		auth = d
	case o.digest != "":
		d, err := logroom.ParseDigest(o.digest)
		if err != nil {
			return usageErr("--digest: %v", err)
		}
		auth = d
	}
	if o.timeout <= 0 {
		return usageErr("--timeout must be > 0")
	}
	for _, a := range pos[1:] {
		if err := logroom.ValidateName(a); err != nil {
			fmt.Fprintf(stderr, "roomlog: %v\n", err)
			return exitUsage
		}
	}

	dc, err := o.zkTLS.dialConfig(servers, auth)
	if err != nil {
		return usageErr("%v", err)
	}
	dialCtx, cancel := context.WithTimeout(ctx, o.timeout)
	c, err := logroom.Dial(dialCtx, dc)
	cancel()
	if err != nil {
		switch {
		case ctx.Err() != nil:
			fmt.Fprintf(stderr, "roomlog: interrupted while connecting to ZooKeeper %s\n", o.zk)
		case errors.Is(err, context.DeadlineExceeded):
			// err carries the last connection attempt's reason (a TLS
			// refusal names the CA file and the name checked).
			fmt.Fprintf(stderr, "roomlog: cannot reach ZooKeeper at %s: no session within %v (--timeout): %v\n", o.zk, o.timeout, err)
		default:
			fmt.Fprintf(stderr, "roomlog: connect to ZooKeeper at %s: %v\n", o.zk, err)
		}
		return exitFail
	}
	defer c.Close()
	// Closing the client makes any ZooKeeper call in progress return, so
	// an interrupt ends the command promptly.
	stopAfter := context.AfterFunc(ctx, c.Close)
	defer stopAfter()

	in := &inspector{c: c, base: o.base, timeout: o.timeout}
	return finish(name, cmd.run(ctx, in, o, pos[1:], stdout, stderr), stderr)
}

// commandAt returns the index of the first positional argument (the
// command) among args, skipping flags and the values of those that take
// one; -1 when there is none.
func commandAt(args []string) int {
	valued := map[string]bool{"zk": true, "base": true, "digest": true, "zk-digest-file": true, "timeout": true,
		"from": true, "to": true, "set": true, "wait": true}
	for _, n := range zkTLSValued {
		valued[n] = true
	}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--" {
			return -1
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			return i
		}
		name := strings.TrimLeft(a, "-")
		if strings.Contains(name, "=") {
			continue
		}
		if valued[name] {
			i++
		}
	}
	return -1
}

// finish turns command name's error into the exit code, printing it unless
// the command already did (errFaults).
func finish(name string, err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errFaults):
		return exitFail
	default:
		fmt.Fprintf(stderr, "roomlog %s: %v\n", name, err)
		return exitFail
	}
}

// versionJSON is what version --json prints.
type versionJSON struct {
	Release  string `json:"release"`
	Commit   string `json:"commit"` // "" when not built from a checkout
	Modified bool   `json:"modified"`
	Go       string `json:"go"`
	RoomMin  int    `json:"room_min"`
	RoomMax  int    `json:"room_max"`
}

// cmdVersion prints this binary's build (version.Info): one line, or with
// --json one object. It touches no ZooKeeper.
func cmdVersion(_ context.Context, _ *inspector, o options, _ []string, stdout, _ io.Writer) error {
	b := version.Info()
	if o.json {
		return writeJSON(stdout, versionJSON{Release: b.Release, Commit: b.Commit, Modified: b.Modified,
			Go: b.GoVersion, RoomMin: version.RoomMin, RoomMax: version.RoomMax})
	}
	_, err := fmt.Fprintln(stdout, b.String())
	return err
}

// formatTime renders unix milliseconds (0: "-").
func formatTime(ms int64) string {
	if ms == 0 {
		return "-"
	}
	return time.UnixMilli(ms).UTC().Format(time.RFC3339)
}

func u64(v uint64) string { return strconv.FormatUint(v, 10) }

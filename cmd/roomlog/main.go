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

	conv "github.com/roomlog/roomlog/internal/cli"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/version"
)

// Exit codes by class (internal/cli; 'roomlog --help' lists them).
const (
	exitOK          = conv.ExitOK
	exitFail        = conv.ExitFault // verify found a fault, or a failure of no other class
	exitUsage       = conv.ExitUsage
	exitUnreachable = conv.ExitUnreachable
	exitNoRoom      = conv.ExitNoRoom
	exitDenied      = conv.ExitDenied
)

// Environment: one scheme, ROOMLOG_*, shared with dfsmaster-demo. No flag
// takes a password (a command line is visible to every local user
// through ps): digest credentials come from --zk-digest-file or the
// environment.
const (
	envZK         = "ROOMLOG_ZK"
	envDigest     = "ROOMLOG_ZK_DIGEST" // user:password
	envDigestFile = "ROOMLOG_ZK_DIGEST_FILE"
)

// Deprecated environment names, still read (with a warning).
var (
	oldEnvZK         = []string{"ZK"}
	oldEnvDigest     = []string{"ROOMLOG_DIGEST"}
	oldEnvDigestFile = []string{"ROOMLOG_DIGEST_FILE", "DFSMASTER_ZK_DIGEST_FILE"}
)

// usageError marks a bad command line found by a command (exit 2).
type usageError = conv.UsageError

// errRefused: a command refused a change that would do harm (the message
// says what and how to force it).
var errRefused = errors.New("refused")

// replicaMember is a live member as replica's views show it.
type replicaMember = replica.MemberStatus

const usageText = `usage: roomlog [flags] COMMAND [ARGS]
       roomlog COMMAND -h      (a command's own help)
       roomlog --version

Inspection and operation of roomlog rooms in ZooKeeper. Read-only, except
'room-version --set', 'acl --add/--remove', 'transfer', 'checkpoint', 'delete-room'
and 'reseed'.

commands:
  rooms                       the rooms under --base
  channels ROOM               num, first, last, sealed, epoch, batches, bytes
  members ROOM                live members: id, addr, role, epoch, applied, checkpoint, election
                              rank; a primary replaced by one of a newer epoch is marked DEPOSED
  acl ROOM [--add ID]... [--remove ID]...
                              the room's ACL and each member's identity; WRITES with --add/--remove:
                              changes the ACL of a live room ('roomlog acl -h')
  transfer ROOM [--to ID]     WRITES: asks the primary to hand over to member ID (default: the
                              standby that applied the most); waits until the new primary leads
  checkpoint ROOM             WRITES: asks the primary to checkpoint now; prints the index
  delete-room ROOM [--yes] [--force]
                              WRITES: deletes the room from ZooKeeper; refused while members are
                              live unless --force; asks for the room's name unless --yes
  inspect DATADIR [--export FILE]
                              a stopped member's data dir: room, applied index, running hash,
                              checkpoints, history (needs no ZooKeeper, opens it read-only);
                              --export writes a summary for 'reseed --from-summaries'
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
  reseed ROOM --from DATADIR[,DATADIR...] [--trust DATADIR] [--dry-run]
                              WRITES: re-creates a room ZooKeeper lost from its stopped members'
                              data dirs, the log continuing past their applied index; --dry-run
                              says what it would do and writes nothing ('roomlog reseed -h')
  reseed ROOM --from-summaries FILE[,FILE...]
                              data dirs on several hosts: from each one's 'inspect --export'
                              summary, chooses the seed and says which host's data dir to
                              re-seed from (needs no ZooKeeper, writes nothing)
  restore --archive DIR --room ROOM --to-index N|--to-time T --out DATADIR
                              point-in-time restore from an archive into a new local data dir
                              (needs no ZooKeeper, writes only DATADIR; 'roomlog restore -h')

environment: ROOMLOG_ZK (--zk), ROOMLOG_ZK_DIGEST_FILE (--zk-digest-file),
ROOMLOG_ZK_DIGEST (user:password; no flag takes a password). Older names (ZK,
ROOMLOG_DIGEST_FILE, ROOMLOG_DIGEST) still work, with a warning.

` + conv.ExitCodesHelp + `
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
	digest     string // from the environment only
	digestFile string
	timeout    time.Duration
	json       bool
	from       uint64
	to         uint64 // dump: --to as an index
	toMember   string // transfer: --to as a member id
	add        aclFlag
	remove     aclFlag
	force      bool
	yes        bool
	export     string
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
	to := registerCommon(fs, &o, stderr)
	fs.Usage = func() {} // errors are followed by "run 'roomlog -h'"
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
	o.digest = conv.Getenv(stderr, "roomlog", envDigest, oldEnvDigest...)
	if o.digestFile == "" && !o.set["zk-digest-file"] {
		o.digestFile = conv.Getenv(stderr, "roomlog", envDigestFile, oldEnvDigestFile...)
	}
	if o.set["to"] {
		if len(pos) > 0 && pos[0] == "dump" {
			v, err := strconv.ParseUint(*to, 10, 64)
			if err != nil {
				fmt.Fprintf(stderr, "invalid value %q for flag -to: dump takes an index\n", *to)
				return o, pos, err
			}
			o.to = v
		} else {
			o.toMember = *to
		}
	}
	return o, pos, nil
}

// registerCommon registers the flags of the commands that share one flag
// set (all but reseed and restore) into o; the returned string receives
// --to (an index for dump, a member for transfer).
func registerCommon(fs *flag.FlagSet, o *options, stderr io.Writer) *string {
	defZK := conv.Getenv(stderr, "roomlog", envZK, oldEnvZK...)
	if defZK == "" {
		defZK = "127.0.0.1:2181"
	}
	var to string
	fs.StringVar(&o.zk, "zk", defZK, "ZooKeeper servers, comma-separated host:port (env "+envZK+")")
	fs.StringVar(&o.base, "base", logroom.DefaultBase, "parent znode of the rooms")
	fs.Func("digest", "removed: a password on the command line is visible to every local user (use --zk-digest-file or "+envDigest+")", func(string) error {
		return fmt.Errorf("takes no password any more (visible in ps): use --zk-digest-file FILE or the environment variable %s", envDigest)
	})
	fs.StringVar(&o.digestFile, "zk-digest-file", "", "`FILE` holding digest credentials user:password (env "+envDigestFile+")")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Second, "how long to wait for a ZooKeeper session")
	fs.BoolVar(&o.json, "json", false, "machine-readable JSON output")
	fs.Uint64Var(&o.from, "from", 0, "dump: first `INDEX` (default: the oldest retained)")
	fs.StringVar(&to, "to", "", "dump: last `INDEX` (default: the end of the log); transfer: the member ID to hand over to")
	fs.Var(&o.add, "add", "acl: an `IDENTITY` to grant (x509:SUBJECT, digest:USER:HASH, digest-file:PATH); repeatable")
	fs.Var(&o.remove, "remove", "acl: an `IDENTITY` to take out of the room's ACL; repeatable")
	fs.BoolVar(&o.force, "force", false, "acl: change the ACL although a live member or this tool would lose access; delete-room: delete although members are live")
	fs.StringVar(&o.export, "export", "", "inspect: also write a summary of the data dir to `FILE`, for 'reseed --from-summaries' on another host")
	fs.BoolVar(&o.yes, "yes", false, "delete-room: delete without asking for the room's name on stdin")
	fs.BoolVar(&o.noOps, "no-ops", false, "dump: do not decode entries as store ops")
	fs.IntVar(&o.setVersion, "set", 0, fmt.Sprintf("room-version: record this room version (%d..%d) as the room's target", version.RoomMin, version.RoomMax))
	fs.DurationVar(&o.wait, "wait", 0, "room-version --set: wait this long for the room to reach the target, complete (0: do not wait); transfer, checkpoint: how long to wait for the primary's answer (default 1m)")
	o.zkTLS.register(fs)
	return &to
}

// command is one subcommand: the number of positional arguments it takes
// and its implementation. A command with local set runs before anything
// about ZooKeeper is checked or dialled, and gets a nil inspector.
type command struct {
	args  int
	run   func(ctx context.Context, in *inspector, o options, args []string, stdout, stderr io.Writer) error
	local bool
	// help is the command's own help ('roomlog COMMAND -h').
	help string
}

var commands = map[string]command{
	"rooms":       {args: 0, run: cmdRooms, help: roomsHelp},
	"channels":    {args: 1, run: cmdChannels, help: channelsHelp},
	"members":     {args: 1, run: cmdMembers, help: membersHelp},
	"dump":        {args: 1, run: cmdDump, help: dumpHelp},
	"verify":      {args: 1, run: cmdVerify, help: verifyHelp},
	"checkpoints": {args: 1, run: cmdCheckpoints, help: checkpointsHelp},
	// Commands that may write.
	"room-version": {args: 1, run: cmdRoomVersion, help: roomVersionHelp},
	"acl":          {args: 1, run: cmdACL, help: aclHelp},
	"transfer":     {args: 1, run: cmdTransfer, help: transferHelp},
	"checkpoint":   {args: 1, run: cmdCheckpoint, help: checkpointHelp},
	"delete-room":  {args: 1, run: cmdDeleteRoom, help: deleteRoomHelp},
	// Local: no ZooKeeper.
	"inspect": {args: 1, run: cmdInspect, local: true, help: inspectHelp},
	"version": {args: 0, run: cmdVersion, local: true, help: versionHelp},
}

// errFaults is returned by verify when it found faults (already printed).
var errFaults = errors.New("faults found")

func runContext(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	help := conv.WantsHelp(args)
	i := commandAt(args)
	if i >= 0 && args[i] == "help" && i+1 < len(args) { // help COMMAND
		args, i, help = []string{args[i+1]}, 0, true
	}
	if i >= 0 && args[i] == "reseed" { // disaster recovery: its own flags, reseed.go
		if help {
			return cmdReseedArgs(ctx, []string{"-h"}, stdout, stdout)
		}
		return cmdReseedArgs(ctx, append(slices.Clone(args[:i]), args[i+1:]...), stdout, stderr)
	}
	if i >= 0 && args[i] == "restore" { // archive (issue 27): its own flags, restore.go
		if help {
			return cmdRestoreArgs(ctx, []string{"-h"}, stdout, stdout)
		}
		return cmdRestoreArgs(ctx, append(slices.Clone(args[:i]), args[i+1:]...), stdout, stderr)
	}
	if help {
		if i >= 0 {
			if cmd, ok := commands[args[i]]; ok {
				fmt.Fprint(stdout, cmd.help)
				fmt.Fprintln(stdout, "\nflags common to every command: 'roomlog --help'")
				return exitOK
			}
		}
		printUsage(stdout)
		return exitOK
	}
	for _, a := range args {
		if a == "--" {
			break
		}
		if a == "--version" || a == "-version" {
			return finish("version", cmdVersion(ctx, nil, options{json: slices.Contains(args, "--json")}, nil, stdout, stderr), stderr)
		}
	}
	o, pos, err := parseArgs(args, stderr)
	if err != nil {
		fmt.Fprintln(stderr, "run 'roomlog -h' for usage")
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
		printUsage(stdout)
		return exitOK
	}
	cmd, ok := commands[name]
	if !ok {
		return usageErr("unknown command %q", name)
	}
	if len(pos)-1 != cmd.args {
		return usageErr("%s takes %d argument(s), got %d: %q", name, cmd.args, len(pos)-1, pos[1:])
	}
	if name != "dump" && (o.set["from"] || (o.set["to"] && name != "transfer") || o.set["no-ops"]) {
		return usageErr("--from, --to and --no-ops apply to dump only (and --to to transfer)")
	}
	if name != "acl" && (o.set["add"] || o.set["remove"]) {
		return usageErr("--add and --remove apply to acl only")
	}
	if name != "acl" && name != "delete-room" && o.set["force"] {
		return usageErr("--force applies to acl and delete-room only")
	}
	if name != "inspect" && o.set["export"] {
		return usageErr("--export applies to inspect only")
	}
	if name != "delete-room" && o.set["yes"] {
		return usageErr("--yes applies to delete-room only")
	}
	if err := checkIdentities(o); err != nil {
		return usageErr("%v", err)
	}
	if o.set["from"] && o.from == 0 {
		return usageErr("--from must be >= 1 (indexes start at 1)")
	}
	if name == "dump" && o.set["from"] && o.set["to"] && o.to < o.from {
		return usageErr("--to %d is below --from %d", o.to, o.from)
	}
	if name == "dump" && o.set["to"] && o.to == 0 {
		return usageErr("--to must be >= 1")
	}
	waits := name == "room-version" || name == "transfer" || name == "checkpoint" || name == "delete-room"
	if (name != "room-version" && o.set["set"]) || (!waits && o.set["wait"]) {
		return usageErr("--set applies to room-version only, --wait to room-version --set, transfer, checkpoint and delete-room")
	}
	if name == "room-version" && o.set["wait"] && !o.set["set"] {
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
		return usageErr("%s and --zk-digest-file (or %s): give one", envDigest, envDigestFile)
	case o.digestFile != "":
		d, err := logroom.LoadDigestFile(o.digestFile)
		if err != nil {
			return usageErr("--zk-digest-file: %v", err)
		}
		auth = d
	case o.digest != "":
		d, err := logroom.ParseDigest(o.digest)
		if err != nil {
			return usageErr("%s: %v", envDigest, err)
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
	what := fmt.Sprintf("a ZooKeeper session at %s (--timeout %v)", o.zk, o.timeout)
	stopProgress := progress(dialCtx, stderr, &what)
	c, err := logroom.Dial(dialCtx, dc)
	stopProgress()
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
			if c := conv.Class(err); c != exitFail {
				return c
			}
		}
		return exitUnreachable
	}
	logSessionTimeout(c, o.timeout, stderr)
	defer c.Close()
	// Closing the client makes any ZooKeeper call in progress return, so
	// an interrupt ends the command promptly.
	stopAfter := context.AfterFunc(ctx, c.Close)
	defer stopAfter()

	in := &inspector{c: c, base: o.base, timeout: o.timeout, stderr: stderr}
	return finish(name, cmd.run(ctx, in, o, pos[1:], stdout, stderr), stderr)
}

// commandAt returns the index of the first positional argument (the
// command) among args, skipping flags and the values of those that take
// one; -1 when there is none.
func commandAt(args []string) int {
	valued := map[string]bool{"zk": true, "base": true, "digest": true, "zk-digest-file": true, "timeout": true,
		"from": true, "to": true, "set": true, "wait": true, "add": true, "remove": true,
		"trust": true, "room-version": true, "session-timeout": true, "archive": true, "room": true,
		"to-index": true, "to-time": true, "out": true, "applier": true, "incarnation": true,
		"export": true, "from-summaries": true}
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

// finish turns command name's error into the exit code by its class
// (internal/cli), printing it unless the command already did (errFaults).
func finish(name string, err error, stderr io.Writer) int {
	switch {
	case err == nil:
		return exitOK
	case errors.Is(err, errFaults):
		return exitFail
	default:
		fmt.Fprintf(stderr, "roomlog %s: %v\n", name, err)
		return conv.Class(err)
	}
}

// printUsage prints the usage text and the common flags to w.
func printUsage(w io.Writer) {
	var discard strings.Builder
	fs := flag.NewFlagSet("roomlog", flag.ContinueOnError)
	fs.SetOutput(&discard)
	// The flags as parseArgs registers them.
	var o options
	registerCommon(fs, &o, &discard)
	fmt.Fprint(w, usageText)
	fs.SetOutput(w)
	fs.PrintDefaults()
}

// logSessionTimeout says on stderr when ZooKeeper granted another session
// timeout than the one asked for (it clamps it to its tick bounds).
func logSessionTimeout(c *logroom.Client, _ time.Duration, stderr io.Writer) {
	asked, got := c.SessionTimeout(), c.NegotiatedSessionTimeout()
	if got > 0 && got != asked {
		fmt.Fprintf(stderr, "roomlog: warning: ZooKeeper granted a session timeout of %v, not the %v asked for\n", got, asked)
	}
}

// cmdVersion prints this binary's build (version.Info): one line, or with
// --json one object. It touches no ZooKeeper.
func cmdVersion(_ context.Context, _ *inspector, o options, _ []string, stdout, _ io.Writer) error {
	b := version.Info()
	if o.json {
		return writeJSON(stdout, conv.VersionOf(b))
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

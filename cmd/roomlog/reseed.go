package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	conv "github.com/roomlog/roomlog/internal/cli"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/tlsfiles"
)

// ---- reseed ----
//
// WRITES: re-creates a room that ZooKeeper lost from its members' data
// dirs (replica.Reseed; replica package doc, "Disaster recovery"). Every
// member of the room must be stopped; the data dirs are opened read-only
// and only their marker files are rewritten.

const reseedUsage = `usage: roomlog reseed ROOM --from DATADIR[,DATADIR...] [flags]
       roomlog reseed ROOM --from-summaries FILE[,FILE...] [--json]

WRITES: re-creates room ROOM, which ZooKeeper lost (wiped, restored from an older
copy, deleted), from the data dirs of its stopped members: the one with the highest
(epoch, applied index) is the seed; every other must be a prefix of its history
(refused otherwise: --trust DATADIR seeds from that one and leaves the others out).
The room's log continues at the seed's index + 1 under a new epoch; the survivors'
markers are rewritten so they rejoin (those behind bootstrap from the seed's
checkpoint). Start the seed's member first.

--dry-run prints what it would do — the seed, every survivor's role, the epoch and
room version the room would be created at, what ZooKeeper holds under the name —
after the checks a re-seed makes (the survivors agree, no member of the old room is
live), and writes nothing: neither ZooKeeper nor the survivors' markers.

Data dirs on several hosts: run 'roomlog inspect DATADIR --export FILE' on each
host (stopped members), gather the files, and --from-summaries plans the re-seed
without ZooKeeper, writing nothing: it chooses the seed as above (highest epoch,
then index), says of every other data dir whether it is at the seed's position
(adopts the re-seeded room when started), behind it (move its data dir away: it
bootstraps) or another history (refused, exit 1: --trust on the host of the one to
keep), and prints the command to run on the seed's host, from its data dir.

Digest credentials for a room with an ACL come from --zk-digest-file or the
environment (ROOMLOG_ZK_DIGEST_FILE, ROOMLOG_ZK_DIGEST=user:password), never
from a flag: a command line is visible to every local user.

flags:
`

// reseedJSON is what reseed --json prints.
type reseedJSON struct {
	Room      string           `json:"room"`
	Index     uint64           `json:"index"`
	From      string           `json:"from"`
	Epoch     uint64           `json:"epoch"`
	Czxid     string           `json:"czxid"`
	Previous  string           `json:"previous"`
	Unchecked string           `json:"unchecked,omitempty"` // live members of the lost incarnation could not be looked for
	DryRun    bool             `json:"dry_run,omitempty"`   // nothing was written; Czxid is empty
	TookMS    int64            `json:"took_ms"`
	Survivors []reseedSurvivor `json:"survivors"`
}

type reseedSurvivor struct {
	Dir    string `json:"dir"`
	Index  uint64 `json:"index"`
	Epoch  uint64 `json:"epoch"`
	Hash   string `json:"hash"`
	Role   string `json:"role"`
	Reason string `json:"reason,omitempty"`
	Marker string `json:"marker_czxid"`
	Base   uint64 `json:"hash_base"`
	Batch  string `json:"batch"`
}

func cmdReseedArgs(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("roomlog reseed", flag.ContinueOnError)
	fs.SetOutput(stderr)
	defZK := conv.Getenv(stderr, "roomlog", envZK, oldEnvZK...)
	if defZK == "" {
		defZK = "127.0.0.1:2181"
	}
	zkAddr := fs.String("zk", defZK, "ZooKeeper servers, comma-separated host:port (env "+envZK+")")
	base := fs.String("base", logroom.DefaultBase, "parent znode of the rooms")
	fs.Func("digest", "removed: a password on the command line is visible to every local user (use --zk-digest-file or "+envDigest+")", func(string) error {
		return fmt.Errorf("takes no password any more (visible in ps): use --zk-digest-file FILE or the environment variable %s", envDigest)
	})
	digestFile := fs.String("zk-digest-file", "", "`FILE` holding digest credentials user:password for a room with an ACL (env "+envDigestFile+")")
	dryRun := fs.Bool("dry-run", false, "check and print what the re-seed would do, and write nothing")
	from := fs.String("from", "", "the survivors' data dirs, comma-separated (required, unless --from-summaries)")
	fromSummaries := fs.String("from-summaries", "", "`FILES`, comma-separated: the summaries 'roomlog inspect DATADIR --export FILE' wrote on each host; plans the re-seed (which host's data dir to re-seed from, what to do with the others) without ZooKeeper and writes nothing")
	trust := fs.String("trust", "", "seed from this data dir although the survivors disagree (the others that disagree are left out)")
	force := fs.Bool("force", false, "re-seed although ZooKeeper's room still holds the seed's position, or holds entries of another incarnation (lost)")
	roomVersion := fs.Int("room-version", 0, "room version to create the room at (0: the higher of the old room's, if ZooKeeper still has it, and the one the seed's data dir recorded, in its member marker or the record 'roomlog restore' wrote; else 1; a restored data dir whose version is unknown is refused without this flag)")
	session := fs.Duration("session-timeout", 4*time.Second, "the members' ZooKeeper session timeout (how long their old nodes may linger)")
	timeout := fs.Duration("timeout", 2*time.Minute, "bound on the whole re-seed")
	jsonOut := fs.Bool("json", false, "machine-readable JSON output")
	var zkTLS zkTLSFlags
	zkTLS.register(fs)
	fs.Usage = func() {
		fmt.Fprint(stderr, reseedUsage)
		fs.PrintDefaults()
	}
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return exitOK
			}
			return exitUsage
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
	digestFileSet := false
	fs.Visit(func(f *flag.Flag) { digestFileSet = digestFileSet || f.Name == "zk-digest-file" })
	if !digestFileSet {
		*digestFile = conv.Getenv(stderr, "roomlog", envDigestFile, oldEnvDigestFile...)
	}
	digest := conv.Getenv(stderr, "roomlog", envDigest, oldEnvDigest...)
	usageErr := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "roomlog reseed: "+format+"\n", a...)
		fmt.Fprintln(stderr, "run 'roomlog reseed -h' for usage")
		return exitUsage
	}
	if len(pos) != 1 {
		return usageErr("takes one argument, the room, got %d: %q", len(pos), pos)
	}
	if err := logroom.ValidateName(pos[0]); err != nil {
		return usageErr("%v", err)
	}
	if err := logroom.ValidateBase(*base); err != nil {
		return usageErr("--base: %v", err)
	}
	if *fromSummaries != "" {
		if *from != "" || *trust != "" || *dryRun {
			return usageErr("--from-summaries plans only: not with --from, --trust or --dry-run")
		}
		var files []string
		for _, f := range strings.Split(*fromSummaries, ",") {
			if f = strings.TrimSpace(f); f != "" {
				files = append(files, f)
			}
		}
		var extra []string
		if *force {
			extra = append(extra, "--force")
		}
		if *roomVersion != 0 {
			extra = append(extra, fmt.Sprintf("--room-version %d", *roomVersion))
		}
		plan, err := planFromSummaries(*base, pos[0], files, extra)
		if err != nil {
			fmt.Fprintf(stderr, "roomlog reseed: %v\n", err)
			if len(plan.Survivors) > 0 {
				printPlan(stderr, plan)
			}
			return conv.Class(err)
		}
		if *jsonOut {
			if err := writeJSON(stdout, plan); err != nil {
				return exitFail
			}
			return exitOK
		}
		printPlan(stdout, plan)
		return exitOK
	}
	var dirs []string
	for _, d := range strings.Split(*from, ",") {
		if d = strings.TrimSpace(d); d != "" {
			dirs = append(dirs, d)
		}
	}
	if len(dirs) == 0 {
		return usageErr("--from: no survivor data dir given")
	}
	servers := logroom.SplitServers(*zkAddr)
	if len(servers) == 0 {
		return usageErr("--zk: no ZooKeeper server given")
	}
	var auth *logroom.Digest
	if digest != "" && *digestFile != "" {
		return usageErr("%s and --zk-digest-file (or %s): give one", envDigest, envDigestFile)
	}
	if digest != "" {
		d, err := logroom.ParseDigest(digest)
		if err != nil {
			return usageErr("%s: %v", envDigest, err)
		}
		auth = d
	}
	if *digestFile != "" {
		d, err := logroom.LoadDigestFile(*digestFile)
		if err != nil {
			return usageErr("--zk-digest-file: %v", err)
		}
		auth = d
	}
	if *timeout <= 0 || *session <= 0 {
		return usageErr("--timeout and --session-timeout must be > 0")
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	dc, err := zkTLS.dialConfig(servers, auth)
	if err != nil {
		return usageErr("%v", err)
	}
	rc := replica.ReseedConfig{Servers: servers, SessionTimeout: *session, Auth: auth, Base: *base,
		Room: pos[0], DataDirs: dirs, Trust: *trust, Force: *force, RoomVersion: *roomVersion,
		ZooKeeperTLSServerName: dc.TLSServerName, ACLIdentities: dc.ACLIdentities, DryRun: *dryRun}
	if dc.TLS != nil {
		rc.ZooKeeperTLS = dc.TLS.(*tlsfiles.Source)
	}
	prog := conv.StartProgress(stderr, "roomlog reseed", conv.IsTerminal(stderr))
	rc.Progress = func(step string) { prog.Step("%s", step) }
	res, err := replica.Reseed(ctx, rc)
	prog.Stop()
	if err != nil {
		fmt.Fprintf(stderr, "roomlog reseed: %v\n", err)
		return conv.Class(err)
	}
	out := reseedJSON{Room: pos[0], Index: res.Seed.Index, From: res.From, Epoch: res.Epoch, Czxid: fmt.Sprintf("0x%x", res.Czxid),
		Previous: res.Previous, Unchecked: res.Unchecked, DryRun: *dryRun, TookMS: res.Took.Milliseconds(), Survivors: []reseedSurvivor{}}
	if *dryRun {
		out.Czxid = ""
	}
	for _, s := range res.Survivors {
		out.Survivors = append(out.Survivors, reseedSurvivor{Dir: s.Dir, Index: s.Position.Index, Epoch: s.Position.Epoch,
			Hash: s.Position.Hash.String(), Base: s.Position.Hash.Base, Role: s.Role, Reason: s.Reason,
			Marker: fmt.Sprintf("0x%x", s.MarkerCzxid), Batch: fmt.Sprintf("%d+%d crc %08x", s.Position.Batch.First, s.Position.Batch.Count, s.Position.Batch.CRC)})
	}
	if *jsonOut {
		if err := writeJSON(stdout, out); err != nil {
			return exitFail
		}
		return exitOK
	}
	if *dryRun {
		fmt.Fprintf(stdout, "dry run, nothing written: room %s would be re-seeded at index %d from %s: epoch %d, room version %d (ZooKeeper holds: %s)\n",
			out.Room, out.Index, out.From, out.Epoch, res.RoomVersion, out.Previous)
	} else {
		fmt.Fprintf(stdout, "room %s re-seeded at index %d from %s: epoch %d, incarnation %s (before: %s), in %v\n",
			out.Room, out.Index, out.From, out.Epoch, out.Czxid, out.Previous, res.Took.Round(time.Millisecond))
	}
	for _, s := range out.Survivors {
		line := fmt.Sprintf("  %-9s %s  index %d epoch %d hash %s", s.Role, s.Dir, s.Index, s.Epoch, s.Hash)
		if s.Reason != "" {
			line += "  (" + s.Reason + ")"
		}
		fmt.Fprintln(stdout, line)
	}
	if out.Unchecked != "" {
		fmt.Fprintln(stdout, "warning: "+out.Unchecked)
	}
	if *dryRun {
		fmt.Fprintln(stdout, "run it again without --dry-run to re-seed")
		return exitOK
	}
	fmt.Fprintln(stdout, "start the seed's member first; members left out are refused by name until their data dir is moved away")
	return exitOK
}

package main

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
)

// Exit codes.
const (
	exitOK        = 0
	exitViolation = 1 // the checker found violations, or a stall, crash or no convergence
	exitHarness   = 2 // the run could not be completed (bad flags, ZooKeeper missing, interrupted)
)

func main() {
	os.Exit(mainCode(os.Args[1:], os.Stdout, os.Stderr))
}

func mainCode(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("chaos", flag.ContinueOnError)
	fs.SetOutput(stderr)
	seed := fs.Uint64("seed", 0, "schedule seed (0: a random one, printed)")
	duration := fs.Duration("duration", 10*time.Minute, "start faults until this much time has passed")
	faults := fs.Int("faults", 0, "stop after this many faults (0: no limit but -duration)")
	replicas := fs.Int("replicas", 3, "replica processes")
	observers := fs.Int("observers", 1, "observer processes besides the replicas (replica.Config.Observer: they must never lead; 0: none)")
	workers := fs.Int("workers", 4, "concurrent proposers")
	session := fs.Duration("session", 2*time.Second, "replicas' ZooKeeper session timeout")
	dir := fs.String("dir", "", "parent of the work dir (default: the temp dir)")
	keep := fs.Bool("keep", false, "keep the work dir (node and ZooKeeper logs) even on success")
	verbose := fs.Bool("v", false, "verbose: harness logs and replica status after each fault")
	latency := fs.Duration("latency", 0, "delay every link by this ± half of it for the whole run (e.g. 3ms: 1.5–4.5 ms)")
	fetchIdle := fs.Duration("fetch-idle", 2*time.Second, "replicas' checkpoint fetch idle timeout (what a stalled source costs)")
	lifecycle := fs.Bool("lifecycle", false, "interleave lifecycle operations with the faults (replace-member, observer-join/-leave, room-version-raise/-lower, zk-wipe-reseed, zk-rollback-reseed, upgrade/downgrade, restore-check); the members run with a continuous archive")
	useTLS := fs.Bool("tls", false, "ZooKeeper over TLS with x509 ACLs and mutual TLS between members; with -lifecycle, rotate-cert and rotate-ca are drawn (upgrade and downgrade are not: the previous release has no TLS)")
	perturb := fs.Bool("perturb-restore-hash", false, "test hook: every restore-check flips a bit of the restored running hash before comparing it (each comparison must report restore_mismatch and fail the run)")
	force := fs.String("force", "", "comma-separated fault kinds to run first (e.g. partition-primary-long,stall-checkpoint)")
	if err := fs.Parse(args); err != nil {
		return exitHarness
	}
	if *seed == 0 {
		*seed = randomSeed()
	}
	forced, err := parseKinds(*force)
	if err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return exitHarness
	}
	rerun := ""
	if *lifecycle {
		rerun = " -lifecycle"
	}
	if *useTLS {
		rerun += " -tls"
	}
	fmt.Fprintf(stdout, "chaos: seed=%d duration=%v faults=%d replicas=%d observers=%d workers=%d session=%v latency=%v lifecycle=%v tls=%v (rerun: go run ./chaos%s -seed %d)\n",
		*seed, *duration, *faults, *replicas, *observers, *workers, *session, *latency, *lifecycle, *useTLS, rerun, *seed)
	if err := zkensemble.Available(); err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		return exitHarness
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	defer testnode.RemoveBuilds()

	obs := *observers
	if obs == 0 {
		obs = -1 // Config's zero value is the default, one
	}
	res, err := Run(ctx, Config{
		Seed: *seed, Duration: *duration, Faults: *faults, Replicas: *replicas, Observers: obs, Workers: *workers,
		Session: *session, Dir: *dir, Keep: *keep, Out: stdout, Verbose: *verbose,
		Latency: *latency, Force: forced, FetchIdle: *fetchIdle, Lifecycle: *lifecycle, TLS: *useTLS,
		PerturbRestoreHash: *perturb,
	})
	if err != nil {
		fmt.Fprintln(stderr, "chaos:", err)
		if res.WorkDir != "" {
			fmt.Fprintln(stderr, "chaos: logs kept in", res.WorkDir)
		}
		return exitHarness
	}
	printResult(stdout, res)
	if !res.OK() {
		return exitViolation
	}
	return exitOK
}

// printResult prints the violations and anomalies first, then the summary
// line.
func printResult(w io.Writer, res Result) {
	for _, v := range res.Report.Violations {
		fmt.Fprintln(w, "VIOLATION", v)
	}
	if n := res.Report.Total(); n > len(res.Report.Violations) {
		fmt.Fprintf(w, "VIOLATION … and %d more\n", n-len(res.Report.Violations))
	}
	for _, a := range res.Anomalies {
		fmt.Fprintln(w, "ANOMALY", a)
	}
	if res.WorkDir != "" {
		fmt.Fprintln(w, "logs kept in", res.WorkDir)
	}
	fmt.Fprintln(w, res.Line())
}

func randomSeed() uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:])%1_000_000_000 + 1 // short enough to retype
}

// parseKinds parses a comma-separated list of fault kind names.
func parseKinds(s string) ([]Kind, error) {
	var out []Kind
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		k, ok := kindByName(name)
		if !ok {
			return nil, fmt.Errorf("-force: unknown fault kind %q (kinds: %s)", name, strings.Join(kindNames[:], ", "))
		}
		out = append(out, k)
	}
	return out, nil
}

func kindByName(name string) (Kind, bool) {
	for k := Kind(0); k < numKinds; k++ {
		if kindNames[k] == name {
			return k, true
		}
	}
	return 0, false
}

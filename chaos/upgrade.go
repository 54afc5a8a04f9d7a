package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/version"
)

// Rolling upgrades and downgrades (-lifecycle): one replica at a time
// moves between this tree's roomlog-testnode and the previous release's
// (RELEASES names its commit; built as compat builds it, from the
// repository's own history), stopped gracefully (one time in four kill
// -9) and started on the same data dir.

// previousRelease reads RELEASES at the repository's top and returns the
// release before this tree's.
func previousRelease(ctx context.Context) (version.ReleaseLine, error) {
	top, err := exec.CommandContext(ctx, "git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return version.ReleaseLine{}, fmt.Errorf("the repository: %w", err)
	}
	f, err := os.Open(filepath.Join(strings.TrimSpace(string(top)), "RELEASES"))
	if err != nil {
		return version.ReleaseLine{}, err
	}
	defer f.Close()
	lines, err := version.ParseReleases(f)
	if err != nil {
		return version.ReleaseLine{}, err
	}
	prev, ok := version.Previous(lines, version.Release)
	if !ok || prev.Commit == "" {
		return version.ReleaseLine{}, fmt.Errorf("RELEASES names no commit for a release before %s", version.Release)
	}
	return prev, nil
}

// BuildPrevious builds the previous release's roomlog-testnode into dir
// and says which release it is.
func BuildPrevious(ctx context.Context, dir string) (bin, release string, err error) {
	prev, err := previousRelease(ctx)
	if err != nil {
		return "", "", fmt.Errorf("chaos: previous release: %w", err)
	}
	bctx, cancel := context.WithTimeout(ctx, 8*time.Minute)
	defer cancel()
	bin, err = testnode.BuildRelease(bctx, prev.Commit, dir)
	if err != nil {
		return "", prev.Release, fmt.Errorf("chaos: build %s: %w", prev.Release, err)
	}
	return bin, prev.Release, nil
}

// onOld reports whether n's next launch runs the previous release.
func (r *runner) onOld(n *testnode.Node) bool {
	return r.oldBin != "" && n.Binary() == r.oldBin
}

// setBinary makes n's next launches run bin, with the room's archive on
// this tree's binary and without it on the previous release's (it has
// no --archive: an operator adds the archive with the release that has
// it, and a primary of the previous release deletes channels without
// archiving them, so the archive may have gaps a restore reports).
func (r *runner) setBinary(n *testnode.Node, bin string) {
	n.SetBinary(bin)
	if bin == r.oldBin && bin != r.newBin {
		n.SetArchive("")
	} else {
		n.SetArchive(r.archiveDir)
	}
}

// replicasOn returns the replicas (never observers) whose binary is or
// is not the previous release's, sorted by id.
func (r *runner) replicasOn(old bool) []*testnode.Node {
	var out []*testnode.Node
	for _, n := range r.c.Nodes() {
		if !r.observers[n.ID()] && r.onOld(n) == old {
			out = append(out, n)
		}
	}
	slices.SortFunc(out, func(a, b *testnode.Node) int { return strings.Compare(a.ID(), b.ID()) })
	return out
}

// rollStep moves one replica to the previous release (downgrade) or back
// to this tree (upgrade). A downgrade lowers the room version first when
// it is above 1. After a re-seed the previous release cannot open the
// room (CHANGELOG: it looks for <room>/epoch): its start must fail,
// naming the room, and the member is started on this tree again. When no
// replica can move the way f says, one moves the other way (f.Kind is
// changed to say so).
func (r *runner) rollStep(ctx context.Context, f *Fault, p *testnode.Node) string {
	down := f.Kind == Downgrade
	if r.oldBin == "" {
		r.res.Kinds[f.Kind]--
		r.out.f("%s: skipped, no previous release (%s)", f, r.oldWhy)
		return ""
	}
	cands := r.replicasOn(!down)
	if len(cands) == 0 {
		// The schedule's count went wrong (a downgrade refused after a
		// re-seed moved nobody): move one the other way.
		r.res.Kinds[f.Kind]--
		f.Kind, down = Downgrade, !down
		if !down {
			f.Kind = Upgrade
		}
		r.res.Kinds[f.Kind]++
		if cands = r.replicasOn(!down); len(cands) == 0 {
			r.res.Kinds[f.Kind]--
			r.out.f("%s: skipped, no replica to move", f)
			return ""
		}
	}
	n := cands[f.Pick%len(cands)]
	if down && r.roomVersionTarget >= 2 {
		// An operator lowers the room version before a downgrade.
		r.res.Kinds[RoomVersionLower]++
		// A ZooKeeper leader killed as the downgrade began (f.Mid) is
		// down during the lowering too.
		lower := Fault{Seq: f.Seq, Kind: RoomVersionLower, Heal: f.Heal, Mid: f.Mid}
		step := lifeStep{f: lower, t0: time.Now(), faulted: f.Mid}
		step.what = r.roomVersion(ctx, lower, 1)
		step.t1 = time.Now()
		if step.what != "" {
			r.steps = append(r.steps, step)
		}
	}
	role := "standby"
	if n == p {
		role = "primary"
	}
	how, to, bin := "stop", "this tree", r.newBin
	if f.Primary {
		how = "kill -9"
	}
	if down {
		to, bin = r.oldRelease, r.oldBin
	}
	r.out.f("%s: %s %s %s, start it on %s", f, how, role, n.ID(), to)
	t0 := time.Now()
	var err error
	if f.Primary {
		err = n.Kill()
	} else {
		err = n.Stop()
	}
	if err != nil {
		r.out.f("    %s: %v", how, err)
	}
	r.setBinary(n, bin)
	if err := r.restart(ctx, n); err != nil {
		if down && r.reseeded {
			// Expected: the previous release cannot open a re-seeded
			// room; it must say so and exit.
			r.res.DowngradesRefused++
			r.out.f("    %s refused the re-seeded room as expected: %s", r.oldRelease, clip(lastLogLine(n), 300))
			r.setBinary(n, r.newBin)
			if r.restart(ctx, n) == nil {
				r.out.f("    %s started on this tree again", n.ID())
			}
			return fmt.Sprintf("%s %s refused, back on this tree", role, n.ID())
		}
		r.out.f("    %s did not start on %s", n.ID(), to)
		return fmt.Sprintf("%s %s (not restarted)", role, n.ID())
	}
	if down && r.reseeded {
		r.res.Anomalies = append(r.res.Anomalies, fmt.Sprintf("%s: %s opened a re-seeded room (CHANGELOG says it cannot)", f, r.oldRelease))
		r.res.Crashes++
	}
	if down {
		r.ranOld[n.ID()] = true
	}
	what := fmt.Sprintf("%s %s on %s", role, n.ID(), to)
	if err := r.caughtUp(ctx, n, 60*time.Second); err != nil {
		what += " (" + firstLine(err) + ")"
	}
	r.out.f("    %s, caught up %v after the %s", what, time.Since(t0).Round(time.Millisecond), how)
	return fmt.Sprintf("%s %s to %s", role, n.ID(), to)
}

// lastLogLine is the last line of n's log that says something (an error
// if it exited).
func lastLogLine(n *testnode.Node) string {
	lines := strings.Split(strings.TrimSpace(n.LogTail(5)), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if s := strings.TrimSpace(lines[i]); s != "" && !strings.HasPrefix(s, "====") {
			return s
		}
	}
	return ""
}

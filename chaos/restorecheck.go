package main

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/roomlog/roomlog/archive"
	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

// restore-check (doc.go, "Lifecycle operations"): with -lifecycle every
// member runs with the room's continuous archive (a directory under the
// work dir, shared as an operator configures it: replica.Config.Archive),
// and this step does what `roomlog restore` does (archive.Restore, the
// command's library, with the members' Applier), at random acknowledged
// indexes of the incarnation in service (named explicitly, as
// docs/disaster-recovery.md tells operators of an archive holding
// several), then compares the restored store's running hash with the
// members' at that index (GET /runhash: replica.Replica.RunHashAt).

// restorePicks is how many indexes one step restores at first;
// restoreFallbacks how many more it tries when none of them could be
// compared; restoreWindow how far below the newest covered index it
// picks (members keep the running hashes of their last 16384 entries).
const (
	restorePicks     = 3
	restoreFallbacks = 3
	restoreWindow    = 12000
)

// pickRestoreIndexes chooses what a restore-check restores from the
// acknowledged indexes acked (sorted, distinct) of the incarnation in
// service: up to n-1 at random in (lo, covered] (the archive's listing
// covers them), and one above covered when one was acknowledged (the
// archive cannot cover it yet: its restore must be refused, and it is
// skipped); n from (lo, covered] when none is above. Sorted.
func pickRestoreIndexes(acked []uint64, lo, covered uint64, n int, rng *rand.Rand) []uint64 {
	if n <= 0 {
		return nil
	}
	i := sort.Search(len(acked), func(i int) bool { return acked[i] > lo })
	j := sort.Search(len(acked), func(i int) bool { return acked[i] > covered })
	in, above := acked[i:max(i, j)], acked[max(i, j):]
	want := n
	var out []uint64
	if len(above) > 0 {
		out = append(out, above[rng.IntN(len(above))])
		want = n - 1
	}
	for _, k := range rng.Perm(len(in)) {
		if want == 0 {
			break
		}
		out = append(out, in[k])
		want--
	}
	slices.Sort(out)
	return out
}

// fallbackRestoreIndexes is the newest acknowledged indexes in (lo,
// covered] not tried yet, at most n (the members most likely still keep
// their hashes).
func fallbackRestoreIndexes(acked []uint64, lo, covered uint64, tried []uint64, n int) []uint64 {
	var out []uint64
	for k := len(acked) - 1; k >= 0 && len(out) < n; k-- {
		x := acked[k]
		if x > covered || slices.Contains(tried, x) {
			continue
		}
		if x <= lo {
			break
		}
		out = append(out, x)
	}
	return out
}

// memberHash is one member's running hash at an index (GET /runhash).
type memberHash struct {
	ID   string
	Base uint64
	Sum  string // hex of the whole SHA-256
}

// restoreVerdict is the comparison of a restored store's running hash
// with the members' at its index.
type restoreVerdict struct {
	// Match and Mismatch: members whose chain has the restored one's Base
	// and whose hash equals it, or not. OtherBase: members whose chain
	// started elsewhere (not comparable: a member that ran a release
	// without the running hash restarted its chain).
	Match, Mismatch, OtherBase []string
}

// Compared reports whether some member's hash could be compared.
func (v restoreVerdict) Compared() bool { return len(v.Match)+len(v.Mismatch) > 0 }

// compareRestore compares the restored running hash with the members'
// at its index. Only chains of one Base compare (store.RunHash).
func compareRestore(restored store.RunHash, members []memberHash) restoreVerdict {
	var v restoreVerdict
	sum := fmt.Sprintf("%x", restored.Sum)
	for _, m := range members {
		switch {
		case m.Base != restored.Base:
			v.OtherBase = append(v.OtherBase, fmt.Sprintf("%s@base%d", m.ID, m.Base))
		case m.Sum == sum:
			v.Match = append(v.Match, m.ID)
		default:
			v.Mismatch = append(v.Mismatch, m.ID)
		}
	}
	return v
}

// perturbRunHash flips one bit of h (Config.PerturbRestoreHash: the test
// hook that proves a mismatch fails the run).
func perturbRunHash(h store.RunHash) store.RunHash {
	h.Sum[0] ^= 0x01
	return h
}

// coveredBy is the highest index the archive's items of origin hold (a
// channel's last index or a checkpoint's), 0 if none, and how many
// incarnations of the room the archive holds.
func coveredBy(items []archive.Item, origin archive.Origin) (covered uint64, incarnations int) {
	seen := map[archive.Origin]bool{}
	for _, it := range items {
		seen[it.Origin] = true
		if it.Origin == origin {
			covered = max(covered, it.Last)
		}
	}
	return covered, len(seen)
}

// restoreCheck runs one restore-check step.
func (r *runner) restoreCheck(ctx context.Context, f Fault) {
	if r.archiveDir == "" {
		r.res.Kinds[f.Kind]--
		r.out.f("%s: skipped, the members run without an archive", f)
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cl, err := logroom.Dial(sctx, r.zkDial())
	if err != nil {
		r.res.Kinds[f.Kind]--
		r.out.f("%s: skipped, dial: %v", f, firstLine(err))
		return
	}
	info, err := logroom.ReadRoomInfo(sctx, cl, "", r.c.Room())
	cl.Close()
	if err != nil {
		r.res.Kinds[f.Kind]--
		r.out.f("%s: skipped, read the room: %v", f, firstLine(err))
		return
	}
	origin := archive.Origin{Room: r.c.Room(), RoomCzxid: info.Czxid, Fence: info.EpochZnode}
	a, err := archive.OpenDir(r.archiveDir)
	if err != nil {
		r.res.Kinds[f.Kind]--
		r.out.f("%s: skipped, archive: %v", f, err)
		return
	}
	covered, incs, err := r.archiveCoverage(sctx, a, origin)
	if err != nil {
		r.res.Kinds[f.Kind]--
		r.out.f("%s: skipped, list the archive: %v", f, firstLine(err))
		return
	}
	acked := r.ackedInIncarnation()
	lo := r.incSeed
	if covered > restoreWindow {
		lo = max(lo, covered-restoreWindow)
	}
	if !slices.ContainsFunc(acked, func(x uint64) bool { return x > lo && x <= covered }) {
		// Nothing acknowledged is archived yet in this incarnation (a
		// re-seed just started it): an operator asks the primary for a
		// checkpoint, which seals the open channel, and waits for the
		// archive to take it.
		covered = r.awaitCoverage(sctx, a, origin, acked, lo, covered)
		acked = r.ackedInIncarnation()
		if _, n, err := r.archiveCoverage(sctx, a, origin); err == nil {
			incs = n
		}
	}
	rng := rand.New(rand.NewPCG(r.cfg.Seed^uint64(f.Pick), uint64(f.Seq)))
	picks := pickRestoreIndexes(acked, lo, covered, restorePicks, rng)
	r.out.f("%s: restore incarnation %s (the archive holds %d) at acknowledged indexes %v (archived up to %d, acknowledged up to %d)",
		f, origin.ID(), incs, picks, covered, lastOr0(acked))
	compared := 0
	for round := 0; round < 2; round++ {
		for _, idx := range picks {
			if r.restoreOne(sctx, f, a, origin, idx) {
				compared++
			}
		}
		if compared > 0 || round == 1 {
			break
		}
		tried := picks
		if picks = fallbackRestoreIndexes(acked, lo, covered, tried, restoreFallbacks); len(picks) == 0 {
			break
		}
		r.out.f("    none compared: trying the newest archived acknowledged indexes %v", picks)
	}
	r.res.RestoreSteps++
	if compared == 0 {
		r.res.RestoreUncompared++
		r.out.f("    no restore of this step was compared with the members (archived up to %d in incarnation %s)", covered, origin.ID())
	}
}

// restoreOne restores idx of origin from a and compares its running hash
// with the live members'; it reports whether it compared.
func (r *runner) restoreOne(ctx context.Context, f Fault, a archive.Archive, origin archive.Origin, idx uint64) bool {
	members := r.memberHashes(ctx, idx)
	dir := filepath.Join(r.work, "restores", fmt.Sprintf("%d-%d", f.Seq, idx))
	defer os.RemoveAll(dir)
	res, err := archive.Restore(ctx, archive.RestoreOptions{
		Archive: a, Room: r.c.Room(), RoomCzxid: origin.RoomCzxid, RoomFence: origin.Fence,
		ToIndex: idx, DataDir: dir,
		// The members' Applier: the restore applies the entries again.
		Applier: testnode.RecordingApplier{Inner: store.OpsApplier{}},
	})
	switch {
	case errors.Is(err, archive.ErrNotCovered):
		r.res.RestoreSkipped++
		r.out.f("    index %d: skipped, not archived yet: %s", idx, clip(firstLine(err), 240))
		return false
	case err != nil:
		r.res.RestoreFailures++
		msg := fmt.Sprintf("restore-check: restore of incarnation %s at index %d failed: %v", origin.ID(), idx, firstLine(err))
		r.res.Anomalies = append(r.res.Anomalies, msg)
		r.out.f("    %s", msg)
		return false
	}
	got := res.RunHash
	if r.cfg.PerturbRestoreHash {
		got = perturbRunHash(got)
	}
	v := compareRestore(got, members)
	how := fmt.Sprintf("from checkpoint %d + %d entries in %v", res.Checkpoint, res.Entries, res.Took.Round(time.Millisecond))
	switch {
	case len(v.Mismatch) > 0:
		r.res.RestoreMismatch++
		var theirs []string
		for _, m := range members {
			if slices.Contains(v.Mismatch, m.ID) {
				theirs = append(theirs, fmt.Sprintf("%s %.32s", m.ID, m.Sum))
			}
		}
		matching := strings.Join(v.Match, ",")
		if matching == "" {
			matching = "none"
		}
		msg := fmt.Sprintf("restore mismatch: incarnation %s at index %d restored running hash %x (base %d; %s) but %s (matching: %s)",
			origin.ID(), idx, got.Sum[:16], got.Base, how, strings.Join(theirs, ", "), matching)
		r.res.Anomalies = append(r.res.Anomalies, msg)
		r.out.f("    %s", msg)
		return true
	case v.Compared():
		r.res.RestoreChecks++
		r.out.f("    index %d: running hash %x (base %d) equals %s's (%s)", idx, got.Sum[:8], got.Base, strings.Join(v.Match, ","), how)
		return true
	}
	r.res.RestoreSkipped++
	why := "no member keeps its running hash any more"
	if len(v.OtherBase) > 0 {
		why = fmt.Sprintf("restored chain base %d, members' %s", got.Base, strings.Join(v.OtherBase, " "))
	}
	r.out.f("    index %d: restored (%s), not compared: %s", idx, how, why)
	return false
}

// memberHashes asks every live member for its running hash at idx.
func (r *runner) memberHashes(ctx context.Context, idx uint64) []memberHash {
	var out []memberHash
	for _, n := range r.c.Live() {
		if r.onOld(n) {
			continue // the previous release has no /runhash
		}
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		h, err := n.RunHashAt(hctx, idx)
		cancel()
		if err == nil && h.Found {
			out = append(out, memberHash{ID: n.ID(), Base: h.Base, Sum: h.Sum})
		}
	}
	slices.SortFunc(out, func(a, b memberHash) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// archiveCoverage lists the archive: the highest index origin's items
// hold and how many incarnations it holds.
func (r *runner) archiveCoverage(ctx context.Context, a archive.Archive, origin archive.Origin) (uint64, int, error) {
	items, err := a.List(ctx, r.c.Room())
	if err != nil {
		return 0, 0, err
	}
	covered, incs := coveredBy(items, origin)
	return covered, incs, nil
}

// awaitCoverage asks the primary for a checkpoint and waits (10 s at
// most) until origin's items cover an acknowledged index above lo.
func (r *runner) awaitCoverage(ctx context.Context, a archive.Archive, origin archive.Origin, acked []uint64, lo, covered uint64) uint64 {
	if p, _ := r.c.PrimaryNow(ctx); p != nil {
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := p.Checkpoint(cctx)
		cancel()
		r.out.f("    nothing acknowledged archived in %s yet (up to %d): checkpoint on primary %s: %v", origin.ID(), covered, p.ID(), errText(err))
	}
	end := time.Now().Add(10 * time.Second)
	for time.Now().Before(end) && ctx.Err() == nil {
		c, _, err := r.archiveCoverage(ctx, a, origin)
		if err == nil && slices.ContainsFunc(acked, func(x uint64) bool { return x > lo && x <= c }) {
			return c
		}
		if err == nil {
			covered = c
		}
		sleep(ctx, 200*time.Millisecond) // polling the archive: no event to wait on
	}
	return covered
}

// ackedInIncarnation is the distinct indexes acknowledged in the
// incarnation in service (after its re-seed, above the seed's index),
// sorted.
func (r *runner) ackedInIncarnation() []uint64 {
	var out []uint64
	for _, p := range r.h.Proposals() {
		if p.Outcome == testnode.OutcomeAcked && p.Index > r.incSeed && p.End.After(r.incStart) {
			out = append(out, p.Index)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func lastOr0(xs []uint64) uint64 {
	if len(xs) == 0 {
		return 0
	}
	return xs[len(xs)-1]
}

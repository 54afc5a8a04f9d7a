package compat

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/version"
)

const (
	roomName = "compat"
	// sessionTimeout is the serve command's default.
	sessionTimeout = 4 * time.Second
	writers        = 4
	// baselineAcks is how many mutations the baseline window (no fault)
	// spans.
	baselineAcks = 300
	// afterStep is how many mutations must be acknowledged after a step
	// ends before the next begins: the room takes writes again.
	afterStep = 100
	// ackWait bounds the waits for afterStep and baselineAcks.
	ackWait = 30 * time.Second
	// targetGap is the target for a step's unavailability (one
	// graceful transfer at the 4 s default session); reported, not
	// asserted. The assertion is that no step waits for a session to
	// expire: its gap stays below sessionTimeout.
	targetGap = 200 * time.Millisecond
	// scenarioTimeout bounds the whole scenario after the builds.
	scenarioTimeout = 5 * time.Minute
)

// step is a change made to the running room between the rolling
// upgrade and the rolling rollback (room version steps).
type step struct {
	name   string
	action func(ctx context.Context, r *room) error
}

// stepResult is what one step measured.
type stepResult struct {
	Name   string `json:"name"`
	Member string `json:"member,omitempty"`
	Role   string `json:"role,omitempty"` // the member's role when the step began
	From   string `json:"from,omitempty"` // release it ran
	To     string `json:"to,omitempty"`   // release it runs after the step
	// StopMS: SIGTERM to exit; RejoinMS: restart to the room settled
	// (one primary, standbys caught up); TookMS: the whole step.
	StopMS   float64 `json:"stop_ms,omitempty"`
	RejoinMS float64 `json:"rejoin_ms,omitempty"`
	TookMS   float64 `json:"took_ms"`
	// MaxGapMS is the longest time in the step with no acknowledged
	// mutation; GapAtMS where it began, from the step's start.
	MaxGapMS     float64 `json:"max_gap_ms"`
	GapAtMS      float64 `json:"gap_at_ms"`
	Acks         int     `json:"acks"`
	PrimaryAfter string  `json:"primary_after"`
}

// results is what COMPAT_RESULTS receives.
type results struct {
	OldRelease       string            `json:"old_release"`
	OldCommit        string            `json:"old_commit"`
	NewRelease       string            `json:"new_release"`
	BuildOldS        float64           `json:"build_old_s"`
	BuildNewS        float64           `json:"build_new_s"`
	OldNeededModMod  bool              `json:"old_needed_mod_mod"`
	SessionTimeoutMS float64           `json:"session_timeout_ms"`
	Writers          int               `json:"writers"`
	TargetGapMS      float64           `json:"target_gap_ms"`
	BaselineGapMS    float64           `json:"baseline_gap_ms"`
	BaselineAcks     int               `json:"baseline_acks"`
	RoomVersionSteps bool              `json:"room_version_steps"`
	Steps            []stepResult      `json:"steps"`
	Acked            int               `json:"acked"`
	Errors           map[string]int    `json:"errors"`
	FinalIndex       uint64            `json:"final_index"`
	FinalHash        string            `json:"final_hash"`
	CheckpointEvery  int               `json:"checkpoint_every"`
	Checkpoints      map[string]uint64 `json:"checkpoints"` // each member's newest local checkpoint at the end
	ScenarioS        float64           `json:"scenario_s"`
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// TestRollingUpgradeAndRollback is issue 26's compatibility test; doc.go
// describes the scenario.
func TestRollingUpgradeAndRollback(t *testing.T) {
	if testing.Short() {
		t.Skip("whole-system run of two releases")
	}
	zkensemble.Require(t) // before the builds: without ZooKeeper they would be wasted
	b := demoBinaries(t)
	oldRel, newRel := b.Old.Release, version.Release
	modMod := ""
	if b.OldModMod {
		modMod = " (with -mod=mod)"
	}
	t.Logf("built %s (commit %.12s) in %v%s, %s (this tree) in %v", oldRel, b.Old.Commit,
		b.OldTook.Round(time.Millisecond), modMod, newRel, b.NewTook.Round(time.Millisecond))
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	r := newRoom(t, ens.Addrs(), roomName, sessionTimeout, "a", "b", "c")
	ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
	defer cancel()
	began := time.Now()

	for _, m := range r.members {
		require.NoError(t, r.start(ctx, m, b.OldBin, oldRel))
	}
	primary, err := r.waitSettled(ctx)
	require.NoError(t, err)
	first := 0
	for i, m := range r.members {
		if m.id == primary {
			first = i
		}
	}
	for k := 0; k < writers; k++ {
		mctx, mcancel := context.WithTimeout(ctx, mutationTimeout)
		_, err := r.member(primary).c.Mkdir(mctx, workerDir(k), false)
		mcancel()
		require.NoError(t, err, "mkdir %s", workerDir(k))
	}
	l := startLoad(r.members, writers, first)
	t.Cleanup(l.stop)

	baseFrom := time.Now()
	require.NoError(t, l.waitAcks(ctx, baselineAcks, ackWait), "the load on %s", oldRel)
	baseGap, _, baseN := l.gap(baseFrom, time.Now())

	var steps []stepResult
	steps = append(steps, roll(t, ctx, r, l, b.NewBin, newRel, "upgrade")...)
	checkConverged(t, ctx, r, l, "after the rolling upgrade")
	for _, s := range roomVersionSteps(b.OldBin, oldRel, b.NewBin, newRel) {
		steps = append(steps, runStep(t, ctx, r, l, s))
	}
	steps = append(steps, roll(t, ctx, r, l, b.OldBin, oldRel, "rollback")...)

	l.stop()
	acks, errs := l.snapshot()
	final := checkFinal(t, ctx, r, acks)

	res := results{
		OldRelease: oldRel, OldCommit: b.Old.Commit, NewRelease: newRel,
		BuildOldS: b.OldTook.Seconds(), BuildNewS: b.NewTook.Seconds(), OldNeededModMod: b.OldModMod,
		SessionTimeoutMS: ms(sessionTimeout), Writers: writers, TargetGapMS: ms(targetGap),
		BaselineGapMS: ms(baseGap), BaselineAcks: baseN, RoomVersionSteps: true,
		Steps: steps, Acked: len(acks), Errors: errs, FinalIndex: final.index, FinalHash: final.hash,
		CheckpointEvery: checkpointEvery, Checkpoints: final.checkpoints,
		ScenarioS: time.Since(began).Seconds(),
	}
	t.Log("\n" + table(res))
	if path := os.Getenv("COMPAT_RESULTS"); path != "" {
		out, err := json.MarshalIndent(res, "", "  ")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(path, append(out, '\n'), 0o644))
	}
}

// roll moves every member to bin (release rel), one at a time: the
// standbys first, then the primary.
func roll(t *testing.T, ctx context.Context, r *room, l *load, bin, rel, phase string) []stepResult {
	t.Helper()
	var out []stepResult
	done := map[string]bool{}
	for len(done) < len(r.members) {
		primary, err := r.waitSettled(ctx)
		require.NoError(t, err, "%s: before the next member", phase)
		var next *member
		for _, m := range r.members {
			if !done[m.id] && m.id != primary {
				next = m
				break
			}
		}
		if next == nil {
			next = r.member(primary)
		}
		out = append(out, replaceMember(t, ctx, r, l, phase, next, next.id == primary, bin, rel))
		done[next.id] = true
	}
	return out
}

// replaceMember stops m gracefully and starts it on bin with the same
// id, data directory and port, and measures the step.
func replaceMember(t *testing.T, ctx context.Context, r *room, l *load, phase string, m *member, wasPrimary bool, bin, rel string) stepResult {
	t.Helper()
	role := api.RoleStandby
	if wasPrimary {
		role = api.RolePrimary
	}
	res := stepResult{Name: fmt.Sprintf("%s %s", phase, m.id), Member: m.id, Role: role, From: m.rel, To: rel}
	start := time.Now()
	require.NoError(t, r.stop(m), res.Name)
	stopped := time.Now()
	require.NoError(t, r.start(ctx, m, bin, rel), res.Name)
	primary, err := r.waitSettled(ctx)
	require.NoError(t, err, res.Name)
	end := time.Now()
	res.StopMS, res.RejoinMS = ms(stopped.Sub(start)), ms(end.Sub(stopped))
	res.PrimaryAfter = primary
	if wasPrimary {
		require.NotEqual(t, m.id, primary, "%s: the primary stopped, another took over", res.Name)
	} else {
		require.Equal(t, api.RoleStandby, mustStatus(t, ctx, m).Role, "%s: back as a standby", res.Name)
	}
	finishStep(t, ctx, r, l, &res, start, end)
	return res
}

// runStep runs s on the room and measures it.
func runStep(t *testing.T, ctx context.Context, r *room, l *load, s step) stepResult {
	t.Helper()
	res := stepResult{Name: s.name}
	start := time.Now()
	require.NoError(t, s.action(ctx, r), s.name)
	primary, err := r.waitSettled(ctx)
	require.NoError(t, err, s.name)
	res.PrimaryAfter = primary
	finishStep(t, ctx, r, l, &res, start, time.Now())
	return res
}

// finishStep measures the step [start, end], checks every member is
// healthy, and waits until the room takes writes again.
func finishStep(t *testing.T, ctx context.Context, r *room, l *load, res *stepResult, start, end time.Time) {
	t.Helper()
	require.NoError(t, r.checkHealth(ctx), res.Name)
	gap, at, n := l.gap(start, end)
	res.TookMS, res.MaxGapMS, res.GapAtMS, res.Acks = ms(end.Sub(start)), ms(gap), ms(at.Sub(start)), n
	t.Logf("%s: took %v, longest time without an acknowledged mutation %v (from +%v), %d acknowledged; primary now %s",
		res.Name, end.Sub(start).Round(time.Millisecond), gap.Round(time.Millisecond), at.Sub(start).Round(time.Millisecond), n, res.PrimaryAfter)
	require.NoError(t, l.waitAcks(ctx, afterStep, ackWait), "%s: writes go on after the step", res.Name)
	require.Less(t, gap, sessionTimeout,
		"%s: no acknowledged mutation for %v from +%v: the step waited for a session to expire instead of a graceful transfer", res.Name, gap, at.Sub(start))
}

func mustStatus(t *testing.T, ctx context.Context, m *member) api.Status {
	t.Helper()
	st, err := m.status(ctx)
	require.NoError(t, err, "status of %s", m.id)
	return st
}

// checkConverged holds the load and checks that every member reports the
// same state hash at one applied index, and that no member's integrity
// check found a mismatch.
func checkConverged(t *testing.T, ctx context.Context, r *room, l *load, when string) {
	t.Helper()
	l.pause()
	defer l.resume()
	primary, err := r.waitSettled(ctx)
	require.NoError(t, err, when)
	idx, hash, err := r.converge(ctx, mustStatus(t, ctx, r.member(primary)).AppliedIndex)
	require.NoError(t, err, when)
	for _, m := range r.members {
		st := mustStatus(t, ctx, m)
		require.Zero(t, st.HashMismatches, "%s: %s (%s) found a state hash mismatch: %s", when, m.id, m.rel, st.HashReport)
	}
	t.Logf("%s: every member at index %d with state hash %s", when, idx, hash)
}

// final is the room's state at the end.
type final struct {
	index       uint64
	hash        string
	checkpoints map[string]uint64 // each member's newest local checkpoint
}

// checkFinal checks, once the load stopped, that every acknowledged
// mutation is on every member, that the members agree on the state hash
// at one index, and that every member runs and is healthy.
func checkFinal(t *testing.T, ctx context.Context, r *room, acks []ack) final {
	t.Helper()
	require.NoError(t, r.checkAlive(ctx), "at the end")
	primary, err := r.waitSettled(ctx)
	require.NoError(t, err, "at the end")
	min := mustStatus(t, ctx, r.member(primary)).AppliedIndex
	byIndex := map[uint64]ack{}
	for _, a := range acks {
		if b, dup := byIndex[a.index]; dup {
			t.Fatalf("two acknowledged mutations at index %d: %s/%s and %s/%s", a.index, workerDir(b.worker), b.name, workerDir(a.worker), a.name)
		}
		byIndex[a.index] = a
		min = max(min, a.index)
	}
	idx, hash, err := r.converge(ctx, min)
	require.NoError(t, err, "at the end")
	for _, m := range r.members {
		var missing []string
		for k := 0; k < writers; k++ {
			lctx, lcancel := context.WithTimeout(ctx, 10*time.Second)
			ls, err := m.c.Ls(lctx, workerDir(k), idx)
			lcancel()
			require.NoError(t, err, "ls %s on %s", workerDir(k), m.id)
			require.GreaterOrEqual(t, ls.Index, idx, "ls %s on %s", workerDir(k), m.id)
			have := make(map[string]bool, len(ls.Entries))
			for _, e := range ls.Entries {
				have[e.Name] = true
			}
			for _, a := range acks {
				if a.worker == k && !have[a.name] {
					missing = append(missing, fmt.Sprintf("%s/%s (index %d, acknowledged at %s)", workerDir(k), a.name, a.index, a.at.Format("15:04:05.000")))
				}
			}
		}
		if len(missing) > 10 {
			missing = append(missing[:10], fmt.Sprintf("and %d more", len(missing)-10))
		}
		require.Empty(t, missing, "acknowledged mutations missing on %s (%s) at index %d", m.id, m.rel, idx)
	}
	require.NoError(t, r.checkAlive(ctx), "at the end")
	require.NoError(t, r.checkHealth(ctx), "at the end")
	f := final{index: idx, hash: hash, checkpoints: map[string]uint64{}}
	for _, m := range r.members {
		f.checkpoints[m.id] = mustStatus(t, ctx, m).CheckpointIndex
	}
	t.Logf("at the end: %d acknowledged mutations on every member; every member at index %d with state hash %s; newest local checkpoints %v",
		len(acks), idx, hash, f.checkpoints)
	return f
}

// table formats the results for the test log.
func table(res results) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s -> %s -> %s under %d writers, session timeout %v; builds: %s %.1fs, %s %.1fs\n",
		res.OldRelease, res.NewRelease, res.OldRelease, res.Writers, sessionTimeout, res.OldRelease, res.BuildOldS, res.NewRelease, res.BuildNewS)
	fmt.Fprintf(&b, "baseline (no fault): longest gap %.0f ms over %d acks\n", res.BaselineGapMS, res.BaselineAcks)
	fmt.Fprintf(&b, "%-30s %-8s %-16s %9s %9s %9s %10s %6s %s\n", "step", "role", "binary", "stop", "rejoin", "took", "max gap", "acks", "primary after")
	for _, s := range res.Steps {
		role, bin, stop, rejoin := s.Role, "-", "-", "-"
		if role == "" {
			role = "-"
		}
		if s.From != "" {
			bin = s.From + "->" + s.To
			stop, rejoin = fmt.Sprintf("%.0fms", s.StopMS), fmt.Sprintf("%.0fms", s.RejoinMS)
		}
		mark := ""
		if s.MaxGapMS > res.TargetGapMS {
			mark = fmt.Sprintf(" (over the %.0f ms target)", res.TargetGapMS)
		}
		fmt.Fprintf(&b, "%-30s %-8s %-16s %9s %9s %7.0fms %8.0fms %6d %s%s\n",
			s.Name, role, bin, stop, rejoin, s.TookMS, s.MaxGapMS, s.Acks, s.PrimaryAfter, mark)
	}
	keys := make([]string, 0, len(res.Errors))
	for k := range res.Errors {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []string
	for _, k := range keys {
		errs = append(errs, fmt.Sprintf("%s %d", k, res.Errors[k]))
	}
	fmt.Fprintf(&b, "acknowledged %d mutations, final index %d; errors (retried with new paths): %s; scenario %.1fs",
		res.Acked, res.FinalIndex, strings.Join(errs, ", "), res.ScenarioS)
	return b.String()
}

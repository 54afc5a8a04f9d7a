package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/roomlog/roomlog/logroom"
)

// ---- re-seed from data dirs on several hosts ----
//
// A re-seed reads every survivor's store, so 'reseed --from' needs every
// data dir on the host running it. Across hosts: 'roomlog inspect DATADIR
// --export FILE' on each host writes a summary of its stopped data dir
// (a few hundred bytes: host, dir, room, incarnation, applied position);
// the operator copies the files to one place, and 'roomlog reseed ROOM
// --from-summaries FILE,...' (no ZooKeeper, writes nothing) chooses the
// seed as a re-seed would (highest epoch, then index), classifies each
// other survivor against it where the summaries can tell (same position:
// adopted; a lower index: it bootstraps, its data dir moved away; same
// index, another batch or hash: disagrees), and says which host's data
// dir to re-seed from and the command to run there. That run checks the
// seed's own store again; the others rejoin as the plan says (a member at
// exactly the seed's position adopts the re-seeded room by itself:
// replica package doc, "Disaster recovery").

// summaryVersion is the format of an exported summary.
const summaryVersion = 1

// dataDirSummary is what 'inspect --export' writes.
type dataDirSummary struct {
	V        int            `json:"v"`
	Host     string         `json:"host"`
	Dir      string         `json:"dir"` // absolute
	Marker   *inspectMarker `json:"marker"`
	Diverged string         `json:"diverged,omitempty"`
	Applied  uint64         `json:"applied"`
	Epoch    uint64         `json:"epoch"`
	Batch    string         `json:"batch"`
	RunHash  string         `json:"run_hash"`
	HashBase uint64         `json:"run_hash_base"`
	// File is where it was read from (not exported).
	File string `json:"-"`
}

func exportSummary(path string, out inspectOut) error {
	host, _ := os.Hostname()
	dir, err := filepath.Abs(out.Dir)
	if err != nil {
		dir = out.Dir
	}
	b, err := json.MarshalIndent(dataDirSummary{V: summaryVersion, Host: host, Dir: dir, Marker: out.Marker, Diverged: out.Diverged,
		Applied: out.Applied, Epoch: out.Epoch, Batch: out.Batch, RunHash: out.RunHash, HashBase: out.HashBase}, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("--export: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("--export: %w", err)
	}
	return nil
}

// summaryPlanned is one survivor in a --from-summaries plan.
type summaryPlanned struct {
	Host    string `json:"host"`
	Dir     string `json:"dir"`
	File    string `json:"file"`
	Applied uint64 `json:"applied"`
	Epoch   uint64 `json:"epoch"`
	Role    string `json:"role"` // seed, adopted, bootstrap, disagrees
	Action  string `json:"action"`
}

// summaryPlan is what 'reseed --from-summaries' prints.
type summaryPlan struct {
	Room      string           `json:"room"`
	SeedHost  string           `json:"seed_host"`
	SeedDir   string           `json:"seed_dir"`
	Index     uint64           `json:"index"`
	Epoch     uint64           `json:"epoch"`
	Command   string           `json:"command"` // to run on the seed's host
	Survivors []summaryPlanned `json:"survivors"`
}

// planFromSummaries reads the summary files and plans the re-seed of room
// under base. A refusal (a summary of another room, a diverged data dir,
// survivors that disagree) is an error naming them.
func planFromSummaries(base, room string, files []string, extraArgs []string) (summaryPlan, error) {
	var sums []dataDirSummary
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return summaryPlan{}, usageError{Err: fmt.Errorf("--from-summaries: %w", err)}
		}
		var s dataDirSummary
		if err := json.Unmarshal(b, &s); err != nil || s.V != summaryVersion || s.Dir == "" {
			if err == nil {
				err = fmt.Errorf("format version %d, dir %q", s.V, s.Dir)
			}
			return summaryPlan{}, usageError{Err: fmt.Errorf("--from-summaries: %s is not a summary 'roomlog inspect --export' wrote: %v", f, err)}
		}
		if s.Marker == nil || s.Marker.Room != room || s.Marker.Base != base {
			what := "no member marker"
			if s.Marker != nil {
				what = "room " + s.Marker.Base + "/" + s.Marker.Room
			}
			return summaryPlan{}, fmt.Errorf("%w: %s (%s:%s) holds %s, not %s/%s", errRefused, f, s.Host, s.Dir, what, base, room)
		}
		if s.Diverged != "" {
			return summaryPlan{}, fmt.Errorf("%w: %s (%s:%s) is marked diverged (%s): leave it out", errRefused, f, s.Host, s.Dir, s.Diverged)
		}
		s.File = f
		sums = append(sums, s)
	}
	if len(sums) == 0 {
		return summaryPlan{}, usageError{Err: fmt.Errorf("--from-summaries: no summary given")}
	}
	sort.SliceStable(sums, func(i, j int) bool {
		if sums[i].Epoch != sums[j].Epoch {
			return sums[i].Epoch > sums[j].Epoch
		}
		return sums[i].Applied > sums[j].Applied
	})
	seed := sums[0]
	if seed.Applied == 0 {
		return summaryPlan{}, fmt.Errorf("%w: no survivor applied anything", errRefused)
	}
	plan := summaryPlan{Room: room, SeedHost: seed.Host, SeedDir: seed.Dir, Index: seed.Applied, Epoch: seed.Epoch}
	var bad []string
	for i, s := range sums {
		p := summaryPlanned{Host: s.Host, Dir: s.Dir, File: s.File, Applied: s.Applied, Epoch: s.Epoch}
		switch {
		case i == 0:
			p.Role, p.Action = "seed", "run the re-seed on this host, from this data dir (the command below), then start its member first"
		case s.Applied == seed.Applied && s.Batch == seed.Batch && s.RunHash == seed.RunHash && s.HashBase == seed.HashBase &&
			s.Marker.RoomCzxid == seed.Marker.RoomCzxid:
			p.Role, p.Action = "adopted", "at the seed's position, of the seed's incarnation: start its member after the seed's; it adopts the re-seeded room"
		case s.Applied == seed.Applied && s.Batch == seed.Batch && s.RunHash == seed.RunHash && s.HashBase == seed.HashBase:
			p.Role, p.Action = "bootstrap", "at the seed's position but of another incarnation ("+s.Marker.RoomCzxid+"): move its data dir away before starting its member; it bootstraps from a peer's checkpoint"
		case s.Applied == seed.Applied || (s.Applied > seed.Applied):
			p.Role, p.Action = "disagrees", "another history at the seed's index: leave it out (move its data dir away)"
			bad = append(bad, fmt.Sprintf("%s:%s (index %d, epoch %d, batch %s, hash %s) and the seed %s:%s (batch %s, hash %s)",
				s.Host, s.Dir, s.Applied, s.Epoch, s.Batch, s.RunHash, seed.Host, seed.Dir, seed.Batch, seed.RunHash))
		default:
			p.Role, p.Action = "bootstrap", "behind the seed: move its data dir away before starting its member; it bootstraps from a peer's checkpoint"
		}
		plan.Survivors = append(plan.Survivors, p)
	}
	if len(bad) > 0 {
		return plan, fmt.Errorf("%w: the survivors do not share one history at the seed's index: %s; run 'roomlog reseed' with --trust on the host of the one to keep",
			errRefused, strings.Join(bad, "; "))
	}
	cmd := []string{"roomlog", "reseed", room, "--from", shellQuote(seed.Dir)}
	if base != logroom.DefaultBase {
		cmd = append(cmd, "--base", shellQuote(base))
	}
	cmd = append(cmd, extraArgs...)
	plan.Command = strings.Join(cmd, " ")
	return plan, nil
}

func shellQuote(s string) string {
	if s != "" && strings.IndexFunc(s, func(r rune) bool {
		return !(r == '/' || r == '.' || r == '-' || r == '_' || r == ':' || r == ',' || r == '=' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9'))
	}) < 0 {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

func printPlan(w io.Writer, plan summaryPlan) {
	fmt.Fprintf(w, "plan, nothing written: room %s re-seeds at index %d (epoch %d) from host %s, data dir %s\n",
		plan.Room, plan.Index, plan.Epoch, plan.SeedHost, plan.SeedDir)
	for _, s := range plan.Survivors {
		fmt.Fprintf(w, "  %-9s %s:%s  index %d epoch %d  (%s): %s\n", s.Role, s.Host, s.Dir, s.Applied, s.Epoch, s.File, s.Action)
	}
	if plan.Command != "" {
		fmt.Fprintf(w, "on %s, with every member stopped, run:\n  %s\n", plan.SeedHost, plan.Command)
	}
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReseedFromSummaries: 'reseed --from-summaries' plans a re-seed of
// data dirs on several hosts from their 'inspect --export' summaries,
// without ZooKeeper (--zk names no server) and writing nothing: the seed
// is the highest (epoch, index); one at its position is adopted, one
// behind bootstraps; the plan names the seed's host and dir and the
// command to run there. Survivors of another history at the seed's
// index, another room, a diverged data dir or a file that is no summary
// are refused by name.
func TestReseedFromSummaries(t *testing.T) {
	dir := t.TempDir()
	m := &inspectMarker{Base: "/roomlog", Room: "ns1", RoomCzxid: "0x10"}
	write := func(name string, s dataDirSummary) string {
		s.V = summaryVersion
		if s.Marker == nil {
			s.Marker = m
		}
		b, err := json.Marshal(s)
		require.NoError(t, err)
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, b, 0o644))
		return p
	}
	a := write("a.json", dataDirSummary{Host: "hostA", Dir: "/data/a", Applied: 90, Epoch: 3, Batch: "81+10 crc 1", RunHash: "h90", HashBase: 0})
	b := write("b.json", dataDirSummary{Host: "hostB", Dir: "/data/b", Applied: 120, Epoch: 4, Batch: "111+10 crc 2", RunHash: "h120"})
	c := write("c.json", dataDirSummary{Host: "hostC", Dir: "/data/my b", Applied: 120, Epoch: 4, Batch: "111+10 crc 2", RunHash: "h120"})
	nozk := &cli{t: t, zk: "127.0.0.1:1", base: "/roomlog"}

	var plan summaryPlan
	nozk.json(&plan, "reseed", "ns1", "--from-summaries", strings.Join([]string{a, b, c}, ","))
	require.Equal(t, "hostB", plan.SeedHost)
	require.Equal(t, "/data/b", plan.SeedDir)
	require.Equal(t, uint64(120), plan.Index)
	require.Equal(t, "roomlog reseed ns1 --from /data/b", plan.Command)
	roles := map[string]string{}
	for _, s := range plan.Survivors {
		roles[s.Host] = s.Role
	}
	require.Equal(t, map[string]string{"hostB": "seed", "hostC": "adopted", "hostA": "bootstrap"}, roles)
	text := nozk.ok("reseed", "ns1", "--from-summaries", a+","+b+","+c, "--force")
	require.Contains(t, text, "plan, nothing written: room ns1 re-seeds at index 120 (epoch 4) from host hostB, data dir /data/b")
	require.Contains(t, text, "on hostB, with every member stopped, run:\n  roomlog reseed ns1 --from /data/b --force")
	require.Contains(t, text, "move its data dir away")

	// Another history at the seed's index: refused, both named.
	d := write("d.json", dataDirSummary{Host: "hostD", Dir: "/data/d", Applied: 120, Epoch: 4, Batch: "111+10 crc 9", RunHash: "hX"})
	code, _, errs := nozk.run("reseed", "ns1", "--from-summaries", b+","+d)
	require.Equal(t, exitFail, code, errs)
	require.Contains(t, errs, "do not share one history")
	require.Contains(t, errs, "hostD:/data/d")
	require.Contains(t, errs, "--trust")

	// Another room, a diverged data dir, not a summary, with --from.
	other := write("o.json", dataDirSummary{Host: "hostO", Dir: "/data/o", Applied: 5, Epoch: 1, Marker: &inspectMarker{Base: "/roomlog", Room: "ns2"}})
	code, _, errs = nozk.run("reseed", "ns1", "--from-summaries", b+","+other)
	require.Equal(t, exitFail, code)
	require.Contains(t, errs, "holds room /roomlog/ns2, not /roomlog/ns1")
	div := write("x.json", dataDirSummary{Host: "hostX", Dir: "/data/x", Applied: 500, Epoch: 9, Diverged: "diverged at 400"})
	code, _, errs = nozk.run("reseed", "ns1", "--from-summaries", b+","+div)
	require.Equal(t, exitFail, code)
	require.Contains(t, errs, "is marked diverged")
	junk := filepath.Join(dir, "junk")
	require.NoError(t, os.WriteFile(junk, []byte("not json"), 0o644))
	code, _, errs = nozk.run("reseed", "ns1", "--from-summaries", junk)
	require.Equal(t, exitUsage, code)
	require.Contains(t, errs, "is not a summary 'roomlog inspect --export' wrote")
	code, _, errs = nozk.run("reseed", "ns1", "--from-summaries", b, "--from", "/data/b")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errs, "plans only")
}

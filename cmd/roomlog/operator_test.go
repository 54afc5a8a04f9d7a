package main

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/replica"
)

// TestOperatorCommands: 'roomlog checkpoint' makes the primary checkpoint
// now and prints its index; 'roomlog transfer' (no --to) hands over to
// the standby, waits until it leads and says how long it took; a target
// that is not a live member is refused before anything is written, a
// missing room exits 4. 'roomlog inspect' reads a stopped member's data
// dir without ZooKeeper and refuses a running member's ("is a member
// still running on it?").
func TestOperatorCommands(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	const base, room = "/ops", "r"
	dirs := map[string]string{}
	open := func(id string) *replica.Replica {
		dirs[id] = filepath.Join(t.TempDir(), id)
		r, err := replica.Open(testCtx(t, 30*time.Second), replica.Config{
			Servers: e.Addrs(), SessionTimeout: 2 * time.Second, Base: base, Room: room, ID: id,
			DataDir: dirs[id], ListenAddr: "127.0.0.1:0",
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = r.Close() })
		return r
	}
	a := open("a")
	waitRole(t, a, replica.RolePrimary)
	b := open("b")
	waitRole(t, b, replica.RoleStandby)
	ctx := testCtx(t, 2*time.Minute)
	var last uint64
	for i := range 10 {
		res, err := a.Propose(ctx, opsEntry(t, fmt.Sprintf("/k%d", i), "v"))
		require.NoError(t, err)
		last = res.Index
	}
	cl := newCLI(t, e, base)

	var ck requestOut
	cl.json(&ck, "checkpoint", room)
	require.Equal(t, "a", ck.By)
	require.GreaterOrEqual(t, ck.Index, last)
	require.Equal(t, ck.Index, a.Status().CheckpointIndex)

	code, _, errs := cl.run("transfer", room, "--to", "ghost")
	require.Equal(t, exitFail, code)
	require.Contains(t, errs, `"ghost" is not a live member`)
	code, _, errs = cl.run("transfer", "nosuch")
	require.Equal(t, exitNoRoom, code, errs)

	out := cl.ok("transfer", room)
	require.Regexp(t, `leadership transferred from a \(epoch \d+\) to b \(epoch \d+\) in `, out)
	require.Equal(t, replica.RolePrimary, b.Status().Role)
	res, err := b.Propose(ctx, opsEntry(t, "/after", "v"))
	require.NoError(t, err)
	require.Greater(t, res.Index, last)
	// The request znode does not outlive the command.
	_, ok, err := replica.ReadRequest(ctx, dialZK(t, e, nil), base, room)
	require.NoError(t, err)
	require.False(t, ok)

	// inspect: a running member's data dir is refused by name ...
	code, _, errs = cl.run("inspect", dirs["a"])
	require.Equal(t, exitFail, code)
	require.Contains(t, errs, "is a member still running on it?")
	// ... a stopped one is read without ZooKeeper.
	require.NoError(t, a.Close())
	var in inspectOut
	(&cli{t: t, zk: "127.0.0.1:1", base: base}).json(&in, "inspect", dirs["a"])
	require.NotNil(t, in.Marker)
	require.Equal(t, room, in.Marker.Room)
	require.GreaterOrEqual(t, in.Applied, last)
	require.NotEmpty(t, in.RunHash)
	require.NotEmpty(t, in.Ckpts)
	require.Equal(t, ck.Index, in.Ckpts[len(in.Ckpts)-1].Index)
	// --export: a summary that 'reseed --from-summaries' plans from.
	sum := filepath.Join(t.TempDir(), "a.json")
	nozk := &cli{t: t, zk: "127.0.0.1:1", base: base}
	require.Contains(t, nozk.ok("inspect", dirs["a"], "--export", sum), "summary written to "+sum)
	var plan summaryPlan
	nozk.json(&plan, "reseed", room, "--from-summaries", sum)
	abs, err := filepath.Abs(dirs["a"])
	require.NoError(t, err)
	require.Equal(t, abs, plan.SeedDir)
	require.Equal(t, in.Applied, plan.Index)
	require.Equal(t, "roomlog reseed r --from "+abs+" --base /ops", plan.Command)
	code, _, errs = cl.run("inspect", filepath.Join(t.TempDir(), "none"))
	require.Equal(t, exitUsage, code, errs)
}

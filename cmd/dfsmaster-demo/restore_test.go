package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/archive"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

// TestServeArchiveAndRestore: a master served with --archive archives its
// log; 'dfsmaster-demo restore' rebuilds the namespace at an earlier index
// with the namespace applier, at the state hash the master had there.
func TestServeArchiveAndRestore(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	dir := t.TempDir()
	archDir := filepath.Join(dir, "archive")
	m := openTestMaster(t, ens, "archive-demo", "m1", dir, func(c *serveConfig) { c.ArchiveDir = archDir })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := client.New(m.Addr(), nil)
	require.NoError(t, err)
	require.Eventually(t, func() bool { _, err := c.Mkdir(ctx, "/a", false); return err == nil }, 30*time.Second, 20*time.Millisecond)
	for i := range 20 {
		_, err := c.Mkdir(ctx, fmt.Sprintf("/a/d%d", i), false)
		require.NoError(t, err)
	}
	mid, err := c.Hash(ctx, 0)
	require.NoError(t, err)
	for i := range 20 {
		_, err := c.Create(ctx, fmt.Sprintf("/a/d%d/f", i), 3)
		require.NoError(t, err)
	}
	require.NoError(t, m.rep.Checkpoint(ctx)) // seals the channel: archived
	require.Eventually(t, func() bool { return m.rep.ArchiveStatus().Index >= mid.AppliedIndex }, 20*time.Second, 10*time.Millisecond)

	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"restore", "--archive", archDir, "--room", "archive-demo", "--to-index", fmt.Sprint(mid.AppliedIndex),
		"--out", filepath.Join(dir, "restored")}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	var res struct {
		Index     uint64 `json:"index"`
		StateHash string `json:"state_hash"`
		Czxid     int64  `json:"room_czxid"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res))
	require.Equal(t, mid.AppliedIndex, res.Index)
	require.Equal(t, mid.Hash, res.StateHash)

	// --incarnation names the room incarnation (needed when the archive
	// holds several); one the archive does not hold is refused by name.
	stdout.Reset()
	code = run(ctx, []string{"restore", "--archive", archDir, "--room", "archive-demo", "--incarnation", fmt.Sprintf("0x%x", res.Czxid),
		"--to-index", fmt.Sprint(mid.AppliedIndex), "--out", filepath.Join(dir, "restored2")}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	stderr.Reset()
	code = run(ctx, []string{"restore", "--archive", archDir, "--room", "archive-demo", "--incarnation", fmt.Sprintf("0x%x", res.Czxid+1),
		"--to-index", fmt.Sprint(mid.AppliedIndex), "--out", filepath.Join(dir, "restored3")}, &stdout, &stderr)
	require.Equal(t, exitError, code)
	require.Contains(t, stderr.String(), fmt.Sprintf("0x%x", res.Czxid+1))
}

// TestRestoreRefusesForeignEntries: 'dfsmaster-demo restore' of an archive
// whose entries are not namespace commands (a room of store.OpsApplier)
// fails naming the first such entry's index, and builds no store; with
// --allow-rejected it applies them as the masters would (rejected) and
// counts them.
func TestRestoreRefusesForeignEntries(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	a, err := archive.OpenDir(dir)
	require.NoError(t, err)
	origin := archive.Origin{Room: "dfs", RoomCzxid: 0x42, Fence: logroom.EpochZnode}
	var ents [][]byte
	for i := range 4 {
		op, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte(fmt.Sprint("k", i)), Value: []byte("v")}})
		require.NoError(t, err)
		ents = append(ents, op)
	}
	data, err := logroom.EncodeBatch(1, 1, ents)
	require.NoError(t, err)
	_, err = a.PutChannel(ctx, archive.Channel{Origin: origin, Num: 1, First: 1, Last: 4, Epoch: 1,
		Batches: []archive.Batch{{Data: data, Ctime: 1}}})
	require.NoError(t, err)

	out := filepath.Join(t.TempDir(), "data")
	var stdout, stderr bytes.Buffer
	code := run(ctx, []string{"restore", "--archive", dir, "--to-index", "4", "--out", out}, &stdout, &stderr)
	require.Equal(t, exitError, code, stdout.String())
	require.Contains(t, stderr.String(), "index 1")
	require.Contains(t, stderr.String(), "channel 1")
	require.Contains(t, stderr.String(), "not a namespace command")
	_, err = os.Stat(filepath.Join(out, archive.StoreDirName))
	require.True(t, os.IsNotExist(err), "no store left")

	stdout.Reset()
	code = run(ctx, []string{"restore", "--archive", dir, "--to-index", "4", "--out", out, "--allow-rejected"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	var res struct {
		Index    uint64 `json:"index"`
		Rejected uint64 `json:"rejected"`
	}
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &res))
	require.EqualValues(t, 4, res.Index)
	require.EqualValues(t, 4, res.Rejected)
}

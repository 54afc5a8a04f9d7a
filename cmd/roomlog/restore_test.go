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
	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

// archiveOf writes a log of n entries (batches of 4, a channel per 25
// entries, a checkpoint at 50) to a new archive and returns its directory
// and the state hash a member had at want.
func archiveOf(t *testing.T, n int, want uint64) (string, string) {
	t.Helper()
	return archiveWith(t, n, want, nil)
}

// archiveWith is archiveOf whose entries at the indexes in foreign are not
// ops (another applier's, which store.OpsApplier rejects).
func archiveWith(t *testing.T, n int, want uint64, foreign map[uint64]bool) (string, string) {
	t.Helper()
	ctx := context.Background()
	origin := archive.Origin{Room: "r1", RoomCzxid: 77, Fence: logroom.EpochZnode}
	dir := t.TempDir()
	a, err := archive.OpenDir(dir)
	require.NoError(t, err)
	st, err := store.Open(filepath.Join(t.TempDir(), "member"), nil)
	require.NoError(t, err)
	defer st.Close()
	var wantHash string
	ch := archive.Channel{Origin: origin, Num: 1, First: 1, Epoch: 1}
	for idx := uint64(1); idx <= uint64(n); idx += 4 {
		var ents [][]byte
		for i := idx; i < idx+4; i++ {
			op, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte(fmt.Sprint("k", i%7)), Value: []byte(fmt.Sprint(i))}})
			require.NoError(t, err)
			if foreign[i] {
				op = []byte(fmt.Sprintf("\x07another applier's command %d", i))
			}
			ents = append(ents, op)
			_, err = st.Apply([]store.Entry{{Index: i, Epoch: 1, Data: op}})
			require.NoError(t, err)
			if i == want {
				wantHash, _, err = st.StateHash()
				require.NoError(t, err)
			}
		}
		data, err := logroom.EncodeBatch(1, idx, ents)
		require.NoError(t, err)
		ch.Batches = append(ch.Batches, archive.Batch{Data: data, Ctime: time.UnixMilli(1e12).Add(time.Duration(idx) * time.Second).UnixMilli()})
		ch.Last = idx + 3
		if ch.Last%24 == 0 {
			_, err := a.PutChannel(ctx, ch)
			require.NoError(t, err)
			ch = archive.Channel{Origin: origin, Num: ch.Num + 1, First: ch.Last + 1, Epoch: 1}
		}
		if idx+3 == 48 {
			info, err := checkpoint.Create(ctx, st, filepath.Join(t.TempDir(), "ckpts"), origin.Checkpoint())
			require.NoError(t, err)
			_, err = a.PutCheckpoint(ctx, origin, info.Path)
			require.NoError(t, err)
		}
	}
	if len(ch.Batches) > 0 {
		_, err := a.PutChannel(ctx, ch)
		require.NoError(t, err)
	}
	return dir, wantHash
}

func TestRestoreCommand(t *testing.T) {
	dir, want := archiveOf(t, 100, 62)
	out := filepath.Join(t.TempDir(), "data")
	var stdout, stderr bytes.Buffer
	code := run([]string{"restore", "--archive", dir, "--room", "r1", "--to-index", "62", "--out", out, "--json"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	var j restoreJSON
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &j))
	require.EqualValues(t, 62, j.Index)
	require.EqualValues(t, 48, j.Checkpoint)
	require.Equal(t, want, j.StateHash)
	require.Equal(t, filepath.Join(out, "store"), j.StoreDir)
	_, err := os.Stat(filepath.Join(out, "roomlog-member.json"))
	require.True(t, os.IsNotExist(err), "restore writes no member marker")
	// The restored store opens at the index.
	st, err := store.Open(j.StoreDir, &store.Options{ReadOnly: true})
	require.NoError(t, err)
	require.EqualValues(t, 62, st.AppliedIndex())
	require.NoError(t, st.Close())

	// Not empty: refused.
	stdout.Reset()
	stderr.Reset()
	code = run([]string{"restore", "--archive", dir, "--room", "r1", "--to-index", "62", "--out", out}, &stdout, &stderr)
	require.Equal(t, exitFail, code)
	require.Contains(t, stderr.String(), "not empty")

	// Not covered: refused by name.
	stderr.Reset()
	code = run([]string{"restore", "--archive", dir, "--room", "r1", "--to-index", "101", "--out", t.TempDir()}, &stdout, &stderr)
	require.Equal(t, exitFail, code)
	require.Contains(t, stderr.String(), "not covered")

	// Usage errors.
	for _, args := range [][]string{
		{"restore", "--room", "r1", "--out", "x"},
		{"restore", "--archive", dir, "--room", "r1", "--out", "x", "--to-index", "3", "--to-time", "2020-01-01T00:00:00Z"},
		{"restore", "--archive", dir, "--room", "r1", "--out", "x", "--applier", "namespace"},
	} {
		stderr.Reset()
		require.Equal(t, exitUsage, run(args, &stdout, &stderr), "%q", args)
	}
}

func TestRestoreCommandToTimeAndCorruption(t *testing.T) {
	dir, want := archiveOf(t, 100, 40)
	var stdout, stderr bytes.Buffer
	// Batch 37..40 committed at 1e12 ms + 37 s.
	at := time.UnixMilli(1e12).Add(37*time.Second + 300*time.Millisecond).UTC().Format(time.RFC3339Nano)
	code := run([]string{"restore", "--archive", dir, "--room", "r1", "--to-time", at, "--out", t.TempDir(), "--json"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	var j restoreJSON
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &j))
	require.EqualValues(t, 40, j.Index)
	require.Equal(t, want, j.StateHash)
	require.False(t, j.Cut)

	// A time past every archived batch: the newest archived index, and
	// the output says the restore was cut back there.
	stdout.Reset()
	code = run([]string{"restore", "--archive", dir, "--room", "r1", "--to-time", time.Now().UTC().Format(time.RFC3339), "--out", t.TempDir()}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	require.Contains(t, stdout.String(), "at index 100")
	require.Contains(t, stdout.String(), "CUT BACK")
	require.Contains(t, stdout.String(), "not sealed and archived yet")

	items, err := filepath.Glob(filepath.Join(dir, "r1", "*", "ch-*"))
	require.NoError(t, err)
	require.NotEmpty(t, items)
	b, err := os.ReadFile(items[0])
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(items[0], b[:len(b)-3], 0o644))
	stderr.Reset()
	code = run([]string{"restore", "--archive", dir, "--room", "r1", "--to-index", "10", "--out", t.TempDir()}, &stdout, &stderr)
	require.Equal(t, exitFail, code)
	require.Contains(t, stderr.String(), items[0])
	require.Contains(t, stderr.String(), "corrupt")
}

// TestRestoreCommandRefusesEntriesItCannotApply: an archive whose entries
// after the checkpoint are not ops (a room whose members apply with
// another Applier, such as the demo namespace) is not restored with
// --applier ops: the restore fails naming the first such entry's index and
// its channel item, and leaves no store. --allow-rejected restores it the
// way members applying store.OpsApplier did (rejecting those entries) and
// says how many were rejected. Before, the entries were skipped, the
// command exited 0 and printed hashes of a store no member ever held.
func TestRestoreCommandRefusesEntriesItCannotApply(t *testing.T) {
	dir, _ := archiveWith(t, 100, 62, map[uint64]bool{53: true, 54: true, 70: true})
	out := filepath.Join(t.TempDir(), "data")
	var stdout, stderr bytes.Buffer
	code := run([]string{"restore", "--archive", dir, "--room", "r1", "--to-index", "80", "--out", out}, &stdout, &stderr)
	require.Equal(t, exitFail, code, stdout.String())
	require.Contains(t, stderr.String(), "index 53")
	require.Contains(t, stderr.String(), "channel 3")
	require.Contains(t, stderr.String(), filepath.Join(dir, "r1"))
	require.Contains(t, stderr.String(), "dfsmaster-demo restore")
	_, err := os.Stat(filepath.Join(out, "store"))
	require.True(t, os.IsNotExist(err), "a failed restore leaves no store")

	// Before the first such entry: fine.
	stderr.Reset()
	code = run([]string{"restore", "--archive", dir, "--room", "r1", "--to-index", "52", "--out", t.TempDir()}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())

	stdout.Reset()
	stderr.Reset()
	code = run([]string{"restore", "--archive", dir, "--room", "r1", "--to-index", "80", "--out", t.TempDir(), "--allow-rejected", "--json"}, &stdout, &stderr)
	require.Equal(t, exitOK, code, stderr.String())
	var j restoreJSON
	require.NoError(t, json.Unmarshal(stdout.Bytes(), &j))
	require.EqualValues(t, 80, j.Index)
	require.EqualValues(t, 3, j.Rejected)
	require.EqualValues(t, 53, j.FirstRejected)
}

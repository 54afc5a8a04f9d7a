package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
)

// TestReseedCommand: a room deleted under its (stopped) member is refused
// by the member by name; `roomlog reseed ROOM --from DIR` re-creates it,
// and the member reopens with every entry, the log continuing past it.
func TestReseedCommand(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	const base, room = "/rs", "ns1"
	dir := filepath.Join(t.TempDir(), "m0")
	cfg := replica.Config{Servers: e.Addrs(), SessionTimeout: 2 * time.Second, Base: base, Room: room, ID: "m0",
		DataDir: dir, ListenAddr: "127.0.0.1:0"}
	ctx := testCtx(t, 90*time.Second)
	r, err := replica.Open(ctx, cfg)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return r.Status().Role == replica.RolePrimary }, 30*time.Second, 10*time.Millisecond)
	var last uint64
	for i := 1; i <= 10; i++ {
		res, err := r.Propose(ctx, opsEntry(t, fmt.Sprintf("/dir/f%d", i), "inode"))
		require.NoError(t, err)
		last = res.Index
	}
	hash, _, err := r.StateHash()
	require.NoError(t, err)
	require.NoError(t, r.Close())

	c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: e.Addrs()})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, logroom.DeleteRoom(ctx, c, base, room))
	_, err = replica.Open(ctx, cfg)
	require.ErrorIs(t, err, replica.ErrRoomLost)

	cl := newCLI(t, e, base)
	code, _, errs := cl.run("reseed", room)
	require.Equal(t, exitUsage, code, "no --from: %s", errs)
	require.Contains(t, errs, "--from")

	marker := filepath.Join(dir, "roomlog-member.json")
	before, err := os.ReadFile(marker)
	require.NoError(t, err)
	var out reseedJSON
	cl.json(&out, "reseed", room, "--from", dir, "--session-timeout", "2s")
	require.Equal(t, last, out.Index)
	require.True(t, strings.HasPrefix(out.Previous, "a tombstone"), "the refusing member left a tombstone: %s", out.Previous)
	require.Len(t, out.Survivors, 1)
	require.Equal(t, "seed", out.Survivors[0].Role)

	// Interrupted before the marker was rewritten: a rerun finishes it
	// (it recognises its own re-seed) instead of refusing.
	require.NoError(t, os.WriteFile(marker, before, 0o644))
	var again reseedJSON
	cl.json(&again, "reseed", room, "--from", dir, "--session-timeout", "2s")
	require.Equal(t, out.Czxid, again.Czxid, "the same incarnation, not a new one")

	r, err = replica.Open(ctx, cfg)
	require.NoError(t, err)
	defer r.Close()
	require.Eventually(t, func() bool { return r.Status().Role == replica.RolePrimary }, 30*time.Second, 10*time.Millisecond)
	got, at, err := r.StateHash()
	require.NoError(t, err)
	require.Equal(t, hash, got)
	require.Equal(t, last, at)
	res, err := r.Propose(ctx, opsEntry(t, "/dir/after", "inode"))
	require.NoError(t, err)
	require.Equal(t, last+1, res.Index)

	// Run again on a healthy room: refused, nothing changed. The wait
	// for the member's nodes to go (two session timeouts) says what it
	// waits for, every few seconds, from 2 s on.
	code, _, errs = cl.run("reseed", room, "--from", dir)
	require.Equal(t, exitFail, code)
	require.Contains(t, errs, "member", "refused because the member runs: %s", errs)
	// From a stopped standby's data dir while the primary runs: the
	// re-seed waits for the live member's nodes to go (two session
	// timeouts), saying what it waits for every few seconds from 2 s on,
	// then refuses naming them.
	cfg1 := cfg
	cfg1.ID, cfg1.DataDir = "m1", filepath.Join(t.TempDir(), "m1")
	r1, err := replica.Open(ctx, cfg1)
	require.NoError(t, err)
	require.NoError(t, r1.WaitApplied(ctx, last+1))
	require.NoError(t, r1.Close())
	code, _, errs = cl.run("reseed", room, "--from", cfg1.DataDir, "--session-timeout", "2s")
	require.Equal(t, exitFail, code, errs)
	require.Contains(t, errs, "still has live nodes", errs)
	require.Regexp(t, `roomlog reseed: \d+s: waiting up to 4s for \d live node\(s\) of the old room to go .*members/m0`, errs)
}

// TestReseedDryRun: reseed --dry-run prints the seed and each survivor's
// role after the checks and writes nothing (the tombstone stays, the
// marker is unchanged, a real re-seed follows); --digest is refused, and
// the old environment names work with a deprecation warning.
func TestReseedDryRun(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	const base, room = "/rsdry", "ns1"
	dir := filepath.Join(t.TempDir(), "m0")
	cfg := replica.Config{Servers: e.Addrs(), SessionTimeout: 2 * time.Second, Base: base, Room: room, ID: "m0",
		DataDir: dir, ListenAddr: "127.0.0.1:0"}
	ctx := testCtx(t, 90*time.Second)
	r, err := replica.Open(ctx, cfg)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return r.Status().Role == replica.RolePrimary }, 30*time.Second, 10*time.Millisecond)
	res, err := r.Propose(ctx, opsEntry(t, "/dir/f", "inode"))
	require.NoError(t, err)
	require.NoError(t, r.Close())
	c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: e.Addrs()})
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, logroom.DeleteRoom(ctx, c, base, room))
	_, err = replica.Open(ctx, cfg)
	require.ErrorIs(t, err, replica.ErrRoomLost)
	marker := filepath.Join(dir, "roomlog-member.json")
	before, err := os.ReadFile(marker)
	require.NoError(t, err)

	cl := newCLI(t, e, base)
	var out reseedJSON
	cl.json(&out, "reseed", room, "--from", dir, "--session-timeout", "2s", "--dry-run")
	require.True(t, out.DryRun)
	require.Equal(t, res.Index, out.Index)
	require.Equal(t, dir, out.From)
	require.Empty(t, out.Czxid)
	require.Len(t, out.Survivors, 1)
	require.Equal(t, "seed", out.Survivors[0].Role)
	require.True(t, strings.HasPrefix(out.Previous, "a tombstone"), out.Previous)
	text := cl.ok("reseed", room, "--from", dir, "--session-timeout", "2s", "--dry-run")
	require.Contains(t, text, "dry run, nothing written")
	after, err := os.ReadFile(marker)
	require.NoError(t, err)
	require.Equal(t, before, after, "the marker is not rewritten")
	_, err = logroom.ReadRoomInfo(ctx, c, base, room)
	require.ErrorIs(t, err, logroom.ErrRoomLost, "the tombstone is still there")

	code, stdout, errs := cl.run("reseed", room, "--from", dir, "--digest", "u:pw")
	require.Equal(t, exitUsage, code)
	require.Empty(t, stdout)
	require.Contains(t, errs, "takes no password")

	// Old environment names: read, with a warning.
	file := filepath.Join(t.TempDir(), "digest")
	require.NoError(t, os.WriteFile(file, []byte("u:pw\n"), 0o600))
	t.Setenv("ROOMLOG_DIGEST_FILE", file)
	code, _, errs = cl.run("reseed", room, "--from", dir, "--session-timeout", "2s", "--dry-run")
	require.Equal(t, exitOK, code, errs)
	require.Contains(t, errs, "ROOMLOG_DIGEST_FILE is deprecated; set ROOMLOG_ZK_DIGEST_FILE instead")
	t.Setenv("ROOMLOG_DIGEST", "u:pw")
	code, _, errs = cl.run("reseed", room, "--from", dir, "--dry-run")
	require.Equal(t, exitUsage, code, errs)
	require.Contains(t, errs, "ROOMLOG_DIGEST is deprecated")
	require.Contains(t, errs, "give one")

	t.Setenv("ROOMLOG_DIGEST", "")
	t.Setenv("ROOMLOG_DIGEST_FILE", "")
	var real reseedJSON
	cl.json(&real, "reseed", room, "--from", dir, "--session-timeout", "2s")
	require.False(t, real.DryRun)
	require.NotEmpty(t, real.Czxid)
	require.Equal(t, out.Epoch, real.Epoch, "the dry run named the epoch the re-seed used")
}

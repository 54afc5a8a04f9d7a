package main

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/replica"
)

// TestReplicaRoom runs two real replicas and checks members (decoding the
// member data replica writes), checkpoints (the record and the URL a member
// serves it at), and that verify and dump read a room replica wrote.
func TestReplicaRoom(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	const base, room = "/rep", "ns1"
	open := func(id string) *replica.Replica {
		ctx := testCtx(t, 30*time.Second)
		r, err := replica.Open(ctx, replica.Config{
			Servers: e.Addrs(), SessionTimeout: 2 * time.Second, Base: base, Room: room, ID: id,
			DataDir: filepath.Join(t.TempDir(), id), ListenAddr: "127.0.0.1:0",
		})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, r.Close()) })
		return r
	}
	reps := []*replica.Replica{open("m0"), open("m1")}
	var primary *replica.Replica
	require.Eventually(t, func() bool {
		for _, r := range reps {
			if r.Status().Role == replica.RolePrimary {
				primary = r
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "a primary")
	ctx := testCtx(t, 60*time.Second)
	var last uint64
	for i := 1; i <= 10; i++ {
		res, err := primary.Propose(ctx, opsEntry(t, fmt.Sprintf("/dir/f%d", i), "inode"))
		require.NoError(t, err)
		last = res.Index
	}
	require.NoError(t, primary.Checkpoint(ctx))
	cl := newCLI(t, e, base)

	// Members publish their applied index at most every 100ms.
	var m membersOut
	require.Eventually(t, func() bool {
		m = membersOut{}
		cl.json(&m, "members", room)
		if len(m.Members) != 2 {
			return false
		}
		for _, row := range m.Members {
			if row.Applied < last {
				return false
			}
		}
		return true
	}, 20*time.Second, 10*time.Millisecond, "both members report the last index applied")
	roles := map[string]string{}
	for i, row := range m.Members {
		require.Equal(t, fmt.Sprintf("m%d", i), row.ID)
		require.Empty(t, row.Error)
		require.NotEmpty(t, row.Addr)
		require.NotEqual(t, "0x0", row.Session)
		roles[row.ID] = row.Role
		if row.ID == primary.ID() {
			require.Equal(t, 1, row.Election, "the primary is the lowest candidate")
			require.Equal(t, primary.Status().Epoch, row.Epoch)
		} else {
			require.Equal(t, 2, row.Election)
		}
	}
	require.Equal(t, "primary", roles[primary.ID()])
	text := cl.ok("members", room)
	require.Regexp(t, `(?m)^ID\s+ADDR\s+ROLE\s+EPOCH\s+APPLIED\s+CKPT\s+ELECTION\s+SESSION\s+NOTE$`, text)
	require.Regexp(t, `(?m)^`+primary.ID()+`\s+127\.0\.0\.1:\d+\s+primary\s+\d+\s+\d+\s+\d+\s+1\s+0x[0-9a-f]+\s+-$`, text)

	var cp checkpointsOut
	require.Eventually(t, func() bool {
		cp = checkpointsOut{}
		cl.json(&cp, "checkpoints", room)
		for _, mc := range cp.Members {
			if mc.ID == primary.ID() && mc.Checkpoint > 0 {
				return true
			}
		}
		return false
	}, 20*time.Second, 10*time.Millisecond, "the primary's checkpoint in its member data")
	require.NotNil(t, cp.Record, "the primary records its checkpoint")
	require.Equal(t, primary.ID(), cp.Record.ID)
	require.GreaterOrEqual(t, cp.Record.Index, last)
	// The channel sealed for the checkpoint is covered, or already deleted.
	require.True(t, len(cp.Covered) > 0 || cp.OldestIndex > 1, "%+v", cp)
	// The URL is where the member really serves it.
	resp, err := http.Get(cp.Record.URL + "manifest")
	require.NoError(t, err)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, resp.Body.Close())
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s: %s", cp.Record.URL, body)
	var manifest struct{ Room string }
	require.NoError(t, json.Unmarshal(body, &manifest))
	require.Equal(t, room, manifest.Room)
	require.Contains(t, cl.ok("checkpoints", room), fmt.Sprintf("newest recorded checkpoint: index %d", cp.Record.Index))

	// The checkpoint lets the primary delete the channels it covers: the
	// entries proposed after it are those dump surely finds.
	after := map[uint64]string{}
	for i := 1; i <= 3; i++ {
		key := fmt.Sprintf("/after/f%d", i)
		res, err := primary.Propose(ctx, opsEntry(t, key, "inode"))
		require.NoError(t, err)
		after[res.Index] = key
	}
	require.Contains(t, cl.ok("verify", room), `OK room "ns1"`)
	// A quiet room: both members publish their running state hash at the
	// last index, and verify compares them.
	require.Eventually(t, func() bool {
		var v verifyOut
		cl.json(&v, "verify", room)
		return v.OK && v.Summary.HashesCompared == 2
	}, 20*time.Second, 50*time.Millisecond, "verify compares both members' running hashes")
	for _, d := range parseDump(t, cl.ok("dump", room)) {
		key, ok := after[d.Index]
		if !ok {
			continue
		}
		require.Len(t, d.Ops, 1, "dump decodes the replica's ops entry %d", d.Index)
		require.Equal(t, "set", d.Ops[0].Kind)
		require.Equal(t, key, *d.Ops[0].Key)
		require.Equal(t, "inode", *d.Ops[0].Value)
		delete(after, d.Index)
	}
	require.Empty(t, after, "entries dump did not show")
}

// TestCompareHashes: verify's comparison of the members' published running
// hashes: only members at the same index of chains with the same base
// compare; a difference is one fault naming the members, index and hashes.
func TestCompareHashes(t *testing.T) {
	mv := func(id, hash string, at, base uint64) replica.MemberView {
		v := replica.MemberView{Name: id, Decoded: true}
		v.ID, v.Hash, v.HashAt, v.HashBase = id, hash, at, base
		return v
	}
	rv := &roomView{name: "r", root: "/b/r", in: &inspector{base: "/b"}}
	var faults, warns []string
	fault := func(ch uint64, znode, format string, args ...any) {
		faults = append(faults, fmt.Sprintf(format, args...))
	}
	warn := func(ch uint64, znode, format string, args ...any) {
		warns = append(warns, fmt.Sprintf(format, args...))
	}
	v := replica.RoomView{Members: []replica.MemberView{
		mv("a", "h1", 10, 0), mv("b", "h1", 10, 0), mv("c", "h2", 10, 0),
		mv("d", "h9", 11, 0), // alone at its index
		mv("e", "h7", 10, 5), // another chain
	}}
	require.Equal(t, 3, compareHashes(v, rv, fault, warn))
	require.Len(t, faults, 1)
	require.Len(t, warns, 1)
	require.Contains(t, warns[0], "e from index 5")
	require.Contains(t, faults[0], "index 10")
	require.Contains(t, faults[0], "a, b has h1")
	require.Contains(t, faults[0], "c has h2")

	faults, warns = nil, nil
	v.Members = v.Members[:2]
	require.Equal(t, 2, compareHashes(v, rv, fault, warn))
	require.Empty(t, faults)
	require.Empty(t, warns)
}

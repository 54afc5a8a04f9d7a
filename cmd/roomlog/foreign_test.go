package main

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/replica"
)

// TestForeignMembership: znodes forged under members/ and election/ by a
// second client are shown as foreign by members (with the rule they
// break), reported by verify, not counted by rooms nor listed by
// checkpoints, and do not shift the real members' election places.
func TestForeignMembership(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	const base, room = "/frn", "ns1"
	open := func(id string) *replica.Replica {
		r, err := replica.Open(testCtx(t, 30*time.Second), replica.Config{
			Servers: e.Addrs(), SessionTimeout: 2 * time.Second, Base: base, Room: room, ID: id,
			DataDir: filepath.Join(t.TempDir(), id), ListenAddr: "127.0.0.1:0",
		})
		require.NoError(t, err)
		t.Cleanup(func() { require.NoError(t, r.Close()) })
		return r
	}
	m0 := open("m0")
	require.Eventually(t, func() bool { return m0.Status().Role == replica.RolePrimary }, 20*time.Second, 10*time.Millisecond, "m0 primary")
	open("m1")

	conn := dialZK(t, e, nil).Conn()
	pack := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		require.NoError(t, err)
		return b
	}
	world := zk.WorldACL(zk.PermAll)
	// The znodes replica/doc.go ("Znodes") documents, forged.
	members, election := base+"/"+room+"/members", base+"/"+room+"/election"
	zero := strings.Repeat("0", 32)
	forged := []struct {
		path   string
		data   []byte
		flags  int32
		acl    []zk.ACL
		reason string
	}{
		{members + "/evil", pack(map[string]any{"v": 1, "id": "evil", "addr": "10.255.0.1:9", "role": "primary", "epoch": uint64(1 << 40)}), 0, world, "not ephemeral"},
		{members + "/alias", pack(map[string]any{"v": 1, "id": "m0", "addr": "10.255.0.1:9", "role": "primary"}), zk.FlagEphemeral, world, `names member "m0"`},
		{members + "/noid", pack(map[string]any{"v": 1, "role": "primary"}), zk.FlagEphemeral, world, "no member id"},
		{members + "/locked", pack(map[string]any{"v": 1, "id": "locked"}), zk.FlagEphemeral, zk.DigestACL(zk.PermAll, "mallory", "pw"), "unreadable"},
		{election + "/c-" + zero + "-0000000000", pack(map[string]any{"v": 1, "id": "ghost", "addr": "10.255.0.1:9"}), 0, world, "not ephemeral"},
		{election + "/c-" + zero + "--000000001", pack(map[string]any{"v": 1, "id": "ghost", "addr": "10.255.0.1:9"}), zk.FlagEphemeral, world, "negative sequence"},
		{election + "/junk", []byte("x"), zk.FlagEphemeral, world, "not a sequential node name"},
	}
	for _, f := range forged {
		_, err := conn.Create(f.path, f.data, f.flags, f.acl)
		require.NoError(t, err, f.path)
	}

	cl := newCLI(t, e, base)
	var m membersOut
	cl.json(&m, "members", room)
	rows := map[string]memberRow{}
	for _, r := range m.Members {
		rows[r.ID] = r
	}
	require.Len(t, rows, 6, "%+v", m.Members)
	for i, id := range []string{"m0", "m1"} {
		r := rows[id]
		require.False(t, r.Foreign, "%s: %+v", id, r)
		require.Empty(t, r.Error, id)
		require.Equal(t, i+1, r.Election, "%s: the forged lower candidates do not count", id)
	}
	foreign := map[string]string{}
	for _, f := range m.Foreign {
		foreign[f.Path] = f.Reason
	}
	require.Len(t, foreign, len(forged), "%+v", m.Foreign)
	for _, f := range forged {
		require.Contains(t, foreign[f.path], f.reason, f.path)
		if strings.HasPrefix(f.path, members+"/") {
			r := rows[filepath.Base(f.path)]
			require.True(t, r.Foreign, "%+v", r)
			require.Contains(t, r.Error, f.reason)
			require.Zero(t, r.Election)
		}
	}

	text := cl.ok("members", room)
	require.Regexp(t, `(?m)^evil\s+10\.255\.0\.1:9\s+primary\s+.*\s0x0\s+FOREIGN \(ignored by replicas\): not ephemeral`, text)
	require.Regexp(t, `(?m)^m0\s+127\.0\.0\.1:\d+\s+primary\s+\d+\s+\d+\s+\d+\s+1\s+0x[0-9a-f]+\s+-$`, text)
	require.Contains(t, text, "FOREIGN election znode "+election+"/c-"+zero+"--000000001 (ignored by replicas): negative sequence")

	// verify: the log is fine (OK), every forgery is a warning by name.
	code, out, _ := cl.run("verify", room)
	require.Equal(t, exitOK, code, out)
	require.Contains(t, out, `OK room "ns1"`)
	for _, f := range forged {
		require.Regexp(t, `(?m)^WARN  room "ns1" znode `+regexp.QuoteMeta(f.path)+`: foreign znode, ignored by replicas \(.*`+regexp.QuoteMeta(f.reason), out)
	}
	var v verifyOut
	cl.json(&v, "verify", room)
	require.Equal(t, len(forged), v.Summary.Warnings, "%+v", v.Warnings)

	var rooms []roomRow
	cl.json(&rooms, "rooms")
	require.Len(t, rooms, 1)
	require.Equal(t, 2, rooms[0].Members, "rooms counts only accepted members")

	var cp checkpointsOut
	cl.json(&cp, "checkpoints", room)
	var ids []string
	for _, mc := range cp.Members {
		ids = append(ids, mc.ID)
	}
	require.Equal(t, []string{"m0", "m1"}, ids, fmt.Sprintf("%+v", cp.Members))
	require.Nil(t, cp.Record)
	require.Empty(t, cp.RecordError)

	// A malformed transfer record and checkpoint record: shown as such
	// (replicas ignore the one, the other is informational), never a crash.
	_, err := conn.Create(base+"/"+room+"/transfer", []byte("garbage"), zk.FlagEphemeral, world)
	require.NoError(t, err)
	ckpt := pack(map[string]any{"v": 2, "index": 7, "id": "m0"})
	if _, err := conn.Create(base+"/"+room+"/checkpoints", ckpt, 0, world); err != nil {
		require.ErrorIs(t, err, zk.ErrNodeExists)
		_, err = conn.Set(base+"/"+room+"/checkpoints", ckpt, -1)
		require.NoError(t, err)
	}
	m = membersOut{}
	cl.json(&m, "members", room)
	require.Nil(t, m.Transfer)
	require.Contains(t, m.TransferError, "does not decode")
	require.Contains(t, cl.ok("members", room), "leadership transfer record malformed: does not decode")
	cp = checkpointsOut{}
	cl.json(&cp, "checkpoints", room)
	require.Nil(t, cp.Record)
	require.Equal(t, "unknown format version 2", cp.RecordError)
	require.Contains(t, cl.ok("checkpoints", room), "checkpoint record unreadable: unknown format version 2")
}

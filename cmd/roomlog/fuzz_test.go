package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
)

// The tool shows znodes anybody with write access may have written: what
// it prints of them must never panic and must print. It decodes none of
// them itself (replica and logroom own the formats and fuzz their
// decoders); FuzzDecodeMember fuzzes the whole path of a member znode
// through replica.DescribeMemberZnode to the printed row. Seeds live in
// testdata/fuzz/<target>/ (ROOMLOG_WRITE_SEEDS=1 go test -run
// TestWriteFuzzSeeds regenerates them).

// mustMsgpack encodes v with sorted map keys (deterministic seeds).
func mustMsgpack(v any) []byte {
	var buf bytes.Buffer
	enc := msgpack.NewEncoder(&buf)
	enc.SetSortMapKeys(true)
	if err := enc.Encode(v); err != nil {
		panic(err)
	}
	return buf.Bytes()
}

func fuzzSeeds() map[string][][]byte {
	member := mustMsgpack(map[string]any{"v": 1, "id": "m0", "addr": "10.0.0.5:8080", "role": "primary", "epoch": 3, "applied": 1200, "ckpt": 1000})
	hostile := [][]byte{
		{},
		[]byte("garbage"),
		{0x81, 0xa2, 'i', 'd', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'}, // id: str32 of 4 GiB
		{0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 0x01},           // map32 of 4 Gi entries
		append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 64)...),
		mustMsgpack(map[string]any{"v": 1, "id": "a\tb\nc", "addr": "\x1b[31mred", "role": strings.Repeat("r", 300)}),
		mustMsgpack(map[string]any{"v": 1, "applied": -1, "ckpt": "x"}),
		mustMsgpack(map[string]any{"v": 2, "id": "future"}),
	}
	ops, _ := store.EncodeOps([]store.Op{
		{Kind: store.OpSet, Key: []byte("/dir/a"), Value: []byte("inode 7")},
		{Kind: store.OpDelete, Key: []byte{0xff, 0x00}},
		{Kind: store.OpDeleteRange, Key: []byte("a"), End: []byte("b")},
	})
	return map[string][][]byte{
		"FuzzDecodeMember": append([][]byte{
			member,
			member[:len(member)-3],
			mustMsgpack(map[string]any{"v": 1, "id": "m1", "addr": "h:1"}),
			mustMsgpack(map[string]any{"v": 1, "from": "m0", "to": "m1", "epoch": 3, "deadline": 1700000000000}),
			mustMsgpack(map[string]any{"v": 1, "index": 1000, "epoch": 3, "id": "m0", "addr": "http://h:1", "created": 1700000000000}),
		}, hostile...),
		"FuzzOpsView": {ops, ops[:len(ops)/2], []byte("raw entry"), {}, {0x92, 0x01, 0x90}},
	}
}

// renderMembers prints rows as the members command does and returns the
// output.
func renderMembers(t *testing.T, rows []memberRow) string {
	var out bytes.Buffer
	tb := newTable(&out, "ID", "ADDR", "ROLE", "EPOCH", "APPLIED", "CKPT", "ELECTION", "SESSION", "NOTE")
	for _, r := range rows {
		tb.row(r.ID, r.Addr, r.Role, u64(r.Epoch), u64(r.Applied), u64(r.Checkpoint), fmt.Sprint(r.Election), r.Session, r.Error)
	}
	if err := tb.flush(); err != nil {
		t.Fatal(err)
	}
	return out.String()
}

// FuzzDecodeMember classifies arbitrary bytes as the data of
// members/m0 (held by a session, and persistent) through replica's view,
// turns it into the members command's row and prints it: one line, and a
// row is either a live member named m0 or foreign with a reason.
func FuzzDecodeMember(f *testing.F) {
	for _, s := range fuzzSeeds()["FuzzDecodeMember"] {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, session := range []int64{0x1234, 0} {
			m := replica.DescribeMemberZnode("ns1", "/roomlog/ns1/members/m0", data, session)
			rows, memberForeign, electionForeign := memberRows(replica.RoomView{Room: "ns1", Members: []replica.MemberView{m},
				Foreign: foreignOf(m)})
			if len(rows) != 1 || len(electionForeign) != 0 {
				t.Fatalf("rows %+v, election foreign %+v", rows, electionForeign)
			}
			r := rows[0]
			if r.ID != "m0" {
				t.Fatalf("row named %q", r.ID)
			}
			if r.Foreign != (len(memberForeign) == 1) || r.Foreign == (r.Error == "") {
				t.Fatalf("row %+v, foreign %+v", r, memberForeign)
			}
			if session == 0 && !r.Foreign {
				t.Fatalf("a persistent member node accepted: %+v", r)
			}
			if len(r.Addr) > len(data) {
				t.Fatalf("address longer than the input")
			}
			if n := strings.Count(renderMembers(t, rows), "\n"); n != 2 {
				t.Fatalf("a member row printed as %d lines:\n%s", n-1, renderMembers(t, rows))
			}
			if _, err := json.Marshal(membersOut{Room: "ns1", Members: rows, Foreign: memberForeign}); err != nil {
				t.Fatalf("marshal: %v", err)
			}
		}
	})
}

// foreignOf is the Foreign list replica.ReadRoomView makes of m.
func foreignOf(m replica.MemberView) []replica.ForeignZnode {
	if m.Foreign == "" {
		return nil
	}
	return []replica.ForeignZnode{{Path: m.Path, Reason: m.Foreign}}
}

// FuzzOpsView renders arbitrary entries as dump does.
func FuzzOpsView(f *testing.F) {
	for _, s := range fuzzSeeds()["FuzzOpsView"] {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ops := opsView(data)
		e := dumpEntry{Index: 1, Data: data, Size: len(data), Ops: ops}
		line, err := json.Marshal(e)
		if err != nil {
			t.Fatalf("marshal: %v", err)
		}
		if bytes.ContainsAny(line, "\n") {
			t.Fatalf("a dump line holds a newline: %s", line)
		}
		for _, op := range ops {
			if (op.Key == nil) == (op.KeyB64 == nil) {
				t.Fatalf("op %+v: want exactly one of key, key_b64", op)
			}
		}
	})
}

func TestWriteFuzzSeeds(t *testing.T) {
	if os.Getenv("ROOMLOG_WRITE_SEEDS") != "1" {
		t.Skip("set ROOMLOG_WRITE_SEEDS=1 to regenerate testdata/fuzz")
	}
	for target, seeds := range fuzzSeeds() {
		dir := filepath.Join("testdata", "fuzz", target)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		for i, s := range seeds {
			content := fmt.Sprintf("go test fuzz v1\n[]byte(%q)\n", s)
			require.NoError(t, os.WriteFile(filepath.Join(dir, fmt.Sprintf("seed-%02d", i)), []byte(content), 0o644))
		}
	}
}

func TestOpsViewAndPrintable(t *testing.T) {
	ops, err := store.EncodeOps([]store.Op{
		{Kind: store.OpSet, Key: []byte("/a"), Value: []byte{}},
		{Kind: store.OpDelete, Key: []byte{0xff, 0x01}},
		{Kind: store.OpDeleteRange, Key: []byte("a"), End: []byte("b\x00")},
	})
	require.NoError(t, err)
	v := opsView(ops)
	require.Len(t, v, 3)
	require.Equal(t, "/a", *v[0].Key)
	require.NotNil(t, v[0].Value, "an empty value is still shown")
	require.Equal(t, "", *v[0].Value)
	require.Nil(t, v[1].Key)
	require.Equal(t, []byte{0xff, 0x01}, v[1].KeyB64)
	require.Equal(t, "delete-range", v[2].Kind)
	require.Equal(t, []byte("b\x00"), v[2].EndB64)
	line, err := json.Marshal(v[1])
	require.NoError(t, err)
	require.JSONEq(t, `{"kind":"delete","key_b64":"/wE="}`, string(line))

	require.Nil(t, opsView([]byte("raw")))
	bad, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: nil}})
	if err == nil {
		require.Nil(t, opsView(bad), "an invalid op is not shown as ops")
	}
	require.True(t, printable([]byte("héllo wörld")))
	require.False(t, printable([]byte("a\nb")))
	require.False(t, printable([]byte{0xff}))
}

// TestDecodeHostile: member znodes whose data promise far more than they
// carry, nest deeply or are no msgpack at all are shown as foreign rows
// with the reason replicas ignore them, allocating memory linear in the
// input only. (replica and logroom test their decoders the same way.)
func TestDecodeHostile(t *testing.T) {
	inputs := map[string][]byte{
		"hugeString":  {0x81, 0xa2, 'i', 'd', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'},
		"hugeBin":     {0x81, 0xa1, 'x', 0xc6, 0xff, 0xff, 0xff, 0xff, 'x'},
		"hugeExt":     {0x81, 0xa1, 'x', 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01, 'x'},
		"hugeMap":     {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 0x01},
		"hugeArray":   {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01},
		"nestedMap":   {0x81, 0xa1, 'x', 0x81, 0xa1, 'y', 0x01},
		"trailing":    append(mustMsgpack(map[string]any{"v": 1, "id": "m0"}), 0xc0),
		"deepNesting": append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 1<<20)...),
		"garbage":     []byte("garbage"),
		"empty":       {},
	}
	for name, input := range inputs {
		t.Run(name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			m := replica.DescribeMemberZnode("ns1", "/roomlog/ns1/members/m0", input, 0x1234)
			rows, memberForeign, _ := memberRows(replica.RoomView{Room: "ns1", Members: []replica.MemberView{m}, Foreign: foreignOf(m)})
			runtime.ReadMemStats(&after)
			require.Len(t, rows, 1)
			require.True(t, rows[0].Foreign, "%+v", rows[0])
			require.NotEmpty(t, rows[0].Error)
			require.Equal(t, []foreignZnode{{Path: "/roomlog/ns1/members/m0", Reason: rows[0].Error}}, memberForeign)
			allocated := after.TotalAlloc - before.TotalAlloc
			require.Less(t, allocated, uint64(64<<10+16*len(input)), "%d input bytes allocated %d", len(input), allocated)
		})
	}
	// What a real replica writes is a live member.
	m := replica.DescribeMemberZnode("ns1", "/roomlog/ns1/members/m0", mustMsgpack(map[string]any{
		"v": 1, "id": "m0", "addr": "10.0.0.5:8080", "role": "primary", "epoch": uint64(1 << 40), "applied": uint64(1 << 62), "ckpt": 7,
		"catch_up": 9}), 0x1234)
	rows, memberForeign, _ := memberRows(replica.RoomView{Room: "ns1", Members: []replica.MemberView{m}})
	require.Empty(t, memberForeign)
	require.Equal(t, memberRow{ID: "m0", Addr: "10.0.0.5:8080", Role: "primary", Epoch: 1 << 40, Applied: 1 << 62, Checkpoint: 7,
		Session: "0x1234"}, rows[0])
}

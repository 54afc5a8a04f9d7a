package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/roomlog/roomlog/store"
)

// The tool decodes znodes anybody with write access may have written: its
// decoders must never panic, and what they accept must print. Seeds live
// in testdata/fuzz/<target>/ (ROOMLOG_WRITE_SEEDS=1 go test -run
// TestWriteFuzzSeeds regenerates them).

func mustMsgpack(v any) []byte {
	b, err := msgpack.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

func fuzzSeeds() map[string][][]byte {
	member := mustMsgpack(memberData{V: 1, ID: "m0", Addr: "10.0.0.5:8080", Role: "primary", Epoch: 3, Applied: 1200, Checkpoint: 1000})
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
			mustMsgpack(candidateData{V: 1, ID: "m1", Addr: "h:1"}),
			mustMsgpack(transferRecord{V: 1, From: "m0", To: "m1", Epoch: 3, Deadline: 1700000000000}),
			mustMsgpack(checkpointRecord{V: 1, Index: 1000, Epoch: 3, ID: "m0", Addr: "http://h:1", Created: 1700000000000}),
		}, hostile...),
		"FuzzOpsView": {ops, ops[:len(ops)/2], []byte("raw entry"), {}, {0x92, 0x01, 0x90}},
	}
}

// FuzzDecodeMember decodes arbitrary bytes as every replica znode format
// the tool reads (member data, election candidate, transfer record,
// checkpoint record) and renders what decodes.
func FuzzDecodeMember(f *testing.F) {
	for _, s := range fuzzSeeds()["FuzzDecodeMember"] {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		check := func(err error) bool {
			if err != nil && !errors.Is(err, errFormat) {
				t.Fatalf("error without errFormat: %v", err)
			}
			return err == nil
		}
		if m, err := decodeMember(data); check(err) {
			if m.V != formatVersion {
				t.Fatalf("accepted version %d", m.V)
			}
			if len(m.ID)+len(m.Addr)+len(m.Role) > len(data) {
				t.Fatalf("strings longer than the input")
			}
			var again memberData
			if err := msgpack.Unmarshal(mustMsgpack(m), &again); err != nil || again != m {
				t.Fatalf("round trip %+v -> %+v: %v", m, again, err)
			}
			var out bytes.Buffer
			tb := newTable(&out, "ID", "ADDR", "ROLE")
			tb.row(m.ID, m.Addr, m.Role)
			if err := tb.flush(); err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(out.String(), "\n"); n != 2 {
				t.Fatalf("a member row printed as %d lines:\n%s", n, out.String())
			}
		}
		if c, err := decodeCandidate(data); check(err) && c.V != formatVersion {
			t.Fatalf("accepted version %d", c.V)
		}
		if tr, err := decodeTransfer(data); check(err) {
			_ = formatTime(tr.Deadline)
		}
		if r, err := decodeCheckpointRecord(data); check(err) {
			_ = formatTime(r.Created)
			_ = checkpointURL(r.Addr, "room")
		}
		if m, err := decodeChannelMeta(data); check(err) && (m.First == 0 || (m.Sealed && m.Last+1 < m.First)) {
			t.Fatalf("accepted channel meta %+v", m)
		}
	})
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

// TestDecodeHostile: the tool's decoders refuse inputs whose headers promise
// far more than they carry, containers and deep nesting with errFormat,
// allocating memory linear in the input only.
func TestDecodeHostile(t *testing.T) {
	inputs := map[string][]byte{
		"hugeString":  {0x81, 0xa2, 'i', 'd', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'},
		"hugeBin":     {0x81, 0xa1, 'x', 0xc6, 0xff, 0xff, 0xff, 0xff, 'x'},
		"hugeExt":     {0x81, 0xa1, 'x', 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01, 'x'},
		"hugeMap":     {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 0x01},
		"hugeArray":   {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01},
		"nestedMap":   {0x81, 0xa1, 'x', 0x81, 0xa1, 'y', 0x01},
		"trailing":    append(mustMsgpack(memberData{V: 1, ID: "m0"}), 0xc0),
		"deepNesting": append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 1<<20)...),
	}
	decoders := map[string]func([]byte) error{
		"member":     func(b []byte) error { _, err := decodeMember(b); return err },
		"candidate":  func(b []byte) error { _, err := decodeCandidate(b); return err },
		"transfer":   func(b []byte) error { _, err := decodeTransfer(b); return err },
		"checkpoint": func(b []byte) error { _, err := decodeCheckpointRecord(b); return err },
		"channel":    func(b []byte) error { _, err := decodeChannelMeta(b); return err },
		"epoch":      func(b []byte) error { _, err := decodeEpochMeta(b); return err },
		"room":       func(b []byte) error { _, err := decodeRoomMeta(b); return err },
	}
	for iname, input := range inputs {
		for dname, decode := range decoders {
			t.Run(dname+"/"+iname, func(t *testing.T) {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				err := decode(input)
				runtime.ReadMemStats(&after)
				require.ErrorIs(t, err, errFormat)
				allocated := after.TotalAlloc - before.TotalAlloc
				require.Less(t, allocated, uint64(64<<10+16*len(input)), "%d input bytes allocated %d", len(input), allocated)
			})
		}
	}
	// What the real writers produce passes the check.
	for _, v := range []any{
		memberData{V: 1, ID: "m0", Addr: "10.0.0.5:8080", Role: "primary", Epoch: 1 << 40, Applied: 1 << 62, Checkpoint: 7},
		channelMeta{V: 1, First: 1, Epoch: 2, Sealed: true, Last: 9, Bytes: 1 << 33, Batches: 3, Deleting: true},
		checkpointRecord{V: 1, Index: 5, Created: -1},
	} {
		require.NoError(t, checkFlatMap(mustMsgpack(v)), "%+v", v)
	}
}

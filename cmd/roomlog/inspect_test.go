package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
)

// TestInspect builds rooms with logroom's Writer (rotation, a takeover, a
// deleted channel) and checks every command's output against what was
// written and what logroom itself reports.
func TestInspect(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	c := dialZK(t, e, nil)
	const base = "/inspect"
	main := buildRoom(t, c, base, "main", true)
	other := buildRoom(t, c, base, "other", false)
	cl := newCLI(t, e, base)
	ctx := testCtx(t, 60*time.Second)

	t.Run("rooms", func(t *testing.T) {
		out := cl.ok("rooms")
		lines := strings.Split(strings.TrimSpace(out), "\n")
		require.Len(t, lines, 3, out)
		require.Regexp(t, `^ROOM\s+CREATED\s+EPOCH\s+OWNER\s+CHANNELS\s+FIRST\s+MEMBERS$`, lines[0])
		require.Regexp(t, `^main\s+\S+\s+2\s+w2\s+3\s+13\s+0$`, lines[1])
		require.Regexp(t, `^other\s+\S+\s+2\s+w2\s+4\s+1\s+0$`, lines[2])
		var rows []roomRow
		cl.json(&rows, "rooms")
		require.Len(t, rows, 2)
		require.Equal(t, roomRow{Name: "main", Created: rows[0].Created, Epoch: 2, Owner: "w2", Channels: 3, FirstIndex: 13}, rows[0])
	})

	t.Run("channels", func(t *testing.T) {
		var out channelsOut
		cl.json(&out, "channels", "main")
		require.Equal(t, "main", out.Room)
		require.Equal(t, uint64(2), out.Epoch)
		infos, err := main.room.Channels(ctx)
		require.NoError(t, err)
		require.Len(t, out.Channels, len(infos))
		for i, ci := range infos {
			got := out.Channels[i]
			require.Equal(t, ci.Num, got.Num)
			require.Equal(t, ci.FirstIndex, got.First)
			require.Equal(t, ci.Sealed, got.Sealed)
			require.Equal(t, ci.Epoch, got.Epoch)
			if ci.Sealed {
				require.Equal(t, ci.LastIndex, got.Last)
				require.Equal(t, ci.Batches, got.Batches)
				require.Equal(t, ci.Bytes, got.Bytes)
			}
			require.Equal(t, got.Last-got.First+1, got.Entries)
		}
		open := out.Channels[len(out.Channels)-1]
		require.False(t, open.Sealed)
		committed, err := main.room.CommittedIndex(ctx, 0)
		require.NoError(t, err)
		require.Equal(t, committed, open.Last, "open channel's last index is the chain's end")
		require.Equal(t, uint64(34), open.Last)
		require.Len(t, batchFirsts(t, c.Conn(), main.room, open.Num), open.Batches)
		total, err := main.room.Bytes(ctx)
		require.NoError(t, err)
		var sum int64
		for _, ch := range out.Channels {
			sum += ch.Bytes
		}
		require.Equal(t, total, sum, "bytes agree with Room.Bytes")

		text := cl.ok("channels", "main")
		require.Contains(t, text, "room main  epoch 2  owner w2\n")
		require.Regexp(t, `(?m)^NUM\s+FIRST\s+LAST\s+SEALED\s+EPOCH\s+BATCHES\s+BYTES\s+ENTRIES\s+NOTE$`, text)
		require.Regexp(t, `(?m)^2\s+13\s+20\s+yes\s+1\s+8\s+\d+\s+8\s+-$`, text)
		require.Regexp(t, `(?m)^4\s+31\s+34\s+no \(open\)\s+2\s+\d+\s+\d+\s+4\s+-$`, text)
	})

	t.Run("dump matches Tail", func(t *testing.T) {
		code, out, errs := cl.run("dump", "main")
		require.Equal(t, exitOK, code, errs)
		got := parseDump(t, out)
		rd, err := main.room.Tail(ctx, 13)
		require.NoError(t, err)
		defer rd.Close()
		var want []logroom.Entry
		for len(want) < 22 {
			es, err := rd.Next(ctx)
			require.NoError(t, err)
			want = append(want, es...)
		}
		require.Len(t, got, len(want))
		for i, w := range want {
			g := got[i]
			require.Equal(t, w.Index, g.Index)
			require.Equal(t, w.Epoch, g.Epoch)
			require.Equal(t, w.Data, g.Data)
			require.Equal(t, main.entries[w.Index], g.Data)
			require.Equal(t, main.epochs[w.Index], g.Epoch)
			require.Equal(t, len(w.Data), g.Size)
			require.True(t, strings.HasPrefix(g.Znode, main.room.Path(logroom.ChannelsZnode, logroom.ChannelName(g.Channel))+"/b-"), g.Znode)
			if w.Index%3 == 0 {
				require.Len(t, g.Ops, 1, "index %d is an ops entry", w.Index)
				require.Equal(t, "set", g.Ops[0].Kind)
				require.Equal(t, fmt.Sprintf("k%03d", w.Index), *g.Ops[0].Key)
				require.Equal(t, fmt.Sprintf("v%d", w.Index), *g.Ops[0].Value)
			} else {
				require.Empty(t, g.Ops, "index %d is raw", w.Index)
			}
		}
		// The raw JSON carries data as base64.
		first := strings.SplitN(out, "\n", 2)[0]
		require.Contains(t, first, `"data":"cmF3LTAwMDEz"`) // raw-00013
	})

	t.Run("dump range", func(t *testing.T) {
		// 22..27: from the middle of a batch of channel 3 into the next.
		got := parseDump(t, cl.ok("dump", "other", "--from", "22", "--to", "27"))
		require.Len(t, got, 6)
		for i, g := range got {
			idx := uint64(22 + i)
			require.Equal(t, idx, g.Index)
			require.Equal(t, other.entries[idx], g.Data)
		}
		got = parseDump(t, cl.ok("dump", "other", "--from", "30"))
		require.Len(t, got, 5)
		require.Equal(t, uint64(34), got[4].Index)
		got = parseDump(t, cl.ok("dump", "other", "--to", "2", "--no-ops"))
		require.Len(t, got, 2)
		require.Equal(t, uint64(1), got[0].Index)
		got = parseDump(t, cl.ok("--from", "3", "--to", "3", "dump", "other"))
		require.Len(t, got, 1)
		require.NotEmpty(t, got[0].Ops)
		got = parseDump(t, cl.ok("dump", "other", "--from", "3", "--to", "3", "--no-ops"))
		require.Empty(t, got[0].Ops)

		code, out, errs := cl.run("dump", "other", "--from", "35")
		require.Equal(t, exitOK, code)
		require.Empty(t, out)
		require.Contains(t, errs, "no entries at or after index 35")
		code, _, errs = cl.run("dump", "main", "--from", "5")
		require.Equal(t, exitFail, code)
		require.Contains(t, errs, "index 5 of room \"main\" is no longer in ZooKeeper")
	})

	t.Run("verify clean", func(t *testing.T) {
		for _, name := range []string{"main", "other"} {
			out := cl.ok("verify", name)
			require.Regexp(t, `^OK room "`+name+`": \d+ channels, \d+ batches, entries (1|13)\.\.34, \d+ bytes, epoch 2, 0 members' state hashes compared; 0 warning\(s\)\n$`, out)
			var v verifyOut
			cl.json(&v, "verify", name)
			require.True(t, v.OK)
			require.Empty(t, v.Faults)
			require.Empty(t, v.Warnings)
			require.Equal(t, uint64(34), v.Summary.LastIndex)
		}
	})

	t.Run("members and checkpoints without replicas", func(t *testing.T) {
		var m membersOut
		cl.json(&m, "members", "main")
		require.Empty(t, m.Members)
		require.Regexp(t, `^ID\s+ADDR\s+ROLE`, cl.ok("members", "main"))
		var cp checkpointsOut
		cl.json(&cp, "checkpoints", "main")
		require.Nil(t, cp.Record)
		require.Equal(t, uint64(13), cp.OldestIndex)
		require.Contains(t, cl.ok("checkpoints", "main"), "no checkpoint recorded")
	})
}

func parseDump(t *testing.T, out string) []dumpEntry {
	t.Helper()
	var got []dumpEntry
	dec := json.NewDecoder(bytes.NewReader([]byte(out)))
	dec.DisallowUnknownFields()
	for dec.More() {
		var d dumpEntry
		require.NoError(t, dec.Decode(&d))
		got = append(got, d)
	}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if line != "" {
			require.True(t, json.Valid([]byte(line)), "one JSON object per line: %s", line)
		}
	}
	return got
}

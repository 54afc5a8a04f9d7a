package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
)

// The rooms these tests corrupt come from buildRoom (deleteFirst false):
//
//	ch-1  1..12  sealed, epoch 1, batches of 3 entries
//	ch-2  13..20 sealed, epoch 1, batches of 1
//	ch-3  21..30 sealed, epoch 2, batches of 2
//	ch-4  31..34 open,   epoch 2, batches of 2

func mustBatch(t *testing.T, epoch, first uint64, entries ...string) []byte {
	t.Helper()
	var es [][]byte
	for _, e := range entries {
		es = append(es, []byte(e))
	}
	data, err := logroom.EncodeBatch(epoch, first, es)
	require.NoError(t, err)
	return data
}

// editMeta rewrites channel num's meta with edit, which sets fields of
// the msgpack map logroom/doc.go documents (first, epoch, sealed, last,
// bytes, batches, deleting) as a foreign client would.
func editMeta(t *testing.T, conn *zk.Conn, r *logroom.Room, num uint64, edit func(map[string]any)) {
	t.Helper()
	data, st, err := conn.Get(chanPath(r, num))
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, msgpack.Unmarshal(data, &m))
	require.EqualValues(t, 1, m["v"], "channel meta format version")
	edit(m)
	data, err = msgpack.Marshal(m)
	require.NoError(t, err)
	_, err = conn.Set(chanPath(r, num), data, st.Version)
	require.NoError(t, err)
}

func flipLastByte(t *testing.T, conn *zk.Conn, path string) {
	t.Helper()
	data, st, err := conn.Get(path)
	require.NoError(t, err)
	data[len(data)-1] ^= 0x40
	_, err = conn.Set(path, data, st.Version)
	require.NoError(t, err)
}

func deleteTree(t *testing.T, conn *zk.Conn, path string) {
	t.Helper()
	names, _, err := conn.Children(path)
	require.NoError(t, err)
	for _, n := range names {
		require.NoError(t, conn.Delete(path+"/"+n, -1))
	}
	require.NoError(t, conn.Delete(path, -1))
}

func create(t *testing.T, conn *zk.Conn, path string, data []byte) {
	t.Helper()
	_, err := conn.Create(path, data, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
}

// TestVerifyFaults corrupts rooms one way each and checks that verify
// exits 1 naming room, channel and znode, that --json reports the same
// finding and, where a reader would meet the damage, that dump stops with
// an error naming the znode and logroom's own reader agrees (ErrCorrupt).
func TestVerifyFaults(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	c := dialZK(t, e, nil)
	conn := c.Conn()
	const base = "/verify"
	cl := newCLI(t, e, base)

	type corruption struct {
		name    string
		corrupt func(t *testing.T, r *logroom.Room) (channel uint64, znode string)
		message string // a substring of the finding
		// readerErr, when set: dump stops at the damage, and logroom's
		// Tail from index 1 fails with it.
		readerErr error
	}
	// dump (a read tool) still reads what is there in these cases; only
	// logroom's reader refuses the room.
	dumpReads := map[string]bool{"open channel deleted": true, "open channel deleted and re-created": true,
		"acknowledged batch deleted from the open channel": true}
	cases := []corruption{
		{"garbage at the next batch name", func(t *testing.T, r *logroom.Room) (uint64, string) {
			p := batchPath(r, 4, 35)
			create(t, conn, p, []byte("garbage, not a batch"))
			return 4, p
		}, "batch header", logroom.ErrCorrupt},
		{"flipped byte in a sealed channel's batch", func(t *testing.T, r *logroom.Room) (uint64, string) {
			p := batchPath(r, 2, batchFirsts(t, conn, r, 2)[3])
			flipLastByte(t, conn, p)
			return 2, p
		}, "checksum mismatch", logroom.ErrCorrupt},
		{"flipped byte in the open channel's batch", func(t *testing.T, r *logroom.Room) (uint64, string) {
			p := batchPath(r, 4, 33)
			flipLastByte(t, conn, p)
			return 4, p
		}, "checksum mismatch", logroom.ErrCorrupt},
		{"batch deleted from a sealed channel", func(t *testing.T, r *logroom.Room) (uint64, string) {
			p := batchPath(r, 3, 23)
			require.NoError(t, conn.Delete(p, -1))
			return 3, p
		}, "missing batch: entries 23..24 absent in a channel sealed at 30", logroom.ErrCorrupt},
		{"overlapping duplicate batch", func(t *testing.T, r *logroom.Room) (uint64, string) {
			p := batchPath(r, 1, 2)
			create(t, conn, p, mustBatch(t, 1, 2, "dup"))
			return 1, p
		}, "stray batch: index 2 is already covered", nil},
		{"batch of a foreign epoch", func(t *testing.T, r *logroom.Room) (uint64, string) {
			p := batchPath(r, 4, 35)
			create(t, conn, p, mustBatch(t, 7, 35, "x"))
			return 4, p
		}, "batch epoch 7 above the room's epoch 2", logroom.ErrCorrupt},
		{"epoch going backwards", func(t *testing.T, r *logroom.Room) (uint64, string) {
			p := batchPath(r, 4, 35)
			create(t, conn, p, mustBatch(t, 1, 35, "x"))
			return 4, p
		}, "batch epoch 1 below the previous batch's epoch 2", logroom.ErrCorrupt},
		{"empty batch", func(t *testing.T, r *logroom.Room) (uint64, string) {
			p := batchPath(r, 4, 35)
			create(t, conn, p, mustBatch(t, 2, 35))
			return 4, p
		}, "empty batch", logroom.ErrCorrupt},
		{"batch content disagrees with its name", func(t *testing.T, r *logroom.Room) (uint64, string) {
			p := batchPath(r, 4, 35)
			create(t, conn, p, mustBatch(t, 2, 36, "x"))
			return 4, p
		}, "batch holds first index 36, its name says 35", logroom.ErrCorrupt},
		{"garbage channel meta", func(t *testing.T, r *logroom.Room) (uint64, string) {
			p := chanPath(r, 2)
			_, err := conn.Set(p, []byte("junk"), -1)
			require.NoError(t, err)
			return 2, p
		}, "malformed znode data: channel meta", logroom.ErrCorrupt},
		{"sealed channel recording negative bytes", func(t *testing.T, r *logroom.Room) (uint64, string) {
			editMeta(t, conn, r, 2, func(m map[string]any) { m["bytes"] = -5 })
			return 2, chanPath(r, 2)
		}, "malformed znode data: channel meta: sealed with -5 bytes", nil},
		{"channel does not start after the previous one", func(t *testing.T, r *logroom.Room) (uint64, string) {
			editMeta(t, conn, r, 3, func(m map[string]any) { m["first"] = 22 })
			return 3, chanPath(r, 3)
		}, "channel first index 22, but channel 2 ends at 20 (want 21)", logroom.ErrCorrupt},
		{"sealed meta disagrees with its chain", func(t *testing.T, r *logroom.Room) (uint64, string) {
			editMeta(t, conn, r, 1, func(m map[string]any) { m["batches"] = channelInfo(t, r, 1).Batches + 1 })
			return 1, chanPath(r, 1)
		}, "channel meta records 5 batches", nil},
		{"open channel before the newest", func(t *testing.T, r *logroom.Room) (uint64, string) {
			editMeta(t, conn, r, 2, func(m map[string]any) { m["sealed"] = false })
			return 2, chanPath(r, 2)
		}, "channel is open but channel 4 follows it", logroom.ErrCorrupt},
		{"batch crossing its channel's seal", func(t *testing.T, r *logroom.Room) (uint64, string) {
			editMeta(t, conn, r, 3, func(m map[string]any) { m["last"] = 29 })
			return 3, batchPath(r, 3, 29)
		}, "batch ends at index 30, past the channel's seal at 29", logroom.ErrCorrupt},
		{name: "open channel deleted", corrupt: func(t *testing.T, r *logroom.Room) (uint64, string) {
			deleteTree(t, conn, chanPath(r, 4))
			return 3, chanPath(r, 3)
		}, message: "the open channel was deleted", readerErr: logroom.ErrCorrupt},
		{name: "open channel deleted and re-created", corrupt: func(t *testing.T, r *logroom.Room) (uint64, string) {
			// What an operator may do to "repair" the room: the chain looks
			// whole, only the channels znode's child version tells.
			data, _, err := conn.Get(chanPath(r, 4))
			require.NoError(t, err)
			deleteTree(t, conn, chanPath(r, 4))
			create(t, conn, chanPath(r, 4), data)
			return 0, r.Path("channels")
		}, message: "channels were deleted or re-created by another client", readerErr: logroom.ErrCorrupt},
		{"acknowledged batch deleted from the open channel", func(t *testing.T, r *logroom.Room) (uint64, string) {
			require.NoError(t, conn.Delete(batchPath(r, 4, 31), -1))
			return 4, chanPath(r, 4)
		}, "1 batch znode(s) were deleted from this channel, which is not being deleted", logroom.ErrCorrupt},
		{"channel missing in the middle", func(t *testing.T, r *logroom.Room) (uint64, string) {
			// Deleted out of order by hand: DeleteChannel deletes only the
			// oldest channel.
			p := chanPath(r, 2)
			kids, _, err := conn.Children(p)
			require.NoError(t, err)
			for _, k := range kids {
				require.NoError(t, conn.Delete(p+"/"+k, -1))
			}
			require.NoError(t, conn.Delete(p, -1))
			return 3, chanPath(r, 3)
		}, "channel numbers jump from 1 to 3", logroom.ErrCorrupt},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			name := fmt.Sprintf("c%02d", i)
			b := buildRoom(t, c, base, name, false)
			ch, znode := tc.corrupt(t, b.room)

			code, out, errs := cl.run("verify", name)
			require.Equal(t, exitFail, code, "stdout:\n%s\nstderr:\n%s", out, errs)
			want := fmt.Sprintf("FAULT room %q channel %d znode %s: ", name, ch, znode)
			if ch == 0 {
				want = fmt.Sprintf("FAULT room %q znode %s: ", name, znode)
			}
			require.Regexp(t, "(?m)^"+regexp.QuoteMeta(want)+".*"+regexp.QuoteMeta(tc.message), out)
			require.Regexp(t, `(?m)^FAILED room "`+name+`": \d+ fault\(s\)`, out)

			var v verifyOut
			code, out, _ = cl.run("verify", name, "--json")
			require.Equal(t, exitFail, code)
			require.NoError(t, jsonUnmarshal(out, &v))
			require.False(t, v.OK)
			found := false
			for _, f := range v.Faults {
				if f.Znode == znode && f.Channel == ch && f.Room == name && strings.Contains(f.Message, tc.message) {
					found = true
				}
			}
			require.True(t, found, "no fault %q at %s in %+v", tc.message, znode, v.Faults)

			if tc.readerErr == nil {
				return
			}
			if !dumpReads[tc.name] {
				code, _, errs = cl.run("dump", name)
				require.Equal(t, exitFail, code)
				require.Contains(t, errs, "logroom: ")
				require.Contains(t, errs, fmt.Sprintf("room %q", name))
			}

			// logroom's reader stops there too.
			ctx := testCtx(t, 5*time.Second) // 34 small entries: a reader that waits longer is stuck
			rd, err := b.room.Tail(ctx, 1)
			if err == nil {
				defer rd.Close()
				for err == nil && rd.Position() <= 35 {
					_, err = rd.Next(ctx)
				}
			}
			require.ErrorIs(t, err, tc.readerErr)
		})
	}
}

// TestVerifyWarnings: orphans past a sealed channel, batches past the open
// channel's hole and foreign znodes are warnings: verify exits 0, naming
// them, and the log reads whole.
func TestVerifyWarnings(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	c := dialZK(t, e, nil)
	conn := c.Conn()
	cl := newCLI(t, e, "/warn")
	b := buildRoom(t, c, "/warn", "w", false)
	orphan := batchPath(b.room, 2, 21)
	create(t, conn, orphan, mustBatch(t, 1, 21, "never acknowledged"))
	pastHole := batchPath(b.room, 4, 40)
	create(t, conn, pastHole, mustBatch(t, 2, 40, "in flight"))
	foreign := chanPath(b.room, 3) + "/lock"
	create(t, conn, foreign, nil)
	// Channel 1 half deleted: marked deleting, its first batches gone.
	editMeta(t, conn, b.room, 1, func(m map[string]any) { m["deleting"] = true })
	for _, f := range batchFirsts(t, conn, b.room, 1)[:2] {
		require.NoError(t, conn.Delete(batchPath(b.room, 1, f), -1))
	}

	code, out, errs := cl.run("verify", "w")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errs)
	require.NotContains(t, out, "FAULT")
	require.Contains(t, out, fmt.Sprintf("WARN  room \"w\" channel 2 znode %s: orphan batch past the channel's seal at index 20", orphan))
	require.Contains(t, out, fmt.Sprintf("WARN  room \"w\" channel 4 znode %s: batch past the end of the log (hole at index 35)", pastHole))
	require.Contains(t, out, fmt.Sprintf("WARN  room \"w\" channel 3 znode %s: foreign znode", foreign))
	require.Contains(t, out, fmt.Sprintf("WARN  room \"w\" channel 1 znode %s: channel is being deleted", chanPath(b.room, 1)))
	require.Contains(t, out, fmt.Sprintf("WARN  room \"w\" channel 1 znode %s: missing batch: entries 1..6 absent in a channel sealed at 12 (the channel is being deleted)",
		batchPath(b.room, 1, 1)))
	require.Regexp(t, `(?m)^OK room "w": 4 channels, \d+ batches, entries 1\.\.34, \d+ bytes, epoch 2, 0 members' state hashes compared; 5 warning\(s\)$`, out)

	var v verifyOut
	cl.json(&v, "verify", "w")
	require.True(t, v.OK)
	require.Len(t, v.Warnings, 5)

	// dump and channels ignore them like a reader does; the half-deleted
	// channel is compacted.
	got := parseDump(t, cl.ok("dump", "w", "--from", "13"))
	require.Len(t, got, 22)
	require.Equal(t, b.entries[20], got[7].Data)
	code, _, errs = cl.run("dump", "w")
	require.Equal(t, exitFail, code)
	require.Contains(t, errs, `position compacted: room "w" channel 1 is being deleted`)
	var ch channelsOut
	cl.json(&ch, "channels", "w")
	require.Equal(t, uint64(34), ch.Channels[3].Last)
	require.Equal(t, "being deleted", ch.Channels[0].Note)
}

func jsonUnmarshal(s string, v any) error {
	if err := json.Unmarshal([]byte(s), v); err != nil {
		return errors.Join(err, fmt.Errorf("input:\n%s", s))
	}
	return nil
}

// TestVerifyLiveRoom: verify and dump run while a writer appends, rotates
// and is taken over report no fault (a live room is not a corrupt one).
func TestVerifyLiveRoom(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	c := dialZK(t, e, nil)
	ctx := testCtx(t, 60*time.Second)
	r, err := logroom.OpenRoom(ctx, c, "live", logroom.RoomOptions{Base: "/live"})
	require.NoError(t, err)
	cl := newCLI(t, e, "/live")

	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			for epoch := 1; ; epoch++ {
				w, err := r.NewWriter(ctx, logroom.WriterConfig{Owner: fmt.Sprintf("w%d", epoch), MaxChannelBatches: 7})
				if err != nil {
					return err
				}
				for i := 0; i < 40; i++ {
					select {
					case <-stop:
						return w.Close()
					default:
					}
					if _, err := w.Append(ctx, rawEntry(i), rawEntry(i+1)); err != nil {
						_ = w.Close()
						return err
					}
				}
				if err := w.Close(); err != nil {
					return err
				}
			}
		}()
	}()
	for i := 0; i < 6; i++ {
		code, out, errs := cl.run("verify", "live")
		require.Equal(t, exitOK, code, "round %d\nstdout:\n%s\nstderr:\n%s", i, out, errs)
		code, _, errs = cl.run("dump", "live")
		require.Equal(t, exitOK, code, "round %d: %s", i, errs)
	}
	close(stop)
	require.NoError(t, <-done)
	var v verifyOut
	cl.json(&v, "verify", "live")
	require.True(t, v.OK)
	require.Greater(t, v.Summary.Epoch, uint64(1), "takeovers happened while verifying")
	require.Greater(t, v.Summary.Channels, 3)
}

// TestVerifyRolledBackRoom: a live member that published an applied index
// beyond the log's end (ZooKeeper restored from an older copy rolled the
// log back under it) is a fault naming the member, its index and the
// log's end; a member within the log is not. Before, verify walked the
// shorter log, found it well-formed and said OK.
func TestVerifyRolledBackRoom(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	c := dialZK(t, e, nil)
	conn := c.Conn()
	const base = "/rolledback"
	b := buildRoom(t, c, base, "rb", false) // entries 1..34
	cl := newCLI(t, e, base)
	members := b.room.Path("members")
	if _, err := conn.Create(members, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
		require.NoError(t, err)
	}
	member := func(id string, applied uint64) {
		data, err := msgpack.Marshal(map[string]any{"v": 1, "id": id, "addr": "127.0.0.1:7001", "role": "standby",
			"epoch": 2, "applied": applied, "ckpt": 0})
		require.NoError(t, err)
		_, err = conn.Create(members+"/"+id, data, zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	member("m1", 34)
	code, out, errs := cl.run("verify", "rb")
	require.Equal(t, exitOK, code, "a member at the log's end is fine\n%s%s", out, errs)

	member("m2", 60)
	code, out, errs = cl.run("verify", "rb")
	require.Equal(t, exitFail, code, "%s%s", out, errs)
	require.Contains(t, out, "m2")
	require.Contains(t, out, "applied index 60")
	require.Contains(t, out, "log ends at index 34")
	require.NotContains(t, out, "m1 ")
	var v verifyOut
	code, out, _ = cl.run("verify", "rb", "--json")
	require.Equal(t, exitFail, code)
	require.NoError(t, jsonUnmarshal(out, &v))
	require.False(t, v.OK)
	require.Len(t, v.Faults, 1)
}

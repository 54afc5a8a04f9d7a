package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

// cli runs the tool in-process against the ensemble with base, after the
// given args, and returns exit code, stdout and stderr.
type cli struct {
	t    *testing.T
	zk   string
	base string
	// extra flags placed before the command (e.g. --digest).
	extra []string
}

func newCLI(t *testing.T, e *zkensemble.Ensemble, base string, extra ...string) *cli {
	return &cli{t: t, zk: e.ConnString(), base: base, extra: extra}
}

func (c *cli) run(args ...string) (code int, stdout, stderr string) {
	c.t.Helper()
	var out, errb bytes.Buffer
	full := append([]string{"--zk", c.zk, "--base", c.base}, c.extra...)
	full = append(full, args...)
	code = run(full, &out, &errb)
	return code, out.String(), errb.String()
}

// ok runs args and requires exit 0.
func (c *cli) ok(args ...string) string {
	c.t.Helper()
	code, out, errs := c.run(args...)
	require.Equal(c.t, exitOK, code, "roomlog %q\nstdout:\n%s\nstderr:\n%s", args, out, errs)
	return out
}

// json runs args with --json, requires exit 0 and decodes stdout into v.
func (c *cli) json(v any, args ...string) {
	c.t.Helper()
	out := c.ok(append(args, "--json")...)
	require.NoError(c.t, json.Unmarshal([]byte(out), v), "stdout:\n%s", out)
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func dialZK(t *testing.T, e *zkensemble.Ensemble, auth *logroom.Digest) *logroom.Client {
	t.Helper()
	c, err := logroom.Dial(testCtx(t, 30*time.Second), logroom.DialConfig{Servers: e.Addrs(), Auth: auth})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// opsEntry is a store.OpsApplier entry setting key to value.
func opsEntry(t *testing.T, key, value string) []byte {
	b, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte(key), Value: []byte(value)}})
	require.NoError(t, err)
	return b
}

func rawEntry(i int) []byte { return []byte(fmt.Sprintf("raw-%05d", i)) }

// built is a room the tests wrote, with every entry it holds.
type built struct {
	room    *logroom.Room
	client  *logroom.Client
	entries map[uint64][]byte
	epochs  map[uint64]uint64
}

// buildRoom writes a room with several channels, two epochs, multi-entry
// batches, a rotation, ops and raw entries. With deleteFirst, channel 1 is
// deleted at the end. Every writer is closed when it returns.
func buildRoom(t *testing.T, c *logroom.Client, base, name string, deleteFirst bool) *built {
	t.Helper()
	ctx := testCtx(t, 60*time.Second)
	r, err := logroom.OpenRoom(ctx, c, name, logroom.RoomOptions{Base: base})
	require.NoError(t, err)
	b := &built{room: r, client: c, entries: map[uint64][]byte{}, epochs: map[uint64]uint64{}}
	appendN := func(w *logroom.Writer, n int, group int) {
		for i := 0; i < n; i += group {
			var es [][]byte
			for k := 0; k < group; k++ {
				idx := len(b.entries) + len(es) + 1
				if idx%3 == 0 {
					es = append(es, opsEntry(t, fmt.Sprintf("k%03d", idx), fmt.Sprintf("v%d", idx)))
				} else {
					es = append(es, rawEntry(idx))
				}
			}
			last, err := w.Append(ctx, es...)
			require.NoError(t, err)
			for k, e := range es {
				idx := last - uint64(len(es)-1-k)
				b.entries[idx], b.epochs[idx] = e, w.Epoch()
			}
		}
	}
	w1, err := r.NewWriter(ctx, logroom.WriterConfig{Owner: "w1"})
	require.NoError(t, err)
	appendN(w1, 12, 3) // channel 1: 4 batches of 3
	_, err = w1.Rotate(ctx)
	require.NoError(t, err)
	appendN(w1, 8, 1) // channel 2: 8 batches of 1
	require.NoError(t, w1.Close())
	// A takeover seals channel 2 and opens channel 3 under epoch 2.
	w2, err := r.NewWriter(ctx, logroom.WriterConfig{Owner: "w2"})
	require.NoError(t, err)
	appendN(w2, 10, 2) // channel 3: 5 batches of 2
	_, err = w2.Rotate(ctx)
	require.NoError(t, err)
	appendN(w2, 4, 2) // channel 4 (open): 2 batches of 2
	require.NoError(t, w2.Close())
	if deleteFirst {
		require.NoError(t, r.DeleteChannel(ctx, 1))
	}
	return b
}

// batchPath is the path of a batch znode of the room.
func batchPath(r *logroom.Room, num, first uint64) string {
	return r.Path(logroom.ChannelsZnode, logroom.ChannelName(num), logroom.BatchName(first))
}

func chanPath(r *logroom.Room, num uint64) string {
	return r.Path(logroom.ChannelsZnode, logroom.ChannelName(num))
}

// channelInfo returns the room's channel num as logroom reports it.
func channelInfo(t *testing.T, r *logroom.Room, num uint64) logroom.ChannelInfo {
	t.Helper()
	infos, err := r.Channels(testCtx(t, 10*time.Second))
	require.NoError(t, err)
	for _, ci := range infos {
		if ci.Num == num {
			return ci
		}
	}
	t.Fatalf("no channel %d in %+v", num, infos)
	return logroom.ChannelInfo{}
}

// batchFirsts lists the batch names of a channel, ascending.
func batchFirsts(t *testing.T, conn *zk.Conn, r *logroom.Room, num uint64) []uint64 {
	t.Helper()
	names, _, err := conn.Children(chanPath(r, num))
	require.NoError(t, err)
	var out []uint64
	for _, n := range names {
		f, ok := logroom.ParseBatchName(n)
		require.True(t, ok, n)
		out = append(out, f)
	}
	slices.Sort(out)
	return out
}

// snapshotTree reads every znode under path (data, version, child
// version), for proving that nothing changed.
func snapshotTree(t *testing.T, conn *zk.Conn, path string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var walk func(p string)
	walk = func(p string) {
		data, st, err := conn.Get(p)
		if err == zk.ErrNoNode {
			return
		}
		require.NoError(t, err, p)
		out[p] = fmt.Sprintf("v%d cv%d %x", st.Version, st.Cversion, data)
		kids, _, err := conn.Children(p)
		require.NoError(t, err, p)
		for _, k := range kids {
			walk(strings.TrimSuffix(p, "/") + "/" + k)
		}
	}
	walk(path)
	return out
}

package logroom

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// storedBatch is one batch znode as ZooKeeper holds it.
type storedBatch struct {
	path string
	data []byte
	b    Batch
}

// storedBatches reads and decodes every batch znode of the room's
// channels, in channel and index order.
func storedBatches(t testing.TB, ctx context.Context, c *Client, r *Room) []storedBatch {
	t.Helper()
	infos, err := r.Channels(ctx)
	require.NoError(t, err)
	var out []storedBatch
	for _, ci := range infos {
		names, _, err := c.Conn().Children(r.channelPath(ci.Num))
		require.NoError(t, err)
		var firsts []uint64
		for _, n := range names {
			f, ok := parseNum(n, batchPrefix)
			require.True(t, ok, n)
			firsts = append(firsts, f)
		}
		slices.Sort(firsts)
		for _, f := range firsts {
			path := r.batchPath(ci.Num, f)
			data, _, err := c.Conn().Get(path)
			require.NoError(t, err)
			b, err := DecodeBatch(data)
			require.NoError(t, err, path)
			out = append(out, storedBatch{path: path, data: data, b: b})
		}
	}
	return out
}

// versions counts stored batches by version and codec ("v1", "v2-s2", …).
func versions(bs []storedBatch) map[string]int {
	m := map[string]int{}
	for _, sb := range bs {
		k := fmt.Sprintf("v%d", sb.b.Version)
		if sb.b.Version == BatchFormatVersion2 {
			k += "-" + sb.b.Codec.String()
		}
		m[k]++
	}
	return m
}

// appendConcurrently appends entries from 8 goroutines, 10 per call,
// recording the outcomes in a.
func appendConcurrently(t *testing.T, ctx context.Context, w *Writer, a *acked, entries [][]byte) {
	t.Helper()
	var wg sync.WaitGroup
	const goroutines, perCall = 8, 10
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := g * perCall; i < len(entries); i += goroutines * perCall {
				es := entries[i:min(i+perCall, len(entries))]
				last, err := w.Append(ctx, es...)
				a.record(t, es, last, err)
			}
		}()
	}
	wg.Wait()
}

// dfsEntries returns n distinct compressible entries (DFS-like commands)
// tagged with tag.
func dfsEntries(tag string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, `%s {"op":"addblock","path":"/user/alice/data/dt=2026-11-22/part-%05d","size":134217728,"replication":3}`, tag, i)
	}
	return out
}

func randomEntry(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// TestCompressionRoundTrip writes through a Writer with each compression
// setting and reads back through a Reader: same entries, batches stored
// in the expected versions, none above MaxBatchBytes, and the room's byte
// accounting equal to what ZooKeeper holds.
func TestCompressionRoundTrip(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	for _, comp := range []Compression{CompressionNone, CompressionS2, CompressionDefault} {
		t.Run(comp.String(), func(t *testing.T) {
			ctx := testCtx(t, 60*time.Second)
			r := openRoom(t, c, "rt-"+comp.String())
			var mu sync.Mutex
			var committed []Entry
			const maxBatch = 8 << 10
			w := newWriter(t, r, WriterConfig{MaxBatchBytes: maxBatch, Compression: comp, OnCommit: func(es []Entry) {
				mu.Lock()
				defer mu.Unlock()
				committed = append(committed, es...)
			}})
			a := newAcked()
			entries := dfsEntries("rt", 3000)
			appendConcurrently(t, ctx, w, a, entries[:1000])
			// One large call: full batches, each formed by its raw budget.
			last, err := w.Append(ctx, entries[1000:]...)
			a.record(t, entries[1000:], last, err)
			require.NoError(t, err)
			require.Len(t, a.ok, len(entries))

			log := readAll(t, ctx, r, w.LastCommitted())
			checkLog(t, log, a)
			mu.Lock()
			require.Equal(t, log, committed, "OnCommit saw what readers read, batch ids included")
			mu.Unlock()

			bs := storedBatches(t, ctx, c, r)
			stored, raw := 0, 0
			for _, sb := range bs {
				require.LessOrEqual(t, len(sb.data), maxBatch, sb.path)
				stored += len(sb.data)
				raw += sb.b.RawBytes
			}
			vs := versions(bs)
			if comp == CompressionNone || (comp == CompressionDefault && DefaultCompression == CompressionNone) {
				require.Equal(t, map[string]int{"v1": len(bs)}, vs)
			} else {
				require.Positive(t, vs["v2-s2"], "compressible batches stored compressed: %v", vs)
				require.Less(t, stored*3, raw, "S2 stores these in under a third of the bytes")
			}
			n, err := r.Bytes(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(stored), n, "Room.Bytes counts stored bytes")
			info, err := w.Rotate(ctx)
			require.NoError(t, err)
			require.Equal(t, int64(stored), info.Bytes, "the seal records stored bytes")
			t.Logf("%v: %d batches %v, %d raw payload bytes stored in %d", comp, len(bs), vs, raw, stored)
		})
	}
}

// TestCompressionMixedLog: writers of successive epochs with different
// settings leave version-1 and version-2 batches in one log (and, since
// the second writer's epoch reuses nothing, in one channel when a writer
// only closes); readers, Tail from inside a compressed batch, MatchLog and
// a takeover's scan all read both.
func TestCompressionMixedLog(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 60*time.Second)
	r := openRoom(t, c, "mixed")
	a := newAcked()
	var all [][]byte
	for i, comp := range []Compression{CompressionNone, CompressionS2, CompressionNone, CompressionS2} {
		w, err := r.NewWriter(ctx, WriterConfig{MaxBatchBytes: 4 << 10, Compression: comp})
		require.NoError(t, err, "takeover %d scans the previous writer's batches", i)
		es := dfsEntries(fmt.Sprintf("w%d", i), 400)
		// Within one writer too: a compressible run, an incompressible
		// one (stored as version 1), then compressible again.
		es[200] = randomEntry(3000)
		es[201] = randomEntry(3000)
		for j := 0; j < len(es); j += 50 {
			last, err := w.Append(ctx, es[j:j+50]...)
			a.record(t, es[j:j+50], last, err)
			require.NoError(t, err)
		}
		all = append(all, es...)
		require.NoError(t, w.Close())
	}
	bs := storedBatches(t, ctx, c, r)
	vs := versions(bs)
	require.Positive(t, vs["v1"], "%v", vs)
	require.Positive(t, vs["v2-s2"], "%v", vs)

	log := readAll(t, ctx, r, uint64(len(all)))
	checkLog(t, log, a)
	for i, en := range log {
		require.Equal(t, all[i], en.Data, "index %d", en.Index)
	}
	// Tail from the middle of a compressed batch, and MatchLog on one.
	var v2 Batch
	for _, sb := range bs {
		if sb.b.Codec == CodecS2 && sb.b.Count >= 3 {
			v2 = sb.b
			break
		}
	}
	require.NotZero(t, v2.Count)
	from := v2.First + 1
	rd, err := r.Tail(ctx, from)
	require.NoError(t, err)
	got, err := rd.Next(ctx)
	require.NoError(t, err)
	require.Len(t, got, v2.Count-1, "the rest of the batch")
	require.Equal(t, from, got[0].Index)
	require.Equal(t, all[from-1], got[0].Data)
	require.Equal(t, v2.ID(), got[0].Batch)
	require.NoError(t, r.MatchLog(ctx, v2.ID(), v2.Last()))
	end, err := r.CommittedIndex(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(len(all)), end)
}

// TestCompressionIncompressibleStoredUncompressed: with S2 on, batches
// that do not shrink are stored as version 1, at most MaxBatchBytes.
func TestCompressionIncompressibleStoredUncompressed(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 60*time.Second)
	r := openRoom(t, c, "random")
	const maxBatch = 8 << 10
	w := newWriter(t, r, WriterConfig{MaxBatchBytes: maxBatch, Compression: CompressionS2})
	a := newAcked()
	entries := make([][]byte, 1500)
	for i := range entries {
		entries[i] = randomEntry(256)
	}
	appendConcurrently(t, ctx, w, a, entries[:500])
	last, err := w.Append(ctx, entries[500:]...)
	a.record(t, entries[500:], last, err)
	require.NoError(t, err)
	checkLog(t, readAll(t, ctx, r, w.LastCommitted()), a)
	bs := storedBatches(t, ctx, c, r)
	require.Equal(t, map[string]int{"v1": len(bs)}, versions(bs))
	full := 0
	for _, sb := range bs {
		require.LessOrEqual(t, len(sb.data), maxBatch)
		if len(sb.data) > maxBatch-300 {
			full++
		}
	}
	require.Positive(t, full, "full batches are formed by MaxBatchBytes as without compression")
	require.Zero(t, w.stats.splits.Load(), "the ratio estimate stays at 1: nothing to split")
}

// TestCompressionSplit: after compressible data has raised the writer's
// ratio estimate, one large Append of incompressible entries forms a batch
// by that estimate that does not fit compressed or not: it is split into
// pieces within MaxBatchBytes, every request is answered, and the log
// reads back whole.
func TestCompressionSplit(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 60*time.Second)
	r := openRoom(t, c, "split")
	const maxBatch = 8 << 10
	var mu sync.Mutex
	var committed []Entry
	w := newWriter(t, r, WriterConfig{MaxBatchBytes: maxBatch, Compression: CompressionS2, OnCommit: func(es []Entry) {
		mu.Lock()
		defer mu.Unlock()
		committed = append(committed, es...)
	}})
	a := newAcked()
	// Large compressible calls teach the writer its ratio.
	comp := dfsEntries("c", 4000)
	for j := 0; j < len(comp); j += 1000 {
		last, err := w.Append(ctx, comp[j:j+1000]...)
		a.record(t, comp[j:j+1000], last, err)
		require.NoError(t, err)
	}
	// One large incompressible call: formed by the compressible ratio, it
	// fits neither way.
	var random [][]byte
	for range 100 {
		random = append(random, randomEntry(300))
	}
	last, err := w.Append(ctx, random...)
	a.record(t, random, last, err)
	require.NoError(t, err)
	// Then mixed calls racing, each answered by the piece holding its end.
	for i := range 400 {
		en := randomEntry(300)
		if i%2 == 0 {
			en = dfsEntries(fmt.Sprint(i), 1)[0]
		}
		random = append(random, en)
	}
	appendConcurrently(t, ctx, w, a, random[100:])
	require.Positive(t, w.stats.splits.Load(), "a batch formed by the compressible ratio was split")
	log := readAll(t, ctx, r, w.LastCommitted())
	checkLog(t, log, a)
	require.Len(t, log, len(comp)+len(random))
	mu.Lock()
	require.Equal(t, log, committed)
	mu.Unlock()
	for _, sb := range storedBatches(t, ctx, c, r) {
		require.LessOrEqual(t, len(sb.data), maxBatch, sb.path)
	}
}

// TestCompressionBatchBounds: a writer never forms a compressed batch
// beyond MaxBatchEntries or its raw budget, even for entries that compress
// without bound (empty ones).
func TestCompressionBatchBounds(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	ctx := testCtx(t, 60*time.Second)
	r := openRoom(t, c, "bounds")
	w := newWriter(t, r, WriterConfig{Compression: CompressionS2})
	empty := make([][]byte, 3*MaxBatchEntries)
	last, err := w.Append(ctx, empty...)
	require.NoError(t, err)
	require.Equal(t, uint64(len(empty)), last)
	most := 0
	for _, sb := range storedBatches(t, ctx, c, r) {
		require.LessOrEqual(t, sb.b.Count, MaxBatchEntries)
		require.LessOrEqual(t, sb.b.RawBytes, maxRawFactor*DefaultMaxBatchBytes)
		most = max(most, sb.b.Count)
	}
	require.Equal(t, MaxBatchEntries, most, "the entry bound, not the bytes, limited these batches")
}

// TestCompressionCorruptPayload: a flipped byte in a stored compressed
// payload, or a checksum-valid payload that does not inflate to its raw
// length, stops a reader with ErrCorrupt at that batch, nothing of it
// delivered; a takeover refuses the chain too.
func TestCompressionCorruptPayload(t *testing.T) {
	e := sharedZK(t)
	c := dial(t, e.Addrs())
	cases := map[string]func(sb storedBatch) []byte{
		"flipped compressed byte": func(sb storedBatch) []byte {
			d := bytes.Clone(sb.data)
			d[len(d)-sb.b.StoredBytes/2] ^= 0x20
			return d
		},
		"inflates short": func(sb storedBatch) []byte {
			d := bytes.Clone(sb.data)
			block := d[len(d)-sb.b.StoredBytes:]
			return mustHeaderV2(t, sb.b.Epoch, sb.b.First, uint64(sb.b.Count), CodecS2, uint64(sb.b.RawBytes+1), block)
		},
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			ctx := testCtx(t, 60*time.Second)
			r := openRoom(t, c, "corrupt")
			w := newWriter(t, r, WriterConfig{MaxBatchBytes: 4 << 10, Compression: CompressionS2})
			es := dfsEntries("x", 300)
			for j := 0; j < len(es); j += 100 {
				_, err := w.Append(ctx, es[j:j+100]...)
				require.NoError(t, err)
			}
			require.NoError(t, w.Close())
			bs := storedBatches(t, ctx, c, r)
			victim := -1
			for i, sb := range bs {
				if i > 0 && sb.b.Codec == CodecS2 {
					victim = i
					break
				}
			}
			require.Positive(t, victim, "a compressed batch after the first: %v", versions(bs))
			sb := bs[victim]
			_, err := c.Conn().Set(sb.path, corrupt(sb), -1)
			require.NoError(t, err)

			rd, err := r.Tail(ctx, 1)
			require.NoError(t, err)
			before := int(sb.b.First - 1)
			readN(t, ctx, rd, before)
			_, err = rd.Next(ctx)
			require.ErrorIs(t, err, ErrCorrupt)
			require.Contains(t, err.Error(), sb.path)
			require.Equal(t, sb.b.First, rd.Position(), "nothing of the corrupt batch delivered")
			_, err = r.NewWriter(ctx, WriterConfig{})
			require.ErrorIs(t, err, ErrCorrupt)
		})
	}
}

// TestEncodePieces checks the writer's batch encoding without ZooKeeper:
// compressible payloads become one version-2 batch, incompressible ones
// version 1, and a payload too large either way splits into contiguous
// pieces within MaxBatchBytes that hold exactly the entries.
func TestEncodePieces(t *testing.T) {
	const maxBatch = 4 << 10
	w := &Writer{cfg: WriterConfig{MaxBatchBytes: maxBatch, Compression: CompressionS2}.withDefaults(), epoch: 5, log: discardLogger(nil)}
	w.ls.ratio = 1
	framed := func(es [][]byte) []byte {
		var p []byte
		for _, e := range es {
			p = appendUvarint(p, uint64(len(e)))
			p = append(p, e...)
		}
		return p
	}
	check := func(t *testing.T, es [][]byte) []Batch {
		out := w.encodePieces(nil, 10, len(es), framed(es))
		var got [][]byte
		var bs []Batch
		next := uint64(10)
		for _, p := range out {
			require.LessOrEqual(t, len(p.data), maxBatch)
			b, err := DecodeBatch(p.data)
			require.NoError(t, err)
			require.Equal(t, next, b.First)
			require.Equal(t, p.first, b.First)
			require.Equal(t, p.count, b.Count)
			require.Equal(t, p.crc, b.CRC)
			require.Equal(t, uint64(5), b.Epoch)
			next += uint64(b.Count)
			got = append(got, b.Entries...)
			bs = append(bs, b)
		}
		require.Equal(t, es, got)
		return bs
	}
	t.Run("compressible", func(t *testing.T) {
		es := dfsEntries("p", 100) // ~10 KiB raw, ~1.5 KiB compressed
		bs := check(t, es)
		require.Len(t, bs, 1)
		require.Equal(t, CodecS2, bs[0].Codec)
	})
	t.Run("incompressible fits", func(t *testing.T) {
		bs := check(t, [][]byte{randomEntry(1000), randomEntry(2000)})
		require.Len(t, bs, 1)
		require.Equal(t, BatchFormatVersion, bs[0].Version)
	})
	t.Run("tiny", func(t *testing.T) {
		bs := check(t, [][]byte{[]byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")})
		require.Equal(t, BatchFormatVersion, bs[0].Version, "below minCompressBytes: not tried")
	})
	t.Run("split", func(t *testing.T) {
		es := dfsEntries("q", 200)
		for i := 0; i < 40; i++ {
			es = append(es, randomEntry(500))
		}
		es = append(es, dfsEntries("r", 200)...)
		bs := check(t, es)
		require.Greater(t, len(bs), 3)
	})
	t.Run("estimate follows the data", func(t *testing.T) {
		w.ls.ratio = 10
		var es [][]byte
		for range 40 {
			es = append(es, randomEntry(500))
		}
		require.Greater(t, len(check(t, es)), 4)
		require.Less(t, w.ls.ratio, 1.1, "a batch that did not fit set the estimate to its ratio")
		check(t, dfsEntries("s", 100))
		require.Greater(t, w.ls.ratio, 2.0, "compressible samples raise it again")
	})
	t.Run("largest entry", func(t *testing.T) {
		bs := check(t, [][]byte{randomEntry(MaxEntryBytes(maxBatch)), randomEntry(10)})
		require.Len(t, bs, 2)
	})
}

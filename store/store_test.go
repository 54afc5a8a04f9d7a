package store

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/stretchr/testify/require"
)

func mustOps(t testing.TB, ops ...Op) []byte {
	t.Helper()
	b, err := EncodeOps(ops)
	require.NoError(t, err)
	return b
}

func set(k, v string) Op { return Op{Kind: OpSet, Key: []byte(k), Value: []byte(v)} }

func TestApplyRefusesNonContiguous(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	applyGen(t, s, 1, 10)
	hash0, idx0, err := s.StateHash()
	require.NoError(t, err)
	require.EqualValues(t, 10, idx0)

	cases := []struct {
		name    string
		indexes []uint64
	}{
		{"gap", []uint64{12}},
		{"duplicate", []uint64{10}},
		{"going back", []uint64{3}},
		{"gap inside the run", []uint64{11, 12, 14}},
		{"duplicate inside the run", []uint64{11, 11}},
		{"zero", []uint64{0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var es []Entry
			for _, i := range tc.indexes {
				es = append(es, Entry{Index: i, Epoch: 9, Data: mustOps(t, set("gap", "x"))})
			}
			resp, err := s.Apply(es)
			require.ErrorIs(t, err, ErrIndexGap)
			require.Nil(t, resp)
			hash, idx, err := s.StateHash()
			require.NoError(t, err)
			require.Equal(t, hash0, hash, "state changed by a refused Apply")
			require.EqualValues(t, 10, idx)
			require.EqualValues(t, 10, s.AppliedIndex())
			require.Equal(t, genEpoch(10), s.AppliedEpoch())
			_, err = s.Get([]byte("gap"))
			require.ErrorIs(t, err, ErrNotFound)
		})
	}
	// The next index is still accepted.
	_, err = s.Apply([]Entry{genEntry(t, 11)})
	require.NoError(t, err)
	require.EqualValues(t, 11, s.AppliedIndex())
}

func TestInternalKeysInvisible(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	emptyHash, idx, err := s.StateHash()
	require.NoError(t, err)
	require.EqualValues(t, 0, idx)
	require.Equal(t, newModel().hash(), emptyHash, "an empty store hashes like no keys at all")
	require.Empty(t, userKeys(t, s.Scan))

	// User keys that look like internal ones must stay user keys.
	tricky := []string{"\x00roomlog/applied", "\x00roomlog/format", "\x00", "\x01", "\xff\xff", "a"}
	m := newModel()
	var ops []Op
	for i, k := range tricky {
		ops = append(ops, set(k, "v"+strconv.Itoa(i)))
	}
	m.apply(ops)
	_, err = s.Apply([]Entry{{Index: 1, Epoch: 7, Data: mustOps(t, ops...)}})
	require.NoError(t, err)
	require.EqualValues(t, 1, s.AppliedIndex())
	require.EqualValues(t, 7, s.AppliedEpoch())

	keys := userKeys(t, s.Scan)
	require.Equal(t, []string{"\x00", "\x00roomlog/applied", "\x00roomlog/format", "\x01", "a", "\xff\xff"}, keys)
	v, err := s.Get([]byte("\x00roomlog/applied"))
	require.NoError(t, err)
	require.Equal(t, "v0", string(v))
	hash, idx, err := s.StateHash()
	require.NoError(t, err)
	require.EqualValues(t, 1, idx)
	require.Equal(t, m.hash(), hash, "hash covers exactly the user keys")

	// Deleting everything a user can address leaves the internals intact.
	_, err = s.Apply([]Entry{{Index: 2, Epoch: 7, Data: mustOps(t, Op{Kind: OpDeleteRange, Key: []byte{0}, End: bytes.Repeat([]byte{0xff}, 8)})}})
	require.NoError(t, err)
	require.Empty(t, userKeys(t, s.Scan))
	hash, idx, err = s.StateHash()
	require.NoError(t, err)
	require.Equal(t, emptyHash, hash)
	require.EqualValues(t, 2, idx)

	dir := s.Dir()
	require.NoError(t, s.Close())
	s2 := openTest(t, dir, nil)
	require.EqualValues(t, 2, s2.AppliedIndex())
	require.EqualValues(t, 7, s2.AppliedEpoch())
}

func TestSameEntriesSameHash(t *testing.T) {
	a := openTest(t, t.TempDir(), nil)
	b := openTest(t, t.TempDir(), &Options{Sync: SyncGroup})
	applyGen(t, a, 1, 300)
	// b gets the same entries in different batch sizes.
	for first := uint64(1); first <= 300; first += 7 {
		_, err := b.Apply(genEntries(t, first, min(first+6, 300)))
		require.NoError(t, err)
	}
	ha, ia, err := a.StateHash()
	require.NoError(t, err)
	hb, ib, err := b.StateHash()
	require.NoError(t, err)
	require.Equal(t, ia, ib)
	require.Equal(t, ha, hb)
	m := newModel()
	m.advance(300)
	require.Equal(t, m.hash(), ha)

	// One different value at the end -> a different hash.
	c := openTest(t, t.TempDir(), nil)
	applyGen(t, c, 1, 299)
	_, err = c.Apply([]Entry{{Index: 300, Epoch: genEpoch(300), Data: mustOps(t, set("k00001", "different"))}})
	require.NoError(t, err)
	hc, ic, err := c.StateHash()
	require.NoError(t, err)
	require.EqualValues(t, 300, ic)
	require.NotEqual(t, ha, hc)

	// Hash distinguishes key/value boundaries: {"ab":"c"} vs {"a":"bc"}.
	d1 := openTest(t, t.TempDir(), nil)
	d2 := openTest(t, t.TempDir(), nil)
	_, err = d1.Apply([]Entry{{Index: 1, Data: mustOps(t, set("ab", "c"))}})
	require.NoError(t, err)
	_, err = d2.Apply([]Entry{{Index: 1, Data: mustOps(t, set("a", "bc"))}})
	require.NoError(t, err)
	h1, _, err := d1.StateHash()
	require.NoError(t, err)
	h2, _, err := d2.StateHash()
	require.NoError(t, err)
	require.NotEqual(t, h1, h2)
}

// funcApplier adapts a function to Applier.
type funcApplier func(b Batch, e Entry) ([]byte, error)

func (f funcApplier) Apply(b Batch, e Entry) ([]byte, error) { return f(b, e) }

func TestApplierErrorAbortsBatch(t *testing.T) {
	boom := errors.New("boom")
	failAt := uint64(0)
	panicAt := uint64(0)
	app := funcApplier(func(b Batch, e Entry) ([]byte, error) {
		if err := b.Set([]byte(fmt.Sprintf("e%03d", e.Index)), []byte("x")); err != nil {
			return nil, err
		}
		if e.Index == failAt {
			return nil, boom
		}
		if e.Index == panicAt {
			panic("applier bug")
		}
		return []byte("ok"), nil
	})
	s := openTest(t, t.TempDir(), &Options{Applier: app})
	resp, err := s.Apply([]Entry{{Index: 1}, {Index: 2}})
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("ok"), []byte("ok")}, resp)
	hash0, _, err := s.StateHash()
	require.NoError(t, err)

	for _, tc := range []struct {
		name   string
		setup  func()
		target error
	}{
		{"error", func() { failAt, panicAt = 5, 0 }, boom},
		{"panic", func() { failAt, panicAt = 0, 5 }, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.setup()
			resp, err := s.Apply([]Entry{{Index: 3}, {Index: 4}, {Index: 5}, {Index: 6}})
			require.ErrorIs(t, err, ErrApply)
			if tc.target != nil {
				require.ErrorIs(t, err, tc.target)
			}
			require.Contains(t, err.Error(), "index 5")
			require.Nil(t, resp)
			require.EqualValues(t, 2, s.AppliedIndex())
			for _, k := range []string{"e003", "e004", "e005"} {
				_, err := s.Get([]byte(k))
				require.ErrorIs(t, err, ErrNotFound, "write of an aborted batch is visible: %s", k)
			}
			hash, idx, err := s.StateHash()
			require.NoError(t, err)
			require.Equal(t, hash0, hash)
			require.EqualValues(t, 2, idx)
		})
	}
}

func TestBatchReadsOwnWritesAndValidates(t *testing.T) {
	var problems []error
	// counter applier: reads the counter written by earlier entries of the
	// same run, and checks Batch input validation.
	app := funcApplier(func(b Batch, e Entry) ([]byte, error) {
		n := 0
		v, err := b.Get([]byte("counter"))
		switch {
		case errors.Is(err, ErrNotFound):
		case err != nil:
			return nil, err
		default:
			n, _ = strconv.Atoi(string(v))
		}
		n++
		if err := b.Set([]byte("counter"), []byte(strconv.Itoa(n))); err != nil {
			return nil, err
		}
		if err := b.Set([]byte(fmt.Sprintf("item/%03d", e.Index)), nil); err != nil {
			return nil, err
		}
		var items int
		if err := b.Scan([]byte("item/"), []byte("item0"), func(k, v []byte) error { items++; return nil }); err != nil {
			return nil, err
		}
		problems = append(problems,
			b.Set(nil, []byte("x")),
			b.Delete([]byte{}),
			b.DeleteRange([]byte("b"), []byte("a")),
			b.DeleteRange([]byte("a"), []byte("a")),
			b.DeleteRange(nil, []byte("a")),
			b.Scan([]byte("z"), []byte("a"), func(k, v []byte) error { return nil }))
		_, err = b.Get(nil)
		problems = append(problems, err)
		return []byte(fmt.Sprintf("%d/%d", n, items)), nil
	})
	s := openTest(t, t.TempDir(), &Options{Applier: app})
	resp, err := s.Apply([]Entry{{Index: 1}, {Index: 2}, {Index: 3}})
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("1/1"), []byte("2/2"), []byte("3/3")}, resp)
	resp, err = s.Apply([]Entry{{Index: 4}})
	require.NoError(t, err)
	require.Equal(t, [][]byte{[]byte("4/4")}, resp)
	require.Len(t, problems, 4*7)
	for i, p := range problems {
		require.ErrorIs(t, p, ErrInvalid, "problem %d", i)
	}
	v, err := s.Get([]byte("item/001"))
	require.NoError(t, err)
	require.NotNil(t, v, "an empty value reads back as empty, not nil")
	require.Empty(t, v)
}

func TestBatchUnusableAfterApply(t *testing.T) {
	var kept Batch
	s := openTest(t, t.TempDir(), &Options{Applier: funcApplier(func(b Batch, e Entry) ([]byte, error) {
		kept = b
		return nil, nil
	})})
	_, err := s.Apply([]Entry{{Index: 1}})
	require.NoError(t, err)
	require.ErrorIs(t, kept.Set([]byte("late"), []byte("x")), ErrClosed)
	_, err = kept.Get([]byte("late"))
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, kept.Scan(nil, nil, func(k, v []byte) error { return nil }), ErrClosed)
}

func TestDeleteRange(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	var ops []Op
	for c := 'a'; c <= 'h'; c++ {
		ops = append(ops, set(string(c), "v"), set(string(c)+"x", "v"))
	}
	_, err := s.Apply([]Entry{{Index: 1, Data: mustOps(t, ops...)}})
	require.NoError(t, err)
	_, err = s.Apply([]Entry{
		{Index: 2, Data: mustOps(t, Op{Kind: OpDeleteRange, Key: []byte("c"), End: []byte("f")})},
		// set inside a range deleted earlier in the same batch: visible.
		{Index: 3, Data: mustOps(t, set("d", "again"))},
	})
	require.NoError(t, err)
	require.Equal(t, []string{"a", "ax", "b", "bx", "d", "f", "fx", "g", "gx", "h", "hx"}, userKeys(t, s.Scan))
	_, err = s.Apply([]Entry{{Index: 4, Data: mustOps(t, Op{Kind: OpDelete, Key: []byte("d")}, Op{Kind: OpDelete, Key: []byte("absent")})}})
	require.NoError(t, err)

	var got []string
	require.NoError(t, s.ScanPrefix([]byte("g"), func(k, v []byte) error { got = append(got, string(k)); return nil }))
	require.Equal(t, []string{"g", "gx"}, got)
	got = nil
	require.NoError(t, s.Scan([]byte("ax"), []byte("c"), func(k, v []byte) error { got = append(got, string(k)); return nil }))
	require.Equal(t, []string{"ax", "b", "bx"}, got)

	// A scan stops at the callback's error and returns it.
	stop := errors.New("stop")
	n := 0
	err = s.Scan(nil, nil, func(k, v []byte) error { n++; return stop })
	require.ErrorIs(t, err, stop)
	require.Equal(t, 1, n)
}

func TestScanPrefixEdges(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	_, err := s.Apply([]Entry{{Index: 1, Data: mustOps(t,
		set("\xff", "1"), set("\xff\xff", "2"), set("\xfe\xff", "3"), set("\xff\x00", "4"), set("a", "5"))}})
	require.NoError(t, err)
	var got []string
	collect := func(k, v []byte) error { got = append(got, string(k)); return nil }
	require.NoError(t, s.ScanPrefix([]byte("\xff"), collect))
	require.Equal(t, []string{"\xff", "\xff\x00", "\xff\xff"}, got)
	got = nil
	require.NoError(t, s.ScanPrefix([]byte("\xfe"), collect))
	require.Equal(t, []string{"\xfe\xff"}, got)
	got = nil
	require.NoError(t, s.ScanPrefix(nil, collect))
	require.Len(t, got, 5)
}

func TestViewIsolation(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	_, err := s.Apply([]Entry{{Index: 1, Epoch: 2, Data: mustOps(t, set("a", "1"))}})
	require.NoError(t, err)
	v, err := s.View()
	require.NoError(t, err)
	defer v.Close()
	vh, err := v.StateHash()
	require.NoError(t, err)

	_, err = s.Apply([]Entry{{Index: 2, Epoch: 3, Data: mustOps(t, set("a", "2"), set("b", "new"))}})
	require.NoError(t, err)

	require.EqualValues(t, 1, v.Index())
	require.EqualValues(t, 2, v.Epoch())
	got, err := v.Get([]byte("a"))
	require.NoError(t, err)
	require.Equal(t, "1", string(got))
	_, err = v.Get([]byte("b"))
	require.ErrorIs(t, err, ErrNotFound)
	require.Equal(t, []string{"a"}, userKeys(t, v.Scan))
	vh2, err := v.StateHash()
	require.NoError(t, err)
	require.Equal(t, vh, vh2)
	sh, idx, err := s.StateHash()
	require.NoError(t, err)
	require.EqualValues(t, 2, idx)
	require.NotEqual(t, vh, sh)

	got, err = s.Get([]byte("a"))
	require.NoError(t, err)
	require.Equal(t, "2", string(got))

	require.NoError(t, v.Close())
	require.NoError(t, v.Close())
	_, err = v.Get([]byte("a"))
	require.ErrorIs(t, err, ErrClosed)
}

func TestClosedStore(t *testing.T) {
	s, err := Open(t.TempDir(), nil)
	require.NoError(t, err)
	applyGen(t, s, 1, 5)
	v, err := s.View()
	require.NoError(t, err)
	require.NoError(t, s.Close())
	require.NoError(t, s.Close(), "Close is idempotent")

	_, err = s.Apply([]Entry{genEntry(t, 6)})
	require.ErrorIs(t, err, ErrClosed)
	_, err = s.Get([]byte("k00001"))
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, s.Scan(nil, nil, func(k, v []byte) error { return nil }), ErrClosed)
	require.ErrorIs(t, s.ScanPrefix(nil, func(k, v []byte) error { return nil }), ErrClosed)
	_, err = s.View()
	require.ErrorIs(t, err, ErrClosed)
	_, _, err = s.StateHash()
	require.ErrorIs(t, err, ErrClosed)
	_, _, err = s.Checkpoint(filepath.Join(t.TempDir(), "ck"))
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, s.Sync(), ErrClosed)
	// The view left open was closed with the store.
	_, err = v.Get([]byte("k00001"))
	require.ErrorIs(t, err, ErrClosed)
	_, err = v.StateHash()
	require.ErrorIs(t, err, ErrClosed)
	require.NoError(t, v.Close())
	require.EqualValues(t, 5, s.AppliedIndex())
}

func TestCloseWhileBusy(t *testing.T) {
	s, err := Open(t.TempDir(), &Options{Sync: SyncGroup, GroupSyncInterval: time.Millisecond})
	require.NoError(t, err)
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				v, err := s.View()
				if err != nil {
					require.ErrorIs(t, err, ErrClosed)
					return
				}
				_, err = v.StateHash()
				if err != nil {
					require.ErrorIs(t, err, ErrClosed)
				}
				v.Close()
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := uint64(1); ; i++ {
			if _, err := s.Apply([]Entry{genEntry(t, i)}); err != nil {
				require.ErrorIs(t, err, ErrClosed)
				return
			}
		}
	}()
	deadline := time.Now().Add(10 * time.Second)
	for s.AppliedIndex() < 50 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond) // polling a condition
	}
	require.NoError(t, s.Close())
	close(stop)
	wg.Wait()
	idx := s.AppliedIndex()
	s2 := openTest(t, s.Dir(), nil)
	require.Equal(t, idx, s2.AppliedIndex(), "Close syncs what SyncGroup had not")
	m := newModel()
	m.advance(idx)
	h, _, err := s2.StateHash()
	require.NoError(t, err)
	require.Equal(t, m.hash(), h)
}

func TestReopenAndCheckpoint(t *testing.T) {
	for _, pol := range []SyncPolicy{SyncEveryBatch, SyncGroup} {
		t.Run(pol.String(), func(t *testing.T) {
			dir := t.TempDir()
			s, err := Open(dir, &Options{Sync: pol})
			require.NoError(t, err)
			applyGen(t, s, 1, 500)
			h, idx, err := s.StateHash()
			require.NoError(t, err)
			ck := filepath.Join(t.TempDir(), "ck")
			ci, ce, err := s.Checkpoint(ck)
			require.NoError(t, err)
			require.EqualValues(t, 500, ci)
			require.Equal(t, genEpoch(500), ce)
			_, _, err = s.Checkpoint(ck)
			require.Error(t, err, "checkpoint into an existing dir")
			applyGen(t, s, 501, 510) // after the checkpoint: not in it
			require.NoError(t, s.Close())

			c := openTest(t, ck, &Options{ReadOnly: true})
			ch, cidx, err := c.StateHash()
			require.NoError(t, err)
			require.Equal(t, h, ch)
			require.Equal(t, idx, cidx)
			_, err = c.Apply([]Entry{genEntry(t, 501)})
			require.ErrorIs(t, err, ErrReadOnly)
			_, _, err = c.Checkpoint(filepath.Join(t.TempDir(), "from-read-only"))
			require.ErrorIs(t, err, ErrReadOnly, "Pebble checkpoints only a writable store (WithFlushedWAL writes the WAL)")

			r := openTest(t, dir, &Options{Sync: pol})
			require.EqualValues(t, 510, r.AppliedIndex())
			m := newModel()
			m.advance(510)
			rh, _, err := r.StateHash()
			require.NoError(t, err)
			require.Equal(t, m.hash(), rh)
		})
	}
}

func TestOpenRefusesForeignDatabase(t *testing.T) {
	dir := t.TempDir()
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{discardLogger()}})
	require.NoError(t, err)
	require.NoError(t, db.Set([]byte("someone else's"), []byte("data"), pebble.Sync))
	require.NoError(t, db.Close())
	_, err = Open(dir, nil)
	require.ErrorIs(t, err, ErrCorrupt)

	_, err = Open(t.TempDir(), &Options{ReadOnly: true})
	require.Error(t, err, "read-only open of an empty directory")
}

func TestOptionsValidate(t *testing.T) {
	err := (&Options{Sync: 7, GroupSyncInterval: time.Hour, CacheSize: -1, MemTableSize: 1, DiskStallTimeout: time.Millisecond, CheckpointFlushBytes: -1}).Validate()
	require.ErrorIs(t, err, ErrInvalid)
	for _, field := range []string{"Sync", "GroupSyncInterval", "CacheSize", "MemTableSize", "DiskStallTimeout", "CheckpointFlushBytes"} {
		require.Contains(t, err.Error(), field)
	}
	_, err = Open(t.TempDir(), &Options{Sync: 7})
	require.ErrorIs(t, err, ErrInvalid)
	// A cache so large that CacheSize + 2 × MemTableSize would overflow.
	err = (&Options{CacheSize: math.MaxInt64}).Validate()
	require.ErrorIs(t, err, ErrInvalid)
	require.Contains(t, err.Error(), "CacheSize")
	// Past the memtable: a WAL that large is flushed by Pebble anyway.
	err = (&Options{MemTableSize: 2 << 20, CheckpointFlushBytes: 3 << 20}).Validate()
	require.ErrorIs(t, err, ErrInvalid)
	require.Contains(t, err.Error(), "CheckpointFlushBytes")
	require.NoError(t, (&Options{CheckpointFlushBytes: DefaultMemTableSize}).Validate())
	require.NoError(t, (*Options)(nil).Validate())
	require.NoError(t, (&Options{}).Validate())
}

// TestCheckpointFlushBytes: a checkpoint flushes the memtable only when
// the WAL holds CheckpointFlushBytes or more; below, it carries the WAL,
// and either way it opens at the index it reported with the same state.
func TestCheckpointFlushBytes(t *testing.T) {
	s := openTest(t, t.TempDir(), nil)
	flushes := func() int64 { return s.db.Metrics().Flush.Count }
	root := t.TempDir()
	check := func(name string, wantFlush bool) {
		t.Helper()
		before := flushes()
		dir := filepath.Join(root, name)
		index, _, err := s.Checkpoint(dir)
		require.NoError(t, err)
		require.Equal(t, s.AppliedIndex(), index)
		require.Equal(t, wantFlush, flushes() > before, "%s: flushed", name)
		var wal int64
		ents, err := os.ReadDir(dir)
		require.NoError(t, err)
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".log") {
				fi, err := e.Info()
				require.NoError(t, err)
				wal += fi.Size()
			}
		}
		if !wantFlush {
			require.Positive(t, wal, "%s: the checkpoint carries the WAL", name)
		}
		want, _, err := s.StateHash()
		require.NoError(t, err)
		r := openTest(t, dir, &Options{ReadOnly: true})
		require.Equal(t, index, r.AppliedIndex())
		got, _, err := r.StateHash()
		require.NoError(t, err)
		require.Equal(t, want, got, "%s: the checkpoint holds another state", name)
		require.NoError(t, r.Close())
		t.Logf("%s: index %d, WAL copied %d bytes, flushed %v", name, index, wal, wantFlush)
	}
	applyGen(t, s, 1, 2000) // well under 16 MiB of WAL
	check("small", false)
	// Past the default 16 MiB of WAL: flushed first.
	for i := uint64(0); i < 17; i++ {
		_, err := s.Apply([]Entry{{Index: 2001 + i, Epoch: 1, Data: mustOps(t, set(fmt.Sprint("big", i), strings.Repeat("v", 1<<20)))}})
		require.NoError(t, err)
	}
	check("large", true)
	applyGen(t, s, 2018, 2100)
	check("small-again", false)
}

// The applied BatchRef moves with the state: it survives a reopen and is in
// a checkpoint, and a 16-byte position written before BatchRef existed
// still opens (with a zero BatchRef).
func TestAppliedBatchPersists(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(dir, nil)
	require.NoError(t, err)
	require.Equal(t, BatchRef{}, s.appliedBatch())
	ref := BatchRef{First: 1, Count: 2, CRC: 0xdeadbeef}
	_, err = s.Apply([]Entry{
		{Index: 1, Epoch: 3, Data: mustOps(t, set("a", "1")), Batch: ref},
		{Index: 2, Epoch: 3, Data: mustOps(t, set("b", "2")), Batch: ref},
	})
	require.NoError(t, err)
	require.Equal(t, ref, s.appliedBatch())
	// A failed Apply leaves the ref alone.
	_, err = s.Apply([]Entry{{Index: 5, Epoch: 3, Batch: BatchRef{First: 5, Count: 1, CRC: 1}}})
	require.ErrorIs(t, err, ErrIndexGap)
	require.Equal(t, ref, s.appliedBatch())
	ck := filepath.Join(t.TempDir(), "ck")
	_, _, err = s.Checkpoint(ck)
	require.NoError(t, err)
	require.NoError(t, s.Close())

	r := openTest(t, dir, nil)
	require.Equal(t, ref, r.appliedBatch())
	require.EqualValues(t, 2, r.AppliedIndex())
	c := openTest(t, ck, &Options{ReadOnly: true})
	require.Equal(t, ref, c.appliedBatch())
	require.NoError(t, r.Close())

	// A legacy position: index 2, epoch 3, no BatchRef.
	db, err := pebble.Open(dir, &pebble.Options{Logger: pebbleLogger{discardLogger()}})
	require.NoError(t, err)
	require.NoError(t, db.Set(keyApplied, encodeApplied(position{index: 2, epoch: 3})[:16], pebble.Sync))
	require.NoError(t, db.Close())
	l := openTest(t, dir, nil)
	require.EqualValues(t, 2, l.AppliedIndex())
	require.EqualValues(t, 3, l.AppliedEpoch())
	require.Equal(t, BatchRef{}, l.appliedBatch())
}

// TestCheckpointCopiesLittleWAL: past CheckpointFlushBytes of WAL (here
// 1 MiB), Checkpoint flushes the memtable first, so the checkpoint copies
// only the WAL written since, not a memtable's worth.
func TestCheckpointCopiesLittleWAL(t *testing.T) {
	s := openTest(t, t.TempDir(), &Options{MemTableSize: 256 << 20, Sync: SyncGroup, CheckpointFlushBytes: 1 << 20})
	applyGen(t, s, 1, 20000) // ~6 MB of values, all in the memtable
	dest := filepath.Join(t.TempDir(), "ck")
	idx, _, err := s.Checkpoint(dest)
	require.NoError(t, err)
	require.EqualValues(t, 20000, idx)
	var wal, sst int64
	entries, err := os.ReadDir(dest)
	require.NoError(t, err)
	for _, e := range entries {
		fi, err := e.Info()
		require.NoError(t, err)
		switch filepath.Ext(e.Name()) {
		case ".log":
			wal += fi.Size()
		case ".sst":
			sst += fi.Size()
		}
	}
	t.Logf("checkpoint: WAL %d bytes, sstables %d bytes", wal, sst)
	require.Less(t, wal, int64(256<<10), "the checkpoint copied a large WAL")
	require.Greater(t, sst, int64(10<<10), "the state should be in sstables")
	c := openTest(t, dest, nil)
	require.EqualValues(t, 20000, c.AppliedIndex())
}

// TestCheckpointDuringApply: checkpoints taken while Apply runs without a
// pause (Checkpoint never holds Apply off) each hold exactly the state of
// the index they report (the model's hash at that index), at least what
// was applied before the call, hold no LOCK file, and open as stores at
// that index.
func TestCheckpointDuringApply(t *testing.T) {
	for _, c := range []struct {
		pol   SyncPolicy
		flush int64 // CheckpointFlushBytes: 1 always flushes; 1 MiB mixes flushed and WAL-carrying checkpoints
	}{{SyncEveryBatch, 1}, {SyncGroup, 1}, {SyncEveryBatch, 1 << 20}, {SyncGroup, 256 << 10}} {
		pol := c.pol
		t.Run(fmt.Sprintf("%v/flush-%d", pol, c.flush), func(t *testing.T) {
			s := openTest(t, t.TempDir(), &Options{Sync: pol, MemTableSize: 1 << 20, CheckpointFlushBytes: c.flush})
			stop := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				defer close(done)
				for first := uint64(1); ; {
					select {
					case <-stop:
						return
					default:
					}
					end := first + batchLen(first) - 1
					es := make([]Entry, 0, end-first+1)
					for i := first; i <= end; i++ {
						data, err := EncodeOps(genOps(i))
						if err != nil {
							done <- err
							return
						}
						es = append(es, Entry{Index: i, Epoch: genEpoch(i), Data: data})
					}
					if _, err := s.Apply(es); err != nil {
						done <- err
						return
					}
					first = end + 1
				}
			}()
			type ck struct {
				dir          string
				index, epoch uint64
			}
			var cks []ck
			root := t.TempDir()
			var prev uint64
			for moving := 0; moving < 8; {
				before := s.AppliedIndex()
				dir := filepath.Join(root, fmt.Sprint(len(cks)))
				index, epoch, err := s.Checkpoint(dir)
				require.NoError(t, err)
				require.GreaterOrEqual(t, index, before, "the checkpoint misses what was applied before the call")
				cks = append(cks, ck{dir, index, epoch})
				if index > prev {
					moving++ // taken while Apply moved the index
				}
				prev = index
			}
			close(stop)
			require.NoError(t, <-done)
			m := newModel()
			for _, c := range cks {
				_, err := os.Stat(filepath.Join(c.dir, "LOCK"))
				require.True(t, os.IsNotExist(err), "checkpoint %s holds a LOCK file", c.dir)
				require.GreaterOrEqual(t, c.index, m.applied)
				m.advance(c.index)
				if c.index > 0 {
					require.Equal(t, genEpoch(c.index), c.epoch)
				}
				r := openTest(t, c.dir, &Options{ReadOnly: true})
				require.Equal(t, c.index, r.AppliedIndex())
				h, idx, err := r.StateHash()
				require.NoError(t, err)
				require.Equal(t, c.index, idx)
				require.Equal(t, m.hash(), h, "checkpoint at %d holds another state", c.index)
				require.NoError(t, r.Close())
			}
			wal, opened := s.ckptPosWAL.Load(), s.ckptPosOpen.Load()
			t.Logf("%d checkpoints up to index %d (position read from the WAL %d times, by opening %d)", len(cks), prev, wal, opened)
			require.Equal(t, int64(len(cks)), wal+opened)
			if c.flush > 1 {
				require.Positive(t, wal, "no checkpoint read its position from the WAL it carries")
			}
		})
	}
}

// TestBlockCacheHoldsBlocks: Pebble charges memtables to the block cache,
// so a cache no larger than the memtables caches no block and every read
// goes back to the file. Repeated reads of the same flushed keys must hit
// the cache.
func TestBlockCacheHoldsBlocks(t *testing.T) {
	// Small sizes, so that the memtables reach their full size (Pebble
	// grows them from 256 KiB) after a few flushes.
	s := openTest(t, t.TempDir(), &Options{CacheSize: 1 << 20, MemTableSize: 1 << 20})
	applyGen(t, s, 1, 20000)
	require.NoError(t, s.db.Flush())
	// Compactions look blocks up in the same cache (and count there): let
	// them finish, so that the counts below are the Gets'.
	require.Eventually(t, func() bool {
		m := s.db.Metrics()
		return m.Compact.NumInProgress == 0 && m.Compact.EstimatedDebt == 0
	}, 30*time.Second, 50*time.Millisecond, "compactions did not settle")
	before := s.db.Metrics().BlockCache
	for i := 0; i < 200; i++ {
		_, err := s.Get(testKey(uint64(i % 20)))
		if err != nil {
			require.ErrorIs(t, err, ErrNotFound)
		}
	}
	after := s.db.Metrics().BlockCache
	hits, misses := after.Hits-before.Hits, after.Misses-before.Misses
	t.Logf("block cache: %d hits, %d misses over 200 Gets of 20 keys (size %d bytes)", hits, misses, after.Size)
	require.Greater(t, hits, 2*misses, "the block cache holds no blocks")
}

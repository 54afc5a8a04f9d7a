package store

import (
	"encoding/binary"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/stretchr/testify/require"
)

// copyDir copies every regular file of src into a new dir.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	ents, err := os.ReadDir(src)
	require.NoError(t, err)
	for _, e := range ents {
		in, err := os.Open(filepath.Join(src, e.Name()))
		require.NoError(t, err)
		out, err := os.Create(filepath.Join(dst, e.Name()))
		require.NoError(t, err)
		_, err = io.Copy(out, in)
		require.NoError(t, err)
		require.NoError(t, in.Close())
		require.NoError(t, out.Close())
	}
	return dst
}

// walFiles lists dir's WAL files, oldest first.
func walFiles(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	var logs []string
	for _, e := range ents {
		if strings.HasSuffix(e.Name(), ".log") {
			logs = append(logs, filepath.Join(dir, e.Name()))
		}
	}
	sort.Strings(logs)
	return logs
}

// TestWALPositionMatchesOpen: the position read from a checkpoint's WAL
// (walPosition) is the one Pebble's own recovery finds (a read-only open),
// whenever walPosition vouches for it, on WAL copies cut short at every
// kind of offset (the torn tail a copy racing Apply takes), with bytes
// flipped and with runs zeroed; and when it does not vouch, Checkpoint
// opens the image instead. Both outcomes must occur.
func TestWALPositionMatchesOpen(t *testing.T) {
	s := openTest(t, t.TempDir(), &Options{MemTableSize: 4 << 20, CheckpointFlushBytes: 4 << 20})
	applyGen(t, s, 1, 3000)
	src := filepath.Join(t.TempDir(), "ckpt")
	index, _, err := s.Checkpoint(src)
	require.NoError(t, err)
	require.Equal(t, uint64(3000), index)
	require.Equal(t, int64(1), s.ckptPosWAL.Load(), "the WAL-carrying checkpoint did not read its position from the WAL")
	logs := walFiles(t, src)
	require.NotEmpty(t, logs)
	newest := logs[len(logs)-1]
	st, err := os.Stat(newest)
	require.NoError(t, err)
	size := st.Size()
	require.Greater(t, size, int64(64<<10), "the WAL should span several 32 KiB blocks")

	rng := rand.New(rand.NewPCG(20261127, 1))
	type mutation struct {
		name string
		do   func(f *os.File) error
		file string // default: the newest WAL
	}
	var ms []mutation
	cut := func(off int64) mutation {
		return mutation{name: "cut", do: func(f *os.File) error { return f.Truncate(off) }}
	}
	for _, off := range []int64{0, 1, 6, 7, 11, 12, 32<<10 - 1, 32 << 10, 32<<10 + 7, size - 1, size - 7} {
		ms = append(ms, cut(off))
	}
	for i := 0; i < 40; i++ {
		ms = append(ms, cut(rng.Int64N(size)))
	}
	for i := 0; i < 40; i++ {
		off := rng.Int64N(size)
		ms = append(ms, mutation{name: "flip", do: func(f *os.File) error {
			b := make([]byte, 1)
			if _, err := f.ReadAt(b, off); err != nil {
				return err
			}
			b[0] ^= 1 << rng.IntN(8)
			_, err := f.WriteAt(b, off)
			return err
		}})
	}
	for i := 0; i < 20; i++ {
		off, n := rng.Int64N(size), 1+rng.Int64N(4096)
		ms = append(ms, mutation{name: "zero", do: func(f *os.File) error {
			_, err := f.WriteAt(make([]byte, min(n, size-off)), off)
			return err
		}})
	}
	// An older WAL cut short: Pebble's recovery calls that corruption (an
	// older WAL ends cleanly), so the WAL must not vouch.
	require.Greater(t, len(logs), 1, "the checkpoint should carry two WALs (the memtable grows from 256 KiB)")
	{
		old, err := os.Stat(logs[0])
		require.NoError(t, err)
		for i := 0; i < 5; i++ {
			m := cut(rng.Int64N(old.Size()))
			m.name, m.file = "cut older", filepath.Base(logs[0])
			ms = append(ms, m)
		}
	}
	var vouched, fellBack int
	for i, m := range ms {
		dir := copyDir(t, src)
		file := m.file
		if file == "" {
			file = filepath.Base(newest)
		}
		f, err := os.OpenFile(filepath.Join(dir, file), os.O_RDWR, 0)
		require.NoError(t, err)
		require.NoError(t, m.do(f))
		require.NoError(t, f.Close())
		p, why := walPosition(vfs.Default, dir)
		oIndex, oEpoch, oerr := checkpointPosition(vfs.Default, dir, slog.New(slog.DiscardHandler))
		if m.file != "" {
			// Pebble's recovery replays this older WAL (no flush happened:
			// the memtables stayed under their flush size), so a cut in it
			// is corruption to Pebble too; were it below the flushed
			// floor, this case would test nothing.
			require.Error(t, oerr, "mutation %d (%s): Pebble opened an image whose older WAL was cut", i, m.name)
		}
		if why != "" {
			fellBack++
			t.Logf("mutation %d (%s): not vouched (%s); open: %d, %v", i, m.name, why, oIndex, oerr)
			continue
		}
		vouched++
		require.NoError(t, oerr, "mutation %d (%s): the WAL vouched for %d but Pebble does not open the image", i, m.name, p.index)
		require.Equal(t, oIndex, p.index, "mutation %d (%s): WAL position %d, Pebble's recovery %d", i, m.name, p.index, oIndex)
		require.Equal(t, oEpoch, p.epoch, "mutation %d (%s)", i, m.name)
	}
	t.Logf("%d mutations: %d vouched (equal to Pebble's recovery), %d fell back to opening", len(ms), vouched, fellBack)
	require.Positive(t, vouched)
	require.Positive(t, fellBack)
}

// TestCheckpointPositionFallsBack: a checkpoint taken right after a flush
// carries a WAL with no Apply in it; its position comes from opening it,
// and is right.
func TestCheckpointPositionFallsBack(t *testing.T) {
	s := openTest(t, t.TempDir(), &Options{CheckpointFlushBytes: 1})
	applyGen(t, s, 1, 500)
	index, _, err := s.Checkpoint(filepath.Join(t.TempDir(), "ckpt"))
	require.NoError(t, err)
	require.Equal(t, uint64(500), index)
	require.Equal(t, int64(0), s.ckptPosWAL.Load())
	require.Equal(t, int64(1), s.ckptPosOpen.Load(), "a checkpoint whose WAL holds no Apply must be opened to read its position")
}

// walEntry is one entry of a hand-encoded batch.
type walEntry struct {
	kind       pebble.InternalKeyKind
	key, value []byte
}

// encodeBatch encodes a batch repr (header: seqnum, count; entries: kind,
// varint-length key[, varint-length value]) with the given header count.
func encodeBatch(seq uint64, count uint32, es ...walEntry) []byte {
	b := binary.LittleEndian.AppendUint64(nil, seq)
	b = binary.LittleEndian.AppendUint32(b, count)
	for _, e := range es {
		b = append(b, byte(e.kind))
		b = binary.AppendUvarint(b, uint64(len(e.key)))
		b = append(b, e.key...)
		if e.kind != pebble.InternalKeyKindDelete && e.kind != pebble.InternalKeyKindLogData {
			b = binary.AppendUvarint(b, uint64(len(e.value)))
			b = append(b, e.value...)
		}
	}
	return b
}

// writeWAL writes records to dir/<num>.log in Pebble's record format.
func writeWAL(t *testing.T, dir string, num int, recs ...[]byte) {
	t.Helper()
	f, err := os.Create(filepath.Join(dir, fmt.Sprintf("%06d.log", num)))
	require.NoError(t, err)
	w := record.NewWriter(f)
	for _, r := range recs {
		_, err := w.WriteRecord(r)
		require.NoError(t, err)
	}
	require.NoError(t, w.Close())
	require.NoError(t, f.Close())
}

// TestWALPositionCases: walPosition on hand-written WALs, including the
// writes the store never makes; each must vouch for the newest Set of
// the applied key in the newest WAL or fall back, never guess.
func TestWALPositionCases(t *testing.T) {
	pos := func(i uint64) []byte { return encodeApplied(position{index: i, epoch: 7}) }
	set := func(k, v []byte) walEntry { return walEntry{pebble.InternalKeyKindSet, k, v} }
	user := appendUserKey(nil, []byte("k"))
	applied := func(seq, i uint64) []byte {
		return encodeBatch(seq, 2, set(user, []byte("v")), set(keyApplied, pos(i)))
	}
	logData := encodeBatch(0, 0, walEntry{kind: pebble.InternalKeyKindLogData, key: []byte("x")})
	for _, c := range []struct {
		name  string
		wals  [][][]byte // per WAL file, oldest first: its records
		want  uint64     // 0: must fall back
		match string     // in the reason, when falling back
	}{
		{"last set wins", [][][]byte{{applied(10, 5), applied(12, 6), logData, applied(14, 9)}}, 9, ""},
		{"newest WAL decides", [][][]byte{{applied(10, 5)}, {logData, applied(12, 6)}}, 6, ""},
		{"only an older WAL has it", [][][]byte{{applied(10, 5)}, {logData}}, 0, "no applied position"},
		{"no WAL", nil, 0, "no WAL"},
		{"count mismatch", [][][]byte{{applied(10, 5), encodeBatch(12, 3, set(keyApplied, pos(6)))}}, 0, "says 3"},
		{"delete of the position", [][][]byte{{applied(10, 5), encodeBatch(12, 1, walEntry{kind: pebble.InternalKeyKindDelete, key: keyApplied})}}, 0, "written by"},
		{"range deletion over it", [][][]byte{{applied(10, 5), encodeBatch(12, 1, walEntry{pebble.InternalKeyKindRangeDelete, []byte(internalPrefix), []byte(internalPrefix + "zzz")})}}, 0, "range deletion"},
		{"range deletion beside it", [][][]byte{{applied(10, 5), encodeBatch(12, 1, walEntry{pebble.InternalKeyKindRangeDelete, userLower, []byte{userPrefixByte + 1}})}}, 5, ""},
		{"a record too short for a batch", [][][]byte{{applied(10, 5), []byte("short")}}, 0, "invalid batch"},
		{"an undecodable entry", [][][]byte{{applied(10, 5), append(encodeBatch(12, 1), 0xff)}}, 0, "invalid key kind"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			for i, recs := range c.wals {
				writeWAL(t, dir, i+1, recs...)
			}
			p, why := walPosition(vfs.Default, dir)
			if c.want == 0 {
				require.NotEmpty(t, why, "vouched for %d", p.index)
				require.Contains(t, why, c.match)
				return
			}
			require.Empty(t, why, "fell back")
			require.Equal(t, c.want, p.index)
			require.Equal(t, uint64(7), p.epoch)
		})
	}
}

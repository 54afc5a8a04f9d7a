package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// splitmix64 is a deterministic mixer for generating test entries.
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

func testKey(n uint64) []byte { return []byte(fmt.Sprintf("k%05d", n)) }

// genOps returns the deterministic ops of entry i.
func genOps(i uint64) []Op {
	r := splitmix64(i)
	nops := 1 + int(r%4)
	ops := make([]Op, 0, nops)
	for j := 0; j < nops; j++ {
		r = splitmix64(r)
		key := testKey(r % 2000)
		switch p := (r >> 20) % 100; {
		case p < 85:
			vlen := 8 + int((r>>32)%600)
			unit := []byte(fmt.Sprintf("%d/%d;", i, j))
			v := bytes.Repeat(unit, vlen/len(unit)+1)[:vlen]
			ops = append(ops, Op{Kind: OpSet, Key: key, Value: v})
		case p < 98:
			ops = append(ops, Op{Kind: OpDelete, Key: key})
		default:
			ops = append(ops, Op{Kind: OpDeleteRange, Key: key, End: testKey(r%2000 + 1 + (r>>40)%15)})
		}
	}
	return ops
}

func genEpoch(i uint64) uint64 { return i/100 + 1 }

func genEntry(t testing.TB, i uint64) Entry {
	data, err := EncodeOps(genOps(i))
	require.NoError(t, err)
	return Entry{Index: i, Epoch: genEpoch(i), Data: data}
}

func genEntries(t testing.TB, from, to uint64) []Entry {
	var es []Entry
	for i := from; i <= to; i++ {
		es = append(es, genEntry(t, i))
	}
	return es
}

// batchLen is the deterministic number of entries of the batch starting at first.
func batchLen(first uint64) uint64 { return 1 + splitmix64(first^0xabcdef)%12 }

// model is an independent map implementation of the ops semantics and hash.
type model struct {
	kv      map[string][]byte
	applied uint64
}

func newModel() *model { return &model{kv: map[string][]byte{}} }

func (m *model) apply(ops []Op) {
	for _, op := range ops {
		switch op.Kind {
		case OpSet:
			m.kv[string(op.Key)] = append([]byte{}, op.Value...)
		case OpDelete:
			delete(m.kv, string(op.Key))
		case OpDeleteRange:
			for k := range m.kv {
				if k >= string(op.Key) && k < string(op.End) {
					delete(m.kv, k)
				}
			}
		}
	}
}

// advance applies generated entries up to index to.
func (m *model) advance(to uint64) {
	for m.applied < to {
		m.applied++
		m.apply(genOps(m.applied))
	}
}

func (m *model) hash() string {
	keys := make([]string, 0, len(m.kv))
	for k := range m.kv {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(k))))
		h.Write([]byte(k))
		v := m.kv[k]
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(v))))
		h.Write(v)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func openTest(t testing.TB, dir string, opts *Options) *Store {
	t.Helper()
	s, err := Open(dir, opts)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return s
}

// applyGen applies generated entries [from, to] in deterministic batches.
func applyGen(t testing.TB, s *Store, from, to uint64) {
	t.Helper()
	for first := from; first <= to; {
		last := min(first+batchLen(first)-1, to)
		_, err := s.Apply(genEntries(t, first, last))
		require.NoError(t, err)
		first = last + 1
	}
}

func userKeys(t testing.TB, scan func(lower, upper []byte, fn func(k, v []byte) error) error) []string {
	t.Helper()
	var keys []string
	require.NoError(t, scan(nil, nil, func(k, v []byte) error {
		keys = append(keys, string(k))
		return nil
	}))
	return keys
}

func discardLogger() *slog.Logger { return slog.New(slog.DiscardHandler) }

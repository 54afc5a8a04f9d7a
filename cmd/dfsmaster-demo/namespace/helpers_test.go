package namespace

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/roomlog/roomlog/store"
)

// nsStore is a real store running the namespace Applier, fed one entry at a
// time (the way a replica applies a log).
type nsStore struct {
	t *testing.T
	s *store.Store
}

func newNSStore(t *testing.T) *nsStore {
	t.Helper()
	s, err := store.Open(t.TempDir(), &store.Options{Applier: Applier{}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	return &nsStore{t: t, s: s}
}

// applyEntries applies raw entries in one store.Apply call.
func (n *nsStore) applyEntries(entries ...[]byte) []Response {
	n.t.Helper()
	batch := make([]store.Entry, len(entries))
	for i, data := range entries {
		batch[i] = store.Entry{Index: n.s.AppliedIndex() + 1 + uint64(i), Epoch: 1, Data: data}
	}
	raw, err := n.s.Apply(batch)
	require.NoError(n.t, err)
	out := make([]Response, len(raw))
	for i, b := range raw {
		out[i], err = DecodeResponse(b)
		require.NoError(n.t, err)
	}
	return out
}

// do applies one command, encoded without validation so the applier's own
// checks are exercised too.
func (n *nsStore) do(c Command) Response {
	n.t.Helper()
	return n.applyEntries(encodeRaw(n.t, c))[0]
}

// ok applies c and requires success.
func (n *nsStore) ok(c Command) Response {
	n.t.Helper()
	r := n.do(c)
	require.NoError(n.t, r.Err(), "%+v", c)
	return r
}

func (n *nsStore) hash() string {
	n.t.Helper()
	h, _, err := n.s.StateHash()
	require.NoError(n.t, err)
	return h
}

// nsKeys returns every namespace key, in order.
func (n *nsStore) nsKeys() []string {
	n.t.Helper()
	var keys []string
	require.NoError(n.t, n.s.ScanPrefix([]byte(Prefix), func(k, _ []byte) error {
		keys = append(keys, string(k))
		return nil
	}))
	return keys
}

func (n *nsStore) ls(p string) ([]Entry, error) {
	n.t.Helper()
	v, err := n.s.View()
	require.NoError(n.t, err)
	defer v.Close()
	return Ls(v, p)
}

func (n *nsStore) stat(p string) (Info, error) {
	n.t.Helper()
	v, err := n.s.View()
	require.NoError(n.t, err)
	defer v.Close()
	return Stat(v, p)
}

func (n *nsStore) names(p string) []string {
	n.t.Helper()
	entries, err := n.ls(p)
	require.NoError(n.t, err)
	names := []string{}
	for _, e := range entries {
		names = append(names, e.Name)
	}
	return names
}

// encodeRaw encodes c without Validate.
func encodeRaw(t testing.TB, c Command) []byte {
	t.Helper()
	var buf bytes.Buffer
	buf.WriteByte(CommandVersion)
	require.NoError(t, msgpack.NewEncoder(&buf).Encode(&c))
	return buf.Bytes()
}

func cmdMkdir(p string, parents bool) Command { return Command{Op: OpMkdir, Path: p, Parents: parents} }
func cmdCreate(p string, repl int) Command    { return Command{Op: OpCreate, Path: p, Replication: repl} }
func cmdAddBlock(p string, size int64) Command {
	return Command{Op: OpAddBlock, Path: p, Size: size}
}
func cmdRename(src, dst string) Command { return Command{Op: OpRename, Path: src, Dst: dst} }
func cmdDelete(p string, recursive bool) Command {
	return Command{Op: OpDelete, Path: p, Recursive: recursive}
}

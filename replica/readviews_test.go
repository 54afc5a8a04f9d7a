package replica

import (
	"context"
	"reflect"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

// methodNames lists the exported methods of t's method set, sorted.
func methodNames(t reflect.Type) []string {
	var names []string
	for i := 0; i < t.NumMethod(); i++ {
		names = append(names, t.Method(i).Name)
	}
	slices.Sort(names)
	return names
}

// Store hands out the reads alone: its value's methods are exactly
// store.Reader's, and neither a type assertion to *store.Store nor to any
// write method of the store reaches a write.
func TestStoreReturnsReadOnlyView(t *testing.T) {
	r := &Replica{}
	var got any = r.Store()

	require.Equal(t, methodNames(reflect.TypeFor[store.Reader]()), methodNames(reflect.TypeOf(got)),
		"Store's value exposes exactly store.Reader's methods")
	_, isStore := got.(*store.Store)
	require.False(t, isStore, "Store's value is not the *store.Store")
	for name, iface := range map[string]reflect.Type{
		"Apply": reflect.TypeFor[interface {
			Apply([]store.Entry) ([][]byte, error)
		}](),
		"ApplyOutcomes": reflect.TypeFor[interface {
			ApplyOutcomes([]store.Entry) ([]store.Outcome, error)
		}](),
		"Checkpoint": reflect.TypeFor[interface {
			Checkpoint(string) (uint64, uint64, error)
		}](),
		"Sync":   reflect.TypeFor[interface{ Sync() error }](),
		"Close":  reflect.TypeFor[interface{ Close() error }](),
		"DiskOp": reflect.TypeFor[interface{ DiskOp(op, path string) func() }](),
	} {
		// Each is a write of the store's (a renamed write method would
		// make this test pass vacuously).
		require.Truef(t, reflect.TypeFor[*store.Store]().Implements(iface), "*store.Store has no %s: update this test", name)
		require.Falsef(t, reflect.TypeOf(got).Implements(iface), "Store's value has %s", name)
	}
}

// Room hands out the room's reads alone: no writer, no channel deletion,
// no client, and no field through which the *logroom.Room is reached.
func TestRoomReturnsReadOnlyView(t *testing.T) {
	r := &Replica{}
	typ := reflect.TypeOf(r.Room())

	require.Equal(t, []string{"Bytes", "Channels", "CommittedIndex", "Epoch", "Name", "Path", "Usage"}, methodNames(typ),
		"Room's value exposes the room's reads alone")
	for i := 0; i < typ.NumField(); i++ {
		require.Falsef(t, typ.Field(i).IsExported(), "RoomReader has the exported field %s", typ.Field(i).Name)
	}
	for name, iface := range map[string]reflect.Type{
		"NewWriter": reflect.TypeFor[interface {
			NewWriter(context.Context, logroom.WriterConfig) (*logroom.Writer, error)
		}](),
		"DeleteChannel": reflect.TypeFor[interface {
			DeleteChannel(context.Context, uint64) error
		}](),
		"Client": reflect.TypeFor[interface{ Client() *logroom.Client }](),
	} {
		require.Truef(t, reflect.TypeFor[*logroom.Room]().Implements(iface), "*logroom.Room has no %s: update this test", name)
		require.Falsef(t, typ.Implements(iface), "Room's value has %s", name)
	}
}

// openTestStore opens a store in a temp dir with key set to value at index 1.
func openTestStore(t *testing.T, key, value string) *store.Store {
	t.Helper()
	st, err := store.Open(t.TempDir(), &store.Options{})
	require.NoError(t, err)
	data, err := store.EncodeOps([]store.Op{{Kind: store.OpSet, Key: []byte(key), Value: []byte(value)}})
	require.NoError(t, err)
	_, err = st.Apply([]store.Entry{{Index: 1, Epoch: 1, Data: data}})
	require.NoError(t, err)
	return st
}

// A Reader obtained before a bootstrap reads the new store after it (the
// swap installCheckpoint makes under storeMu); only a View opened on the
// old store is closed with it.
func TestStoreReaderFollowsBootstrap(t *testing.T) {
	old := openTestStore(t, "k", "old")
	r := &Replica{st: old}
	rd := r.Store()

	v, err := rd.Get([]byte("k"))
	require.NoError(t, err)
	require.Equal(t, "old", string(v))
	oldView, err := rd.View()
	require.NoError(t, err)

	// The bootstrap's swap: close the old store, install another.
	restored := openTestStore(t, "k", "restored")
	t.Cleanup(func() { _ = restored.Close() })
	r.storeMu.Lock()
	require.NoError(t, old.Close())
	r.setStore(restored)
	r.storeMu.Unlock()

	v, err = rd.Get([]byte("k"))
	require.NoError(t, err, "a Reader obtained before the bootstrap reads the new store")
	require.Equal(t, "restored", string(v))
	require.Equal(t, uint64(1), rd.AppliedIndex())
	wantHash, _, err := restored.StateHash()
	require.NoError(t, err)
	hash, index, err := rd.StateHash()
	require.NoError(t, err)
	require.Equal(t, wantHash, hash)
	require.Equal(t, uint64(1), index)
	n, err := rd.RequestTableLen()
	require.NoError(t, err)
	require.Zero(t, n)
	_, ok, err := rd.LookupRequest(store.RequestIDFromKey("none"))
	require.NoError(t, err)
	require.False(t, ok)

	_, err = oldView.Get([]byte("k"))
	require.ErrorIs(t, err, store.ErrClosed, "a view of the old store is closed with it")
	nv, err := rd.View()
	require.NoError(t, err)
	defer nv.Close()
	v, err = nv.Get([]byte("k"))
	require.NoError(t, err)
	require.Equal(t, "restored", string(v))
}

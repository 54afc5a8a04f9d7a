package replica

import (
	"context"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

// Read-only handles on the replica's store and room (Store, Room): they
// expose the reads alone, so a caller cannot write beside the replica.

// storeReader is what Store returns: every call reads the replica's
// current store under storeMu's read lock, so a storeReader follows the
// store across bootstraps (a bootstrap waits for the calls in progress,
// and the calls after it read the new store). Unexported, so that no type
// assertion leads to a write.
type storeReader struct{ r *Replica }

var _ store.Reader = storeReader{}

func (s storeReader) Get(key []byte) ([]byte, error) { return s.r.Get(key) }

func (s storeReader) StateHash() (hash string, index uint64, err error) { return s.r.StateHash() }

// View opens a view of the current store. The view is of that store: once
// a bootstrap replaces it, the view's reads return store.ErrClosed (open a
// new one).
func (s storeReader) View() (*store.View, error) {
	s.r.storeMu.RLock()
	defer s.r.storeMu.RUnlock()
	return s.r.st.View()
}

func (s storeReader) AppliedIndex() uint64 {
	s.r.storeMu.RLock()
	defer s.r.storeMu.RUnlock()
	return s.r.st.AppliedIndex()
}

func (s storeReader) LookupRequest(id store.RequestID) (store.RequestRecord, bool, error) {
	s.r.storeMu.RLock()
	defer s.r.storeMu.RUnlock()
	return s.r.st.LookupRequest(id)
}

func (s storeReader) RequestTableLen() (int, error) {
	s.r.storeMu.RLock()
	defer s.r.storeMu.RUnlock()
	return s.r.st.RequestTableLen()
}

// RoomReader is the read side of the replica's logroom.Room (Replica.Room):
// the room's name and paths, its epoch, channels and size, and the
// committed end of its log. Writing (a writer, deleting channels) is the
// replica's alone. Obtain one from Replica.Room; the zero value is not
// usable. Safe for concurrent use.
type RoomReader struct{ room *logroom.Room }

// Name returns the room name.
func (v RoomReader) Name() string { return v.room.Name() }

// Path joins sub to the room's znode path: v.Path("members").
func (v RoomReader) Path(sub ...string) string { return v.room.Path(sub...) }

// Epoch returns the room's current epoch (0 before the first writer).
func (v RoomReader) Epoch(ctx context.Context) (uint64, error) { return v.room.Epoch(ctx) }

// Channels lists the room's channels in ascending order
// (logroom.Room.Channels).
func (v RoomReader) Channels(ctx context.Context) ([]logroom.ChannelInfo, error) {
	return v.room.Channels(ctx)
}

// Bytes returns the data bytes the room's batch znodes hold in ZooKeeper
// (logroom.Room.Bytes).
func (v RoomReader) Bytes(ctx context.Context) (int64, error) { return v.room.Bytes(ctx) }

// Usage measures what the room holds in ZooKeeper (logroom.Room.Usage).
func (v RoomReader) Usage(ctx context.Context) (logroom.Usage, error) { return v.room.Usage(ctx) }

// CommittedIndex returns the last index of the contiguous committed log,
// after a ZooKeeper sync; hint is an index known to be committed, or 0
// (logroom.Room.CommittedIndex).
func (v RoomReader) CommittedIndex(ctx context.Context, hint uint64) (uint64, error) {
	return v.room.CommittedIndex(ctx, hint)
}

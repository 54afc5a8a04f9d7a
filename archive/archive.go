package archive

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/logroom"
)

// Sentinel errors. Check them with errors.Is; every error that wraps one
// names the item (its path in a Dir) and what was wrong.
var (
	// ErrCorrupt: an item failed verification on read (checksum, size,
	// truncation, a missing or extra file, a batch that does not decode or
	// does not continue the previous one). Nothing of it is used.
	ErrCorrupt = errors.New("archive: corrupt item")
	// ErrConflict: a put found a valid item under the same key (room
	// incarnation and index range) with other content. Nothing was written.
	ErrConflict = errors.New("archive: another item under the same key")
	// ErrForeign: an item records another room or room incarnation than
	// the key it is stored under (a checkpoint copied into the wrong place).
	ErrForeign = errors.New("archive: item of another room or room incarnation")
	// ErrNotCovered: the archive cannot build the state asked for (no
	// archived checkpoint at or below the index, a gap between archived
	// items, an index past the newest archived one, a time before the
	// oldest archived batch).
	ErrNotCovered = errors.New("archive: index not covered by the archive")
	// ErrAmbiguous: the archive holds items of several incarnations of the
	// room, the restore named none (RestoreOptions.RoomCzxid, RoomFence)
	// or a czxid several share, and the re-seed chain the archive records
	// cannot tell which is in service. A wiped or new ensemble counts
	// zxids from zero, so the order of czxids says nothing about which
	// incarnation is newer; the error lists each one, what it covers,
	// when its last archived batch committed and what the chain says of
	// it.
	ErrAmbiguous = errors.New("archive: several incarnations of the room are archived; name one")
	// ErrNotFound: no item under the key asked for.
	ErrNotFound = errors.New("archive: no such item")
)

// Origin is the room incarnation items belong to: the room's name, the
// zxid that created its znode, and the name of its epoch znode.
//
// The czxid alone does not identify an incarnation: a wiped or new
// ensemble counts zxids from zero, so a room re-seeded there may be
// created at the czxid a lost incarnation had. The epoch znode's name
// does: a room OpenRoom creates has "epoch" (logroom.EpochZnode) and a
// czxid unique within one ensemble's life, and after a wipe the only way
// back is a re-seed (logroom.SeedRoom), which draws a fresh
// "epoch-<16 hex>". Together they are an identity no other incarnation
// can reproduce.
type Origin struct {
	Room      string
	RoomCzxid int64
	// Fence is the room's epoch znode name (logroom.RoomInfo.EpochZnode,
	// logroom.Room.EpochZnode). Required: an empty one is refused, never
	// taken for "epoch".
	Fence string
}

func (o Origin) String() string {
	if o.Fence == logroom.EpochZnode {
		return fmt.Sprintf("room %q created at zxid 0x%x", o.Room, o.RoomCzxid)
	}
	return fmt.Sprintf("room %q created at zxid 0x%x with epoch znode %q", o.Room, o.RoomCzxid, o.Fence)
}

// ID names the incarnation as the restore commands' --incarnation takes
// it and as errors list it: "0x<czxid>/<epoch znode>".
func (o Origin) ID() string { return fmt.Sprintf("0x%x/%s", o.RoomCzxid, o.Fence) }

// ParseIncarnation parses an incarnation as the restore commands'
// --incarnation take it: "<czxid>" (0x for hex), or "<czxid>/<epoch znode>"
// (Origin.ID). The epoch znode is "" when not given.
func ParseIncarnation(s string) (czxid int64, fence string, err error) {
	cz, fence, _ := strings.Cut(s, "/")
	czxid, err = strconv.ParseInt(cz, 0, 64)
	if err != nil || czxid <= 0 {
		return 0, "", fmt.Errorf("archive: incarnation %q: %q is not a czxid (a positive integer, e.g. 0x1f)", s, cz)
	}
	if strings.Contains(s, "/") && !logroom.ValidEpochZnode(fence) {
		return 0, "", fmt.Errorf("archive: incarnation %q: %q is not an epoch znode name (%q, or %q and 16 hex digits)",
			s, fence, logroom.EpochZnode, logroom.EpochZnode+"-")
	}
	return czxid, fence, nil
}

// Checkpoint is the origin package checkpoint records in a manifest (the
// room and czxid; the archive's own records add the fence).
func (o Origin) Checkpoint() checkpoint.Origin {
	return checkpoint.Origin{Room: o.Room, RoomCzxid: o.RoomCzxid}
}

// validate refuses an origin that cannot key items.
func (o Origin) validate() error {
	switch {
	case o.RoomCzxid <= 0:
		return fmt.Errorf("archive: origin %v has no room czxid", o)
	case o.Fence == "":
		return fmt.Errorf("archive: origin of room %q (zxid 0x%x) names no epoch znode (Origin.Fence: logroom.RoomInfo.EpochZnode)", o.Room, o.RoomCzxid)
	case !logroom.ValidEpochZnode(o.Fence):
		return fmt.Errorf("archive: origin of room %q (zxid 0x%x): epoch znode name %q is not %q or %q and 16 hex digits",
			o.Room, o.RoomCzxid, o.Fence, logroom.EpochZnode, logroom.EpochZnode+"-")
	}
	return nil
}

// Kind tells channel items from checkpoint items.
type Kind int

const (
	// KindChannel: a sealed channel's batches and meta.
	KindChannel Kind = iota + 1
	// KindCheckpoint: a checkpoint directory (manifest and files).
	KindCheckpoint
)

func (k Kind) String() string {
	switch k {
	case KindChannel:
		return "channel"
	case KindCheckpoint:
		return "checkpoint"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Item is one archived item as a listing shows it: its key (origin, kind,
// index range) and where it is. A listing reads names only; the content is
// verified when the item is read (ReadChannel, OpenCheckpoint).
type Item struct {
	Kind   Kind
	Origin Origin
	// First and Last are the indexes a channel item holds; a checkpoint
	// item's state is at index Last (First == Last).
	First, Last uint64
	// Path names the item in its store (a file or directory of a Dir).
	Path string
}

func (it Item) String() string {
	if it.Kind == KindCheckpoint {
		return fmt.Sprintf("checkpoint at index %d of %v (%s)", it.Last, it.Origin, it.Path)
	}
	return fmt.Sprintf("channel %d..%d of %v (%s)", it.First, it.Last, it.Origin, it.Path)
}

// Batch is one batch znode as the log held it.
type Batch struct {
	// Data is the znode's payload, exactly as ZooKeeper returned it
	// (logroom.DecodeBatch decodes it).
	Data []byte
	// Ctime is the znode's creation time (Stat.Ctime, unix milliseconds):
	// the ZooKeeper leader's clock when the create committed, i.e. when
	// the batch's entries became durable. It is what RestoreOptions.ToTime
	// resolves against.
	Ctime int64
}

// Channel is one sealed channel of a room: its meta and its batches in
// index order, from First to Last.
type Channel struct {
	Origin Origin
	// Num is the channel's number in the room.
	Num         uint64
	First, Last uint64
	// Epoch is the epoch of the writer that opened the channel;
	// RoomVersion the room version it was opened under.
	Epoch       uint64
	RoomVersion int
	// Meta is the channel znode's data as ZooKeeper returned it (for
	// inspection; it may carry the deletion mark).
	Meta    []byte
	Batches []Batch
}

// Archive stores items of rooms. Implementations must make every put
// atomic (an item is either absent or complete) and durable when the put
// returns, and must verify every item on read. Puts are idempotent: the
// same item put twice is one item; other content under an existing key is
// ErrConflict. All methods may be called concurrently.
type Archive interface {
	// PutChannel archives a sealed channel. Its batches must run from
	// First to Last without gap (else an error, nothing written).
	PutChannel(ctx context.Context, ch Channel) (Item, error)
	// PutCheckpoint archives the checkpoint directory at dir (package
	// checkpoint's layout), which must record origin. The copy is checked
	// against the checkpoint's manifest before it becomes visible.
	PutCheckpoint(ctx context.Context, origin Origin, dir string) (Item, error)
	// List returns the items of room (every incarnation), sorted by
	// origin (RoomCzxid), then First, channels before checkpoints at the
	// same First. A room with nothing archived lists empty.
	List(ctx context.Context, room string) ([]Item, error)
	// Lookup returns the item of kind with that origin and index range, if
	// one is stored (without verifying it: read it to verify).
	Lookup(ctx context.Context, origin Origin, kind Kind, first, last uint64) (Item, bool, error)
	// ReadChannel reads and verifies a channel item.
	ReadChannel(ctx context.Context, it Item) (Channel, error)
	// PutIncarnation records how an incarnation began (the re-seed chain;
	// Incarnation). Idempotent; another record for the same origin is
	// ErrConflict.
	PutIncarnation(ctx context.Context, inc Incarnation) error
	// ReadIncarnation reads (and verifies) the record of origin; ok false
	// when none is stored.
	ReadIncarnation(ctx context.Context, origin Origin) (inc Incarnation, ok bool, err error)
	// OpenCheckpoint verifies a checkpoint item and returns a local
	// checkpoint directory holding it (checkpoint.Restore reads it) and a
	// release func to call when done with it. The directory must not be
	// written.
	OpenCheckpoint(ctx context.Context, it Item) (dir string, release func(), err error)
}

package logroom

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/zkx"
)

// Read-only views of a room's znodes (doc.go, "Read-only views"), for
// tools that inspect a room without opening it: OpenRoom creates a missing
// room and its base path, these only read (Sync, Get, Children). Each
// decodes with the decoder the library itself uses, so a tool accepts and
// refuses exactly what readers and writers do. ZooKeeper errors are
// retried on connection loss until ctx ends, like the library's own reads,
// and returned wrapped (errors.Is(err, zk.ErrNoAuth) still holds).

// Names of a room's znodes (doc.go, "Znode layout").
const (
	// EpochZnode is the epoch znode's name under the room.
	EpochZnode = epochNode
	// ChannelsZnode is the name of the channels' parent under the room.
	ChannelsZnode = channelsNode
)

// RoomPath returns the path of room name under base, joined with sub:
// RoomPath(base, name, ChannelsZnode, ChannelName(1)). It does not
// validate (ValidateBase, ValidateName).
func RoomPath(base, name string, sub ...string) string {
	p := base + "/" + name
	if len(sub) > 0 {
		p += "/" + strings.Join(sub, "/")
	}
	return p
}

// ChannelName is channel num's znode name, "ch-%020d".
func ChannelName(num uint64) string { return channelName(num) }

// BatchName is the name of the batch znode whose first index is first,
// "b-%020d".
func BatchName(first uint64) string { return batchName(first) }

// ParseChannelName parses a channel znode name; ok is false for any other
// name (a foreign znode among the channels).
func ParseChannelName(name string) (num uint64, ok bool) { return parseNum(name, channelPrefix) }

// ParseBatchName parses a batch znode name (its first index); ok is false
// for any other name (a foreign znode in a channel).
func ParseBatchName(name string) (first uint64, ok bool) { return parseNum(name, batchPrefix) }

// CorruptZnodeError is returned by the read-only views for a meta znode
// whose data fails the library's checks (its format, version or bounds).
// It wraps ErrCorrupt.
type CorruptZnodeError struct {
	Room    string
	Channel uint64 // the channel whose meta it is; 0 for the room and epoch znodes
	Znode   string // full path
	// Problem says what is wrong, starting with the format's name: "channel
	// meta: unknown format version 2".
	Problem string
}

func (e *CorruptZnodeError) Error() string {
	ch := ""
	if e.Channel != 0 {
		ch = fmt.Sprintf(" channel %d", e.Channel)
	}
	return fmt.Sprintf("%v: room %q%s znode %s: %s", ErrCorrupt, e.Room, ch, e.Znode, e.Problem)
}

// Unwrap makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptZnodeError) Unwrap() error { return ErrCorrupt }

// corruptZnode builds a CorruptZnodeError from a decoder's error.
// A decoder's ErrUnsupportedVersion stays that (naming the znode): it is
// not corruption but a newer writer's format.
func corruptZnode(room string, channel uint64, znode string, err error) error {
	if errors.Is(err, ErrUnsupportedVersion) {
		return unsupportedZnode(room, channel, znode, err)
	}
	return &CorruptZnodeError{Room: room, Channel: channel, Znode: znode,
		Problem: strings.TrimPrefix(err.Error(), ErrCorrupt.Error()+": ")}
}

// unsupportedZnode names the znode whose format a decoder found newer
// than this binary reads.
func unsupportedZnode(room string, channel uint64, znode string, err error) error {
	ch := ""
	if channel != 0 {
		ch = fmt.Sprintf(" channel %d", channel)
	}
	return fmt.Errorf("room %q%s znode %s: %w", room, ch, znode, err)
}

// checkView validates the arguments every view takes. An empty base is
// DefaultBase.
func checkView(base, name string) (string, error) {
	if base == "" {
		base = DefaultBase
	}
	if err := ValidateBase(base); err != nil {
		return "", err
	}
	if err := ValidateName(name); err != nil {
		return "", err
	}
	return base, nil
}

// RoomInfo is a room znode's meta.
type RoomInfo struct {
	Name string
	Path string
	// Created is the creation time the room meta records (unix ms).
	Created int64
	// Czxid is the zxid that created the room znode: the room's
	// incarnation (a room deleted and created again under the same name
	// has another).
	Czxid int64
	// RoomVersion is the room version its meta records.
	RoomVersion RoomVersion
	// Lost is the text of the room's lost marker (MarkLost), when it has
	// one; ReadRoomInfo then also returns ErrRoomLost.
	Lost string
	// EpochZnode is the name of the room's epoch znode: EpochZnode
	// ("epoch"), or "epoch-" and 16 hex digits in a re-seeded room (a name
	// no earlier incarnation used; see SeedRoom).
	EpochZnode string
}

// ReadRoomInfo syncs with the ZooKeeper leader (what follows sees at least
// everything committed before the call) and reads room name under base
// (DefaultBase when empty) without creating anything. A missing room wraps
// ErrNoRoom; a znode that is not a room (its data is not a room meta) is a
// *CorruptZnodeError; a bad name or base wraps ErrBadName. A tombstone
// wraps ErrRoomLost (with Name, Path and Czxid); so does a room marked
// lost (MarkLost), with the whole RoomInfo and Lost set.
func ReadRoomInfo(ctx context.Context, c *Client, base, name string) (RoomInfo, error) {
	base, err := checkView(base, name)
	if err != nil {
		return RoomInfo{}, err
	}
	root := RoomPath(base, name)
	if err := zkx.Sync(ctx, c, root); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return RoomInfo{}, zkError("logroom: sync "+root, err)
	}
	data, st, err := zkx.Get(ctx, c, root)
	if errors.Is(err, zk.ErrNoNode) {
		return RoomInfo{}, fmt.Errorf("%w: room %q not found under %s", ErrNoRoom, name, base)
	}
	if err != nil {
		return RoomInfo{}, zkError("logroom: read room "+root, err)
	}
	m, err := decodeRoomMeta(data)
	if errors.Is(err, ErrRoomLost) {
		return RoomInfo{Name: name, Path: root, Czxid: st.Czxid}, fmt.Errorf("%w (room %q, znode %s)", err, name, root)
	}
	if err != nil {
		return RoomInfo{}, corruptZnode(name, 0, root, err)
	}
	info := RoomInfo{Name: name, Path: root, Created: m.Created, Czxid: st.Czxid,
		RoomVersion: m.info(), EpochZnode: m.fenceName()}
	epochPath := root + "/" + info.EpochZnode
	text, lost, err := readLost(ctx, c, epochPath)
	if err != nil {
		return RoomInfo{}, err
	}
	if lost {
		info.Lost = text
		return info, fmt.Errorf("%w: room %q (znode %s) is marked lost: %s", ErrRoomLost, name, epochPath+"/"+lostNode, text)
	}
	return info, nil
}

// EpochInfo is the room's epoch znode.
type EpochInfo struct {
	Epoch uint64 // 0 before the first writer
	Owner string // WriterConfig.Owner of the writer that set it
	// Version is the znode's version: the fence of the writer whose CAS
	// produced it.
	Version int32
	// Path is the epoch znode's path (its name is recorded in the room
	// meta: RoomInfo.EpochZnode).
	Path string
}

// ReadEpoch reads the epoch znode of room name under base (DefaultBase
// when empty), under the name the room meta records (ReadRoomInfo first;
// a room marked lost is read too: its epoch is what a re-seed needs).
// A missing room or epoch znode wraps ErrNoRoom; one that does not decode
// is a *CorruptZnodeError.
func ReadEpoch(ctx context.Context, c *Client, base, name string) (EpochInfo, error) {
	info, err := ReadRoomInfo(ctx, c, base, name)
	if err != nil && info.Lost == "" {
		return EpochInfo{}, err
	}
	p := info.Path + "/" + info.EpochZnode
	data, st, err := zkx.Get(ctx, c, p)
	if errors.Is(err, zk.ErrNoNode) {
		return EpochInfo{}, fmt.Errorf("%w: %s", ErrNoRoom, p)
	}
	if err != nil {
		return EpochInfo{}, zkError("logroom: read epoch "+p, err)
	}
	m, err := decodeEpochMeta(data)
	if err != nil {
		return EpochInfo{}, corruptZnode(name, 0, p, err)
	}
	return EpochInfo{Epoch: m.Epoch, Owner: m.Owner, Version: st.Version, Path: p}, nil
}

// ChannelListing is one listing of a room's channels/ znode.
type ChannelListing struct {
	Nums []uint64 // channel numbers, ascending
	// Foreign lists, sorted, the children that are not channel names.
	Foreign []string
	// Cversion is the channels znode's child version from the same
	// listing: every create and delete of a child counts (see doc.go, "The
	// channel chain").
	Cversion int32
}

// ListChannels lists the channels of room name under base (DefaultBase
// when empty). A missing channels znode wraps ErrNoRoom.
func ListChannels(ctx context.Context, c *Client, base, name string) (ChannelListing, error) {
	base, err := checkView(base, name)
	if err != nil {
		return ChannelListing{}, err
	}
	p := RoomPath(base, name, channelsNode)
	var (
		names []string
		st    *zk.Stat
	)
	err = c.Retry(ctx, func() error {
		var e error
		names, st, e = c.Conn().Children(p)
		return e
	})
	if errors.Is(err, zk.ErrNoNode) {
		return ChannelListing{}, fmt.Errorf("%w: %s", ErrNoRoom, p)
	}
	if err != nil {
		return ChannelListing{}, zkError("logroom: list channels "+p, err)
	}
	l := ChannelListing{Cversion: st.Cversion}
	for _, n := range names {
		if num, ok := ParseChannelName(n); ok {
			l.Nums = append(l.Nums, num)
		} else {
			l.Foreign = append(l.Foreign, n)
		}
	}
	slices.Sort(l.Nums)
	slices.Sort(l.Foreign)
	return l, nil
}

// ChannelView is one channel's meta as the library reads it.
// (ChannelInfo.Deleting: DeleteChannel marked the (sealed) channel and is
// removing, or was interrupted removing, its batches; ChannelInfo.Removed:
// batches deleted from it, which only such a channel may have lost.)
type ChannelView struct {
	ChannelInfo
}

// ReadChannel reads channel num's meta of room name under base
// (DefaultBase when empty). A missing channel wraps ErrNoRoom; a meta that
// fails the library's checks is a *CorruptZnodeError. Beyond those checks
// it refuses a sealed channel recording a negative byte or batch count,
// which no writer records (the room's byte accounting would trust them).
func ReadChannel(ctx context.Context, c *Client, base, name string, num uint64) (ChannelView, error) {
	base, err := checkView(base, name)
	if err != nil {
		return ChannelView{}, err
	}
	p := RoomPath(base, name, channelsNode, channelName(num))
	data, stat, err := zkx.Get(ctx, c, p)
	if errors.Is(err, zk.ErrNoNode) {
		return ChannelView{}, fmt.Errorf("%w: room %q channel %d: %s", ErrNoRoom, name, num, p)
	}
	if err != nil {
		return ChannelView{}, zkError("logroom: read channel "+p, err)
	}
	v, err := channelView(num, data)
	if err != nil {
		return ChannelView{}, corruptZnode(name, num, p, err)
	}
	v.Removed = childDeletes(stat)
	return v, nil
}

// channelView decodes channel num's meta for ReadChannel; errors wrap
// ErrCorrupt.
func channelView(num uint64, data []byte) (ChannelView, error) {
	m, err := decodeChannelMeta(data)
	if err != nil {
		return ChannelView{}, err
	}
	if m.Sealed && (m.Bytes < 0 || m.Batches < 0) {
		return ChannelView{}, fmt.Errorf("%w: channel meta: sealed with %d bytes, %d batches", ErrCorrupt, m.Bytes, m.Batches)
	}
	ci := m.info(num)
	ci.Deleting = m.Deleting
	return ChannelView{ChannelInfo: ci}, nil
}

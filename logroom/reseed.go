package logroom

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"path"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/version"
	"github.com/roomlog/roomlog/zkx"
)

// Seed describes a room created anew from a member's state after
// ZooKeeper lost the room (package replica, "Disaster recovery"): the log
// continues at Index+1, under an epoch above every one the old room's
// members saw.
type Seed struct {
	// Index is the last index of the state the room starts from: the
	// room's first channel begins at Index+1 (indexes are never reused).
	Index uint64
	// Epoch is written to the epoch znode and the first channel: at least
	// one more than every epoch the old room recorded or any member
	// applied; the first writer takes Epoch+1.
	Epoch uint64
	// RoomVersion is the room version to create the room at (0: 1).
	RoomVersion int
	// Owner is recorded as the epoch znode's owner (e.g. "reseed").
	Owner string
}

// SeedRoom creates room name (which must not exist: DeleteRoom first) as
// Seed says, in one Multi: the room znode, the epoch znode at s.Epoch,
// channels/ and an open channel 1 whose first index is s.Index+1. It
// returns the new room znode's czxid (its incarnation). The parent base
// znodes are created when missing (ZooKeeper was wiped).
func SeedRoom(ctx context.Context, c *Client, base, name string, s Seed) (int64, error) {
	base, err := checkView(base, name)
	if err != nil {
		return 0, err
	}
	if s.Epoch == 0 || s.Epoch == ^uint64(0) || s.Index == ^uint64(0) {
		return 0, fmt.Errorf("logroom: seed of room %q: invalid epoch %d or index %d", name, s.Epoch, s.Index)
	}
	rv := s.RoomVersion
	if rv == 0 {
		rv = 1
	}
	if rv < 1 || rv > version.RoomMax {
		return 0, fmt.Errorf("%w: seed of room %q at room version %d (this binary writes 1..%d)", ErrUnsupportedVersion, name, rv, version.RoomMax)
	}
	if err := zkx.EnsurePath(ctx, c, base); err != nil {
		return 0, zkError("logroom: base "+base, err)
	}
	root := RoomPath(base, name)
	var since uint64
	if rv > 1 {
		since = s.Index + 1
	}
	// The epoch znode gets a name no earlier incarnation used (the room
	// meta records it): a live writer of the lost room checks the version
	// of its own epoch znode, which is not here, so none of its writes
	// lands (a znode created anew restarts at version 0, so a version
	// check on the same name could pass again).
	fence := newFenceName()
	meta := encodeMeta(roomMetaFor(time.Now().UnixMilli(), rv, since, s.Epoch, false, fence))
	epoch := encodeMeta(epochMeta{Version: epochFormatVersion, Epoch: s.Epoch, Owner: s.Owner})
	ch := encodeMeta(channelMeta{Version: channelFormatVersion, First: s.Index + 1, Epoch: s.Epoch, Last: s.Index, Room: roomField(rv)})
	err = c.Retry(ctx, func() error {
		_, e := multiErr(c.Conn().Multi(
			&zk.CreateRequest{Path: root, Data: meta, Acl: c.ACL()},
			&zk.CreateRequest{Path: root + "/" + fence, Data: epoch, Acl: c.ACL()},
			&zk.CreateRequest{Path: root + "/" + channelsNode, Acl: c.ACL()},
			&zk.CreateRequest{Path: root + "/" + channelsNode + "/" + channelName(1), Data: ch, Acl: c.ACL()},
		))
		if errors.Is(e, zk.ErrNodeExists) {
			// Ours, if a connection loss hid the answer: the same channel
			// meta at the same seed.
			got, _, gerr := c.Conn().Get(root + "/" + channelsNode + "/" + channelName(1))
			if gerr == nil && string(got) == string(ch) {
				return nil
			}
		}
		return e
	})
	if err != nil {
		return 0, zkError("logroom: seed room "+root, err)
	}
	_, st, err := zkx.Get(ctx, c, root)
	if err != nil {
		return 0, zkError("logroom: read seeded room "+root, err)
	}
	return st.Czxid, nil
}

// DeleteRoom deletes room name under base and everything below it,
// children first. A missing room is not an error. It is not atomic: an
// interrupted DeleteRoom leaves part of the room, which no member accepts
// (the chain or the room meta is gone); run it again.
func DeleteRoom(ctx context.Context, c *Client, base, name string) error {
	base, err := checkView(base, name)
	if err != nil {
		return err
	}
	return deleteTree(ctx, c, RoomPath(base, name))
}

func deleteTree(ctx context.Context, c *Client, p string) error {
	// A child created meanwhile (a live member's session re-creating its
	// node) makes a delete fail with ErrNotEmpty: list again and delete
	// what is there and the node itself in one Multi, a few times.
	for attempt := 0; ; attempt++ {
		kids, err := zkx.Children(ctx, c, p)
		if errors.Is(err, zk.ErrNoNode) {
			return nil
		}
		if err != nil {
			return zkError("logroom: list "+p, err)
		}
		if len(kids) > deleteMultiMax {
			for _, k := range kids {
				if err := deleteTree(ctx, c, path.Join(p, k)); err != nil {
					return err
				}
			}
			continue
		}
		ops := make([]interface{}, 0, len(kids)+1)
		for _, k := range kids {
			kp := path.Join(p, k)
			if sub, err := zkx.Children(ctx, c, kp); err == nil && len(sub) > 0 {
				if err := deleteTree(ctx, c, kp); err != nil {
					return err
				}
				continue
			}
			ops = append(ops, &zk.DeleteRequest{Path: kp, Version: -1})
		}
		ops = append(ops, &zk.DeleteRequest{Path: p, Version: -1})
		err = c.Retry(ctx, func() error {
			_, e := multiErr(c.Conn().Multi(ops...))
			return e
		})
		if (errors.Is(err, zk.ErrNotEmpty) || errors.Is(err, zk.ErrNoNode)) && attempt < 50 {
			continue // changed since the listing
		}
		if err != nil {
			return zkError("logroom: delete "+p, err)
		}
		return nil
	}
}

// deleteMultiMax bounds the deletes in one Multi (ZooKeeper's packet
// limit): a node with more children has them deleted one subtree at a
// time first.
const deleteMultiMax = 1000

// tombstoneMagic starts a tombstone's data: never valid msgpack for a room
// meta (0x23 '#' is a positive fixint, not a map), and readable text.
var tombstoneMagic = []byte("#roomlog-room-lost v1\n")

// tombstoneText returns a tombstone's text.
func tombstoneText(data []byte) (string, bool) {
	if !bytes.HasPrefix(data, tombstoneMagic) {
		return "", false
	}
	return string(bytes.TrimSpace(data[len(tombstoneMagic):])), true
}

// MaxTombstoneBytes bounds a tombstone's text.
const MaxTombstoneBytes = 4096

// MarkLost records in room name (under base) that ZooKeeper lost part of
// its log: a member found that the log no longer holds what it applied
// (ZooKeeper restored from an older copy, or batches deleted). In one
// Multi it creates <room>/<epoch znode>/lost holding text and sets the
// epoch znode (same data, next version): the sitting writer is fenced at
// its next write, a takeover after it is refused (Room.NewWriter checks
// the marker after its epoch CAS), and OpenRoom and ReadRoomInfo refuse
// the room with ErrRoomLost, so that a member whose own state is within
// what the older copy holds (one that lagged, or bootstrapped from a
// checkpoint) cannot take over and write the lost indexes again with
// other entries. czxid and epochZnode name the incarnation the caller
// found lacking (RoomInfo.Czxid, Room.EpochZnode): a room under the name
// that is another incarnation (re-seeded meanwhile, even at the same
// czxid in a wiped ensemble: its epoch znode has another name) is left
// alone, as is a tombstone; marked reports whether the incarnation is
// marked now (by this call or an earlier one). Reseed deletes the marker
// with the rest of the old room; deleting the marker znode by hand undoes
// a mark.
func MarkLost(ctx context.Context, c *Client, base, name string, czxid int64, epochZnode, text string) (marked bool, err error) {
	base, err = checkView(base, name)
	if err != nil {
		return false, err
	}
	if !ValidEpochZnode(epochZnode) {
		return false, fmt.Errorf("%w: epoch znode name %q", ErrBadName, epochZnode)
	}
	if len(text) > MaxTombstoneBytes {
		text = text[:MaxTombstoneBytes]
	}
	root := RoomPath(base, name)
	epochPath := root + "/" + epochZnode
	marker := append(append([]byte(nil), tombstoneMagic...), text...)
	for attempt := 0; ; attempt++ {
		if err := zkx.Sync(ctx, c, root); err != nil && !errors.Is(err, zk.ErrNoNode) {
			return false, zkError("logroom: sync "+root, err)
		}
		data, st, err := zkx.Get(ctx, c, root)
		if errors.Is(err, zk.ErrNoNode) {
			return false, fmt.Errorf("%w: room %q not found under %s", ErrNoRoom, name, base)
		}
		if err != nil {
			return false, zkError("logroom: mark lost: read "+root, err)
		}
		if st.Czxid != czxid {
			return false, nil // another incarnation: not ours to mark
		}
		m, err := decodeRoomMeta(data)
		if errors.Is(err, ErrRoomLost) {
			return false, nil // a tombstone
		}
		if err != nil {
			return false, corruptZnode(name, 0, root, err)
		}
		if m.fenceName() != epochZnode {
			return false, nil // re-seeded under the same czxid: another incarnation
		}
		if _, lost, err := readLost(ctx, c, epochPath); err != nil {
			return false, err
		} else if lost {
			return true, nil
		}
		edata, est, err := zkx.Get(ctx, c, epochPath)
		if err != nil {
			return false, zkError("logroom: mark lost: read "+epochPath, err)
		}
		_, err = multiErr(c.Conn().Multi(
			&zk.CheckVersionRequest{Path: root, Version: st.Version},
			&zk.CreateRequest{Path: epochPath + "/" + lostNode, Data: marker, Acl: c.ACL()},
			&zk.SetDataRequest{Path: epochPath, Data: edata, Version: est.Version}))
		switch {
		case err == nil, errors.Is(err, zk.ErrNodeExists):
			return true, nil
		case attempt >= 5:
			return false, zkError("logroom: mark lost "+root, err)
		case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode), IsConnLoss(err):
			// A takeover or a rotation meanwhile, or an unknown outcome:
			// read again (a marker that landed is found).
			if err := c.WaitSession(ctx); err != nil {
				return false, fmt.Errorf("logroom: mark lost: %w", err)
			}
			continue
		default:
			return false, zkError("logroom: mark lost "+root, err)
		}
	}
}

// WriteTombstone records, where room name's znode is missing, that
// ZooKeeper lost the room: a persistent znode in its place holding text
// (what was found, by whom, how to recover). OpenRoom then refuses the
// name with ErrRoomLost instead of creating an empty room, so a member
// started on an empty disk cannot begin a new history at index 1 in
// place of the lost one. A room (or tombstone) already there is left
// alone (nil). DeleteRoom removes a tombstone (re-seed does).
func WriteTombstone(ctx context.Context, c *Client, base, name, text string) error {
	base, err := checkView(base, name)
	if err != nil {
		return err
	}
	if len(text) > MaxTombstoneBytes {
		text = text[:MaxTombstoneBytes]
	}
	if err := zkx.EnsurePath(ctx, c, base); err != nil {
		return zkError("logroom: base "+base, err)
	}
	root := RoomPath(base, name)
	data := append(append([]byte(nil), tombstoneMagic...), text...)
	err = c.Retry(ctx, func() error {
		_, e := c.Conn().Create(root, data, 0, c.ACL())
		if errors.Is(e, zk.ErrNodeExists) {
			return nil
		}
		return e
	})
	if err != nil {
		return zkError("logroom: write tombstone "+root, err)
	}
	return nil
}

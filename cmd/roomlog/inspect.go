package main

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/go-zookeeper/zk"

	"github.com/roomlog/roomlog/logroom"
)

// inspector reads rooms under one base path. It only ever calls read
// operations of ZooKeeper (Get, Children, Exists, Sync): logroom.OpenRoom
// would create a missing room (and its base path), so the tool does not use
// it and reads the documented znode layout itself.
type inspector struct {
	c    *logroom.Client
	base string
}

// roomView is one room as the inspector sees it.
type roomView struct {
	in   *inspector
	name string
	root string
}

func (rv *roomView) conn() *zk.Conn { return rv.in.c.Conn() }

// path joins sub to the room's path.
func (rv *roomView) path(sub ...string) string {
	if len(sub) == 0 {
		return rv.root
	}
	return rv.root + "/" + strings.Join(sub, "/")
}

// zkErr wraps a ZooKeeper error with what was being done and, for the
// errors an operator can act on, a hint.
func zkErr(what string, err error) error {
	switch {
	case errors.Is(err, zk.ErrNoAuth):
		return fmt.Errorf("%s: %w (permission denied: the znode has a digest ACL; pass --zk-digest-file FILE holding user:password)", what, err)
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer), errors.Is(err, zk.ErrSessionExpired):
		return fmt.Errorf("%s: lost the connection to ZooKeeper: %w", what, err)
	case errors.Is(err, zk.ErrClosing):
		return fmt.Errorf("%s: interrupted: %w", what, err)
	default:
		return fmt.Errorf("%s: %w", what, err)
	}
}

// room validates name, checks that the room exists and reads its meta.
// A missing room wraps logroom.ErrNoRoom, a bad name logroom.ErrBadName.
func (in *inspector) room(name string) (*roomView, roomMeta, error) {
	if err := logroom.ValidateName(name); err != nil {
		return nil, roomMeta{}, err
	}
	rv := &roomView{in: in, name: name, root: in.base + "/" + name}
	// Sync so that what follows sees at least everything committed before
	// the tool started (reads are served by one server, possibly behind).
	if _, err := in.c.Conn().Sync(rv.root); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return nil, roomMeta{}, zkErr("sync "+rv.root, err)
	}
	data, _, err := in.c.Conn().Get(rv.root)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, roomMeta{}, fmt.Errorf("%w: room %q not found under %s", logroom.ErrNoRoom, name, in.base)
	}
	if err != nil {
		return nil, roomMeta{}, zkErr("read room "+rv.root, err)
	}
	m, err := decodeRoomMeta(data)
	if err != nil {
		return nil, roomMeta{}, fmt.Errorf("%s is not a roomlog room: %w", rv.root, err)
	}
	return rv, m, nil
}

// epoch reads the room's epoch znode.
func (rv *roomView) epoch() (epochMeta, error) {
	p := rv.path(epochNode)
	data, _, err := rv.conn().Get(p)
	if err != nil {
		return epochMeta{}, zkErr("read "+p, err)
	}
	m, err := decodeEpochMeta(data)
	if err != nil {
		return m, fmt.Errorf("room %q znode %s: %w", rv.name, p, err)
	}
	return m, nil
}

// channelNums lists the channel numbers (ascending) and the names under
// channels/ that are not channels.
func (rv *roomView) channelNums() (nums []uint64, foreign []string, err error) {
	nums, foreign, _, err = rv.channelListing()
	return nums, foreign, err
}

// channelListing is channelNums with the channels znode's child version
// (every create and delete of a child counts) from the same listing.
func (rv *roomView) channelListing() (nums []uint64, foreign []string, cversion int32, err error) {
	p := rv.path(channelsNode)
	names, stat, err := rv.conn().Children(p)
	if err != nil {
		return nil, nil, 0, zkErr("list "+p, err)
	}
	cversion = stat.Cversion
	for _, n := range names {
		if num, ok := parseNum(n, channelPrefix); ok {
			nums = append(nums, num)
		} else {
			foreign = append(foreign, n)
		}
	}
	slices.Sort(nums)
	slices.Sort(foreign)
	return nums, foreign, cversion, nil
}

// channel reads channel num's meta. A deleted channel wraps errChannelGone;
// undecodable meta wraps errFormat.
func (rv *roomView) channel(num uint64) (channelMeta, error) {
	p := rv.path(channelsNode, channelName(num))
	data, _, err := rv.conn().Get(p)
	if errors.Is(err, zk.ErrNoNode) {
		return channelMeta{}, fmt.Errorf("%w: %s", errChannelGone, p)
	}
	if err != nil {
		return channelMeta{}, zkErr("read "+p, err)
	}
	return decodeChannelMeta(data)
}

// getOptional gets p; a missing znode is (nil, nil, nil).
func (rv *roomView) getOptional(p string) ([]byte, *zk.Stat, error) {
	data, st, err := rv.conn().Get(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, zkErr("read "+p, err)
	}
	return data, st, nil
}

// childrenOptional lists p's children, sorted; a missing p has none.
func (rv *roomView) childrenOptional(p string) ([]string, error) {
	names, _, err := rv.conn().Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, zkErr("list "+p, err)
	}
	slices.Sort(names)
	return names, nil
}

// freshEpoch reads the room's epoch again (a takeover may have happened
// since known was read); on any error it returns known.
func (rv *roomView) freshEpoch(known uint64) uint64 {
	m, err := rv.epoch()
	if err != nil {
		return known
	}
	return max(known, m.Epoch)
}

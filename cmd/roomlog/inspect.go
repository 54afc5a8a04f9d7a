package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
)

// inspector reads rooms under one base path. It only ever calls read
// operations of ZooKeeper (Get, Children, Exists, Sync): logroom.OpenRoom
// would create a missing room (and its base path), so the tool does not use
// it. It decodes no znode format itself: meta znodes through logroom's
// read-only views (logroom.ReadRoomInfo, ReadEpoch, ListChannels,
// ReadChannel), the znodes replicas own through replica.ReadRoomView, and
// batches with logroom.DecodeBatch.
type inspector struct {
	c    *logroom.Client
	base string
	// timeout bounds each view's wait for a ZooKeeper session (--timeout):
	// logroom's views retry across a lost connection.
	timeout time.Duration
	// stderr receives progress of long waits.
	stderr io.Writer
}

// bounded returns ctx bounded by the inspector's timeout.
func (in *inspector) bounded(ctx context.Context) (context.Context, context.CancelFunc) {
	if in.timeout <= 0 {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, in.timeout)
}

// roomView is one room as the inspector sees it.
type roomView struct {
	in   *inspector
	name string
	root string
}

func (rv *roomView) conn() *zk.Conn { return rv.in.c.Conn() }

// path joins sub to the room's path.
func (rv *roomView) path(sub ...string) string { return logroom.RoomPath(rv.in.base, rv.name, sub...) }

// chanPath is channel num's path.
func (rv *roomView) chanPath(num uint64) string {
	return rv.path(logroom.ChannelsZnode, logroom.ChannelName(num))
}

// errMalformed marks znode data that logroom's or replica's decoder
// refuses (the message says which format and why).
var errMalformed = errors.New("malformed znode data")

// malformed renders a view's *logroom.CorruptZnodeError as errMalformed;
// ok is false for any other error.
func malformed(err error) (error, bool) {
	var ce *logroom.CorruptZnodeError
	if !errors.As(err, &ce) {
		return nil, false
	}
	return fmt.Errorf("%w: %s", errMalformed, ce.Problem), true
}

// zkErr wraps a ZooKeeper error with what was being done ("": nothing to
// add, a view's error names it) and, for the errors an operator can act
// on, a hint.
func zkErr(what string, err error) error {
	prefix := ""
	if what != "" {
		prefix = what + ": "
	}
	switch {
	case errors.Is(err, zk.ErrNoAuth):
		return fmt.Errorf("%s%w (permission denied by the znode's ACL: pass --zk-digest-file FILE holding user:password, or --zk-tls-* with a certificate whose identity the ACL names)", prefix, err)
	case errors.Is(err, zk.ErrConnectionClosed), errors.Is(err, zk.ErrNoServer), errors.Is(err, zk.ErrSessionExpired):
		return fmt.Errorf("%slost the connection to ZooKeeper: %w", prefix, err)
	case errors.Is(err, zk.ErrClosing):
		return fmt.Errorf("%sinterrupted: %w", prefix, err)
	default:
		return fmt.Errorf("%s%w", prefix, err)
	}
}

// room validates name, checks that the room exists and reads its meta
// (logroom.ReadRoomInfo syncs first, so that what follows sees at least
// everything committed before the tool started). A missing room wraps
// logroom.ErrNoRoom, a bad name logroom.ErrBadName.
func (in *inspector) room(ctx context.Context, name string) (*roomView, logroom.RoomInfo, error) {
	if err := logroom.ValidateName(name); err != nil {
		return nil, logroom.RoomInfo{}, err
	}
	rv := &roomView{in: in, name: name, root: logroom.RoomPath(in.base, name)}
	ctx, cancel := in.bounded(ctx)
	defer cancel()
	info, err := logroom.ReadRoomInfo(ctx, in.c, in.base, name)
	if errors.Is(err, logroom.ErrNoRoom) {
		return nil, info, err
	}
	if errors.Is(err, logroom.ErrRoomLost) && info.Lost != "" {
		// Marked lost (logroom.MarkLost): still a room to look at; the
		// commands that show the room print the marker (info.Lost).
		err = nil
	}
	if m, ok := malformed(err); ok {
		return nil, info, fmt.Errorf("%s is not a roomlog room: %w", rv.root, m)
	}
	if err != nil {
		return nil, info, zkErr("", err)
	}
	return rv, info, nil
}

// epoch reads the room's epoch znode. Undecodable data wraps errMalformed.
func (rv *roomView) epoch(ctx context.Context) (logroom.EpochInfo, error) {
	ctx, cancel := rv.in.bounded(ctx)
	defer cancel()
	e, err := logroom.ReadEpoch(ctx, rv.in.c, rv.in.base, rv.name)
	if m, ok := malformed(err); ok {
		return e, fmt.Errorf("room %q znode %s: %w", rv.name, rv.path(logroom.EpochZnode), m)
	}
	if err != nil {
		return e, zkErr("", err)
	}
	return e, nil
}

// channelNums lists the channel numbers (ascending) and the names under
// channels/ that are not channels.
func (rv *roomView) channelNums(ctx context.Context) (nums []uint64, foreign []string, err error) {
	l, err := rv.channelListing(ctx)
	return l.Nums, l.Foreign, err
}

// channelListing lists the channels with the channels znode's child
// version (every create and delete of a child counts) from the same
// listing.
func (rv *roomView) channelListing(ctx context.Context) (logroom.ChannelListing, error) {
	ctx, cancel := rv.in.bounded(ctx)
	defer cancel()
	l, err := logroom.ListChannels(ctx, rv.in.c, rv.in.base, rv.name)
	if err != nil {
		return l, zkErr("", err)
	}
	return l, nil
}

// errChannelGone: the channel was deleted while it was being read.
var errChannelGone = errors.New("channel deleted while reading it")

// channel reads channel num's meta. A deleted channel wraps errChannelGone;
// undecodable meta wraps errMalformed.
func (rv *roomView) channel(ctx context.Context, num uint64) (logroom.ChannelView, error) {
	ctx, cancel := rv.in.bounded(ctx)
	defer cancel()
	ch, err := logroom.ReadChannel(ctx, rv.in.c, rv.in.base, rv.name, num)
	if errors.Is(err, logroom.ErrNoRoom) {
		return ch, fmt.Errorf("%w: %s", errChannelGone, rv.chanPath(num))
	}
	if m, ok := malformed(err); ok {
		return ch, m
	}
	if err != nil {
		return ch, zkErr("", err)
	}
	return ch, nil
}

// replicaView reads what replicas see of the room: members, election
// candidates, foreign znodes, the transfer and checkpoint records.
func (rv *roomView) replicaView(ctx context.Context) (replica.RoomView, error) {
	ctx, cancel := rv.in.bounded(ctx)
	defer cancel()
	v, err := replica.ReadRoomView(ctx, rv.in.c, rv.in.base, rv.name)
	if err != nil {
		return v, zkErr("", err)
	}
	return v, nil
}

// childrenOptional lists p's children; a missing p has none.
func (rv *roomView) childrenOptional(p string) ([]string, error) {
	names, _, err := rv.conn().Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, zkErr("list "+p, err)
	}
	return names, nil
}

// freshEpoch reads the room's epoch again (a takeover may have happened
// since known was read); on any error it returns known.
func (rv *roomView) freshEpoch(ctx context.Context, known uint64) uint64 {
	e, err := rv.epoch(ctx)
	if err != nil {
		return known
	}
	return max(known, e.Epoch)
}

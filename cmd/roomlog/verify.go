package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
)

// verifySummary describes what verify walked.
type verifySummary struct {
	Room     string `json:"room"`
	Epoch    uint64 `json:"epoch"`
	Channels int    `json:"channels"`
	Batches  int    `json:"batches"`
	Bytes    int64  `json:"bytes"`
	// FirstIndex..LastIndex is the log still in ZooKeeper (0..0: empty).
	FirstIndex uint64 `json:"first_index"`
	LastIndex  uint64 `json:"last_index"`
	Faults     int    `json:"faults"`
	Warnings   int    `json:"warnings"`
	// HashesCompared counts the live members whose published running
	// state hash was compared with another member's at the same index.
	HashesCompared int `json:"hashes_compared"`
}

// compareHashes compares the running state hashes the live members
// publish (replica package doc, "Integrity"): members at the same index
// of chains with the same base must publish the same hash; each
// disagreement is a fault naming the members, the index and the hashes.
// It returns how many members were compared.
func compareHashes(v replica.RoomView, rv *roomView, fault, warn func(ch uint64, znode, format string, args ...any)) int {
	type key struct{ base, at uint64 }
	groups := map[key][]replica.MemberView{}
	bases := map[uint64][]string{}
	for _, m := range v.Members {
		if m.Foreign == "" && m.Decoded && m.Hash != "" {
			k := key{m.HashBase, m.HashAt}
			groups[k] = append(groups[k], m)
			bases[m.HashBase] = append(bases[m.HashBase], m.ID)
		}
	}
	if len(bases) > 1 {
		var parts []string
		for b, ids := range bases {
			sort.Strings(ids)
			parts = append(parts, fmt.Sprintf("%s from index %d", strings.Join(ids, ", "), b))
		}
		sort.Strings(parts)
		warn(0, rv.path("members"), "members' running state hashes are chains of different bases (%s): those do not compare "+
			"(stores written by a version without the running hash; a member that bootstraps from another shares its chain)", strings.Join(parts, "; "))
	}
	keys := make([]key, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].at < keys[j].at })
	compared := 0
	for _, k := range keys {
		g := groups[k]
		if len(g) < 2 {
			continue
		}
		compared += len(g)
		by := map[string][]string{}
		for _, m := range g {
			by[m.Hash] = append(by[m.Hash], m.ID)
		}
		if len(by) == 1 {
			continue
		}
		var parts []string
		for h, ids := range by {
			sort.Strings(ids)
			parts = append(parts, fmt.Sprintf("%s has %s", strings.Join(ids, ", "), h))
		}
		sort.Strings(parts)
		fault(0, rv.path("members"), "members' running state hashes differ at index %d: %s (their states diverged: the members in the minority stop)",
			k.at, strings.Join(parts, "; "))
	}
	return compared
}

// checkRolledBack reports a fault for each live member that published an
// applied index (or a state hash at an index) beyond the log's end: the
// log lost entries a member applied (ZooKeeper restored from an older
// copy, or the room rolled back), which a walk of the shorter log alone
// finds well-formed. The end is read again first (the log grows while
// verify runs, and members publish their index after the walk).
func checkRolledBack(ctx context.Context, rv *roomView, v replica.RoomView, known bool, end uint64,
	fault func(ch uint64, znode, format string, args ...any)) error {
	var ahead []replica.MemberView
	for _, m := range v.Members {
		if m.Foreign == "" && m.Decoded && (m.Applied > end || m.HashAt > end || !known) {
			ahead = append(ahead, m)
		}
	}
	if len(ahead) == 0 {
		return nil
	}
	fresh, ok, err := freshLogEnd(ctx, rv)
	if err != nil {
		return err
	}
	if ok {
		end, known = max(end, fresh), true
	}
	for _, m := range ahead {
		at := max(m.Applied, m.HashAt)
		switch {
		case !known && at > 0:
			fault(0, m.Path, "member %s published applied index %d, but the room holds no channel: the log was lost under it "+
				"(ZooKeeper wiped or restored from an older copy?); its members fail with ErrRoomLost; recover with 'roomlog reseed'", m.ID, at)
		case known && at > end:
			fault(0, m.Path, "member %s published applied index %d, but the log ends at index %d: entries it applied are gone "+
				"(ZooKeeper restored from an older copy, or the log rolled back); its members fail with ErrRoomLost; recover with 'roomlog reseed'",
				m.ID, at, end)
		}
	}
	return nil
}

// freshLogEnd reads the log's last index again: the newest channel's
// sealed last index, or the end of its chain when open. ok is false when
// the room holds no channel.
func freshLogEnd(ctx context.Context, rv *roomView) (uint64, bool, error) {
	l, err := rv.channelListing(ctx)
	if err != nil || len(l.Nums) == 0 {
		return 0, false, err
	}
	num := l.Nums[len(l.Nums)-1]
	m, err := rv.channel(ctx, num)
	if errors.Is(err, errChannelGone) || errors.Is(err, errMalformed) {
		return 0, false, nil // reported by the walk, or gone since
	}
	if err != nil {
		return 0, false, err
	}
	if m.Sealed {
		return m.LastIndex, true, nil
	}
	res, err := rv.walkChannel(ctx, num, m, walkOpts{start: m.FirstIndex})
	if errors.Is(err, errChannelGone) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	return res.end, true, nil
}

type verifyOut struct {
	OK       bool          `json:"ok"`
	Summary  verifySummary `json:"summary"`
	Faults   []finding     `json:"faults"`
	Warnings []finding     `json:"warnings"`
}

// verifyRoom walks every channel and batch znode of the room. ZooKeeper
// errors are returned; everything wrong with the data is a finding.
func verifyRoom(ctx context.Context, rv *roomView) (verifyOut, error) {
	out := verifyOut{Summary: verifySummary{Room: rv.name}, Faults: []finding{}, Warnings: []finding{}}
	fault := func(ch uint64, znode, format string, args ...any) {
		out.Faults = append(out.Faults, finding{sevFault, rv.name, ch, znode, fmt.Sprintf(format, args...)})
	}
	warn := func(ch uint64, znode, format string, args ...any) {
		out.Warnings = append(out.Warnings, finding{sevWarning, rv.name, ch, znode, fmt.Sprintf(format, args...)})
	}
	// The channels are listed before the epoch is read: every channel
	// listed was opened by an epoch <= the one read.
	listing, err := rv.channelListing(ctx)
	if err != nil {
		return out, err
	}
	nums, foreign, cversion := listing.Nums, listing.Foreign, listing.Cversion
	// Channels are created in order and only the oldest are deleted, so
	// the channels znode's child version must be last + (first-1) (plus
	// the foreign children present); more means channels were deleted and
	// created again (the open channel deleted and re-created, say), which
	// looks like a valid chain otherwise. Replicas refuse such a room.
	want := int64(len(foreign))
	if len(nums) > 0 {
		want += int64(nums[len(nums)-1]) + int64(nums[0]) - 1
	}
	if int64(cversion) != want {
		what := "no channel"
		if len(nums) > 0 {
			what = fmt.Sprintf("channels %d..%d", nums[0], nums[len(nums)-1])
		}
		fault(0, rv.path(logroom.ChannelsZnode), "%d child creates and deletes recorded, but %s (and %d foreign znodes) account for %d: "+
			"channels were deleted or re-created by another client (replicas refuse the room)", cversion, what, len(foreign), want)
	}
	em, err := rv.epoch(ctx)
	if errors.Is(err, errMalformed) {
		fault(0, rv.path(logroom.EpochZnode), "%v", errors.Unwrap(err))
	} else if err != nil {
		return out, err
	}
	roomEpoch := em.Epoch
	for _, n := range foreign {
		warn(0, rv.path(logroom.ChannelsZnode, n), "foreign znode among the channels (not a channel name)")
	}
	for i := 1; i < len(nums); i++ {
		if nums[i] != nums[i-1]+1 {
			fault(nums[i], rv.chanPath(nums[i]),
				"channel numbers jump from %d to %d: channels in between are missing (only the oldest channels may be deleted)", nums[i-1], nums[i])
		}
	}

	var (
		prevMeta  *logroom.ChannelView // the previous channel's meta (nil: unknown)
		prevNum   uint64
		prevEnd   uint64 // the previous channel's last index
		lastEpoch uint64 // epoch of the last valid batch in log order
		chEpoch   uint64 // highest channel epoch so far
		haveFirst bool
	)
	for i, num := range nums {
		chPath := rv.chanPath(num)
		m, err := rv.channel(ctx, num)
		switch {
		case errors.Is(err, errChannelGone):
			warn(num, chPath, "channel deleted during verify")
			prevMeta = nil
			continue
		case errors.Is(err, errMalformed):
			fault(num, chPath, "%v", err)
			prevMeta = nil
			continue
		case err != nil:
			return out, err
		}
		out.Summary.Channels++
		if roomEpoch > 0 && m.Epoch > roomEpoch {
			// A takeover that reused this (empty) channel since the epoch
			// was read: read it again before calling it a fault.
			roomEpoch = rv.freshEpoch(ctx, roomEpoch)
			if m.Epoch > roomEpoch {
				fault(num, chPath, "channel epoch %d above the room's epoch %d", m.Epoch, roomEpoch)
			}
		}
		if m.Epoch < chEpoch {
			fault(num, chPath, "channel epoch %d below an earlier channel's epoch %d", m.Epoch, chEpoch)
		}
		chEpoch = max(chEpoch, m.Epoch)
		last := i == len(nums)-1
		if !m.Sealed && !last {
			fault(num, chPath, "channel is open but channel %d follows it (only the newest channel may be open)", nums[len(nums)-1])
		}
		switch {
		case m.Deleting && !m.Sealed:
			fault(num, chPath, "the open channel is marked for deletion, which DeleteChannel never does: its meta was written by another client (replicas refuse the room)")
		case m.Deleting:
			warn(num, chPath, "channel is being deleted (DeleteChannel in progress, or interrupted: the next deletion finishes it)")
		case m.Tampered():
			fault(num, chPath, "%d batch znode(s) were deleted from this channel, which is not being deleted: acknowledged entries were removed by another client (replicas refuse the room)", m.Removed)
		}
		if m.Sealed && last {
			// A rotation after our listing seals this channel and creates
			// the next in one transaction: look for the successor first.
			if _, err := rv.channel(ctx, num+1); errors.Is(err, errChannelGone) {
				fault(num, chPath, "the newest channel is sealed and channel %d does not exist: the open channel was deleted (replicas refuse the room)", num+1)
			} else if err != nil && !errors.Is(err, errMalformed) {
				return out, err
			}
		}
		if prevMeta != nil && prevNum+1 == num && m.FirstIndex != prevEnd+1 {
			fault(num, chPath, "channel first index %d, but channel %d ends at %d (want %d)", m.FirstIndex, prevNum, prevEnd, prevEnd+1)
		}
		res, err := rv.walkChannel(ctx, num, m, walkOpts{start: m.FirstIndex, lastEpoch: lastEpoch, roomEpoch: roomEpoch})
		if errors.Is(err, errChannelGone) {
			warn(num, chPath, "channel deleted during verify")
			prevMeta = nil
			continue
		}
		if err != nil {
			return out, err
		}
		out.Faults = append(out.Faults, res.faults...)
		out.Warnings = append(out.Warnings, res.warnings...)
		out.Summary.Batches += res.batches
		out.Summary.Bytes += res.bytes
		lastEpoch = res.lastEpoch
		roomEpoch = max(roomEpoch, res.roomEpoch)
		end := res.end
		if m.Sealed {
			end = m.LastIndex
		}
		if !haveFirst {
			out.Summary.FirstIndex, haveFirst = m.FirstIndex, true
		}
		out.Summary.LastIndex = end
		prevMeta, prevNum, prevEnd = &m, num, end
	}
	logEnd := out.Summary.LastIndex // the log's last index (first-1 when it holds no entry)
	if !haveFirst || out.Summary.LastIndex < out.Summary.FirstIndex {
		out.Summary.FirstIndex, out.Summary.LastIndex = 0, 0
	}
	// Membership and election: znodes replicas ignore as foreign.
	v, err := rv.replicaView(ctx)
	if err != nil {
		return out, err
	}
	_, memberForeign, electionForeign := memberRows(v)
	for _, f := range append(memberForeign, electionForeign...) {
		warn(0, f.Path, "foreign znode, ignored by replicas (%s); delete it", f.Reason)
	}
	if err := checkRolledBack(ctx, rv, v, haveFirst, logEnd, fault); err != nil {
		return out, err
	}
	out.Summary.HashesCompared = compareHashes(v, rv, fault, warn)
	out.Summary.Epoch = roomEpoch
	out.Summary.Faults, out.Summary.Warnings = len(out.Faults), len(out.Warnings)
	out.OK = len(out.Faults) == 0
	return out, nil
}

func cmdVerify(ctx context.Context, in *inspector, o options, args []string, stdout, stderr io.Writer) error {
	rv, _, err := in.room(ctx, args[0])
	if err != nil {
		return err
	}
	out, err := verifyRoom(ctx, rv)
	if err != nil {
		return err
	}
	if o.json {
		if err := writeJSON(stdout, out); err != nil {
			return err
		}
	} else {
		for _, f := range out.Faults {
			fmt.Fprintln(stdout, f)
		}
		for _, f := range out.Warnings {
			fmt.Fprintln(stdout, f)
		}
		s := out.Summary
		what := fmt.Sprintf("%d channels, %d batches, entries %d..%d, %d bytes, epoch %d, %d members' state hashes compared", s.Channels, s.Batches,
			s.FirstIndex, s.LastIndex, s.Bytes, s.Epoch, s.HashesCompared)
		if out.OK {
			fmt.Fprintf(stdout, "OK room %q: %s; %d warning(s)\n", s.Room, what, s.Warnings)
		} else {
			fmt.Fprintf(stdout, "FAILED room %q: %d fault(s), %d warning(s); %s\n", s.Room, s.Faults, s.Warnings, what)
		}
	}
	if !out.OK {
		return errFaults
	}
	return nil
}

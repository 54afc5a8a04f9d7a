package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/logroom"
)

// Severity of a finding.
const (
	sevFault   = "fault"
	sevWarning = "warning"
)

// finding is one problem found in a room, naming room, channel and znode.
type finding struct {
	Severity string `json:"severity"`
	Room     string `json:"room"`
	Channel  uint64 `json:"channel,omitempty"`
	Znode    string `json:"znode"`
	Message  string `json:"message"`
}

func (f finding) String() string {
	tag := "FAULT"
	if f.Severity == sevWarning {
		tag = "WARN "
	}
	ch := ""
	if f.Channel != 0 {
		ch = fmt.Sprintf(" channel %d", f.Channel)
	}
	return fmt.Sprintf("%s room %q%s znode %s: %s", tag, f.Room, ch, f.Znode, f.Message)
}

// errStopWalk, returned by a walk callback, ends the walk without error.
var errStopWalk = errors.New("stop walk")

// fetchWidth is how many Gets are in flight at once; fetchWindow how many
// batch znodes are fetched ahead of the walk.
const (
	fetchWidth  = 16
	fetchWindow = 64
)

// walkOpts parameterises walkChannel.
type walkOpts struct {
	// start is the batch boundary the chain is followed from (the channel's
	// first index for a full walk). Batch names below it are ignored unless
	// start is the channel's first index (then they are strays: faults).
	start uint64
	// stop > 0 ends the walk once the chain passes index stop.
	stop uint64
	// lastEpoch is the epoch of the previous batch in log order (0: none).
	lastEpoch uint64
	// roomEpoch is the room's current epoch; a batch of a newer one is a
	// fault (0: not checked).
	roomEpoch uint64
	// stopOnFault ends the walk at the first fault.
	stopOnFault bool
	// onBatch receives every valid chain batch in order; errStopWalk ends
	// the walk.
	onBatch func(path string, b logroom.Batch, size int) error
}

// walkResult is what walkChannel found.
type walkResult struct {
	// end is the last index of the contiguous chain walked (start-1 if none).
	end       uint64
	batches   int
	bytes     int64
	lastEpoch uint64
	// roomEpoch is walkOpts.roomEpoch, or the epoch read again during the
	// walk.
	roomEpoch uint64
	faults    []finding
	warnings  []finding
	// stopped: the walk ended early (stop, stopOnFault or errStopWalk).
	stopped bool
	// gap: batches are missing from the sealed channel.
	gap bool
}

// walkChannel follows channel num's batch chain as a reader would and
// checks every batch on it: decode (version, CRC), name == first index,
// count > 0, epoch == the channel's, epochs non-decreasing, not past the
// seal. It lists the channel once, fetches the batches it needs fetchWidth
// at a time, and classifies every listed name: on the chain; an orphan
// past a sealed channel's last index (warning); past the open channel's
// first hole (warning: in flight, or a deposed writer's); below the chain
// position or inside a sealed range but off the chain (fault: a stray or
// overlapping batch); or not a batch name at all (warning: foreign znode).
func (rv *roomView) walkChannel(ctx context.Context, num uint64, meta logroom.ChannelView, o walkOpts) (walkResult, error) {
	chPath := rv.chanPath(num)
	res := walkResult{end: o.start - 1, lastEpoch: o.lastEpoch}
	fault := func(znode, format string, args ...any) {
		res.faults = append(res.faults, finding{sevFault, rv.name, num, znode, fmt.Sprintf(format, args...)})
	}
	warn := func(znode, format string, args ...any) {
		res.warnings = append(res.warnings, finding{sevWarning, rv.name, num, znode, fmt.Sprintf(format, args...)})
	}
	// missing reports batches absent from a sealed channel: a fault, or a
	// warning while the channel is being deleted (compaction in progress).
	missing := fault
	if meta.Deleting {
		missing = func(znode, format string, args ...any) {
			warn(znode, format+" (the channel is being deleted)", args...)
		}
	}
	names, _, err := rv.conn().Children(chPath)
	if errors.Is(err, zk.ErrNoNode) {
		return res, fmt.Errorf("%w: %s", errChannelGone, chPath)
	}
	if err != nil {
		return res, zkErr("list "+chPath, err)
	}
	var firsts []uint64
	for _, n := range names {
		if f, ok := logroom.ParseBatchName(n); ok {
			firsts = append(firsts, f)
		} else {
			warn(chPath+"/"+n, "foreign znode in a channel (not a batch name)")
		}
	}
	slices.Sort(firsts)
	full := o.start == meta.FirstIndex
	for len(firsts) > 0 && firsts[0] < o.start {
		if full {
			fault(chPath+"/"+logroom.BatchName(firsts[0]), "stray batch below the channel's first index %d", meta.FirstIndex)
		}
		firsts = firsts[1:]
	}

	pos := o.start
	resync := false // the previous batch was unreadable: its successor is unknown
	ended := false  // the open channel's chain ended at a hole
	stopAt := func() bool { return o.stop > 0 && pos > o.stop }
walk:
	for len(firsts) > 0 {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		win := firsts[:min(len(firsts), fetchWindow)]
		firsts = firsts[len(win):]
		var want []string
		for _, f := range win {
			if (!meta.Sealed || f <= meta.LastIndex) && (o.stop == 0 || f <= o.stop) {
				want = append(want, chPath+"/"+logroom.BatchName(f))
			}
		}
		got, err := rv.getMany(want)
		if err != nil {
			return res, err
		}
		for _, f := range win {
			path := chPath + "/" + logroom.BatchName(f)
			if stopAt() {
				res.stopped = true
				break walk
			}
			switch {
			case meta.Sealed && f > meta.LastIndex:
				warn(path, "orphan batch past the channel's seal at index %d (a deposed writer's, never acknowledged; removed with the channel)", meta.LastIndex)
				continue
			case ended:
				warn(path, "batch past the end of the log (hole at index %d): in flight, or a deposed writer's orphan", pos)
				continue
			case f < pos:
				fault(path, "stray batch: index %d is already covered by the chain (overlap or duplicate)", f)
				continue
			case f > pos && resync:
				pos = f
			case f > pos && meta.Sealed:
				missing(chPath+"/"+logroom.BatchName(pos), "missing batch: entries %d..%d absent in a channel sealed at %d", pos, f-1, meta.LastIndex)
				res.gap = true
				if o.stopOnFault || meta.Deleting {
					res.stopped = true
					break walk
				}
				pos = f
			case f > pos:
				ended = true
				warn(path, "batch past the end of the log (hole at index %d): in flight, or a deposed writer's orphan", pos)
				continue
			}
			data, ok := got[path]
			if !ok { // deleted since the listing
				if meta.Sealed {
					missing(path, "batch vanished while reading the channel")
					resync, pos, res.gap = true, f+1, true
				} else {
					ended = true
				}
				continue
			}
			nf := len(res.faults)
			b, err := logroom.DecodeBatch(data)
			switch {
			case err != nil:
				fault(path, "%s", strings.TrimPrefix(err.Error(), logroom.ErrCorrupt.Error()+": "))
			case b.First != f:
				fault(path, "batch holds first index %d, its name says %d", b.First, f)
			case b.Count == 0:
				fault(path, "empty batch")
			}
			if len(res.faults) > nf {
				resync, pos = true, f+1
				if o.stopOnFault {
					res.stopped = true
					break walk
				}
				continue
			}
			resync = false
			if b.Epoch != meta.Epoch {
				fault(path, "batch epoch %d, but the channel was opened by epoch %d", b.Epoch, meta.Epoch)
			}
			if b.Epoch < res.lastEpoch {
				fault(path, "batch epoch %d below the previous batch's epoch %d", b.Epoch, res.lastEpoch)
			}
			if o.roomEpoch > 0 && b.Epoch > o.roomEpoch {
				o.roomEpoch = rv.freshEpoch(ctx, o.roomEpoch) // a takeover since it was read?
				if b.Epoch > o.roomEpoch {
					fault(path, "batch epoch %d above the room's epoch %d", b.Epoch, o.roomEpoch)
				}
			}
			if meta.Sealed && b.Last() > meta.LastIndex {
				fault(path, "batch ends at index %d, past the channel's seal at %d", b.Last(), meta.LastIndex)
			}
			if len(res.faults) > nf && o.stopOnFault {
				res.stopped = true
				break walk
			}
			res.lastEpoch = b.Epoch
			res.batches++
			res.bytes += int64(len(data))
			pos = b.Last() + 1
			res.end = b.Last()
			if o.onBatch != nil {
				if err := o.onBatch(path, b, len(data)); err != nil {
					if errors.Is(err, errStopWalk) {
						res.stopped = true
						break walk
					}
					return res, err
				}
			}
		}
	}
	res.roomEpoch = o.roomEpoch
	if res.stopped || stopAt() {
		res.stopped = true
		return res, nil
	}
	if meta.Sealed && !resync && pos <= meta.LastIndex {
		missing(chPath+"/"+logroom.BatchName(pos), "missing batch: entries %d..%d absent in a channel sealed at %d", pos, meta.LastIndex, meta.LastIndex)
		res.gap = true
	}
	if meta.Sealed && !meta.Deleting && full && len(res.faults) == 0 && (meta.Batches != res.batches || meta.Bytes != res.bytes) {
		fault(chPath, "channel meta records %d batches and %d bytes, its chain holds %d batches and %d bytes",
			meta.Batches, meta.Bytes, res.batches, res.bytes)
	}
	return res, nil
}

// getMany gets every path, fetchWidth at a time. Paths that do not exist
// are left out of the map.
func (rv *roomView) getMany(paths []string) (map[string][]byte, error) {
	out := make(map[string][]byte, len(paths))
	if len(paths) == 0 {
		return out, nil
	}
	var (
		mu    sync.Mutex
		first error
		wg    sync.WaitGroup
		next  = make(chan string)
	)
	for range min(fetchWidth, len(paths)) {
		wg.Go(func() {
			for p := range next {
				data, _, err := rv.conn().Get(p)
				mu.Lock()
				switch {
				case err == nil:
					out[p] = data
				case errors.Is(err, zk.ErrNoNode):
				case first == nil:
					first = zkErr("read "+p, err)
				}
				mu.Unlock()
			}
		})
	}
	for _, p := range paths {
		next <- p
	}
	close(next)
	wg.Wait()
	return out, first
}

package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"unicode"
	"unicode/utf8"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

// dumpEntry is one line of dump's output.
type dumpEntry struct {
	Index   uint64 `json:"index"`
	Epoch   uint64 `json:"epoch"`
	Channel uint64 `json:"channel"`
	// Znode is the batch znode holding the entry.
	Znode string `json:"znode"`
	// Size is the entry's data length in bytes.
	Size int `json:"size"`
	// Data is the entry, base64 (standard encoding, as encoding/json does).
	Data []byte `json:"data"`
	// Ops is the entry decoded as store.OpsApplier's format, when it is
	// one (every op valid); absent otherwise or with --no-ops.
	Ops []opView `json:"ops,omitempty"`
}

// opView is one store.Op. Each byte string is shown as text (key, value,
// end) when it is printable UTF-8, else base64 (key_b64, value_b64,
// end_b64): exactly one of each pair is present where the op has it.
type opView struct {
	Kind     string  `json:"kind"`
	Key      *string `json:"key,omitempty"`
	KeyB64   []byte  `json:"key_b64,omitempty"`
	Value    *string `json:"value,omitempty"`
	ValueB64 []byte  `json:"value_b64,omitempty"`
	End      *string `json:"end,omitempty"`
	EndB64   []byte  `json:"end_b64,omitempty"`
}

// printable reports whether b is UTF-8 text without control characters.
func printable(b []byte) bool {
	if !utf8.Valid(b) {
		return false
	}
	for _, r := range string(b) {
		if !unicode.IsPrint(r) && r != ' ' {
			return false
		}
	}
	return true
}

// render sets the text or base64 field for b.
func render(b []byte, text **string, b64 *[]byte) {
	if printable(b) {
		s := string(b)
		*text = &s
		return
	}
	*b64 = b
}

// opsView decodes data as store ops; nil when it is not a valid ops entry.
func opsView(data []byte) []opView {
	ops, err := store.DecodeOps(data)
	if err != nil || len(ops) == 0 {
		return nil
	}
	out := make([]opView, 0, len(ops))
	for _, op := range ops {
		if op.Validate() != nil {
			return nil
		}
		v := opView{Kind: op.Kind.String()}
		render(op.Key, &v.Key, &v.KeyB64)
		switch op.Kind {
		case store.OpSet:
			render(op.Value, &v.Value, &v.ValueB64)
		case store.OpDeleteRange:
			render(op.End, &v.End, &v.EndB64)
		}
		out = append(out, v)
	}
	return out
}

func cmdDump(ctx context.Context, in *inspector, o options, args []string, stdout, stderr io.Writer) error {
	rv, _, err := in.room(ctx, args[0])
	if err != nil {
		return err
	}
	// Channels first: each was opened by an epoch <= the one read next.
	nums, _, err := rv.channelNums(ctx)
	if err != nil {
		return err
	}
	em, err := rv.epoch(ctx)
	if err != nil {
		return err
	}
	type channel struct {
		num  uint64
		meta logroom.ChannelView
	}
	var chans []channel
	for _, num := range nums {
		m, err := rv.channel(ctx, num)
		if errors.Is(err, errChannelGone) {
			continue
		}
		if err != nil {
			return fmt.Errorf("%w: room %q channel %d znode %s: %v", logroom.ErrCorrupt, rv.name, num,
				rv.chanPath(num), err)
		}
		chans = append(chans, channel{num, m})
	}
	if len(chans) == 0 {
		fmt.Fprintf(stderr, "roomlog dump: room %q has no channels (no entries)\n", rv.name)
		return nil
	}
	from := o.from
	if from == 0 {
		from = chans[0].meta.FirstIndex
	}
	if from < chans[0].meta.FirstIndex {
		return fmt.Errorf("%w: index %d of room %q is no longer in ZooKeeper: the oldest channel (%d) starts at %d",
			logroom.ErrCompacted, from, rv.name, chans[0].num, chans[0].meta.FirstIndex)
	}
	ci := 0
	for i, c := range chans {
		if c.meta.FirstIndex <= from {
			ci = i
		}
	}
	enc := json.NewEncoder(stdout)
	printed := 0
	var lastEpoch, end uint64
	end = chans[ci].meta.FirstIndex - 1
	for i := ci; i < len(chans); i++ {
		c := chans[i]
		if i > ci {
			prev := chans[i-1]
			if !prev.meta.Sealed || c.meta.FirstIndex != end+1 {
				return fmt.Errorf("%w: room %q channel %d znode %s: first index %d, but the log before it ends at %d",
					logroom.ErrCorrupt, rv.name, c.num, rv.chanPath(c.num), c.meta.FirstIndex, end)
			}
		}
		start := c.meta.FirstIndex
		if i == ci && from > start {
			if start, err = batchAtOrBefore(rv, c.num, c.meta.FirstIndex, from); err != nil {
				return err
			}
		}
		res, err := rv.walkChannel(ctx, c.num, c.meta, walkOpts{
			start: start, stop: o.to, lastEpoch: lastEpoch, roomEpoch: em.Epoch, stopOnFault: true,
			onBatch: func(path string, b logroom.Batch, _ int) error {
				for k, data := range b.Entries {
					idx := b.First + uint64(k)
					if idx < from {
						continue
					}
					if o.to > 0 && idx > o.to {
						return errStopWalk
					}
					e := dumpEntry{Index: idx, Epoch: b.Epoch, Channel: c.num, Znode: path, Size: len(data), Data: data}
					if !o.noOps {
						e.Ops = opsView(data)
					}
					if err := enc.Encode(e); err != nil {
						return err
					}
					printed++
				}
				return nil
			},
		})
		if errors.Is(err, errChannelGone) {
			return fmt.Errorf("%w: %v (deleted during the dump)", logroom.ErrCompacted, err)
		}
		if err != nil {
			return err
		}
		if len(res.faults) > 0 {
			f := res.faults[0]
			return fmt.Errorf("%w: room %q channel %d znode %s: %s", logroom.ErrCorrupt, f.Room, f.Channel, f.Znode, f.Message)
		}
		if res.gap && c.meta.Deleting {
			return fmt.Errorf("%w: room %q channel %d is being deleted: entries after %d are no longer in ZooKeeper",
				logroom.ErrCompacted, rv.name, c.num, max(res.end, from-1))
		}
		lastEpoch, end = res.lastEpoch, res.end
		if res.stopped {
			break
		}
		if !c.meta.Sealed {
			if i < len(chans)-1 {
				return fmt.Errorf("%w: room %q channel %d znode %s: channel is open but channel %d follows it",
					logroom.ErrCorrupt, rv.name, c.num, rv.chanPath(c.num), chans[len(chans)-1].num)
			}
			break
		}
		end = c.meta.LastIndex
	}
	if printed == 0 {
		fmt.Fprintf(stderr, "roomlog dump: no entries at or after index %d in room %q (the log ends at %d)\n", from, rv.name, end)
	}
	return nil
}

// batchAtOrBefore returns the first index of the batch holding pos in
// channel num: the highest batch name <= pos (first when none).
func batchAtOrBefore(rv *roomView, num, first, pos uint64) (uint64, error) {
	p := rv.chanPath(num)
	names, err := rv.childrenOptional(p)
	if err != nil {
		return 0, err
	}
	best := first
	for _, n := range names {
		if f, ok := logroom.ParseBatchName(n); ok && f <= pos && f > best {
			best = f
		}
	}
	return best, nil
}

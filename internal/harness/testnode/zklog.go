package testnode

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

// LogEntry is one entry of a room's log as read back from ZooKeeper, its
// request envelope (if any) decoded, in the terms of a Record: Size and
// SHA256 are the payload's (what the Applier saw), RequestID the
// envelope's id ("" for a plain entry).
type LogEntry struct {
	Index, Epoch uint64
	Size         uint32
	SHA256       string
	RequestID    string
}

// DecodeLogEntry describes the raw log entry data at index (as logroom
// delivers it) the way a Record describes an applied one.
func DecodeLogEntry(index, epoch uint64, data []byte) LogEntry {
	return compactEntry(index, epoch, data).entry()
}

// logEntry is LogEntry without strings (what a LogRecorder keeps).
type logEntry struct {
	index, epoch uint64
	size         uint32
	sha          [sha256.Size]byte
	id           store.RequestID
}

func compactEntry(index, epoch uint64, data []byte) logEntry {
	req, payload, _ := store.DecodeRequest(data)
	return logEntry{index: index, epoch: epoch, size: uint32(min(len(payload), 1<<32-1)),
		sha: sha256.Sum256(payload), id: req.ID}
}

func (e logEntry) entry() LogEntry {
	out := LogEntry{Index: e.index, Epoch: e.epoch, Size: e.size, SHA256: hex.EncodeToString(e.sha[:])}
	if !e.id.IsZero() {
		out.RequestID = e.id.String()
	}
	return out
}

// RoomLog is the part of a room's log ZooKeeper still holds: the entries
// First..End (End: the committed end; none when First > End). Older
// entries were deleted with their channels (after a checkpoint covered
// them).
type RoomLog struct {
	First, End uint64
	// OldestChannel is the number of the oldest channel left (channels are
	// numbered from 1 and deleted oldest first).
	OldestChannel uint64
	Entries       []LogEntry
}

// dialRoom connects to ZooKeeper and opens room (under the replicas'
// default base, logroom.DefaultBase). Close the client.
func dialRoom(ctx context.Context, dc logroom.DialConfig, room string) (*logroom.Client, *logroom.Room, error) {
	if dc.SessionTimeout == 0 {
		dc.SessionTimeout = 10 * time.Second
	}
	cl, err := logroom.Dial(ctx, dc)
	if err != nil {
		return nil, nil, fmt.Errorf("testnode: read log: %w", err)
	}
	r, err := logroom.OpenRoom(ctx, cl, room, logroom.RoomOptions{})
	if err != nil {
		cl.Close()
		return nil, nil, fmt.Errorf("testnode: read log: %w", err)
	}
	return cl, r, nil
}

// ReadLog reads back, through a ZooKeeper client of its own, the part of
// room's log that ZooKeeper still holds, up to the committed end. hint is
// an index known to be committed (a replica's applied index) or 0. A
// channel deleted under the reader (checkpoints go on) makes it start
// again from the new oldest channel (at most 5 times).
func ReadLog(ctx context.Context, servers []string, room string, hint uint64) (RoomLog, error) {
	return ReadLogWith(ctx, logroom.DialConfig{Servers: servers}, room, hint)
}

// ReadLogWith is ReadLog through a client dialled with dc (TLS, ACL
// identities; SessionTimeout default 10 s).
func ReadLogWith(ctx context.Context, dc logroom.DialConfig, room string, hint uint64) (RoomLog, error) {
	cl, r, err := dialRoom(ctx, dc, room)
	if err != nil {
		return RoomLog{}, err
	}
	defer cl.Close()
	var last error
	for range 5 {
		l, err := readRoom(ctx, r, hint)
		if err == nil {
			return l, nil
		}
		last = err
		if !errors.Is(err, logroom.ErrCompacted) {
			break
		}
	}
	return RoomLog{}, fmt.Errorf("testnode: read log: %w", last)
}

func readRoom(ctx context.Context, room *logroom.Room, hint uint64) (RoomLog, error) {
	chs, err := room.Channels(ctx)
	if err != nil {
		return RoomLog{}, err
	}
	if len(chs) == 0 {
		return RoomLog{}, errors.New("no channel")
	}
	end, err := room.CommittedIndex(ctx, hint)
	if err != nil {
		return RoomLog{}, err
	}
	l := RoomLog{First: chs[0].FirstIndex, End: end, OldestChannel: chs[0].Num}
	if l.First > end {
		return l, nil
	}
	rd, err := room.Tail(ctx, l.First)
	if err != nil {
		return RoomLog{}, err
	}
	defer rd.Close()
	for rd.Position() <= end {
		es, err := rd.Next(ctx)
		if err != nil {
			return RoomLog{}, err
		}
		for _, e := range es {
			if e.Index <= end {
				l.Entries = append(l.Entries, DecodeLogEntry(e.Index, e.Epoch, e.Data))
			}
		}
	}
	return l, nil
}

// LogRecorder follows a room's log from index 1 while a test runs and
// keeps a description (LogEntry) of every entry, so that the checker can
// still see entries whose channels were deleted by the end of the run
// (deduplicated copies of a request leave no Record; only the log shows
// what they were). It reads through a ZooKeeper client of its own and
// retries connection loss and session expiry. If it falls so far behind
// that the channel it reads is deleted, it jumps to the oldest channel
// left and reports the indexes it missed (Skipped).
type LogRecorder struct {
	cancel context.CancelFunc
	done   chan struct{}
	from   uint64 // the first index it records

	mu      sync.Mutex // guards entries, skipped, errs
	entries []logEntry // ascending index
	skipped [][2]uint64
	errs    int
	lastErr error
}

// StartLogRecorder starts recording room's log (logroom.DefaultBase) on
// the ZooKeeper servers given, until Stop or ctx's end. Stop it when the
// run's proposals are done.
func StartLogRecorder(ctx context.Context, servers []string, room string) (*LogRecorder, error) {
	return StartLogRecorderAt(ctx, servers, room, 1)
}

// StartLogRecorderAt is StartLogRecorder from index from on (a room
// re-seeded at from-1 holds nothing below from).
func StartLogRecorderAt(ctx context.Context, servers []string, room string, from uint64) (*LogRecorder, error) {
	return StartLogRecorderWith(ctx, logroom.DialConfig{Servers: servers}, room, from)
}

// StartLogRecorderWith is StartLogRecorderAt through a client dialled
// with dc (TLS, ACL identities; SessionTimeout default 10 s).
func StartLogRecorderWith(ctx context.Context, dc logroom.DialConfig, room string, from uint64) (*LogRecorder, error) {
	cl, r, err := dialRoom(ctx, dc, room)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	lr := &LogRecorder{cancel: cancel, done: make(chan struct{}), from: max(from, 1)}
	go func() { // owner: lr; Stop cancels and waits
		defer close(lr.done)
		defer cl.Close()
		lr.run(ctx, r, max(from, 1))
	}()
	return lr, nil
}

func (lr *LogRecorder) run(ctx context.Context, room *logroom.Room, next uint64) {
	for ctx.Err() == nil {
		rd, err := room.Tail(ctx, next)
		if errors.Is(err, logroom.ErrCompacted) {
			next = lr.skipTo(ctx, room, next)
			continue
		}
		if err != nil {
			lr.fail(ctx, err)
			continue
		}
		for ctx.Err() == nil {
			es, err := rd.Next(ctx)
			if err != nil {
				if errors.Is(err, logroom.ErrCompacted) {
					next = lr.skipTo(ctx, room, next)
				} else {
					lr.fail(ctx, err)
				}
				break
			}
			lr.mu.Lock()
			for _, e := range es {
				if e.Index >= next {
					lr.entries = append(lr.entries, compactEntry(e.Index, e.Epoch, e.Data))
					next = e.Index + 1
				}
			}
			lr.mu.Unlock()
		}
		_ = rd.Close()
	}
}

// skipTo notes the indexes from next up to the oldest channel left as
// missed and returns where to go on reading.
func (lr *LogRecorder) skipTo(ctx context.Context, room *logroom.Room, next uint64) uint64 {
	chs, err := room.Channels(ctx)
	if err != nil || len(chs) == 0 {
		lr.fail(ctx, fmt.Errorf("list channels after compaction at %d: %v", next, err))
		return next
	}
	first := chs[0].FirstIndex
	if first <= next {
		// The channel of next is listed again: try again, not too fast.
		lr.fail(ctx, fmt.Errorf("index %d compacted, yet the oldest channel starts at %d", next, first))
		return next
	}
	lr.mu.Lock()
	lr.skipped = append(lr.skipped, [2]uint64{next, first - 1})
	lr.mu.Unlock()
	return first
}

func (lr *LogRecorder) fail(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	lr.mu.Lock()
	lr.errs++
	lr.lastErr = err
	lr.mu.Unlock()
	t := time.NewTimer(100 * time.Millisecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// Stop ends the recorder and waits for it. Idempotent.
func (lr *LogRecorder) Stop() {
	lr.cancel()
	<-lr.done
}

// Entries returns every entry recorded so far, ascending by index.
func (lr *LogRecorder) Entries() []LogEntry {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	out := make([]LogEntry, len(lr.entries))
	for i, e := range lr.entries {
		out[i] = e.entry()
	}
	return out
}

// Position is the index after the last entry recorded (its start index
// while it recorded nothing).
func (lr *LogRecorder) Position() uint64 {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if len(lr.entries) == 0 {
		return lr.from
	}
	return lr.entries[len(lr.entries)-1].index + 1
}

// Skipped returns the index ranges (inclusive) the recorder missed because
// their channels were deleted before it read them.
func (lr *LogRecorder) Skipped() [][2]uint64 {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return slices.Clone(lr.skipped)
}

// Errors returns how many read errors the recorder retried, and the last.
func (lr *LogRecorder) Errors() (int, error) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return lr.errs, lr.lastErr
}

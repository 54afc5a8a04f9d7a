package logroom

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/klauspost/compress/s2"
	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/zkx"
)

// batchState is what the writer knows about a batch it sent.
type batchState int

const (
	batchSending batchState = iota // Multi in flight
	batchLanded                    // the Multi succeeded or the exact bytes were read back
	batchUnknown                   // reply lost or unexpected: resolve before going on
	batchFenced                    // the fence check failed: a newer epoch exists
)

// batch is one batch znode of the writer's open channel.
type batch struct {
	first  uint64
	count  int
	path   string
	chPath string // its channel's znode
	data   []byte
	crc    uint32 // the batch's checksum (its BatchID's CRC)
	// finish are the requests whose last entry is in this batch: they are
	// answered when this batch and all earlier ones are acknowledged.
	finish []*appendReq
	// entries are kept only when OnCommit is set.
	entries [][]byte
	state   batchState
}

func (b *batch) last() uint64 { return b.first + uint64(b.count) - 1 }

type batchResult struct {
	b     *batch
	state batchState
	err   error
}

// loopState is owned by the loop goroutine (and by NewWriter before the
// loop starts).
type loopState struct {
	ch        uint64 // open channel number
	chPath    string
	chFirst   uint64 // first index of the open channel
	chVersion int32  // znode version of the open channel's meta
	chBatches int    // batches created (or in flight) in the open channel
	chBytes   int64  // their encoded bytes
	// next is the next index to assign. Invariant: next-1 == last index of
	// the newest batch formed (or the log end at takeover).
	next uint64
	// inflight holds the batches formed but not yet acknowledged, in index
	// order; inflight[0].first == lastCommitted+1.
	inflight []*batch
	// sending counts send goroutines that have not reported yet.
	sending int
	// headOff is how many entries of queue[0] are already in batches.
	headOff int
	// reserved is the payload bytes of taken requests not yet in batches.
	reserved int64
	// sealedBytes is the batch bytes of the room's sealed channels, and
	// sealedZnodes their batch and channel znodes, as of lastRefresh (plus
	// channels this writer sealed since).
	sealedBytes   int64
	sealedZnodes  int
	lastRefresh   time.Time
	seenDeletions uint64

	rotateWaiters []*rotateReq
	autoRotate    bool
	// sealing: an early seal Multi (sent while batches are in flight) has
	// not reported yet; it counts in sending. sealFailed: it failed, so the
	// seal waits for the in-flight batches and goes through rotate().
	sealing     bool
	sealFailed  bool
	needResolve bool
	stopping    bool
	lingerTimer *time.Timer
	lingerC     <-chan time.Time
	lingerFired bool
	// dead, once set, is the terminal error: nothing more is sent.
	dead error
	// sessionID is the session the last resolution (or takeover) ran in.
	sessionID int64

	// Compression: rawBuf and zBuf are scratch buffers for a batch's framed
	// payload and its S2 block (copied into the batch's own buffer); ratio
	// is the running estimate of uncompressed/stored bytes that sizes
	// batches by their uncompressed bytes (1 until measured).
	rawBuf, zBuf []byte
	ratio        float64
}

// Compression tuning (see WriterConfig.Compression).
const (
	// maxRawFactor bounds a compressed batch's uncompressed payload to this
	// many times MaxBatchBytes (besides MaxBatchRawBytes).
	maxRawFactor = 16
	// ratioMargin: batches are formed at this fraction of the estimated
	// uncompressed size that fills MaxBatchBytes, so that few overflow.
	ratioMargin = 0.85
	// ratioSampleBytes: batches smaller than this or than half of what
	// fits MaxBatchBytes uncompressed do not move the estimate (their
	// ratio says little about full ones).
	ratioSampleBytes = 16 << 10
	// minCompressBytes: smaller payloads are stored uncompressed untried.
	minCompressBytes = 256
	// minSavingDiv: a compressed payload is kept only if it saves at least
	// 1/minSavingDiv of the uncompressed bytes.
	minSavingDiv = 8
)

// refreshInterval bounds how often a full room re-reads channel sizes.
const refreshInterval = time.Second

// run is the writer's loop: it forms batches, starts their Multis, orders
// acknowledgements, rotates channels and resolves lost replies.
func (w *Writer) run() {
	defer close(w.done)
	ls := &w.ls
	stop := w.stop // nil once seen: a closed channel would be ready on every pass
	for {
		w.stats.loops.Add(1)
		if ls.dead == nil {
			if ls.needResolve {
				if ls.sending == 0 {
					w.resolve()
					continue
				}
			} else {
				w.fill()
				// While stopping, only the partly sent head request may go on.
				if (!ls.stopping || ls.headOff > 0) && !ls.sealing && w.rotationDue() {
					if len(ls.inflight) == 0 {
						w.rotate()
						continue
					}
					if !ls.sealFailed {
						w.startSeal()
					}
				}
			}
		}
		if ls.stopping && ls.sending == 0 && (ls.dead != nil || (ls.headOff == 0 && !ls.needResolve)) {
			w.shutdown()
			return
		}
		select {
		case res := <-w.results:
			w.onResult(res)
		case res := <-w.sealResults:
			w.onSeal(res)
		case <-w.kick.C():
		case req := <-w.rotateCh:
			if ls.dead != nil {
				req.done <- rotateResult{err: ls.dead}
			} else {
				ls.rotateWaiters = append(ls.rotateWaiters, req)
			}
		case <-ls.lingerC:
			ls.lingerC, ls.lingerTimer = nil, nil
			ls.lingerFired = true
		case <-stop:
			stop = nil
			ls.stopping = true
			// Queued requests fail; a partly sent head request is finished.
			w.failQueued(fmt.Errorf("%w: writer", ErrClosed))
		}
	}
}

// rotationDue reports whether the open channel must be sealed before more
// batches are formed.
func (w *Writer) rotationDue() bool {
	ls := &w.ls
	if len(ls.rotateWaiters) > 0 || ls.autoRotate {
		return true
	}
	if ls.chBatches >= w.cfg.MaxChannelBatches || ls.chBytes >= w.cfg.MaxChannelBytes {
		ls.autoRotate = true
		return true
	}
	return false
}

// fill forms and sends batches while in-flight slots are free.
func (w *Writer) fill() {
	ls := &w.ls
	for len(ls.inflight) < w.cfg.MaxInFlight && !w.rotationDue() {
		if w.cfg.Linger > 0 && !w.lingerDone() {
			return
		}
		if len(ls.inflight) >= w.cfg.EagerInFlight && !w.fullBatchQueued() {
			return // wait for a slot among the eager ones, or a full batch
		}
		bs := w.formBatch()
		if bs == nil {
			return
		}
		for _, b := range bs {
			ls.inflight = append(ls.inflight, b)
			ls.chBatches++
			ls.chBytes += int64(len(b.data))
			ls.sending++
			w.m.batchSent(len(b.data))
			go w.send(b)
		}
	}
}

// rawLimit is the uncompressed payload budget of the next batch: what
// fits MaxBatchBytes uncompressed or, when compressing, that times the
// estimated ratio (with a margin), at most maxRaw.
func (w *Writer) rawLimit() int {
	limit := w.cfg.MaxBatchBytes - batchOverhead
	if w.cfg.Compression == CompressionNone {
		return limit
	}
	est := float64(limit) * w.ls.ratio * ratioMargin
	if est >= float64(w.maxRaw) {
		return w.maxRaw
	}
	return max(limit, int(est))
}

// fullBatchQueued reports whether a full batch is waiting.
func (w *Writer) fullBatchQueued() bool {
	limit := w.rawLimit()
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.queuedBytes >= limit
}

// lingerDone reports whether a batch may be formed now under Linger: a full
// batch is queued, no batch is in flight, or the linger timer (started
// here) has fired.
func (w *Writer) lingerDone() bool {
	ls := &w.ls
	limit := w.rawLimit()
	w.mu.Lock()
	queued, empty := w.queuedBytes, len(w.queue) == 0
	w.mu.Unlock()
	switch {
	case empty:
		return false
	case queued >= limit || ls.lingerFired || ls.stopping || len(ls.inflight) == 0:
		// Nothing in flight: waiting would only add latency (Nagle's
		// rule), so a lone synchronous proposer never lingers.
		w.stopLinger()
		ls.lingerFired = false
		return true
	case ls.lingerTimer == nil:
		ls.lingerTimer = time.NewTimer(w.cfg.Linger)
		ls.lingerC = ls.lingerTimer.C
	}
	return false
}

func (w *Writer) stopLinger() {
	ls := &w.ls
	if ls.lingerTimer != nil {
		ls.lingerTimer.Stop()
		ls.lingerTimer, ls.lingerC = nil, nil
	}
}

// formBatch takes queued entries up to the batch budget (rawLimit,
// maxCount), assigns their indexes and encodes the batch: one batch, or
// several when compression did not bring it below MaxBatchBytes (see
// encodeCompressed). It returns nil when nothing is queued.
func (w *Writer) formBatch() []*batch {
	ls := &w.ls
	limit := w.rawLimit()
	var parts [][]byte
	var entries [][]byte
	size, count := 0, 0
	popped := 0 // payload bytes leaving the queue (for the metrics)
	b := &batch{first: ls.next}
	w.mu.Lock()
	for len(w.queue) > 0 {
		r := w.queue[0]
		if ls.headOff == 0 {
			if r.state != reqQueued {
				// Cancelled requests are removed by their caller under w.mu.
				panic(fmt.Sprintf("logroom: queued request in state %d", r.state))
			}
			if !w.fitsLocked(r, size) && w.refreshDue() {
				w.mu.Unlock()
				w.refreshRoomBytes()
				w.mu.Lock()
				continue // the queue may have changed: look at its head again
			}
			if !w.fitsLocked(r, size) {
				w.popLocked()
				w.queuedBytes -= len(r.payload)
				popped += len(r.payload)
				w.signalSpaceLocked()
				r.state = reqTaken
				r.done <- appendResult{err: fmt.Errorf("%w: room %q holds %d bytes in %d znodes (charged %d: %d per znode), %d reserved, bound %d, append of %d bytes",
					ErrRoomFull, w.room.name, ls.sealedBytes+ls.chBytes, ls.sealedZnodes+ls.chBatches+1, w.chargedLocked(),
					ZnodeHeapBytes, ls.reserved, w.cfg.MaxRoomBytes, len(r.payload))}
				continue
			}
			ls.reserved += int64(len(r.payload))
			r.state = reqTaken
			r.first = ls.next + uint64(count)
		}
		start := 0
		if ls.headOff > 0 {
			start = r.ends[ls.headOff-1]
		}
		j := ls.headOff
		for j < len(r.ends) && size+(r.ends[j]-start) <= limit && count+(j-ls.headOff) < w.maxCount {
			j++
		}
		// Entries [headOff, j) fit. At least one does in an empty batch:
		// Append refused entries larger than maxEntry.
		if j > ls.headOff {
			end := r.ends[j-1]
			parts = append(parts, r.payload[start:end])
			size += end - start
			ls.reserved -= int64(end - start)
			if w.cfg.OnCommit != nil {
				for k := ls.headOff; k < j; k++ {
					s := 0
					if k > 0 {
						s = r.ends[k-1]
					}
					entries = append(entries, entryData(r.payload[s:r.ends[k]]))
				}
			}
			count += j - ls.headOff
		}
		if j == 0 {
			// Nothing of a request taken just now fits what is left of
			// this batch: give it back, it heads the next batch (an empty
			// batch always holds its first entry).
			ls.reserved -= int64(len(r.payload))
			r.state = reqQueued
			break
		}
		if j < len(r.ends) {
			ls.headOff = j
			break // batch full
		}
		// Request fully batched.
		ls.headOff = 0
		w.popLocked()
		w.queuedBytes -= len(r.payload)
		popped += len(r.payload)
		w.signalSpaceLocked()
		r.last = ls.next + uint64(count) - 1
		b.finish = append(b.finish, r)
	}
	w.mu.Unlock()
	w.m.queued(-popped)
	if count == 0 {
		return nil
	}
	b.count = count
	b.entries = entries
	b.path, b.chPath = w.room.batchPath(ls.ch, b.first), ls.chPath
	ls.next += uint64(count)
	if w.cfg.Compression == CompressionNone {
		b.data, b.crc = encodeBatchParts(w.epoch, b.first, count, size, parts...)
		return []*batch{b}
	}
	return w.encodeCompressed(b, parts)
}

// encodeCompressed encodes the formed batch b, whose framed payload is
// parts, S2-compressed where that pays. A batch that fits MaxBatchBytes
// neither compressed nor uncompressed is split, at the entry boundary
// nearest half its bytes, again and again (an entry alone always fits
// uncompressed: Append refuses larger ones); the pieces share b's entries,
// and each request is finished by the piece holding its last entry.
func (w *Writer) encodeCompressed(b *batch, parts [][]byte) []*batch {
	ls := &w.ls
	raw := ls.rawBuf[:0]
	for _, p := range parts {
		raw = append(raw, p...)
	}
	ls.rawBuf = raw[:0]
	out := w.encodePieces(nil, b.first, b.count, raw)
	if len(out) == 1 {
		b.data, b.crc = out[0].data, out[0].crc
		return []*batch{b}
	}
	w.stats.splits.Add(1)
	fi, ei := 0, 0
	for _, p := range out {
		p.path, p.chPath = w.room.batchPath(ls.ch, p.first), b.chPath
		for fi < len(b.finish) && b.finish[fi].last <= p.last() {
			p.finish = append(p.finish, b.finish[fi])
			fi++
		}
		if b.entries != nil {
			p.entries = b.entries[ei : ei+p.count]
			ei += p.count
		}
	}
	w.log.Debug("compressed batch over MaxBatchBytes: split", "first", b.first, "count", b.count,
		"raw_bytes", len(raw), "pieces", len(out), "ratio_estimate", ls.ratio)
	return out
}

// encodePieces appends to out the batches (first, count, data, crc) that
// hold count entries from first whose framed payload is raw.
func (w *Writer) encodePieces(out []*batch, first uint64, count int, raw []byte) []*batch {
	ls := &w.ls
	if len(raw) >= minCompressBytes {
		codec := CodecS2
		var z []byte
		if w.cfg.Compression == CompressionZstd && w.RoomVersion() >= CodecZstd.minRoomVersion() {
			codec = CodecZstd
			z = zstdEncode(ls.zBuf[:0], raw)
		} else {
			z = s2.Encode(ls.zBuf[:cap(ls.zBuf)], raw)
		}
		ls.zBuf = z[:0]
		fits := len(z)+batchOverhead <= w.cfg.MaxBatchBytes
		w.observeRatio(len(raw), len(z), fits)
		if fits && len(z) <= len(raw)-len(raw)/minSavingDiv {
			data, crc := encodeBatchV2(w.epoch, first, count, codec, len(raw), z)
			return append(out, &batch{first: first, count: count, data: data, crc: crc})
		}
	}
	if len(raw)+batchOverhead <= w.cfg.MaxBatchBytes || count == 1 {
		data, crc := encodeBatchParts(w.epoch, first, count, len(raw), raw)
		return append(out, &batch{first: first, count: count, data: data, crc: crc})
	}
	k, off := splitPoint(raw, count)
	out = w.encodePieces(out, first, k, raw[:off])
	return w.encodePieces(out, first+uint64(k), count-k, raw[off:])
}

// observeRatio updates the compression ratio estimate with a batch of raw
// uncompressed bytes that compressed to z bytes. One that did not fit
// MaxBatchBytes replaces the estimate (the data changed: adapt at once).
func (w *Writer) observeRatio(raw, z int, fits bool) {
	ls := &w.ls
	obs := float64(raw) / float64(max(z, 1))
	switch {
	case !fits:
		ls.ratio = obs
	case raw >= min(ratioSampleBytes, (w.cfg.MaxBatchBytes-batchOverhead)/2):
		ls.ratio = 0.75*ls.ratio + 0.25*obs
	}
	ls.ratio = min(max(ls.ratio, 1), maxRawFactor)
}

// splitPoint returns k in [1, count-1] and the byte offset in raw (count
// uvarint-framed entries, count >= 2) where entry k starts: the first
// entry boundary at or past half of raw.
func splitPoint(raw []byte, count int) (k, off int) {
	for k < count-1 {
		l, n := binary.Uvarint(raw[off:])
		off += n + int(l)
		k++
		if off >= len(raw)/2 {
			break
		}
	}
	return k, off
}

// entryData strips the uvarint length prefix of one framed entry.
func entryData(framed []byte) []byte {
	for i, c := range framed {
		if c < 0x80 {
			return framed[i+1:]
		}
	}
	return nil
}

// chargedLocked is what the room's byte bound counts now: batch bytes of
// sealed channels and of the open one's batches (sent or in flight), plus
// ZnodeHeapBytes for each of their znodes and each channel znode.
func (w *Writer) chargedLocked() int64 {
	ls := &w.ls
	return chargedBytes(ls.sealedBytes+ls.chBytes, ls.sealedZnodes+ls.chBatches+1)
}

// fitsLocked applies the room byte bound to a request about to be taken
// into a batch that already holds forming bytes of entries: its payload
// plus one batch of its own (header and znode; it may share one, so the
// charge errs high).
func (w *Writer) fitsLocked(r *appendReq, forming int) bool {
	return w.chargedLocked()+w.ls.reserved+int64(forming)+int64(len(r.payload))+batchOverhead+ZnodeHeapBytes <= w.cfg.MaxRoomBytes
}

// refreshDue reports whether a full room should re-read its accounting
// (deleted channels free space): at most once per refreshInterval, or at
// once when this Room deleted a channel since the last refresh.
func (w *Writer) refreshDue() bool {
	ls := &w.ls
	return w.room.deletions.Load() != ls.seenDeletions || time.Since(ls.lastRefresh) >= refreshInterval
}

// refreshRoomBytes re-reads the sealed channels' byte counts.
func (w *Writer) refreshRoomBytes() {
	ls := &w.ls
	ls.lastRefresh = time.Now()
	seen := w.room.deletions.Load()
	ctx, cancel := context.WithTimeout(w.lifeCtx, 10*time.Second)
	defer cancel()
	infos, err := w.room.Channels(ctx)
	if err != nil {
		w.log.Warn("refreshing room bytes failed", "err", err)
		return
	}
	var sealed int64
	sealedBatches, sealedZnodes := 0, 0
	for _, ci := range infos {
		if ci.Sealed && ci.Num != ls.ch {
			sealed += ci.Bytes
			sealedBatches += ci.Batches
			sealedZnodes += ci.Batches + 1
		}
	}
	ls.sealedBytes, ls.sealedZnodes, ls.seenDeletions = sealed, sealedZnodes, seen
	w.m.roomMeasured(sealed+ls.chBytes, sealedBatches+ls.chBatches+len(infos), len(infos))
}

// send runs one batch's fenced Multi and reports its outcome to the loop.
func (w *Writer) send(b *batch) {
	res, err := w.c.Conn().Multi(append(w.fenceOps(), &zk.CreateRequest{Path: b.path, Data: b.data, Acl: w.c.ACL()})...)
	i, err := multiErr(res, err)
	st := batchLanded
	switch {
	case err == nil:
	case fenceRefused(i, err):
		st = batchFenced
	default:
		// Connection loss (applied or not), NodeExists (an earlier attempt
		// landed?) or anything unexpected: resolve by reading back.
		st = batchUnknown
	}
	w.results <- batchResult{b: b, state: st, err: err}
}

// onResult records a Multi outcome and acknowledges what it can.
func (w *Writer) onResult(res batchResult) {
	ls := &w.ls
	ls.sending--
	res.b.state = res.state
	switch res.state {
	case batchFenced:
		w.log.Warn("batch fenced: a newer epoch exists", "first", res.b.first)
		ls.needResolve = true
	case batchUnknown:
		if !ls.needResolve {
			w.log.Warn("batch outcome unknown; pausing to resolve", "first", res.b.first, "err", res.err)
		}
		ls.needResolve = true
	}
	w.ackLanded()
}

// ackLanded acknowledges the landed batches at the head of inflight.
func (w *Writer) ackLanded() {
	ls := &w.ls
	for len(ls.inflight) > 0 && ls.inflight[0].state == batchLanded {
		b := ls.inflight[0]
		ls.inflight = ls.inflight[1:]
		w.lastCommitted.Store(b.last())
		w.m.batchAcked(b.count, len(b.data))
		for _, r := range b.finish {
			r.done <- appendResult{last: r.last}
		}
		if w.cfg.OnCommit != nil {
			es := make([]Entry, len(b.entries))
			id := BatchID{Epoch: w.epoch, First: b.first, Count: b.count, CRC: b.crc}
			for i, d := range b.entries {
				es[i] = Entry{Index: b.first + uint64(i), Epoch: w.epoch, Data: d, Batch: id}
			}
			w.cfg.OnCommit(es)
		}
	}
}

// failFrom fails every unacknowledged batch from inflight[i] on with err,
// and the request partially batched (if any).
func (w *Writer) failFrom(i int, err error) {
	ls := &w.ls
	for _, b := range ls.inflight[i:] {
		for _, r := range b.finish {
			r.done <- appendResult{err: w.partial(r, r.last, err)}
		}
	}
	w.m.batchesFailed(len(ls.inflight) - i)
	ls.inflight = ls.inflight[:i]
	w.mu.Lock()
	if ls.headOff > 0 && len(w.queue) > 0 {
		// Part of it was in the failed batches; the rest was never sent.
		r := w.queue[0]
		w.popLocked()
		w.queuedBytes -= len(r.payload)
		w.m.queued(-len(r.payload))
		w.signalSpaceLocked()
		ls.headOff, ls.reserved = 0, 0
		r.done <- appendResult{err: w.partial(r, r.first+uint64(len(r.ends))-1, err)}
	}
	w.mu.Unlock()
}

// partial turns err for request r (entries r.first..last) into a
// PartialAppendError when some of its batches were acknowledged: an
// Append that spans batches must not hear "nothing committed" (ErrFenced)
// when its first part is in the log.
func (w *Writer) partial(r *appendReq, last uint64, err error) error {
	committed := w.lastCommitted.Load()
	if r.first == 0 || committed < r.first || errors.Is(err, ErrOutcomeUnknown) {
		return err
	}
	return &PartialAppendError{First: r.first, Last: last, CommittedThrough: committed, Err: err}
}

// failQueued answers every queued request with err (nothing of them was
// sent) and makes err the answer to future appends.
func (w *Writer) failQueued(err error) {
	ls := &w.ls
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.failErr == nil || errors.Is(err, ErrFenced) {
		w.failErr = err
	}
	before := w.queuedBytes
	for i, r := range w.queue {
		if i == 0 && ls.headOff > 0 {
			continue // partially sent: answered with its batches' outcome
		}
		r.state = reqTaken
		r.done <- appendResult{err: err}
	}
	if ls.headOff > 0 && len(w.queue) > 0 {
		w.queue = w.queue[:1]
		w.queuedBytes = len(w.queue[0].payload)
	} else {
		w.queue, w.queuedBytes = nil, 0
	}
	w.m.queued(w.queuedBytes - before)
	w.signalSpaceLocked()
}

// die makes err terminal: the unacknowledged batches from inflight[i] on
// and every queued request fail with it, rotations too.
func (w *Writer) die(i int, err error) {
	ls := &w.ls
	ls.dead = err
	ls.needResolve = false
	w.failFrom(i, err)
	if !errors.Is(err, ErrFenced) {
		// Queued requests and later appends were never sent: a definite
		// answer, not the unknown outcome of the batch that stopped us.
		err = fmt.Errorf("%w (nothing of this append was sent) after: %v", ErrWriterStopped, err)
	}
	w.failQueued(err)
	for _, rq := range ls.rotateWaiters {
		// A rotation waiter gets the error itself (its rotation may be
		// what failed).
		rq.done <- rotateResult{err: ls.dead}
	}
	ls.rotateWaiters = nil
	w.log.Warn("writer stopped", "err", err)
}

// shutdown ends the loop after Close once no Multi is in flight.
func (w *Writer) shutdown() {
	ls := &w.ls
	w.stopLinger()
	w.ackLanded()
	if len(ls.inflight) > 0 || ls.headOff > 0 {
		err := fmt.Errorf("%w: writer closed before the outcome was known", ErrOutcomeUnknown)
		if ls.dead != nil {
			err = ls.dead
		}
		w.failFrom(0, err)
	}
	for _, rq := range ls.rotateWaiters {
		rq.done <- rotateResult{err: fmt.Errorf("%w: writer", ErrClosed)}
	}
	ls.rotateWaiters = nil
}

// resolve learns the fate of every unacknowledged batch after a lost reply
// or a failed fence, in index order, before anything else is sent. See
// doc.go, protocol "Connection loss".
func (w *Writer) resolve() {
	ls := &w.ls
	ctx := w.lifeCtx
	w.stats.resolutions.Add(1)
	if err := w.c.WaitSession(ctx); err == nil {
		if sid := w.c.SessionID(); sid != ls.sessionID {
			w.log.Warn("zookeeper session changed (the old one expired); the fence is the epoch version, so resolution goes on",
				"old_session", fmt.Sprintf("%#x", ls.sessionID), "new_session", fmt.Sprintf("%#x", sid))
			ls.sessionID = sid
		}
	}
	fenced := false
	synced := false
	for _, b := range ls.inflight {
		if b.state == batchFenced {
			fenced = true
		}
	}
	i := 0
	for ; i < len(ls.inflight); i++ {
		b := ls.inflight[i]
		if b.state == batchLanded {
			continue
		}
		st, err := w.resolveBatch(ctx, b, fenced, &synced)
		switch st {
		case batchLanded:
			b.state = batchLanded
			continue
		case batchFenced:
			if !fenced {
				// Fenced now: re-check this batch under the fenced rule.
				fenced, synced = true, false
				i--
				continue
			}
			w.ackLanded()
			w.die(0, fmt.Errorf("%w: room %q: epoch %d superseded (batch %d not committed)", ErrFenced, w.room.name, w.epoch, b.first))
			return
		default:
			w.ackLanded()
			w.die(0, fmt.Errorf("%w: room %q batch %s: %v", ErrOutcomeUnknown, w.room.name, b.path, err))
			return
		}
	}
	w.ackLanded()
	if fenced {
		w.die(0, fmt.Errorf("%w: room %q: epoch %d superseded", ErrFenced, w.room.name, w.epoch))
		return
	}
	ls.needResolve = false
	w.log.Info("resolved unacknowledged batches; resuming", "last_committed", w.LastCommitted(),
		"read_back", w.stats.readBack.Load(), "resent", w.stats.resent.Load())
}

// resolveBatch decides one batch. Not fenced: read it back after a sync;
// present with our bytes → landed; absent → resend (fenced); another
// writer's bytes → fenced. Fenced: only a read (a newer epoch exists, so
// nothing of ours can land any more): present with our bytes → landed,
// else fenced. It returns batchUnknown with a reason when it cannot decide.
func (w *Writer) resolveBatch(ctx context.Context, b *batch, fenced bool, synced *bool) (batchState, error) {
	var bo zkx.Backoff
	for {
		if err := w.c.WaitSession(ctx); err != nil {
			return batchUnknown, err
		}
		if !*synced {
			if _, err := w.c.Conn().Sync(b.chPath); err != nil {
				if isConnErr(err) {
					if err := bo.Wait(ctx); err != nil {
						return batchUnknown, err
					}
					continue
				}
				return batchUnknown, err
			}
			*synced = true
		}
		data, _, err := w.c.Conn().Get(b.path)
		switch {
		case err == nil:
			if bytes.Equal(data, b.data) {
				w.stats.readBack.Add(1)
				return batchLanded, nil
			}
			w.log.Warn("batch name holds another writer's data", "path", b.path)
			return batchFenced, nil
		case errors.Is(err, zk.ErrNoNode):
			// Absent because it never landed, or because a newer primary
			// read it, sealed past it and deleted the channel meanwhile?
			// DeleteChannel marks the channel before removing any batch, so
			// a channel read after the batch and not marked means the batch
			// was not deleted.
			gone, cerr := w.channelGoing(b.chPath)
			if isConnErr(cerr) {
				*synced = false
				if err := bo.Wait(ctx); err != nil {
					return batchUnknown, err
				}
				continue
			}
			if cerr != nil {
				return batchUnknown, cerr
			}
			if gone {
				return batchUnknown, fmt.Errorf("channel %s was deleted: cannot tell whether batch %d landed", b.chPath, b.first)
			}
			if fenced {
				return batchFenced, nil
			}
		case isConnErr(err):
			*synced = false
			if err := bo.Wait(ctx); err != nil {
				return batchUnknown, err
			}
			continue
		default:
			return batchUnknown, err
		}
		// Absent: resend the same bytes, fenced.
		w.stats.resent.Add(1)
		res, err := w.c.Conn().Multi(append(w.fenceOps(), &zk.CreateRequest{Path: b.path, Data: b.data, Acl: w.c.ACL()})...)
		i, err := multiErr(res, err)
		switch {
		case err == nil:
			return batchLanded, nil
		case fenceRefused(i, err):
			return batchFenced, nil
		case errors.Is(err, zk.ErrNodeExists):
			continue // an earlier attempt landed meanwhile: compare bytes
		case isConnErr(err):
			*synced = false
			if err := bo.Wait(ctx); err != nil {
				return batchUnknown, err
			}
		case errors.Is(err, zk.ErrNoNode):
			return batchUnknown, fmt.Errorf("channel %s is gone", b.chPath)
		default:
			return batchUnknown, err
		}
	}
}

// channelGoing reports whether the channel at path is deleted or marked
// for deletion.
func (w *Writer) channelGoing(path string) (bool, error) {
	data, _, err := w.c.Conn().Get(path)
	if errors.Is(err, zk.ErrNoNode) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	m, err := decodeChannelMeta(data)
	if err != nil {
		return false, err
	}
	return m.Deleting, nil
}

// sealPlan is one rotation: the seal of the open channel, the next
// channel, the ops, and what it changes of the room meta.
type sealPlan struct {
	sealed, next channelMeta
	nextNum      uint64
	ops          []interface{}
	// metaChanged: the ops rewrite the room meta (a room version change,
	// or the end of a downgrade); lowering is what Lowering is after it.
	metaChanged, lowering bool
	// waiters: how many of rotateWaiters (the first ones) it answers.
	waiters int
}

// sealOps plans the rotation that seals the open channel at next-1 and
// creates the next channel, for the Rotate and RotateToVersion calls
// waiting now. The newest RotateToVersion among them sets the room
// version: raising writes room meta record 2; lowering to 1 also writes
// record 2 (Lowering: v0.1.0 stays out while channels of the higher
// version remain), and RotateToVersion(1) on a room already at 1 but
// Lowering writes record 1, ending the downgrade (the caller has made
// sure no channel above 1 remains).
func (w *Writer) sealOps() sealPlan {
	ls := &w.ls
	cur := w.RoomVersion()
	target, asked := cur, false
	for _, rq := range ls.rotateWaiters {
		if rq.roomVersion != 0 {
			target, asked = rq.roomVersion, true
		}
	}
	p := sealPlan{nextNum: ls.ch + 1, waiters: len(ls.rotateWaiters), lowering: w.lowering}
	p.sealed = channelMeta{Version: channelFormatVersion, First: ls.chFirst, Epoch: w.epoch, Sealed: true,
		Last: ls.next - 1, Bytes: ls.chBytes, Batches: ls.chBatches, Room: roomField(cur)}
	p.next = channelMeta{Version: channelFormatVersion, First: ls.next, Epoch: w.epoch, Room: roomField(target)}
	p.ops = []interface{}{
		&zk.SetDataRequest{Path: ls.chPath, Data: encodeMeta(p.sealed), Version: ls.chVersion},
		&zk.CreateRequest{Path: w.room.channelPath(p.nextNum), Data: encodeMeta(p.next), Acl: w.c.ACL()},
	}
	switch {
	case target != cur:
		p.metaChanged, p.lowering = true, target == 1
	case asked && target == 1 && w.lowering:
		p.metaChanged, p.lowering = true, false
	}
	if p.metaChanged {
		since := ls.next
		if target == cur {
			since = w.roomSince // the end of a downgrade: the version has not changed
		}
		meta := roomMetaFor(w.roomCreated, target, since, w.epoch, p.lowering, w.room.fence)
		p.ops = append(p.ops, &zk.SetDataRequest{Path: w.room.root, Data: encodeMeta(meta), Version: w.roomMetaVer})
	}
	return p
}

// rotate seals the open channel at next-1 and opens the next one (one
// fenced Multi, resolved on connection loss); called with nothing in flight.
func (w *Writer) rotate() {
	p := w.sealOps()
	nextPath := w.room.channelPath(p.nextNum)
	err := w.fencedWrite(w.lifeCtx, "rotate", w.hasData(nextPath, encodeMeta(p.next)), p.ops...)
	if err != nil {
		switch {
		case errors.Is(err, zk.ErrBadVersion) && !errors.Is(err, ErrFenced):
			// Not our fence: a znode we compare-and-set (the open
			// channel's meta, or the room meta) was written by another
			// client since we read it.
			err = fmt.Errorf("%w: room %q: rotate: the open channel's meta %s (version %d) or the room meta %s (version %d) was changed by another client: %w",
				ErrCorrupt, w.room.name, w.ls.chPath, w.ls.chVersion, w.room.root, w.roomMetaVer, err)
		case !errors.Is(err, ErrFenced) && !errors.Is(err, ErrOutcomeUnknown):
			err = fmt.Errorf("%w: rotate: %w", ErrOutcomeUnknown, err)
		}
		w.die(0, err)
		return
	}
	w.switchChannel(p)
}

type sealResult struct {
	plan sealPlan
	err  error
}

// startSeal sends the seal while batches are still in flight, so a
// rotation costs about one round trip: the Multi also checks that every
// unacknowledged batch of the channel exists, so it cannot seal past a
// batch that failed. If it fails for any reason, the seal waits for the
// in-flight batches and goes through rotate(), whose read-back makes a seal
// that landed despite a lost reply harmless. A rotation that changes the
// room meta never goes early: it waits for the batches in flight, so that
// rotate() is the only path that writes the meta, and a lost reply is
// read back against the very plan that was sent.
func (w *Writer) startSeal() {
	ls := &w.ls
	p := w.sealOps()
	if p.metaChanged {
		ls.sealFailed = true // go through rotate() once nothing is in flight
		return
	}
	checks := w.fenceOps()
	for _, b := range ls.inflight {
		if b.state != batchLanded {
			checks = append(checks, &zk.CheckVersionRequest{Path: b.path, Version: 0})
		}
	}
	ops := append(checks, p.ops...)
	ls.sealing = true
	ls.sending++
	go func() {
		_, err := multiErr(w.c.Conn().Multi(ops...))
		w.sealResults <- sealResult{plan: p, err: err}
	}()
}

func (w *Writer) onSeal(res sealResult) {
	ls := &w.ls
	ls.sealing = false
	ls.sending--
	if res.err != nil {
		ls.sealFailed = true
		w.log.Debug("early seal failed; sealing after the batches in flight", "err", res.err)
		return
	}
	w.stats.earlySeals.Add(1)
	w.switchChannel(res.plan)
}

// switchChannel makes the freshly created channel p.nextNum the open one
// and answers the Rotate calls the plan was made for (later ones wait for
// the next rotation: theirs may ask for a room version this one did not
// write).
func (w *Writer) switchChannel(p sealPlan) {
	ls := &w.ls
	sealed, next, nextNum := p.sealed, p.next, p.nextNum
	info := sealed.info(ls.ch)
	w.log.Info("channel rotated", "sealed", ls.ch, "first", sealed.First, "last", sealed.Last,
		"batches", sealed.Batches, "bytes", sealed.Bytes, "next", nextNum)
	ls.sealedBytes += ls.chBytes
	ls.sealedZnodes += ls.chBatches + 1
	ls.ch, ls.chPath, ls.chFirst, ls.chVersion = nextNum, w.room.channelPath(nextNum), next.First, 0
	ls.chBatches, ls.chBytes = 0, 0
	ls.autoRotate, ls.sealFailed = false, false
	w.m.rotated()
	if p.metaChanged {
		v := next.roomVersion()
		w.log.Info("room version recorded", "from", w.RoomVersion(), "to", v, "since", next.First, "channel", nextNum,
			"lowering", p.lowering)
		if v != w.RoomVersion() {
			w.roomSince = next.First
		}
		w.roomVer.Store(int32(v))
		w.lowering = p.lowering
		w.roomMetaVer++
	}
	n := min(p.waiters, len(ls.rotateWaiters))
	for _, rq := range ls.rotateWaiters[:n] {
		rq.done <- rotateResult{info: info}
	}
	ls.rotateWaiters = append([]*rotateReq(nil), ls.rotateWaiters[n:]...)
}

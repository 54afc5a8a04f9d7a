package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/batchrepr"
	"github.com/cockroachdb/pebble/v2/record"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/wal"
)

// walPosition reads the applied position a Pebble checkpoint in dir holds
// from its WAL files alone, without opening it (which replays the whole WAL
// into a memtable: a third of a checkpoint's CPU in the bench's profile
// when checkpoints carried up to 4 MiB; the default is 16 MiB now).
//
// Every Apply writes keyApplied in its batch, so when the newest WAL holds
// such a write, the last one in it is the newest write of the key in the
// checkpoint: a batch takes its sequence number and its place in the WAL
// under one lock (file order is sequence order), every sstable holds data
// of older WALs only, and the newest WAL of a checkpoint is the one Pebble
// was writing when it listed the WALs together with the version, so it is
// at or above that version's MinUnflushedLogNum and Pebble's recovery
// replays it. The files are read the way that recovery reads them
// (wal.Scan, the same record reader, the same tail rule: an unclean end is
// the end only in the newest WAL), so the record it stops at is the one
// Pebble's replay would stop at. Older WALs are read strictly though
// recovery may skip those below MinUnflushedLogNum: one that does not
// read cleanly only makes walPosition fall back.
//
// why is empty when the WAL vouches for p, and otherwise says why not:
// whenever that argument does not hold for what is on disk (no WAL, a WAL
// that does not read to its end under Pebble's rule, a batch that does not
// parse or whose entries do not match its header's count, which Pebble's
// replay refuses, any write of keyApplied other than a Set or a range
// deletion over it, no Set of it in the newest WAL: a checkpoint that
// flushed just before, its WAL holds nothing yet) and on any error reading
// the files. The caller then opens the checkpoint read-only, which decides.
//
// The image is not opened on this path: checkpoint.Restore and a fetch
// open what they restore and compare its index and epoch with the
// manifest before they use it.
func walPosition(fs vfs.FS, dir string) (p position, why string) {
	logs, err := wal.Scan(wal.Dir{FS: fs, Dirname: dir})
	if err != nil {
		return position{}, fmt.Sprintf("list WAL files: %v", err)
	}
	if len(logs) == 0 {
		return position{}, "no WAL"
	}
	var (
		buf   bytes.Buffer
		found []byte // value of the newest Set of keyApplied in the newest WAL
	)
	for i, ll := range logs {
		newest := i == len(logs)-1
		if why := scanWAL(ll, newest, &buf, func(v []byte) { found = append(found[:0], v...) }); why != "" {
			return position{}, why
		}
		if !newest {
			found = found[:0]
		}
	}
	if len(found) == 0 {
		return position{}, "the newest WAL holds no applied position"
	}
	p, err = decodeApplied(found)
	if err != nil {
		return position{}, err.Error()
	}
	return p, ""
}

// scanWAL reads one logical WAL to its end (Pebble's replayWAL rule) and
// calls set with the value of every Set of keyApplied in order. A non-empty
// result says why the WAL cannot vouch for a position.
func scanWAL(ll wal.LogicalLog, newest bool, buf *bytes.Buffer, set func([]byte)) (why string) {
	rr := ll.OpenForRead()
	defer func() {
		if err := rr.Close(); err != nil && why == "" {
			why = fmt.Sprintf("close WAL %s: %v", ll.Num, err)
		}
	}()
	for {
		buf.Reset()
		r, off, err := rr.NextRecord()
		if err == nil {
			_, err = io.Copy(buf, r)
		}
		switch {
		case err == nil:
		case errors.Is(err, io.EOF):
			return ""
		case errors.Is(err, record.ErrUnexpectedEOF) && newest:
			return "" // a torn tail: Pebble's recovery ends here too
		default:
			// Corruption (record.ErrInvalidChunk, ErrZeroedChunk, an unclean
			// end of an older WAL, the WAL reader's own "invalid batch",
			// which also rejects a record too short for a batch header) or
			// an I/O error.
			return fmt.Sprintf("WAL %s at %s: %v", ll.Num, off, err)
		}
		h, _ := batchrepr.ReadHeader(buf.Bytes()) // the WAL reader checked it has one
		br := batchrepr.Read(buf.Bytes())
		var n uint32
		for {
			kind, ukey, value, more, err := br.Next()
			if err != nil {
				return fmt.Sprintf("WAL %s at %s: %v", ll.Num, off, err)
			}
			if !more {
				break
			}
			if kind != pebble.InternalKeyKindLogData {
				n++ // the header's count leaves LogData out, as Pebble's replay does
			}
			switch kind {
			case pebble.InternalKeyKindLogData, pebble.InternalKeyKindRangeKeySet,
				pebble.InternalKeyKindRangeKeyUnset, pebble.InternalKeyKindRangeKeyDelete:
				// no point key: the applied position is not touched
			case pebble.InternalKeyKindIngestSST, pebble.InternalKeyKindExcise:
				return fmt.Sprintf("WAL %s at %s: a %v record (the store writes none)", ll.Num, off, kind)
			case pebble.InternalKeyKindRangeDelete:
				if bytes.Compare(ukey, keyApplied) <= 0 && bytes.Compare(keyApplied, value) < 0 {
					return fmt.Sprintf("WAL %s at %s: a range deletion covers the applied position", ll.Num, off)
				}
			default:
				if !bytes.Equal(ukey, keyApplied) {
					continue
				}
				if kind != pebble.InternalKeyKindSet {
					return fmt.Sprintf("WAL %s at %s: the applied position is written by a %v", ll.Num, off, kind)
				}
				set(value)
			}
		}
		if n != h.Count {
			return fmt.Sprintf("WAL %s at %s: a batch of %d entries says %d", ll.Num, off, n, h.Count)
		}
	}
}

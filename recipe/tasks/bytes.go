package tasks

import (
	"context"
	"fmt"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/zkx"
)

// Byte bounds of <dir>/tasks and <dir>/results (package doc, "Bounds").
const (
	// DefaultMaxWaitingBytes is the default AssignerConfig.MaxWaitingBytes:
	// 1,000 tasks of MaxDataBytes, or DefaultMaxOpen tasks of 16 KiB.
	DefaultMaxWaitingBytes = 64 << 20
	// DefaultMaxFinishedBytes is the default
	// AssignerConfig.MaxFinishedBytes.
	DefaultMaxFinishedBytes = 64 << 20

	// znodeCost is what a znode costs ZooKeeper's heap beyond its name
	// and data (measured: 60,000 znodes of 33 bytes took ~24 MB).
	znodeCost = 400
	// recordSlack bounds a record's msgpack framing and fixed fields
	// (keys, headers, integers, a 16-byte sum): TestMaxNodeCost checks it.
	recordSlack = 160
	// maxTaskCost is the most one node of <dir>/tasks can cost: Submit
	// charges it for each child change since the published total.
	maxTaskCost = int64(znodeCost + len(taskPrefix) + MaxIDLen + MaxIDLen + MaxDataBytes + recordSlack)
	// maxResultCost is the same for <dir>/results (a result also names
	// its worker).
	maxResultCost = int64(znodeCost + len(taskPrefix) + MaxIDLen + MaxIDLen + zkx.MaxNameLen + MaxResultBytes + recordSlack)
)

// nodeCost is what a child named name with dataLen bytes of data costs.
func nodeCost(name string, dataLen int32) int64 {
	return int64(znodeCost) + int64(len(name)) + int64(dataLen)
}

// dirTotal is the data of <dir>/tasks and <dir>/results once an assigner
// published it: the cost (nodeCost) of the children listed at Cversion,
// and the bound Submit enforces.
type dirTotal struct {
	V        int   `msgpack:"v"`
	Bytes    int64 `msgpack:"bytes"`
	Cversion int32 `msgpack:"cversion"`
	Max      int64 `msgpack:"max"`
}

// decodeTotal decodes a directory's data; ok is false when it holds no
// total (empty: no assigner of this release published one yet) or one
// that breaks the format (counted as none).
func decodeTotal(b []byte) (dirTotal, bool) {
	var t dirTotal
	if len(b) == 0 || zkr.Decode(b, &t) != nil || t.V != formatVersion || t.Bytes < 0 || t.Max <= 0 {
		return dirTotal{}, false
	}
	return t, true
}

// estimate is an upper bound of what the children of a directory whose
// Stat is st cost now, from the total t published at t.Cversion: every
// child change since (a create or a delete; each moves cversion by one)
// is charged maxCost. Children are never written after creation, so a
// child listed then costs now what it cost then.
func (t dirTotal) estimate(st *zk.Stat, maxCost int64) int64 {
	since := int64(st.Cversion) - int64(t.Cversion)
	if since < 0 {
		// The directory was re-created since (its cversion restarted)
		// with this data written again: charge every child in full.
		return int64(st.NumChildren) * maxCost
	}
	return t.Bytes + since*maxCost
}

// checkRoom is Submit's cap on <dir>/<sub>: its node count, and when an
// assigner published a total there, its bytes with need more.
func checkRoom(ctx context.Context, s *zkr.Session, dir, sub string, maxCost, need int64) error {
	p := dir + "/" + sub
	b, st, err := zkx.Get(ctx, s, p)
	if err != nil {
		return err
	}
	if st.NumChildren >= DefaultMaxOpen {
		return fmt.Errorf("%w: %s holds %d nodes, at most %d", ErrTooMany, p, st.NumChildren, DefaultMaxOpen)
	}
	t, ok := decodeTotal(b)
	if !ok {
		return nil
	}
	if est := t.estimate(st, maxCost); est+need > t.Max {
		return fmt.Errorf("%w: %s holds up to %d bytes (%d at its child version %d, %d changes since at %d each), "+
			"%d more would pass its bound of %d bytes", ErrFull, p, est, t.Bytes, t.Cversion,
			int64(st.Cversion)-int64(t.Cversion), maxCost, need, t.Max)
	}
	return nil
}

// listing is a directory's children with its Stat, read in one request.
type listing struct {
	names []string
	st    *zk.Stat
	ch    <-chan zk.Event // the armed child watch (nil when not asked)
}

// list lists p, arming a child watch when watch is set.
func list(ctx context.Context, s *zkr.Session, p string, watch bool) (listing, error) {
	return zkr.Retry(ctx, s, func() (listing, error) {
		if watch {
			names, st, ch, err := s.Conn().ChildrenW(p)
			return listing{names, st, ch}, err
		}
		names, st, err := s.Conn().Children(p)
		return listing{names, st, nil}, err
	})
}

// hiddenChanges reports whether children may have been deleted and
// created again between two listings of a directory (cversion moved by
// more than the names that came and went): their cached sizes are then
// stale. prev is the previous listing's names (nil: none).
func hiddenChanges(prev map[string]bool, prevCv int32, names []string, cv int32) bool {
	if prev == nil {
		return false
	}
	changed := 0
	now := make(map[string]bool, len(names))
	for _, n := range names {
		now[n] = true
		if !prev[n] {
			changed++
		}
	}
	for n := range prev {
		if !now[n] {
			changed++
		}
	}
	return int64(cv)-int64(prevCv) != int64(changed)
}

// publishTotal writes total t into <dir>/<sub>'s data (fenced) unless it
// is what this Run published last.
func (r *round) publishTotal(ctx context.Context, sub string, t dirTotal, last *dirTotal) error {
	if *last == t {
		return nil
	}
	p := r.path(sub)
	ok, err := r.write(ctx, "publish the byte total of "+p, &zk.SetDataRequest{Path: p, Data: zkr.Encode(t), Version: -1})
	if err != nil {
		return err
	}
	if ok {
		*last = t
	}
	return nil
}

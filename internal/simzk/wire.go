package simzk

import (
	"encoding/binary"
	"errors"

	"github.com/roomlog/roomlog/third_party/zk"
)

// Opcodes of the ZooKeeper client protocol (zookeeper.jute, ZooDefs.OpCode).
const (
	opCreate       = 1
	opDelete       = 2
	opExists       = 3
	opGetData      = 4
	opSetData      = 5
	opGetACL       = 6
	opSetACL       = 7
	opGetChildren  = 8
	opSync         = 9
	opPing         = 11
	opGetChildren2 = 12
	opCheck        = 13
	opMulti        = 14
	opCreate2      = 15
	opClose        = -11
	opSetAuth      = 100
	opSetWatches   = 101
	opError        = -1
)

// Error codes (KeeperException.Code).
const (
	errOK                      int32 = 0
	errRuntimeInconsistency    int32 = -2
	errUnimplemented           int32 = -6
	errBadArguments            int32 = -8
	errNoNode                  int32 = -101
	errNoAuth                  int32 = -102
	errBadVersion              int32 = -103
	errNoChildrenForEphemerals int32 = -108
	errNodeExists              int32 = -110
	errNotEmpty                int32 = -111
	errInvalidACL              int32 = -114
)

// Special xids.
const (
	xidWatchEvent = -1
	xidPing       = -2
)

// maxPacket is the largest packet accepted (jute.maxbuffer's default,
// 0xfffff bytes); a longer one closes the connection, as ZooKeeper does.
const maxPacket = 0xfffff

var errShort = errors.New("simzk: short or malformed packet")

// enc appends jute-encoded values.
type enc struct{ b []byte }

func (e *enc) i32(v int32) { e.b = binary.BigEndian.AppendUint32(e.b, uint32(v)) }
func (e *enc) i64(v int64) { e.b = binary.BigEndian.AppendUint64(e.b, uint64(v)) }
func (e *enc) boolean(v bool) {
	if v {
		e.b = append(e.b, 1)
	} else {
		e.b = append(e.b, 0)
	}
}

func (e *enc) buf(v []byte) {
	if v == nil {
		e.i32(-1)
		return
	}
	e.i32(int32(len(v)))
	e.b = append(e.b, v...)
}

func (e *enc) str(v string) {
	e.i32(int32(len(v)))
	e.b = append(e.b, v...)
}

func (e *enc) strs(v []string) {
	e.i32(int32(len(v)))
	for _, s := range v {
		e.str(s)
	}
}

func (e *enc) acls(v []zk.ACL) {
	e.i32(int32(len(v)))
	for _, a := range v {
		e.i32(a.Perms)
		e.str(a.Scheme)
		e.str(a.ID)
	}
}

func (e *enc) stat(s zk.Stat) {
	e.i64(s.Czxid)
	e.i64(s.Mzxid)
	e.i64(s.Ctime)
	e.i64(s.Mtime)
	e.i32(s.Version)
	e.i32(s.Cversion)
	e.i32(s.Aversion)
	e.i64(s.EphemeralOwner)
	e.i32(s.DataLength)
	e.i32(s.NumChildren)
	e.i64(s.Pzxid)
}

// frame returns the packet with its int32 length prefix.
func frame(body []byte) []byte {
	out := make([]byte, 4, 4+len(body))
	binary.BigEndian.PutUint32(out, uint32(len(body)))
	return append(out, body...)
}

// dec reads jute-encoded values; after the first error every read returns
// a zero value and err stays set. It never panics and allocates no more
// than its input holds.
type dec struct {
	b   []byte
	err error
}

func (d *dec) take(n int) []byte {
	if d.err != nil || n < 0 || n > len(d.b) {
		d.err = errShort
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *dec) i32() int32 {
	if b := d.take(4); b != nil {
		return int32(binary.BigEndian.Uint32(b))
	}
	return 0
}

func (d *dec) i64() int64 {
	if b := d.take(8); b != nil {
		return int64(binary.BigEndian.Uint64(b))
	}
	return 0
}

func (d *dec) boolean() bool {
	if b := d.take(1); b != nil {
		return b[0] != 0
	}
	return false
}

func (d *dec) buf() []byte {
	n := d.i32()
	if d.err != nil || n == -1 {
		return nil
	}
	b := d.take(int(n))
	if b == nil {
		return nil
	}
	return append([]byte{}, b...)
}

func (d *dec) str() string { return string(d.buf()) }

// count reads a vector length; each element takes at least min bytes.
func (d *dec) count(min int) int {
	n := int(d.i32())
	if d.err != nil {
		return 0
	}
	if n == -1 {
		return 0
	}
	if n < 0 || n*min > len(d.b) {
		d.err = errShort
		return 0
	}
	return n
}

func (d *dec) strs() []string {
	n := d.count(4)
	out := make([]string, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, d.str())
	}
	return out
}

func (d *dec) acls() []zk.ACL {
	n := d.count(12)
	out := make([]zk.ACL, 0, n)
	for i := 0; i < n && d.err == nil; i++ {
		out = append(out, zk.ACL{Perms: d.i32(), Scheme: d.str(), ID: d.str()})
	}
	return out
}

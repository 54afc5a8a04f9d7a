package simzk

import (
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// raw is a client that speaks the wire protocol itself, to see the
// order of packets on a connection.
type raw struct {
	t  *testing.T
	nc net.Conn
}

func rawDial(t *testing.T, addr string) *raw {
	nc, err := net.DialTimeout("tcp", addr, time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { nc.Close() })
	require.NoError(t, nc.SetDeadline(time.Now().Add(10*time.Second)))
	r := &raw{t: t, nc: nc}
	var e enc
	e.i32(0)
	e.i64(0)
	e.i32(4000)
	e.i64(0)
	e.buf(make([]byte, 16))
	r.write(e.b)
	d := dec{b: r.read()}
	_ = d.i32()
	require.Positive(t, d.i32(), "timeout")
	require.NotZero(t, d.i64(), "session id")
	return r
}

func (r *raw) write(body []byte) {
	_, err := r.nc.Write(frame(body))
	require.NoError(r.t, err)
}

func (r *raw) read() []byte {
	var hdr [4]byte
	_, err := io.ReadFull(r.nc, hdr[:])
	require.NoError(r.t, err)
	b := make([]byte, binary.BigEndian.Uint32(hdr[:]))
	_, err = io.ReadFull(r.nc, b)
	require.NoError(r.t, err)
	return b
}

// call sends a request with a path (and watch flag or data) and returns
// nothing; packets are read with next.
func (r *raw) send(xid, code int32, path string, rest func(*enc)) {
	var e enc
	e.i32(xid)
	e.i32(code)
	e.str(path)
	if rest != nil {
		rest(&e)
	}
	r.write(e.b)
}

// next returns the xid of the next packet and, for an event, its type.
func (r *raw) next() (xid, evType int32) {
	d := dec{b: r.read()}
	xid = d.i32()
	_ = d.i64()
	_ = d.i32()
	if xid == xidWatchEvent {
		evType = d.i32()
	}
	return xid, evType
}

func watchFlag(e *enc) { e.boolean(true) }

// packetOrder returns what two raw clients see: B watches /x, A sets it,
// then B asks something: the event must come before that reply. Then B
// watches /y and sets it itself: the event before its own reply.
func packetOrder(t *testing.T, b bugs) []int32 {
	s := startServer(t, Options{bugs: b})
	a, w := rawDial(t, s.Addr()), rawDial(t, s.Addr())
	create := func(e *enc) { e.buf([]byte("v")); e.acls(openACL); e.i32(0) }
	a.send(1, opCreate, "/x", create)
	a.next()
	a.send(2, opCreate, "/y", create)
	a.next()
	var seen []int32
	w.send(1, opGetData, "/x", watchFlag)
	xid, _ := w.next()
	seen = append(seen, xid)
	a.send(3, opSetData, "/x", func(e *enc) { e.buf([]byte("w")); e.i32(-1) })
	a.next()
	w.send(2, opExists, "/", func(e *enc) { e.boolean(false) })
	for i := 0; i < 2; i++ {
		xid, _ := w.next()
		seen = append(seen, xid)
	}
	w.send(3, opExists, "/y", watchFlag)
	xid, _ = w.next()
	seen = append(seen, xid)
	w.send(4, opSetData, "/y", func(e *enc) { e.buf([]byte("w")); e.i32(-1) })
	for i := 0; i < 2; i++ {
		xid, _ := w.next()
		seen = append(seen, xid)
	}
	return seen
}

// TestEventBeforeLaterReply: ZooKeeper's ordering guarantee, on the
// wire: a watch event is sent before the reply to any request the
// watching connection sent after the change, and before the reply to
// the change itself.
func TestEventBeforeLaterReply(t *testing.T) {
	require.Equal(t, []int32{1, -1, 2, 3, -1, 4}, packetOrder(t, bugs{}))
	require.NotEqual(t, []int32{1, -1, 2, 3, -1, 4}, packetOrder(t, bugs{eventsLate: true}), "planted bug eventsLate")
}

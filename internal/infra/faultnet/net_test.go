package faultnet

import (
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestNet(t *testing.T) {
	zk1, zk2 := newEcho(t), newEcho(t)
	n := NewNet(42)
	links := map[string]*server{"m1->zk1": zk1, "m1->zk2": zk2, "m2->zk1": zk1, "m2->zk2": zk2}
	for name, s := range links {
		_, err := n.Add(name, Config{Targets: []string{s.addr()}})
		require.NoError(t, err)
	}
	_, err := n.Add("m1->zk1", Config{Targets: []string{zk1.addr()}})
	require.ErrorIs(t, err, ErrDuplicateLink)
	_, err = n.Add("m3->zk1", Config{})
	require.ErrorIs(t, err, ErrInvalidConfig)

	require.Equal(t, []string{"m1->zk1", "m1->zk2"}, n.Names(From("m1")))
	require.Equal(t, []string{"m1->zk2", "m2->zk2"}, n.Names(To("zk2")))
	require.Len(t, n.Names(nil), 4)
	require.Nil(t, n.Link("m3->zk1"))

	dialLink := func(name string) *proxyConn {
		return &proxyConn{t: t, c: dial(t, n.Link(name).Addr())}
	}
	live := map[string]*proxyConn{}
	for name := range links {
		live[name] = dialLink(name)
		live[name].echo("up")
	}

	err = n.Cut("m1->zk1", "nope")
	require.ErrorIs(t, err, ErrUnknownLink)
	require.Contains(t, err.Error(), `"nope"`)
	live["m1->zk1"].echo("nothing was cut")

	// Partition m1 from every server: silence on its links only.
	require.NoError(t, n.Partition(n.Names(From("m1"))...))
	for name, c := range live {
		if name == "m1->zk1" || name == "m1->zk2" {
			c.silent("held")
		} else {
			c.echo("m2 unaffected")
		}
	}
	n.HealAll()
	for _, name := range n.Names(From("m1")) {
		live[name].read("held")
		live[name].echo("healed")
	}

	// Latency on every link; a healed partition keeps it.
	n.DelayAll(15*time.Millisecond, 0)
	require.NoError(t, n.Cut(n.Names(To("zk2"))...))
	require.NoError(t, n.Heal(n.Names(To("zk2"))...))
	for _, name := range n.Names(nil) {
		c := dialLink(name)
		start := time.Now()
		c.echo("slow")
		require.GreaterOrEqual(t, time.Since(start), 30*time.Millisecond, name)
	}
	n.DelayAll(0, 0)

	st := n.Stats()
	require.Len(t, st, 4)
	require.Equal(t, int64(1), st["m1->zk2"].Resets)
	require.Equal(t, int64(0), st["m1->zk1"].Resets)

	require.NoError(t, n.Close())
	require.NoError(t, n.Close())
	requireNoLeak(t)
	_, err = n.Add("m4->zk1", Config{Targets: []string{zk1.addr()}})
	require.ErrorIs(t, err, ErrClosed)
}

// The links of two Nets with the same seed draw the same latencies,
// whatever order they were added in.
func TestNetSeed(t *testing.T) {
	draws := func(order ...string) map[string][]time.Duration {
		n := NewNet(9)
		defer n.Close()
		for _, name := range order {
			_, err := n.Add(name, Config{Targets: []string{"127.0.0.1:1"}})
			require.NoError(t, err)
		}
		n.DelayAll(time.Millisecond, time.Millisecond)
		out := map[string][]time.Duration{}
		for _, name := range order {
			for i := 0; i < 10; i++ {
				out[name] = append(out[name], n.Link(name).latency())
			}
		}
		return out
	}
	a, b := draws("x->y", "y->x"), draws("y->x", "x->y")
	require.Equal(t, a, b)
	require.NotEqual(t, a["x->y"], a["y->x"])
}

// proxyConn is a client connection through one link of a Net.
type proxyConn struct {
	t *testing.T
	c net.Conn
}

// echo requires msg's echo at once.
func (c *proxyConn) echo(msg string) {
	c.t.Helper()
	roundTrip(c.t, c.c, msg, prompt)
}

// silent writes msg and requires no answer.
func (c *proxyConn) silent(msg string) {
	c.t.Helper()
	_, err := c.c.Write([]byte(msg))
	require.NoError(c.t, err)
	requireSilent(c.t, c.c, quiet)
}

// read requires msg, written earlier, to arrive now.
func (c *proxyConn) read(msg string) {
	c.t.Helper()
	got, err := readN(c.c, len(msg), prompt)
	require.NoError(c.t, err)
	require.Equal(c.t, msg, string(got))
}

// TestRecord: a proxy records nothing before Record and every byte it
// reads after, both directions.
func TestRecord(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() { // an echo server
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	p, err := New(Config{Targets: []string{ln.Addr().String()}})
	require.NoError(t, err)
	defer p.Close()
	c, err := net.Dial("tcp", p.Addr())
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	echo := func(s string) {
		_, err := io.WriteString(c, s)
		require.NoError(t, err)
		buf := make([]byte, len(s))
		_, err = io.ReadFull(c, buf)
		require.NoError(t, err)
	}
	echo("before-record")
	require.False(t, p.Contains([]byte("before-record")))
	p.Record()
	echo("after-record")
	require.True(t, p.Contains([]byte("after-record")))
	require.False(t, p.Contains([]byte("before-record")))
	require.Equal(t, 2*len("after-record"), p.Recorded())
}

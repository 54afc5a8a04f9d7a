package zkensemble

import (
	"bytes"
	"net"
	"sync"
)

// Tap is a TCP proxy that records every byte it forwards, both ways: a
// test puts it on a client link and asks what an eavesdropper on that
// link would have seen (Contains), or cuts every connection through it
// (Cut) to make its clients reconnect. Its methods are safe for
// concurrent use; Close stops it and waits for its goroutines.
type Tap struct {
	target string
	ln     net.Listener
	wg     sync.WaitGroup

	mu     sync.Mutex // guards the fields below
	conns  map[net.Conn]struct{}
	up     bytes.Buffer // everything forwarded from clients to the target
	down   bytes.Buffer // everything forwarded from the target to clients
	accept int          // connections accepted
	closed bool
}

// NewTap listens on a free loopback port and forwards each connection to
// target.
func NewTap(target string) (*Tap, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	t := &Tap{target: target, ln: ln, conns: map[net.Conn]struct{}{}}
	t.wg.Add(1)
	go t.acceptLoop() // owner: t; Close waits
	return t, nil
}

// Addr is the address clients connect to.
func (t *Tap) Addr() string { return t.ln.Addr().String() }

// Contains reports whether b was seen in either direction (each
// direction's bytes of all connections concatenated in arrival order).
func (t *Tap) Contains(b []byte) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return bytes.Contains(t.up.Bytes(), b) || bytes.Contains(t.down.Bytes(), b)
}

// Seen returns the number of bytes recorded, both directions.
func (t *Tap) Seen() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.up.Len() + t.down.Len()
}

// Accepted returns the number of connections accepted so far.
func (t *Tap) Accepted() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.accept
}

// Cut closes every open connection (new ones are still accepted).
func (t *Tap) Cut() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for c := range t.conns {
		_ = c.Close()
	}
}

// Close stops accepting, closes every connection and waits for every
// goroutine.
func (t *Tap) Close() error {
	t.mu.Lock()
	t.closed = true
	t.mu.Unlock()
	err := t.ln.Close()
	t.Cut()
	t.wg.Wait()
	return err
}

func (t *Tap) track(c net.Conn) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return false
	}
	t.conns[c] = struct{}{}
	return true
}

func (t *Tap) untrack(c net.Conn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.conns, c)
}

func (t *Tap) acceptLoop() {
	defer t.wg.Done()
	for {
		c, err := t.ln.Accept()
		if err != nil {
			return
		}
		t.mu.Lock()
		t.accept++
		t.mu.Unlock()
		t.wg.Add(1)
		go t.serve(c) // owner: t
	}
}

func (t *Tap) serve(client net.Conn) {
	defer t.wg.Done()
	server, err := net.Dial("tcp", t.target)
	if err != nil {
		_ = client.Close()
		return
	}
	if !t.track(client) || !t.track(server) {
		_ = client.Close()
		_ = server.Close()
		return
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); t.pipe(server, client, &t.up) }()
	go func() { defer wg.Done(); t.pipe(client, server, &t.down) }()
	wg.Wait()
	t.untrack(client)
	t.untrack(server)
}

// pipe copies from src to dst, recording, and closes both at the end.
func (t *Tap) pipe(dst, src net.Conn, rec *bytes.Buffer) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			t.mu.Lock()
			rec.Write(buf[:n]) // guarded by t.mu
			t.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil { // io.EOF or a closed connection
			break
		}
	}
	_ = dst.Close()
	_ = src.Close()
}

package tlsfiles

import (
	"net"
	"net/http"
	"sync"
	"time"
)

// LimitConnAge bounds how long srv serves one connection, so that what a
// handshake verified once (a client certificate, the CA file that signed
// it) is verified again by a new handshake at least every maxAge, however
// busy the client keeps its connection. IdleTimeout alone does not: a
// client sending a request every few seconds is never idle.
//
// Once a connection is maxAge old it serves no new request: it is closed
// at once when it is idle (or not yet past its first request) or has been
// hijacked (a stream the handler took over), and otherwise as soon as
// its request in progress ends. A connection still open at 2×maxAge (one
// request running that long) is closed whatever it is doing. So a client
// whose certificate expired or whose CA was removed from the CA file
// loses access within 2×maxAge. HTTP clients reconnect (and handshake)
// by themselves; a stream cut this way must be one its client reopens.
//
// It installs srv.ConnState (calling the one srv had, after its own
// bookkeeping); call it before srv serves. maxAge <= 0 leaves srv as it
// is.
func LimitConnAge(srv *http.Server, maxAge time.Duration) {
	if maxAge <= 0 {
		return
	}
	l := &ageLimit{maxAge: maxAge, conns: map[net.Conn]*agedConn{}}
	prev := srv.ConnState
	srv.ConnState = func(c net.Conn, s http.ConnState) {
		l.state(c, s)
		if prev != nil {
			prev(c, s)
		}
	}
}

// ageLimit is LimitConnAge's state for one server.
type ageLimit struct {
	maxAge time.Duration

	mu    sync.Mutex // guards conns and every agedConn in it
	conns map[net.Conn]*agedConn
}

// agedConn is one connection's state.
type agedConn struct {
	busy     bool // a request in progress (StateActive)
	hijacked bool // the handler took it over: the server no longer tracks it
	expired  bool // maxAge old: serves no new request
	soft     *time.Timer
	hard     *time.Timer
}

func (l *ageLimit) state(c net.Conn, s http.ConnState) {
	closeNow := false
	l.mu.Lock()
	a := l.conns[c]
	switch {
	case s == http.StateNew && a == nil:
		a = &agedConn{}
		a.soft = time.AfterFunc(l.maxAge, func() { l.expire(c) })
		a.hard = time.AfterFunc(2*l.maxAge, func() { l.forget(c); _ = c.Close() })
		l.conns[c] = a
	case a == nil:
	case s == http.StateActive:
		a.busy = true
	case s == http.StateIdle:
		a.busy = false
		closeNow = a.expired
	case s == http.StateHijacked:
		a.hijacked = true
		closeNow = a.expired
	case s == http.StateClosed:
		a.soft.Stop()
		a.hard.Stop()
		delete(l.conns, c)
	}
	l.mu.Unlock()
	if closeNow {
		l.forgetIfHijacked(c)
		_ = c.Close()
	}
}

// expire marks c as maxAge old and closes it when nothing is in progress.
func (l *ageLimit) expire(c net.Conn) {
	l.mu.Lock()
	a := l.conns[c]
	closeNow := false
	if a != nil {
		a.expired = true
		closeNow = !a.busy || a.hijacked
	}
	l.mu.Unlock()
	if closeNow {
		l.forgetIfHijacked(c)
		_ = c.Close()
	}
}

// forgetIfHijacked drops a hijacked connection (the server reports no
// StateClosed for it) and stops its timers.
func (l *ageLimit) forgetIfHijacked(c net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := l.conns[c]; a != nil && a.hijacked {
		a.soft.Stop()
		a.hard.Stop()
		delete(l.conns, c)
	}
}

// forget drops c and stops its timers.
func (l *ageLimit) forget(c net.Conn) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if a := l.conns[c]; a != nil {
		a.soft.Stop()
		a.hard.Stop()
		delete(l.conns, c)
	}
}

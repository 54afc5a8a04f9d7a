package zkx

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
)

// DefaultSessionTimeout is the ZooKeeper session timeout Dial asks for when
// DialConfig.SessionTimeout is zero.
const DefaultSessionTimeout = 4 * time.Second

// Digest holds ZooKeeper digest credentials. When set, the client
// authenticates with them and creates every znode with a digest ACL granting
// all permissions to that user only.
type Digest struct {
	User     string
	Password string
}

// DialConfig configures Dial.
type DialConfig struct {
	// Servers are "host:port" ZooKeeper client addresses (required).
	Servers []string
	// SessionTimeout is the requested session timeout (default
	// DefaultSessionTimeout, 4s).
	SessionTimeout time.Duration
	// Auth, when set, adds digest auth and makes every create use a digest ACL.
	Auth *Digest
	// TLS, when set, connects over TLS (the servers' secureClientPort):
	// each connection asks TLS for its config, presents the client
	// certificate it gives (ZooKeeper's x509 provider then authenticates
	// the session by it) and verifies the server against its CA and name.
	// *tlsfiles.Source is a TLSConfig.
	TLS TLSConfig
	// TLSServerName is the name the servers' certificates are verified
	// against (default: the host of each address as Servers writes it,
	// "zk1" for "zk1:2281", although the client dials the addresses that
	// name resolves to; a server written as an IP address is verified as
	// that IP).
	TLSServerName string
	// ACLIdentities are certificate identities (RFC 2253 subjects as
	// tlsfiles.Source.Identity gives them) granted all permissions on
	// every znode this client creates, with scheme x509: instead of, or
	// beside, Auth's digest entry. Needs TLS or Auth (a client with
	// neither could not read what it creates). An entry may name its
	// scheme: "x509:SUBJECT", or "digest:USER:HASH" (DigestID) for a
	// digest identity other than Auth's, e.g. the next password of a
	// rotation (IdentityACL).
	//
	// With neither Auth nor ACLIdentities, a client whose TLS presents a
	// client certificate (TLS is Identified, as *tlsfiles.Source is)
	// creates with x509:<that certificate's identity at Dial> only, so
	// nothing it creates is world-open (a certificate whose identity
	// cannot be named is refused, ErrBadConfig); members of one room with
	// different certificates must list them all here. Only a client with
	// neither Auth nor a client certificate (no TLS, or TLS without one)
	// creates with world:anyone.
	ACLIdentities []string
	// Logger receives client logs (nil: discard). go-zookeeper's own log lines
	// are routed to it at debug level.
	Logger *slog.Logger
	// AnyServer connects to the servers in go-zookeeper's shuffled order.
	// By default the client prefers the ensemble's leader: before each
	// connection (Dial, and every reconnect) it asks every server its role
	// with the srvr four-letter word (at once, within LeaderProbeTimeout)
	// and tries the leader first, then the servers that answered, then the
	// silent ones (package doc, "Connecting: the leader first"). A write
	// sent to a follower is forwarded to the leader and its reply comes back
	// the same way; sent to the leader it skips that hop (bench/README.md
	// has the measurements). The probe only orders the servers. Server
	// names are resolved once, at Dial, as go-zookeeper does. Every client
	// that prefers the leader loads it (and counts against its per-address
	// maxClientCnxns, 60 by default); set AnyServer for clients that write
	// little.
	AnyServer bool
}

// Validate reports every invalid field at once.
func (c DialConfig) Validate() error {
	var errs []error
	if len(c.Servers) == 0 {
		errs = append(errs, fmt.Errorf("%w: Servers is empty", ErrBadConfig))
	}
	for _, s := range c.Servers {
		if strings.TrimSpace(s) == "" {
			errs = append(errs, fmt.Errorf("%w: Servers holds an empty address", ErrBadConfig))
		}
	}
	if c.SessionTimeout < 0 {
		errs = append(errs, fmt.Errorf("%w: SessionTimeout %v < 0", ErrBadConfig, c.SessionTimeout))
	}
	if c.Auth != nil && c.Auth.User == "" {
		errs = append(errs, fmt.Errorf("%w: Auth.User is empty", ErrBadConfig))
	}
	for i, id := range c.ACLIdentities {
		if strings.TrimSpace(id) == "" {
			errs = append(errs, fmt.Errorf("%w: ACLIdentities[%d] is empty", ErrBadConfig, i))
		} else if _, err := IdentityACL(zk.PermAll, id); err != nil {
			errs = append(errs, fmt.Errorf("ACLIdentities[%d]: %w", i, err))
		}
	}
	if len(c.ACLIdentities) > 0 && c.TLS == nil && c.Auth == nil {
		errs = append(errs, fmt.Errorf("%w: ACLIdentities without TLS or Auth: this client could not read the znodes it creates", ErrBadConfig))
	}
	if c.TLS != nil {
		if v := reflect.ValueOf(c.TLS); v.Kind() == reflect.Pointer && v.IsNil() {
			errs = append(errs, fmt.Errorf("%w: TLS holds a nil %T (leave TLS unset for plaintext)", ErrBadConfig, c.TLS))
		} else if _, err := defaultIdentity(c); err != nil {
			errs = append(errs, fmt.Errorf("%w: TLS presents a client certificate whose x509 identity cannot be named for the default ACL (%w): give ACLIdentities or Auth", ErrBadConfig, err))
		}
	}
	if c.TLSServerName != "" && c.TLS == nil {
		errs = append(errs, fmt.Errorf("%w: TLSServerName %q without TLS", ErrBadConfig, c.TLSServerName))
	}
	return errors.Join(errs...)
}

// subBuffer is the capacity of a Subscribe channel.
const subBuffer = 64

// Client owns one *zk.Conn and its session. Session events reach it
// through zk.WithEventCallback (never through the 6-event channel of
// zk.Connect, which drops events) and are fanned out to subscribers
// without blocking. go-zookeeper re-sends the digest auth after every
// reconnect. A Client is a Requester: its Run waits for the session
// between attempts and gives up once the client is closed.
type Client struct {
	conn    *zk.Conn
	acl     []zk.ACL
	auth    *Digest   // DialConfig.Auth (Self)
	tls     TLSConfig // DialConfig.TLS (Self)
	log     *slog.Logger
	hosts   *leaderFirst  // nil with DialConfig.AnyServer
	session time.Duration // the session timeout asked for

	mu sync.Mutex // guards the fields below; never held while blocking
	// subs are the Subscribe channels; a full channel drops its oldest event.
	subs map[int]chan zk.Event
	// nextSub numbers subscriptions.
	nextSub int
	// stateCh is closed and replaced on every session state change.
	stateCh chan struct{}
	// lastState is the last session state seen; it also logs expiry.
	lastState zk.State
	closed    bool
	closedCh  chan struct{}
}

// zkLogger routes go-zookeeper's Printf logging to slog at debug level.
type zkLogger struct{ l *slog.Logger }

func (z zkLogger) Printf(format string, args ...interface{}) {
	z.l.Debug("zk: " + fmt.Sprintf(format, args...))
}

func discardLogger(l *slog.Logger) *slog.Logger {
	if l != nil {
		return l
	}
	return slog.New(slog.DiscardHandler)
}

// Dial connects to ZooKeeper and waits until a session is established (or
// ctx ends).
func Dial(ctx context.Context, cfg DialConfig) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.SessionTimeout == 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	c := &Client{
		log:      discardLogger(cfg.Logger),
		subs:     make(map[int]chan zk.Event),
		stateCh:  make(chan struct{}),
		closedCh: make(chan struct{}),
		acl:      buildACL(cfg),
		auth:     cfg.Auth,
		tls:      cfg.TLS,
		session:  cfg.SessionTimeout,
	}
	names := &hostNames{}
	dialer := &connector{tls: cfg.TLS, serverName: cfg.TLSServerName, names: names, bound: handshakeBound(cfg.SessionTimeout), log: c.log}
	hosts := zk.WithHostProvider(newNamedDNSHosts(names)) // go-zookeeper's own
	if !cfg.AnyServer {
		c.hosts = newLeaderFirst(c.log, dialer.probeConn, names)
		hosts = zk.WithHostProvider(c.hosts)
	}
	conn, _, err := zk.Connect(cfg.Servers, cfg.SessionTimeout,
		zk.WithDialer(dialer.dial),
		zk.WithEventCallback(c.onEvent),
		zk.WithLogger(zkLogger{c.log}),
		zk.WithLogInfo(false),
		hosts)
	if err != nil {
		return nil, Translate("zkx: dial", err)
	}
	c.conn = conn
	stopProgress := c.logWaiting(ctx, cfg.Servers)
	err = c.WaitSession(ctx)
	stopProgress()
	if err == nil {
		c.logNegotiated()
	}
	if err != nil {
		c.Close()
		if last := dialer.last(); last != nil {
			return nil, fmt.Errorf("zkx: dial %v: %w (last connection attempt: %w)", cfg.Servers, err, last)
		}
		return nil, fmt.Errorf("zkx: dial %v: %w", cfg.Servers, err)
	}
	if cfg.Auth != nil {
		if err := conn.AddAuth("digest", []byte(cfg.Auth.User+":"+cfg.Auth.Password)); err != nil {
			c.Close()
			return nil, Translate("zkx: add digest auth", err)
		}
	}
	return c, nil
}

// NegotiatedSessionTimeout returns the session timeout ZooKeeper granted
// the current session (it clamps the one asked for to the servers'
// minSessionTimeout..maxSessionTimeout, 2 to 20 ticks by default).
func (c *Client) NegotiatedSessionTimeout() time.Duration {
	return c.conn.NegotiatedSessionTimeout()
}

// logNegotiated logs the session timeout granted at Dial: Info, or Warn
// when ZooKeeper changed the one asked for (every bound derived from it
// moves with it).
func (c *Client) logNegotiated() {
	got := c.NegotiatedSessionTimeout()
	if got > 0 && got != c.session {
		c.log.Warn("zookeeper changed the session timeout (its minSessionTimeout..maxSessionTimeout)", "asked", c.session, "granted", got)
		return
	}
	c.log.Info("zookeeper session", "timeout", got, "id", fmt.Sprintf("0x%x", c.SessionID()))
}

// waitLogEvery is how often a wait for a session says what it waits for,
// from waitLogAfter on.
const (
	waitLogAfter = 2 * time.Second
	waitLogEvery = 3 * time.Second
)

// logWaiting logs, from waitLogAfter on and every waitLogEvery until the
// returned func is called, that Dial still waits for a session. It
// names the last connection attempt's failure when there is one.
func (c *Client) logWaiting(ctx context.Context, servers []string) func() {
	return Periodic(ctx, waitLogAfter, waitLogEvery, func(waited time.Duration) {
		c.log.Info("waiting for a zookeeper session", "servers", servers, "waited", waited.Round(time.Second), "state", c.conn.State().String())
	})
}

// onEvent is the go-zookeeper event callback. It must never block: it only
// takes c.mu (never held while blocking) and does non-blocking sends.
func (c *Client) onEvent(ev zk.Event) {
	if ev.Type != zk.EventSession && ev.Type != zk.EventNotWatching {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	if ev.Type == zk.EventSession {
		if ev.State == zk.StateExpired {
			c.log.Warn("zookeeper session expired; go-zookeeper opens a new session on the same connection")
		} else if ev.State == zk.StateHasSession && c.lastState != zk.StateHasSession {
			c.log.Debug("zookeeper session established", "server", ev.Server)
		}
		c.lastState = ev.State
		close(c.stateCh)
		c.stateCh = make(chan struct{})
	}
	for _, ch := range c.subs {
		select {
		case ch <- ev:
		default:
			// Full: drop the oldest event to make room for the newest.
			select {
			case <-ch:
			default:
			}
			select {
			case ch <- ev:
			default:
			}
		}
	}
}

// Conn returns the underlying connection (for packages that share the
// session: logroom, replica, the recipes).
func (c *Client) Conn() *zk.Conn { return c.conn }

// ACL returns the ACL every create must use.
func (c *Client) ACL() []zk.ACL { return c.acl }

// SessionTimeout returns the session timeout the client asked for
// (DialConfig.SessionTimeout, or its default). The servers may grant
// another within their bounds (2 to 20 ticks by default).
func (c *Client) SessionTimeout() time.Duration { return c.session }

// State returns the session state.
func (c *Client) State() zk.State { return c.conn.State() }

// SessionID returns the current session id (it changes after expiry).
func (c *Client) SessionID() int64 { return c.conn.SessionID() }

// Subscribe returns a buffered channel of session events (EventSession and
// EventNotWatching). It never blocks the ZooKeeper event path: when the
// channel is full the oldest event is dropped. The returned func
// unsubscribes and closes the channel.
func (c *Client) Subscribe() (<-chan zk.Event, func()) {
	ch := make(chan zk.Event, subBuffer)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		close(ch)
		return ch, func() {}
	}
	id := c.nextSub
	c.nextSub++
	c.subs[id] = ch
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			c.mu.Lock()
			defer c.mu.Unlock()
			if _, ok := c.subs[id]; ok {
				delete(c.subs, id)
				close(ch)
			}
		})
	}
}

// stateChanged returns a channel closed at the next session state change.
func (c *Client) stateChanged() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.stateCh
}

// WaitSession waits until the connection has a session, ctx ends (its
// error) or the client is closed (ErrClosed).
func (c *Client) WaitSession(ctx context.Context) error {
	for {
		ch := c.stateChanged()
		if c.conn.State() == zk.StateHasSession {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		case <-c.closedCh:
			return ErrClosed
		}
	}
}

// isClosed reports whether Close was called.
func (c *Client) isClosed() bool {
	select {
	case <-c.closedCh:
		return true
	default:
		return false
	}
}

// Close closes the connection and every subscription.
func (c *Client) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	close(c.closedCh)
	for id, ch := range c.subs {
		delete(c.subs, id)
		close(ch)
	}
	c.mu.Unlock()
	if c.conn != nil {
		c.conn.Close()
	}
}

// handshakeBound is the client's read timeout for the session asked for
// (2/3 of it, at least 1s); boundedConn caps the handshake at twice it.
func handshakeBound(session time.Duration) time.Duration { return max(session*2/3, time.Second) }

// Connections are bounded (connector.dial wraps each in a boundedConn).
// go-zookeeper waits up to ten read timeouts (13 s for a 2 s session) for
// a server's answer to its session handshake; a server that accepts the
// connection and then says nothing (a partition at a proxy, a stopped
// process) held the client that long per server, and every request
// queued meanwhile — a replica's run loop included — with it. Capped, a
// silent server costs two read timeouts and the client moves on to the
// next.

// boundedConn caps a deadline set more than 4×bound from now (go-zookeeper's
// session handshake: ten read timeouts) at 2×bound. Ordinary read and write
// deadlines (one read timeout of the session the server granted, which may
// exceed the one asked for) are left alone.
//
// Close closes the TCP connection beneath a TLS one at once, without
// close_notify: tls.Conn.Close sends it with a 5 s write deadline of its
// own, and go-zookeeper closes a connection after a write error (a server
// that stopped reading) and waits for that before it reconnects, which
// added 5 s to a failover. ZooKeeper needs no close_notify (a closed
// connection ends the exchange whatever the last record was).
type boundedConn struct {
	net.Conn
	bound time.Duration
}

func (c *boundedConn) Close() error {
	if tc, ok := c.Conn.(*tls.Conn); ok {
		return tc.NetConn().Close()
	}
	return c.Conn.Close()
}

func (c *boundedConn) cap(t time.Time) time.Time {
	now := time.Now()
	if !t.IsZero() && t.After(now.Add(4*c.bound)) {
		return now.Add(2 * c.bound)
	}
	return t
}

func (c *boundedConn) SetDeadline(t time.Time) error      { return c.Conn.SetDeadline(c.cap(t)) }
func (c *boundedConn) SetReadDeadline(t time.Time) error  { return c.Conn.SetReadDeadline(c.cap(t)) }
func (c *boundedConn) SetWriteDeadline(t time.Time) error { return c.Conn.SetWriteDeadline(c.cap(t)) }

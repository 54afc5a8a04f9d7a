package zkx

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"
)

// TLSConfig gives the TLS client configuration for one server name: the
// certificate to present and how to verify the server. It is asked at
// every connection, so an implementation that re-reads its files (as
// *tlsfiles.Source does) rotates certificates without a new Client. zkx
// imports nothing of roomlog; *tlsfiles.Source satisfies it.
type TLSConfig interface {
	ClientConfig(serverName string) *tls.Config
}

// ErrTLS: a TLS handshake with a ZooKeeper server failed (the server
// refused this client's certificate, or this client refused the
// server's). It wraps crypto/tls's error and, when this side refused,
// the verifier's (a *tlsfiles.VerifyError names the CA file).
var ErrTLS = errors.New("zkx: TLS handshake with ZooKeeper failed")

// SchemeX509 is the ACL scheme of ZooKeeper's X509AuthenticationProvider.
const SchemeX509 = "x509"

// X509ACL returns ACL entries of scheme x509 granting perms to each
// identity (a certificate subject as tlsfiles.SubjectName writes it).
func X509ACL(perms int32, identities ...string) []zk.ACL {
	out := make([]zk.ACL, 0, len(identities))
	for _, id := range identities {
		out = append(out, zk.ACL{Perms: perms, Scheme: SchemeX509, ID: id})
	}
	return out
}

// buildACL is the ACL every create of a client with cfg uses: a digest
// entry for Auth, an x509 entry per ACLIdentities, or, with neither,
// world:anyone.
func buildACL(cfg DialConfig) []zk.ACL {
	var acl []zk.ACL
	if cfg.Auth != nil {
		acl = append(acl, zk.DigestACL(zk.PermAll, cfg.Auth.User, cfg.Auth.Password)...)
	}
	acl = append(acl, X509ACL(zk.PermAll, cfg.ACLIdentities...)...)
	if len(acl) == 0 {
		return zk.WorldACL(zk.PermAll)
	}
	return acl
}

// connector dials ZooKeeper servers: TCP within go-zookeeper's connect
// timeout, then, with TLS, a handshake bounded by the same deadline
// (at least handshakeFloor). It remembers the last failure so that a Dial
// that never gets a session can say why.
type connector struct {
	tls        TLSConfig // nil: plaintext
	serverName string    // "" : the host of each address
	bound      time.Duration
	log        *slog.Logger

	mu      sync.Mutex // guards lastErr and logged
	lastErr error
	logged  string // the last TLS failure logged (each distinct one is logged once in a row)
}

// handshakeFloor is the least time a TLS handshake is given.
const handshakeFloor = time.Second

func (c *connector) name(address string) string {
	if c.serverName != "" {
		return c.serverName
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return address
	}
	return host
}

// secure runs a TLS client handshake on raw before deadline.
func (c *connector) secure(raw net.Conn, address string, deadline time.Time) (net.Conn, error) {
	name := c.name(address)
	tc := tls.Client(raw, c.tls.ClientConfig(name))
	if err := raw.SetDeadline(deadline); err != nil {
		_ = raw.Close()
		return nil, err
	}
	if err := tc.Handshake(); err != nil {
		_ = raw.Close()
		return nil, fmt.Errorf("%w: %s (server name %q): %w", ErrTLS, address, name, err)
	}
	if err := raw.SetDeadline(time.Time{}); err != nil {
		_ = tc.Close()
		return nil, err
	}
	return tc, nil
}

// dial is the zk.Dialer.
func (c *connector) dial(network, address string, timeout time.Duration) (net.Conn, error) {
	deadline := time.Now().Add(max(timeout, handshakeFloor))
	conn, err := net.DialTimeout(network, address, timeout)
	if err == nil && c.tls != nil {
		conn, err = c.secure(conn, address, deadline)
	}
	c.mu.Lock()
	c.lastErr = err
	switch {
	case err != nil && errors.Is(err, ErrTLS) && err.Error() != c.logged:
		// A TLS refusal does not heal by retrying: say so where an
		// operator looks (go-zookeeper's own line is at debug level).
		c.logged = err.Error()
		c.log.Warn("zookeeper TLS handshake failed; trying the next server", "server", address, "err", err)
	case err == nil && c.logged != "":
		c.logged = ""
		c.log.Info("zookeeper TLS handshake succeeded again", "server", address)
	}
	c.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return &boundedConn{Conn: conn, bound: c.bound}, nil
}

// last returns the error of the last connection attempt (nil if it
// connected).
func (c *connector) last() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

// probeConn prepares a leader probe's connection: with TLS, a handshake
// bounded by ctx.
func (c *connector) probeConn(ctx context.Context, raw net.Conn, address string) (net.Conn, error) {
	if c.tls == nil {
		return raw, nil
	}
	dl, ok := ctx.Deadline()
	if !ok {
		dl = time.Now().Add(handshakeFloor)
	}
	return c.secure(raw, address, dl)
}

package zkx

import (
	"context"
	"crypto/sha1"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
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

// SchemeDigest is the ACL scheme of ZooKeeper's digest provider: its id
// is "user:base64(sha1(user:password))" (DigestID).
const SchemeDigest = "digest"

// DigestID returns the digest ACL id ZooKeeper gives a session that
// authenticated as user with password ("user:base64(sha1(user:password))").
func DigestID(user, password string) string {
	return zk.DigestACL(zk.PermAll, user, password)[0].ID
}

// IdentityACL returns the ACL entry granting perms to identity, as
// DialConfig.ACLIdentities writes identities: "digest:USER:HASH" (a
// digest id, DigestID), "x509:SUBJECT", or a bare certificate subject
// (scheme x509). A digest id without a user or a hash, or an empty
// subject, is an error naming it.
func IdentityACL(perms int32, identity string) (zk.ACL, error) {
	switch {
	case strings.HasPrefix(identity, SchemeDigest+":"):
		id := strings.TrimPrefix(identity, SchemeDigest+":")
		user, hash, ok := strings.Cut(id, ":")
		if !ok || user == "" || hash == "" {
			return zk.ACL{}, fmt.Errorf("%w: identity %q: a digest identity is digest:USER:HASH (HASH = base64(sha1(USER:PASSWORD)))", ErrBadConfig, identity)
		}
		if b, err := base64.StdEncoding.DecodeString(hash); err != nil || len(b) != sha1.Size {
			// Not a hash: most likely a password typed in its place, which
			// would then be in every znode's ACL (and the shell's history).
			// The error does not repeat it.
			return zk.ACL{}, fmt.Errorf("%w: digest identity for user %q: HASH is not base64 of a 20-byte SHA-1 (give base64(sha1(USER:PASSWORD)), never the password)", ErrBadConfig, user)
		}
		return zk.ACL{Perms: perms, Scheme: SchemeDigest, ID: id}, nil
	case strings.HasPrefix(identity, SchemeX509+":"):
		identity = strings.TrimPrefix(identity, SchemeX509+":")
	}
	if strings.TrimSpace(identity) == "" {
		return zk.ACL{}, fmt.Errorf("%w: empty x509 identity", ErrBadConfig)
	}
	return zk.ACL{Perms: perms, Scheme: SchemeX509, ID: identity}, nil
}

// Identified is a TLSConfig that knows the client certificate it
// presents and its x509 identity (*tlsfiles.Source is one). Dial uses it
// for the default ACL (DialConfig.ACLIdentities).
type Identified interface {
	// Certificate returns the client certificate presented (nil: none).
	Certificate() *x509.Certificate
	// Identity returns the certificate's identity as ZooKeeper's x509
	// provider names the session, or why it cannot be named.
	Identity() (string, error)
}

// defaultIdentity returns the identity of cfg's client certificate when
// it is the default ACL (TLS is Identified and presents one, neither
// Auth nor ACLIdentities are given): "" with none, an error when a
// certificate is presented whose identity cannot be named.
func defaultIdentity(cfg DialConfig) (string, error) {
	if cfg.Auth != nil || len(cfg.ACLIdentities) > 0 {
		return "", nil
	}
	src, ok := cfg.TLS.(Identified)
	if !ok || src.Certificate() == nil {
		return "", nil
	}
	return src.Identity()
}

// buildACL is the ACL every create of a client with cfg uses: a digest
// entry for Auth, an x509 entry per ACLIdentities; with neither, x509 for
// the identity of the client certificate TLS presents (an Identified
// TLSConfig), so a TLS client never creates world-open znodes by
// omission; with neither and no such certificate (no TLS, or TLS without
// a client certificate), world:anyone.
func buildACL(cfg DialConfig) []zk.ACL {
	var acl []zk.ACL
	if cfg.Auth != nil {
		acl = append(acl, zk.DigestACL(zk.PermAll, cfg.Auth.User, cfg.Auth.Password)...)
	}
	for _, id := range cfg.ACLIdentities {
		e, _ := IdentityACL(zk.PermAll, id) // (an error: Validate refused cfg)
		if !slices.ContainsFunc(acl, func(a zk.ACL) bool { return a.Scheme == e.Scheme && a.ID == e.ID }) {
			acl = append(acl, e)
		}
	}
	if len(acl) > 0 {
		return acl
	}
	if id, err := defaultIdentity(cfg); err == nil && id != "" {
		return X509ACL(zk.PermAll, id)
	} // (an error: Validate refused cfg)
	return zk.WorldACL(zk.PermAll)
}

// connector dials ZooKeeper servers: TCP within go-zookeeper's connect
// timeout, then, with TLS, a handshake bounded by the same deadline
// (at least handshakeFloor). It remembers the last failure so that a Dial
// that never gets a session can say why.
type connector struct {
	tls        TLSConfig  // nil: plaintext
	serverName string     // "": the configured host of each address
	names      *hostNames // the configured host of each resolved address
	bound      time.Duration
	log        *slog.Logger

	mu      sync.Mutex // guards lastErr and logged
	lastErr error
	logged  string // the last TLS failure logged (each distinct one is logged once in a row)
}

// handshakeFloor is the least time a TLS handshake is given.
const handshakeFloor = time.Second

// name returns the name a server's certificate is verified against:
// TLSServerName, else the host the configuration named for address (the
// host providers dial resolved addresses: "zk1:2281" becomes
// "10.0.0.5:2281", and the certificate names zk1), else address's own
// host (an IP address the configuration wrote as such).
func (c *connector) name(address string) string {
	if c.serverName != "" {
		return c.serverName
	}
	if host, ok := c.names.host(address); ok {
		return host
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
		_ = raw.Close() // no close_notify (boundedConn.Close)
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

// hostNames maps each resolved server address ("10.0.0.5:2281") to the
// host the configuration named ("zk1"), filled by the host provider's
// Init, read by the connector for the TLS server name. An address two
// configured names resolve to keeps the first.
type hostNames struct {
	mu sync.Mutex // guards m
	m  map[string]string
}

func (n *hostNames) set(m map[string]string) {
	if n == nil {
		return
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.m = m
}

func (n *hostNames) host(address string) (string, bool) {
	if n == nil {
		return "", false
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	h, ok := n.m[address]
	return h, ok
}

// resolveServers resolves servers ("host:port") with lookup into one
// address per A/AAAA record and returns them (in the configuration's
// order) with the configured host of each.
func resolveServers(ctx context.Context, lookup func(ctx context.Context, host string) ([]string, error), servers []string) ([]string, map[string]string, error) {
	var found []string
	names := make(map[string]string)
	for _, s := range servers {
		host, port, err := net.SplitHostPort(s)
		if err != nil {
			return nil, nil, fmt.Errorf("zkx: ZooKeeper server %q: %w", s, err)
		}
		addrs, err := lookup(ctx, host)
		if err != nil {
			return nil, nil, fmt.Errorf("zkx: ZooKeeper server %q: %w", s, err)
		}
		for _, a := range addrs {
			addr := net.JoinHostPort(a, port)
			found = append(found, addr)
			if _, ok := names[addr]; !ok {
				names[addr] = host
			}
		}
	}
	if len(found) == 0 {
		return nil, nil, fmt.Errorf("zkx: no addresses found for ZooKeeper servers %q", servers)
	}
	return found, names, nil
}

// namedDNSHosts is go-zookeeper's own host provider (DialConfig.AnyServer)
// fed with addresses this package resolved, so that the connector knows
// the configured host of each.
type namedDNSHosts struct {
	*zk.DNSHostProvider
	names  *hostNames
	lookup func(ctx context.Context, host string) ([]string, error)
}

func newNamedDNSHosts(names *hostNames) *namedDNSHosts {
	var r net.Resolver
	return &namedDNSHosts{DNSHostProvider: zk.NewDNSHostProvider(), names: names, lookup: r.LookupHost}
}

// Init resolves servers, records their hosts and hands the addresses to
// go-zookeeper's provider (which resolves an IP address to itself and
// shuffles them).
func (h *namedDNSHosts) Init(servers []string) error {
	ctx, cancel := context.WithTimeout(context.Background(), lookupTimeout)
	defer cancel()
	found, names, err := resolveServers(ctx, h.lookup, servers)
	if err != nil {
		return err
	}
	h.names.set(names)
	return h.DNSHostProvider.Init(found)
}

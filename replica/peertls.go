package replica

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/tlsfiles"
)

// Mutual TLS between members (issue 29; Config.PeerTLS). With PeerTLS
// set:
//
//   - the checkpoint endpoint the replica serves on Config.ListenAddr is
//     HTTPS only, and a client must present a certificate the CA file
//     signed (tls.RequireAndVerifyClientCert); an embedder that mounts
//     CheckpointHandler serves it with PeerServerTLS;
//   - the member advertises "https://host:port" (a scheme-less
//     AdvertiseAddr gets "https://"), and every fetch, manifest probe and
//     liveness stream it makes to a peer is HTTPS, presenting its own
//     certificate and checking the peer's against the CA file and the
//     advertised host (a DNS name or an IP address in the certificate);
//   - it refuses to fetch from, probe or follow a member that advertises
//     a plain http address (the bearer token and the namespace would
//     cross the network in clear): that source fails with ErrPeerTLS and
//     the next one is tried;
//   - the certificate files are read again when they change (package
//     tlsfiles): every new connection uses the current ones, without a
//     restart. Peer connections are never kept alive between requests, so
//     the next fetch after a rotation uses the new files. The server on
//     ListenAddr bounds every connection's age (Config.PeerConnMaxAge,
//     newPeerServer): a peer whose CA was removed, or whose certificate
//     expired, loses access within twice it, even over a busy connection
//     or the liveness stream (which its follower reopens).
//
// Members without PeerTLS keep advertising and fetching plain http
// ("host:port" still means http). A room switches by restarting its
// members with PeerTLS; while it holds both kinds, fetches and probes
// between the kinds fail by name (ErrPeerTLS) and fall back to a member
// of the same kind, and a primary whose members all differ from it holds
// channel deletion until they switch.

// ErrPeerTLS: a connection to a peer's checkpoint endpoint failed for a
// TLS reason: the peer's certificate is not signed by our CA file, has
// expired or does not name its address (a *tlsfiles.VerifyError is then
// in the chain); the peer refused our certificate (none, another CA's,
// expired: a TLS alert from the peer); or one side speaks TLS and the
// other does not. The message says which.
var ErrPeerTLS = errors.New("replica: TLS with a peer failed")

// peerAdvertise is the address a member with PeerTLS publishes: a
// scheme-less "host:port" becomes "https://host:port"; anything else is
// kept (Validate refuses an http URL with PeerTLS).
func peerAdvertise(addr string, peerTLS *tlsfiles.Source) string {
	if peerTLS == nil || addr == "" || strings.Contains(addr, "://") {
		return addr
	}
	return "https://" + addr
}

// validatePeerTLS checks PeerTLS against the other fields: a certificate
// to present, and no plain http address to advertise.
func (c Config) validatePeerTLS(bad func(field, format string, args ...any)) {
	if c.PeerTLS == nil {
		if len(c.PeerIdentities) > 0 {
			bad("PeerIdentities", "set without PeerTLS (identities are checked against peer certificates)")
		}
		return
	}
	// Certificate, not Identity: a subject Identity cannot write as Java
	// does (tlsfiles.ErrSubjectNotReproducible) still serves TLS.
	if c.PeerTLS.Certificate() == nil {
		bad("PeerTLS", "%v: no client/server certificate configured (a member presents its certificate to peers and serves with it)", tlsfiles.ErrNoCertificate)
	}
	if strings.HasPrefix(strings.ToLower(c.AdvertiseAddr), "http://") {
		bad("AdvertiseAddr", "%q is plain http but PeerTLS is set: advertise host:port or an https URL", c.AdvertiseAddr)
	}
}

// peerIdentityOK reports whether chain's leaf names an identity of
// Config.PeerIdentities (always true without the list), and says why not.
func (c Config) peerIdentityOK(chain []*x509.Certificate) error {
	if len(c.PeerIdentities) == 0 {
		return nil
	}
	if len(chain) == 0 {
		return errors.New("the peer presented no certificate, and Config.PeerIdentities is set")
	}
	id, err := tlsfiles.SubjectName(chain[0])
	if err != nil {
		return fmt.Errorf("the peer's certificate identity: %w", err)
	}
	if !slices.Contains(c.PeerIdentities, id) {
		return fmt.Errorf("the peer's certificate identity %q is not in Config.PeerIdentities", id)
	}
	return nil
}

// requirePeerIdentity serves h only to a client whose TLS certificate
// names an identity of Config.PeerIdentities (403 otherwise, and for a
// request without TLS); without the list, h as it is.
func (c Config) requirePeerIdentity(h http.Handler) http.Handler {
	if len(c.PeerIdentities) == 0 {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var chain []*x509.Certificate
		if r.TLS != nil {
			chain = r.TLS.PeerCertificates
		}
		if err := c.peerIdentityOK(chain); err != nil {
			http.Error(w, "not a member of this room: "+err.Error(), http.StatusForbidden)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// peerClientTLS is PeerTLS's client configuration for a peer at host,
// refusing a server whose certificate is not in Config.PeerIdentities.
func (c Config) peerClientTLS(host string) *tls.Config {
	cfg := c.PeerTLS.ClientConfig(host)
	if len(c.PeerIdentities) == 0 {
		return cfg
	}
	verify := cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		if verify != nil {
			if err := verify(cs); err != nil {
				return err
			}
		}
		return c.peerIdentityOK(cs.PeerCertificates)
	}
	return cfg
}

// PeerServerTLS returns the server TLS configuration of the checkpoint
// endpoint when Config.PeerTLS is set (nil otherwise): the current
// certificate, client certificates required and verified against the
// current CA file, HTTP/1.1 only (the liveness stream takes its
// connection over). An embedder that mounts CheckpointHandler on its own
// server serves it with this (tls.NewListener, or http.Server.TLSConfig).
func (r *Replica) PeerServerTLS() *tls.Config {
	if r.cfg.PeerTLS == nil {
		return nil
	}
	return peerServerTLS(r.cfg.PeerTLS)
}

func peerServerTLS(src *tlsfiles.Source) *tls.Config {
	cfg := src.ServerConfig(tls.RequireAndVerifyClientCert)
	get := cfg.GetConfigForClient
	cfg.GetConfigForClient = func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
		c, err := get(hello)
		if c != nil {
			c.NextProtos = []string{"http/1.1"}
		}
		return c, err
	}
	cfg.NextProtos = []string{"http/1.1"}
	return cfg
}

// DefaultPeerConnMaxAge is Config.PeerConnMaxAge's default.
const DefaultPeerConnMaxAge = time.Minute

// peerConnMaxAge is Config.PeerConnMaxAge with its default; 0: no bound.
func (c Config) peerConnMaxAge() time.Duration {
	switch {
	case c.PeerConnMaxAge == 0:
		return DefaultPeerConnMaxAge
	case c.PeerConnMaxAge < 0:
		return 0
	}
	return c.PeerConnMaxAge
}

// newPeerServer is the server of the replica's own checkpoint endpoint
// (Config.ListenAddr). ReadHeaderTimeout also bounds the TLS handshake;
// refused handshakes (a peer without a certificate, another CA's) are
// logged. A connection idle for maxAge is closed, and so is any
// connection older than maxAge once its request ends, or at 2×maxAge
// (tlsfiles.LimitConnAge): what a handshake verified is verified again
// at least that often. maxAge 0: no bound (and no idle timeout beyond
// net/http's default).
func newPeerServer(h http.Handler, maxAge time.Duration, log *slog.Logger) *http.Server {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: maxAge,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	tlsfiles.LimitConnAge(srv, maxAge)
	return srv
}

// peerBaseURL is checkpointBaseURL for a peer's advertised address, and
// with PeerTLS refuses a plain http one.
func (r *Replica) peerBaseURL(addr string) (string, error) {
	base, err := checkpointBaseURL(addr)
	if err != nil {
		return "", err
	}
	if r.cfg.PeerTLS != nil && strings.HasPrefix(base, "http://") {
		return "", fmt.Errorf("%w: %q is a plain http address and this member has PeerTLS: it sends neither its token nor requests in clear", ErrPeerTLS, addr)
	}
	return base, nil
}

// fetchOptionsFor are fetchOptions for one URL: with PeerTLS, a TLS
// client configuration that presents our certificate and verifies the
// peer against the CA file and the URL's host.
func (r *Replica) fetchOptionsFor(rawURL string) checkpoint.FetchOptions {
	o := r.fetchOptions()
	if r.cfg.PeerTLS != nil {
		host := ""
		if u, err := url.Parse(rawURL); err == nil {
			host = u.Hostname()
		}
		o.TLS = r.cfg.peerClientTLS(host)
	}
	return o
}

// peerDialTLS is a DialTLSContext for peer connections (the liveness
// clients): TCP with d, then a handshake bounded by handshake, verifying
// the peer against the host it was dialled by and, when check is not nil,
// its certificate chain with check (Config.PeerIdentities).
func peerDialTLS(src *tlsfiles.Source, d *net.Dialer, handshake time.Duration, check func([]*x509.Certificate) error) func(ctx context.Context, network, addr string) (net.Conn, error) {
	dial := src.DialContext(d, handshake, "http/1.1")
	if check == nil {
		return dial
	}
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		tc, ok := c.(*tls.Conn)
		if !ok {
			c.Close()
			return nil, fmt.Errorf("%w: %s: not a TLS connection", ErrPeerTLS, addr)
		}
		if err := check(tc.ConnectionState().PeerCertificates); err != nil {
			c.Close()
			return nil, fmt.Errorf("%w: %s: %w", ErrPeerTLS, addr, err)
		}
		return c, nil
	}
}

// usePeerTLS makes the liveness clients speak TLS with src, refusing
// servers whose chain check refuses (nil: any the CA signed for the host).
func (l *liveness) usePeerTLS(src *tlsfiles.Source, check func([]*x509.Certificate) error) {
	dialer := &net.Dialer{Timeout: livenessDial}
	for _, c := range []*http.Client{l.stream, l.probe} {
		if tr, ok := c.Transport.(*http.Transport); ok {
			tr.DialTLSContext = peerDialTLS(src, dialer, max(tr.TLSHandshakeTimeout, livenessDial), check)
		}
	}
}

// peerTLSError marks err with ErrPeerTLS and the reason when it is a TLS
// failure with a peer; other errors are returned as they are.
func peerTLSError(err error) error {
	if err == nil || errors.Is(err, ErrPeerTLS) {
		return err
	}
	if why := peerTLSReason(err); why != "" {
		return fmt.Errorf("%w: %s: %w", ErrPeerTLS, why, err)
	}
	return err
}

// peerTLSReason says why a request to a peer failed at the TLS layer, or
// "" when it did not.
func peerTLSReason(err error) string {
	var ve *tlsfiles.VerifyError
	var cve *tls.CertificateVerificationError
	var rhe tls.RecordHeaderError
	var oe *net.OpError
	msg := err.Error()
	switch {
	case errors.As(err, &ve), errors.As(err, &cve):
		return "the peer's certificate is refused (not signed by our CA file, expired, or not naming the address it advertises)"
	case errors.As(err, &oe) && oe.Op == "remote error":
		return fmt.Sprintf("the peer refused our certificate (%v): is it signed by the peer's CA file and still valid?", oe.Err)
	case strings.Contains(msg, "server gave HTTP response to HTTPS client"), errors.As(err, &rhe):
		return "the peer serves plain HTTP, not HTTPS (it runs without PeerTLS)"
	case strings.Contains(msg, "Client sent an HTTP request to an HTTPS server"):
		return "the peer serves HTTPS and this member fetches over plain HTTP (set Config.PeerTLS)"
	case strings.Contains(msg, "tls: "):
		return "TLS handshake failed"
	}
	return ""
}

package tlsfiles

import (
	"context"
	"crypto/tls"
	"net"
	"time"
)

// DialContext returns a dial function for http.Transport.DialTLSContext
// (or any TLS client): TCP with d, then a TLS handshake bounded by
// handshake (and ctx) with ClientConfig(the dialled host), so the peer is
// verified against the current CA file and the host it was dialled by.
// nextProtos, when given, is offered by ALPN (e.g. "http/1.1"). On a
// failed handshake the TCP connection is closed.
func (s *Source) DialContext(d *net.Dialer, handshake time.Duration, nextProtos ...string) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		raw, err := d.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := s.ClientConfig(host)
		if len(nextProtos) > 0 {
			cfg.NextProtos = nextProtos
		}
		c := tls.Client(raw, cfg)
		hctx, cancel := context.WithTimeout(ctx, handshake)
		defer cancel()
		if err := c.HandshakeContext(hctx); err != nil {
			raw.Close()
			return nil, err
		}
		return c, nil
	}
}

package client

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"time"

	"github.com/roomlog/roomlog/tlsfiles"
)

// HTTPSTransport returns a transport for masters that serve their API
// with mutual TLS (serve --tls-ca, --tls-cert, --tls-key): every new
// connection presents src's current certificate and verifies the
// master's against src's current CA file and the host it dials (a DNS
// name or an IP address the certificate must name), redirects to another
// master included. Rotated files reach the next connection; connections
// already open keep theirs. HTTP/1.1 only.
func HTTPSTransport(src *tlsfiles.Source) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	handshake := tr.TLSHandshakeTimeout
	tr.ForceAttemptHTTP2 = false
	tr.DialTLSContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, _, err := net.SplitHostPort(addr)
		if err != nil {
			return nil, err
		}
		raw, err := dialer.DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		cfg := src.ClientConfig(host)
		cfg.NextProtos = []string{"http/1.1"}
		c := tls.Client(raw, cfg)
		hctx, cancel := context.WithTimeout(ctx, handshake)
		defer cancel()
		if err := c.HandshakeContext(hctx); err != nil {
			raw.Close()
			return nil, err
		}
		return c, nil
	}
	return tr
}

// HTTPS returns an *http.Client over HTTPSTransport(src) whose requests
// are bounded by timeout (0: only by their contexts). Pass it to New or
// NewPool with "https://host:port" addresses.
func HTTPS(src *tlsfiles.Source, timeout time.Duration) *http.Client {
	return &http.Client{Transport: HTTPSTransport(src), Timeout: timeout}
}

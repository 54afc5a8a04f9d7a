package client

import (
	"context"
	"errors"
	"fmt"
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
// already open keep theirs. HTTP/1.1 only. It never sends a request in
// clear: an http:// URL fails to dial with ErrPlainHTTP (nothing sent).
func HTTPSTransport(src *tlsfiles.Source) *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	dialer := &net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}
	handshake := tr.TLSHandshakeTimeout
	tr.ForceAttemptHTTP2 = false
	tr.Proxy = nil // a proxy would be dialed in clear (DialContext)
	tr.DialContext = func(_ context.Context, _, addr string) (net.Conn, error) {
		return nil, fmt.Errorf("%w (dial %s)", ErrPlainHTTP, addr)
	}
	tr.DialTLSContext = src.DialContext(dialer, handshake, "http/1.1")
	return tr
}

// HTTPS returns an *http.Client over HTTPSTransport(src) whose requests
// are bounded by timeout (0: only by their contexts). Pass it to New or
// NewPool with "https://host:port" addresses. It follows redirects to
// https:// URLs only (at most 10, as net/http): a redirect to any other
// scheme fails with ErrPlainHTTP naming the URL, before anything is sent
// there.
func HTTPS(src *tlsfiles.Source, timeout time.Duration) *http.Client {
	return &http.Client{Transport: HTTPSTransport(src), Timeout: timeout, CheckRedirect: httpsOnly}
}

func httpsOnly(req *http.Request, via []*http.Request) error {
	if req.URL.Scheme != "https" {
		return fmt.Errorf("%w: redirect to %s", ErrPlainHTTP, req.URL.Redacted())
	}
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	return nil
}

// ErrPlainHTTP: an HTTPS client (HTTPS, HTTPSTransport) was asked to send
// a request over plain http://, by a redirect or by its URL; nothing was
// sent.
var ErrPlainHTTP = errors.New("client: plain http:// refused by an HTTPS client; nothing sent")

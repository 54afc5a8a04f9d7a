package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/tlsfiles"
)

// pair --tls: certificates made in the work dir, HTTPS with mutual TLS
// between every process that speaks HTTP.

// makeCerts makes a CA and certificates for the masters (client and
// server, for 127.0.0.1 and localhost) and the demo's own client in
// <work dir>/tls, and switches the demo's HTTP client to HTTPS with its
// certificate.
func (p *pair) makeCerts() error {
	dir := filepath.Join(p.tmp, "tls")
	ca, err := testpki.NewCA("dfsmaster-pair-ca")
	if err != nil {
		return fmt.Errorf("make the CA: %w", err)
	}
	p.tls = map[string]tlsfiles.Files{}
	for _, id := range []string{"m1", "m2"} {
		f, err := ca.Issue(dir, id, testpki.Options{})
		if err != nil {
			return fmt.Errorf("certificate of %s: %w", id, err)
		}
		p.tls[id] = f
	}
	f, err := ca.Issue(dir, "client", testpki.Options{Client: true})
	if err != nil {
		return fmt.Errorf("the demo's client certificate: %w", err)
	}
	if p.clientTLS, err = tlsfiles.Load(f); err != nil {
		return err
	}
	tr := client.HTTPSTransport(p.clientTLS)
	tr.MaxIdleConnsPerHost = 64
	p.eps.hc.Transport = tr
	p.step("TLS: a CA and certificates for m1, m2 and the demo's client in %s: the masters serve HTTPS only and require a client certificate the CA signed", dir)
	return nil
}

// checkTLS checks from outside that m1 serves nothing in clear and
// refuses an HTTPS client without a certificate, while the demo's client
// (with one) is answered.
func (p *pair) checkTLS(ctx context.Context) error {
	base := p.addr("m1")
	hostport := strings.TrimPrefix(base, "https://")
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	get := func(hc *http.Client, url string) (*http.Response, string, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, "", err
		}
		resp, err := hc.Do(req)
		if err != nil {
			return nil, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return resp, string(b), nil
	}
	// Plain HTTP: Go's server answers 400 without serving anything.
	plain := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, body, err := get(plain, "http://"+hostport+"/v1/status")
	if err != nil || resp.StatusCode != http.StatusBadRequest {
		return fmt.Errorf("TLS check: a plain HTTP request to %s got %v %v, want 400 (nothing served in clear)", hostport, resp, err)
	}
	if strings.Contains(body, "role") {
		return fmt.Errorf("TLS check: a plain HTTP request to %s was served: %q", hostport, body)
	}
	// HTTPS trusting the CA, without a client certificate: refused.
	pool := x509.NewCertPool()
	ca, err := os.ReadFile(p.tls["m1"].CA)
	if err != nil {
		return err
	}
	pool.AppendCertsFromPEM(ca)
	noCert := &http.Client{Transport: &http.Transport{DisableKeepAlives: true, TLSClientConfig: &tls.Config{RootCAs: pool}}}
	_, _, err = get(noCert, base+"/v1/status")
	if err == nil || !strings.Contains(err.Error(), "certificate required") {
		return fmt.Errorf("TLS check: an HTTPS client without a certificate got %v, want the handshake refused (certificate required)", err)
	}
	if ctx.Err() != nil {
		return errors.New("TLS check: timed out")
	}
	p.step("TLS check: m1 answers a plain HTTP request with 400 (nothing in clear) and refuses an HTTPS client without a certificate (%v)", shortErr(err))
	return nil
}

// shortErr is the last part of an error chain's text.
func shortErr(err error) string {
	s := err.Error()
	if i := strings.LastIndex(s, ": "); i >= 0 && i+2 < len(s) {
		return s[i+2:]
	}
	return s
}

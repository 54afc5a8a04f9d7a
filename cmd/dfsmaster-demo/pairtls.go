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

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
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
	p.ca = ca
	p.tls = map[string]tlsfiles.Files{}
	p.idents = map[string]string{}
	for _, id := range []string{"m1", "m2", "chunk", "client", "ops"} {
		o := testpki.Options{}
		if id == "chunk" || id == "client" || id == "ops" {
			o.Client = true
		}
		f, err := ca.Issue(dir, id, o)
		if err != nil {
			return fmt.Errorf("certificate of %s: %w", id, err)
		}
		p.tls[id] = f
		src, err := tlsfiles.Load(f)
		if err != nil {
			return err
		}
		ident, err := src.Identity()
		if err != nil {
			return err
		}
		p.idents[id] = ident
		switch id {
		case "m1", "m2", "ops": // the room: the masters and the operator (the demo's own ZooKeeper client)
			p.zkACL = append(p.zkACL, ident)
		case "chunk": // the chunk servers' task znodes only
			p.zkWorkerACL = append(p.zkWorkerACL, ident)
		}
		switch id {
		case "client":
			p.clientTLS = src
		case "ops":
			p.opsTLS = src
		}
	}
	tr := client.HTTPSTransport(p.clientTLS)
	tr.MaxIdleConnsPerHost = 64
	p.eps.hc.Transport = tr
	p.step("TLS: a CA and certificates for m1, m2, the chunk servers and the demo's client in %s: the masters serve HTTPS only and require a client certificate the CA signed", dir)
	return nil
}

// checkTLS checks from outside that m1 serves nothing in clear and
// refuses an HTTPS client without a certificate, while the demo's client
// (with one) is answered.
func (p *pair) checkTLS(ctx context.Context) error {
	if p.zkTLS {
		if err := p.checkZKTLS(ctx); err != nil {
			return err
		}
	}
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

// zkTLSArgs are the --zk-tls-* and --zk-acl-x509* flags of process id
// ("m1", "m2", "chunk") when ZooKeeper is TLS: its own certificate and
// the ACLs by role. The room's znodes grant the masters and the operator
// (zkACL) only; the chunk servers' task znodes grant those and the chunk
// servers (zkWorkerACL): a master creates the room with --zk-acl-x509
// and its recipes with --zk-acl-x509-workers added, a chunk server
// creates its task znodes with both lists. The masters accept only each
// other as peers (--tls-peer).
func (p *pair) zkTLSArgs(id string) []string {
	if !p.zkTLS {
		return nil
	}
	f := p.tls[id]
	args := []string{"--zk-tls-ca", f.CA, "--zk-tls-cert", f.Cert, "--zk-tls-key", f.Key}
	for _, ident := range p.zkACL {
		args = append(args, "--zk-acl-x509", ident)
	}
	for _, ident := range p.zkWorkerACL {
		if id == "chunk" {
			args = append(args, "--zk-acl-x509", ident)
		} else {
			args = append(args, "--zk-acl-x509-workers", ident)
		}
	}
	return args
}

// peerArgs are the --tls-peer flags of a master: the masters' identities.
func (p *pair) peerArgs() []string {
	var args []string
	for _, id := range []string{"m1", "m2"} {
		if ident, ok := p.idents[id]; ok {
			args = append(args, "--tls-peer", ident)
		}
	}
	return args
}

// zkDial adds the demo's own ZooKeeper TLS (the operator's certificate,
// the room's ACL identities) to d when ZooKeeper is TLS.
func (p *pair) zkDial(d logroom.DialConfig) logroom.DialConfig {
	if p.zkTLS {
		d.TLS, d.ACLIdentities = p.opsTLS, p.zkACL
	}
	return d
}

// plainZK is ZooKeeper's plain address list (its TLS one when it has no
// other).
func (p *pair) plainZK() string {
	if p.zkPlain != "" {
		return p.zkPlain
	}
	return p.zkConn
}

// checkZKTLS checks that ZooKeeper refuses what the room's ACL does not
// name: a client with a certificate of the pair's CA but another identity
// is authenticated (TLS) and still gets NoAuth on the room; a client
// without TLS on the plain port gets NoAuth as well.
func (p *pair) checkZKTLS(ctx context.Context) error {
	dir := filepath.Join(p.tmp, "tls")
	f, err := p.ca.Issue(dir, "intruder", testpki.Options{Client: true})
	if err != nil {
		return err
	}
	intruder, err := tlsfiles.Load(f)
	if err != nil {
		return err
	}
	chunk, err := tlsfiles.Load(p.tls["chunk"])
	if err != nil {
		return err
	}
	room := replica.DefaultBase + "/" + p.cfg.room
	for _, d := range []struct {
		what string
		cfg  logroom.DialConfig
	}{
		{"a TLS client of the same CA with another identity", logroom.DialConfig{Servers: logroom.SplitServers(p.zkConn), TLS: intruder}},
		{"a plain client", logroom.DialConfig{Servers: logroom.SplitServers(p.zkPlain)}},
		{"a chunk server's certificate", logroom.DialConfig{Servers: logroom.SplitServers(p.zkConn), TLS: chunk}},
	} {
		dctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		c, err := logroom.Dial(dctx, d.cfg)
		cancel()
		if err != nil {
			return fmt.Errorf("ZooKeeper TLS check: %s: connect: %w", d.what, err)
		}
		_, _, err = c.Conn().Get(room)
		_, werr := c.Conn().Set(room+"/epoch", []byte("x"), -1)
		c.Close()
		if !errors.Is(err, zk.ErrNoAuth) || !errors.Is(werr, zk.ErrNoAuth) {
			return fmt.Errorf("ZooKeeper TLS check: %s reading %s got %v, writing its epoch %v, want %v", d.what, room, err, werr, zk.ErrNoAuth)
		}
	}
	p.step("ZooKeeper TLS check: a client with another identity (CN=intruder), a plain client and a chunk server's certificate (CN=chunk) are refused reading and writing %s (%v)", room, zk.ErrNoAuth)
	return nil
}

// quorumTLSLine is what a ZooKeeper server logs when its quorum and
// election links are TLS (sslQuorum=true).
const quorumTLSLine = "Using TLS encrypted quorum communication"

// checkQuorumTLS checks that every server of a TLS ensemble with peers
// logged that its quorum links are TLS: otherwise every write the masters
// send over TLS crosses the server-to-server links in clear, and the
// RESULT's zk_tls would not hold.
func checkQuorumTLS(ens *zkensemble.Ensemble) error {
	if ens.Size() < 2 {
		return nil
	}
	for i := 0; i < ens.Size(); i++ {
		b, err := os.ReadFile(ens.LogPath(i))
		if err != nil {
			return fmt.Errorf("ZooKeeper quorum TLS check: %w", err)
		}
		if !strings.Contains(string(b), quorumTLSLine) {
			return fmt.Errorf("ZooKeeper quorum TLS check: server %d did not log %q (sslQuorum): its quorum links are in clear", i, quorumTLSLine)
		}
	}
	return nil
}

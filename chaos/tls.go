package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/internal/infra/faultnet"
	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/tlsfiles"
)

// -tls (doc.go, "TLS"): ZooKeeper over TLS with x509 ACLs, mutual TLS
// between members, and the two rotations.
//
// Two CAs. The ensemble's (zkensemble TLSOptions, fixed for the run: a
// ZooKeeper server reads its trust store once) signs the servers' and the
// members' ZooKeeper client certificates; a replica's subject is CN=<id>,
// every observer's CN=observer (observers come and go under new ids, the
// room's ACL is fixed when a znode is created), the harness's own
// CN=operator. The room's ACL names those identities (x509) and nothing
// else. The members' CA signs their peer certificates (the checkpoint
// endpoint, fetches, probes, the liveness stream); rotate-ca replaces it.

// tlsWorld holds the run's certificates. Guarded by mu: Tune runs on the
// cluster's goroutines.
type tlsWorld struct {
	dir  string
	zkCA *testpki.CA
	// acl: the x509 identities every member grants (the room's ACL).
	acl []string
	// op: the harness's ZooKeeper client certificate (log recorder,
	// observer watch, room version, re-seed, final read).
	op *tlsfiles.Source

	mu sync.Mutex
	// peerCA signs the peer certificates issued now; caPEM is what every
	// member's peer CA file holds (during rotate-ca, both CAs).
	peerCA *testpki.CA
	caPEM  []byte
	gen    int
	// files: every member's TLS files by id.
	files map[string]testnode.NodeTLS
}

const observerZKName = "observer"

// newTLSWorld makes the peer CA and the identities; zkCA is the ensemble's.
func newTLSWorld(dir string, zkCA *testpki.CA, replicas int) (*tlsWorld, error) {
	peerCA, err := testpki.NewCA("roomlog chaos members CA 1")
	if err != nil {
		return nil, err
	}
	w := &tlsWorld{dir: dir, zkCA: zkCA, peerCA: peerCA, caPEM: peerCA.PEM, gen: 1, files: map[string]testnode.NodeTLS{}}
	opFiles, err := zkCA.Issue(filepath.Join(dir, "operator"), "operator", testpki.Options{Client: true})
	if err != nil {
		return nil, err
	}
	if w.op, err = tlsfiles.Load(opFiles); err != nil {
		return nil, err
	}
	names := []string{"operator", observerZKName}
	for i := range replicas {
		names = append(names, fmt.Sprintf("n%d", i))
	}
	for _, name := range names {
		id, err := identityOf(zkCA, filepath.Join(dir, "ids"), name)
		if err != nil {
			return nil, err
		}
		w.acl = append(w.acl, id)
	}
	return w, nil
}

// identityOf is the x509 identity (tlsfiles.Source.Identity) of a
// certificate the CA issues for name.
func identityOf(ca *testpki.CA, dir, name string) (string, error) {
	f, err := ca.Issue(filepath.Join(dir, name), name, testpki.Options{Client: true})
	if err != nil {
		return "", err
	}
	src, err := tlsfiles.Load(f)
	if err != nil {
		return "", err
	}
	return src.Identity()
}

// zkName is the subject CN of a member's ZooKeeper certificate.
func zkName(o *testnode.NodeOptions) string {
	if o.Observer {
		return observerZKName
	}
	return o.ID
}

// tune gives a node its TLS files (issued at its first start, kept
// across restarts and wipes of its data dir).
func (w *tlsWorld) tune(o *testnode.NodeOptions) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.files[o.ID]
	if !ok {
		zkDir, peerDir := filepath.Join(w.dir, o.ID, "zk"), filepath.Join(w.dir, o.ID, "peer")
		zf, err := w.zkCA.Issue(zkDir, zkName(o), testpki.Options{Client: true})
		if err != nil {
			return err
		}
		pf, err := w.peerCA.Issue(peerDir, o.ID, testpki.Options{})
		if err != nil {
			return err
		}
		if err := testpki.WriteFile(pf.CA, w.caPEM); err != nil {
			return err
		}
		t = testnode.NodeTLS{ZK: zf, ZKACL: w.acl, Peer: pf}
		w.files[o.ID] = t
	}
	o.TLS = &t
	return nil
}

// dial is the harness's ZooKeeper client config: TLS with the operator's
// certificate, creating with the room's ACL.
func (r *runner) zkDial() logroom.DialConfig {
	if r.tls == nil {
		return logroom.DialConfig{Servers: r.ens.Addrs(), SessionTimeout: 10 * time.Second}
	}
	return logroom.DialConfig{Servers: r.ens.SecureAddrs(), SessionTimeout: 10 * time.Second, TLS: r.tls.op, ACLIdentities: r.tls.acl}
}

// tlsOp and tlsACL are the harness's certificate and the room's ACL
// (nil without -tls).
func (r *runner) tlsOp() *tlsfiles.Source {
	if r.tls == nil {
		return nil
	}
	return r.tls.op
}

func (r *runner) tlsACL() []string {
	if r.tls == nil {
		return nil
	}
	return r.tls.acl
}

// zkAddrs are the ZooKeeper addresses the members use.
func (r *runner) zkAddrs() []string {
	if r.tls == nil {
		return r.ens.Addrs()
	}
	return r.ens.SecureAddrs()
}

// peerProbe connects to n's checkpoint port (directly, not through its
// link) with a client certificate of ca and the trust of pool, and
// returns the certificate n presented.
func peerProbe(ctx context.Context, n *testnode.Node, client tls.Certificate, pool *x509.CertPool) (*x509.Certificate, error) {
	o := n.Options()
	if o.TLS == nil || o.TLS.PeerListen == "" {
		return nil, errors.New("no peer TLS port")
	}
	return probeTLS(ctx, o.TLS.PeerListen, client, pool)
}

// probeTLS is peerProbe at addr.
func probeTLS(ctx context.Context, addr string, client tls.Certificate, pool *x509.CertPool) (*x509.Certificate, error) {
	d := tls.Dialer{Config: &tls.Config{
		Certificates: []tls.Certificate{client},
		RootCAs:      pool,
		ServerName:   "127.0.0.1",
		MinVersion:   tls.VersionTLS12,
	}}
	pctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	c, err := d.DialContext(pctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	tc := c.(*tls.Conn)
	// TLS 1.3: the server checks the client's certificate after the
	// client's handshake is done; a refusal arrives with the first read.
	_ = tc.SetDeadline(time.Now().Add(2 * time.Second))
	if _, err := fmt.Fprintf(tc, "HEAD / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n"); err != nil {
		return nil, err
	}
	var b [1]byte
	if _, err := tc.Read(b[:]); err != nil {
		return nil, err
	}
	certs := tc.ConnectionState().PeerCertificates
	if len(certs) == 0 {
		return nil, errors.New("no certificate presented")
	}
	return certs[0], nil
}

// clientCert issues a client certificate of ca for the harness's probes.
func clientCert(ca *testpki.CA) (tls.Certificate, error) {
	c, err := ca.Make("chaos-probe", testpki.Options{Client: true})
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.X509KeyPair(c.CertPEM, c.KeyPEM)
}

func poolOf(cas ...*testpki.CA) *x509.CertPool {
	p := x509.NewCertPool()
	for _, ca := range cas {
		p.AddCert(ca.Cert)
	}
	return p
}

// waitPeers polls every node of nodes (every 200 ms, 15 s at most: the
// members look at their files at most once a second) until ok accepts
// what probe returns; it returns the nodes that never satisfied it, with
// the last reason.
func waitPeers(ctx context.Context, nodes []*testnode.Node, probe func(*testnode.Node) error) []string {
	var bad []string
	for _, n := range nodes {
		deadline := time.Now().Add(15 * time.Second)
		var err error
		for {
			if !n.Live() {
				err = nil // stopped meanwhile (a fault): its files are on disk
				break
			}
			if err = probe(n); err == nil || time.Now().After(deadline) || ctx.Err() != nil {
				break
			}
			sleep(ctx, 200*time.Millisecond)
		}
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s (%s)", n.ID(), firstLine(err)))
		}
	}
	return bad
}

// tlsViolation counts and prints a rotation that did not take.
func (r *runner) tlsViolation(f Fault, format string, args ...any) {
	msg := fmt.Sprintf("%s: %s", f.Kind, fmt.Sprintf(format, args...))
	r.res.TLSViolations++
	r.res.Anomalies = append(r.res.Anomalies, msg)
	r.out.f("    TLS: %s", msg)
}

// rotateCert replaces one member's certificate and key files in place
// (its ZooKeeper client certificate, same subject, and its peer
// certificate); with f.Primary the member is cut from ZooKeeper while its
// files change. Its ZooKeeper connections are then reset (not the
// primary's unless it was cut: a reconnect costs a primary a pause that a
// rotation alone never causes), so it reconnects with the new
// certificate; and it must present the new peer certificate.
func (r *runner) rotateCert(ctx context.Context, f Fault, p *testnode.Node) string {
	live := r.c.Live()
	slices.SortFunc(live, func(a, b *testnode.Node) int { return strings.Compare(a.ID(), b.ID()) })
	if len(live) == 0 {
		r.res.Kinds[f.Kind]--
		r.out.f("%s: skipped, no live member", f)
		return ""
	}
	n := live[f.Pick%len(live)]
	role := r.roleOf(n, p)
	w := r.tls
	w.mu.Lock()
	t := w.files[n.ID()]
	o := n.Options()
	zc, zerr := w.zkCA.Make(zkName(&o), testpki.Options{Client: true})
	pc, perr := w.peerCA.Make(n.ID(), testpki.Options{})
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(w.caPEM)
	probeCA := w.peerCA
	w.mu.Unlock()
	if err := errors.Join(zerr, perr); err != nil {
		r.out.f("%s: skipped, issue: %v", f, err)
		r.res.Kinds[f.Kind]--
		return ""
	}
	links := r.zkLinks(n.ID())
	cut := f.Primary
	r.out.f("%s: replace the certificate and key files of %s %s in place (serials %x, %x)%s", f, role, n.ID(),
		zc.Cert.SerialNumber, pc.Cert.SerialNumber, map[bool]string{true: ", cut from ZooKeeper meanwhile", false: ""}[cut])
	if cut {
		_ = r.net.Partition(links...)
	}
	// Certificate, then key: a member that reads between the two keeps
	// its old pair until both are in place (tlsfiles).
	err := errors.Join(
		testpki.WriteFile(t.ZK.Cert, zc.CertPEM), testpki.WriteFile(t.ZK.Key, zc.KeyPEM),
		testpki.WriteFile(t.Peer.Cert, pc.CertPEM), testpki.WriteFile(t.Peer.Key, pc.KeyPEM))
	if err != nil {
		r.out.f("    write: %v", err)
	}
	if cut {
		sleep(ctx, r.cfg.Session/2)
		_ = r.net.Heal(links...)
	}
	if cut || n != p {
		// Reconnect now, with the new certificate (Reset, not Cut: a cut
		// link refuses every new connection until healed).
		_ = r.net.Apply((*faultnet.Proxy).Reset, links...)
	}
	client, err := clientCert(probeCA)
	if err != nil {
		r.out.f("    probe certificate: %v", err)
		return fmt.Sprintf("%s %s", role, n.ID())
	}
	bad := waitPeers(ctx, []*testnode.Node{n}, func(n *testnode.Node) error {
		c, err := peerProbe(ctx, n, client, pool)
		if err != nil {
			return err
		}
		if c.SerialNumber.Cmp(pc.Cert.SerialNumber) != 0 {
			return fmt.Errorf("presents serial %x", c.SerialNumber)
		}
		return nil
	})
	if len(bad) > 0 {
		r.tlsViolation(f, "not serving its new peer certificate 15 s after the rotation: %s", strings.Join(bad, ", "))
	}
	// Connected again (with the new ZooKeeper certificate, the old
	// connections being reset): its status answers with a session.
	if err := r.caughtUp(ctx, n, 30*time.Second); err != nil {
		r.out.f("    %s: %v", n.ID(), firstLine(err))
	}
	return fmt.Sprintf("%s %s", role, n.ID())
}

// roleOf names n's role for the step lines.
func (r *runner) roleOf(n, p *testnode.Node) string {
	switch {
	case n == p:
		return "primary"
	case r.observers[n.ID()]:
		return "observer"
	}
	return "standby"
}

// rotateCA replaces the members' CA as an operator does, on every
// member's files (the stopped ones' too): (1) every CA file holds old and
// new, and every live member must accept a client of the new CA; (2)
// every member's certificate is re-issued by the new CA, and every live
// member must present it; (3) every CA file holds the new CA only, and
// every live member must refuse a client of the old one.
func (r *runner) rotateCA(ctx context.Context, f Fault) string {
	w := r.tls
	w.mu.Lock()
	old := w.peerCA
	gen := w.gen + 1
	w.mu.Unlock()
	nca, err := testpki.NewCA(fmt.Sprintf("roomlog chaos members CA %d", gen))
	if err != nil {
		r.out.f("%s: skipped: %v", f, err)
		r.res.Kinds[f.Kind]--
		return ""
	}
	oldClient, err1 := clientCert(old)
	newClient, err2 := clientCert(nca)
	if err := errors.Join(err1, err2); err != nil {
		r.out.f("%s: skipped: %v", f, err)
		r.res.Kinds[f.Kind]--
		return ""
	}
	r.out.f("%s: rotate the members' CA (generation %d -> %d) on %d members: bundle, certificates, new CA only", f, gen-1, gen, len(w.files))
	writeCAs := func(pem []byte) {
		w.mu.Lock()
		defer w.mu.Unlock()
		w.caPEM = pem
		for id, t := range w.files {
			if err := testpki.WriteFile(t.Peer.CA, pem); err != nil {
				r.out.f("    %s: write CA: %v", id, err)
			}
		}
	}
	live := func() []*testnode.Node {
		l := r.c.Live()
		slices.SortFunc(l, func(a, b *testnode.Node) int { return strings.Compare(a.ID(), b.ID()) })
		return l
	}
	// 1. old and new.
	bundle := append(append([]byte(nil), old.PEM...), nca.PEM...)
	writeCAs(bundle)
	both := poolOf(old, nca)
	if bad := waitPeers(ctx, live(), func(n *testnode.Node) error {
		_, err := peerProbe(ctx, n, newClient, both)
		return err
	}); len(bad) > 0 {
		r.tlsViolation(f, "bundle: a client of the new CA refused: %s", strings.Join(bad, ", "))
	}
	// 2. certificates of the new CA.
	w.mu.Lock()
	w.peerCA, w.gen = nca, gen
	for id, t := range w.files {
		c, err := nca.Make(id, testpki.Options{})
		if err == nil {
			err = errors.Join(testpki.WriteFile(t.Peer.Cert, c.CertPEM), testpki.WriteFile(t.Peer.Key, c.KeyPEM))
		}
		if err != nil {
			r.out.f("    %s: new certificate: %v", id, err)
		}
	}
	w.mu.Unlock()
	onlyNew := poolOf(nca)
	if bad := waitPeers(ctx, live(), func(n *testnode.Node) error {
		_, err := peerProbe(ctx, n, newClient, onlyNew)
		return err
	}); len(bad) > 0 {
		r.tlsViolation(f, "certificates: not presenting one of the new CA: %s", strings.Join(bad, ", "))
	}
	// 3. the new CA only.
	writeCAs(append([]byte(nil), nca.PEM...))
	if bad := waitPeers(ctx, live(), func(n *testnode.Node) error {
		if _, err := peerProbe(ctx, n, oldClient, both); err == nil {
			return errors.New("still accepts a client of the old CA")
		}
		_, err := peerProbe(ctx, n, newClient, onlyNew)
		return err
	}); len(bad) > 0 {
		r.tlsViolation(f, "new CA only: %s", strings.Join(bad, ", "))
	}
	r.out.f("    CA generation %d on every member", gen)
	return fmt.Sprintf("generation %d", gen)
}

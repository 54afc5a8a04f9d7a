package zkx

import (
	"context"
	"crypto/x509/pkix"
	"encoding/asn1"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/tlsfiles"
)

func TestMain(m *testing.M) { os.Exit(tlsZK.Run(m)) }

// tlsZK is one TLS ensemble for the TLS tests of this package.
var tlsZK = zkensemble.NewShared(zkensemble.Options{TLS: &zkensemble.TLSOptions{}})

func issue(t *testing.T, ca *testpki.CA, dir, name string, o testpki.Options) tlsfiles.Files {
	t.Helper()
	f, err := ca.Issue(dir, name, o)
	require.NoError(t, err)
	return f
}

func load(t *testing.T, f tlsfiles.Files) *tlsfiles.Source {
	t.Helper()
	s, err := tlsfiles.LoadWithOptions(f, tlsfiles.Options{CheckEvery: -1})
	require.NoError(t, err)
	return s
}

// dialTLS dials with src and waits at most d for a session.
func dialTLS(t *testing.T, servers []string, src TLSConfig, ids []string, d time.Duration) (*Client, error) {
	t.Helper()
	c, err := Dial(testCtx(t, d), DialConfig{Servers: servers, SessionTimeout: 4 * time.Second, TLS: src, ACLIdentities: ids})
	if err == nil {
		t.Cleanup(c.Close)
	}
	return c, err
}

// TestTLSRefusals: over ZooKeeper's TLS port a client with a certificate
// of the ensemble's CA gets a session; one without a certificate, one with
// a certificate of another CA, one that finds the server's certificate
// signed by a CA it does not trust and one that checks another name are
// refused, each with an error that says why; a plaintext client on the
// TLS port gets nothing.
func TestTLSRefusals(t *testing.T) {
	e := tlsZK.Get(t)
	dir := t.TempDir()
	ca := e.TLSCA()
	good := load(t, issue(t, ca, dir, "member-a", testpki.Options{Client: true}))
	c, err := dialTLS(t, e.SecureAddrs(), good, nil, 30*time.Second)
	require.NoError(t, err)
	_, err = c.Conn().Create("/tls-refusals", nil, 0, c.ACL())
	require.NoError(t, err)
	// A client certificate need not name the client's address: ZooKeeper
	// checks only its chain (no host name verification of clients).
	elsewhere := load(t, issue(t, ca, filepath.Join(dir, "elsewhere"), "member-e", testpki.Options{Client: true, Hosts: []string{"master-e.example"}}))
	_, err = dialTLS(t, e.SecureAddrs(), elsewhere, nil, 30*time.Second)
	require.NoError(t, err)

	other, err := testpki.NewCA("other-ca")
	require.NoError(t, err)
	otherFiles := issue(t, other, filepath.Join(dir, "other"), "member-x", testpki.Options{})
	// A client of the other CA that trusts the ensemble's CA too, so the
	// refusal is the server's.
	both := filepath.Join(dir, "both.pem")
	require.NoError(t, testpki.WriteFile(both, append(append([]byte{}, ca.PEM...), other.PEM...)))

	for _, tc := range []struct {
		name    string
		src     *tlsfiles.Source
		srvName string
		want    []error
		text    string
	}{
		{"no certificate", load(t, tlsfiles.Files{CA: filepath.Join(dir, "ca.pem")}), "", []error{ErrTLS}, "remote error: tls: "},
		{"certificate of another CA", load(t, tlsfiles.Files{CA: both, Cert: otherFiles.Cert, Key: otherFiles.Key}), "", []error{ErrTLS}, "remote error: tls: "},
		{"server of an untrusted CA", load(t, otherFiles), "", []error{ErrTLS, tlsfiles.ErrPeerUntrusted}, otherFiles.CA},
		{"server name mismatch", good, "zk.example.com", []error{ErrTLS, tlsfiles.ErrPeerUntrusted}, "zk.example.com"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Dial(testCtx(t, 3*time.Second), DialConfig{Servers: e.SecureAddrs(), TLS: tc.src, TLSServerName: tc.srvName})
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorIs(t, err, w)
			}
			require.ErrorContains(t, err, tc.text)
			t.Log(err)
		})
	}
	t.Run("plaintext client on the TLS port", func(t *testing.T) {
		_, err := Dial(testCtx(t, 3*time.Second), DialConfig{Servers: e.SecureAddrs()})
		require.ErrorIs(t, err, context.DeadlineExceeded)
	})
}

// TestTLSIdentityACL: tlsfiles' identity is the one ZooKeeper's x509
// provider gives the session (a znode whose only ACL entry is
// x509:<Identity()> is readable with that certificate, subjects with
// escapes and attributes without an RFC 2253 keyword included); a client
// whose ACL names certificate identities creates its znodes with exactly
// those entries; a client of the same CA with another identity gets
// zk.ErrNoAuth on every read and write, a definite answer.
func TestTLSIdentityACL(t *testing.T) {
	e := tlsZK.Get(t)
	dir := t.TempDir()
	ca := e.TLSCA()
	email := asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}
	for i, subject := range []*pkix.Name{
		nil,
		{CommonName: "member b, +x=y;\\\"<>#", Organization: []string{"Acme, Inc."}, OrganizationalUnit: []string{"dfs"}, Country: []string{"DE"}},
		{CommonName: " spaced ", SerialNumber: "42", ExtraNames: []pkix.AttributeTypeAndValue{{Type: email, Value: "ops@example.com"}}},
	} {
		name := "subject-" + string(rune('a'+i))
		src := load(t, issue(t, ca, filepath.Join(dir, name), name, testpki.Options{Subject: subject}))
		id, err := src.Identity()
		require.NoError(t, err)
		c, err := dialTLS(t, e.SecureAddrs(), src, []string{id}, 30*time.Second)
		require.NoError(t, err)
		p := "/tls-identity-" + name
		_, err = c.Conn().Create(p, []byte("x"), 0, c.ACL())
		require.NoError(t, err, "identity %q", id)
		acl, _, err := c.Conn().GetACL(p)
		require.NoError(t, err, "identity %q: ZooKeeper does not give this session that id", id)
		require.Equal(t, []zk.ACL{{Perms: zk.PermAll, Scheme: "x509", ID: id}}, acl)
		_, _, err = c.Conn().Get(p)
		require.NoError(t, err, "identity %q", id)
		t.Logf("identity checked against ZooKeeper: %s", id)
	}

	owner := load(t, issue(t, ca, filepath.Join(dir, "owner"), "room-owner", testpki.Options{}))
	ownerID, err := owner.Identity()
	require.NoError(t, err)
	oc, err := dialTLS(t, e.SecureAddrs(), owner, []string{ownerID}, 30*time.Second)
	require.NoError(t, err)
	require.Equal(t, X509ACL(zk.PermAll, ownerID), oc.ACL())
	ctx := testCtx(t, 30*time.Second)
	require.NoError(t, EnsurePath(ctx, oc, "/tls-acl/room/channels"))
	_, err = oc.Conn().Create("/tls-acl/room/channels/c1", []byte("secret"), 0, oc.ACL())
	require.NoError(t, err)

	intruder := load(t, issue(t, ca, filepath.Join(dir, "intruder"), "intruder", testpki.Options{}))
	ic, err := dialTLS(t, e.SecureAddrs(), intruder, nil, 30*time.Second)
	require.NoError(t, err, "the intruder holds a valid certificate of the CA")
	_, _, err = ic.Conn().Get("/tls-acl/room/channels/c1")
	require.ErrorIs(t, err, zk.ErrNoAuth)
	_, _, err = ic.Conn().Children("/tls-acl/room/channels")
	require.ErrorIs(t, err, zk.ErrNoAuth)
	_, err = ic.Conn().Create("/tls-acl/room/channels/c2", nil, 0, ic.ACL())
	require.ErrorIs(t, err, zk.ErrNoAuth)
	_, err = ic.Conn().Set("/tls-acl/room/channels/c1", nil, -1)
	require.ErrorIs(t, err, zk.ErrNoAuth)
	_, _, err = Get(ctx, ic, "/tls-acl/room/channels/c1")
	require.ErrorIs(t, err, zk.ErrNoAuth, "a definite answer, not retried")

	// A second identity in the ACL lets its holder in.
	both, err := dialTLS(t, e.SecureAddrs(), owner, []string{ownerID, "CN=intruder,O=roomlog-test"}, 30*time.Second)
	require.NoError(t, err)
	_, err = both.Conn().Create("/tls-acl/shared", []byte("s"), 0, both.ACL())
	require.NoError(t, err)
	_, _, err = ic.Conn().Get("/tls-acl/shared")
	require.NoError(t, err)
}

// TestTLSRotationKeepsSession: certificate files replaced while a client
// is connected reach its next connection, and the ZooKeeper session
// survives: after the link is cut the client reconnects in the same
// session, and the server now knows it by the new certificate's identity
// (a znode only the new identity may read is readable; one only the old
// identity may read is not).
func TestTLSRotationKeepsSession(t *testing.T) {
	e := tlsZK.Get(t)
	dir := t.TempDir()
	ca := e.TLSCA()
	files := issue(t, ca, dir, "member", testpki.Options{})
	src := load(t, files)
	oldID, err := src.Identity()
	require.NoError(t, err)
	tap, err := zkensemble.NewTap(e.SecureAddrs()[0])
	require.NoError(t, err)
	t.Cleanup(func() { _ = tap.Close() })
	c, err := Dial(testCtx(t, 30*time.Second), DialConfig{Servers: []string{tap.Addr()}, SessionTimeout: 10 * time.Second,
		TLS: src, TLSServerName: "127.0.0.1", AnyServer: true})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	sid := c.SessionID()
	newSubject := pkix.Name{CommonName: "member-rotated", Organization: []string{"roomlog-test"}}
	newID := "CN=member-rotated,O=roomlog-test"
	_, err = c.Conn().Create("/tls-rot-old", nil, 0, X509ACL(zk.PermAll, oldID))
	require.NoError(t, err)
	admin, err := dialTLS(t, e.SecureAddrs(), load(t, issue(t, ca, filepath.Join(dir, "admin"), "admin", testpki.Options{})), nil, 30*time.Second)
	require.NoError(t, err)
	_, err = admin.Conn().Create("/tls-rot-new", nil, 0, X509ACL(zk.PermAll, newID))
	require.NoError(t, err)
	_, _, err = c.Conn().Get("/tls-rot-new")
	require.ErrorIs(t, err, zk.ErrNoAuth, "before the rotation")

	// Rotate: a new certificate and key under the same file names.
	_ = issue(t, ca, dir, "member", testpki.Options{Subject: &newSubject})
	accepted := tap.Accepted()
	tap.Cut()
	require.Eventually(t, func() bool {
		return tap.Accepted() > accepted && c.State() == zk.StateHasSession
	}, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, sid, c.SessionID(), "the session survives the rotation")
	require.NoError(t, src.Err())
	_, _, err = c.Conn().Get("/tls-rot-new")
	require.NoError(t, err, "the new connection presented the new certificate")
	_, _, err = c.Conn().Get("/tls-rot-old")
	require.ErrorIs(t, err, zk.ErrNoAuth, "and no longer the old one")

	// Rotation to an expired certificate: refused by name, the last good
	// one stays in use, the session too.
	_ = issue(t, ca, dir, "member", testpki.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	accepted = tap.Accepted()
	tap.Cut()
	require.Eventually(t, func() bool {
		return tap.Accepted() > accepted && c.State() == zk.StateHasSession
	}, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, sid, c.SessionID())
	require.ErrorIs(t, src.Err(), tlsfiles.ErrExpired)
	require.ErrorContains(t, src.Err(), files.Cert)
	require.ErrorContains(t, src.Err(), "expired")
	_, _, err = c.Conn().Get("/tls-rot-new")
	require.NoError(t, err)
}

// TestTranslateNoAuth: a permission error says what it means and stays
// zk.ErrNoAuth.
func TestTranslateNoAuth(t *testing.T) {
	err := Translate("open room /r", zk.ErrNoAuth)
	require.ErrorIs(t, err, zk.ErrNoAuth)
	require.ErrorContains(t, err, "open room /r: zk: not authenticated (permission denied by the znode's ACL")
	require.ErrorContains(t, err, "certificate identity")
}

// TestTLSConfigValidate: the TLS fields are checked before anything is
// dialed, every bad one named.
func TestTLSConfigValidate(t *testing.T) {
	var nilSrc *tlsfiles.Source
	for _, tc := range []struct {
		name string
		cfg  DialConfig
		want string
	}{
		{"nil source", DialConfig{Servers: []string{"x:1"}, TLS: nilSrc}, "TLS holds a nil *tlsfiles.Source"},
		{"identities without TLS or Auth", DialConfig{Servers: []string{"x:1"}, ACLIdentities: []string{"CN=a"}}, "ACLIdentities without TLS or Auth"},
		{"empty identity", DialConfig{Servers: []string{"x:1"}, Auth: &Digest{User: "u"}, ACLIdentities: []string{" "}}, "ACLIdentities[0] is empty"},
		{"server name without TLS", DialConfig{Servers: []string{"x:1"}, TLSServerName: "zk"}, "TLSServerName \"zk\" without TLS"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			require.ErrorIs(t, err, ErrBadConfig)
			require.ErrorContains(t, err, tc.want)
		})
	}
	require.NoError(t, DialConfig{Servers: []string{"x:1"}, Auth: &Digest{User: "u"}, ACLIdentities: []string{"CN=a"}}.Validate())
	require.Equal(t, append(zk.DigestACL(zk.PermAll, "u", "p"), zk.ACL{Perms: zk.PermAll, Scheme: "x509", ID: "CN=a"}),
		buildACL(DialConfig{Auth: &Digest{User: "u", Password: "p"}, ACLIdentities: []string{"CN=a"}}))
	require.Equal(t, zk.WorldACL(zk.PermAll), buildACL(DialConfig{}))
}

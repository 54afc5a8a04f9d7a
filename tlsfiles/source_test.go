package tlsfiles_test

import (
	"crypto/tls"
	"crypto/x509/pkix"
	"encoding/asn1"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/tlsfiles"
)

func newCA(t *testing.T, name string) *testpki.CA {
	t.Helper()
	ca, err := testpki.NewCA(name)
	require.NoError(t, err)
	return ca
}

func issue(t *testing.T, ca *testpki.CA, dir, name string, o testpki.Options) tlsfiles.Files {
	t.Helper()
	f, err := ca.Issue(dir, name, o)
	require.NoError(t, err)
	return f
}

func TestLoadRefusals(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	other := newCA(t, "other")
	good := issue(t, ca, dir, "good", testpki.Options{})
	expired := issue(t, ca, dir, "expired", testpki.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	future := issue(t, ca, dir, "future", testpki.Options{NotBefore: time.Now().Add(time.Hour), NotAfter: time.Now().Add(48 * time.Hour)})
	foreign := issue(t, other, filepath.Join(dir, "other"), "foreign", testpki.Options{})
	second := issue(t, ca, dir, "second", testpki.Options{})
	notPEM := filepath.Join(dir, "garbage.pem")
	require.NoError(t, os.WriteFile(notPEM, []byte("hello"), 0o600))

	for _, tc := range []struct {
		name   string
		files  tlsfiles.Files
		reason error
		path   string
		text   string
	}{
		{"missing CA", tlsfiles.Files{CA: filepath.Join(dir, "nope.pem")}, tlsfiles.ErrMissing, filepath.Join(dir, "nope.pem"), "missing"},
		{"CA not PEM", tlsfiles.Files{CA: notPEM}, tlsfiles.ErrNotPEM, notPEM, "not PEM"},
		{"CA holds a key only", tlsfiles.Files{CA: good.Key}, tlsfiles.ErrNoCertificate, good.Key, "no certificate"},
		{"missing cert", tlsfiles.Files{CA: good.CA, Cert: filepath.Join(dir, "x.pem"), Key: good.Key}, tlsfiles.ErrMissing, filepath.Join(dir, "x.pem"), "missing"},
		{"cert not PEM", tlsfiles.Files{CA: good.CA, Cert: notPEM, Key: good.Key}, tlsfiles.ErrNotPEM, notPEM, "not PEM"},
		{"key not PEM", tlsfiles.Files{CA: good.CA, Cert: good.Cert, Key: notPEM}, tlsfiles.ErrNotPEM, notPEM, "not PEM"},
		{"key of another cert", tlsfiles.Files{CA: good.CA, Cert: good.Cert, Key: second.Key}, tlsfiles.ErrKeyMismatch, second.Key, "key does not match cert"},
		{"expired", expired, tlsfiles.ErrExpired, expired.Cert, "expired (NotAfter "},
		{"not yet valid", future, tlsfiles.ErrNotYetValid, future.Cert, "not yet valid (NotBefore "},
		{"other CA", tlsfiles.Files{CA: good.CA, Cert: foreign.Cert, Key: foreign.Key}, tlsfiles.ErrUntrusted, foreign.Cert, "not signed by the CA"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := tlsfiles.Load(tc.files)
			require.Error(t, err)
			require.ErrorIs(t, err, tc.reason)
			var fe *tlsfiles.FileError
			require.ErrorAs(t, err, &fe)
			require.Equal(t, tc.path, fe.Path)
			require.Contains(t, err.Error(), tc.path)
			require.Contains(t, err.Error(), tc.text)
		})
	}

	_, err := tlsfiles.Load(good)
	require.NoError(t, err)
	_, err = tlsfiles.Load(tlsfiles.Files{CA: good.CA})
	require.NoError(t, err, "a CA alone verifies servers")
	_, err = tlsfiles.Load(tlsfiles.Files{CA: good.CA, Cert: good.Cert})
	require.ErrorIs(t, err, tlsfiles.ErrBadConfig)
}

// handshake runs one TLS handshake between client and server configs
// over a pipe and returns each side's error.
func handshake(t *testing.T, client, server *tls.Config) (clientErr, serverErr error, peer *tls.ConnectionState) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	a, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer a.Close()
	b, err := ln.Accept()
	require.NoError(t, err)
	defer b.Close()
	_ = b.SetDeadline(time.Now().Add(5 * time.Second))
	srvDone := make(chan error, 1)
	var state tls.ConnectionState
	go func() {
		s := tls.Server(b, server)
		err := s.Handshake()
		if err == nil {
			state = s.ConnectionState()
			_, err = s.Write([]byte("x")) // completes a TLS 1.3 client's view of a refusal
		}
		srvDone <- err
		_ = s.Close()
	}()
	c := tls.Client(a, client)
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	clientErr = c.Handshake()
	if clientErr == nil {
		_, clientErr = io.ReadFull(c, make([]byte, 1))
	}
	_ = c.Close()
	serverErr = <-srvDone
	return clientErr, serverErr, &state
}

func TestHandshakes(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	other := newCA(t, "other")
	srvFiles := issue(t, ca, filepath.Join(dir, "a"), "server", testpki.Options{Server: true})
	cliFiles := issue(t, ca, filepath.Join(dir, "a"), "client", testpki.Options{Client: true})
	foreignFiles := issue(t, other, filepath.Join(dir, "b"), "client", testpki.Options{})
	srv, err := tlsfiles.Load(srvFiles)
	require.NoError(t, err)
	cli, err := tlsfiles.Load(cliFiles)
	require.NoError(t, err)
	foreign, err := tlsfiles.Load(foreignFiles)
	require.NoError(t, err)
	verifyOnly, err := tlsfiles.Load(tlsfiles.Files{CA: cliFiles.CA})
	require.NoError(t, err)

	t.Run("mutual", func(t *testing.T) {
		ce, se, st := handshake(t, cli.ClientConfig("127.0.0.1"), srv.ServerConfig(tls.RequireAndVerifyClientCert))
		require.NoError(t, ce)
		require.NoError(t, se)
		require.Equal(t, "client", st.PeerCertificates[0].Subject.CommonName)
	})
	t.Run("wrong host name", func(t *testing.T) {
		ce, _, _ := handshake(t, cli.ClientConfig("zk.example.com"), srv.ServerConfig(tls.RequireAndVerifyClientCert))
		require.ErrorIs(t, ce, tlsfiles.ErrPeerUntrusted)
		require.Contains(t, ce.Error(), "zk.example.com")
	})
	t.Run("no server name", func(t *testing.T) {
		ce, _, _ := handshake(t, cli.ClientConfig(""), srv.ServerConfig(tls.RequireAndVerifyClientCert))
		require.ErrorIs(t, ce, tlsfiles.ErrPeerUntrusted)
	})
	t.Run("server of another CA", func(t *testing.T) {
		ce, _, _ := handshake(t, cli.ClientConfig("127.0.0.1"), foreign.ServerConfig(tls.NoClientCert))
		require.ErrorIs(t, ce, tlsfiles.ErrPeerUntrusted)
		require.Contains(t, ce.Error(), cliFiles.CA, "names the CA file")
		require.Contains(t, ce.Error(), "unknown authority")
	})
	t.Run("client of another CA", func(t *testing.T) {
		fc, err := tlsfiles.Load(tlsfiles.Files{CA: cliFiles.CA, Cert: foreignFiles.Cert, Key: foreignFiles.Key})
		require.ErrorIs(t, err, tlsfiles.ErrUntrusted, "Load itself refuses a cert the CA did not sign")
		require.Nil(t, fc)
		// A client of the other CA that trusts ours too: only the
		// server's check can fail.
		both := filepath.Join(dir, "both.pem")
		require.NoError(t, testpki.WriteFile(both, append(append([]byte{}, ca.PEM...), other.PEM...)))
		fc, err = tlsfiles.Load(tlsfiles.Files{CA: both, Cert: foreignFiles.Cert, Key: foreignFiles.Key})
		require.NoError(t, err)
		ce, se, _ := handshake(t, fc.ClientConfig("127.0.0.1"), srv.ServerConfig(tls.RequireAndVerifyClientCert))
		require.Error(t, ce)
		require.ErrorIs(t, se, tlsfiles.ErrPeerUntrusted)
	})
	t.Run("client without certificate", func(t *testing.T) {
		ce, se, _ := handshake(t, verifyOnly.ClientConfig("127.0.0.1"), srv.ServerConfig(tls.RequireAndVerifyClientCert))
		require.Error(t, ce)
		require.ErrorContains(t, se, "didn't provide a certificate")
		ce, se, _ = handshake(t, verifyOnly.ClientConfig("127.0.0.1"), srv.ServerConfig(tls.VerifyClientCertIfGiven))
		require.NoError(t, ce)
		require.NoError(t, se)
	})
}

func TestRotation(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	files := issue(t, ca, dir, "member", testpki.Options{})
	now := time.Now()
	clock := now
	src, err := tlsfiles.LoadWithOptions(files, tlsfiles.Options{Now: func() time.Time { return clock }})
	require.NoError(t, err)
	first := src.Certificate()

	// A new certificate and key under the same names.
	issue(t, ca, dir, "member", testpki.Options{})
	require.Equal(t, first.SerialNumber, src.Certificate().SerialNumber, "checked at most every second")
	clock = clock.Add(1100 * time.Millisecond)
	second := src.Certificate()
	require.NotEqual(t, first.SerialNumber, second.SerialNumber, "rotation picked up without a new Source")
	require.NoError(t, src.Err())

	// A handshake after the rotation presents the new certificate.
	srvFiles := issue(t, ca, filepath.Join(dir, "srv"), "server", testpki.Options{})
	srv, err := tlsfiles.Load(srvFiles)
	require.NoError(t, err)
	cfg := src.ClientConfig("127.0.0.1")
	_, _, st := handshake(t, cfg, srv.ServerConfig(tls.RequireAndVerifyClientCert))
	require.Equal(t, second.SerialNumber, st.PeerCertificates[0].SerialNumber)

	// Rotation to broken files: the last good material stays, the
	// error names the file and the reason.
	require.NoError(t, testpki.WriteFile(files.Key, []byte("not a key")))
	clock = clock.Add(1100 * time.Millisecond)
	require.Equal(t, second.SerialNumber, src.Certificate().SerialNumber)
	require.ErrorIs(t, src.Err(), tlsfiles.ErrNotPEM)
	require.Contains(t, src.Err().Error(), files.Key)
	_, _, st = handshake(t, cfg, srv.ServerConfig(tls.RequireAndVerifyClientCert))
	require.Equal(t, second.SerialNumber, st.PeerCertificates[0].SerialNumber, "never serves garbage")

	// An expired certificate is refused the same way.
	issue(t, ca, dir, "member", testpki.Options{NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)})
	clock = clock.Add(1100 * time.Millisecond)
	require.Equal(t, second.SerialNumber, src.Certificate().SerialNumber)
	require.ErrorIs(t, src.Err(), tlsfiles.ErrExpired)
	require.Contains(t, src.Err().Error(), files.Cert)

	// Mended: picked up again.
	issue(t, ca, dir, "member", testpki.Options{})
	require.NoError(t, src.Reload())
	require.NotEqual(t, second.SerialNumber, src.Certificate().SerialNumber)
	require.NoError(t, src.Err())

	// The CA rotates too: a server certificate of a new CA is trusted
	// once the CA file holds it.
	ca2 := newCA(t, "ca2")
	srv2Files := issue(t, ca2, filepath.Join(dir, "srv2"), "server", testpki.Options{})
	srv2, err := tlsfiles.Load(srv2Files)
	require.NoError(t, err)
	ce, _, _ := handshake(t, cfg, srv2.ServerConfig(tls.NoClientCert))
	require.ErrorIs(t, ce, tlsfiles.ErrPeerUntrusted)
	require.NoError(t, testpki.WriteFile(files.CA, append(append([]byte{}, ca.PEM...), ca2.PEM...)))
	clock = clock.Add(1100 * time.Millisecond)
	ce, _, _ = handshake(t, cfg, srv2.ServerConfig(tls.NoClientCert))
	require.NoError(t, ce)
}

func TestSubjectName(t *testing.T) {
	email := asn1.ObjectIdentifier{1, 2, 840, 113549, 1, 9, 1}
	for _, tc := range []struct {
		name    string
		subject pkix.Name
		want    string
	}{
		{"plain", pkix.Name{CommonName: "member-a", Organization: []string{"roomlog-test"}}, "CN=member-a,O=roomlog-test"},
		{"full", pkix.Name{Country: []string{"DE"}, Organization: []string{"Acme"}, OrganizationalUnit: []string{"dfs"}, CommonName: "m1"},
			"CN=m1,OU=dfs,O=Acme,C=DE"},
		{"escapes", pkix.Name{CommonName: ` a,b+c=d#e;f"g\h<i>j `}, `CN=\ a\,b\+c\=d\#e\;f\"g\\h\<i\>j\ `},
		{"serial number is an OID", pkix.Name{CommonName: "x", SerialNumber: "42"}, "2.5.4.5=#13023432,CN=x"},
		{"email is an OID", pkix.Name{CommonName: "x", ExtraNames: []pkix.AttributeTypeAndValue{{Type: email, Value: "a@b"}}},
			"1.2.840.113549.1.9.1=#0c03614062,CN=x"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ca := newCA(t, "ca")
			subject := tc.subject
			c, err := ca.Make("x", testpki.Options{Subject: &subject})
			require.NoError(t, err)
			got, err := tlsfiles.SubjectName(c.Cert)
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestIdentity(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	src, err := tlsfiles.Load(issue(t, ca, dir, "member-a", testpki.Options{}))
	require.NoError(t, err)
	id, err := src.Identity()
	require.NoError(t, err)
	require.Equal(t, "CN=member-a,O=roomlog-test", id)
	verify, err := tlsfiles.Load(tlsfiles.Files{CA: filepath.Join(dir, "ca.pem")})
	require.NoError(t, err)
	_, err = verify.Identity()
	require.True(t, errors.Is(err, tlsfiles.ErrNoCertificateConfigured))
}

// TestExpiresInUse: a certificate that expires while in use (no new
// files) is reported by Err, naming the file and "expired"; it stays the
// one presented until the files are replaced.
func TestExpiresInUse(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	now := time.Now()
	files := issue(t, ca, dir, "member", testpki.Options{NotAfter: now.Add(time.Hour)})
	clock := now
	src, err := tlsfiles.LoadWithOptions(files, tlsfiles.Options{Now: func() time.Time { return clock }})
	require.NoError(t, err)
	leaf := src.Certificate()
	clock = clock.Add(2 * time.Hour)
	require.Equal(t, leaf.SerialNumber, src.Certificate().SerialNumber)
	require.ErrorIs(t, src.Err(), tlsfiles.ErrExpired)
	require.ErrorContains(t, src.Err(), files.Cert)
	issue(t, ca, dir, "member", testpki.Options{NotAfter: now.Add(48 * time.Hour)})
	clock = clock.Add(2 * time.Second)
	require.NotEqual(t, leaf.SerialNumber, src.Certificate().SerialNumber)
	require.NoError(t, src.Err())
}

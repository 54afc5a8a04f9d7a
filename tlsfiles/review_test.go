package tlsfiles_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/tlsfiles"
)

// TestNotYetValidRetried: a rotated certificate refused as not yet valid
// (its NotBefore a little ahead: the issuer's clock is ahead of ours) is
// read again, with the files unchanged, and adopted once it is valid.
// Before the fix only a change of the files' stamps caused a read, so it
// was never adopted.
func TestNotYetValidRetried(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	files := issue(t, ca, dir, "m", testpki.Options{})
	clock := time.Now()
	src, err := tlsfiles.LoadWithOptions(files, tlsfiles.Options{Now: func() time.Time { return clock }})
	require.NoError(t, err)
	first := src.Certificate()
	issue(t, ca, dir, "m", testpki.Options{NotBefore: clock.Add(5 * time.Second), NotAfter: clock.Add(48 * time.Hour)})
	clock = clock.Add(1100 * time.Millisecond)
	require.Equal(t, first.SerialNumber, src.Certificate().SerialNumber)
	require.ErrorIs(t, src.Err(), tlsfiles.ErrNotYetValid)

	clock = clock.Add(2 * time.Second) // still 2 s early: refused again, kept
	require.Equal(t, first.SerialNumber, src.Certificate().SerialNumber)
	require.ErrorIs(t, src.Err(), tlsfiles.ErrNotYetValid)

	clock = clock.Add(3 * time.Second) // valid now, the files unchanged
	got := src.Certificate()
	require.NotEqual(t, first.SerialNumber, got.SerialNumber, "the now valid certificate is adopted")
	require.NoError(t, src.Err())
}

// TestExpiryInUseReportedWhileRotationRefused: the certificate in use
// expires while the new files are refused (here: not yet valid). Err
// reports both, the expiry of the material in use first. Before the fix
// the refused read hid the expiry (checkInUse returned early).
func TestExpiryInUseReportedWhileRotationRefused(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	now := time.Now()
	files := issue(t, ca, dir, "m", testpki.Options{NotAfter: now.Add(time.Hour)})
	clock := now
	src, err := tlsfiles.LoadWithOptions(files, tlsfiles.Options{Now: func() time.Time { return clock }})
	require.NoError(t, err)
	first := src.Certificate()
	issue(t, ca, dir, "m", testpki.Options{NotBefore: now.Add(3 * time.Hour), NotAfter: now.Add(48 * time.Hour)})
	clock = clock.Add(1100 * time.Millisecond)
	require.Equal(t, first.SerialNumber, src.Certificate().SerialNumber)
	require.ErrorIs(t, src.Err(), tlsfiles.ErrNotYetValid)
	require.NotErrorIs(t, src.Err(), tlsfiles.ErrExpired)

	clock = now.Add(2 * time.Hour) // the one in use expired; the new one still early
	require.Equal(t, first.SerialNumber, src.Certificate().SerialNumber)
	require.ErrorIs(t, src.Err(), tlsfiles.ErrExpired, "the expiry of the certificate in use is reported")
	require.ErrorIs(t, src.Err(), tlsfiles.ErrNotYetValid, "and why the new files are refused")
	require.ErrorContains(t, src.Err(), "in use")

	clock = now.Add(3*time.Hour + time.Second) // the new one is valid: adopted
	require.NotEqual(t, first.SerialNumber, src.Certificate().SerialNumber)
	require.NoError(t, src.Err())
}

func expiredCAPEM(t *testing.T, name string) []byte {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(7), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
}

// TestBundleWithExpiredCA: after a CA rotation ca.pem holds the old CA
// (now expired) beside the new one. The expired one is left out of the
// pool; the files load and peers of the valid CA verify. Before the fix
// the whole CA file was refused (no rotation, no restart). A file whose
// CAs are all expired is refused, naming the certificate.
func TestBundleWithExpiredCA(t *testing.T) {
	dir := t.TempDir()
	ca := newCA(t, "ca")
	files := issue(t, ca, dir, "m", testpki.Options{})
	require.NoError(t, testpki.WriteFile(files.CA, append(expiredCAPEM(t, "old-ca"), ca.PEM...)))
	src, err := tlsfiles.Load(files)
	require.NoError(t, err, "a bundle with one expired CA loads")
	require.NoError(t, src.Err())

	srvFiles := issue(t, ca, filepath.Join(dir, "srv"), "server", testpki.Options{})
	srv, err := tlsfiles.Load(srvFiles)
	require.NoError(t, err)
	ce, se, _ := handshake(t, src.ClientConfig("127.0.0.1"), srv.ServerConfig(tls.RequireAndVerifyClientCert))
	require.NoError(t, ce)
	require.NoError(t, se)

	onlyOld := filepath.Join(dir, "old.pem")
	require.NoError(t, testpki.WriteFile(onlyOld, append(expiredCAPEM(t, "old-ca"), expiredCAPEM(t, "older-ca")...)))
	_, err = tlsfiles.Load(tlsfiles.Files{CA: onlyOld})
	require.ErrorIs(t, err, tlsfiles.ErrExpired)
	require.ErrorContains(t, err, onlyOld)
	require.ErrorContains(t, err, "CN=old-ca")
	require.ErrorContains(t, err, "CN=older-ca")
}

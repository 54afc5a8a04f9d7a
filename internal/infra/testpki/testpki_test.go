package testpki_test

import (
	"crypto/tls"
	"crypto/x509"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
)

func TestIssue(t *testing.T) {
	dir := t.TempDir()
	ca, err := testpki.NewCA("test-ca")
	require.NoError(t, err)
	f, err := ca.Issue(dir, "zk0", testpki.Options{Server: true, Hosts: []string{"127.0.0.1", "zk0.example"}})
	require.NoError(t, err)
	pair, err := tls.LoadX509KeyPair(f.Cert, f.Key)
	require.NoError(t, err, "the key matches the certificate")
	leaf, err := x509.ParseCertificate(pair.Certificate[0])
	require.NoError(t, err)
	pool := x509.NewCertPool()
	caPEM, err := os.ReadFile(f.CA)
	require.NoError(t, err)
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "zk0.example"})
	require.NoError(t, err)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"})
	require.NoError(t, err)
	_, err = leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}})
	require.Error(t, err, "a server-only certificate is no client certificate")
	key, err := os.ReadFile(f.Key)
	require.NoError(t, err)
	require.Contains(t, string(key), "-----BEGIN PRIVATE KEY-----", "PKCS#8, as ZooKeeper's PEM key store reads it")

	past := time.Now().Add(-time.Hour)
	c, err := ca.Make("old", testpki.Options{NotBefore: past.Add(-time.Hour), NotAfter: past})
	require.NoError(t, err)
	require.True(t, c.Cert.NotAfter.Before(time.Now()))
	require.Equal(t, "old", c.Cert.Subject.CommonName)
}

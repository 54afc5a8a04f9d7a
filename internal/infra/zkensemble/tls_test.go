package zkensemble

import (
	"bufio"
	"crypto/tls"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/tlsfiles"
)

// srvrOverTLS sends srvr over a TLS connection to addr and returns the
// reply, or the handshake's or read's error.
func srvrOverTLS(t *testing.T, cfg *tls.Config, addr string) (string, error) {
	t.Helper()
	d := &tls.Dialer{Config: cfg}
	c, err := d.DialContext(t.Context(), "tcp", addr)
	if err != nil {
		return "", err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "srvr"); err != nil {
		return "", err
	}
	b, err := io.ReadAll(bufio.NewReader(c))
	return string(b), err
}

// TestTLSPort: with Options.TLS every server has a secureClientPort that
// speaks TLS with certificates of the ensemble's CA and accepts only
// clients with a certificate of that CA (ssl.clientAuth=need); the
// plaintext port stays for the harness.
func TestTLSPort(t *testing.T) {
	e := ForTest(t, Options{TLS: &TLSOptions{}})
	require.Len(t, e.SecureAddrs(), 1)
	require.NotEqual(t, e.Addrs()[0], e.SecureAddrs()[0])
	require.Equal(t, 0, e.IndexOf(e.SecureAddrs()[0]))
	ca := e.TLSCA()
	require.NotNil(t, ca)
	dir := t.TempDir()
	files, err := ca.Issue(dir, "client", testpki.Options{Client: true})
	require.NoError(t, err)
	src, err := tlsfiles.Load(files)
	require.NoError(t, err)

	out, err := srvrOverTLS(t, src.ClientConfig("127.0.0.1"), e.SecureAddrs()[0])
	require.NoError(t, err)
	require.Contains(t, out, "Mode: standalone", "four-letter words work over TLS too")

	verifyOnly, err := tlsfiles.Load(tlsfiles.Files{CA: files.CA})
	require.NoError(t, err)
	out, err = srvrOverTLS(t, verifyOnly.ClientConfig("127.0.0.1"), e.SecureAddrs()[0])
	require.Error(t, err, "a client without a certificate is refused (got %q)", out)

	other, err := testpki.NewCA("other")
	require.NoError(t, err)
	otherFiles, err := other.Issue(filepath.Join(dir, "other"), "client", testpki.Options{})
	require.NoError(t, err)
	foreign, err := tlsfiles.Load(otherFiles)
	require.NoError(t, err)
	_, err = srvrOverTLS(t, foreign.ClientConfig("127.0.0.1"), e.SecureAddrs()[0])
	require.ErrorIs(t, err, tlsfiles.ErrPeerUntrusted, "the server's certificate is of the ensemble's CA")

	m, err := e.Mode(t.Context(), 0)
	require.NoError(t, err)
	require.Equal(t, "standalone", m)
	cfg, err := readFileString(filepath.Join(e.Dir(), "server-0", "zoo.cfg"))
	require.NoError(t, err)
	require.Contains(t, cfg, "ssl.clientAuth=need")
}

func readFileString(p string) (string, error) {
	b, err := os.ReadFile(p)
	return strings.TrimSpace(string(b)), err
}

// TestTLSQuorum: with TLSOptions.Quorum a 3-server ensemble forms its
// quorum over TLS (each server logs that it uses it), serves TLS clients,
// and a restarted server rejoins.
func TestTLSQuorum(t *testing.T) {
	e := ForTest(t, Options{Servers: 3, TLS: &TLSOptions{Quorum: true}})
	for i := 0; i < 3; i++ {
		log, err := os.ReadFile(e.LogPath(i))
		require.NoError(t, err)
		require.Contains(t, string(log), "Using TLS encrypted quorum communication", "server %d", i)
	}
	dir := t.TempDir()
	files, err := e.TLSCA().Issue(dir, "client", testpki.Options{Client: true})
	require.NoError(t, err)
	src, err := tlsfiles.Load(files)
	require.NoError(t, err)
	for _, a := range e.SecureAddrs() {
		out, err := srvrOverTLS(t, src.ClientConfig("127.0.0.1"), a)
		require.NoError(t, err)
		require.Contains(t, out, "Mode: ")
	}
	leader, err := e.Leader(t.Context())
	require.NoError(t, err)
	require.NoError(t, e.Kill(leader))
	_, err = e.Leader(t.Context())
	require.NoError(t, err, "the two others elect a leader over TLS")
	require.NoError(t, e.Start(t.Context(), leader))
}

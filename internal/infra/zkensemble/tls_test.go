package zkensemble

import (
	"bufio"
	"crypto/tls"
	"io"
	"net"
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

// TestTLSQuorum: a 3-server TLS ensemble forms its
// quorum over TLS (each server logs that it uses it), serves TLS clients,
// and a restarted server rejoins.
func TestTLSQuorum(t *testing.T) {
	e := ForTest(t, Options{Servers: 3, TLS: &TLSOptions{}})
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

// TestTLSClasspath: a TLS server on the Debian package gets the Netty
// jars zookeeper.jar's manifest leaves out, and missing ones make the
// ensemble unavailable by name; a tarball's lib/ is taken as it is.
func TestTLSClasspath(t *testing.T) {
	dir := t.TempDir()
	jar := filepath.Join(dir, "netty-codec.jar")
	require.NoError(t, os.WriteFile(jar, nil, 0o644))
	deb := install{classpath: []string{"/usr/share/java/zookeeper.jar"}, source: "/usr/share/java/zookeeper.jar"}
	cp, err := tlsClasspathWith(deb, []string{jar})
	require.NoError(t, err)
	require.Equal(t, []string{"/usr/share/java/zookeeper.jar", jar}, cp)
	missing := filepath.Join(dir, "netty-resolver.jar")
	_, err = tlsClasspathWith(deb, []string{jar, missing})
	require.ErrorIs(t, err, ErrUnavailable)
	require.ErrorContains(t, err, missing)
	require.ErrorContains(t, err, "libnetty-java")
	tarball := install{classpath: []string{"/zk/lib/zookeeper-3.8.4.jar"}, source: "ZOOKEEPER_HOME=/zk"}
	cp, err = tlsClasspathWith(tarball, []string{missing})
	require.NoError(t, err)
	require.Equal(t, tarball.classpath, cp)

	_, err = Options{TLS: &TLSOptions{ClientAuth: "always"}}.withDefaults()
	require.ErrorIs(t, err, ErrBadOptions)
	require.ErrorContains(t, err, `TLS.ClientAuth="always"`)
}

// TestTap: the tap forwards both ways, records what it forwarded, and Cut
// closes the connections through it while it keeps accepting.
func TestTap(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() { // an echo server
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); _ = c.Close() }()
		}
	}()
	tap, err := NewTap(ln.Addr().String())
	require.NoError(t, err)
	defer tap.Close()
	c, err := net.Dial("tcp", tap.Addr())
	require.NoError(t, err)
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	_, err = io.WriteString(c, "secret-needle")
	require.NoError(t, err)
	buf := make([]byte, len("secret-needle"))
	_, err = io.ReadFull(c, buf)
	require.NoError(t, err)
	require.Equal(t, "secret-needle", string(buf))
	require.True(t, tap.Contains([]byte("secret-needle")))
	require.False(t, tap.Contains([]byte("absent")))
	require.Equal(t, 2*len(buf), tap.Seen())
	require.Equal(t, 1, tap.Accepted())
	tap.Cut()
	_, err = c.Read(buf)
	require.Error(t, err, "cut")
	c2, err := net.Dial("tcp", tap.Addr())
	require.NoError(t, err)
	defer c2.Close()
	require.Eventually(t, func() bool { return tap.Accepted() == 2 }, 5*time.Second, 10*time.Millisecond)
}

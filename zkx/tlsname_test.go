package zkx

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/tlsfiles"
)

// tlsListener is a TLS server on 127.0.0.1 with a certificate of ca for
// hosts only, requiring a client certificate of ca. Each connection that
// completes its handshake is counted and passed to serve (nil: closed
// after a moment, as a server that is not ZooKeeper).
type tlsListener struct {
	ln         net.Listener
	handshakes atomic.Int64
	wg         sync.WaitGroup
}

func newTLSListener(t *testing.T, ca *testpki.CA, hosts []string, serve func(net.Conn)) *tlsListener {
	t.Helper()
	dir := t.TempDir()
	f, err := ca.Issue(dir, "zk-server", testpki.Options{Server: true, Hosts: hosts})
	require.NoError(t, err)
	src := load(t, f)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l := &tlsListener{ln: ln}
	t.Cleanup(func() { _ = ln.Close(); l.wg.Wait() })
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				tc := tls.Server(c, src.ServerConfig(tls.RequireAndVerifyClientCert))
				_ = tc.SetDeadline(time.Now().Add(5 * time.Second))
				if err := tc.Handshake(); err != nil {
					_ = c.Close()
					return
				}
				_ = tc.SetDeadline(time.Time{})
				l.handshakes.Add(1)
				if serve == nil {
					time.Sleep(50 * time.Millisecond)
					_ = c.Close()
					return
				}
				serve(tc)
			}()
		}
	}()
	return l
}

func (l *tlsListener) port() string {
	_, p, _ := net.SplitHostPort(l.ln.Addr().String())
	return p
}

// TestTLSVerifiesConfiguredHostName: a server whose certificate names
// only the DNS name the configuration wrote ("localhost") is verified
// against that name, not the address it resolved to, with either host
// provider (leader first, AnyServer); a configured IP address is checked
// as the IP (not in that certificate: refused), and so is another
// TLSServerName. Before the fix the resolved IP was checked and every
// handshake failed.
func TestTLSVerifiesConfiguredHostName(t *testing.T) {
	ca, err := testpki.NewCA("name-ca")
	require.NoError(t, err)
	l := newTLSListener(t, ca, []string{"localhost"}, nil)
	cli := load(t, issue(t, ca, filepath.Join(t.TempDir(), "cli"), "cli", testpki.Options{Client: true}))
	for _, anyServer := range []bool{false, true} {
		before := l.handshakes.Load()
		_, err := Dial(testCtx(t, 1500*time.Millisecond), DialConfig{Servers: []string{"localhost:" + l.port()},
			SessionTimeout: 2 * time.Second, TLS: cli, AnyServer: anyServer})
		require.Error(t, err, "not a ZooKeeper server: no session")
		require.NotErrorIs(t, err, ErrTLS, "AnyServer=%v", anyServer)
		require.Greater(t, l.handshakes.Load(), before, "AnyServer=%v: the handshake checked the name localhost", anyServer)
	}
	for _, tc := range []struct {
		name, server, serverName, text string
	}{
		{"configured IP", "127.0.0.1:" + l.port(), "", `server name "127.0.0.1"`},
		{"server name mismatch", "localhost:" + l.port(), "zk.example.com", `server name "zk.example.com"`},
	} {
		for _, anyServer := range []bool{false, true} {
			_, err := Dial(testCtx(t, 1500*time.Millisecond), DialConfig{Servers: []string{tc.server},
				SessionTimeout: 2 * time.Second, TLS: cli, TLSServerName: tc.serverName, AnyServer: anyServer})
			require.ErrorIs(t, err, ErrTLS, "%s AnyServer=%v", tc.name, anyServer)
			require.ErrorIs(t, err, tlsfiles.ErrPeerUntrusted, "%s AnyServer=%v", tc.name, anyServer)
			require.ErrorContains(t, err, tc.text)
		}
	}
}

// TestTLSProbeUsesConfiguredHostName: the leader probe's TLS handshake
// (srvr over TLS) checks the configured host too.
func TestTLSProbeUsesConfiguredHostName(t *testing.T) {
	ca, err := testpki.NewCA("probe-ca")
	require.NoError(t, err)
	srvr := func(c net.Conn) {
		defer c.Close()
		buf := make([]byte, 4)
		if _, err := io.ReadFull(c, buf); err == nil && string(buf) == "srvr" {
			_, _ = io.WriteString(c, "Zookeeper version: test\nMode: leader\n")
		}
	}
	l := newTLSListener(t, ca, []string{"localhost"}, srvr)
	cli := load(t, issue(t, ca, filepath.Join(t.TempDir(), "cli"), "cli", testpki.Options{Client: true}))
	names := &hostNames{}
	conn := &connector{tls: cli, names: names, bound: time.Second, log: discardLogger(nil)}
	h := newLeaderFirst(discardLogger(nil), conn.probeConn, names)
	require.NoError(t, h.Init([]string{"localhost:" + l.port()}))
	addr := "127.0.0.1:" + l.port()
	require.Equal(t, []string{addr}, h.servers)
	require.Equal(t, "localhost", conn.name(addr))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	mode, err := serverModeWith(ctx, addr, conn.probeConn)
	require.NoError(t, err)
	require.Equal(t, "leader", mode)

	// go-zookeeper's own provider, wrapped, knows the name as well.
	names2 := &hostNames{}
	d := newNamedDNSHosts(names2)
	require.NoError(t, d.Init([]string{"localhost:" + l.port()}))
	s, _ := d.Next()
	require.Equal(t, addr, s)
	c2 := &connector{tls: cli, names: names2}
	require.Equal(t, "localhost", c2.name(addr))
	// An address no configured name resolved to keeps its own host.
	require.Equal(t, "10.1.2.3", c2.name("10.1.2.3:2281"))
}

// TestTLSConfiguredHostNameZooKeeper: a real ZooKeeper session over TLS
// to "localhost:<port>" whose certificate names only localhost (a TLS
// front of the test ensemble: the server's own certificate also names
// 127.0.0.1), with both host providers; another TLSServerName is refused.
func TestTLSConfiguredHostNameZooKeeper(t *testing.T) {
	e := tlsZK.Get(t)
	ca := e.TLSCA()
	zkAddr := e.Addrs()[0]
	var wg sync.WaitGroup
	t.Cleanup(wg.Wait)
	front := newTLSListener(t, ca, []string{"localhost"}, func(c net.Conn) {
		defer c.Close()
		up, err := net.Dial("tcp", zkAddr)
		if err != nil {
			return
		}
		defer up.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, _ = io.Copy(up, c)
			_ = up.Close()
		}()
		_, _ = io.Copy(c, up)
	})
	cli := load(t, issue(t, ca, filepath.Join(t.TempDir(), "cli"), "cli", testpki.Options{Client: true}))
	for _, anyServer := range []bool{false, true} {
		c, err := Dial(testCtx(t, 30*time.Second), DialConfig{Servers: []string{"localhost:" + front.port()},
			SessionTimeout: 4 * time.Second, TLS: cli, AnyServer: anyServer})
		require.NoError(t, err, "AnyServer=%v", anyServer)
		_, _, err = c.Conn().Exists("/")
		require.NoError(t, err)
		c.Close()
	}
	_, err := Dial(testCtx(t, 3*time.Second), DialConfig{Servers: []string{"localhost:" + front.port()},
		TLS: cli, TLSServerName: "zk.example.com"})
	require.ErrorIs(t, err, ErrTLS)
	require.ErrorIs(t, err, tlsfiles.ErrPeerUntrusted)
	require.ErrorContains(t, err, "zk.example.com")
}

package main

import (
	"crypto/tls"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/tlsfiles"
)

// TestZKTLSUnreachableSaysWhy: a ZooKeeper address that answers TLS
// with a certificate of another CA: the tool gives up after --timeout and
// says why (the TLS refusal, the CA file it checked against), not only
// "no session". Before the fix the deadline case matched first and the
// reason was dropped.
func TestZKTLSUnreachableSaysWhy(t *testing.T) {
	dir := t.TempDir()
	other, err := testpki.NewCA("other-ca")
	require.NoError(t, err)
	srvFiles, err := other.Issue(filepath.Join(dir, "srv"), "zk", testpki.Options{Server: true})
	require.NoError(t, err)
	srv, err := tlsfiles.Load(srvFiles)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	done := make(chan struct{})
	t.Cleanup(func() { _ = ln.Close(); <-done })
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			tc := tls.Server(c, srv.ServerConfig(tls.NoClientCert))
			_ = tc.SetDeadline(time.Now().Add(2 * time.Second))
			_ = tc.Handshake()
			_ = c.Close()
		}
	}()

	ca, err := testpki.NewCA("ours")
	require.NoError(t, err)
	ours, err := ca.Issue(filepath.Join(dir, "ops"), "ops", testpki.Options{})
	require.NoError(t, err)
	code, _, errs := (&cli{t: t, zk: ln.Addr().String(), base: "/x",
		extra: []string{"--timeout", "1500ms", "--zk-tls-ca", ours.CA, "--zk-tls-cert", ours.Cert, "--zk-tls-key", ours.Key}}).run("rooms")
	require.Equal(t, exitUnreachable, code, errs)
	require.Contains(t, errs, "cannot reach ZooKeeper at "+ln.Addr().String())
	require.Contains(t, errs, "no session within 1.5s (--timeout)")
	require.Contains(t, errs, "TLS handshake with ZooKeeper failed")
	require.Contains(t, errs, ours.CA, "names the CA file")
	t.Log(errs)
}

package main

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/tlsfiles"
)

// TestZKTLSFlags: the tool reaches a room with x509 ACLs over ZooKeeper's
// TLS port with --zk-tls-ca/--zk-tls-cert/--zk-tls-key of an identity the
// ACL names; another identity gets the permission error naming the way
// out; an expired certificate is refused before dialing, naming the file
// and "expired"; a missing key is a usage error.
func TestZKTLSFlags(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{TLS: &zkensemble.TLSOptions{}})
	ca := e.TLSCA()
	dir := t.TempDir()
	issue := func(name string, o testpki.Options) tlsfiles.Files {
		f, err := ca.Issue(filepath.Join(dir, name), name, o)
		require.NoError(t, err)
		return f
	}
	ops := issue("ops", testpki.Options{})
	src, err := tlsfiles.Load(ops)
	require.NoError(t, err)
	id, err := src.Identity()
	require.NoError(t, err)
	owner, err := logroom.Dial(testCtx(t, 30*time.Second), logroom.DialConfig{Servers: e.SecureAddrs(), TLS: src, ACLIdentities: []string{id}})
	require.NoError(t, err)
	t.Cleanup(owner.Close)
	buildRoom(t, owner, "/x509", "locked", false)

	cl := &cli{t: t, zk: e.SecureConnString(), base: "/x509",
		extra: []string{"--zk-tls-ca", ops.CA, "--zk-tls-cert", ops.Cert, "--zk-tls-key", ops.Key}}
	require.Contains(t, cl.ok("verify", "locked"), `OK room "locked"`)
	require.Len(t, parseDump(t, cl.ok("dump", "locked")), 34)

	other := issue("other", testpki.Options{})
	code, _, errs := (&cli{t: t, zk: e.SecureConnString(), base: "/x509",
		extra: []string{"--zk-tls-ca", other.CA, "--zk-tls-cert", other.Cert, "--zk-tls-key", other.Key}}).run("channels", "locked")
	require.Equal(t, exitDenied, code)
	require.Contains(t, errs, "zk: not authenticated")
	require.Contains(t, errs, "--zk-tls-* with a certificate whose identity the ACL names")

	expired := issue("expired", testpki.Options{NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	code, _, errs = (&cli{t: t, zk: e.SecureConnString(), base: "/x509",
		extra: []string{"--zk-tls-ca", expired.CA, "--zk-tls-cert", expired.Cert, "--zk-tls-key", expired.Key}}).run("rooms")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errs, expired.Cert)
	require.Contains(t, errs, "expired (NotAfter ")

	code, _, errs = (&cli{t: t, zk: e.SecureConnString(), base: "/x509",
		extra: []string{"--zk-tls-ca", ops.CA, "--zk-tls-cert", ops.Cert}}).run("rooms")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errs, "give both or neither")

	// reseed takes the same flags (its own flag set).
	code, _, errs = (&cli{t: t, zk: e.SecureConnString(), base: "/x509",
		extra: []string{"--zk-tls-ca", expired.CA, "--zk-tls-cert", expired.Cert, "--zk-tls-key", expired.Key}}).run("reseed", "locked", "--from", dir)
	require.Equal(t, exitUsage, code, errs)
	require.Contains(t, errs, "expired")
}

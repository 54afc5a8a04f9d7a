package zkx

import (
	"crypto/tls"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/tlsfiles"
)

// TestDefaultACLWithTLS: a client that presents a certificate and names
// neither Auth nor ACLIdentities creates its znodes for its own identity
// (x509), never world:anyone (before the fix a tool given only --zk-tls-*
// created world-open znodes inside an x509 room). Without TLS and Auth
// creates stay world:anyone; Auth or ACLIdentities, when given, are the
// ACL as before; TLS without a client certificate has no identity to
// name.
func TestDefaultACLWithTLS(t *testing.T) {
	ca, err := testpki.NewCA("acl-ca")
	require.NoError(t, err)
	dir := t.TempDir()
	own := load(t, issue(t, ca, filepath.Join(dir, "own"), "ops", testpki.Options{}))
	id, err := own.Identity()
	require.NoError(t, err)
	require.Equal(t, "CN=ops,O=roomlog-test", id)
	noCert := load(t, tlsfiles.Files{CA: filepath.Join(dir, "own", "ca.pem")})
	digest := &Digest{User: "u", Password: "p"}
	for _, tc := range []struct {
		name string
		cfg  DialConfig
		want []zk.ACL
	}{
		{"TLS with a certificate, not Identified", DialConfig{TLS: anonTLS{own}}, zk.WorldACL(zk.PermAll)},
		{"TLS with a certificate", DialConfig{TLS: own}, X509ACL(zk.PermAll, id)},
		{"TLS with a certificate and a server name", DialConfig{TLS: own, TLSServerName: "zk"}, X509ACL(zk.PermAll, id)},
		{"neither TLS nor Auth", DialConfig{}, zk.WorldACL(zk.PermAll)},
		{"Auth only", DialConfig{Auth: digest}, zk.DigestACL(zk.PermAll, "u", "p")},
		{"TLS and Auth", DialConfig{TLS: own, Auth: digest}, zk.DigestACL(zk.PermAll, "u", "p")},
		{"TLS and identities", DialConfig{TLS: own, ACLIdentities: []string{"CN=a"}}, X509ACL(zk.PermAll, "CN=a")},
		{"TLS without a client certificate", DialConfig{TLS: noCert}, zk.WorldACL(zk.PermAll)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, buildACL(tc.cfg))
		})
	}
}

// anonTLS is a TLSConfig that does not say what it presents.
type anonTLS struct{ s *tlsfiles.Source }

func (a anonTLS) ClientConfig(name string) *tls.Config { return a.s.ClientConfig(name) }

// unnamed presents a certificate whose identity cannot be named (as
// tlsfiles.ErrSubjectNotReproducible).
type unnamed struct{ *tlsfiles.Source }

func (unnamed) Identity() (string, error) { return "", errors.New("subject not reproducible") }

// TestDefaultACLUnnamedIdentity: a certificate whose identity cannot be
// named is refused for the default ACL (it would be world or never
// match), not when the ACL is given.
func TestDefaultACLUnnamedIdentity(t *testing.T) {
	ca, err := testpki.NewCA("acl-ca")
	require.NoError(t, err)
	src := unnamed{load(t, issue(t, ca, t.TempDir(), "ops", testpki.Options{}))}
	err = DialConfig{Servers: []string{"x:1"}, TLS: src}.Validate()
	require.ErrorIs(t, err, ErrBadConfig)
	require.ErrorContains(t, err, "subject not reproducible")
	require.ErrorContains(t, err, "give ACLIdentities or Auth")
	require.NoError(t, DialConfig{Servers: []string{"x:1"}, TLS: src, ACLIdentities: []string{"CN=a"}}.Validate())
	require.NoError(t, DialConfig{Servers: []string{"x:1"}, TLS: src, Auth: &Digest{User: "u"}}.Validate())
}

// TestDefaultACLWithTLSZooKeeper: on a real server, a znode created by a
// TLS client with no ACL configured is NoAuth for another identity of the
// same CA and readable by its creator.
func TestDefaultACLWithTLSZooKeeper(t *testing.T) {
	e := tlsZK.Get(t)
	dir := t.TempDir()
	ca := e.TLSCA()
	ops := load(t, issue(t, ca, filepath.Join(dir, "ops"), "ops-default", testpki.Options{}))
	id, err := ops.Identity()
	require.NoError(t, err)
	c, err := dialTLS(t, e.SecureAddrs(), ops, nil, 30*time.Second)
	require.NoError(t, err)
	_, err = c.Conn().Create("/tls-default-acl", []byte("x"), 0, c.ACL())
	require.NoError(t, err)
	acl, _, err := c.Conn().GetACL("/tls-default-acl")
	require.NoError(t, err)
	require.Equal(t, X509ACL(zk.PermAll, id), acl)
	_, _, err = c.Conn().Get("/tls-default-acl")
	require.NoError(t, err)

	other := load(t, issue(t, ca, filepath.Join(dir, "other"), "other-default", testpki.Options{}))
	oc, err := dialTLS(t, e.SecureAddrs(), other, nil, 30*time.Second)
	require.NoError(t, err)
	_, _, err = oc.Conn().Get("/tls-default-acl")
	require.ErrorIs(t, err, zk.ErrNoAuth)
	_, err = oc.Conn().Set("/tls-default-acl", nil, -1)
	require.ErrorIs(t, err, zk.ErrNoAuth)
}

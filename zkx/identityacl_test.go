package zkx

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/third_party/zk"
)

// TestIdentityACL: ACLIdentities entries may name their scheme, so a
// member can list a digest identity besides its own Auth (the next
// password of a rotation); a malformed one is refused by Validate, naming
// it.
func TestIdentityACL(t *testing.T) {
	next := DigestID("nn", "new")
	for _, tc := range []struct {
		id   string
		want zk.ACL
		err  string
	}{
		{id: "CN=a,O=x", want: zk.ACL{Perms: zk.PermAll, Scheme: "x509", ID: "CN=a,O=x"}},
		{id: "x509:CN=a", want: zk.ACL{Perms: zk.PermAll, Scheme: "x509", ID: "CN=a"}},
		{id: "digest:" + next, want: zk.ACL{Perms: zk.PermAll, Scheme: "digest", ID: next}},
		{id: "digest:nn", err: "digest:USER:HASH"},
		{id: "digest::h", err: "digest:USER:HASH"},
		{id: "x509:", err: "empty x509 identity"},
		// A password typed in place of its hash is refused, and not echoed.
		{id: "digest:nn:hunter2-secret", err: "not base64 of a 20-byte SHA-1"},
	} {
		t.Run(tc.id, func(t *testing.T) {
			got, err := IdentityACL(zk.PermAll, tc.id)
			if tc.err != "" {
				require.ErrorIs(t, err, ErrBadConfig)
				require.ErrorContains(t, err, tc.err)
				verr := DialConfig{Servers: []string{"h:1"}, Auth: &Digest{User: "nn", Password: "old"}, ACLIdentities: []string{tc.id}}.Validate()
				require.ErrorContains(t, verr, "ACLIdentities[0]")
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	// Auth's own entry listed again is not doubled.
	auth := &Digest{User: "nn", Password: "old"}
	acl := buildACL(DialConfig{Auth: auth, ACLIdentities: []string{"digest:" + DigestID("nn", "old"), "digest:" + next}})
	require.Equal(t, []zk.ACL{
		{Perms: zk.PermAll, Scheme: "digest", ID: DigestID("nn", "old")},
		{Perms: zk.PermAll, Scheme: "digest", ID: next},
	}, acl)
}

// TestPublicIdentity: a digest identity is shown with a fingerprint, never
// its password hash; other schemes as they are.
func TestPublicIdentity(t *testing.T) {
	id := DigestID("nn", "pw")
	_, hash, _ := strings.Cut(id, ":")
	got := PublicIdentity(zk.ACL{Scheme: "digest", ID: id})
	require.True(t, strings.HasPrefix(got, "digest:nn:fp-"), got)
	require.NotContains(t, got, hash)
	require.NotEqual(t, got, PublicIdentity(zk.ACL{Scheme: "digest", ID: DigestID("nn", "other")}), "two passwords of one user are told apart")
	require.Equal(t, "x509:CN=a", PublicIdentity(zk.ACL{Scheme: "x509", ID: "CN=a"}))
}

package zkx

import (
	"testing"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
)

// TestCheckACL: a tree's ACL is accepted when every entry names a
// configured identity with no more permissions and one entry naming the
// client grants it all (the transitions of a rotation); refused otherwise,
// naming the entry.
func TestCheckACL(t *testing.T) {
	a, b, a2, x := X509ACL(zk.PermAll, "CN=a")[0], X509ACL(zk.PermAll, "CN=b")[0], X509ACL(zk.PermAll, "CN=a2")[0], X509ACL(zk.PermAll, "CN=x")[0]
	readA := X509ACL(zk.PermRead, "CN=a")[0]
	world := zk.WorldACL(zk.PermAll)
	selfA := append(zk.WorldACL(zk.PermAll), a)
	for _, tc := range []struct {
		name             string
		have, want, self []zk.ACL
		err              string // "" accepted
	}{
		{"equal", []zk.ACL{a, b}, []zk.ACL{a, b}, selfA, ""},
		{"identity added to the configuration first", []zk.ACL{a, b}, []zk.ACL{a, b, a2}, selfA, ""},
		{"identity removed from the tree first", []zk.ACL{a, a2}, []zk.ACL{a, b, a2}, selfA, ""},
		{"fewer permissions for a configured identity", []zk.ACL{a, X509ACL(zk.PermRead, "CN=b")[0]}, []zk.ACL{a, b}, selfA, ""},
		{"world room for a client without credentials", world, world, selfA, ""},
		{"foreign identity", []zk.ACL{a, x}, []zk.ACL{a, b}, selfA, "x509:CN=x (perms 31) is not a configured identity"},
		{"world-open room for an x509 client", append([]zk.ACL{a}, world...), []zk.ACL{a}, selfA, "world:anyone (perms 31) is not a configured identity"},
		{"more permissions than configured", []zk.ACL{a, b}, []zk.ACL{a, X509ACL(zk.PermRead, "CN=b")[0]}, selfA, "more than the configured"},
		{"client not granted", []zk.ACL{b, a2}, []zk.ACL{a, b, a2}, selfA, "no entry grants this client"},
		{"client granted read only", []zk.ACL{readA, b}, []zk.ACL{a, b}, selfA, "no entry grants this client"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckACL(tc.have, tc.want, tc.self)
			if tc.err == "" {
				require.NoError(t, err)
			} else {
				require.ErrorContains(t, err, tc.err)
			}
		})
	}
}

package logroom

import (
	"crypto/rand"
	"encoding/hex"
	"path/filepath"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/tlsfiles"
	"github.com/roomlog/roomlog/zkx"
)

// tlsMember loads a certificate of ca named name and returns it with its
// identity.
func tlsMember(t *testing.T, ca *testpki.CA, dir, name string) (*tlsfiles.Source, string) {
	t.Helper()
	f, err := ca.Issue(filepath.Join(dir, name), name, testpki.Options{})
	require.NoError(t, err)
	src, err := tlsfiles.Load(f)
	require.NoError(t, err)
	id, err := src.Identity()
	require.NoError(t, err)
	return src, id
}

// TestTLSRoomEndToEnd: a room written and read over ZooKeeper's TLS port
// with x509 ACLs and no digest: every znode carries exactly the members'
// certificate identities; a member reads what another wrote; a client of
// the same CA with another identity is refused by OpenRoom (zk.ErrNoAuth);
// and a recording proxy on the writer's link sees none of an entry's bytes
// and none of a digest credential sent over it, while the same flow over
// the plaintext port shows both to the same proxy (so it can see).
func TestTLSRoomEndToEnd(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{TLS: &zkensemble.TLSOptions{}})
	ca := e.TLSCA()
	dir := t.TempDir()
	srcA, idA := tlsMember(t, ca, dir, "member-a")
	srcB, idB := tlsMember(t, ca, dir, "member-b")
	srcC, _ := tlsMember(t, ca, dir, "intruder")
	ids := []string{idA, idB}

	secret := make([]byte, 48)
	_, err := rand.Read(secret)
	require.NoError(t, err)
	entry := []byte("namespace-edit:/secret/file-" + hex.EncodeToString(secret))
	cred := &Digest{User: "alice", Password: "pw-" + hex.EncodeToString(secret[:8])}
	credBytes := []byte(cred.User + ":" + cred.Password)

	for _, mode := range []string{"tls", "plain"} {
		t.Run(mode, func(t *testing.T) {
			ctx := testCtx(t, 90*time.Second)
			target, direct := e.SecureAddrs()[0], e.SecureAddrs()
			if mode == "plain" {
				target, direct = e.Addrs()[0], e.Addrs()
			}
			tap, err := zkensemble.NewTap(target)
			require.NoError(t, err)
			t.Cleanup(func() { _ = tap.Close() })
			cfg := func(src *tlsfiles.Source, servers []string, auth *Digest) DialConfig {
				d := DialConfig{Servers: servers, SessionTimeout: 4 * time.Second, Auth: auth, AnyServer: true}
				if mode == "tls" {
					d.TLS, d.TLSServerName, d.ACLIdentities = src, "127.0.0.1", ids
				} else if auth == nil {
					d.Auth = cred
				}
				return d
			}
			dialCfg := func(d DialConfig) *Client {
				c, err := Dial(ctx, d)
				require.NoError(t, err)
				t.Cleanup(c.Close)
				return c
			}
			writerClient := dialCfg(cfg(srcA, []string{tap.Addr()}, nil))
			if mode == "tls" {
				require.Equal(t, zkx.X509ACL(zk.PermAll, idA, idB), writerClient.ACL(), "no digest entry")
			}
			base := testBase(t)
			room, err := OpenRoom(ctx, writerClient, "vault", RoomOptions{Base: base})
			require.NoError(t, err)
			w := newWriter(t, room, WriterConfig{Owner: "member-a", Compression: CompressionNone})
			for i := 1; i <= 20; i++ {
				_, err := w.Append(ctx, payload(i))
				require.NoError(t, err)
			}
			last, err := w.Append(ctx, entry)
			require.NoError(t, err)

			readerClient := dialCfg(cfg(srcB, direct, nil))
			rroom, err := OpenRoom(ctx, readerClient, "vault", RoomOptions{Base: base})
			require.NoError(t, err)
			rd, err := rroom.Tail(ctx, 1)
			require.NoError(t, err)
			t.Cleanup(func() { _ = rd.Close() })
			got := readN(t, ctx, rd, int(last))
			require.Equal(t, entry, got[last-1].Data, "member-b reads what member-a wrote")

			aclWalk(t, writerClient.Conn(), base, func(p string) {
				acl, _, err := writerClient.Conn().GetACL(p)
				require.NoError(t, err, p)
				require.Equal(t, writerClient.ACL(), acl, "ACL of %s", p)
			})

			if mode == "tls" {
				intruder := dialCfg(DialConfig{Servers: direct, TLS: srcC, TLSServerName: "127.0.0.1", ACLIdentities: ids})
				_, err := OpenRoom(ctx, intruder, "vault", RoomOptions{Base: base})
				requireNoAuth(t, err, "OpenRoom by a certificate outside the ACL")
				t.Logf("intruder: %v", err)
				// A digest credential sent over TLS stays inside it.
				dc := dialCfg(cfg(srcA, []string{tap.Addr()}, cred))
				_, _, err = dc.Conn().Get(room.Path())
				require.NoError(t, err)
			}
			require.Greater(t, tap.Seen(), len(entry), "the proxy carried the traffic")
			sawEntry, sawCred := tap.Contains(entry), tap.Contains(credBytes)
			t.Logf("%s: proxy saw %d bytes; entry visible: %v; digest credential visible: %v", mode, tap.Seen(), sawEntry, sawCred)
			if mode == "tls" {
				require.False(t, sawEntry, "an entry's bytes crossed the TLS link in clear")
				require.False(t, sawCred, "the digest credential crossed the TLS link in clear")
				require.False(t, tap.Contains(payload(7)))
			} else {
				require.True(t, sawEntry, "the proxy sees the entry over plaintext")
				require.True(t, sawCred, "the proxy sees the digest credential over plaintext")
			}
		})
	}
}

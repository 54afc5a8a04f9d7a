package replica

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/tlsfiles"
	"github.com/roomlog/roomlog/zkx"
)

// TestZooKeeperTLSReplica: members that reach ZooKeeper only over TLS,
// each with its own certificate and an x509 ACL naming both and no
// digest, elect a primary, apply, checkpoint and converge; every znode of
// the room carries exactly the two identities; a member whose
// certificate (of the same CA) is not in the ACL cannot Open the room
// (zk.ErrNoAuth).
func TestZooKeeperTLSReplica(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{TLS: &zkensemble.TLSOptions{}})
	dir := t.TempDir()
	srcs := map[string]*tlsfiles.Source{}
	var ids []string
	for _, name := range []string{"m0", "m1", "intruder"} {
		f, err := ens.TLSCA().Issue(filepath.Join(dir, name), name, testpki.Options{})
		require.NoError(t, err)
		src, err := tlsfiles.Load(f)
		require.NoError(t, err)
		srcs[name] = src
		if name != "intruder" {
			id, err := src.Identity()
			require.NoError(t, err)
			ids = append(ids, id)
		}
	}
	c := newCluster(t, ens, func(cfg *Config) {
		cfg.Servers = ens.SecureAddrs()
		cfg.ZooKeeperTLS = srcs[cfg.ID]
		cfg.ACLIdentities = ids
		cfg.Base = "/tls"
	})
	c.openN(2)
	p := c.waitPrimary(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var last uint64
	for i := 0; i < 5; i++ {
		res, err := c.proposeRetry(ctx, setOp(fmt.Sprintf("k%d", i), "v"))
		require.NoError(t, err)
		last = res.Index
	}
	require.NoError(t, p.Checkpoint(ctx))
	c.waitConverged(last, 30*time.Second)

	owner, err := logroom.Dial(ctx, logroom.DialConfig{Servers: ens.SecureAddrs(), TLS: srcs["m0"]})
	require.NoError(t, err)
	defer owner.Close()
	want := zkx.X509ACL(zk.PermAll, ids...)
	n := 0
	aclWalkRoom(t, owner.Conn(), "/tls/"+c.room, func(path string) {
		acl, _, err := owner.Conn().GetACL(path)
		if errors.Is(err, zk.ErrNoNode) {
			return
		}
		require.NoError(t, err, path)
		require.Equal(t, want, acl, "ACL of %s", path)
		n++
	})
	require.Greater(t, n, 8)

	cfg := c.config("intruder")
	r, err := Open(ctx, cfg)
	if r != nil {
		_ = r.Close()
	}
	requireNoAuthErr(t, err, "Open a replica whose certificate the ACL does not name")
	t.Logf("intruder: %v", err)
}

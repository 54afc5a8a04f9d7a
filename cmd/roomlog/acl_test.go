package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/tlsfiles"
	"github.com/roomlog/roomlog/zkx"
)

// tlsIdentity issues a certificate named name and returns its files and
// x509 identity.
func tlsIdentity(t *testing.T, ca *testpki.CA, dir, name string) (tlsfiles.Files, *tlsfiles.Source, string) {
	t.Helper()
	f, err := ca.Issue(filepath.Join(dir, name), name, testpki.Options{})
	require.NoError(t, err)
	src, err := tlsfiles.Load(f)
	require.NoError(t, err)
	id, err := src.Identity()
	require.NoError(t, err)
	return f, src, id
}

// waitRole waits until r has role.
func waitRole(t *testing.T, r *replica.Replica, role replica.Role) {
	t.Helper()
	require.Eventually(t, func() bool { return r.Status().Role == role }, 30*time.Second, 10*time.Millisecond, "%s to be %v", r.ID(), role)
}

// TestACLAddRemoveLiveTLSRoom follows 'roomlog acl -h' on a live room over
// ZooKeeper's TLS port with x509 ACLs: master a (CN=m1) runs the room;
// its configuration gains CN=m2 (a rolling restart); while a proposes,
// 'acl --add' grants CN=m2 on the base and every znode, and master b
// (CN=m2) joins and catches up; 'acl --remove CN=m1' is refused while a
// is live and uses it; after 'transfer --to b' and a's stop, the removal
// goes through, and a restarted a is refused by ZooKeeper. Every
// acknowledged entry is in b's state. Before the fix, nothing changed a
// live room's ACL (a new master was refused with ErrForeignACL or NoAuth).
func TestACLAddRemoveLiveTLSRoom(t *testing.T) {
	e := zkensemble.ForTest(t, zkensemble.Options{TLS: &zkensemble.TLSOptions{}})
	ca := e.TLSCA()
	dir := t.TempDir()
	ops, srcOps, idOps := tlsIdentity(t, ca, dir, "ops")
	_, srcM1, idM1 := tlsIdentity(t, ca, dir, "m1")
	_, srcM2, idM2 := tlsIdentity(t, ca, dir, "m2")
	const base, room = "/tlsacl", "ns"
	open := func(id string, src *tlsfiles.Source, ids ...string) (*replica.Replica, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return replica.Open(ctx, replica.Config{
			Servers: e.SecureAddrs(), SessionTimeout: 2 * time.Second, Base: base, Room: room, ID: id,
			DataDir: filepath.Join(dir, "data-"+id), ListenAddr: "127.0.0.1:0",
			ZooKeeperTLS: src, ZooKeeperTLSServerName: "127.0.0.1", ACLIdentities: ids,
		})
	}
	cl := &cli{t: t, zk: e.SecureConnString(), base: base,
		extra: []string{"--zk-tls-ca", ops.CA, "--zk-tls-cert", ops.Cert, "--zk-tls-key", ops.Key, "--zk-tls-server-name", "127.0.0.1"}}

	ctx := testCtx(t, 3*time.Minute)
	var mu sync.Mutex
	acked := map[string]uint64{}
	propose := func(r *replica.Replica, key string) error {
		res, err := r.Propose(ctx, opsEntry(t, key, "v"))
		if err == nil {
			mu.Lock()
			acked[key] = res.Index
			mu.Unlock()
		}
		return err
	}

	a, err := open("a", srcM1, idOps, idM1)
	require.NoError(t, err)
	waitRole(t, a, replica.RolePrimary)
	for i := range 5 {
		require.NoError(t, propose(a, fmt.Sprintf("/before/%d", i)))
	}
	var shown aclOut
	cl.json(&shown, "acl", room)
	require.Len(t, shown.ACL, 2, "%+v", shown)
	require.Len(t, shown.Members, 1)
	require.Equal(t, []string{"x509:" + idM1}, shown.Members[0].Identities)
	require.True(t, shown.Members[0].Granted)
	require.Empty(t, shown.Differ)

	// 1. The new identity in a's configuration first (a rolling restart).
	require.NoError(t, a.Close())
	a, err = open("a", srcM1, idOps, idM1, idM2)
	require.NoError(t, err, "a member configured with an identity the room does not list yet opens it")
	waitRole(t, a, replica.RolePrimary)

	// 2. acl --add while a proposes.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if err := propose(a, fmt.Sprintf("/during/%d", i)); err != nil && !errors.Is(err, context.Canceled) {
				t.Errorf("propose during the ACL change: %v", err)
				return
			}
		}
	}()
	var added aclOut
	cl.json(&added, "acl", room, "--add", "x509:"+idM2)
	require.Greater(t, added.Changed, 3)
	require.Len(t, added.ACL, 3)
	require.Empty(t, added.Differ)

	// 3. The new master joins.
	b, err := open("b", srcM2, idOps, idM1, idM2)
	require.NoError(t, err, "the new master's certificate opens the room after acl --add")
	t.Cleanup(func() { _ = b.Close() })
	waitRole(t, b, replica.RoleStandby)
	close(stop)
	wg.Wait()

	// Removing a's identity while a runs is refused, naming it.
	code, _, errs := cl.run("acl", room, "--remove", idM1)
	require.Equal(t, exitFail, code, errs)
	require.Contains(t, errs, "member a (x509:"+idM1+")")

	// 4. Hand over to b, stop a, remove its identity.
	require.Contains(t, cl.ok("transfer", room, "--to", "b"), "leadership transferred from a")
	waitRole(t, b, replica.RolePrimary)
	require.NoError(t, propose(b, "/after/transfer"))
	require.NoError(t, a.Close())
	var removed aclOut
	cl.json(&removed, "acl", room, "--remove", idM1)
	require.Len(t, removed.ACL, 2)
	for _, en := range removed.ACL {
		require.NotEqual(t, idM1, en.ID)
	}
	require.NoError(t, propose(b, "/after/remove"))

	// The removed identity is refused.
	_, err = open("a", srcM1, idOps, idM1, idM2)
	require.Error(t, err, "a master whose identity was removed is refused")
	require.ErrorContains(t, err, "not authenticated")

	// Until b's configuration drops m1, the znodes b creates (a
	// checkpoint's channel, its batches) carry its configured ACL, which
	// still grants m1. After the rolling restart without it, --remove runs
	// again and sweeps them: no znode of the room grants m1 any more.
	// (Before, the second --remove failed: "not in room's ACL".)
	cl.ok("checkpoint", room)
	require.NoError(t, propose(b, "/after/checkpoint"))
	require.NoError(t, b.Close())
	b, err = open("b", srcM2, idOps, idM2)
	require.NoError(t, err, "b restarted without m1 in its identities")
	waitRole(t, b, replica.RolePrimary)
	require.NoError(t, propose(b, "/after/restart"))
	var swept aclOut
	cl.json(&swept, "acl", room, "--remove", idM1)
	require.Positive(t, swept.Changed)
	zc, err := zkx.Dial(ctx, zkx.DialConfig{Servers: e.SecureAddrs(), SessionTimeout: 4 * time.Second, TLS: srcOps, TLSServerName: "127.0.0.1"})
	require.NoError(t, err)
	defer zc.Close()
	var walk func(p string)
	nodes := 0
	walk = func(p string) {
		acl, _, err := zc.Conn().GetACL(p)
		require.NoError(t, err, p)
		nodes++
		for _, en := range acl {
			require.NotEqual(t, idM1, en.ID, "%s still grants the removed identity", p)
		}
		kids, _, err := zc.Conn().Children(p)
		require.NoError(t, err, p)
		for _, k := range kids {
			walk(p + "/" + k)
		}
	}
	walk(base + "/" + room)
	t.Logf("%d znodes of the room checked after the sweep", nodes)

	// Nothing acknowledged is lost.
	mu.Lock()
	defer mu.Unlock()
	var last uint64
	for _, idx := range acked {
		last = max(last, idx)
	}
	require.NoError(t, b.WaitApplied(ctx, last))
	for key := range acked {
		v, err := b.Get([]byte(key))
		require.NoError(t, err, key)
		require.Equal(t, "v", string(v), key)
	}
	require.Greater(t, len(acked), 7)
}

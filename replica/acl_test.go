package replica

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/logroom"
)

// aclWalkRoom calls fn for the room znode and every znode below it.
func aclWalkRoom(t *testing.T, conn *zk.Conn, p string, fn func(path string)) {
	t.Helper()
	fn(p)
	kids, _, err := conn.Children(p)
	if errors.Is(err, zk.ErrNoNode) {
		return // an ephemeral node went away meanwhile
	}
	require.NoError(t, err, p)
	slices.Sort(kids)
	for _, k := range kids {
		aclWalkRoom(t, conn, p+"/"+k, fn)
	}
}

func requireNoAuthErr(t *testing.T, err error, what string) {
	t.Helper()
	require.Error(t, err, "%s: an unauthorised client succeeded", what)
	require.True(t, errors.Is(err, zk.ErrNoAuth), "%s: want zk.ErrNoAuth, got %v", what, err)
}

// TestDigestACLReplica: replicas configured with digest credentials create
// every znode of the room (members, election candidates, the checkpoint
// record, logroom's znodes) with that digest ACL only. A client without the
// credentials, or with a wrong password, can neither read member data nor
// join the election, add a member, forge the checkpoint record or delete a
// member; a replica with a wrong password cannot join. The room is
// unchanged afterwards and keeps working.
func TestDigestACLReplica(t *testing.T) {
	ens := sharedEnsemble(t)
	cred := &logroom.Digest{User: "nn", Password: "s3cret"}
	// Its own base: logroom creates the base znode with the creator's ACL,
	// and the other tests share this ensemble without credentials.
	base := "/acl-" + newGUID()[:8]
	c := newCluster(t, ens, func(cfg *Config) { cfg.Auth = cred; cfg.Base = base })
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

	owner, err := logroom.Dial(ctx, logroom.DialConfig{Servers: ens.Addrs(), Auth: cred})
	require.NoError(t, err)
	defer owner.Close()
	room := base + "/" + c.room
	want := zk.DigestACL(zk.PermAll, cred.User, cred.Password)
	seen := map[string]bool{}
	aclWalkRoom(t, owner.Conn(), room, func(path string) {
		acl, _, err := owner.Conn().GetACL(path)
		if errors.Is(err, zk.ErrNoNode) {
			return
		}
		require.NoError(t, err, path)
		require.Equal(t, want, acl, "ACL of %s", path)
		seen[filepath.Base(filepath.Dir(path))+"/"] = true
		seen[filepath.Base(path)] = true
	})
	for _, n := range []string{membersDir + "/", electionDir + "/", checkpointsZ, "m0", "m1", "epoch"} {
		require.True(t, seen[n], "audited no %s under %s: %v", n, room, seen)
	}

	listing := func(dir string) []string {
		kids, _, err := owner.Conn().Children(room + "/" + dir)
		require.NoError(t, err)
		slices.Sort(kids)
		return kids
	}
	members, candidates := listing(membersDir), listing(electionDir)
	ckpt, _, err := owner.Conn().Get(room + "/" + checkpointsZ)
	require.NoError(t, err)

	for _, in := range []struct {
		name string
		auth *logroom.Digest
	}{{"no credentials", nil}, {"wrong password", &logroom.Digest{User: "nn", Password: "guess"}}} {
		t.Run(in.name, func(t *testing.T) {
			ic, err := logroom.Dial(ctx, logroom.DialConfig{Servers: ens.Addrs(), Auth: in.auth})
			require.NoError(t, err)
			defer ic.Close()
			conn := ic.Conn()
			_, _, err = conn.Get(room + "/" + membersDir + "/" + p.ID())
			requireNoAuthErr(t, err, "read the primary's member data")
			_, _, err = conn.Children(room + "/" + electionDir)
			requireNoAuthErr(t, err, "list the election")
			_, err = conn.Create(room+"/"+electionDir+"/c-"+newGUID()+"-",
				encode(candidateData{V: formatVersion1, ID: "mallory"}), zk.FlagEphemeral|zk.FlagSequence, zk.WorldACL(zk.PermAll))
			requireNoAuthErr(t, err, "join the election")
			_, err = conn.Create(room+"/"+membersDir+"/mallory",
				encode(memberData{V: formatVersion1, ID: "mallory", Role: roleStrPrimary}), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
			requireNoAuthErr(t, err, "add a member")
			_, err = conn.Create(room+"/"+transferZ,
				encode(transferRecord{V: formatVersion1, From: p.ID(), To: "mallory"}), zk.FlagEphemeral, zk.WorldACL(zk.PermAll))
			requireNoAuthErr(t, err, "write a transfer record")
			_, err = conn.Set(room+"/"+checkpointsZ, encode(checkpointRecord{V: formatVersion1, Index: 1 << 40, Addr: "evil:1"}), -1)
			requireNoAuthErr(t, err, "forge the checkpoint record")
			err = conn.Delete(room+"/"+membersDir+"/"+p.ID(), -1)
			requireNoAuthErr(t, err, "delete the primary's member node")

			// A replica with these credentials cannot join the room.
			cfg := c.config("intruder")
			cfg.Auth = in.auth
			r, err := Open(ctx, cfg)
			if r != nil {
				_ = r.Close()
			}
			requireNoAuthErr(t, err, "Open a replica")
		})
	}

	require.Equal(t, members, listing(membersDir))
	require.Equal(t, candidates, listing(electionDir))
	data, _, err := owner.Conn().Get(room + "/" + checkpointsZ)
	require.NoError(t, err)
	require.Equal(t, ckpt, data)
	require.Equal(t, p, c.waitPrimary(10*time.Second), "the primary kept its role")
	res, err := p.Propose(ctx, setOp("after", "v"))
	require.NoError(t, err)
	c.waitConverged(res.Index, 30*time.Second)
}

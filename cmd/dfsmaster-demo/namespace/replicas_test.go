package namespace

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestPlacement: addblock with servers records the placement at the
// file's replication factor; a lost server leaves its blocks
// under-replicated; addreplica is idempotent; deleting the file (or its
// directory) deletes its placements; bad server names are rejected.
func TestPlacement(t *testing.T) {
	n := newNSStore(t)
	n.ok(Command{Op: OpMkdir, Path: "/d"})
	n.ok(Command{Op: OpCreate, Path: "/d/f", Replication: 3})
	b1 := n.ok(Command{Op: OpAddBlock, Path: "/d/f", Size: 10, Servers: []string{"cs3", "cs1", "cs2"}}).BlockID
	b2 := n.ok(Command{Op: OpAddBlock, Path: "/d/f", Size: 10, Servers: []string{"cs2", "cs4"}}).BlockID
	n.ok(Command{Op: OpAddBlock, Path: "/d/f", Size: 10}) // no chunk servers: no placement
	ps, err := Placements(n.s)
	require.NoError(t, err)
	require.Equal(t, []Placement{
		{Block: b1, RF: 3, Servers: []string{"cs1", "cs2", "cs3"}},
		{Block: b2, RF: 3, Servers: []string{"cs2", "cs4"}},
	}, ps)
	require.False(t, ps[0].UnderReplicated())
	require.True(t, ps[1].UnderReplicated())

	n.ok(Command{Op: OpLoseServer, Server: "cs2"})
	n.ok(Command{Op: OpLoseServer, Server: "cs2"}) // idempotent
	ps, err = Placements(n.s)
	require.NoError(t, err)
	require.Equal(t, []string{"cs1", "cs3"}, ps[0].Servers)
	require.Equal(t, []string{"cs4"}, ps[1].Servers)

	h := n.hash()
	n.ok(Command{Op: OpAddReplica, Block: b1, Server: "cs5"})
	h5 := n.hash()
	require.NotEqual(t, h, h5)
	n.ok(Command{Op: OpAddReplica, Block: b1, Server: "cs5"}) // already there: nothing written
	require.Equal(t, h5, n.hash())
	ps, err = Placements(n.s)
	require.NoError(t, err)
	require.Equal(t, []string{"cs1", "cs3", "cs5"}, ps[0].Servers)

	require.Error(t, n.do(Command{Op: OpAddReplica, Block: 999, Server: "cs1"}).Err(), "unknown block")
	require.Error(t, n.do(Command{Op: OpAddReplica, Block: b1, Server: "bad name"}).Err())
	require.Error(t, n.do(Command{Op: OpAddBlock, Path: "/d/f", Servers: []string{"a", "a"}}).Err(), "duplicate server")
	h = n.hash()
	require.Error(t, n.do(Command{Op: OpAddBlock, Path: "/d/f", Servers: []string{"a", "b", "c", "d"}}).Err(), "more servers than the replication factor")
	require.Error(t, n.do(Command{Op: OpAddBlock, Path: "/d/f", Servers: []string{".."}}).Err(), "not a znode name")
	require.Error(t, n.do(Command{Op: OpAddBlock, Path: "/d/f", Servers: []string{"a/b"}}).Err(), "not a znode name")
	require.Equal(t, h, n.hash(), "a rejected addblock writes nothing")
	// A copy made for an earlier placement generation is not recorded.
	ps, err = Placements(n.s)
	require.NoError(t, err)
	require.Error(t, n.do(Command{Op: OpAddReplica, Block: b1, Server: "cs9", Expect: ps[0].Gen}).Err(), "stale generation")
	require.Equal(t, h, n.hash())
	n.ok(Command{Op: OpAddReplica, Block: b2, Server: "cs9", Expect: ps[1].Gen + 1})
	// The last holder of a block stays listed when its server is lost.
	n.ok(Command{Op: OpCreate, Path: "/d/one", Replication: 2})
	lone := n.ok(Command{Op: OpAddBlock, Path: "/d/one", Servers: []string{"solo"}}).BlockID
	n.ok(Command{Op: OpLoseServer, Server: "solo"})
	ps, err = Placements(n.s)
	require.NoError(t, err)
	for _, p := range ps {
		if p.Block == lone {
			require.Equal(t, []string{"solo"}, p.Servers)
		}
	}
	require.Error(t, n.do(Command{Op: OpLoseServer, Path: "/d", Server: "cs1"}).Err(), "a field of another op")

	n.ok(Command{Op: OpCreate, Path: "/d/g", Replication: 2})
	n.ok(Command{Op: OpAddBlock, Path: "/d/g", Servers: []string{"cs1"}})
	n.ok(Command{Op: OpDelete, Path: "/d/f"})
	ps, err = Placements(n.s)
	require.NoError(t, err)
	require.Len(t, ps, 2, "the deleted file's placements went with it (/d/g's and /d/one's stay)")
	n.ok(Command{Op: OpDelete, Path: "/d", Recursive: true})
	ps, err = Placements(n.s)
	require.NoError(t, err)
	require.Empty(t, ps, "a deleted directory's files' placements went too")
}

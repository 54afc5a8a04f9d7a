package replica

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSimulationZKMultiUndo: simZK.multi, which applies in place and undoes a
// failed Multi, leaves the same tree and returns the same error as
// applying the ops to a copy and keeping it only when all succeed.
func TestSimulationZKMultiUndo(t *testing.T) {
	paths := []string{"/a", "/a/b", "/a/c", "/a/s-", "/d", "/d/e"}
	kinds := []string{"create", "delete", "set", "check"}
	for seed := uint64(1); seed <= 200; seed++ {
		rnd := rand.New(rand.NewPCG(seed, 1))
		z, ref := newSimZK(), newSimZK()
		sid, _ := z.open(), ref.open()
		for i := 0; i < 60; i++ {
			ops := make([]simOp, 1+rnd.IntN(3))
			for j := range ops {
				p := paths[rnd.IntN(len(paths))]
				ops[j] = simOp{kind: kinds[rnd.IntN(len(kinds))], path: p, data: []byte{byte(i)},
					version: int32(rnd.IntN(4)) - 1, ephemeral: rnd.IntN(4) == 0, sequence: p == "/a/s-"}
			}
			err := z.multi(sid, ops...)
			c := ref.clone()
			var want error
			for _, op := range ops {
				if _, want = c.apply(sid, op, false); want != nil {
					break
				}
			}
			if want == nil {
				*ref = *c
			}
			require.Equal(t, want, err, "seed %d op %d: %+v", seed, i, ops)
			require.Equal(t, simZKDump(ref), simZKDump(z), "seed %d op %d: %+v", seed, i, ops)
		}
	}
}

// simZKDump is the tree and its change counters as text.
func simZKDump(z *simZK) []string {
	var out []string
	for p, n := range z.nodes {
		kids := make([]string, 0, len(n.children))
		for k := range n.children {
			kids = append(kids, k)
		}
		sort.Strings(kids)
		out = append(out, fmt.Sprintf("%s data=%q v=%d owner=%d cv=%d seq=%d kids=%v", p, n.data, n.version, n.owner, n.cversion, n.seq, kids))
	}
	for p, c := range z.changes {
		if c != 0 {
			out = append(out, fmt.Sprintf("changes %s=%d", p, c))
		}
	}
	sort.Strings(out)
	return out
}

package replica

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
)

// TestSimZKConformance keeps the simulation's model of ZooKeeper honest:
// the same random operation sequences (creates — persistent, ephemeral,
// sequential —, deletes and sets with and without a version, Multis with
// version checks that fail half-way, reads, listings, and the end of a
// session that owns ephemeral nodes) run on simZK and on a real ZooKeeper,
// and every result must be the same: the error, the created name
// (sequence numbers included), the data and version read, the children
// listed.
func TestSimZKConformance(t *testing.T) {
	ens := sharedEnsemble(t)
	dial := func() *zk.Conn {
		conn, _, err := zk.Connect(ens.Addrs(), 4*time.Second, zk.WithLogInfo(false), zk.WithLogger(quietZK{}))
		require.NoError(t, err)
		require.Eventually(t, func() bool { return conn.State() == zk.StateHasSession }, 10*time.Second, 10*time.Millisecond)
		return conn
	}
	for seed := uint64(1); seed <= 20; seed++ {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			rnd := rand.New(rand.NewPCG(seed, 0xc0f))
			base := "/simconf-" + newGUID()
			admin := dial()
			defer admin.Close()
			_, err := admin.Create(base, nil, 0, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)

			model := newSimZK()
			madmin := model.open()
			_, err = model.do(madmin, simOp{kind: "create", path: base})
			require.NoError(t, err)

			// Two client sessions on each side; session 1 may end.
			conns := []*zk.Conn{dial(), dial()}
			defer func() {
				for _, c := range conns {
					c.Close()
				}
			}()
			sids := []int64{model.open(), model.open()}
			paths := []string{base + "/a", base + "/b", base + "/a/x", base + "/seq-", base + "/b/y"}
			var trace []string
			for step := 0; step < 200; step++ {
				who := rnd.IntN(2)
				op := randomSimOp(rnd, paths)
				var real, want string
				switch k := rnd.IntN(10); {
				case k < 5:
					real = fmtResult(runReal(conns[who], op))
					want = fmtResult(model.do(sids[who], op))
				case k < 7:
					op2 := randomSimOp(rnd, paths)
					ops := []simOp{op, op2}
					real = fmtResult("", runRealMulti(conns[who], ops))
					want = fmtResult("", model.multi(sids[who], ops...))
					op.kind = fmt.Sprintf("multi(%s%s, %s %s%s)", op.kind, opFlags(op), op2.kind, op2.path, opFlags(op2))
				case k < 8:
					b, st, err := conns[who].Get(op.path)
					var v int32
					if st != nil {
						v = st.Version
					}
					real = fmt.Sprintf("%q v%d %v", b, v, errName(err))
					mb, mv, merr := model.get(sids[who], op.path)
					want = fmt.Sprintf("%q v%d %v", mb, mv, errName(merr))
					op.kind = "get"
				case k < 9:
					dir := parentOf(paths[rnd.IntN(len(paths))])
					names, _, err := conns[who].Children(dir)
					real = fmt.Sprintf("%v %v", sortedCopy(names), errName(err))
					mnames, merr := model.children(sids[who], dir)
					want = fmt.Sprintf("%v %v", mnames, errName(merr))
					op.kind, op.path = "children", dir
				default:
					// Session 1 ends (Close deletes its ephemerals, as an
					// expiry does) and a new one takes its place.
					conns[1].Close()
					model.expire(sids[1])
					conns[1] = dial()
					sids[1] = model.open()
					op.kind = "end session 1"
				}
				trace = append(trace, fmt.Sprintf("%3d s%d %s%s %s: zk=%s model=%s", step, who, op.kind, opFlags(op), op.path, real, want))
				if real != want {
					t.Fatalf("model differs from ZooKeeper at step %d:\n%s", step, strings.Join(trace, "\n"))
				}
			}
		})
	}
}

func randomSimOp(rnd *rand.Rand, paths []string) simOp {
	p := paths[rnd.IntN(len(paths))]
	version := int32(-1)
	if rnd.IntN(2) == 0 {
		version = int32(rnd.IntN(3))
	}
	switch rnd.IntN(4) {
	case 0, 1:
		return simOp{kind: "create", path: p, data: []byte(fmt.Sprint(rnd.IntN(100))),
			ephemeral: rnd.IntN(3) == 0, sequence: strings.HasSuffix(p, "-")}
	case 2:
		return simOp{kind: "delete", path: p, version: version}
	default:
		if rnd.IntN(2) == 0 {
			return simOp{kind: "check", path: p, version: version}
		}
		return simOp{kind: "set", path: p, data: []byte(fmt.Sprint(rnd.IntN(100))), version: version}
	}
}

func zkRequest(op simOp) any {
	var flags int32
	if op.ephemeral {
		flags |= zk.FlagEphemeral
	}
	if op.sequence {
		flags |= zk.FlagSequence
	}
	switch op.kind {
	case "create":
		return &zk.CreateRequest{Path: op.path, Data: op.data, Acl: zk.WorldACL(zk.PermAll), Flags: flags}
	case "delete":
		return &zk.DeleteRequest{Path: op.path, Version: op.version}
	case "set":
		return &zk.SetDataRequest{Path: op.path, Data: op.data, Version: op.version}
	default:
		return &zk.CheckVersionRequest{Path: op.path, Version: op.version}
	}
}

func runReal(conn *zk.Conn, op simOp) (string, error) {
	switch op.kind {
	case "create":
		var flags int32
		if op.ephemeral {
			flags |= zk.FlagEphemeral
		}
		if op.sequence {
			flags |= zk.FlagSequence
		}
		return conn.Create(op.path, op.data, flags, zk.WorldACL(zk.PermAll))
	case "delete":
		return "", conn.Delete(op.path, op.version)
	case "set":
		_, err := conn.Set(op.path, op.data, op.version)
		return "", err
	default:
		return "", runRealMulti(conn, []simOp{op})
	}
}

// runRealMulti returns the error of the first op that failed.
func runRealMulti(conn *zk.Conn, ops []simOp) error {
	reqs := make([]any, len(ops))
	for i, op := range ops {
		reqs[i] = zkRequest(op)
	}
	res, err := conn.Multi(reqs...)
	for _, r := range res {
		if r.Error != nil && !errors.Is(r.Error, zk.ErrAPIError) {
			return r.Error
		}
	}
	return err
}

func fmtResult(path string, err error) string { return fmt.Sprintf("%q %v", path, errName(err)) }

func errName(err error) string {
	if err == nil {
		return "ok"
	}
	return err.Error()
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func opFlags(op simOp) string {
	f := ""
	if op.ephemeral {
		f += "[E]"
	}
	if op.sequence {
		f += "[S]"
	}
	if op.version != -1 && op.kind != "create" {
		f += fmt.Sprintf("[v%d]", op.version)
	}
	return f
}

package namespace

import (
	"math/rand"
	"path"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// model is an independent, path-keyed implementation of the namespace
// semantics: the applier must agree with it on every response and on the
// resulting tree.
type model struct {
	nodes     map[string]*mnode // by full path; "/" always present
	nextBlock uint64
}

type mnode struct {
	dir    bool
	repl   int
	blocks []Block
}

func newModel() *model {
	return &model{nodes: map[string]*mnode{"/": {dir: true}}, nextBlock: 1}
}

// walk returns how many components of p exist, or CodeNotADirectory when a
// file is met before the last component.
func (m *model) walk(p string) (int, Code) {
	comps := components(p)
	cur := "/"
	for i, name := range comps {
		if !m.nodes[cur].dir {
			return 0, CodeNotADirectory
		}
		next := path.Join(cur, name)
		if m.nodes[next] == nil {
			return i, ""
		}
		cur = next
	}
	return len(comps), ""
}

func (m *model) apply(c Command) (Code, uint64) {
	if err := c.Validate(); err != nil {
		code, _ := CodeOf(err)
		return code, 0
	}
	comps := components(c.Path)
	found, code := m.walk(c.Path)
	if code != "" {
		return code, 0
	}
	exists := found == len(comps)
	switch c.Op {
	case OpMkdir:
		if exists {
			if c.Parents && m.nodes[c.Path].dir {
				return "", 0
			}
			return CodeAlreadyExists, 0
		}
		if len(comps)-found > 1 && !c.Parents {
			return CodeNotFound, 0
		}
		for i := found; i < len(comps); i++ {
			m.nodes["/"+strings.Join(comps[:i+1], "/")] = &mnode{dir: true}
		}
	case OpCreate:
		if exists {
			return CodeAlreadyExists, 0
		}
		if len(comps)-found > 1 {
			return CodeNotFound, 0
		}
		m.nodes[c.Path] = &mnode{repl: c.Replication}
	case OpAddBlock:
		if !exists {
			return CodeNotFound, 0
		}
		n := m.nodes[c.Path]
		if n.dir {
			return CodeIsADirectory, 0
		}
		id := m.nextBlock
		m.nextBlock++
		n.blocks = append(n.blocks, Block{ID: id, Size: c.Size})
		return "", id
	case OpRename:
		if c.Path == "/" {
			return CodeInvalidPath, 0
		}
		if !exists {
			return CodeNotFound, 0
		}
		dcomps := components(c.Dst)
		if len(dcomps) == 0 {
			return CodeAlreadyExists, 0
		}
		dfound, code := m.walk(c.Dst)
		switch {
		case code != "":
			return code, 0
		case dfound == len(dcomps):
			return CodeAlreadyExists, 0
		case len(dcomps)-dfound > 1:
			return CodeNotFound, 0
		case strings.HasPrefix(c.Dst, c.Path+"/"):
			return CodeInvalidPath, 0
		}
		for _, p := range m.subtree(c.Path) {
			m.nodes[c.Dst+strings.TrimPrefix(p, c.Path)] = m.nodes[p]
			delete(m.nodes, p)
		}
	case OpDelete:
		if c.Path == "/" {
			return CodeInvalidPath, 0
		}
		if !exists {
			return CodeNotFound, 0
		}
		sub := m.subtree(c.Path)
		if len(sub) > 1 && !c.Recursive {
			return CodeNotEmpty, 0
		}
		for _, p := range sub {
			delete(m.nodes, p)
		}
	}
	return "", 0
}

// subtree is p and every path under it, sorted.
func (m *model) subtree(p string) []string {
	var out []string
	for q := range m.nodes {
		if q == p || strings.HasPrefix(q, p+"/") {
			out = append(out, q)
		}
	}
	sort.Strings(out)
	return out
}

func (m *model) ls(dir string) []Entry {
	entries := []Entry{}
	for q, n := range m.nodes {
		if q == "/" || path.Dir(q) != dir {
			continue
		}
		e := Entry{Name: path.Base(q), Type: "dir"}
		if !n.dir {
			e = Entry{Name: path.Base(q), Type: "file", Replication: n.repl, Blocks: len(n.blocks)}
			for _, b := range n.blocks {
				e.Size += b.Size
			}
		}
		entries = append(entries, e)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name < entries[j].Name })
	return entries
}

// randomCommand draws a command over a small name space so that collisions,
// missing parents, files in the way and moves into oneself are all common.
func randomCommand(rng *rand.Rand) Command {
	names := []string{"a", "b", "c"}
	randPath := func() string {
		depth := 1 + rng.Intn(3)
		var sb strings.Builder
		for i := 0; i < depth; i++ {
			sb.WriteString("/" + names[rng.Intn(len(names))])
		}
		if rng.Intn(30) == 0 {
			return "/"
		}
		return sb.String()
	}
	switch k := rng.Intn(20); {
	case k < 5:
		return Command{Op: OpMkdir, Path: randPath(), Parents: rng.Intn(2) == 0}
	case k < 9:
		return Command{Op: OpCreate, Path: randPath(), Replication: 1 + rng.Intn(3)}
	case k < 13:
		return Command{Op: OpAddBlock, Path: randPath(), Size: int64(rng.Intn(1000))}
	case k < 17:
		return Command{Op: OpRename, Path: randPath(), Dst: randPath()}
	default:
		return Command{Op: OpDelete, Path: randPath(), Recursive: rng.Intn(3) == 0}
	}
}

// TestModel runs random commands through the applier and the model and
// requires the same response for every command and the same tree throughout.
func TestModel(t *testing.T) {
	for _, seed := range []int64{1, 2, 3} {
		rng := rand.New(rand.NewSource(seed))
		n, m := newNSStore(t), newModel()
		codes := map[Code]int{}
		for i := 0; i < 600; i++ {
			c := randomCommand(rng)
			wantCode, wantBlock := m.apply(c)
			r := n.do(c)
			require.Equal(t, wantCode, r.Code, "seed %d step %d %+v: %s", seed, i, c, r.Message)
			require.Equal(t, wantBlock, r.BlockID, "seed %d step %d %+v", seed, i, c)
			codes[r.Code]++
			if i%50 == 49 {
				requireSameTree(t, n, m)
			}
		}
		requireSameTree(t, n, m)
		// The workload must actually reach the interesting outcomes.
		for _, code := range []Code{"", CodeNotFound, CodeAlreadyExists, CodeNotEmpty, CodeNotADirectory, CodeIsADirectory, CodeInvalidPath} {
			require.Positive(t, codes[code], "seed %d never produced %q: %v", seed, code, codes)
		}
	}
}

func requireSameTree(t *testing.T, n *nsStore, m *model) {
	t.Helper()
	for p, node := range m.nodes {
		if node.dir {
			got, err := n.ls(p)
			require.NoError(t, err, p)
			require.Equal(t, m.ls(p), got, p)
			continue
		}
		info, err := n.stat(p)
		require.NoError(t, err, p)
		want := node.blocks
		if want == nil {
			want = []Block{}
		}
		require.Equal(t, want, info.BlockList, p)
	}
}

// TestDeterminism feeds the same commands to three stores: one entry per
// Apply, and runs of random length in one Apply (where reads must see the
// batch's own earlier writes). Every response and the final StateHash must be
// identical.
func TestDeterminism(t *testing.T) {
	rng := rand.New(rand.NewSource(42))
	entries := make([][]byte, 800)
	for i := range entries {
		entries[i] = encodeRaw(t, randomCommand(rng))
	}
	single, batched, batched2 := newNSStore(t), newNSStore(t), newNSStore(t)
	var want []Response
	for _, e := range entries {
		want = append(want, single.applyEntries(e)...)
	}
	feed := func(n *nsStore, rng *rand.Rand) []Response {
		var got []Response
		for i := 0; i < len(entries); {
			j := min(len(entries), i+1+rng.Intn(40))
			got = append(got, n.applyEntries(entries[i:j]...)...)
			i = j
		}
		return got
	}
	require.Equal(t, want, feed(batched, rand.New(rand.NewSource(7))))
	require.Equal(t, want, feed(batched2, rand.New(rand.NewSource(8))))
	h := single.hash()
	require.Equal(t, h, batched.hash())
	require.Equal(t, h, batched2.hash())

	// A different history gives a different state.
	other := newNSStore(t)
	other.applyEntries(entries[:len(entries)-1]...)
	other.ok(cmdMkdir("/determinism-differs", false))
	require.NotEqual(t, h, other.hash())
}

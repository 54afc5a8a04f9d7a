package election_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
	"github.com/vmihailenco/msgpack/v5"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/election"
	"github.com/roomlog/roomlog/zkx"
)

func newLine(t *testing.T, c *zkx.Client, dir, id string, mutate ...func(*election.LineConfig)) *election.Line {
	t.Helper()
	cfg := election.LineConfig{Client: c, Dir: dir, ID: id, Data: []byte("h-" + id + ":1"), Logger: recipetest.Logger(t)}
	for _, f := range mutate {
		f(&cfg)
	}
	l, err := election.NewLine(cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = l.Leave(ctx)
		l.Close()
	})
	return l
}

func ids(cs []election.Candidate) []string {
	var out []string
	for _, c := range cs {
		out = append(out, c.ID)
	}
	return out
}

// TestLine drives three Lines by hand, as package replica does: the order,
// the predecessor watch (no herd), Requeue, Leave, and a view through
// ReadLine that agrees.
func TestLine(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	ls := make([]*election.Line, 3)
	for i, id := range []string{"a", "b", "c"} {
		ls[i] = newLine(t, recipetest.Dial(t, nil, 4*time.Second), dir, id)
		require.Equal(t, "", ls[i].Node(), "no node before Enter")
		require.NoError(t, ls[i].Enter(ctx))
		require.NoError(t, ls[i].Enter(ctx), "Enter again keeps the node")
	}
	poss := make([]election.Position, 3)
	for i, l := range ls {
		var err error
		poss[i], err = l.Read(ctx)
		require.NoError(t, err)
		require.Equal(t, i, poss[i].Mine)
		require.Equal(t, []string{"a", "b", "c"}, ids(poss[i].Candidates))
	}
	require.True(t, poss[0].First())
	low, ok := poss[2].Lowest()
	require.True(t, ok)
	require.Equal(t, "a", low.ID)
	require.Equal(t, "h-a:1", string(low.Data))
	_, ok, err := ls[0].WatchPredecessor(ctx, poss[0])
	require.NoError(t, err)
	require.False(t, ok, "the first has no predecessor")
	w1, ok, err := ls[1].WatchPredecessor(ctx, poss[1])
	require.NoError(t, err)
	require.True(t, ok)
	w2, ok, err := ls[2].WatchPredecessor(ctx, poss[2])
	require.NoError(t, err)
	require.True(t, ok)

	// The first leaves: only its successor's watch fires.
	require.NoError(t, ls[0].Leave(ctx))
	require.Equal(t, "", ls[0].Node())
	select {
	case ev := <-w1:
		require.Equal(t, zk.EventNodeDeleted, ev.Type)
	case <-time.After(5 * time.Second):
		t.Fatal("the successor's watch did not fire")
	}
	select {
	case <-w2:
		t.Fatal("no herd: the third must not be woken")
	default:
	}
	pos, err := ls[1].Read(ctx)
	require.NoError(t, err)
	require.True(t, pos.First())

	// Requeue: to the back, behind c.
	old := ls[1].Node()
	require.NoError(t, ls[1].Requeue(ctx))
	require.NotEqual(t, old, ls[1].Node())
	pos, err = ls[1].Read(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"c", "b"}, ids(pos.Candidates))
	require.Equal(t, 1, pos.Mine)

	// A Requeue whose delete cannot run (ctx over): the line forgets its
	// node anyway — it must never lead from the old place — and the next
	// Read deletes it (our guid, our session).
	old = ls[1].Node()
	over, cancelOver := context.WithCancel(ctx)
	cancelOver()
	require.Error(t, ls[1].Requeue(over))
	require.Equal(t, "", ls[1].Node())
	admin0 := recipetest.Dial(t, nil, 4*time.Second)
	ok, _, err = admin0.Conn().Exists(dir + "/" + old)
	require.NoError(t, err)
	require.True(t, ok, "the old node is still there")
	pos, err = ls[1].Read(ctx)
	require.NoError(t, err)
	require.Equal(t, -1, pos.Mine)
	require.Equal(t, []string{"c"}, ids(pos.Candidates), "the forgotten node was deleted by the listing")
	require.NoError(t, ls[1].Enter(ctx))
	pos, err = ls[1].Read(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"c", "b"}, ids(pos.Candidates))

	// Someone deletes b's node: the line forgets it, Enter re-creates it.
	admin := recipetest.Dial(t, nil, 4*time.Second)
	require.NoError(t, admin.Conn().Delete(dir+"/"+ls[1].Node(), -1))
	pos, err = ls[1].Read(ctx)
	require.NoError(t, err)
	require.Equal(t, -1, pos.Mine)
	require.Equal(t, "", ls[1].Node())
	require.NoError(t, ls[1].Enter(ctx))
	pos, err = ls[1].Read(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, pos.Mine)

	// ReadLine sees the same line.
	cands, foreign, err := election.ReadLine(ctx, admin, dir, nil)
	require.NoError(t, err)
	require.Empty(t, foreign)
	require.Equal(t, []string{"c", "b"}, ids(cands))
	cands, _, err = election.ReadLine(ctx, admin, dir+"-missing", nil)
	require.NoError(t, err)
	require.Empty(t, cands, "a missing directory is an empty line")
}

// TestLineAcceptAndGUID: Accept's error is the foreign reason (for a Line
// and for ReadLine alike); a node carrying a Line's random guid held by
// another session is foreign, one carrying a configured guid is a
// candidate.
func TestLineAcceptAndGUID(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	accept := func(c election.Candidate) error {
		if !strings.Contains(string(c.Data), ":") {
			return errors.New("no port in the address")
		}
		return nil
	}
	l := newLine(t, recipetest.Dial(t, nil, 4*time.Second), dir, "a", func(c *election.LineConfig) { c.Accept = accept })
	require.NoError(t, l.Enter(ctx))

	forger := recipetest.Dial(t, nil, 4*time.Second)
	data := func(id, d string) []byte {
		b, err := msgpack.Marshal(map[string]any{"v": 1, "id": id, "data": []byte(d)})
		require.NoError(t, err)
		return b
	}
	mk := func(guid, id, d string) string {
		p, err := forger.Conn().Create(dir+"/c-"+guid+"-", data(id, d), zk.FlagEphemeral|zk.FlagSequence, forger.ACL())
		require.NoError(t, err)
		return p
	}
	noPort := mk(strings.Repeat("1", 32), "x", "h")
	ours := mk(l.GUID(), "a", "h:1")
	pos, err := l.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"a"}, ids(pos.Candidates))
	reasons := map[string]string{}
	for _, f := range l.Foreign() {
		reasons[f.Path] = f.Reason
	}
	require.Equal(t, "no port in the address", reasons[noPort])
	require.Contains(t, reasons[ours], "carries this candidate's guid but is held by session")
	cands, foreign, err := election.ReadLine(ctx, forger, dir, accept)
	require.NoError(t, err)
	require.Len(t, cands, 2, "a view has no session of the line's: the guid rule is the Line's")
	require.Len(t, foreign, 1)
	require.Equal(t, noPort, foreign[0].Path)
	require.Equal(t, "no port in the address", foreign[0].Reason)

	// A configured guid: the other session's node is a candidate (our
	// previous process, maybe alive), ahead of ours.
	g := strings.Repeat("2", 32)
	prev := mk(g, "b", "h:2")
	lb := newLine(t, recipetest.Dial(t, nil, 4*time.Second), dir, "b", func(c *election.LineConfig) { c.GUID = g })
	require.NoError(t, lb.Enter(ctx))
	pos, err = lb.Read(ctx)
	require.NoError(t, err)
	// lb has no Accept and another guid: x and the copy of a's guid count
	// for it.
	require.Equal(t, []string{"a", "x", "a", "b", "b"}, ids(pos.Candidates))
	require.Equal(t, 4, pos.Mine)
	require.Equal(t, prev, dir+"/"+pos.Candidates[3].Node)
}

// TestLineSessionExpiry: after its session expired, Read reports the node
// gone (Mine -1) and Enter re-enters at the back in the new session.
func TestLineSessionExpiry(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	p := recipetest.DialProxied(t)
	l := newLine(t, p.Client, dir, "a")
	require.NoError(t, l.Enter(ctx))
	other := newLine(t, recipetest.Dial(t, nil, 4*time.Second), dir, "b")
	require.NoError(t, other.Enter(ctx))
	pos, err := l.Read(ctx)
	require.NoError(t, err)
	require.True(t, pos.First())
	old := l.Node()

	p.Expire(t)
	recipetest.Eventually(t, 20*time.Second, "a new session", func() bool { return p.State() == zk.StateHasSession })
	pos, err = l.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, -1, pos.Mine, "the expired session's node is gone")
	require.Equal(t, []string{"b"}, ids(pos.Candidates))
	require.NoError(t, l.Enter(ctx))
	require.NotEqual(t, old, l.Node())
	pos, err = l.Read(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, pos.Mine, "back of the line, behind b")
}

func TestLineConfig(t *testing.T) {
	_, err := election.NewLine(election.LineConfig{Dir: "x", ID: "a b", GUID: "nope", Data: make([]byte, election.MaxDataBytes+1)})
	require.ErrorIs(t, err, election.ErrBadConfig)
	for _, field := range []string{"Client", "Dir", "ID", "Data", "GUID"} {
		require.Contains(t, err.Error(), field)
	}
}

// TestAcceptCandidate: the candidate rules, without a server (name, Stat,
// data), as every Line, Participant, Observer and ReadLine applies them.
func TestAcceptCandidate(t *testing.T) {
	g := strings.Repeat("ab", 16)
	pack := func(v any) []byte {
		b, err := msgpack.Marshal(v)
		require.NoError(t, err)
		return b
	}
	good := pack(map[string]any{"v": 1, "id": "m0", "data": []byte("h:1")})
	for _, tc := range []struct {
		what, name string
		data       []byte
		owner      int64
		reason     string // "" = counts
	}{
		{"valid", "c-" + g + "-0000000007", good, 9, ""},
		{"max sequence", "c-" + g + "-2147483647", good, 9, ""},
		{"no data field", "c-" + g + "-0000000001", pack(map[string]any{"v": 1, "id": "m0"}), 9, ""},
		{"negative sequence", "c-" + g + "--000000001", good, 9, "negative"},
		{"short sequence", "c-" + g + "-7", good, 9, "sequential node name"},
		{"past int32", "c-" + g + "-2147483648", good, 9, "range"},
		{"bad guid", "c-zz" + g[2:] + "-0000000001", good, 9, "bad guid"},
		{"not a candidate", "members", good, 9, "sequential node name"},
		{"persistent", "c-" + g + "-0000000001", good, 0, "not ephemeral"},
		{"no id", "c-" + g + "-0000000001", pack(map[string]any{"v": 1, "data": []byte("h:1")}), 9, "bad candidate id"},
		{"bad id", "c-" + g + "-0000000001", pack(map[string]any{"v": 1, "id": "a/b"}), 9, "bad candidate id"},
		{"version 0", "c-" + g + "-0000000001", pack(map[string]any{"id": "m0"}), 9, "version 0"},
		{"version 2", "c-" + g + "-0000000001", pack(map[string]any{"v": 2, "id": "m0"}), 9, "version 2"},
		{"junk", "c-" + g + "-0000000001", []byte{0xc1}, 9, "decode"},
		{"trailing bytes", "c-" + g + "-0000000001", append(append([]byte(nil), good...), 0x01), 9, "decode"},
		{"huge declared string", "c-" + g + "-0000000001", []byte{0x81, 0xa1, 'v', 0xdb, 0x7f, 0xff, 0xff, 0xff}, 9, "decode"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			c, reason := election.AcceptCandidateForTest(tc.name, tc.data, tc.owner)
			if tc.reason == "" {
				require.Equal(t, "", reason)
				require.Equal(t, "m0", c.ID)
				require.Equal(t, tc.owner, c.Session)
				return
			}
			require.Contains(t, reason, tc.reason)
		})
	}
}

package election_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/election"
	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/zkx"
)

func TestMain(m *testing.M) { recipetest.Main(m) }

const (
	pkgElection = "github.com/roomlog/roomlog/recipe/election"
	pkgZKR      = "github.com/roomlog/roomlog/recipe/internal/zkr"
)

func join(t *testing.T, c *zkx.Client, dir, id string, mutate ...func(*election.Config)) *election.Participant {
	t.Helper()
	cfg := election.Config{Client: c, Dir: dir, ID: id, Data: []byte("addr-" + id), Logger: recipetest.Logger(t)}
	for _, f := range mutate {
		f(&cfg)
	}
	p, err := election.Join(recipetest.Ctx(t, 10*time.Second), cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = p.Resign(ctx)
	})
	return p
}

// leaderLog records the observer's view of the leader over time.
type leaderLog struct {
	mu  sync.Mutex
	ids []string
}

func (l *leaderLog) onChange(c election.Candidate, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ok {
		l.ids = append(l.ids, c.ID)
	}
}

func (l *leaderLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.ids)
}

func observe(t *testing.T, c *zkx.Client, dir string) (*election.Observer, *leaderLog) {
	t.Helper()
	l := &leaderLog{}
	o, err := election.Observe(recipetest.Ctx(t, 10*time.Second), c, dir, election.ObserveOptions{OnChange: l.onChange})
	require.NoError(t, err)
	t.Cleanup(o.Close)
	return o, l
}

// isSubsequence reports whether sub appears in seq in order.
func isSubsequence(sub, seq []string) bool {
	i := 0
	for _, s := range seq {
		if i < len(sub) && sub[i] == s {
			i++
		}
	}
	return i == len(sub)
}

// TestTenCandidates is the seed's plan: ten candidates; each steps down as
// soon as it wins, twice over (the second time it resigns). The leaders
// follow the line exactly (c0..c9, then again, since a step-down re-enters
// at the back); never are two leaders at once — each winner checks a
// shared counter, and an independent observer sees the leaders in that
// order; each leader's guarded write lands, with tokens strictly
// increasing.
func TestTenCandidates(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	obs, obsLog := observe(t, admin, dir)
	record := dir + "-record"
	_, err := admin.Conn().Create(record, []byte("0"), 0, admin.ACL())
	require.NoError(t, err)

	const n = 10
	ps := make([]*election.Participant, n)
	for i := range n {
		ps[i] = join(t, recipetest.Dial(t, nil, 4*time.Second), dir, fmt.Sprintf("c%d", i))
	}
	var (
		leaders atomic.Int32
		mu      sync.Mutex
		order   []string
		tokens  []int64
		wg      sync.WaitGroup
		errs    = make(chan error, 4*n)
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := ps[i]
			for round := range 2 {
				term, err := p.Await(ctx)
				if err != nil {
					errs <- err
					return
				}
				if k := leaders.Add(1); k != 1 {
					errs <- fmt.Errorf("%s leads while %d others do", p.ID(), k-1)
				}
				mu.Lock()
				order = append(order, p.ID())
				tokens = append(tokens, term.Token())
				mu.Unlock()
				if p.Role() != election.Leader || !term.Active() {
					errs <- fmt.Errorf("%s: Await returned but role %v, active %v", p.ID(), p.Role(), term.Active())
				}
				if _, err := term.Multi(ctx, &zk.SetDataRequest{Path: record, Data: []byte(strconv.FormatInt(term.Token(), 10)), Version: -1}); err != nil {
					errs <- err
				}
				leaders.Add(-1)
				if round == 0 {
					err = p.StepDown(ctx)
				} else {
					err = p.Resign(ctx)
				}
				if err != nil {
					errs <- err
				}
				select {
				case <-term.Done():
				default:
					errs <- fmt.Errorf("%s: term not done after stepping down", p.ID())
				}
				if !strings.Contains(fmt.Sprint(term.Err()), "stepped down") {
					errs <- fmt.Errorf("%s: term ended with %v", p.ID(), term.Err())
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	var want []string
	for range 2 {
		for i := range n {
			want = append(want, fmt.Sprintf("c%d", i))
		}
	}
	require.Equal(t, want, order, "leaders follow the line")
	for i := 1; i < len(tokens); i++ {
		require.Greater(t, tokens[i], tokens[i-1], "tokens strictly increase")
	}
	b, _, err := admin.Conn().Get(record)
	require.NoError(t, err)
	require.Equal(t, strconv.FormatInt(tokens[len(tokens)-1], 10), string(b))
	seen := obsLog.get()
	require.NotEmpty(t, seen)
	require.True(t, isSubsequence(seen, want), "the observer saw the leaders in line order: %v", seen)
	names, _, err := admin.Conn().Children(dir)
	require.NoError(t, err)
	require.Empty(t, names)
	obs.Close()
	recipetest.NoLeaks(t, pkgElection, pkgZKR)
}

// TestLeaderExpiry: the leader is cut off past its session timeout. Its
// term ends at the disconnection (SuspendGrace 0), before the others can
// elect anyone; the next candidate leads with a larger token; the old
// leader's guarded writes fail, and once reconnected it is a follower in a
// new session, at the back of the line.
func TestLeaderExpiry(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	o, _ := observe(t, admin, dir)
	pa := recipetest.DialProxied(t)
	a := join(t, pa.Client, dir, "a")
	b := join(t, recipetest.Dial(t, nil, 4*time.Second), dir, "b")
	ta, err := a.Await(ctx)
	require.NoError(t, err)
	oldNode := a.Node()

	pa.Cut(t)
	select {
	case <-ta.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the leader's term did not end at the disconnection")
	}
	require.ErrorIs(t, ta.Err(), election.ErrLeadershipLost)
	require.Contains(t, ta.Err().Error(), "grace")
	require.False(t, ta.Active())
	endedAt := time.Now()
	tb, err := b.Await(ctx)
	require.NoError(t, err)
	require.Greater(t, tb.Token(), ta.Token())
	t.Logf("a's term ended %v before b's began", time.Since(endedAt))
	recipetest.Eventually(t, 5*time.Second, "the observer sees b lead", func() bool {
		l, ok := o.Leader()
		return ok && l.ID == "b"
	})
	_, err = ta.Multi(ctx, &zk.SetDataRequest{Path: dir, Data: []byte("a"), Version: -1})
	require.ErrorIs(t, err, election.ErrLeadershipLost)

	pa.WaitExpired(t)
	pa.Heal(t)
	_, err = pa.Conn().Multi(ta.Guard(&zk.SetDataRequest{Path: dir, Data: []byte("a"), Version: -1})...)
	require.ErrorIs(t, err, zk.ErrNoNode, "the paused leader's late write is refused by ZooKeeper")
	recipetest.Eventually(t, 10*time.Second, "a re-enters behind b", func() bool {
		return a.Role() == election.Follower && a.Node() != "" && a.Node() != oldNode
	})
	recipetest.Eventually(t, 5*time.Second, "the observer sees b then a", func() bool {
		cands := o.Candidates()
		return len(cands) == 2 && cands[0].ID == "b" && cands[1].ID == "a" && cands[1].Session == pa.SessionID()
	})
	require.Nil(t, a.Term())
	require.Equal(t, tb, b.Term())
	data, _, err := admin.Conn().Get(dir)
	require.NoError(t, err)
	require.Empty(t, data, "nothing of a's was written")
}

// TestSuspendGrace: with a grace, a short disconnection pauses the term
// (not Active) without ending it; without one, it ends the term, and the
// same node, still the lowest, starts a new term with the same token once
// reconnected.
func TestSuspendGrace(t *testing.T) {
	ctx := recipetest.Ctx(t, 30*time.Second)
	p := recipetest.DialProxiedSession(t, 9*time.Second)
	patient := join(t, p.Client, recipetest.Dir(t), "patient", func(c *election.Config) { c.SuspendGrace = 2900 * time.Millisecond })
	strict := join(t, p.Client, recipetest.Dir(t), "strict")
	tp, err := patient.Await(ctx)
	require.NoError(t, err)
	ts, err := strict.Await(ctx)
	require.NoError(t, err)
	var pausedSeen atomic.Bool
	stop := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if tp.Err() == nil && !tp.Active() {
				pausedSeen.Store(true)
			}
			time.Sleep(time.Millisecond)
		}
	}()
	p.Disconnect(t)
	close(stop)
	<-sampled
	require.True(t, pausedSeen.Load(), "the term was not Active while disconnected")
	require.NoError(t, tp.Err())
	require.True(t, tp.Active())
	require.Equal(t, tp, patient.Term())

	select {
	case <-ts.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a disconnection did not end the term without a grace")
	}
	require.ErrorIs(t, ts.Err(), election.ErrLeadershipLost)
	ts2, err := strict.Await(ctx)
	require.NoError(t, err)
	require.NotSame(t, ts, ts2)
	require.Equal(t, ts.Token(), ts2.Token(), "same node, same leadership")
}

// TestDeletedLeaderNode: someone deletes the leader's node; its term ends
// at once, the next candidate leads, and the old leader re-enters.
func TestDeletedLeaderNode(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	a := join(t, recipetest.Dial(t, nil, 4*time.Second), dir, "a")
	b := join(t, recipetest.Dial(t, nil, 4*time.Second), dir, "b")
	ta, err := a.Await(ctx)
	require.NoError(t, err)
	require.NoError(t, admin.Conn().Delete(ta.Node(), -1))
	<-ta.Done()
	require.ErrorIs(t, ta.Err(), election.ErrLeadershipLost)
	require.Contains(t, ta.Err().Error(), "node deleted")
	_, err = b.Await(ctx)
	require.NoError(t, err)
	recipetest.Eventually(t, 10*time.Second, "a re-enters", func() bool { return a.Role() == election.Follower })
}

// TestProtectedCreate: a node carrying the participant's guid, created in
// its own session before Join (a create whose answer was lost), is
// adopted instead of a second one being created; and when the answer to
// Join's own create is lost on the wire, the node is found by guid.
func TestProtectedCreate(t *testing.T) {
	t.Run("pre-existing", func(t *testing.T) {
		dir := recipetest.Dir(t)
		ctx := recipetest.Ctx(t, 30*time.Second)
		c := recipetest.Dial(t, nil, 4*time.Second)
		other := join(t, recipetest.Dial(t, nil, 4*time.Second), dir, "other")
		guid := zkr.NewGUID()
		data := zkr.Encode(struct {
			V    int    `msgpack:"v"`
			ID   string `msgpack:"id"`
			Data []byte `msgpack:"data"`
		}{1, "p", nil})
		created, err := c.Conn().Create(dir+"/c-"+guid+"-", data, zk.FlagEphemeral|zk.FlagSequence, c.ACL())
		require.NoError(t, err)
		p := join(t, c, dir, "p", func(cfg *election.Config) { cfg.GUID = guid })
		require.Equal(t, created, dir+"/"+p.Node(), "adopted, not created again")
		names, _, err := c.Conn().Children(dir)
		require.NoError(t, err)
		require.Len(t, names, 2)
		require.NoError(t, other.Resign(ctx))
		_, err = p.Await(ctx)
		require.NoError(t, err)
	})
	t.Run("lost answer", func(t *testing.T) {
		dir := recipetest.Dir(t)
		ctx := recipetest.Ctx(t, 30*time.Second)
		admin := recipetest.Dial(t, nil, 4*time.Second)
		px := recipetest.DialProxiedSession(t, 6*time.Second)
		_, err := admin.Conn().Create(dir, nil, 0, admin.ACL())
		require.NoError(t, err)
		px.Proxy.DropReplies() // Join's first request is its create
		type res struct {
			p   *election.Participant
			err error
		}
		done := make(chan res, 1)
		go func() {
			p, err := election.Join(ctx, election.Config{Client: px.Client, Dir: dir, ID: "p", Logger: recipetest.Logger(t)})
			done <- res{p, err}
		}()
		var landed string
		recipetest.Eventually(t, 10*time.Second, "the create lands", func() bool {
			names, _, err := admin.Conn().Children(dir)
			if err != nil {
				return false
			}
			if len(names) == 1 {
				landed = names[0]
			}
			return landed != ""
		})
		px.Proxy.Heal()
		px.Proxy.Reset()
		r := <-done
		require.NoError(t, r.err)
		defer r.p.Resign(ctx)
		require.Equal(t, landed, r.p.Node())
		require.Contains(t, landed, r.p.GUID())
		names, _, err := admin.Conn().Children(dir)
		require.NoError(t, err)
		require.Equal(t, []string{landed}, names, "one node for one participant")
		_, err = r.p.Await(ctx)
		require.NoError(t, err)
	})
}

// TestDesignate: the leader designates the last candidate; the one in
// between steps behind it, the designated one leads next, deletes the
// record, and the others follow. Designate by a non-leader and for an
// unknown id fail.
func TestDesignate(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	_, log := observe(t, admin, dir)
	a := join(t, recipetest.Dial(t, nil, 4*time.Second), dir, "a")
	b := join(t, recipetest.Dial(t, nil, 4*time.Second), dir, "b")
	c := join(t, recipetest.Dial(t, nil, 4*time.Second), dir, "c")
	ta, err := a.Await(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, b.Designate(ctx, "c"), election.ErrNotLeader)
	require.ErrorIs(t, a.Designate(ctx, "nobody"), election.ErrNoCandidate)
	require.NoError(t, a.Designate(ctx, "a"), "designating oneself is a no-op")
	require.Equal(t, ta, a.Term())

	bLed := make(chan *election.Term, 1)
	bctx, bcancel := context.WithCancel(ctx)
	bdone := make(chan struct{})
	go func() {
		defer close(bdone)
		if tb, err := b.Await(bctx); err == nil {
			bLed <- tb
		}
	}()
	require.NoError(t, a.Designate(ctx, "c"))
	require.ErrorIs(t, ta.Err(), election.ErrSteppedDown)
	tc, err := c.Await(ctx)
	require.NoError(t, err)
	require.Greater(t, tc.Token(), ta.Token())
	recipetest.Eventually(t, 5*time.Second, "the record is deleted", func() bool {
		ok, _, err := admin.Conn().Exists(dir + "/designation")
		return err == nil && !ok
	})
	bcancel()
	<-bdone
	select {
	case tb := <-bLed:
		t.Fatalf("b led (token %d) although c was designated", tb.Token())
	default:
	}
	require.Nil(t, b.Term(), "b stepped behind c")
	recipetest.Eventually(t, 5*time.Second, "the observer sees c lead", func() bool {
		l := log.get()
		return len(l) > 0 && l[len(l)-1] == "c"
	})
	require.NoError(t, c.StepDown(ctx))
	_, err = a.Await(ctx)
	require.NoError(t, err, "then the line resumes: a re-entered before b")
}

// TestForeignCandidates: a persistent node with a candidate name and the
// lowest sequence, an ephemeral one whose data does not decode, junk names
// and a persistent designation record are ignored (and reported); the
// election proceeds among the real candidates.
func TestForeignCandidates(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	forger := recipetest.Dial(t, nil, 4*time.Second)
	require.NoError(t, func() error {
		_, err := forger.Conn().Create(dir, nil, 0, forger.ACL())
		return err
	}())
	g := strings.Repeat("ab", 16)
	for _, n := range []struct {
		name  string
		data  []byte
		flags int32
	}{
		{"c-" + g + "-0000000000", zkr.Encode(map[string]any{"v": 1, "id": "forged"}), 0},
		{"c-" + g + "-0000000001", []byte{0xc1}, zk.FlagEphemeral},
		{"junk", nil, zk.FlagEphemeral},
		{"designation", zkr.Encode(map[string]any{"v": 1, "to_guid": g}), 0},
	} {
		_, err := forger.Conn().Create(dir+"/"+n.name, n.data, n.flags, forger.ACL())
		require.NoError(t, err)
	}
	o, _ := observe(t, forger, dir)
	a := join(t, recipetest.Dial(t, nil, 4*time.Second), dir, "a")
	_, err := a.Await(ctx)
	require.NoError(t, err)
	f := a.Foreign()
	require.Len(t, f, 4, "%v", f)
	recipetest.Eventually(t, 5*time.Second, "the observer sees a", func() bool {
		l, ok := o.Leader()
		return ok && l.ID == "a"
	})
	require.Len(t, o.Foreign(), 3, "the observer does not read the designation record")
}

// TestClientClosed: closing the client under a leader ends its term and
// stops the participant; Await and StepDown then say the client is closed.
func TestClientClosed(t *testing.T) {
	ctx := recipetest.Ctx(t, 30*time.Second)
	c := recipetest.Dial(t, nil, 4*time.Second)
	p := join(t, c, recipetest.Dir(t), "a")
	term, err := p.Await(ctx)
	require.NoError(t, err)
	c.Close()
	<-term.Done()
	require.ErrorIs(t, term.Err(), election.ErrLeadershipLost)
	recipetest.Eventually(t, 5*time.Second, "the participant stops", func() bool {
		_, err := p.Await(ctx)
		return errors.Is(err, zkx.ErrClosed)
	})
	require.ErrorIs(t, p.StepDown(ctx), zkx.ErrClosed)
	require.NoError(t, p.Resign(ctx))
	recipetest.NoLeaks(t, pkgElection, pkgZKR)
}

func TestDecide(t *testing.T) {
	const self, other, gone = "self", "other", "gone"
	live := map[string]bool{self: true, other: true}
	rec := func(to string) *election.DesignationForTest { return &election.DesignationForTest{ToGUID: to} }
	for _, tc := range []struct {
		name          string
		rec           *election.DesignationForTest
		age           time.Duration
		requeue, drop bool
	}{
		{"no record", nil, 0, false, false},
		{"names us", rec(self), 0, false, true},
		{"names a live other", rec(other), time.Second, true, false},
		{"names a gone candidate", rec(gone), 0, false, true},
		{"expired", rec(other), time.Minute, false, true},
		{"just below the ttl", rec(other), 30*time.Second - time.Nanosecond, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			requeue, drop := election.DecideForTest(tc.rec, tc.age, 30*time.Second, self, live)
			require.Equal(t, tc.requeue, requeue)
			require.Equal(t, tc.drop, drop)
		})
	}
}

func TestConfigValidate(t *testing.T) {
	err := election.Config{Dir: "x", ID: "", GUID: "XYZ", Data: make([]byte, election.MaxDataBytes+1), SuspendGrace: -1, DesignationTTL: -1}.Validate()
	for _, f := range []string{"Client", "Dir", "ID", "Data", "GUID", "SuspendGrace", "DesignationTTL"} {
		require.Contains(t, err.Error(), f)
	}
	require.ErrorIs(t, err, election.ErrBadConfig)
	_, err = election.Observe(context.Background(), nil, "/x", election.ObserveOptions{})
	require.ErrorIs(t, err, election.ErrBadConfig)
}

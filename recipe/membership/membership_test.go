package membership_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/membership"
)

func TestMain(m *testing.M) { recipetest.Main(m) }

const pkgs = "github.com/roomlog/roomlog/recipe/membership"
const zkr = "github.com/roomlog/roomlog/recipe/internal/zkr"

// recorder counts the callbacks one watcher delivered, per member id.
type recorder struct {
	mu       sync.Mutex
	joins    map[string]int
	leaves   map[string]int
	sessions []membership.SessionEvent
	// present tracks the members as the callbacks describe them, to check
	// that every leave follows a join of the same incarnation.
	present map[string]int64
	errs    []string
}

func newRecorder() *recorder {
	return &recorder{joins: map[string]int{}, leaves: map[string]int{}, present: map[string]int64{}}
}

func (r *recorder) options() membership.WatchOptions {
	return membership.WatchOptions{
		OnJoin: func(m membership.Member) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if _, ok := r.present[m.ID]; ok {
				r.errs = append(r.errs, "join of present member "+m.ID)
			}
			r.present[m.ID] = m.Czxid
			r.joins[m.ID]++
		},
		OnLeave: func(m membership.Member) {
			r.mu.Lock()
			defer r.mu.Unlock()
			if cz, ok := r.present[m.ID]; !ok || cz != m.Czxid {
				r.errs = append(r.errs, fmt.Sprintf("leave of %s (czxid %d) without its join", m.ID, m.Czxid))
			}
			delete(r.present, m.ID)
			r.leaves[m.ID]++
		},
		OnSession: func(e membership.SessionEvent) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.sessions = append(r.sessions, e)
		},
	}
}

func (r *recorder) total() (joins, leaves int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, n := range r.joins {
		joins += n
	}
	for _, n := range r.leaves {
		leaves += n
	}
	return joins, leaves
}

func (r *recorder) count(id string) (joins, leaves int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.joins[id], r.leaves[id]
}

func (r *recorder) check(t *testing.T) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	require.Empty(t, r.errs)
}

func ids(ms []membership.Member) []string {
	out := make([]string, len(ms))
	for i, m := range ms {
		out[i] = m.ID
	}
	return out
}

// TestFourServers is the seed's plan: four servers register in turn; each
// one's first view (GetOriginMates) holds exactly the servers before it
// and itself; every watcher gets one join per server; then each leaves in
// turn and every remaining watcher gets exactly one leave per departed
// server, with the departed one's data.
func TestFourServers(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	const n = 4
	regs := make([]*membership.Registration, n)
	ws := make([]*membership.Watcher, n)
	recs := make([]*recorder, n)
	names := make([]string, n)
	for i := range n {
		c := recipetest.Dial(t, nil, 4*time.Second)
		names[i] = fmt.Sprintf("10.0.0.%d:8080", i+1)
		var err error
		regs[i], err = membership.Join(ctx, c, dir, names[i], []byte("data-"+names[i]), membership.JoinOptions{Logger: recipetest.Logger(t)})
		require.NoError(t, err)
		recs[i] = newRecorder()
		opts := recs[i].options()
		opts.Logger = recipetest.Logger(t)
		ws[i], err = membership.Watch(ctx, c, dir, opts)
		require.NoError(t, err)
		t.Cleanup(ws[i].Close)
		require.Equal(t, names[:i+1], ids(ws[i].Members()), "server %d's first view", i)
		for j := 0; j <= i; j++ {
			j := j
			recipetest.Eventually(t, 10*time.Second, "watchers see the new server", func() bool {
				joins, _ := recs[j].total()
				return joins == i+1
			})
		}
	}
	for i := range n {
		require.Equal(t, names, ids(ws[i].Members()))
		for _, id := range names {
			joins, leaves := recs[i].count(id)
			require.Equal(t, 1, joins, "watcher %d, joins of %s", i, id)
			require.Equal(t, 0, leaves)
		}
		require.Equal(t, []byte("data-"+names[2]), ws[i].Members()[2].Data)
	}
	for i := range n {
		require.NoError(t, regs[i].Leave(ctx))
		ws[i].Close()
		for j := i + 1; j < n; j++ {
			j := j
			recipetest.Eventually(t, 10*time.Second, "watchers see the server leave", func() bool {
				_, leaves := recs[j].total()
				return leaves == i+1
			})
			require.Equal(t, names[i+1:], ids(ws[j].Members()))
		}
	}
	for i := range n {
		recs[i].check(t)
		for _, id := range names[:i] {
			_, leaves := recs[i].count(id)
			require.Equal(t, 1, leaves, "watcher %d, leaves of %s", i, id)
		}
	}
	recipetest.NoLeaks(t, pkgs, zkr)
}

// TestExpiryRebuild: a member whose session expires disappears from the
// others' view (a leave), and its registration re-creates the node in the
// new session (a join of a new incarnation). Its own watcher reports Lost
// and converges too.
func TestExpiryRebuild(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	a := recipetest.Dial(t, nil, 4*time.Second)
	b := recipetest.DialProxied(t)
	ra, err := membership.Join(ctx, a, dir, "a", nil, membership.JoinOptions{})
	require.NoError(t, err)
	defer ra.Leave(ctx)
	rb, err := membership.Join(ctx, b.Client, dir, "b", []byte("b1"), membership.JoinOptions{Logger: recipetest.Logger(t)})
	require.NoError(t, err)
	defer rb.Leave(ctx)
	recA, recB := newRecorder(), newRecorder()
	wa, err := membership.Watch(ctx, a, dir, recA.options())
	require.NoError(t, err)
	defer wa.Close()
	optsB := recB.options()
	optsB.Logger = recipetest.Logger(t)
	wb, err := membership.Watch(ctx, b.Client, dir, optsB)
	require.NoError(t, err)
	defer wb.Close()
	before := wa.Members()[1]
	require.Equal(t, "b", before.ID)
	require.Equal(t, b.SessionID(), before.Session)

	b.CutUntilExpired(t)
	recipetest.Eventually(t, 10*time.Second, "a sees b leave", func() bool {
		_, leaves := recA.count("b")
		return leaves == 1
	})
	require.Equal(t, []string{"a"}, ids(wa.Members()))
	require.True(t, wb.Stale(), "b's watcher knows it is disconnected")
	b.Heal(t)

	recipetest.Eventually(t, 10*time.Second, "a sees b rejoin", func() bool {
		joins, _ := recA.count("b")
		return joins == 2
	})
	after := wa.Members()[1]
	require.Equal(t, "b", after.ID)
	require.Equal(t, []byte("b1"), after.Data)
	require.Equal(t, b.SessionID(), after.Session, "re-created in the new session")
	require.NotEqual(t, before.Czxid, after.Czxid)
	recipetest.Eventually(t, 5*time.Second, "b's registration knows", rb.Registered)
	require.Equal(t, 1, rb.Rebuilds())

	// b's own watcher: Suspended, then Lost; it converges on both members.
	recipetest.Eventually(t, 10*time.Second, "b's watcher converges", func() bool {
		return slices.Equal([]string{"a", "b"}, ids(wb.Members())) && wb.Members()[1].Czxid == after.Czxid && !wb.Stale()
	})
	recipetest.Eventually(t, 10*time.Second, "b's watcher delivered its session events", func() bool {
		recB.mu.Lock()
		defer recB.mu.Unlock()
		return slices.Contains(recB.sessions, membership.Lost)
	})
	recB.mu.Lock()
	require.Equal(t, membership.Suspended, recB.sessions[0])
	recB.mu.Unlock()
	recA.check(t)
	recB.check(t)
	require.Equal(t, 0, func() int { _, l := recA.count("a"); return l }())
}

// TestDisconnectKeepsSession: a short disconnection suspends a watcher and
// reconnects it in the same session; the member never leaves.
func TestDisconnectKeepsSession(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	b := recipetest.DialProxied(t)
	rb, err := membership.Join(ctx, b.Client, dir, "b", nil, membership.JoinOptions{})
	require.NoError(t, err)
	defer rb.Leave(ctx)
	rec := newRecorder()
	w, err := membership.Watch(ctx, b.Client, dir, rec.options())
	require.NoError(t, err)
	defer w.Close()
	b.Disconnect(t)
	recipetest.Eventually(t, 5*time.Second, "suspended then reconnected", func() bool {
		rec.mu.Lock()
		defer rec.mu.Unlock()
		return slices.Equal(rec.sessions, []membership.SessionEvent{membership.Suspended, membership.Reconnected})
	})
	require.False(t, w.Stale())
	joins, leaves := rec.count("b")
	require.Equal(t, 1, joins)
	require.Equal(t, 0, leaves)
	require.Equal(t, 0, rb.Rebuilds())
}

// TestDeletedNodeRebuilt: a member node deleted by someone else is
// re-created by its registration (a new incarnation: a leave and a join).
func TestDeletedNodeRebuilt(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	a := recipetest.Dial(t, nil, 4*time.Second)
	ra, err := membership.Join(ctx, a, dir, "a", nil, membership.JoinOptions{})
	require.NoError(t, err)
	rec := newRecorder()
	w, err := membership.Watch(ctx, a, dir, rec.options())
	require.NoError(t, err)
	t.Cleanup(w.Close)
	op := recipetest.Dial(t, nil, 4*time.Second)
	require.NoError(t, op.Conn().Delete(dir+"/a", -1))
	recipetest.Eventually(t, 10*time.Second, "a leaves and rejoins", func() bool {
		joins, leaves := rec.count("a")
		return joins == 2 && leaves == 1
	})
	recipetest.Eventually(t, 5*time.Second, "the registration counts the rebuild", func() bool { return ra.Rebuilds() == 1 })
	rec.check(t)
	require.NoError(t, ra.Leave(ctx))
	w.Close()
	recipetest.NoLeaks(t, pkgs, zkr)
}

// TestForeignIgnored: a persistent node with a valid id and a child whose
// name is not a valid id are no members; both are reported by Foreign.
// An Accept hook refuses a member whose data it dislikes.
func TestForeignIgnored(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	a := recipetest.Dial(t, nil, 4*time.Second)
	ra, err := membership.Join(ctx, a, dir, "a", []byte("ok"), membership.JoinOptions{})
	require.NoError(t, err)
	defer ra.Leave(ctx)
	forger := recipetest.Dial(t, nil, 4*time.Second)
	_, err = forger.Conn().Create(dir+"/forged", []byte("ok"), 0, forger.ACL())
	require.NoError(t, err)
	_, err = forger.Conn().Create(dir+"/bad name", []byte("ok"), zk.FlagEphemeral, forger.ACL())
	require.NoError(t, err)
	_, err = forger.Conn().Create(dir+"/picky", []byte("nope"), zk.FlagEphemeral, forger.ACL())
	require.NoError(t, err)

	rec := newRecorder()
	opts := rec.options()
	opts.Accept = func(m membership.Member) error {
		if string(m.Data) != "ok" {
			return fmt.Errorf("data %q", m.Data)
		}
		return nil
	}
	w, err := membership.Watch(ctx, a, dir, opts)
	require.NoError(t, err)
	defer w.Close()
	require.Equal(t, []string{"a"}, ids(w.Members()))
	f := w.Foreign()
	require.Len(t, f, 3, "%v", f)
	require.Equal(t, dir+"/bad name", f[0].Path)
	require.Contains(t, f[0].Reason, "not a valid member id")
	require.Equal(t, dir+"/forged", f[1].Path)
	require.Contains(t, f[1].Reason, "not ephemeral")
	require.Equal(t, dir+"/picky", f[2].Path)
	require.Equal(t, `data "nope"`, f[2].Reason, "Accept's error is the reason, as it is")

	// A forged node of a member's id blocks that id: Join refuses at once.
	_, err = membership.Join(ctx, a, dir, "forged", nil, membership.JoinOptions{})
	require.ErrorIs(t, err, membership.ErrIDInUse)

	// Removing the forgery clears the report.
	require.NoError(t, forger.Conn().Delete(dir+"/forged", -1))
	recipetest.Eventually(t, 5*time.Second, "report cleared", func() bool { return len(w.Foreign()) == 2 })
	joins, _ := rec.total()
	require.Equal(t, 1, joins)
}

// TestJoinIDInUse: an id held by another live session is waited for until
// ctx ends (ErrIDInUse), and taken over as soon as that session ends. A
// node of our id created in our own session (a create whose answer was
// lost) is adopted, not refused.
func TestJoinIDInUse(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	a := recipetest.Dial(t, nil, 4*time.Second)
	b := recipetest.Dial(t, nil, 4*time.Second)
	ra, err := membership.Join(ctx, a, dir, "x", nil, membership.JoinOptions{})
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = membership.Join(short, b, dir, "x", nil, membership.JoinOptions{})
	cancel()
	require.ErrorIs(t, err, membership.ErrIDInUse)
	require.ErrorIs(t, err, context.DeadlineExceeded)

	done := make(chan error, 1)
	var rb *membership.Registration
	go func() {
		var err error
		rb, err = membership.Join(ctx, b, dir, "x", []byte("b"), membership.JoinOptions{})
		done <- err
	}()
	a.Close() // a's session ends: its node goes
	require.NoError(t, <-done)
	require.True(t, rb.Registered())
	require.NoError(t, ra.Leave(ctx)) // a's client is closed: nothing to do, but it stops
	require.NoError(t, rb.Leave(ctx))

	// Lost answer: the node exists in our session already.
	_, err = b.Conn().Create(dir+"/y", []byte("y"), zk.FlagEphemeral, b.ACL())
	require.NoError(t, err)
	ry, err := membership.Join(ctx, b, dir, "y", []byte("y"), membership.JoinOptions{})
	require.NoError(t, err)
	require.True(t, ry.Registered())
	require.NoError(t, ry.Leave(ctx))
	ok, _, err := b.Conn().Exists(dir + "/y")
	require.NoError(t, err)
	require.False(t, ok, "Leave deletes the node")

	// A Leave whose delete could not run (ctx already over) leaves the
	// node, and says so; the next Leave deletes it (the registration no
	// longer keeps it meanwhile: Updates are refused).
	rz, err := membership.Join(ctx, b, dir, "z", []byte("z"), membership.JoinOptions{})
	require.NoError(t, err)
	over, cancelOver := context.WithCancel(ctx)
	cancelOver()
	require.Error(t, rz.Leave(over), "a Leave that could not delete says so")
	ok, _, err = b.Conn().Exists(dir + "/z")
	require.NoError(t, err)
	require.True(t, ok, "the node is still there")
	require.ErrorIs(t, rz.Update(ctx, []byte("z2")), membership.ErrLeft)
	require.NoError(t, rz.Leave(ctx), "the retry deletes it")
	ok, _, err = b.Conn().Exists(dir + "/z")
	require.NoError(t, err)
	require.False(t, ok, "the retried Leave deleted the node")
	require.NoError(t, rz.Leave(ctx), "and later ones are no-ops")

	// A persistent node at our path: ErrIDInUse and ErrPersistentNode.
	_, err = b.Conn().Create(dir+"/p", nil, 0, b.ACL())
	require.NoError(t, err)
	_, err = membership.Join(ctx, b, dir, "p", nil, membership.JoinOptions{})
	require.ErrorIs(t, err, membership.ErrIDInUse)
	require.ErrorIs(t, err, membership.ErrPersistentNode)
	recipetest.NoLeaks(t, pkgs, zkr)
}

// TestSlowCallback: a callback that blocks holds up neither the view
// (Members stays current) nor the ZooKeeper event path (other watchers on
// the same client keep delivering); once it returns, the changes it
// missed are delivered coalesced, every leave after its join.
func TestSlowCallback(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	c := recipetest.Dial(t, nil, 4*time.Second)
	release := make(chan struct{})
	entered := make(chan string, 16)
	var mu sync.Mutex
	var joined []string
	slow, err := membership.Watch(ctx, c, dir, membership.WatchOptions{
		OnJoin: func(m membership.Member) {
			entered <- m.ID
			<-release
			mu.Lock()
			joined = append(joined, m.ID)
			mu.Unlock()
		},
	})
	require.NoError(t, err)
	t.Cleanup(slow.Close)
	rec := newRecorder()
	fast, err := membership.Watch(ctx, c, dir, rec.options())
	require.NoError(t, err)
	t.Cleanup(fast.Close)
	var regs []*membership.Registration
	join := func(i int) {
		r, err := membership.Join(ctx, c, dir, fmt.Sprintf("m%d", i), nil, membership.JoinOptions{})
		require.NoError(t, err)
		regs = append(regs, r)
	}
	join(0)
	require.Equal(t, "m0", <-entered, "the slow callback is blocked on m0")
	for i := 1; i < 5; i++ {
		join(i)
	}
	recipetest.Eventually(t, 10*time.Second, "the fast watcher sees every join", func() bool {
		joins, _ := rec.total()
		return joins == 5
	})
	require.NoError(t, regs[4].Leave(ctx))
	recipetest.Eventually(t, 10*time.Second, "the fast watcher sees the leave", func() bool {
		_, leaves := rec.total()
		return leaves == 1
	})
	recipetest.Eventually(t, 10*time.Second, "the slow watcher's view is current", func() bool {
		return slices.Equal([]string{"m0", "m1", "m2", "m3"}, ids(slow.Members()))
	})
	close(release)
	recipetest.Eventually(t, 10*time.Second, "the slow watcher delivers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(joined) == 4
	})
	mu.Lock()
	require.Equal(t, []string{"m0", "m1", "m2", "m3"}, joined, "m4 came and went while the callback was blocked: coalesced away")
	mu.Unlock()
	for _, r := range regs[:4] {
		require.NoError(t, r.Leave(ctx))
	}
	slow.Close()
	fast.Close()
	rec.check(t)
	recipetest.NoLeaks(t, pkgs, zkr)
}

func TestBadNames(t *testing.T) {
	c := recipetest.Dial(t, nil, 4*time.Second)
	ctx := recipetest.Ctx(t, 10*time.Second)
	for _, tc := range []struct{ dir, id string }{
		{"relative", "a"}, {"/", "a"}, {"/x/", "a"}, {"/zookeeper/x", "a"},
		{"/x", ""}, {"/x", "a/b"}, {"/x", ".."}, {"/x", "a b"},
	} {
		_, err := membership.Join(ctx, c, tc.dir, tc.id, nil, membership.JoinOptions{})
		require.ErrorIs(t, err, membership.ErrBadName, "%q %q", tc.dir, tc.id)
	}
	_, err := membership.Watch(ctx, c, "nope", membership.WatchOptions{})
	require.ErrorIs(t, err, membership.ErrBadName)
	_, err = membership.Join(ctx, nil, "/x", "a", nil, membership.JoinOptions{})
	require.ErrorIs(t, err, membership.ErrBadName)
	_, err = membership.Join(ctx, c, "/x", "a", make([]byte, membership.MaxDataBytes+1), membership.JoinOptions{})
	require.ErrorIs(t, err, membership.ErrDataTooLarge)
}

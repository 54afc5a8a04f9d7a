package membership_test

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/membership"
)

// updates records OnUpdate calls on top of a recorder (which checks the
// join/leave alternation), and checks that every update is of a present
// incarnation and follows the previous one delivered.
type updates struct {
	*recorder
	umu  sync.Mutex
	ups  map[string][][2]membership.Member
	last map[string]membership.Member // as last delivered (join or update)
	errs []string
}

func newUpdates() *updates {
	return &updates{recorder: newRecorder(), ups: map[string][][2]membership.Member{}, last: map[string]membership.Member{}}
}

func (u *updates) options() membership.WatchOptions {
	opts := u.recorder.options()
	join := opts.OnJoin
	opts.OnJoin = func(m membership.Member) {
		join(m)
		u.umu.Lock()
		u.last[m.ID] = m
		u.umu.Unlock()
	}
	opts.OnUpdate = func(old, cur membership.Member) {
		u.umu.Lock()
		defer u.umu.Unlock()
		u.recorder.mu.Lock()
		cz, present := u.recorder.present[cur.ID]
		u.recorder.mu.Unlock()
		switch {
		case !present || cz != cur.Czxid:
			u.errs = append(u.errs, fmt.Sprintf("update of %s (czxid %d) not joined", cur.ID, cur.Czxid))
		case old.ID != cur.ID || old.Czxid != cur.Czxid:
			u.errs = append(u.errs, fmt.Sprintf("update across incarnations: %+v -> %+v", old, cur))
		case cur.Version <= old.Version:
			u.errs = append(u.errs, fmt.Sprintf("update of %s from version %d to %d", cur.ID, old.Version, cur.Version))
		case old.Version != u.last[cur.ID].Version || !bytes.Equal(old.Data, u.last[cur.ID].Data):
			u.errs = append(u.errs, fmt.Sprintf("update of %s: old %+v is not the last delivered %+v", cur.ID, old, u.last[cur.ID]))
		}
		u.last[cur.ID] = cur
		u.ups[cur.ID] = append(u.ups[cur.ID], [2]membership.Member{old, cur})
	}
	return opts
}

// data returns the data of id's updates, in delivery order.
func (u *updates) data(id string) []string {
	u.umu.Lock()
	defer u.umu.Unlock()
	var out []string
	for _, x := range u.ups[id] {
		out = append(out, string(x[1].Data))
	}
	return out
}

func (u *updates) lastData(id string) string {
	u.umu.Lock()
	defer u.umu.Unlock()
	return string(u.last[id].Data)
}

func (u *updates) check(t *testing.T) {
	t.Helper()
	u.recorder.check(t)
	u.umu.Lock()
	defer u.umu.Unlock()
	require.Empty(t, u.errs)
}

// TestUpdateSeenByWatcher: each Update, waited for, is one OnUpdate with
// its data; a burst of Updates may coalesce but the last data is always
// delivered, in version order; an Update with the current data writes
// nothing; a slow OnUpdate sees the writes made meanwhile as one.
func TestUpdateSeenByWatcher(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	a := recipetest.Dial(t, nil, 4*time.Second)
	ra, err := membership.Join(ctx, a, dir, "a", []byte("v0"), membership.JoinOptions{Logger: recipetest.Logger(t)})
	require.NoError(t, err)
	rec := newUpdates()
	wc := recipetest.Dial(t, nil, 4*time.Second)
	w, err := membership.Watch(ctx, wc, dir, rec.options())
	require.NoError(t, err)
	require.Equal(t, int32(0), w.Members()[0].Version)

	// One at a time: every update is seen.
	for i := 1; i <= 5; i++ {
		v := "v" + strconv.Itoa(i)
		require.NoError(t, ra.Update(ctx, []byte(v)))
		require.Equal(t, []byte(v), ra.Data())
		recipetest.Eventually(t, 10*time.Second, "the watcher sees "+v, func() bool { return len(rec.data("a")) == i })
	}
	require.Equal(t, []string{"v1", "v2", "v3", "v4", "v5"}, rec.data("a"))
	require.Equal(t, int32(5), w.Members()[0].Version)

	// The same data again: nothing written.
	require.NoError(t, ra.Update(ctx, []byte("v5")))
	ok, st, err := a.Conn().Exists(dir + "/a")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int32(5), st.Version)

	// A burst: coalesced maybe, in order, the last one delivered.
	for i := 6; i <= 30; i++ {
		require.NoError(t, ra.Update(ctx, []byte("v"+strconv.Itoa(i))))
	}
	recipetest.Eventually(t, 10*time.Second, "the watcher sees the last update", func() bool { return rec.lastData("a") == "v30" })
	seen := rec.data("a")
	prev := 0
	for _, d := range seen {
		n, err := strconv.Atoi(strings.TrimPrefix(d, "v"))
		require.NoError(t, err)
		require.Greater(t, n, prev, "updates in order: %v", seen)
		prev = n
	}
	t.Logf("burst of 25 updates: %d OnUpdate calls", len(seen)-5)
	m := w.Members()[0]
	require.Equal(t, []byte("v30"), m.Data)
	require.Equal(t, int32(30), m.Version)

	// Concurrent Updates: each returns once its data or a later one is
	// in the node; the node ends with the registration's data.
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			require.NoError(t, ra.Update(ctx, []byte(fmt.Sprintf("c%d", i))))
		}()
	}
	wg.Wait()
	b, _, err := a.Conn().Get(dir + "/a")
	require.NoError(t, err)
	require.Equal(t, ra.Data(), b)
	recipetest.Eventually(t, 10*time.Second, "the watcher sees the final data", func() bool { return rec.lastData("a") == string(b) })

	joins, leaves := rec.count("a")
	require.Equal(t, 1, joins)
	require.Equal(t, 0, leaves)
	require.Equal(t, 0, ra.Rebuilds())
	rec.check(t)
	require.NoError(t, ra.Leave(ctx))
	w.Close()
	recipetest.NoLeaks(t, pkgs, zkr)
}

// TestSlowOnUpdateCoalesces: writes made while OnUpdate is blocked are
// delivered as one call carrying the last data, and the view keeps
// moving meanwhile.
func TestSlowOnUpdateCoalesces(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	a := recipetest.Dial(t, nil, 4*time.Second)
	ra, err := membership.Join(ctx, a, dir, "a", []byte("v0"), membership.JoinOptions{})
	require.NoError(t, err)
	defer ra.Leave(ctx)
	entered := make(chan string, 16)
	release := make(chan struct{})
	var mu sync.Mutex
	var got []string
	w, err := membership.Watch(ctx, a, dir, membership.WatchOptions{
		OnUpdate: func(old, cur membership.Member) {
			entered <- string(cur.Data)
			<-release
			mu.Lock()
			got = append(got, string(old.Data)+">"+string(cur.Data))
			mu.Unlock()
		},
	})
	require.NoError(t, err)
	defer w.Close()
	require.NoError(t, ra.Update(ctx, []byte("v1")))
	require.Equal(t, "v1", <-entered)
	for i := 2; i <= 6; i++ {
		require.NoError(t, ra.Update(ctx, []byte("v"+strconv.Itoa(i))))
	}
	recipetest.Eventually(t, 10*time.Second, "the view is current", func() bool {
		return string(w.Members()[0].Data) == "v6"
	})
	close(release)
	require.Equal(t, "v6", <-entered)
	recipetest.Eventually(t, 10*time.Second, "delivered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 2
	})
	require.Equal(t, []string{"v0>v1", "v1>v6"}, got)
}

// TestUpdateDuringExpiry: Updates made while the member's session is
// expiring are recorded; one whose ctx ends first says so; the rebuild
// after the expiry creates the node with the latest data, and the waiting
// Update returns then. A watcher sees a leave and a join (a new
// incarnation, with the latest data) and never an update across them;
// updates of the new incarnation are updates.
func TestUpdateDuringExpiry(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	a := recipetest.Dial(t, nil, 4*time.Second)
	b := recipetest.DialProxied(t)
	rb, err := membership.Join(ctx, b.Client, dir, "b", []byte("v1"), membership.JoinOptions{Logger: recipetest.Logger(t)})
	require.NoError(t, err)
	rec := newUpdates()
	w, err := membership.Watch(ctx, a, dir, rec.options())
	require.NoError(t, err)
	before := w.Members()[0]

	b.CutUntilExpired(t)
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = rb.Update(short, []byte("v2"))
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Equal(t, []byte("v2"), rb.Data(), "recorded though not written")

	done := make(chan error, 1)
	go func() { done <- rb.Update(ctx, []byte("v3")) }()
	recipetest.Eventually(t, 5*time.Second, "v3 recorded", func() bool { return string(rb.Data()) == "v3" })
	select {
	case err := <-done:
		t.Fatalf("Update returned while the link is cut: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	b.Heal(t)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Update did not return after the rebuild")
	}
	got, st, err := a.Conn().Get(dir + "/b")
	require.NoError(t, err)
	require.Equal(t, []byte("v3"), got)
	require.Equal(t, b.SessionID(), st.EphemeralOwner)
	require.NotEqual(t, before.Czxid, st.Czxid)
	require.Equal(t, 1, rb.Rebuilds())

	recipetest.Eventually(t, 10*time.Second, "the watcher sees b's new incarnation", func() bool {
		joins, leaves := rec.count("b")
		return joins == 2 && leaves == 1
	})
	require.Equal(t, "v3", rec.lastData("b"))
	require.Empty(t, rec.data("b"), "a new incarnation is a leave and a join, never an update")

	require.NoError(t, rb.Update(ctx, []byte("v4")))
	recipetest.Eventually(t, 10*time.Second, "the new incarnation's update", func() bool { return len(rec.data("b")) == 1 })
	rec.umu.Lock()
	u := rec.ups["b"][0]
	rec.umu.Unlock()
	require.Equal(t, "v3", string(u[0].Data))
	require.Equal(t, "v4", string(u[1].Data))
	require.Equal(t, st.Czxid, u[1].Czxid)
	rec.check(t)
	require.NoError(t, rb.Leave(ctx))
	w.Close()
	recipetest.NoLeaks(t, pkgs, zkr)
}

// TestUpdateDuringDisconnect: an Update made while the client is
// disconnected (same session) is written once it reconnects.
func TestUpdateDuringDisconnect(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	b := recipetest.DialProxiedSession(t, 8*time.Second)
	rb, err := membership.Join(ctx, b.Client, dir, "b", []byte("v1"), membership.JoinOptions{})
	require.NoError(t, err)
	defer rb.Leave(ctx)
	sid := b.SessionID()
	b.Proxy.Cut()
	recipetest.Eventually(t, 10*time.Second, "disconnected", func() bool { return b.State() != zk.StateHasSession })
	done := make(chan error, 1)
	go func() { done <- rb.Update(ctx, []byte("v2")) }()
	time.Sleep(100 * time.Millisecond)
	b.Proxy.Heal()
	require.NoError(t, <-done)
	require.Equal(t, sid, b.SessionID(), "same session")
	got, st, err := b.Conn().Get(dir + "/b")
	require.NoError(t, err)
	require.Equal(t, []byte("v2"), got)
	require.Equal(t, int32(1), st.Version)
	require.Equal(t, 0, rb.Rebuilds())
}

// TestDeletedNodeRebuiltWithLatestData: after an Update, a deletion by
// someone else is rebuilt with the updated data: a leave and a join, no
// update.
func TestDeletedNodeRebuiltWithLatestData(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	a := recipetest.Dial(t, nil, 4*time.Second)
	ra, err := membership.Join(ctx, a, dir, "a", []byte("v1"), membership.JoinOptions{})
	require.NoError(t, err)
	defer ra.Leave(ctx)
	rec := newUpdates()
	w, err := membership.Watch(ctx, a, dir, rec.options())
	require.NoError(t, err)
	defer w.Close()
	require.NoError(t, ra.Update(ctx, []byte("v2")))
	recipetest.Eventually(t, 10*time.Second, "update seen", func() bool { return rec.lastData("a") == "v2" })
	op := recipetest.Dial(t, nil, 4*time.Second)
	require.NoError(t, op.Conn().Delete(dir+"/a", -1))
	recipetest.Eventually(t, 10*time.Second, "a leaves and rejoins", func() bool {
		joins, leaves := rec.count("a")
		return joins == 2 && leaves == 1
	})
	require.Equal(t, "v2", rec.lastData("a"))
	require.Equal(t, []string{"v2"}, rec.data("a"), "only the real update")
	rec.check(t)
}

// TestForeignWriteRestored: someone else overwriting the member's data is
// undone by the registration.
func TestForeignWriteRestored(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	a := recipetest.Dial(t, nil, 4*time.Second)
	ra, err := membership.Join(ctx, a, dir, "a", []byte("mine"), membership.JoinOptions{Logger: recipetest.Logger(t)})
	require.NoError(t, err)
	defer ra.Leave(ctx)
	op := recipetest.Dial(t, nil, 4*time.Second)
	_, err = op.Conn().Set(dir+"/a", []byte("forged"), -1)
	require.NoError(t, err)
	recipetest.Eventually(t, 10*time.Second, "our data is back", func() bool {
		b, st, err := op.Conn().Get(dir + "/a")
		return err == nil && string(b) == "mine" && st.Version == 2
	})
	require.Equal(t, 0, ra.Rebuilds())
}

// TestUpdateRefused: oversized data is refused and changes nothing; an
// Update after Leave is ErrLeft.
func TestUpdateRefused(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	a := recipetest.Dial(t, nil, 4*time.Second)
	ra, err := membership.Join(ctx, a, dir, "a", []byte("small"), membership.JoinOptions{})
	require.NoError(t, err)
	rec := newUpdates()
	w, err := membership.Watch(ctx, a, dir, rec.options())
	require.NoError(t, err)
	defer w.Close()

	err = ra.Update(ctx, make([]byte, membership.MaxDataBytes+1))
	require.ErrorIs(t, err, membership.ErrDataTooLarge)
	require.Equal(t, []byte("small"), ra.Data())
	b, st, err := a.Conn().Get(dir + "/a")
	require.NoError(t, err)
	require.Equal(t, []byte("small"), b)
	require.Equal(t, int32(0), st.Version)

	// The largest allowed size goes through.
	big := bytes.Repeat([]byte("x"), membership.MaxDataBytes)
	require.NoError(t, ra.Update(ctx, big))
	recipetest.Eventually(t, 10*time.Second, "the big update is seen", func() bool { return len(rec.data("a")) == 1 })
	require.Equal(t, big, w.Members()[0].Data)

	require.NoError(t, ra.Leave(ctx))
	require.ErrorIs(t, ra.Update(ctx, []byte("late")), membership.ErrLeft)
	require.Equal(t, big, ra.Data())
	rec.check(t)
}

// watchesBySession parses the "wchc" four-letter word: the paths watched
// by each session.
func watchesBySession(t *testing.T) map[int64][]string {
	t.Helper()
	out, err := recipetest.ZK(t).FourLetter(recipetest.Ctx(t, 5*time.Second), 0, "wchc")
	require.NoError(t, err)
	res := map[int64][]string{}
	var cur int64
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.TrimSpace(line) == "":
		case strings.HasPrefix(line, "\t") || strings.HasPrefix(line, " "):
			res[cur] = append(res[cur], strings.TrimSpace(line))
		default:
			id, err := strconv.ParseUint(strings.TrimPrefix(strings.TrimSpace(line), "0x"), 16, 64)
			require.NoError(t, err, "wchc output:\n%s", out)
			cur = int64(id)
		}
	}
	return res
}

// TestDataWatchesOnlyWhenAsked: a watcher without OnUpdate (nor WatchData)
// holds no data watch (only its children watch); one with OnUpdate or
// WatchData holds one data watch per member, on the members present (the
// servers' own report, "wchc").
func TestDataWatchesOnlyWhenAsked(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	mc := recipetest.Dial(t, nil, 4*time.Second)
	var regs []*membership.Registration
	for _, id := range []string{"a", "b"} {
		r, err := membership.Join(ctx, mc, dir, id, []byte(id), membership.JoinOptions{})
		require.NoError(t, err)
		regs = append(regs, r)
	}
	plainC := recipetest.Dial(t, nil, 4*time.Second)
	plainRec := newRecorder()
	plain, err := membership.Watch(ctx, plainC, dir, plainRec.options())
	require.NoError(t, err)
	defer plain.Close()
	dataC := recipetest.Dial(t, nil, 4*time.Second)
	dataRec := newUpdates()
	withData, err := membership.Watch(ctx, dataC, dir, dataRec.options())
	require.NoError(t, err)
	defer withData.Close()
	flagC := recipetest.Dial(t, nil, 4*time.Second)
	flag, err := membership.Watch(ctx, flagC, dir, membership.WatchOptions{WatchData: true})
	require.NoError(t, err)
	defer flag.Close()

	check := func(members ...string) {
		t.Helper()
		// wchc lists data (and exists) watches only, not child watches.
		var want []string
		for _, m := range members {
			want = append(want, dir+"/"+m)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			ws := watchesBySession(t)
			if len(ws[plainC.SessionID()]) == 0 &&
				equalSet(ws[dataC.SessionID()], want) && equalSet(ws[flagC.SessionID()], want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("data watches: plain %v, OnUpdate %v, WatchData %v; want none and %v",
					ws[plainC.SessionID()], ws[dataC.SessionID()], ws[flagC.SessionID()], want)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	check("a", "b")

	// Churn and writes: still one watch per member, none for the plain
	// watcher.
	r, err := membership.Join(ctx, mc, dir, "c", nil, membership.JoinOptions{})
	require.NoError(t, err)
	require.NoError(t, regs[1].Leave(ctx))
	recipetest.Eventually(t, 10*time.Second, "the plain watcher converges", func() bool {
		return slices.Equal([]string{"a", "c"}, ids(plain.Members()))
	})
	require.NoError(t, regs[0].Update(ctx, []byte("a2")))
	recipetest.Eventually(t, 10*time.Second, "the data watchers converge", func() bool {
		ms := withData.Members()
		fs := flag.Members()
		return len(ms) == 2 && string(ms[0].Data) == "a2" && len(fs) == 2 && string(fs[0].Data) == "a2"
	})
	check("a", "c")
	// (The plain watcher's data for a is whatever its last listing read:
	// "a", or "a2" when a child event made it list again after the update;
	// check above proved it holds no data watch.)
	require.Equal(t, []string{"a2"}, dataRec.data("a"))
	require.NoError(t, r.Leave(ctx))
	require.NoError(t, regs[0].Leave(ctx))
	dataRec.check(t)
	plainRec.check(t)
}

func equalSet(got, want []string) bool {
	if len(got) != len(want) {
		return false
	}
	seen := map[string]bool{}
	for _, g := range got {
		seen[g] = true
	}
	for _, w := range want {
		if !seen[w] {
			return false
		}
	}
	return true
}

// TestSecondJoinSameClientRefused: two Registrations of one id on one
// client would overwrite each other's data forever; the second Join gets
// ErrIDInUse until the first has left, then succeeds.
func TestSecondJoinSameClientRefused(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	a := recipetest.Dial(t, nil, 4*time.Second)
	ra, err := membership.Join(ctx, a, dir, "x", []byte("a"), membership.JoinOptions{})
	require.NoError(t, err)
	_, err = membership.Join(ctx, a, dir, "x", []byte("b"), membership.JoinOptions{})
	require.ErrorIs(t, err, membership.ErrIDInUse)
	b, _, err := a.Conn().Get(dir + "/x")
	require.NoError(t, err)
	require.Equal(t, []byte("a"), b, "the refused Join wrote nothing")
	require.NoError(t, ra.Leave(ctx))
	rb, err := membership.Join(ctx, a, dir, "x", []byte("b"), membership.JoinOptions{})
	require.NoError(t, err, "free again once the first left")
	require.NoError(t, rb.Leave(ctx))
}

package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/lock"
	"github.com/roomlog/roomlog/zkx"
)

func TestMain(m *testing.M) { recipetest.Main(m) }

const (
	pkgLock = "github.com/roomlog/roomlog/recipe/lock"
	pkgZKR  = "github.com/roomlog/roomlog/recipe/internal/zkr"
)

func newMutex(t *testing.T, c *zkx.Client, dir, id string) *lock.Mutex {
	t.Helper()
	m, err := lock.New(recipetest.Ctx(t, 10*time.Second), lock.Config{Client: c, Dir: dir, ID: id, Logger: recipetest.Logger(t)})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = m.Close(ctx)
	})
	return m
}

// readCounter reads the decimal counter znode.
func readCounter(t *testing.T, c *zkx.Client, p string) (int, int32) {
	t.Helper()
	b, st, err := c.Conn().Get(p)
	require.NoError(t, err)
	n, err := strconv.Atoi(string(b))
	require.NoError(t, err)
	return n, st.Version
}

// TestTenContenders is the seed's plan, fenced: ten contenders, each on its
// own session, take the lock in turn three times. Under the lock each
// checks that nobody else holds it (a Go variable set on acquire and
// cleared on release: the releaser is always the holder), moves a counter
// up and back down (it ends at 0 and never exceeds 1), increments a znode
// counter with a guarded write, and records its fencing token: tokens
// strictly increase across all thirty acquisitions.
func TestTenContenders(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	counterPath := dir + "-counter"
	_, err := admin.Conn().Create(counterPath, []byte("0"), 0, admin.ACL())
	require.NoError(t, err)

	const contenders, rounds = 10, 3
	var (
		holder  atomic.Int64 // contender id+1 holding the lock, 0: none
		inside  atomic.Int64 // the seed's counter: +1 on acquire, -1 on release
		maxIn   atomic.Int64
		tokMu   sync.Mutex
		tokens  []int64
		wg      sync.WaitGroup
		errs    = make(chan error, contenders*rounds)
		mutexes = make([]*lock.Mutex, contenders)
	)
	for i := range contenders {
		mutexes[i] = newMutex(t, recipetest.Dial(t, nil, 4*time.Second), dir, fmt.Sprintf("c%d", i))
	}
	for i := range contenders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m := mutexes[i]
			for range rounds {
				l, err := m.Lock(ctx)
				if err != nil {
					errs <- err
					return
				}
				if !holder.CompareAndSwap(0, int64(i+1)) {
					errs <- fmt.Errorf("contender %d acquired while %d holds", i, holder.Load()-1)
				}
				if n := inside.Add(1); n > maxIn.Load() {
					maxIn.Store(n)
				}
				tokMu.Lock()
				if len(tokens) > 0 && l.Token() <= tokens[len(tokens)-1] {
					errs <- fmt.Errorf("token %d after %d", l.Token(), tokens[len(tokens)-1])
				}
				tokens = append(tokens, l.Token())
				tokMu.Unlock()
				// Guarded read-modify-write of the znode counter.
				data, st, err := admin.Conn().Get(counterPath)
				if err != nil {
					errs <- err
					return
				}
				n, _ := strconv.Atoi(string(data))
				if _, err := l.Multi(ctx, &zk.SetDataRequest{Path: counterPath, Data: []byte(strconv.Itoa(n + 1)), Version: st.Version}); err != nil {
					errs <- err
				}
				time.Sleep(2 * time.Millisecond) // hold it a moment, as the seed does
				inside.Add(-1)
				if !holder.CompareAndSwap(int64(i+1), 0) {
					errs <- fmt.Errorf("contender %d releases a lock held by %d", i, holder.Load()-1)
				}
				if err := l.Unlock(ctx); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Equal(t, int64(0), inside.Load())
	require.Equal(t, int64(1), maxIn.Load())
	require.Len(t, tokens, contenders*rounds)
	n, _ := readCounter(t, admin, counterPath)
	require.Equal(t, contenders*rounds, n)
	names, _, err := admin.Conn().Children(dir)
	require.NoError(t, err)
	require.Empty(t, names, "every contender node is gone")
	for _, m := range mutexes {
		require.NoError(t, m.Close(ctx))
	}
	recipetest.NoLeaks(t, pkgLock, pkgZKR)
}

// TestGuardAfterDeletion: the lease's node is deleted behind the holder's
// back (what its session's expiry does). The lease ends with ErrLockLost,
// and a guarded write — by the lease, or a raw Multi built by Guard —
// fails with a clear error and writes nothing.
func TestGuardAfterDeletion(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	c := recipetest.Dial(t, nil, 4*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	counterPath := dir + "-counter"
	_, err := admin.Conn().Create(counterPath, []byte("0"), 0, admin.ACL())
	require.NoError(t, err)
	m := newMutex(t, c, dir, "holder")
	l, err := m.Lock(ctx)
	require.NoError(t, err)
	_, err = l.Multi(ctx, &zk.SetDataRequest{Path: counterPath, Data: []byte("1"), Version: -1})
	require.NoError(t, err, "a guarded write while holding lands")

	require.NoError(t, admin.Conn().Delete(l.Path(), -1))
	// Raw: the server refuses, whatever the holder believes.
	_, err = c.Conn().Multi(l.Guard(&zk.SetDataRequest{Path: counterPath, Data: []byte("2"), Version: -1})...)
	require.ErrorIs(t, err, zk.ErrNoNode)
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the lease did not end when its node was deleted")
	}
	require.ErrorIs(t, l.Err(), lock.ErrLockLost)
	require.False(t, l.Active())
	_, err = l.Multi(ctx, &zk.SetDataRequest{Path: counterPath, Data: []byte("3"), Version: -1})
	require.ErrorIs(t, err, lock.ErrLockLost)
	require.Contains(t, err.Error(), "node deleted")
	t.Logf("guarded write after the loss: %v", err)
	n, _ := readCounter(t, admin, counterPath)
	require.Equal(t, 1, n, "nothing written after the loss")

	require.ErrorIs(t, l.Unlock(ctx), lock.ErrLockLost, "Unlock reports the loss")
	l2, err := m.Lock(ctx)
	require.NoError(t, err)
	require.Greater(t, l2.Token(), l.Token())
	require.NoError(t, l2.Unlock(ctx))
	_, err = l2.Multi(ctx, &zk.SetDataRequest{Path: counterPath, Data: []byte("4"), Version: -1})
	require.ErrorIs(t, err, lock.ErrNotLocked)
	require.ErrorIs(t, m.Unlock(ctx), lock.ErrNotLocked)
}

// TestPausedHolderFenced: the holder is cut off past its session timeout
// (as a SIGSTOPped process would be). Another contender takes the lock
// with a larger token. A write the old holder queued while cut off runs,
// if at all, in its new session after the expiry, and the guard refuses
// it: the counter holds only the new holder's write.
func TestPausedHolderFenced(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	counterPath := dir + "-counter"
	_, err := admin.Conn().Create(counterPath, []byte("0"), 0, admin.ACL())
	require.NoError(t, err)
	old := recipetest.DialProxied(t)
	mOld := newMutex(t, old.Client, dir, "old")
	mNew := newMutex(t, recipetest.Dial(t, nil, 4*time.Second), dir, "new")
	lOld, err := mOld.Lock(ctx)
	require.NoError(t, err)

	old.Cut(t)
	select {
	case <-lOld.Done(): // SuspendGrace 0: ends at the disconnection
	case <-time.After(5 * time.Second):
		t.Fatal("the lease did not end on disconnection")
	}
	require.ErrorIs(t, lOld.Err(), lock.ErrLockLost)
	// The paused holder's raw guarded write, queued while cut off.
	late := make(chan error, 1)
	go func() {
		_, err := old.Conn().Multi(lOld.Guard(&zk.SetDataRequest{Path: counterPath, Data: []byte("666"), Version: -1})...)
		late <- err
	}()
	old.WaitExpired(t)
	lNew, err := mNew.Lock(ctx)
	require.NoError(t, err)
	require.Greater(t, lNew.Token(), lOld.Token())
	_, err = lNew.Multi(ctx, &zk.SetDataRequest{Path: counterPath, Data: []byte("1"), Version: -1})
	require.NoError(t, err)
	old.Heal(t)
	select {
	case err := <-late:
		require.Error(t, err, "the late write must not land")
		t.Logf("late write: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("the late write never returned")
	}
	// The paused holder resumes and writes, its request running in the new
	// session (what go-zookeeper does with a request queued across an
	// expiry): ZooKeeper refuses it.
	_, err = old.Conn().Multi(lOld.Guard(&zk.SetDataRequest{Path: counterPath, Data: []byte("667"), Version: -1})...)
	require.ErrorIs(t, err, zk.ErrNoNode)
	_, err = lOld.Multi(ctx, &zk.SetDataRequest{Path: counterPath, Data: []byte("668"), Version: -1})
	require.ErrorIs(t, err, lock.ErrLockLost)
	n, _ := readCounter(t, admin, counterPath)
	require.Equal(t, 1, n)
	require.ErrorIs(t, lOld.Unlock(ctx), lock.ErrLockLost)
	require.NoError(t, lNew.Unlock(ctx))
}

// TestSuspendGrace: a disconnection shorter than SuspendGrace keeps the
// lease; with no grace it ends the lease although the node survives,
// and Unlock deletes the node.
func TestSuspendGrace(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	p := recipetest.DialProxiedSession(t, 9*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)

	patient, err := lock.New(ctx, lock.Config{Client: p.Client, Dir: dir + "/patient", SuspendGrace: 2900 * time.Millisecond})
	require.NoError(t, err)
	defer func() { require.NoError(t, patient.Close(ctx)) }()
	strict := newMutex(t, p.Client, dir+"/strict", "strict")
	lp, err := patient.Lock(ctx)
	require.NoError(t, err)
	ls, err := strict.Lock(ctx)
	require.NoError(t, err)
	p.Disconnect(t)
	require.NoError(t, lp.Err())
	require.True(t, lp.Active())
	select {
	case <-ls.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("a disconnection did not end the lease without a grace")
	}
	require.ErrorIs(t, ls.Err(), lock.ErrLockLost)
	require.Contains(t, ls.Err().Error(), "grace")
	ok, _, err := admin.Conn().Exists(ls.Path())
	require.NoError(t, err)
	require.True(t, ok, "the node survives a disconnection")
	require.ErrorIs(t, ls.Unlock(ctx), lock.ErrLockLost)
	ok, _, err = admin.Conn().Exists(ls.Path())
	require.NoError(t, err)
	require.False(t, ok, "Unlock deleted it")
	require.NoError(t, lp.Unlock(ctx))
}

// TestLostCreateAnswer: the answer to the contender's create is lost (the
// proxy drops replies, then the connection is reset); the Mutex finds its
// node by its guid instead of creating a second one.
func TestLostCreateAnswer(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	p := recipetest.DialProxiedSession(t, 6*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	m := newMutex(t, p.Client, dir, "x")
	p.Proxy.DropReplies()
	type res struct {
		l   *lock.Lease
		err error
	}
	done := make(chan res, 1)
	go func() {
		l, err := m.Lock(ctx)
		done <- res{l, err}
	}()
	var created string
	recipetest.Eventually(t, 10*time.Second, "the create lands", func() bool {
		names, _, err := admin.Conn().Children(dir)
		require.NoError(t, err)
		for _, n := range names {
			if strings.Contains(n, m.GUID()) {
				created = n
				return true
			}
		}
		return false
	})
	p.Proxy.Heal()
	p.Proxy.Reset() // the stream lost replies: start a new connection, same session
	r := <-done
	require.NoError(t, r.err)
	require.Equal(t, dir+"/"+created, r.l.Path(), "adopted the node whose answer was lost")
	names, _, err := admin.Conn().Children(dir)
	require.NoError(t, err)
	require.Equal(t, []string{created}, names, "no second node")
	require.NoError(t, r.l.Unlock(ctx))
}

// TestCancelledWaiter: a contender that gives up (ctx) leaves no node
// behind, so it does not block the ones after it.
func TestCancelledWaiter(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	a := newMutex(t, recipetest.Dial(t, nil, 4*time.Second), dir, "a")
	b := newMutex(t, recipetest.Dial(t, nil, 4*time.Second), dir, "b")
	cm := newMutex(t, recipetest.Dial(t, nil, 4*time.Second), dir, "c")
	la, err := a.Lock(ctx)
	require.NoError(t, err)
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = b.Lock(short)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	recipetest.Eventually(t, 5*time.Second, "b's node is gone", func() bool {
		names, _, err := admin.Conn().Children(dir)
		require.NoError(t, err)
		return len(names) == 1
	})
	got := make(chan error, 1)
	go func() {
		l, err := cm.Lock(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	h, ok, err := b.Holder(ctx)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "a", h.ID)
	require.Equal(t, la.Token(), h.Czxid)
	require.NoError(t, la.Unlock(ctx))
	select {
	case err := <-got:
		require.NoError(t, err)
	case <-time.After(5 * time.Second):
		t.Fatal("c never got the lock")
	}
}

// TestForeignContenders: a persistent node with a contender's name and the
// lowest sequence (forged) and junk names are ignored and reported; the
// lock is still granted.
func TestForeignContenders(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	c := recipetest.Dial(t, nil, 4*time.Second)
	forger := recipetest.Dial(t, nil, 4*time.Second)
	m := newMutex(t, c, dir, "m")
	forged := dir + "/l-" + strings.Repeat("ab", 16) + "-0000000000"
	_, err := forger.Conn().Create(forged, nil, 0, forger.ACL())
	require.NoError(t, err)
	_, err = forger.Conn().Create(dir+"/junk", nil, zk.FlagEphemeral, forger.ACL())
	require.NoError(t, err)
	_, err = forger.Conn().Create(dir+"/l-"+strings.Repeat("ab", 16)+"--000000001", nil, zk.FlagEphemeral, forger.ACL())
	require.NoError(t, err)
	sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	l, err := m.Lock(sctx)
	require.NoError(t, err)
	f := m.Foreign()
	require.Len(t, f, 3, "%v", f)
	paths := []string{f[0].Path, f[1].Path, f[2].Path}
	require.Contains(t, paths, forged)
	for _, x := range f {
		if x.Path == forged {
			require.Contains(t, x.Reason, "not ephemeral")
		}
	}
	require.NoError(t, l.Unlock(ctx))
}

// TestLocalQueueAndClose: two goroutines share one Mutex (queued locally,
// like a sync.Mutex); Close makes a waiting Lock fail with ErrClosed, and
// leaves no goroutine and no node behind.
func TestLocalQueueAndClose(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	c := recipetest.Dial(t, nil, 4*time.Second)
	m, err := lock.New(ctx, lock.Config{Client: c, Dir: dir})
	require.NoError(t, err)
	other := newMutex(t, recipetest.Dial(t, nil, 4*time.Second), dir, "other")
	l, err := m.Lock(ctx)
	require.NoError(t, err)
	second := make(chan error, 1)
	go func() {
		l2, err := m.Lock(ctx)
		if err == nil {
			err = l2.Unlock(ctx)
		}
		second <- err
	}()
	select {
	case err := <-second:
		t.Fatalf("second Lock on the same Mutex returned while the first holds: %v", err)
	case <-time.After(100 * time.Millisecond):
	}
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, <-second)

	lo, err := other.Lock(ctx)
	require.NoError(t, err)
	waiting := make(chan error, 1)
	go func() {
		_, err := m.Lock(ctx)
		waiting <- err
	}()
	recipetest.Eventually(t, 5*time.Second, "m queues", func() bool {
		names, _, err := admin.Conn().Children(dir)
		require.NoError(t, err)
		return len(names) == 2
	})
	require.NoError(t, m.Close(ctx))
	require.ErrorIs(t, <-waiting, lock.ErrClosed)
	_, err = m.Lock(ctx)
	require.ErrorIs(t, err, lock.ErrClosed)
	names, _, err := admin.Conn().Children(dir)
	require.NoError(t, err)
	require.Len(t, names, 1, "only other's node is left")
	require.NoError(t, lo.Unlock(ctx))
	require.NoError(t, other.Close(ctx))
	recipetest.NoLeaks(t, pkgLock, pkgZKR)
}

func TestConfigValidate(t *testing.T) {
	err := lock.Config{Dir: "rel", ID: "a b", SuspendGrace: -1}.Validate()
	require.ErrorIs(t, err, lock.ErrBadConfig)
	for _, field := range []string{"Client", "Dir", "ID", "SuspendGrace"} {
		require.Contains(t, err.Error(), field)
	}
	var joined interface{ Unwrap() []error }
	require.True(t, errors.As(err, &joined))
	require.Len(t, joined.Unwrap(), 4)
}

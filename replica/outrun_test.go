package replica

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/logroom"
)

// slowLink throttles what a checkpoint fetch receives to rate bytes/s,
// and stops it entirely while paused, once pauseAt bytes arrived.
type slowLink struct {
	rate    atomic.Int64
	mu      sync.Mutex
	paused  chan struct{} // nil: flowing; closed to resume
	pauseAt int64
	got     atomic.Int64
}

// pauseAfter stops the link once n bytes arrived (mid-body: the
// response headers are through, so only the idle timeout bounds it).
func (l *slowLink) pauseAfter(n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paused == nil {
		l.paused = make(chan struct{})
	}
	l.pauseAt = n
}

func (l *slowLink) stalled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.paused != nil && l.got.Load() >= l.pauseAt
}

func (l *slowLink) resume() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.paused != nil {
		close(l.paused)
		l.paused = nil
	}
}

func (l *slowLink) client() *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := d.DialContext(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &slowConn{Conn: c, l: l}, nil
		},
		ResponseHeaderTimeout: 10 * time.Second,
		DisableCompression:    true,
	}}
}

type slowConn struct {
	net.Conn
	l *slowLink
}

func (c *slowConn) Read(p []byte) (int, error) {
	c.l.mu.Lock()
	wait := c.l.paused
	if c.l.got.Load() < c.l.pauseAt {
		wait = nil
	}
	c.l.mu.Unlock()
	if wait != nil {
		<-wait
	}
	if len(p) > 16<<10 {
		p = p[:16<<10]
	}
	n, err := c.Conn.Read(p)
	c.l.got.Add(int64(n))
	time.Sleep(time.Duration(int64(n) * int64(time.Second) / c.l.rate.Load()))
	return n, err
}

// outrunRoom fills a room with small checkpoints and retention until its
// store is a few MB, with one standby; it returns the cluster, the
// primary and a function that proposes at full rate until stopped,
// counting ErrRoomFull answers.
func outrunRoom(t *testing.T, mutate func(*Config)) (*cluster, *Replica, func(ctx context.Context, prefix string) (acked, full *atomic.Int64, stop func())) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, func(cfg *Config) {
		smallCheckpoints(cfg)
		if mutate != nil {
			mutate(cfg)
		}
	})
	c.openN(2)
	p := c.waitPrimary(20 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < 4000; i += 8 {
				_, err := c.proposeRetry(ctx, setOp(fmt.Sprintf("fill-%06d", i), randVal(1000)))
				if err != nil {
					t.Errorf("fill: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	load := func(ctx context.Context, prefix string) (acked, full *atomic.Int64, stop func()) {
		acked, full = new(atomic.Int64), new(atomic.Int64)
		lctx, lcancel := context.WithCancel(ctx)
		var lwg sync.WaitGroup
		for w := 0; w < 8; w++ {
			lwg.Add(1)
			go func() {
				defer lwg.Done()
				for i := 0; lctx.Err() == nil; i++ {
					var prim *Replica
					for _, r := range c.all() {
						if r.Status().Role == RolePrimary {
							prim = r
						}
					}
					if prim == nil {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					_, err := prim.Propose(lctx, setOp(fmt.Sprintf("%s-%d-%06d", prefix, w, i), randVal(1000)))
					switch {
					case err == nil:
						acked.Add(1)
					case errors.Is(err, logroom.ErrRoomFull):
						full.Add(1)
						time.Sleep(5 * time.Millisecond)
					case lctx.Err() != nil:
					default:
						// Not primary any more, an outcome unknown: the
						// load goes on (the test checks the bootstrap).
						time.Sleep(5 * time.Millisecond)
					}
				}
			}()
		}
		return acked, full, func() { lcancel(); lwg.Wait() }
	}
	return c, p, load
}

// openSlow opens a member with an empty disk whose checkpoint fetches go
// through link.
func openSlow(t *testing.T, c *cluster, id string, link *slowLink) *Replica {
	cfg := c.config(id)
	cfg.CheckpointFetch.Client = link.client()
	cfg.CheckpointFetch.IdleTimeout = 30 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := Open(ctx, cfg)
	require.NoError(t, err)
	c.mu.Lock()
	c.reps[id] = r
	c.mu.Unlock()
	return r
}

// TestBootstrapNeverOutrun: a new member bootstraps over a slow link
// while the primary writes at full rate into a room with a small
// retention bound. Without holds the primary deletes the channels the
// bootstrap needs after its checkpoint (forced, over RetainRoomBytes),
// and the member bootstraps again and again; with them it bootstraps
// once, the room pushes back with ErrRoomFull meanwhile, and the hold is
// released once the member caught up.
func TestBootstrapNeverOutrun(t *testing.T) {
	c, p, load := outrunRoom(t, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	acked, full, stop := load(ctx, "during")
	defer stop()

	link := &slowLink{}
	link.rate.Store(512 << 10)
	nb := openSlow(t, c, "newcomer", link)
	var held atomic.Uint64
	require.Eventually(t, func() bool {
		if h := p.Status().HeldByBootstrap; h != 0 {
			held.Store(h)
		}
		s := nb.Status()
		require.NotEqual(t, RoleFailed, s.Role, "newcomer failed: %v", s.Err)
		return s.Bootstraps >= 1 && s.BootstrapHold == 0 && s.Lag < 100
	}, 90*time.Second, 20*time.Millisecond, "the newcomer bootstraps and catches up")
	stop()
	t.Logf("newcomer: %d bootstraps, %d outruns, %d bytes over the slow link; primary: held at %d, %d proposals acked, %d ErrRoomFull during the bootstrap",
		nb.Status().Bootstraps, nb.Status().BootstrapOutruns, link.got.Load(), held.Load(), acked.Load(), full.Load())
	require.Equal(t, 1, nb.Status().Bootstraps, "bootstrapped exactly once")
	require.Zero(t, nb.Status().BootstrapOutruns)
	require.NotZero(t, held.Load(), "the primary held deletion for the bootstrap")
	require.Positive(t, full.Load(), "the room pushed back (ErrRoomFull) instead of outrunning the bootstrap")

	// The hold is gone: the room drains and takes proposals again.
	require.Eventually(t, func() bool { return p.Status().HeldByBootstrap == 0 }, 20*time.Second, 50*time.Millisecond)
	res, err := c.proposeRetry(ctx, setOp("after", "x"))
	require.NoError(t, err)
	c.waitConverged(res.Index, 30*time.Second)
}

// TestBootstrapOutrunNamed: a bootstrap that stalls longer than
// BootstrapHoldStall no longer holds the log; the primary deletes past
// it, and when the stalled fetch finally completes the member finds its
// log gone: ErrBootstrapOutrun (Status.TailErr, the outrun counter), then
// it bootstraps again and converges.
func TestBootstrapOutrunNamed(t *testing.T) {
	c, p, load := outrunRoom(t, func(cfg *Config) {
		cfg.BootstrapHoldStall = 3 * time.Second
		// The stalled fetch's checkpoint stays served, so that it completes
		// (a fetch whose checkpoint is gone starts over from a newer one,
		// which is not outrun).
		cfg.KeepCheckpoints = 1000
	})
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	acked, _, stop := load(ctx, "during")
	defer stop()

	link := &slowLink{}
	link.rate.Store(256 << 10)
	link.pauseAfter(512 << 10)
	nb := openSlow(t, c, "newcomer", link)
	require.Eventually(t, func() bool { return nb.Status().BootstrapHold != 0 && link.stalled() }, 30*time.Second, 10*time.Millisecond, "the newcomer publishes its hold, then its fetch stalls")
	hold := nb.Status().BootstrapHold
	// Stalled: after BootstrapHoldStall the primary stops honouring the
	// hold and deletes past it.
	require.Eventually(t, func() bool {
		chans, err := p.Room().Channels(ctx)
		return err == nil && p.Status().BootstrapHoldsLapsed >= 1 && len(chans) > 0 && chans[0].FirstIndex > hold
	}, 60*time.Second, 50*time.Millisecond, "the lapsed hold (%d) is deleted past", hold)
	// The stalled fetch completes, onto a log deleted past it; what comes
	// next goes at full speed.
	link.rate.Store(1 << 40)
	link.resume()
	require.Eventually(t, func() bool {
		s := nb.Status()
		require.NotEqual(t, RoleFailed, s.Role, "newcomer failed: %v", s.Err)
		return s.BootstrapOutruns == 1 && s.Bootstraps == 2 && s.BootstrapHold == 0 && s.Lag < 100
	}, 90*time.Second, 5*time.Millisecond, "outrun once, then bootstrapped again")
	stop()
	s := nb.Status()
	t.Logf("newcomer: %d bootstraps, %d outruns; primary: %d lapsed holds, %d acked", s.Bootstraps, s.BootstrapOutruns, p.Status().BootstrapHoldsLapsed, acked.Load())
	res, err := c.proposeRetry(ctx, setOp("after", "x"))
	require.NoError(t, err)
	c.waitConverged(res.Index, 30*time.Second)
}

// randVal is n hex characters of randomness: values Pebble cannot
// compress away, so checkpoints have a size worth fetching slowly.
func randVal(n int) string {
	b := make([]byte, (n+1)/2)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)[:n]
}

// TestRebootstrapFetchesOnlyWhatChanged: a member that bootstrapped from
// the primary, went away while 1 % of the state changed (in a key range
// of its own) and the log it needed was deleted, bootstraps again and
// fetches only the new files: the rest is linked from what it holds (its
// store, its copy of the earlier checkpoint).
func TestRebootstrapFetchesOnlyWhatChanged(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	p := c.open("m0")
	require.Eventually(t, func() bool { return p.Status().Role == RolePrimary }, 20*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	write := func(prefix string, n int) uint64 {
		t.Helper()
		var last uint64
		var mu sync.Mutex
		var wg sync.WaitGroup
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += 8 {
					res, err := p.Propose(ctx, setOp(fmt.Sprintf("%s-%06d", prefix, i), randVal(1000)))
					if err != nil {
						t.Errorf("propose: %v", err)
						return
					}
					mu.Lock()
					last = max(last, res.Index)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		return last
	}
	write("a", 4000)
	require.NoError(t, p.Checkpoint(ctx))

	// A new member bootstraps: everything is fetched.
	m1 := c.open("m1")
	require.Eventually(t, func() bool { return m1.Status().LastBootstrap != nil }, 60*time.Second, 10*time.Millisecond)
	first := *m1.Status().LastBootstrap
	t.Logf("first bootstrap: %d bytes, fetched %d, reused %d", first.Bytes, first.Fetch.FetchedBytes, first.Fetch.LinkedKnownBytes+first.Fetch.LinkedLocalBytes)
	require.Greater(t, first.Fetch.FetchedBytes, first.Bytes*9/10, "a new member fetches (nearly) everything")
	c.waitConverged(p.Status().Applied, 30*time.Second)
	c.close("m1")

	// 1 % changes while it is away; the log it needs goes.
	last := write("z", 40)
	require.NoError(t, p.Checkpoint(ctx))
	chans, err := p.Room().Channels(ctx)
	require.NoError(t, err)
	require.Greater(t, chans[0].FirstIndex, first.Index+1, "the channels after the first checkpoint were deleted")

	m1 = c.open("m1")
	require.Eventually(t, func() bool { return m1.Status().LastBootstrap != nil }, 60*time.Second, 10*time.Millisecond)
	again := *m1.Status().LastBootstrap
	reused := again.Fetch.LinkedKnownBytes + again.Fetch.LinkedLocalBytes
	t.Logf("re-bootstrap: %d bytes, fetched %d (%.1f %%) in %d files, reused %d in %d files, took %v",
		again.Bytes, again.Fetch.FetchedBytes, 100*float64(again.Fetch.FetchedBytes)/float64(again.Bytes), again.Fetch.FetchedFiles,
		reused, again.Fetch.LinkedKnownFiles+again.Fetch.LinkedLocalFiles, again.Took)
	require.Greater(t, again.Index, first.Index)
	require.Less(t, again.Fetch.FetchedBytes, again.Bytes/5, "only what changed is fetched")
	require.Greater(t, reused, again.Bytes/2, "what did not change is reused")
	c.waitConverged(last, 30*time.Second)
}

// failingUntil fails every request until the time given, then passes
// them to the default transport.
type failingUntil struct{ until time.Time }

func (f failingUntil) RoundTrip(req *http.Request) (*http.Response, error) {
	if time.Now().Before(f.until) {
		return nil, errors.New("test: source unreachable")
	}
	return http.DefaultTransport.RoundTrip(req)
}

// TestBootstrapFailedFetchIsNotAnOutrun: fetches that fail (the source
// unreachable for a while) are retried with the hold kept; they are not
// outruns (which count only once a checkpoint was installed) and never
// fail the member, however many there are.
func TestBootstrapFailedFetchIsNotAnOutrun(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, nil)
	p := c.open("m0")
	require.Eventually(t, func() bool { return p.Status().Role == RolePrimary }, 20*time.Second, 5*time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for i := 0; i < 200; i++ {
		_, err := p.Propose(ctx, setOp(fmt.Sprintf("k%03d", i), randVal(100)))
		require.NoError(t, err)
	}
	require.NoError(t, p.Checkpoint(ctx))
	chans, err := p.Room().Channels(ctx)
	require.NoError(t, err)
	require.Greater(t, chans[0].FirstIndex, uint64(1), "channel 1 deleted: a new member must bootstrap")

	cfg := c.config("m1")
	cfg.CheckpointFetch.Client = &http.Client{Transport: failingUntil{until: time.Now().Add(8 * time.Second)}}
	r, err := Open(ctx, cfg)
	require.NoError(t, err)
	c.mu.Lock()
	c.reps["m1"] = r
	c.mu.Unlock()
	require.Eventually(t, func() bool { return r.Status().BootstrapHold != 0 }, 10*time.Second, 10*time.Millisecond, "the hold is published")
	require.Eventually(t, func() bool {
		s := r.Status()
		require.NotEqual(t, RoleFailed, s.Role, "failed fetches must not fail the member: %v", s.Err)
		return s.Bootstraps == 1 && s.BootstrapHold == 0
	}, 60*time.Second, 20*time.Millisecond, "it bootstraps once the source answers")
	require.Zero(t, r.Status().BootstrapOutruns, "a failed fetch is not an outrun")
	res, err := c.proposeRetry(ctx, setOp("after", "x"))
	require.NoError(t, err)
	c.waitConverged(res.Index, 30*time.Second)
}

package replica

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/faultnet"
)

// TestCutOffReadsRefused: a standby cut from every ZooKeeper server (bytes
// held, no RST, as a real partition) does not hold its readers. A read
// waiting for an index it has not applied is released with ErrUnavailable
// the moment the standby sees the loss; a read arriving during the
// partition is refused at once, and so is a Barrier; a read of what it has
// applied is served. A connected standby still waits (bounded by the
// caller's context), and a blip shorter than the ping timeout lets a
// waiting read simply succeed.
func TestCutOffReadsRefused(t *testing.T) {
	c, proxies := proxiedCluster(t, "a", "b")
	p := c.waitPrimary(20 * time.Second)
	s := c.other(p)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	res, err := p.Propose(ctx, setOp("k", "v1"))
	require.NoError(t, err)
	require.NoError(t, s.WaitApplied(ctx, res.Index))

	// Connected and behind: it waits, bounded by the caller's context.
	short, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = s.WaitApplied(short, res.Index+1000)
	scancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)

	// A blip below the ping timeout: a read waiting for the next entry is
	// not refused; it succeeds once the entry arrives.
	waited := make(chan error, 1)
	go func() { waited <- s.WaitApplied(ctx, res.Index+1) }()
	proxies[s.ID()].Blackhole()
	time.Sleep(200 * time.Millisecond) // the blip
	proxies[s.ID()].Heal()
	res2, err := p.Propose(ctx, setOp("k", "v2"))
	require.NoError(t, err)
	require.NoError(t, <-waited)
	require.True(t, s.Status().Connected)

	// A partition: the waiting read is released when the standby sees the
	// loss, long before the partition heals.
	far := res2.Index + 1000
	type result struct {
		err error
		at  time.Time
	}
	released := make(chan result, 1)
	go func() {
		err := s.WaitApplied(ctx, far)
		released <- result{err, time.Now()}
	}()
	proxies[s.ID()].Blackhole()
	require.Eventually(t, func() bool { return !s.Status().Connected }, 10*time.Second, time.Millisecond, "the standby sees the loss")
	seen := time.Now()
	var got result
	select {
	case got = <-released:
	case <-time.After(5 * time.Second):
		t.Fatal("the waiting read was not released while the standby was cut off")
	}
	require.ErrorIs(t, got.err, ErrUnavailable)
	require.Contains(t, got.err.Error(), "behind")
	t.Logf("released %v after the standby saw the loss: %v", got.at.Sub(seen), got.err)
	// The issue asks for 100 ms; a loaded CI machine under -race gets ten
	// times that (the release itself is the same publish that flips
	// Status().Connected, so it lands at once).
	require.Less(t, got.at.Sub(seen), time.Second, "released when the loss was seen")

	// During the partition: refused at once; served when already applied.
	start := time.Now()
	err = s.WaitApplied(ctx, res2.Index+1)
	require.ErrorIs(t, err, ErrUnavailable)
	_, err = s.Barrier(ctx)
	require.ErrorIs(t, err, ErrUnavailable)
	require.Less(t, time.Since(start), 2*time.Second, "refused without waiting for the partition")
	require.NoError(t, s.WaitApplied(ctx, res2.Index))
	require.Positive(t, s.Status().Suspended)

	// Healed: it reconnects (a new session, its old one expired), waits and
	// catches up again.
	proxies[s.ID()].Heal()
	require.Eventually(t, func() bool { return s.Status().Connected }, 20*time.Second, 5*time.Millisecond, "reconnected")
	res3, err := p.Propose(ctx, setOp("k", "v3"))
	require.NoError(t, err)
	require.NoError(t, s.WaitApplied(ctx, res3.Index))
	idx, err := s.Barrier(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, idx, res3.Index)
}

// TestSilentPartitionReadsRefusedFast: a standby whose link to ZooKeeper
// silently holds bytes, at a 4 s session, refuses a read for an index it
// has not applied within 600 ms of the cut (go-zookeeper itself notices
// only at its read timeout, 2.67 s), while its session and role go on;
// when the link heals within the session, reads are served again in the
// same session. With the link check off (LinkProbeBound < 0) the same read
// waits for the read timeout: what the check buys.
func TestSilentPartitionReadsRefusedFast(t *testing.T) {
	ens := sharedEnsemble(t)
	for _, tc := range []struct {
		name  string
		bound time.Duration
	}{{"link check on", 0}, {"link check off", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			proxies := map[string]*faultnet.Proxy{}
			c := newCluster(t, ens, nil)
			c.mutate = func(cfg *Config) {
				proxies[cfg.ID] = newProxy(t, ens.Addrs()...)
				cfg.Servers = []string{proxies[cfg.ID].Addr()}
				cfg.SessionTimeout = 4 * time.Second
				cfg.LinkProbeBound = tc.bound
			}
			c.open("a")
			c.open("b")
			p := c.waitPrimary(20 * time.Second)
			s := c.other(p)
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			res, err := p.Propose(ctx, setOp("k", "v1"))
			require.NoError(t, err)
			require.NoError(t, s.WaitApplied(ctx, res.Index))
			session := s.Status().SessionID

			released := make(chan error, 1)
			go func() { released <- s.WaitApplied(ctx, res.Index+1000) }()
			time.Sleep(50 * time.Millisecond) // the read waits, connected
			cut := time.Now()
			proxies[s.ID()].Blackhole()
			// A Barrier that starts right after the cut: its read of the
			// log's end waits on the silent link; the link check releases it.
			type barrierResult struct {
				err  error
				took time.Duration
			}
			barrier := make(chan barrierResult, 1)
			go func() {
				_, err := s.Barrier(ctx)
				barrier <- barrierResult{err, time.Since(cut)}
			}()
			var err2 error
			select {
			case err2 = <-released:
			case <-time.After(5 * time.Second):
				t.Fatal("the waiting read was not released while the standby was cut off")
			}
			took := time.Since(cut)
			require.ErrorIs(t, err2, ErrUnavailable)
			t.Logf("%s: a read waiting on the silently cut standby released %v after the cut: %v", tc.name, took.Round(time.Millisecond), err2)
			b := <-barrier
			require.ErrorIs(t, b.err, ErrUnavailable)
			t.Logf("%s: a barrier started at the cut refused %v after it", tc.name, b.took.Round(time.Millisecond))
			if tc.bound < 0 {
				require.Greater(t, took, time.Second, "without the link check the read waits for go-zookeeper's read timeout")
				proxies[s.ID()].Heal()
				return
			}
			require.Less(t, took, 600*time.Millisecond, "refused within 600 ms of the cut")
			require.Less(t, b.took, 600*time.Millisecond, "a barrier in flight at the cut released within 600 ms")
			require.True(t, s.Status().Connected, "the session is not ended by the suspicion")
			require.Contains(t, err2.Error(), "link looks cut")
			_, err = s.Barrier(ctx)
			require.ErrorIs(t, err, ErrUnavailable)

			// Healed within the session: reads are served again, same session.
			proxies[s.ID()].Heal()
			res2, err := p.Propose(ctx, setOp("k", "v2"))
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				return s.WaitApplied(ctx, res2.Index) == nil
			}, 10*time.Second, 20*time.Millisecond, "reads served again after the link healed")
			idx, err := s.Barrier(ctx)
			require.NoError(t, err)
			require.GreaterOrEqual(t, idx, res2.Index)
			require.Equal(t, session, s.Status().SessionID, "the same session: the blip did not cost it")
		})
	}
}

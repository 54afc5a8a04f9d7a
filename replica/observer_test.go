package replica

import (
	"context"
	"fmt"
	"path"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
)

// observerWatch samples an observer for the whole of a test: its role (it
// must never be takeover or primary) and the room's election/ children,
// read raw through a client of its own (no node may name it, accepted or
// not).
type observerWatch struct {
	stop chan struct{}
	done chan struct{}

	mu       sync.Mutex // guards the fields below
	problems []string
	listings int // election/ listings made
}

func watchObserver(t *testing.T, ens *zkensemble.Ensemble, obs *Replica) *observerWatch {
	client := viewClient(t, ens)
	dir := obs.room.Path(electionDir)
	w := &observerWatch{stop: make(chan struct{}), done: make(chan struct{})}
	note := func(format string, args ...any) {
		w.mu.Lock()
		if len(w.problems) < 20 {
			w.problems = append(w.problems, fmt.Sprintf(format, args...))
		}
		w.mu.Unlock()
	}
	go func() { // owner: w; finish stops it and waits
		defer close(w.done)
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			if s := obs.Status(); s.Role == RolePrimary || s.Role == RoleTakingOver {
				note("observer %s in role %s (epoch %d)", obs.ID(), s.Role, s.Epoch)
			}
			if i%3 == 0 {
				names, _, err := client.Conn().Children(dir)
				if err == nil {
					w.mu.Lock()
					w.listings++
					w.mu.Unlock()
				}
				for _, name := range names {
					data, _, err := client.Conn().Get(path.Join(dir, name))
					var cd candidateData
					if err == nil && decode(data, &cd) == nil && cd.ID == obs.ID() {
						note("election node %s names the observer %s", name, obs.ID())
					}
				}
			}
			select {
			case <-w.stop:
				return
			case <-tick.C:
			}
		}
	}()
	t.Cleanup(func() { w.finish() })
	return w
}

// finish stops the watch and returns what it found. Idempotent.
func (w *observerWatch) finish() (problems []string, listings int) {
	select {
	case <-w.stop:
	default:
		close(w.stop)
	}
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.problems...), w.listings
}

// candidates lists the accepted election candidates' ids.
func candidates(t *testing.T, c *logroom.Client, room string) []string {
	t.Helper()
	var ids []string
	for _, cv := range readView(t, c, "", room).Candidates {
		ids = append(ids, cv.ID)
	}
	return ids
}

// TestObserverNeverLeads: an observer (Config.Observer) never becomes a
// candidate, even alone in the room, across the primary's and the
// standby's departure and its own session's expiry; meanwhile it applies
// everything, serves WaitApplied, Barrier and reads, refuses to be a
// transfer target, makes a checkpoint on demand, shows itself in Status,
// member data, the read-only view and metrics, and a new member with an
// empty disk bootstraps from its checkpoint once it is the only member
// left.
func TestObserverNeverLeads(t *testing.T) {
	ens := sharedEnsemble(t)
	proxy := newProxy(t, ens.Addrs()...)
	reg := prometheus.NewPedanticRegistry()
	const obsID = "obs"
	c := newCluster(t, ens, func(cfg *Config) {
		smallCheckpoints(cfg)
		cfg.Registerer = reg
		if cfg.ID == obsID {
			cfg.Observer = true
			cfg.Servers = []string{proxy.Addr()} // cut below to expire its session
			cfg.SessionTimeout = 2 * time.Second
		}
	})
	vc := viewClient(t, ens)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Alone in the room, the observer stays a standby and holds no
	// candidate: a standby would lead within milliseconds.
	obs := c.open(obsID)
	roles := obs.RoleChanges()
	watch := watchObserver(t, ens, obs)
	require.True(t, obs.Status().Observer)
	require.Never(t, func() bool { return obs.Status().Role != RoleStandby }, 1500*time.Millisecond, 10*time.Millisecond,
		"an observer alone in the room never leads")
	require.Empty(t, candidates(t, vc, c.room))

	// Two members that may lead join; the first leads.
	m0, m1 := c.open("m0"), c.open("m1")
	p := c.waitPrimary(20 * time.Second)
	require.Equal(t, m0, p, "the observer is not in the line: m0's candidate is the lowest")
	require.ElementsMatch(t, []string{"m0", "m1"}, candidates(t, vc, c.room))
	require.Eventually(t, func() bool {
		m, ok := p.member(obsID)
		return ok && m.Observer && m.Role == RoleStandby
	}, 10*time.Second, 5*time.Millisecond, "the primary sees the observer's member data")
	for _, mv := range readView(t, vc, "", c.room).Members {
		require.Equal(t, mv.Name == obsID, mv.Observer, "read-only view of %s", mv.Name)
	}
	// It reads no election, yet knows the primary (from the members'
	// data), so its NotPrimaryError can redirect.
	require.Eventually(t, func() bool { return obs.Status().PrimaryID == p.ID() }, 10*time.Second, 5*time.Millisecond,
		"the observer names the primary: %q", obs.Status().PrimaryID)
	l := startLoad(c, 4)
	defer l.finish()
	l.waitAcked(t, 600, 60*time.Second)

	// Reads on the observer.
	res, err := p.Propose(ctx, setOp("obs-key", "v1"))
	require.NoError(t, err)
	require.NoError(t, obs.WaitApplied(ctx, res.Index))
	idx, err := obs.Barrier(ctx)
	require.NoError(t, err)
	require.GreaterOrEqual(t, idx, res.Index)
	v, err := obs.Get([]byte("obs-key"))
	require.NoError(t, err)
	require.Equal(t, "v1", string(v))

	// Not a transfer target; the primary goes on.
	err = p.TransferLeadership(ctx, obsID)
	require.ErrorIs(t, err, ErrTransfer)
	require.ErrorContains(t, err, `"obs" is an observer`)
	_, err = p.Propose(ctx, setOp("after-transfer", "v"))
	require.NoError(t, err, "a refused transfer stops nothing")

	// Metrics.
	obsLabels := map[string]string{"member": obsID, "room": c.room}
	gauge := func(labels map[string]string, name string) float64 {
		t.Helper()
		v, ok := gather(t, reg, name, labels)
		require.True(t, ok, "%s%v missing", name, labels)
		return v
	}
	require.Equal(t, 1.0, gauge(obsLabels, "roomlog_replica_observer"))
	require.Equal(t, 0.0, gauge(map[string]string{"member": "m0", "room": c.room}, "roomlog_replica_observer"))
	require.Equal(t, 1.0, gauge(map[string]string{"member": obsID, "room": c.room, "role": RoleStandby.String()}, "roomlog_replica_role"))

	// The observer's session expires (cut past its timeout) and is
	// rebuilt: it rejoins the membership, still without a candidate.
	session := obs.Status().SessionID
	proxy.Cut()
	require.Eventually(t, func() bool { _, ok := p.member(obsID); return !ok }, 20*time.Second, 5*time.Millisecond,
		"the observer's member node goes with its session")
	proxy.Heal()
	require.Eventually(t, func() bool {
		s := obs.Status()
		m, ok := p.member(obsID)
		return s.Connected && s.SessionID != session && ok && m.Observer
	}, 30*time.Second, 5*time.Millisecond, "the observer rejoins in a new session")
	l.waitAcked(t, 200, 60*time.Second)

	// The primary leaves: the standby takes over, never the observer.
	c.close(p.ID())
	p = c.waitPrimary(20 * time.Second)
	require.Equal(t, m1, p)
	l.waitAcked(t, 300, 60*time.Second)
	l.finish()
	l.verify(t) // every acknowledged proposal applied on the observer too

	// Checkpoints: the primary's deletes channels; the observer's on
	// demand covers everything applied.
	require.NoError(t, p.Checkpoint(ctx))
	require.Eventually(t, func() bool {
		chans, err := p.Room().Channels(ctx)
		return err == nil && len(chans) > 0 && chans[0].FirstIndex > 1
	}, 20*time.Second, 10*time.Millisecond, "covered channels deleted")
	last, err := p.Barrier(ctx)
	require.NoError(t, err)
	require.NoError(t, obs.WaitApplied(ctx, last))
	require.NoError(t, obs.Checkpoint(ctx))
	require.GreaterOrEqual(t, obs.Status().CheckpointIndex, last)

	// The standby leaves too: the observer, the last member, still does
	// not lead and holds no candidate.
	c.close(p.ID())
	require.Never(t, func() bool { return obs.Status().Role != RoleStandby }, 2*time.Second, 10*time.Millisecond,
		"the last member left, an observer, never leads")
	require.Empty(t, candidates(t, vc, c.room))
	require.Empty(t, obs.Status().PrimaryID)

	// A new member with an empty disk: its next entry was deleted, so it
	// bootstraps from the one checkpoint source, the observer, then leads.
	fresh := c.open("fresh")
	p = c.waitPrimary(60 * time.Second)
	require.Equal(t, fresh, p)
	require.Equal(t, 1, fresh.Status().Bootstraps, "bootstrapped from the observer's checkpoint")
	v, err = fresh.Get([]byte("obs-key"))
	require.NoError(t, err)
	require.Equal(t, "v1", string(v))
	res, err = fresh.Propose(ctx, setOp("after-bootstrap", "v2"))
	require.NoError(t, err)
	require.NoError(t, obs.WaitApplied(ctx, res.Index))
	c.waitConverged(res.Index, 30*time.Second)

	problems, listings := watch.finish()
	require.Empty(t, problems)
	require.Positive(t, listings, "the watch listed election/")
	for {
		select {
		case rc := <-roles:
			require.NotContains(t, []Role{RolePrimary, RoleTakingOver}, rc.Role, "observer role change %+v", rc)
			continue
		default:
		}
		break
	}
	require.Equal(t, RoleStandby, obs.Status().Role)
}

package logroom

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomlog/roomlog/internal/infra/faultnet"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"
)

// appendLoad runs appenders until stop is set, recording every outcome.
func appendLoad(t testing.TB, ctx context.Context, w *Writer, goroutines int, tag string, a *acked, stop *atomic.Bool, okCount *atomic.Int64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				en := []byte(fmt.Sprintf("%s-g%d-%d", tag, g, i))
				actx, cancel := context.WithTimeout(ctx, 30*time.Second)
				last, err := w.Append(actx, en)
				cancel()
				a.record(t, [][]byte{en}, last, err)
				if err == nil {
					okCount.Add(1)
				} else if errors.Is(err, ErrFenced) || errors.Is(err, ErrClosed) {
					return
				}
			}
		}()
	}
	return &wg
}

// TestConnectionLossMidAppend cuts the writer's TCP connections (through a
// proxy) while many batches are in flight, repeatedly. Replies are lost
// although many Multis were applied; the writer must resolve each batch
// before going on: every acknowledged entry exactly once, no duplicate, no
// gap, nothing reported unknown while the session survives.
func TestConnectionLossMidAppend(t *testing.T) {
	e := sharedZK(t)
	p := newProxy(t, e.Addrs()[0])
	wc := dial(t, []string{p.Addr()})
	r := openRoom(t, wc, "connloss")
	w := newWriter(t, r, WriterConfig{MaxInFlight: 16, EagerInFlight: 16, MaxBatchBytes: 4 << 10, MaxChannelBatches: 30})
	ctx := testCtx(t, 90*time.Second)

	a := newAcked()
	var stop atomic.Bool
	var okCount atomic.Int64
	wg := appendLoad(t, ctx, w, 32, "c", a, &stop, &okCount)
	for cut := 1; cut <= 6; cut++ {
		target := int64(cut * 300)
		require.Eventually(t, func() bool { return okCount.Load() >= target }, 30*time.Second, 10*time.Millisecond, "appends between cuts")
		if cut%2 == 0 {
			// Requests sent now never reach the server: after the cut the
			// writer must find them absent and resend them.
			before := p.Stats().DroppedUp
			p.DropRequests()
			// More than a ping (12 bytes): at least one Multi was lost.
			require.Eventually(t, func() bool { return p.Stats().DroppedUp > before+100 }, 30*time.Second, 10*time.Millisecond, "requests lost on the wire")
			p.Cut()
			p.Heal()
			continue
		}
		// Replies dropped now belong to requests that landed: after the
		// reset the writer must read them back rather than resend. (A bare
		// reset only sometimes catches a batch applied but unanswered.)
		before := p.Stats().DroppedDown
		p.DropReplies()
		require.Eventually(t, func() bool { return p.Stats().DroppedDown > before+100 }, 30*time.Second, 10*time.Millisecond, "replies lost on the wire")
		p.Reset()
		p.Heal()
	}
	require.Eventually(t, func() bool { return okCount.Load() >= 2100 }, 30*time.Second, 10*time.Millisecond, "appends after the last cut")
	stop.Store(true)
	wg.Wait()
	require.Empty(t, a.unknown, "the session survived: every outcome can be resolved")
	require.Empty(t, a.fenced)
	t.Logf("resolutions %d, read back %d, resent %d", w.stats.resolutions.Load(), w.stats.readBack.Load(), w.stats.resent.Load())
	// A cut during a seal is resolved by the seal itself, not counted here.
	require.GreaterOrEqual(t, w.stats.resolutions.Load(), int64(3), "cuts paused the pipeline")
	chs, err := r.Channels(ctx)
	require.NoError(t, err)
	t.Logf("%d channels, %d sealed with batches in flight", len(chs), w.stats.earlySeals.Load())
	require.GreaterOrEqual(t, len(chs), 3, "rotations during the cuts (how many depends on batching, so on load)")
	require.Positive(t, w.stats.readBack.Load(), "applied batches whose reply was lost were read back")
	require.Positive(t, w.stats.resent.Load(), "batches lost on the wire were resent")

	rc := dial(t, e.Addrs())
	rr := openRoom(t, rc, "connloss")
	end, err := rr.CommittedIndex(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, w.LastCommitted(), end)
	log := readAll(t, ctx, rr, end)
	checkLog(t, log, a)
	require.Len(t, a.ok, int(end), "every entry in the log was acknowledged")
}

// TestSessionExpiry freezes the writer's and the reader's connections past
// the session timeout: go-zookeeper opens new sessions on the same
// connections. The writer keeps its fence (the epoch version), resolves
// what was in flight and goes on; the reader re-arms its watches and
// resumes from its position.
func TestSessionExpiry(t *testing.T) {
	e := sharedZK(t)
	p := newProxy(t, e.Addrs()[0])
	ctx := testCtx(t, 90*time.Second)
	dialP := func() *Client {
		c, err := Dial(ctx, DialConfig{Servers: []string{p.Addr()}, SessionTimeout: time.Second})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		return c
	}
	wc, rc := dialP(), dialP()
	r := openRoom(t, wc, "expiry")
	rr := openRoom(t, rc, "expiry")
	w := newWriter(t, r, WriterConfig{MaxInFlight: 8, EagerInFlight: 8})
	events, unsub := wc.Subscribe()
	defer unsub()

	rd, err := rr.Tail(ctx, 1)
	require.NoError(t, err)
	var got []Entry
	var readErr error
	readDone := make(chan struct{})
	var readTarget atomic.Uint64
	go func() {
		defer close(readDone)
		for {
			es, err := rd.Next(ctx)
			if err != nil {
				readErr = err
				return
			}
			got = append(got, es...)
			if t := readTarget.Load(); t != 0 && es[len(es)-1].Index >= t {
				return
			}
		}
	}()

	a := newAcked()
	var stop atomic.Bool
	var okCount atomic.Int64
	wg := appendLoad(t, ctx, w, 8, "x", a, &stop, &okCount)
	require.Eventually(t, func() bool { return okCount.Load() >= 200 }, 30*time.Second, 10*time.Millisecond, "appends before the freeze")
	// Ephemeral markers show when the server has expired each session.
	markers := []string{r.Path("w-marker"), r.Path("r-marker")}
	for i, c := range []*Client{wc, rc} {
		_, err := c.Conn().Create(markers[i], nil, zk.FlagEphemeral, c.ACL())
		require.NoError(t, err)
	}
	sid := wc.SessionID()
	p.Blackhole()
	p.Reset()
	probe := dial(t, e.Addrs())
	require.Eventually(t, func() bool {
		for _, m := range markers {
			ok, _, err := probe.Conn().Exists(m)
			if err != nil || ok {
				return false
			}
		}
		return true
	}, 30*time.Second, 10*time.Millisecond, "both sessions expired on the server")
	p.Heal()
	expired := false
	require.Eventually(t, func() bool {
		for {
			select {
			case ev := <-events:
				if ev.State == zk.StateExpired {
					expired = true
				}
				continue
			default:
			}
			return expired
		}
	}, 30*time.Second, 10*time.Millisecond, "expiry event")
	require.Eventually(t, func() bool { return okCount.Load() >= 600 }, 30*time.Second, 10*time.Millisecond, "appends after expiry")
	require.NotEqual(t, sid, wc.SessionID(), "a new session")
	stop.Store(true)
	wg.Wait()
	require.Empty(t, a.fenced)
	require.Positive(t, w.stats.resolutions.Load())
	// The target is the index of a sentinel appended after it is set: a
	// reader already through the load (it may be, a reader reading ahead
	// is quick) waits in Next and takes the sentinel, instead of waiting
	// for a target it passed before it was set.
	end := w.LastCommitted() + 1
	readTarget.Store(end)
	idx, err := w.Append(ctx, []byte("sentinel"))
	require.NoError(t, err)
	require.Equal(t, end, idx)
	select {
	case <-readDone:
	case <-time.After(30 * time.Second):
		t.Fatalf("reader stuck at %d, want %d", rd.Position(), end)
	}
	require.NoError(t, readErr)
	require.Equal(t, end, got[len(got)-1].Index)
	checkLog(t, got, a)
}

// TestKillConnectedServer kills the ZooKeeper server the writer is
// connected to, mid-stream, in a 3-server ensemble. Every acknowledged
// entry is present exactly once, without gaps or duplicates. With the
// default (leader-first) client the first victim is the leader; the
// follower variant gives the writer only the followers' addresses
// (AnyServer), so the victims are followers and the writer moves between
// them while the leader stays.
func TestKillConnectedServer(t *testing.T) {
	t.Run("leader-first", func(t *testing.T) { killConnectedServer(t, false) })
	t.Run("followers", func(t *testing.T) { killConnectedServer(t, true) })
}

func killConnectedServer(t *testing.T, followers bool) {
	needZK(t)
	e := zkensemble.ForTest(t, zkensemble.Options{Servers: 3})
	ctx := testCtx(t, 120*time.Second)
	var wc *Client
	if followers {
		leader, err := e.Leader(ctx)
		require.NoError(t, err)
		var addrs []string
		for i, a := range e.Addrs() {
			if i != leader {
				addrs = append(addrs, a)
			}
		}
		c, err := Dial(ctx, DialConfig{Servers: addrs, SessionTimeout: 4 * time.Second, AnyServer: true})
		require.NoError(t, err)
		t.Cleanup(c.Close)
		wc = c
	} else {
		wc = dial(t, e.Addrs())
	}
	r := openRoom(t, wc, "kill")
	w := newWriter(t, r, WriterConfig{MaxInFlight: 16, EagerInFlight: 16, MaxBatchBytes: 16 << 10, MaxChannelBatches: 50})
	a := newAcked()
	var stop atomic.Bool
	var okCount atomic.Int64
	wg := appendLoad(t, ctx, w, 32, "k", a, &stop, &okCount)
	require.Eventually(t, func() bool { return okCount.Load() >= 500 }, 30*time.Second, 10*time.Millisecond, "appends before the kill")
	victim := slices.Index(e.Addrs(), wc.Conn().Server())
	require.GreaterOrEqual(t, victim, 0, "connected to %s", wc.Conn().Server())
	require.NoError(t, e.Kill(victim))
	before := okCount.Load()
	require.Eventually(t, func() bool { return okCount.Load() >= before+500 }, 60*time.Second, 10*time.Millisecond, "appends after the kill")
	require.NotEqual(t, e.Addrs()[victim], wc.Conn().Server())

	// Restart it and kill the next server the writer is connected to: the
	// quorum holds throughout, appends go on after a pause.
	require.NoError(t, e.Start(ctx, victim))
	second := slices.Index(e.Addrs(), wc.Conn().Server())
	require.GreaterOrEqual(t, second, 0)
	require.NotEqual(t, victim, second)
	require.NoError(t, e.Kill(second))
	before = okCount.Load()
	require.Eventually(t, func() bool { return okCount.Load() >= before+500 }, 60*time.Second, 10*time.Millisecond, "appends after the second kill")
	victim = second
	stop.Store(true)
	wg.Wait()
	require.Empty(t, a.fenced)
	require.Empty(t, a.unknown, "the session survived the kill")
	t.Logf("resolutions %d, read back %d, resent %d", w.stats.resolutions.Load(), w.stats.readBack.Load(), w.stats.resent.Load())
	require.Positive(t, w.stats.resolutions.Load(), "the kill cut the writer's connection")

	var live []string
	for i, addr := range e.Addrs() {
		if i != victim {
			live = append(live, addr)
		}
	}
	rc := dial(t, live)
	rr := openRoom(t, rc, "kill")
	end, err := rr.CommittedIndex(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, w.LastCommitted(), end)
	log := readAll(t, ctx, rr, end)
	checkLog(t, log, a)
	require.Len(t, a.ok, int(end))
}

// TestFencedDuringConnectionLoss: the old writer's batches land but their
// replies are lost; meanwhile a new writer takes over (sealing after those
// batches). When the old writer reconnects it must acknowledge exactly the
// batches that landed (they are committed) and fail the rest with
// ErrFenced: never a false success, never a false failure.
func TestFencedDuringConnectionLoss(t *testing.T) {
	l := startLostReplies(t, "fenced-loss", 64, 300)
	ctx, p, rn, old, a, wg, before := l.ctx, l.p, l.rn, l.old, l.a, l.wg, l.before
	nw := newWriter(t, rn, WriterConfig{})
	p.Cut()
	p.Heal()
	// Every appender ends with ErrFenced (appendLoad stops on it).
	wg.Wait()
	require.Len(t, a.fenced, 64, "each appender's last append was fenced")
	t.Logf("old writer: acked up to %d before the drop, %d after resolution; new writer starts at %d; read back %d",
		before, old.LastCommitted(), nw.StartIndex(), old.stats.readBack.Load())
	require.Equal(t, nw.StartIndex()-1, old.LastCommitted(),
		"the old writer acknowledges exactly what the new one sealed")
	require.Greater(t, old.LastCommitted(), before+8)

	for i := 0; i < 10; i++ {
		en := []byte(fmt.Sprintf("new-%d", i))
		last, err := nw.Append(ctx, en)
		a.record(t, [][]byte{en}, last, err)
		require.NoError(t, err)
	}
	log := readAll(t, ctx, rn, nw.LastCommitted())
	checkLog(t, log, a)
	require.Len(t, a.ok, int(nw.LastCommitted()), "every entry in the log was acknowledged")
}

// TestChannelDeletedDuringConnectionLoss: the old writer's batches land but
// their replies are lost; a new writer takes over, seals past them and the
// channel is deleted (as a checkpointing primary does) before the old writer
// reconnects. The old writer then finds its batches absent: that must be
// ErrOutcomeUnknown (they were committed), never ErrFenced ("not committed").
// Found by the chaos suite (seed 627214611).
func TestChannelDeletedDuringConnectionLoss(t *testing.T) {
	l := startLostReplies(t, "deleted-loss", 16, 100)
	ctx, p, rn, a, stop, wg, before := l.ctx, l.p, l.rn, l.a, l.stop, l.wg, l.before
	chs, err := rn.Channels(ctx)
	require.NoError(t, err)
	oldCh := chs[len(chs)-1].Num
	nw := newWriter(t, rn, WriterConfig{})
	require.Greater(t, nw.StartIndex(), before+8, "the new writer sealed past the unacknowledged batches")
	require.NoError(t, rn.DeleteChannel(ctx, oldCh))
	p.Cut()
	p.Heal()
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.unknown) > 0 || len(a.fenced) > 0
	}, 30*time.Second, 10*time.Millisecond, "the old writer gives up")
	stop.Store(true)
	wg.Wait()
	require.Empty(t, a.fenced, "batches that landed in a channel deleted meanwhile were reported as not committed")
	require.NotEmpty(t, a.unknown)
	for _, idx := range a.ok {
		require.Less(t, idx, nw.StartIndex(), "acknowledged past the new writer's start")
	}
}

// lostReplies is an old writer under load, connected through a proxy that
// now drops every reply, whose batches still land (before+8 and more are
// committed); rn is the room through a direct connection, for a new writer.
type lostReplies struct {
	ctx    context.Context
	p      *faultnet.Proxy
	rn     *Room
	old    *Writer
	a      *acked
	stop   *atomic.Bool
	wg     *sync.WaitGroup
	before uint64 // the old writer's last acknowledged index when replies stopped
}

// startLostReplies starts appenders on the old writer of room, waits for
// progress appends, then drops the replies until batches land unanswered.
func startLostReplies(t *testing.T, room string, appenders, progress int) lostReplies {
	t.Helper()
	e := sharedZK(t)
	l := lostReplies{p: newProxy(t, e.Addrs()[0]), stop: new(atomic.Bool)}
	oc := dial(t, []string{l.p.Addr()})
	nc := dial(t, e.Addrs())
	ro := openRoom(t, oc, room)
	l.rn = openRoom(t, nc, room)
	l.ctx = testCtx(t, 90*time.Second)
	l.old = newWriter(t, ro, WriterConfig{MaxInFlight: 16, EagerInFlight: 16})
	l.a = newAcked()
	var okCount atomic.Int64
	l.wg = appendLoad(t, l.ctx, l.old, appenders, "old", l.a, l.stop, &okCount)
	require.Eventually(t, func() bool { return okCount.Load() >= int64(progress) }, 30*time.Second, 10*time.Millisecond, "old writer progress")

	l.p.DropReplies()
	l.before = l.old.LastCommitted()
	require.Eventually(t, func() bool {
		end, err := l.rn.CommittedIndex(l.ctx, l.before)
		return err == nil && end > l.before+8
	}, 30*time.Second, 10*time.Millisecond, "batches landing without replies")
	return l
}

package replica

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

// lossCase is one way ZooKeeper loses a room under running members.
type lossCase struct {
	name string
	lose func(t *testing.T, ens *zkensemble.Ensemble, cp *zkensemble.DataCopy, room string)
}

var lossCases = []lossCase{
	{"restored-from-older-copy", func(t *testing.T, ens *zkensemble.Ensemble, cp *zkensemble.DataCopy, _ string) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		require.NoError(t, ens.RestoreData(ctx, cp))
	}},
	{"wiped", func(t *testing.T, ens *zkensemble.Ensemble, _ *zkensemble.DataCopy, _ string) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		require.NoError(t, ens.WipeData(ctx))
	}},
	{"room-deleted", func(t *testing.T, ens *zkensemble.Ensemble, _ *zkensemble.DataCopy, room string) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: ens.Addrs(), SessionTimeout: 4 * time.Second})
		require.NoError(t, err)
		defer c.Close()
		require.NoError(t, logroom.DeleteRoom(ctx, c, "", room))
	}},
}

func reqKey(i int) string { return fmt.Sprintf("req-%d", i) }

// TestZooKeeperDataLoss: for each way ZooKeeper can lose a room under
// running members (its data restored from a copy taken earlier, its data
// wiped, the room deleted by a foreign client), every member fails with
// ErrRoomLost naming what it found, promptly; nothing more is
// acknowledged; restarted members refuse by name without creating the
// room; Reseed from the members' data dirs brings the room back with
// every acknowledged entry, exactly-once intact, the log continuing past
// the old indexes, every member at one state hash.
func TestZooKeeperDataLoss(t *testing.T) {
	for _, tc := range lossCases {
		t.Run(tc.name, func(t *testing.T) { testDataLoss(t, tc) })
	}
}

func testDataLoss(t *testing.T, tc lossCase) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	cl := newCluster(t, ens, nil)
	reps := cl.openN(3)
	p := cl.waitPrimary(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	acked := map[int]Result{}
	propose := func(from, to int) {
		for i := from; i < to; i++ {
			res, err := p.ProposeRequest(ctx, store.RequestIDFromKey(reqKey(i)), setOp(fmt.Sprintf("k%03d", i), fmt.Sprintf("v%d", i)))
			require.NoError(t, err)
			acked[i] = res
		}
	}
	propose(0, 40)
	require.NoError(t, p.Checkpoint(ctx)) // channels rotate: the copy holds a sealed one
	propose(40, 60)
	cp, err := ens.CopyData(t.TempDir())
	require.NoError(t, err)
	propose(60, 100)
	// m2 stops here (behind what the others go on to apply): a survivor
	// that must bootstrap after the re-seed.
	behind := reps[2]
	cl.waitConverged(acked[99].Index, 20*time.Second)
	behindCfg := cl.config(behind.ID())
	cl.close(behind.ID())
	reps = reps[:2]
	p = cl.waitPrimary(30 * time.Second)
	propose(100, 150)
	last := acked[149].Index
	hash := cl.waitConverged(last, 20*time.Second)

	tc.lose(t, ens, cp, cl.room)
	lostAt := time.Now()

	// Every member fails, by name, within the session timeout (4 s) plus
	// the probe's and the audit's intervals.
	took := map[string]time.Duration{}
	require.Eventually(t, func() bool {
		for _, r := range reps {
			if _, ok := took[r.ID()]; ok {
				continue
			}
			if s := r.Status(); s.Role == RoleFailed {
				took[r.ID()] = time.Since(lostAt)
				require.ErrorIs(t, s.Err, ErrRoomLost, "%s", r.ID())
				require.Contains(t, s.Err.Error(), cl.room)
				require.Contains(t, s.Err.Error(), "reseed")
			}
		}
		return len(took) == len(reps)
	}, 15*time.Second, 5*time.Millisecond, "every member fails")
	t.Logf("%s: members failed with ErrRoomLost after %v (from ZooKeeper serving again / the deletion)", tc.name, took)
	for _, d := range took {
		require.Less(t, d, 10*time.Second)
	}
	// Nothing more is acknowledged.
	pctx, pcancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = p.ProposeRequest(pctx, store.RequestIDFromKey("after-loss"), setOp("after", "loss"))
	pcancel()
	require.Error(t, err)

	// Restarted members refuse by name, and create nothing: those that
	// ran through the loss and the one that was down.
	var dirs []string
	var cfgs []Config
	for _, r := range reps {
		cfgs = append(cfgs, cl.config(r.ID()))
		cl.close(r.ID())
	}
	for _, cfg := range append(cfgs, behindCfg) {
		id := cfg.ID
		dirs = append(dirs, cfg.DataDir)
		octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := Open(octx, cfg)
		ocancel()
		require.ErrorIs(t, err, ErrRoomLost, "restarted %s", id)
		require.Contains(t, err.Error(), cl.room)
	}
	if tc.name != "restored-from-older-copy" {
		// Where the room went missing, the members left a tombstone in
		// its place, not a room.
		c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: ens.Addrs(), SessionTimeout: 4 * time.Second})
		require.NoError(t, err)
		_, err = logroom.ReadRoomInfo(ctx, c, "", cl.room)
		c.Close()
		require.ErrorIs(t, err, logroom.ErrRoomLost, "a tombstone, not a room")
		require.Contains(t, err.Error(), "roomlog reseed")
		// A member on an empty disk does not start a new history in the
		// lost room's place.
		fresh := cl.config("fresh")
		octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
		_, err = Open(octx, fresh)
		ocancel()
		require.ErrorIs(t, err, ErrRoomLost, "a fresh member refuses the tombstone")
	}

	// Re-seed from the three data dirs.
	res, err := Reseed(ctx, ReseedConfig{Servers: ens.Addrs(), Room: cl.room, DataDirs: dirs, Logger: testLogger(t)})
	require.NoError(t, err)
	t.Logf("%s: reseed took %v: seed %d from %s, epoch %d, previous: %s", tc.name, res.Took, res.Seed.Index, res.From, res.Epoch, res.Previous)
	require.Equal(t, last, res.Seed.Index)
	if tc.name == "restored-from-older-copy" {
		require.Empty(t, res.Unchecked, "the old room was there: its live members were looked for")
	} else {
		require.Contains(t, res.Unchecked, "could not be looked for", "a re-seed of a missing room says it could not check for live members of the lost incarnation")
	}
	roles := map[string]string{}
	for _, s := range res.Survivors {
		roles[filepath.Base(s.Dir)] = s.Role
		require.NotEqual(t, "left out", s.Role, "%s: %s", s.Dir, s.Reason)
	}
	require.Equal(t, "bootstrap", roles[behind.ID()], "the member that stopped early is a prefix: it bootstraps")

	reps = cl.openN(3)
	p = cl.waitPrimary(30 * time.Second)
	require.Equal(t, hash, cl.waitConverged(last, 30*time.Second), "the state the members had")
	for i := range acked {
		for _, r := range reps {
			v, err := r.Get([]byte(fmt.Sprintf("k%03d", i)))
			require.NoError(t, err)
			require.Equal(t, fmt.Sprintf("v%d", i), string(v))
		}
	}
	// Exactly once across the recovery: a retry of an acknowledged request
	// gets its original answer.
	again, err := p.ProposeRequest(ctx, store.RequestIDFromKey(reqKey(120)), setOp("k120", "v120"))
	require.NoError(t, err)
	require.True(t, again.Duplicate)
	require.Equal(t, acked[120].Index, again.Index)
	// The log continues past every old index.
	next, err := p.Propose(ctx, setOp("after", "reseed"))
	require.NoError(t, err)
	require.Greater(t, next.Index, last)
	cl.waitConverged(next.Index, 30*time.Second)
}

// TestReseedRefusesDisagreeingSurvivors: survivors whose histories differ
// at an index they share make Reseed refuse (naming both), unless one is
// trusted; then the other is left out and refused by name when it starts.
func TestReseedRefusesDisagreeingSurvivors(t *testing.T) {
	ens := sharedEnsemble(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// Two rooms' members with the same indexes and different entries.
	mk := func(tag string) (string, uint64) {
		cl := newCluster(t, ens, nil)
		r := cl.open("m0")
		cl.waitPrimary(30 * time.Second)
		var last uint64
		for i := 0; i < 20; i++ {
			res, err := r.Propose(ctx, setOp(fmt.Sprintf("k%d", i), tag))
			require.NoError(t, err)
			last = res.Index
		}
		dir := cl.config("m0").DataDir
		cl.close("m0")
		return dir, last
	}
	a, la := mk("a")
	b, lb := mk("b")
	require.Equal(t, la, lb)
	room := "r" + newGUID()[:10]
	// Point both markers at one room (as if they were its members).
	for _, d := range []string{a, b} {
		require.NoError(t, writeMarker(d, dirMarker{Base: DefaultBase, Room: room, RoomCzxid: 1}))
	}
	_, err := Reseed(ctx, ReseedConfig{Servers: ens.Addrs(), Base: DefaultBase, Room: room, DataDirs: []string{a, b}})
	require.ErrorIs(t, err, ErrReseedRefused)
	require.Contains(t, err.Error(), "disagree")
	require.Contains(t, err.Error(), a)
	require.Contains(t, err.Error(), b)
	c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: ens.Addrs(), SessionTimeout: 4 * time.Second})
	require.NoError(t, err)
	defer c.Close()
	_, err = logroom.ReadRoomInfo(ctx, c, "", room)
	require.ErrorIs(t, err, logroom.ErrNoRoom, "a refused re-seed creates nothing")

	res, err := Reseed(ctx, ReseedConfig{Servers: ens.Addrs(), Base: DefaultBase, Room: room, DataDirs: []string{a, b}, Trust: a})
	require.NoError(t, err)
	require.Equal(t, a, res.From)
	roles := map[string]string{}
	for _, s := range res.Survivors {
		roles[s.Dir] = s.Role
	}
	require.Equal(t, map[string]string{a: "seed", b: "left out"}, roles)
	cfg := Config{Servers: ens.Addrs(), SessionTimeout: 4 * time.Second, Room: room, ID: "b", DataDir: b, Logger: testLogger(t)}
	_, err = Open(ctx, cfg)
	require.ErrorIs(t, err, ErrRoomLost)
	require.Contains(t, err.Error(), "re-seeded")
	cfg.ID, cfg.DataDir = "a", a
	r, err := Open(ctx, cfg)
	require.NoError(t, err)
	require.NoError(t, r.Close())
}

// TestRefusedSessionNamed: ZooKeeper restored from a copy that still holds
// the whole log, but older than what the members' sessions saw (a foreign
// write came after the copy): every server refuses their sessions forever.
// They must not stay "disconnected" with nothing said: each fails with
// ErrSessionRefused, and restarted (a new process, a new session) they
// find the log intact and go on.
func TestRefusedSessionNamed(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	cl := newCluster(t, ens, nil)
	reps := cl.openN(2)
	p := cl.waitPrimary(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	last := proposeN(t, ctx, p, 30)
	cl.waitConverged(last, 20*time.Second)
	time.Sleep(200 * time.Millisecond) // the members publish their applied index
	cp, err := ens.CopyData(t.TempDir())
	require.NoError(t, err)
	// Writes after the copy that are not the log's; the members' pings
	// then carry their zxid. Many of them: every session the probes open
	// and close is a transaction too, and once the restored ensemble's
	// zxid passes what a member saw, ZooKeeper accepts its session again
	// (with a small gap the members simply reconnect).
	c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: ens.Addrs(), SessionTimeout: 4 * time.Second})
	require.NoError(t, err)
	for i := 0; i < 500; i++ {
		_, err = c.Conn().Create(fmt.Sprintf("/unrelated-%s-%d", newGUID()[:8], i), nil, 0, c.ACL())
		require.NoError(t, err)
	}
	c.Close()
	time.Sleep(3 * time.Second) // a ping round (a third of the session)
	require.NoError(t, ens.RestoreData(ctx, cp))
	back := time.Now()
	for _, r := range reps {
		err := waitFailed(t, r, 20*time.Second, ErrSessionRefused)
		require.Contains(t, err.Error(), "restart the member")
	}
	t.Logf("members failed with ErrSessionRefused %v after ZooKeeper served again", time.Since(back))
	for _, r := range reps {
		cl.close(r.ID())
	}
	reps = cl.openN(2)
	p = cl.waitPrimary(30 * time.Second)
	next, err := p.Propose(ctx, setOp("after", "restart"))
	require.NoError(t, err)
	require.Equal(t, last+1, next.Index)
	cl.waitConverged(next.Index, 20*time.Second)
}

// TestLaggingStandbyRefusesRolledBackLog: ZooKeeper restored from a copy
// that still holds everything a lagging standby applied, but not what the
// primary acknowledged. The standby's own batch is in the log, so only
// what it knows was committed (the primary's published applied index)
// tells: it must fail with ErrRoomLost rather than take over and write
// the lost indexes again with other entries.
func TestLaggingStandbyRefusesRolledBackLog(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	cl := newCluster(t, ens, func(c *Config) {
		if c.ID == "m1" {
			c.Applier = &slowApplier{slow: 100 * time.Millisecond} // lagaware_test.go
		}
	})
	p := cl.open("m0")
	cl.waitPrimary(30 * time.Second)
	s := cl.open("m1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var last uint64
	propose := func(from, to int) {
		for i := from; i < to; i++ {
			res, err := p.Propose(ctx, setOp(fmt.Sprintf("k%03d", i), "v"))
			require.NoError(t, err)
			last = res.Index
		}
	}
	propose(0, 20)
	cl.waitConverged(last, 20*time.Second)
	propose(20, 200)
	copyAt := last
	cp, err := ens.CopyData(t.TempDir())
	require.NoError(t, err)
	propose(200, 300)
	// The standby heard of the primary's last index but applied less than
	// the copy holds.
	require.Eventually(t, func() bool { return s.committedHi.Load() >= last }, 10*time.Second, 5*time.Millisecond)
	sApplied := s.Status().Applied
	require.Less(t, sApplied, copyAt, "the standby lags behind what the copy holds (it applies 100 ms per entry)")
	require.NoError(t, ens.RestoreData(ctx, cp))
	for _, r := range []*Replica{p, s} {
		err := waitFailed(t, r, 20*time.Second, ErrRoomLost)
		t.Logf("%s: %v", r.ID(), err)
	}
	require.Less(t, s.Status().Applied, copyAt, "the standby failed while the log still held what it applied")
	require.Contains(t, s.Status().Err.Error(), "published index")
}

// TestBarrierRefusesRolledBackLog: the log loses its newest batches while
// a caught-up standby's session goes on (ZooKeeper restored from an older
// copy under a new epoch lets sessions back in: the lifecycle chaos run
// saw a barrier say 57099 on a standby that had applied 57324 while 57328
// was acknowledged). Here the batches are deleted by a client, the same
// loss as the standby sees it. A Barrier there must not return an index
// below what the standby applied (a stale read): it refuses with
// ErrRoomLost and the member fails.
func TestBarrierRefusesRolledBackLog(t *testing.T) {
	ens := sharedEnsemble(t)
	cl := newCluster(t, ens, nil)
	p := cl.open("m0")
	cl.waitPrimary(30 * time.Second)
	s := cl.open("m1")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var last uint64
	for i := 0; i < 40; i++ {
		res, err := p.Propose(ctx, setOp(fmt.Sprintf("k%03d", i), "v"))
		require.NoError(t, err)
		last = res.Index
	}
	require.NoError(t, s.WaitApplied(ctx, last))
	// Nothing more is written; the primary stays (closed, it would hand
	// the room to the standby, whose takeover refuses the short log
	// before any barrier could be asked).

	// The log's newest batches go.
	conn := zkConn(t, ens)
	chans := logroom.RoomPath(DefaultBase, cl.room, "channels")
	names, _, err := conn.Children(chans)
	require.NoError(t, err)
	require.NotEmpty(t, names)
	sort.Strings(names)
	open := chans + "/" + names[len(names)-1]
	batches, _, err := conn.Children(open)
	require.NoError(t, err)
	sort.Strings(batches)
	deleted := 0
	for _, b := range batches[len(batches)/2:] {
		if strings.HasPrefix(b, "b-") {
			require.NoError(t, conn.Delete(open+"/"+b, -1))
			deleted++
		}
	}
	require.Positive(t, deleted)
	t.Logf("deleted %d of %d batches of %s", deleted, len(batches), open)

	bctx, bcancel := context.WithTimeout(ctx, 10*time.Second)
	idx, err := s.Barrier(bctx)
	bcancel()
	if err == nil {
		require.GreaterOrEqual(t, idx, last, "a barrier on the standby returned an index below what it applied: a stale read")
	}
	// Refused: as room lost (the barrier's own check), or the member had
	// already failed on the short log (its audit, or a takeover's check).
	require.True(t, errors.Is(err, ErrRoomLost) || errors.Is(err, logroom.ErrDiverged), "barrier: %v", err)
	t.Logf("barrier refused: %v", err)
	require.Eventually(t, func() bool { return s.Status().Role == RoleFailed }, 20*time.Second, 10*time.Millisecond, "the standby fails")
}

// TestRolledBackRoomMarkedLost: ZooKeeper restored from a copy that holds
// everything one member applied but not what the others acknowledged
// later. The members that applied more find the loss; a member whose own
// state the older log still holds cannot (the lifecycle chaos run's seed
// 696214916: a member re-bootstrapped from a peer's checkpoint just
// before the loss took over in the rolled-back room and acknowledged 6664
// proposals at the lost indexes). The finders mark the room lost in
// ZooKeeper, so that neither that member restarted on its data dir nor an
// empty one opens the room; the re-seed from the finders clears it.
func TestRolledBackRoomMarkedLost(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	cl := newCluster(t, ens, nil)
	p := cl.open("m0")
	cl.waitPrimary(30 * time.Second)
	s := cl.open("m1")
	behind := cl.open("m2")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var last uint64
	propose := func(from, to int) {
		for i := from; i < to; i++ {
			res, err := p.Propose(ctx, setOp(fmt.Sprintf("k%03d", i), "v"))
			require.NoError(t, err)
			last = res.Index
		}
	}
	propose(0, 20)
	cl.waitConverged(last, 20*time.Second)
	behindAt := behind.Status().Applied
	cl.close("m2")
	propose(20, 40)
	cp, err := ens.CopyData(t.TempDir())
	require.NoError(t, err)
	propose(40, 80)
	acked := last
	cl.waitConverged(acked, 20*time.Second)
	require.NoError(t, ens.RestoreData(ctx, cp))
	for _, r := range []*Replica{p, s} {
		err := waitFailed(t, r, 30*time.Second, ErrRoomLost)
		t.Logf("%s: %v", r.ID(), err)
	}

	c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: ens.Addrs(), SessionTimeout: 4 * time.Second})
	require.NoError(t, err)
	defer c.Close()
	var info logroom.RoomInfo
	marked := func() bool {
		info, err = logroom.ReadRoomInfo(ctx, c, "", cl.room)
		return errors.Is(err, logroom.ErrRoomLost) && info.Lost != ""
	}
	for deadline := time.Now().Add(20 * time.Second); !marked() && time.Now().Before(deadline); {
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("marker: %q (%v)", info.Lost, err)

	// The member whose state the older log still holds, restarted, and
	// an empty one: refused by name before they join or write.
	for _, id := range []string{"m2", "m3"} {
		octx, ocancel := context.WithTimeout(ctx, 30*time.Second)
		r, err := Open(octx, cl.config(id))
		ocancel()
		if err == nil {
			// Before the marker: it opened, and would take over and write
			// the lost indexes again.
			res, perr := r.Propose(ctx, setOp("ghost", id))
			_ = r.Close()
			t.Fatalf("%s (applied %d of %d acknowledged) opened the rolled-back room; a proposal: %+v, %v", id, behindAt, acked, res, perr)
		}
		require.ErrorIs(t, err, ErrRoomLost, id)
		require.Contains(t, err.Error(), "marked lost", id)
		t.Logf("%s: %v", id, err)
	}
	require.True(t, marked(), "a member that found the loss marked the room lost")

	// The re-seed from the members that found it replaces the room; the
	// restarted members go on from the acknowledged end.
	for _, id := range []string{"m0", "m1"} {
		cl.close(id)
	}
	res, err := Reseed(ctx, ReseedConfig{Servers: ens.Addrs(), Room: cl.room,
		DataDirs: []string{filepath.Join(cl.root, "m0"), filepath.Join(cl.root, "m1")}, Logger: testLogger(t)})
	require.NoError(t, err)
	require.Equal(t, acked, res.Seed.Index)
	t.Logf("re-seeded: %+v", res)
	cl.openN(2)
	p = cl.waitPrimary(30 * time.Second)
	next, err := cl.proposeRetry(ctx, setOp("after", "reseed"))
	require.NoError(t, err)
	require.Equal(t, acked+1, next.Index)
}

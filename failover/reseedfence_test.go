package failover

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
)

// TestReseedFencesPausedPrimary: the primary's process is paused
// (SIGSTOP) with a proposal on its way in, the room is deleted under it
// (a client's or automation's mistake) and re-seeded from the standbys'
// data dirs; the standbys restart and one takes over the re-seeded room.
// The old primary resumes within its session (a long one here, so the
// re-seed fits in the pause): nothing has told it yet, and the proposal
// it was handed goes out with its old fence. It must not land in the new
// incarnation: before the epoch znode was named per incarnation, the new
// room's first takeover brought the epoch znode (created anew at version
// 0) back to version 1, the version the old primary's fence checked, and
// its write was acknowledged in the re-seeded room. It must also stop
// leading, and the new primary must go on.
func TestReseedFencesPausedPrimary(t *testing.T) {
	const session = 12 * time.Second
	e := newEnv(t, 3, 3*time.Minute, func(o *testnode.NodeOptions) { o.SessionTimeout = session })
	p := e.primary()
	before := e.roleOf(p)
	require.Equal(t, uint64(1), before.Epoch, "the old primary is the room's first writer (its fence is epoch znode version 1)")
	var last uint64
	for i := 0; i < 30; i++ {
		res, err := p.Propose(e.ctx, []byte("before-loss"))
		require.NoError(t, err)
		last = res.Index
	}
	cctx, ccancel := context.WithTimeout(e.ctx, 30*time.Second)
	_, err := e.c.WaitConverged(cctx)
	ccancel()
	require.NoError(t, err)

	// Pause the primary with a proposal on its way: the HTTP request waits
	// in its socket and is served when it resumes.
	require.NoError(t, p.Pause())
	paused := time.Now()
	ghost := []byte("ghost-of-the-lost-incarnation")
	ghostDone := make(chan error, 1)
	go func() {
		pctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
		defer cancel()
		_, err := p.Propose(pctx, ghost)
		ghostDone <- err
	}()

	// The standbys stop (their stores are the survivors), the room is
	// deleted, and re-seeded from them.
	sbs := e.standbys(p)
	var dirs []string
	for _, s := range sbs {
		require.NoError(t, s.Stop())
		dirs = append(dirs, s.DataDir())
	}
	cl, err := logroom.Dial(e.ctx, logroom.DialConfig{Servers: e.ens.Addrs(), SessionTimeout: 10 * time.Second})
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, logroom.DeleteRoom(e.ctx, cl, "", e.c.Room()))
	res, err := replica.Reseed(e.ctx, replica.ReseedConfig{Servers: e.ens.Addrs(), Room: e.c.Room(), DataDirs: dirs, SessionTimeout: session, Logger: e.log})
	require.NoError(t, err)
	require.Equal(t, last, res.Seed.Index)
	require.NotEmpty(t, res.Unchecked, "the re-seed says it could not look for live members of the lost incarnation")
	for _, s := range sbs {
		require.NoError(t, s.Restart(e.ctx))
	}
	np, _ := e.waitNewPrimary(p, 30*time.Second)
	if d := time.Since(paused); d > session-2*time.Second {
		t.Fatalf("the re-seed took %v of the old primary's %v session: the scenario needs it to resume within the session", d, session)
	}

	// The old primary resumes, its session alive, with the new primary in
	// place: its proposal must not be acknowledged, and nothing of it
	// lands.
	require.NoError(t, p.Resume())
	t.Logf("%s paused %v; %s leads the re-seeded room (epoch %d)", p.ID(), time.Since(paused), np.ID(), e.roleOf(np).Epoch)
	select {
	case err := <-ghostDone:
		require.Error(t, err, "the paused primary's proposal was acknowledged after the room was re-seeded")
		t.Logf("the old primary's proposal: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("the old primary's proposal got no answer")
	}
	e.waitFor(30*time.Second, p.ID()+" to stop leading", func() bool {
		return e.roleOf(p).Role != testnode.RolePrimary
	})
	more, err := np.Propose(e.ctx, []byte("after-resume"))
	require.NoError(t, err, "the new primary was fenced by the old incarnation's writer")

	// The re-seeded room's history, as the new primary applied it: only
	// entries of epochs above the old one, none of them the ghost.
	require.Equal(t, last+1, more.Index, "the new primary's first entry follows the seed")
	d, err := np.Dump(e.ctx, last+1, more.Index)
	require.NoError(t, err)
	ghostSum := sha256.Sum256(ghost)
	require.Len(t, d.Records, 1)
	for _, r := range d.Records {
		require.Greater(t, r.Epoch, before.Epoch, "entry %d of epoch %d in the re-seeded room", r.Index, r.Epoch)
		require.NotEqual(t, hex.EncodeToString(ghostSum[:]), r.SHA256, "the old primary's proposal landed at %d", r.Index)
	}
}

// TestReseedFencesPrimaryPausedPastSession: as TestReseedFencesPausedPrimary,
// but the old primary stays paused past its (short) session: ZooKeeper has
// expired it by the time it resumes, and its client opens a new session in
// which the proposal it was handed goes out with the lost incarnation's
// fence. That write must be refused, not acknowledged; the old primary
// must stop leading; the new primary goes on; nothing of the old writer
// lands in the re-seeded room's log; and a member reading the log and the
// next takeover do not meet a corrupt batch.
func TestReseedFencesPrimaryPausedPastSession(t *testing.T) {
	const session = 4 * time.Second
	e := newEnv(t, 3, 3*time.Minute, func(o *testnode.NodeOptions) { o.SessionTimeout = session })
	p := e.primary()
	before := e.roleOf(p)
	require.Equal(t, uint64(1), before.Epoch, "the old primary is the room's first writer (its fence is epoch znode version 1)")
	var last uint64
	for i := 0; i < 20; i++ {
		res, err := p.Propose(e.ctx, []byte("before-loss"))
		require.NoError(t, err)
		last = res.Index
	}
	cctx, ccancel := context.WithTimeout(e.ctx, 30*time.Second)
	_, err := e.c.WaitConverged(cctx)
	ccancel()
	require.NoError(t, err)

	require.NoError(t, p.Pause())
	paused := time.Now()
	ghost := []byte("ghost-of-the-lost-incarnation-past-its-session")
	ghostDone := make(chan error, 1)
	go func() {
		pctx, cancel := context.WithTimeout(e.ctx, 60*time.Second)
		defer cancel()
		_, err := p.Propose(pctx, ghost)
		ghostDone <- err
	}()

	sbs := e.standbys(p)
	var dirs []string
	for _, s := range sbs {
		require.NoError(t, s.Stop())
		dirs = append(dirs, s.DataDir())
	}
	cl, err := logroom.Dial(e.ctx, logroom.DialConfig{Servers: e.ens.Addrs(), SessionTimeout: 10 * time.Second})
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, logroom.DeleteRoom(e.ctx, cl, "", e.c.Room()))
	res, err := replica.Reseed(e.ctx, replica.ReseedConfig{Servers: e.ens.Addrs(), Room: e.c.Room(), DataDirs: dirs, SessionTimeout: session, Logger: e.log})
	require.NoError(t, err)
	require.Equal(t, last, res.Seed.Index)
	for _, s := range sbs {
		require.NoError(t, s.Restart(e.ctx))
	}
	np, _ := e.waitNewPrimary(p, 30*time.Second)
	first, err := np.Propose(e.ctx, []byte("new-incarnation"))
	require.NoError(t, err)
	require.Equal(t, last+1, first.Index)

	// Past the old primary's session: ZooKeeper expires it (the session
	// timeout, plus a tick's slack).
	if d := session + time.Second - time.Since(paused); d > 0 {
		time.Sleep(d) // waiting out the paused process's session: nothing to wait on
	}
	require.NoError(t, p.Resume())
	t.Logf("%s paused %v (session %v); %s leads the re-seeded room (epoch %d)", p.ID(), time.Since(paused), session, np.ID(), e.roleOf(np).Epoch)
	select {
	case err := <-ghostDone:
		require.Error(t, err, "the primary paused past its session had its proposal acknowledged in the re-seeded room")
		t.Logf("the old primary's proposal: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the old primary's proposal got no answer")
	}
	e.waitFor(20*time.Second, p.ID()+" to stop leading", func() bool {
		return e.roleOf(p).Role != testnode.RolePrimary
	})
	more, err := np.Propose(e.ctx, []byte("after-resume"))
	require.NoError(t, err, "the new primary was fenced by the old incarnation's writer")
	require.Equal(t, first.Index+1, more.Index)

	// Every member of the new incarnation reads the log to the end, with
	// no ghost in it.
	ghostSum := sha256.Sum256(ghost)
	checkLog := func(n *testnode.Node, to uint64) {
		t.Helper()
		e.waitFor(20*time.Second, n.ID()+" to apply "+fmt.Sprint(to), func() bool {
			s := e.roleOf(n)
			require.Empty(t, s.Err, "%s failed reading the re-seeded room", n.ID())
			return s.Applied >= to
		})
		d, err := n.Dump(e.ctx, last+1, to)
		require.NoError(t, err)
		require.Len(t, d.Records, int(to-last))
		for _, r := range d.Records {
			require.Greater(t, r.Epoch, before.Epoch, "%s: entry %d of epoch %d in the re-seeded room", n.ID(), r.Index, r.Epoch)
			require.NotEqual(t, hex.EncodeToString(ghostSum[:]), r.SHA256, "%s: the old primary's proposal landed at %d", n.ID(), r.Index)
		}
	}
	for _, s := range sbs {
		checkLog(s, more.Index)
	}

	// The next takeover: the new primary is killed, the other survivor
	// takes over and appends after what the log holds.
	require.NoError(t, np.Kill())
	var other *testnode.Node
	for _, s := range sbs {
		if s != np {
			other = s
		}
	}
	e.waitFor(30*time.Second, other.ID()+" to take over", func() bool {
		s := e.roleOf(other)
		require.Empty(t, s.Err, "%s failed taking over the re-seeded room", other.ID())
		return s.Role == testnode.RolePrimary
	})
	next, err := other.Propose(e.ctx, []byte("after-takeover"))
	require.NoError(t, err)
	require.Equal(t, more.Index+1, next.Index)
	checkLog(other, next.Index)
	require.NotEqual(t, testnode.RolePrimary, e.roleOf(p).Role, "%s leads again", p.ID())
}

package zkensemble

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testLogger logs to stderr when ZKENSEMBLE_DEBUG is set.
func testLogger() *slog.Logger {
	if os.Getenv("ZKENSEMBLE_DEBUG") == "" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// connect opens a client with a 10-second session timeout (connectTimeout).
func connect(t *testing.T, addrs []string) *zk.Conn {
	t.Helper()
	return connectTimeout(t, addrs, 10*time.Second)
}

// connectTimeout opens a client that waits for its session (event callback,
// never the 6-event channel) and is closed by t.Cleanup.
func connectTimeout(t *testing.T, addrs []string, timeout time.Duration) *zk.Conn {
	t.Helper()
	has := make(chan struct{}, 1)
	conn, _, err := zk.Connect(addrs, timeout,
		zk.WithLogger(zkLogger{slog.New(slog.DiscardHandler)}),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.State == zk.StateHasSession {
				select {
				case has <- struct{}{}:
				default:
				}
			}
		}))
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	select {
	case <-has:
	case <-time.After(20 * time.Second):
		t.Fatalf("no session with %v", addrs)
	}
	return conn
}

// processGone reports whether pid no longer exists.
func processGone(pid int) bool {
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}

func TestOneServer(t *testing.T) {
	began := time.Now()
	e := ForTest(t, Options{Logger: testLogger()})
	t.Logf("1 server started in %v", time.Since(began))
	require.Len(t, e.Addrs(), 1)
	require.Equal(t, e.Addrs()[0], e.ConnString())

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	leader, err := e.Leader(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, leader)
	mode, err := e.Mode(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, "standalone", mode)

	conn := connect(t, e.Addrs())
	require.Equal(t, 0, e.IndexOf(conn.Server()))
	require.Equal(t, -1, e.IndexOf("127.0.0.1:1"))
	_, err = conn.Create("/hello", []byte("world"), 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	data, _, err := conn.Get("/hello")
	require.NoError(t, err)
	require.Equal(t, "world", string(data))

	// The server log is written through a working SLF4J binding.
	require.FileExists(t, e.LogPath(0))
	tail := e.LogTail(0, 1000)
	require.NotContains(t, tail, "SLF4J: Failed to load class")
	require.Contains(t, tail, "binding to port")

	// Bad indexes are errors or zero values, never panics.
	for _, i := range []int{-1, 1, 7} {
		require.ErrorIs(t, e.Kill(i), ErrBadIndex)
		require.ErrorIs(t, e.Stop(i), ErrBadIndex)
		require.ErrorIs(t, e.Start(ctx, i), ErrBadIndex)
		require.ErrorIs(t, e.Pause(i), ErrBadIndex)
		require.ErrorIs(t, e.Resume(i), ErrBadIndex)
		_, err := e.Mode(ctx, i)
		require.ErrorIs(t, err, ErrBadIndex)
		require.Zero(t, e.PID(i))
		require.Empty(t, e.LogPath(i))
	}

	// Kill then Start: same port, the data survived.
	pid := e.PID(0)
	require.NoError(t, e.Kill(0))
	require.True(t, processGone(pid))
	require.NoError(t, e.Kill(0), "killing a dead server is a no-op")
	require.ErrorIs(t, e.Pause(0), ErrNotRunning)
	require.NoError(t, e.Start(ctx, 0))
	conn2 := connect(t, e.Addrs())
	data, _, err = conn2.Get("/hello")
	require.NoError(t, err)
	require.Equal(t, "world", string(data))
	require.Contains(t, e.LogTail(0, 1000), "==== zkensemble: launching server 0")
}

func TestStartReportsServerExit(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := Start(ctx, Options{Dir: dir, JVMFlags: []string{"-XX:+NoSuchOptionForZkensemble"}})
	require.ErrorIs(t, err, ErrExited)
	require.NotErrorIs(t, err, ErrPortInUse)
	require.Contains(t, err.Error(), "NoSuchOptionForZkensemble", "the error carries the log tail")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Empty(t, entries, "a failed Start leaves nothing behind")
}

// createRetry creates path until it exists, riding out an election:
// ErrNodeExists after a retry means an earlier attempt landed.
func createRetry(t *testing.T, conn *zk.Conn, path string, data []byte, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		_, err := conn.Create(path, data, 0, zk.WorldACL(zk.PermAll))
		if err == nil || errors.Is(err, zk.ErrNodeExists) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("create %s: %v", path, err)
		}
		time.Sleep(50 * time.Millisecond) // retry back-off, not synchronisation
	}
}

func TestThreeServersKillLeaderKeepsQuorum(t *testing.T) {
	began := time.Now()
	e := ForTest(t, Options{Servers: 3, Logger: testLogger()})
	t.Logf("3 servers started in %v", time.Since(began))
	require.Len(t, e.Addrs(), 3)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Every server joined the quorum before Start returned.
	modes := map[string]int{}
	for i := 0; i < 3; i++ {
		m, err := e.Mode(ctx, i)
		require.NoError(t, err, "server %d", i)
		modes[m]++
	}
	require.Equal(t, map[string]int{"leader": 1, "follower": 2}, modes)

	conn := connect(t, e.Addrs())
	createRetry(t, conn, "/before", []byte("1"), 10*time.Second)

	leader, err := e.Leader(ctx)
	require.NoError(t, err)
	oldPID := e.PID(leader)
	require.NotZero(t, oldPID)
	require.NoError(t, e.Kill(leader))
	require.Zero(t, e.PID(leader))
	require.True(t, processGone(oldPID))

	// Two of three keep the quorum: a client still writes.
	createRetry(t, conn, "/after", []byte("2"), 20*time.Second)
	newLeader, err := e.Leader(ctx)
	require.NoError(t, err)
	require.NotEqual(t, leader, newLeader)

	// Restart with the same ports and data dir; it joins as a follower.
	addrs := e.Addrs()
	require.NoError(t, e.Start(ctx, leader))
	require.Equal(t, addrs, e.Addrs())
	require.NotZero(t, e.PID(leader))
	require.NotEqual(t, oldPID, e.PID(leader))
	require.ErrorIs(t, e.Start(ctx, leader), ErrRunning)
	m, err := e.Mode(ctx, leader)
	require.NoError(t, err)
	require.Equal(t, "follower", m)

	// Its own copy holds both znodes: read through it alone, no sync.
	only := connect(t, []string{e.Addrs()[leader]})
	for path, want := range map[string]string{"/before": "1", "/after": "2"} {
		data, _, err := only.Get(path)
		require.NoError(t, err, path)
		require.Equal(t, want, string(data), path)
	}

	// Stop (SIGTERM) a follower and start it again.
	follower := (newLeader + 1) % 3
	if follower == leader {
		follower = (follower + 1) % 3
	}
	require.NoError(t, e.Stop(follower))
	require.Zero(t, e.PID(follower))
	require.NoError(t, e.Start(ctx, follower))
	require.NotZero(t, e.PID(follower))
}

func TestPauseResume(t *testing.T) {
	e := ForTest(t, Options{Servers: 3, Logger: testLogger()})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	leader, err := e.Leader(ctx)
	require.NoError(t, err)
	victim := (leader + 1) % 3
	other := (leader + 2) % 3

	onlyVictim := connect(t, []string{e.Addrs()[victim]})
	_, err = onlyVictim.Create("/p", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	require.NoError(t, e.Pause(victim))
	require.True(t, e.Paused(victim))
	require.NotZero(t, e.PID(victim), "a paused server is still running")

	// A request through the paused server does not complete...
	res := make(chan error, 1)
	go func() { // owner: this test; drained below
		_, err := onlyVictim.Create("/p/during", nil, 0, zk.WorldACL(zk.PermAll))
		res <- err
	}()
	select {
	case err := <-res:
		t.Fatalf("request through a paused server completed: %v", err)
	case <-time.After(time.Second):
	}
	// ...while the other two keep the quorum.
	onlyOther := connect(t, []string{e.Addrs()[other]})
	_, err = onlyOther.Create("/p/quorum", nil, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)
	_, err = e.Mode(ctx, victim)
	require.Error(t, err, "srvr answered by a paused server")

	require.NoError(t, e.Resume(victim))
	require.False(t, e.Paused(victim))
	select {
	case err := <-res:
		require.NoError(t, err, "the held request completes after resume")
	case <-time.After(15 * time.Second):
		t.Fatal("request through the resumed server still pending")
	}
	children, _, err := onlyVictim.Children("/p")
	require.NoError(t, err)
	if !assert.ElementsMatch(t, []string{"during", "quorum"}, children) {
		viaOther, _, err := onlyOther.Children("/p")
		t.Logf("children of /p via server %d: %v (err %v)", other, viaOther, err)
		for i := 0; i < 3; i++ {
			out, err := e.FourLetter(ctx, i, "srvr")
			t.Logf("srvr %d: %q (err %v)", i, out, err)
		}
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	if err := Available(); err != nil {
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	e, err := Start(ctx, Options{Servers: 3, Logger: testLogger()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = e.Close() })

	pids := []int{e.PID(0), e.PID(1), e.PID(2)}
	for i, pid := range pids {
		require.NotZero(t, pid, "server %d", i)
	}
	require.DirExists(t, e.Dir())
	require.NoError(t, e.Pause(1)) // Close must end paused servers too
	require.NoError(t, e.Kill(2))  // and cope with a server already gone

	require.NoError(t, e.Close())
	for i, pid := range pids {
		require.True(t, processGone(pid), "server %d (pid %d) still exists", i, pid)
		require.Zero(t, e.PID(i))
	}
	require.NoDirExists(t, e.Dir())
	require.NoError(t, e.Close(), "Close is idempotent")
	require.ErrorIs(t, e.Start(ctx, 0), ErrClosed)
	require.ErrorIs(t, e.Pause(0), ErrNotRunning)
}

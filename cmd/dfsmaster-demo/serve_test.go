package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
)

// testWriter sends log lines to t.Log until the test ends.
type testWriter struct {
	mu   sync.Mutex // guards done
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func openTestMaster(t *testing.T, ens *zkensemble.Ensemble, room, id, dir string, opts ...func(*serveConfig)) *master {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cfg := serveConfig{
		Servers: ens.Addrs(), Room: room, ID: id, Data: filepath.Join(dir, id),
		HTTPAddr: "127.0.0.1:0", SessionTimeout: 2 * time.Second, Logger: testLogger(t),
	}
	for _, o := range opts {
		o(&cfg)
	}
	m, err := openMaster(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.Close()) })
	return m
}

func apiStatus(t *testing.T, addr string) api.Status {
	t.Helper()
	c, err := client.New(addr, nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s, err := c.Status(ctx)
	require.NoError(t, err)
	return s
}

// TestServeEndToEnd runs two masters (primary and standby) in this process
// against a real one-server ensemble and exercises what only the real
// replica gives: the redirect of a mutation sent to the standby, a read on
// the standby that waits for min_index, equal hashes, the checkpoint
// handler on the API's server, and a takeover when the primary leaves.
func TestServeEndToEnd(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	dir := t.TempDir()
	const room = "serve-e2e"
	m1 := openTestMaster(t, ens, room, "m1", dir)
	require.Eventually(t, func() bool { return apiStatus(t, m1.Addr()).Role == api.RolePrimary }, 30*time.Second, 20*time.Millisecond, "m1 primary")
	m2 := openTestMaster(t, ens, room, "m2", dir)
	require.Eventually(t, func() bool {
		s := apiStatus(t, m2.Addr())
		return s.Role == api.RoleStandby && s.PrimaryAddr == m1.Addr() && len(s.Members) == 2
	}, 30*time.Second, 20*time.Millisecond, "m2 a standby naming m1")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// A mutation on the standby: 307 to the primary's same path, nothing applied here.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Post("http://"+m2.Addr()+"/v1/mkdir", "application/json", strings.NewReader(`{"path":"/a"}`))
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusTemporaryRedirect, resp.StatusCode, string(body))
	require.Equal(t, "http://"+m1.Addr()+"/v1/mkdir", resp.Header.Get("Location"))
	var eb api.ErrorBody
	require.NoError(t, json.Unmarshal(body, &eb))
	require.Equal(t, api.CodeNotPrimary, eb.Error)
	require.Equal(t, m1.Addr(), eb.Primary)

	// The client follows it: the write lands on the primary.
	c2, err := client.New(m2.Addr(), nil)
	require.NoError(t, err)
	mk, err := c2.Mkdir(ctx, "/a/b", true)
	require.NoError(t, err)
	cr, err := c2.Create(ctx, "/a/b/f", 2)
	require.NoError(t, err)
	ab, err := c2.AddBlock(ctx, "/a/b/f", 1<<20)
	require.NoError(t, err)
	require.Greater(t, ab.Index, cr.Index)
	require.Greater(t, cr.Index, mk.Index)
	require.NotZero(t, ab.BlockID)

	// Read-your-writes on the standby with min_index.
	st, err := c2.Stat(ctx, "/a/b/f", ab.Index)
	require.NoError(t, err)
	require.GreaterOrEqual(t, st.Index, ab.Index)
	require.Equal(t, []namespace.Block{{ID: ab.BlockID, Size: 1 << 20}}, st.BlockList)
	require.Equal(t, 2, st.Replication)
	ls, err := c2.Ls(ctx, "/a", ab.Index)
	require.NoError(t, err)
	require.Len(t, ls.Entries, 1)
	require.Equal(t, "b", ls.Entries[0].Name)

	// A rejected command is a 4xx from the log, also through the redirect.
	_, err = c2.Create(ctx, "/a/b/f", 2)
	require.ErrorIs(t, err, namespace.ErrAlreadyExists)

	// Both masters hash the same state at the same index.
	c1, err := client.New(m1.Addr(), nil)
	require.NoError(t, err)
	_, err = c1.Mkdir(ctx, "/z", false)
	require.NoError(t, err)
	h1, err := c1.Hash(ctx, 0)
	require.NoError(t, err)
	h2, err := c2.Hash(ctx, h1.AppliedIndex)
	require.NoError(t, err)
	require.Equal(t, h1, h2)

	// Status through the adapter: roles, members, channels (refreshed in the background).
	require.Eventually(t, func() bool {
		s := apiStatus(t, m1.Addr())
		return s.Role == api.RolePrimary && s.Epoch >= 1 && s.Connected && len(s.Members) == 2 && len(s.Channels) > 0 &&
			s.PrimaryID == "m1" && s.AppliedIndex == h1.AppliedIndex
	}, 10*time.Second, 20*time.Millisecond, "status with members and channels")
	// Each member's lag behind the primary: 0 once the standby's
	// published applied index caught up, on both masters' views.
	for _, addr := range []string{m1.Addr(), m2.Addr()} {
		require.Eventually(t, func() bool {
			s := apiStatus(t, addr)
			for _, mem := range s.Members {
				if mem.AppliedIndex != h1.AppliedIndex || mem.Lag != 0 {
					return false
				}
			}
			return len(s.Members) == 2
		}, 10*time.Second, 20*time.Millisecond, "members caught up, seen from "+addr)
	}
	// The primary's role changes: it took over, then became primary.
	s1 := apiStatus(t, m1.Addr())
	require.GreaterOrEqual(t, len(s1.RoleChanges), 2, "%+v", s1.RoleChanges)
	require.Equal(t, api.RolePrimary, s1.RoleChanges[0].Role)
	require.Equal(t, "takeover", s1.RoleChanges[1].Role)
	require.Equal(t, s1.Epoch, s1.RoleChanges[0].Epoch)
	require.NotEmpty(t, s1.RoleChanges[0].Reason)
	require.WithinDuration(t, time.Now(), s1.RoleChanges[0].At, time.Minute)
	require.False(t, s1.RoleChanges[0].At.Before(s1.RoleChanges[1].At), "newest first")

	// The checkpoint handler is mounted on the API's server.
	require.NoError(t, m1.rep.Checkpoint(ctx))
	resp, err = http.Get("http://" + m1.Addr() + replica.CheckpointPath(room) + "manifest")
	require.NoError(t, err)
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
	require.Contains(t, string(body), room)

	// The primary leaves gracefully: the standby takes over without waiting
	// for a session timeout, and has every acknowledged write.
	require.NoError(t, m1.Close())
	require.Eventually(t, func() bool { return apiStatus(t, m2.Addr()).Role == api.RolePrimary }, 15*time.Second, 20*time.Millisecond, "m2 primary")
	// Its role changes say so, with the new epoch; so does its page.
	s2 := apiStatus(t, m2.Addr())
	require.GreaterOrEqual(t, len(s2.RoleChanges), 2, "%+v", s2.RoleChanges)
	require.Equal(t, api.RoleChange{At: s2.RoleChanges[0].At, Role: api.RolePrimary, Epoch: s2.Epoch, Reason: s2.RoleChanges[0].Reason}, s2.RoleChanges[0])
	require.Greater(t, s2.Epoch, s1.Epoch)
	require.Equal(t, "takeover", s2.RoleChanges[1].Role)
	page := rawRequest(t, http.MethodGet, "http://"+m2.Addr()+"/", "")
	require.Contains(t, page.body, "Role changes of this master")
	require.Contains(t, page.body, s2.RoleChanges[0].Reason)
	_, err = c2.Create(ctx, "/a/b/g", 1)
	require.NoError(t, err)
	st, err = c2.Stat(ctx, "/a/b/f", 0)
	require.NoError(t, err)
	require.Len(t, st.BlockList, 1)
	_, err = c2.Stat(ctx, "/z", 0)
	require.NoError(t, err)
}

// syncBuffer is a bytes.Buffer safe for one writer and a polling reader.
type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestServeCommand runs the serve subcommand as main would (flags, the
// serving line, shutdown when the signal context ends).
func TestServeCommand(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuffer
	code := make(chan int, 1)
	go func() {
		code <- run(ctx, []string{"serve", "--zk", ens.ConnString(), "--room", "cmd", "--id", "solo",
			"--data", t.TempDir(), "--http", "127.0.0.1:0", "--session-timeout", "2s", "--log-level", "warn"}, &stdout, &stderr)
	}()
	var addr string
	require.Eventually(t, func() bool {
		for _, line := range strings.Split(stdout.String(), "\n") {
			if rest, ok := strings.CutPrefix(line, servingPrefix); ok {
				addr, _, _ = strings.Cut(rest, " ")
				return true
			}
		}
		select {
		case c := <-code:
			t.Fatalf("serve exited with %d: %s", c, stderr.String())
		default:
		}
		return false
	}, 60*time.Second, 20*time.Millisecond, "serving line")
	require.Eventually(t, func() bool { return apiStatus(t, addr).Role == api.RolePrimary }, 30*time.Second, 20*time.Millisecond, "primary")
	c, err := client.New(addr, nil)
	require.NoError(t, err)
	rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
	defer rcancel()
	_, err = c.Mkdir(rctx, "/x", false)
	require.NoError(t, err)

	cancel() // what SIGINT/SIGTERM does through signal.NotifyContext
	select {
	case got := <-code:
		require.Equal(t, exitOK, got, "stderr: %s", stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatal("serve did not stop after its context ended")
	}
	_, err = c.Status(context.Background())
	require.Error(t, err, "the HTTP server is closed")
}

func TestServeUsage(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no id", []string{"--data", "/tmp/x"}, "--id is required"},
		{"no data", []string{"--id", "a"}, "--data is required"},
		{"no servers", []string{"--id", "a", "--data", "/tmp/x", "--zk", " , "}, "--zk: no servers"},
		{"bad level", []string{"--id", "a", "--data", "/tmp/x", "--log-level", "loud"}, "--log-level"},
		{"extra args", []string{"--id", "a", "--data", "/tmp/x", "more"}, "unexpected arguments"},
		{"request ttl", []string{"--id", "a", "--data", "/tmp/x", "--request-ttl", "0s"}, "--request-ttl"},
		{"request ttl too long", []string{"--id", "a", "--data", "/tmp/x", "--request-ttl", "721h"}, "--request-ttl"},
		{"request window", []string{"--id", "a", "--data", "/tmp/x", "--request-window", "0"}, "--request-window"},
		{"disk stall timeout too short", []string{"--id", "a", "--data", "/tmp/x", "--disk-stall-timeout", "1ms"}, "--disk-stall-timeout 1ms: must be within [100ms, 1h]"},
		{"disk stall timeout zero", []string{"--id", "a", "--data", "/tmp/x", "--disk-stall-timeout", "0s"}, "--disk-stall-timeout"},
		{"bad room", []string{"--id", "a", "--data", "/tmp/x", "--room", "a/b"}, `--room: logroom: bad name: room name "a/b": contains '/'`},
		{"reserved room", []string{"--id", "a", "--data", "/tmp/x", "--room", "zookeeper"}, `room name "zookeeper": reserved`},
		{"bad flag", []string{"--nope"}, "flag provided but not defined"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			require.Equal(t, exitUsage, run(context.Background(), append([]string{"serve"}, tc.args...), &stdout, &stderr))
			require.Contains(t, stderr.String(), tc.want)
			require.Empty(t, stdout.String())
		})
	}
}

// TestServeRequestFlags: the deduplication window of Idempotency-Keys is
// the replica's, set by --request-ttl and --request-window.
func TestServeRequestFlags(t *testing.T) {
	var stderr bytes.Buffer
	opts, _, ok := parseServeFlags([]string{"--id", "a", "--data", "/tmp/x"}, &stderr)
	require.True(t, ok, stderr.String())
	require.Equal(t, replica.DefaultRequestTTL, opts.cfg.RequestTTL)
	require.Equal(t, replica.DefaultRequestWindow, opts.cfg.RequestWindow)
	opts, _, ok = parseServeFlags([]string{"--id", "a", "--data", "/tmp/x", "--request-ttl", "1h", "--request-window", "1000"}, &stderr)
	require.True(t, ok, stderr.String())
	require.Equal(t, time.Hour, opts.cfg.RequestTTL)
	require.Equal(t, 1000, opts.cfg.RequestWindow)
}

// TestServeDiskStallFlag: --disk-stall-timeout reaches the store's options.
func TestServeDiskStallFlag(t *testing.T) {
	var stderr bytes.Buffer
	opts, _, ok := parseServeFlags([]string{"--id", "a", "--data", "/tmp/x"}, &stderr)
	require.True(t, ok, stderr.String())
	require.Equal(t, store.DefaultDiskStallTimeout, opts.cfg.DiskStallTimeout)
	opts, _, ok = parseServeFlags([]string{"--id", "a", "--data", "/tmp/x", "--disk-stall-timeout", "5s"}, &stderr)
	require.True(t, ok, stderr.String())
	require.Equal(t, 5*time.Second, opts.cfg.DiskStallTimeout)
}

func TestTranslateProposeError(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   error
		want error
	}{
		{"not primary", fmt.Errorf("propose: %w", &replica.NotPrimaryError{PrimaryID: "p", PrimaryAddr: "h:1"}), api.ErrNotPrimary},
		{"outcome unknown", fmt.Errorf("x: %w: %w", replica.ErrOutcomeUnknown, context.DeadlineExceeded), api.ErrOutcomeUnknown},
		{"no response", replica.ErrNoResponse, api.ErrOutcomeUnknown},
		{"queue full", replica.ErrQueueFull, api.ErrOverloaded},
		{"room full", fmt.Errorf("%w", logroom.ErrRoomFull), api.ErrOverloaded},
		{"closed", replica.ErrClosed, api.ErrUnavailable},
		{"fenced", replica.ErrFenced, api.ErrUnavailable},
		{"failed", fmt.Errorf("%w: %w", replica.ErrFailed, errors.New("applier broke")), api.ErrFailed},
		{"context", context.Canceled, context.Canceled},
		{"request conflict", fmt.Errorf("x: %w", replica.ErrRequestConflict), api.ErrRequestConflict},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := translateProposeError(tc.in)
			require.ErrorIs(t, got, tc.want)
			if tc.want != context.Canceled {
				require.NotErrorIs(t, got, context.Canceled)
			}
		})
	}
	var np *api.NotPrimaryError
	require.True(t, errors.As(translateProposeError(&replica.NotPrimaryError{PrimaryID: "p", PrimaryAddr: "h:1"}), &np))
	require.Equal(t, api.NotPrimaryError{PrimaryID: "p", PrimaryAddr: "h:1"}, *np)
	require.Equal(t, api.RolePrimary, roleName(replica.RolePrimary))
	require.Equal(t, api.RoleStandby, roleName(replica.RoleStandby))
	require.Equal(t, replica.RoleTakingOver.String(), roleName(replica.RoleTakingOver))
	require.Equal(t, api.RoleFailed, roleName(replica.RoleFailed))
	require.Equal(t, api.RoleClosed, roleName(replica.RoleClosed))
	require.ErrorContains(t, translateProposeError(fmt.Errorf("%w: %w", replica.ErrFailed, errors.New("applier broke"))), "applier broke")
}

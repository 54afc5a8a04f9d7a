package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
)

// poisonPath is the path whose mkdir a poisonApplier refuses to apply.
const poisonPath = "/poison"

// errPoison is what a poisonApplier returns: a broken applier, which stops
// the replica (store.ErrApply) — a real failure, no mock of the replica.
var errPoison = errors.New("poisoned entry: this applier refuses mkdir " + poisonPath)

// poisonApplier is the namespace applier, except that it fails on a mkdir of
// poisonPath. A master with it fails when that entry reaches it; a master
// with the plain namespace.Applier applies it like any other.
type poisonApplier struct{ namespace.Applier }

func (p poisonApplier) Apply(b store.Batch, e store.Entry) ([]byte, error) {
	if c, err := namespace.DecodeCommand(e.Data); err == nil && c.Op == namespace.OpMkdir && c.Path == poisonPath {
		return nil, errPoison
	}
	return p.Applier.Apply(b, e)
}

// httpReply is one raw answer of a master.
type httpReply struct {
	status int
	header http.Header
	body   string
}

func (r httpReply) errorBody(t *testing.T) api.ErrorBody {
	t.Helper()
	var eb api.ErrorBody
	require.NoError(t, json.Unmarshal([]byte(r.body), &eb), "body %s", r.body)
	return eb
}

// rawRequest sends one request without following redirects.
func rawRequest(t *testing.T, method, url, body string) httpReply {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, url, rd)
	require.NoError(t, err)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noFollow.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return httpReply{status: resp.StatusCode, header: resp.Header, body: string(raw)}
}

// requireFailedReply: 503 {"error":"failed"} naming the poisoned entry, no redirect.
func requireFailedReply(t *testing.T, r httpReply) {
	t.Helper()
	require.Equal(t, http.StatusServiceUnavailable, r.status, "body %s", r.body)
	eb := r.errorBody(t)
	require.Equal(t, api.CodeFailed, eb.Error, "body %s", r.body)
	require.Contains(t, eb.Message, errPoison.Error())
	require.Empty(t, r.header.Get("Location"))
	require.Empty(t, eb.Primary)
}

// startPrimary starts a one-server ZooKeeper and opens m1 (plain
// namespace applier) in room, waiting until it is primary.
func startPrimary(t *testing.T, room string) (ens *zkensemble.Ensemble, m1 *master, dir string) {
	ens = zkensemble.ForTest(t, zkensemble.Options{})
	dir = t.TempDir()
	m1 = openTestMaster(t, ens, room, "m1", dir)
	require.Eventually(t, func() bool { return apiStatus(t, m1.Addr()).Role == api.RolePrimary }, 30*time.Second, 20*time.Millisecond, "m1 primary")
	return ens, m1, dir
}

// TestServeFailedReplicaKeepsServing: a standby whose applier breaks fails
// for real (replica.Status().Err); its serve keeps running and says so on
// /v1/status, the page and /v1/health; mutations and reads get 503 failed
// with the reason (never a 307 to the primary it last knew); the Go client
// and ctl surface the reason; the primary goes on.
func TestServeFailedReplicaKeepsServing(t *testing.T) {
	ens, m1, dir := startPrimary(t, "failed-serve")
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	m2, err := openMaster(ctx, serveConfig{
		Servers: ens.Addrs(), Room: "failed-serve", ID: "m2", Data: filepath.Join(dir, "m2"),
		HTTPAddr: "127.0.0.1:0", SessionTimeout: 2 * time.Second, Logger: testLogger(t),
		Applier: poisonApplier{},
	})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m2.Close()) })
	require.Eventually(t, func() bool {
		s := apiStatus(t, m2.Addr())
		return s.Role == api.RoleStandby && s.PrimaryAddr == m1.Addr()
	}, 30*time.Second, 20*time.Millisecond, "m2 a standby naming m1")
	base2 := "http://" + m2.Addr()
	c1, err := client.New(m1.Addr(), nil)
	require.NoError(t, err)
	c2, err := client.New(m2.Addr(), nil)
	require.NoError(t, err)

	// Healthy first.
	w, err := c1.Mkdir(ctx, "/ok", false)
	require.NoError(t, err)
	_, err = c2.Stat(ctx, "/ok", w.Index)
	require.NoError(t, err)
	hr, err := c2.Health(ctx)
	require.NoError(t, err)
	require.Equal(t, api.HealthResponse{Status: "ok", ID: "m2", Role: api.RoleStandby, AppliedIndex: hr.AppliedIndex}, hr)
	require.GreaterOrEqual(t, hr.AppliedIndex, w.Index)

	// The primary commits the poisoned entry; the standby fails applying it.
	poison, err := c1.Mkdir(ctx, poisonPath, false)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return m2.rep.Status().Err != nil }, 30*time.Second, 20*time.Millisecond, "m2 failed")
	require.ErrorIs(t, m2.rep.Status().Err, errPoison)
	require.Eventually(t, func() bool { return apiStatus(t, m2.Addr()).Role == api.RoleFailed }, 10*time.Second, 20*time.Millisecond, "m2 reports role failed")

	// /v1/status: still 200, with the reason.
	st := apiStatus(t, m2.Addr())
	require.Contains(t, st.Error, errPoison.Error())
	require.Less(t, st.AppliedIndex, poison.Index, "nothing of the poisoned entry was applied")
	r := rawRequest(t, http.MethodGet, base2+"/v1/status", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.body, `"failure":`)
	// The page.
	r = rawRequest(t, http.MethodGet, base2+"/", "")
	require.Equal(t, http.StatusOK, r.status)
	require.Contains(t, r.body, errPoison.Error())
	// Health: 503 with the reason.
	requireFailedReply(t, rawRequest(t, http.MethodGet, base2+"/v1/health", ""))
	// Mutations: 503 failed, not a redirect to m1.
	requireFailedReply(t, rawRequest(t, http.MethodPost, base2+"/v1/mkdir", `{"path":"/after"}`))
	requireFailedReply(t, rawRequest(t, http.MethodPost, base2+"/v1/delete", `{"path":"/ok"}`))
	// Reads: 503 failed (its state is frozen and may be the wrong side).
	requireFailedReply(t, rawRequest(t, http.MethodGet, base2+"/v1/ls?path=/", ""))
	requireFailedReply(t, rawRequest(t, http.MethodGet, base2+"/v1/hash", ""))
	// The checkpoint handler refuses too.
	r = rawRequest(t, http.MethodGet, base2+replica.CheckpointPath("failed-serve")+"manifest", "")
	require.Equal(t, http.StatusServiceUnavailable, r.status, "body %s", r.body)

	// The Go client: a clear error with the reason.
	_, err = c2.Mkdir(ctx, "/after", false)
	require.ErrorIs(t, err, api.ErrFailed)
	require.ErrorContains(t, err, errPoison.Error())
	_, err = c2.Health(ctx)
	require.ErrorIs(t, err, api.ErrFailed)
	// ctl: status shows the reason; health fails with it.
	ctlSt := ctlOK(t, "--addr", m2.Addr(), "status")
	require.Equal(t, "failed", ctlSt["role"])
	require.Contains(t, ctlSt["failure"], errPoison.Error())
	code, stdout, stderr := ctl(t, "--addr", m2.Addr(), "health")
	require.Equal(t, exitError, code)
	require.Empty(t, stdout)
	// (ctl asks every --addr in turn; with one, the error is that
	// master's, its reason included.)
	require.Contains(t, stderr, "dfsmaster-demo ctl health: ")
	require.Contains(t, stderr, "failed: master m2 failed")
	require.Contains(t, stderr, errPoison.Error())
	require.Equal(t, "ok", ctlOK(t, "--addr", m1.Addr(), "health")["status"])

	// The primary goes on.
	_, err = c1.Mkdir(ctx, "/still", false)
	require.NoError(t, err)
}

// TestServeExitOnFailure runs serve's command (flags included) with a
// standby that fails: by default it keeps serving (health 503) until it is
// stopped, then exits 1; with --exit-on-failure it exits 1 by itself.
func TestServeExitOnFailure(t *testing.T) {
	ens, m1, dir := startPrimary(t, "failed-exit")
	c1, err := client.New(m1.Addr(), nil)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	_, err = c1.Mkdir(ctx, "/ok", false)
	require.NoError(t, err)

	// startServe runs serve (as runServe would after parsing args) with the
	// poisoned applier; it returns the serving address and the exit code channel.
	startServe := func(t *testing.T, ctx context.Context, id string, extra ...string) (string, <-chan int, *syncBuffer) {
		var stdout, stderr syncBuffer
		args := append([]string{"--zk", ens.ConnString(), "--room", "failed-exit", "--id", id,
			"--data", filepath.Join(dir, id), "--http", "127.0.0.1:0", "--session-timeout", "2s", "--log-level", "warn"}, extra...)
		opts, code, ok := parseServeFlags(args, &stderr)
		require.True(t, ok, "code %d: %s", code, stderr.String())
		opts.cfg.Applier = poisonApplier{}
		done := make(chan int, 1)
		go func() { done <- serve(ctx, opts, &stdout, &stderr) }()
		var addr string
		require.Eventually(t, func() bool {
			for _, line := range strings.Split(stdout.String(), "\n") {
				if rest, ok := strings.CutPrefix(line, servingPrefix); ok {
					addr, _, _ = strings.Cut(rest, " ")
					return true
				}
			}
			return false
		}, 60*time.Second, 20*time.Millisecond, "serving line")
		require.Eventually(t, func() bool { return apiStatus(t, addr).Role == api.RoleStandby }, 30*time.Second, 20*time.Millisecond, id+" a standby")
		return addr, done, &stderr
	}

	// Default: keeps serving after the failure.
	sctx, scancel := context.WithCancel(ctx)
	defer scancel()
	addr2, done2, stderr2 := startServe(t, sctx, "m2")
	// With --exit-on-failure: exits by itself.
	_, done3, stderr3 := startServe(t, ctx, "m3", "--exit-on-failure")

	_, err = c1.Mkdir(ctx, poisonPath, false)
	require.NoError(t, err)

	select {
	case code := <-done3:
		require.Equal(t, exitError, code, "stderr: %s", stderr3.String())
		require.Contains(t, stderr3.String(), errPoison.Error())
	case <-ctx.Done():
		t.Fatalf("serve --exit-on-failure did not exit after its replica failed; stderr: %s", stderr3.String())
	}

	require.Eventually(t, func() bool { return apiStatus(t, addr2).Role == api.RoleFailed }, 30*time.Second, 20*time.Millisecond, "m2 failed")
	requireFailedReply(t, rawRequest(t, http.MethodGet, "http://"+addr2+"/v1/health", ""))
	select {
	case code := <-done2:
		t.Fatalf("serve exited (%d) after its replica failed, without --exit-on-failure; stderr: %s", code, stderr2.String())
	default:
	}
	require.Contains(t, apiStatus(t, addr2).Error, errPoison.Error())

	scancel() // SIGTERM
	select {
	case code := <-done2:
		require.Equal(t, exitError, code, "a master that failed exits 1 when stopped; stderr: %s", stderr2.String())
	case <-ctx.Done():
		t.Fatal("serve did not stop after its context ended")
	}
}

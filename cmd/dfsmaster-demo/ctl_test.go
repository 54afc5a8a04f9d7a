package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
	"github.com/roomlog/roomlog/store"
)

// testMaster is a minimal api.Master over a real store: as primary it
// applies proposals directly; as standby it names primaryAddr.
type testMaster struct {
	st          *store.Store
	mu          sync.Mutex // serialises Propose; guards primaryAddr, primary
	primary     bool
	primaryAddr string
}

func (m *testMaster) Propose(_ context.Context, entry []byte) (api.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.primary {
		return api.Result{}, &api.NotPrimaryError{PrimaryID: "p", PrimaryAddr: m.primaryAddr}
	}
	idx := m.st.AppliedIndex() + 1
	outs, err := m.st.ApplyOutcomes([]store.Entry{{Index: idx, Epoch: 1, Data: entry}})
	if err != nil {
		return api.Result{}, err
	}
	if outs[0].Conflict {
		return api.Result{}, api.ErrRequestConflict
	}
	return api.Result{Index: outs[0].Index, Response: outs[0].Response, Duplicate: outs[0].Duplicate}, nil
}

// ProposeRequest deduplicates through the store's request table, like the
// replica: the table first (any role), then a request envelope.
func (m *testMaster) ProposeRequest(ctx context.Context, id store.RequestID, entry []byte) (api.Result, error) {
	if rec, found, err := m.st.LookupRequest(id); err != nil {
		return api.Result{}, err
	} else if found {
		if rec.PayloadHash != store.PayloadHash(entry) {
			return api.Result{}, api.ErrRequestConflict
		}
		return api.Result{Index: rec.Index, Response: rec.Response, Duplicate: true}, nil
	}
	data, err := store.EncodeRequest(store.Request{ID: id, Stamp: time.Now().UnixMilli(), TTL: time.Minute, Window: 1 << 10}, entry)
	if err != nil {
		return api.Result{}, err
	}
	return m.Propose(ctx, data)
}

// WaitApplied: nothing replicates into a testMaster, so an index it has not
// applied never comes; wait for the context.
func (m *testMaster) WaitApplied(ctx context.Context, index uint64) error {
	if m.st.AppliedIndex() >= index {
		return nil
	}
	<-ctx.Done()
	return ctx.Err()
}

func (m *testMaster) Store() store.Reader { return m.st }

func (m *testMaster) Status() api.Status {
	m.mu.Lock()
	defer m.mu.Unlock()
	role := api.RoleStandby
	if m.primary {
		role = api.RolePrimary
	}
	return api.Status{ID: "m", Room: "ctl", Role: role, AppliedIndex: m.st.AppliedIndex(), PrimaryAddr: m.primaryAddr, Connected: true}
}

func startMaster(t *testing.T, primary bool, primaryAddr string) (*testMaster, string) {
	t.Helper()
	st, err := store.Open(t.TempDir(), &store.Options{Applier: namespace.Applier{}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	m := &testMaster{st: st, primary: primary, primaryAddr: primaryAddr}
	s, err := api.New(api.Config{Master: m})
	require.NoError(t, err)
	srv := httptest.NewServer(s)
	t.Cleanup(srv.Close)
	return m, strings.TrimPrefix(srv.URL, "http://")
}

// ctl runs "dfsmaster-demo ctl args..." and returns exit code, stdout, stderr.
func ctl(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	code := run(context.Background(), append([]string{"ctl"}, args...), &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

// ctlOK runs ctl, requires success and decodes the printed JSON.
func ctlOK(t *testing.T, args ...string) map[string]any {
	t.Helper()
	code, stdout, stderr := ctl(t, args...)
	require.Equal(t, exitOK, code, "stderr: %s", stderr)
	require.Empty(t, stderr)
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(stdout))
	dec.UseNumber()
	require.NoError(t, dec.Decode(&m), stdout)
	return m
}

func TestCtlCommands(t *testing.T) {
	_, addr := startMaster(t, true, "")
	a := []string{"--addr", addr}
	at := func(args ...string) []string { return append(append([]string(nil), a...), args...) }

	require.Equal(t, map[string]any{"index": json.Number("1")}, ctlOK(t, at("mkdir", "-p", "/a/b")...))
	require.Equal(t, json.Number("2"), ctlOK(t, at("create", "-r", "2", "/a/f")...)["index"])
	require.Equal(t, map[string]any{"index": json.Number("3"), "block_id": json.Number("1")}, ctlOK(t, at("addblock", "/a/f", "1024")...))
	require.Equal(t, json.Number("4"), ctlOK(t, at("create", "/a/g")...)["index"])

	stat := ctlOK(t, at("stat", "/a/f")...)
	require.Equal(t, "file", stat["type"])
	require.Equal(t, json.Number("2"), stat["replication"])
	require.Equal(t, json.Number("1024"), stat["size"])
	require.Equal(t, json.Number("3"), ctlOK(t, at("stat", "/a/g")...)["replication"])

	ls := ctlOK(t, at("ls", "--min-index", "4", "/a")...)
	require.Equal(t, json.Number("4"), ls["index"])
	require.Len(t, ls["entries"], 3)

	require.Equal(t, json.Number("5"), ctlOK(t, at("rename", "/a", "/z")...)["index"])
	require.Equal(t, json.Number("6"), ctlOK(t, at("delete", "/z/g")...)["index"])
	require.Equal(t, json.Number("7"), ctlOK(t, at("delete", "-r", "/z")...)["index"])
	require.Equal(t, []any{}, ctlOK(t, at("ls", "/")...)["entries"])

	st := ctlOK(t, at("status")...)
	require.Equal(t, "primary", st["role"])
	require.Equal(t, json.Number("7"), st["applied_index"])
	h := ctlOK(t, at("hash", "--min-index", "7")...)
	require.Equal(t, json.Number("7"), h["applied_index"])
	require.Len(t, h["hash"], 64)

	// The address can come from the environment, and be a URL.
	t.Setenv("DFSMASTER_ADDR", "http://"+addr+"/")
	require.Equal(t, "primary", ctlOK(t, "status")["role"])
}

func TestCtlFailures(t *testing.T) {
	_, addr := startMaster(t, true, "")
	ctlOK(t, "--addr", addr, "mkdir", "/d")
	ctlOK(t, "--addr", addr, "create", "/d/f")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"mkdir", "/d"}, "already_exists"},
		{[]string{"stat", "/nope"}, "not_found"},
		{[]string{"delete", "/d"}, "not_empty"},
		{[]string{"addblock", "/d", "1"}, "is_a_directory"},
		{[]string{"ls", "/d/f/x"}, "not_a_directory"},
		{[]string{"mkdir", "d"}, "invalid_path"},
		{[]string{"addblock", "/d/f", "-5"}, "bad_request"},
		{[]string{"create", "-r", "1000", "/d/g"}, "bad_request"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, stdout, stderr := ctl(t, append([]string{"--addr", addr}, tc.args...)...)
			require.Equal(t, exitError, code)
			require.Empty(t, stdout)
			require.Contains(t, stderr, tc.want)
			require.Contains(t, stderr, "dfsmaster-demo ctl "+tc.args[0]+": ")
		})
	}

	// Nothing listening.
	code, _, stderr := ctl(t, "--addr", "127.0.0.1:1", "status")
	require.Equal(t, exitError, code)
	require.Contains(t, stderr, "connection refused")

	// A min_index the master never reaches: the server's 504 after its ReadWait
	// would take 5s; the client's own timeout ends it first.
	code, _, stderr = ctl(t, "--addr", addr, "--timeout", "200ms", "hash", "--min-index", "1000")
	require.Equal(t, exitError, code)
	require.Contains(t, stderr, "deadline exceeded")
}

func TestCtlUsage(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"frobnicate"},
		{"mkdir"},
		{"mkdir", "/a", "/b"},
		{"mkdir", "-x", "/a"},
		{"rename", "/a"},
		{"addblock", "/f", "big"},
		{"status", "extra"},
		{"ls", "--min-index", "-1", "/"},
		{"--timeout", "0s", "status"},
		{"--addr", "ftp://x", "status"},
		{"--bogus"},
	} {
		code, stdout, stderr := ctl(t, args...)
		require.Equal(t, exitUsage, code, "%q", args)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "usage: dfsmaster-demo ctl", "%q", args)
	}
	code, stdout, _ := ctl(t, "-h")
	require.Equal(t, exitOK, code)
	require.Contains(t, stdout, "mkdir [-p] PATH")

	var stdout2, stderr bytes.Buffer
	require.Equal(t, exitUsage, run(context.Background(), nil, &stdout2, &stderr))
	require.Contains(t, stderr.String(), "ctl")
	stderr.Reset()
	require.Equal(t, exitUsage, run(context.Background(), []string{"nope"}, &stdout2, &stderr))
	require.Contains(t, stderr.String(), `unknown command "nope"`)
}

// TestCtlFollowsRedirect: a mutation sent to a standby is redirected (307)
// and re-sent, body included, to the primary.
func TestCtlFollowsRedirect(t *testing.T) {
	primary, paddr := startMaster(t, true, "")
	_, saddr := startMaster(t, false, paddr)
	require.Equal(t, json.Number("1"), ctlOK(t, "--addr", saddr, "mkdir", "-p", "/via/standby")["index"])
	r := ctlOK(t, "--addr", saddr, "create", "-r", "2", "/via/standby/f")
	require.Equal(t, json.Number("2"), r["index"])
	require.Equal(t, uint64(2), primary.st.AppliedIndex())
	require.Equal(t, json.Number("2"), ctlOK(t, "--addr", paddr, "stat", "/via/standby/f")["replication"])

	// With no primary known, the standby answers 503 no_primary (once
	// --wait-primary is over).
	_, lone := startMaster(t, false, "")
	code, _, stderr := ctl(t, "--addr", lone, "--wait-primary", "200ms", "mkdir", "/x")
	require.Equal(t, exitError, code)
	require.Contains(t, stderr, "no_primary")
}

// TestCtlIdempotencyKey: --idempotency-key makes a re-run of a mutation
// safe: the second run prints the original's answer (marked replayed) and
// applies nothing; a malformed key or a key on a read is a usage error.
func TestCtlIdempotencyKey(t *testing.T) {
	m, addr := startMaster(t, true, "")
	ctlOK(t, "--addr", addr, "create", "/f")
	first := ctlOK(t, "--addr", addr, "--idempotency-key", "ctl-1", "addblock", "/f", "10")
	require.Equal(t, map[string]any{"index": json.Number("2"), "block_id": json.Number("1")}, first)
	again := ctlOK(t, "--addr", addr, "--idempotency-key", "ctl-1", "addblock", "/f", "10")
	require.Equal(t, map[string]any{"index": json.Number("2"), "block_id": json.Number("1"), "replayed": true}, again)
	require.Equal(t, uint64(2), m.st.AppliedIndex())
	require.Len(t, ctlOK(t, "--addr", addr, "stat", "/f")["block_list"], 1)

	// The same key for another command: refused, nothing applied.
	code, _, stderr := ctl(t, "--addr", addr, "--idempotency-key", "ctl-1", "addblock", "/f", "11")
	require.Equal(t, exitError, code)
	require.Contains(t, stderr, api.CodeIdempotencyKeyReused)
	require.Equal(t, uint64(2), m.st.AppliedIndex())

	// Without the flag, every run is a new request.
	ctlOK(t, "--addr", addr, "addblock", "/f", "10")
	ctlOK(t, "--addr", addr, "addblock", "/f", "10")
	require.Len(t, ctlOK(t, "--addr", addr, "stat", "/f")["block_list"], 3)

	for _, args := range [][]string{
		{"--idempotency-key", "", "mkdir", "/x"},
		{"--idempotency-key", strings.Repeat("k", 256), "mkdir", "/x"},
		{"--idempotency-key", "k", "ls", "/"},
	} {
		code, stdout, stderr := ctl(t, append([]string{"--addr", addr}, args...)...)
		require.Equal(t, exitUsage, code, "%q", args)
		require.Empty(t, stdout)
		require.Contains(t, stderr, "idempotency-key", "%q", args)
	}
}

// TestCtlUnknownOutcome: when ctl gives up with the outcome unknown, it
// says so and prints the key to re-run the command with.
func TestCtlUnknownOutcome(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		keys = append(keys, r.Header.Get(api.IdempotencyKeyHeader))
		mu.Unlock()
		w.WriteHeader(http.StatusGatewayTimeout)
		w.Write([]byte(`{"error":"timeout","message":"slow (test)"}`))
	}))
	defer srv.Close()
	code, stdout, stderr := ctl(t, "--addr", srv.URL, "--timeout", "1s", "mkdir", "/x")
	require.Equal(t, exitError, code)
	require.Empty(t, stdout)
	mu.Lock()
	defer mu.Unlock()
	require.Greater(t, len(keys), 1, "retried")
	for _, k := range keys {
		require.Equal(t, keys[0], k)
	}
	require.Contains(t, stderr, "may or may not have been applied")
	require.Contains(t, stderr, "--idempotency-key "+keys[0])
}

// TestCtlDeadFirstAddr: with a dead master listed first, every command
// reaches the live ones: a mutation through the standby's redirect or on
// the primary, status and health; the key is the same on every master.
func TestCtlDeadFirstAddr(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadAddr := strings.TrimPrefix(dead.URL, "http://")
	dead.Close()
	primary, paddr := startMaster(t, true, "")
	_, saddr := startMaster(t, false, paddr)
	_, lone := startMaster(t, false, "") // no primary known: 503 no_primary

	for _, addrs := range []string{deadAddr + "," + paddr, deadAddr + "," + lone + "," + saddr} {
		before := primary.st.AppliedIndex()
		r := ctlOK(t, "--addr", addrs, "mkdir", "-p", "/dead/first")
		require.Equal(t, json.Number(strconv.FormatUint(before+1, 10)), r["index"], addrs)
		require.Equal(t, before+1, primary.st.AppliedIndex())
		require.NotEmpty(t, ctlOK(t, "--addr", addrs, "status")["role"], addrs)
		ctlOK(t, "--addr", addrs, "health")
	}
	again := ctlOK(t, "--addr", deadAddr+","+paddr, "--idempotency-key", "dead-1", "create", "/dead/f")
	replayed := ctlOK(t, "--addr", deadAddr+","+saddr, "--idempotency-key", "dead-1", "create", "/dead/f")
	require.Equal(t, true, replayed["replayed"])
	require.Equal(t, again["index"], replayed["index"])

	// Every master dead or without a primary: the mutation fails, naming
	// each, once --wait-primary is over.
	start := time.Now()
	code, _, stderr := ctl(t, "--addr", deadAddr+","+lone, "--wait-primary", "600ms", "mkdir", "/x")
	require.Equal(t, exitError, code)
	require.Contains(t, stderr, deadAddr)
	require.Contains(t, stderr, "no_primary")
	require.Contains(t, stderr, "no master took it within")
	require.GreaterOrEqual(t, time.Since(start), 500*time.Millisecond)
	require.Less(t, time.Since(start), 5*time.Second, "bounded by --wait-primary")
}

// TestCtlWaitsForNewPrimary: right after the primary was killed, its
// standby still redirects to it (until its session expires) and no
// master takes a mutation; ctl sends it again, with its one key, until
// the standby has taken over — within --wait-primary — and it is applied
// once. It says what it waits for once that passes 2 s.
func TestCtlWaitsForNewPrimary(t *testing.T) {
	dead := httptest.NewServer(http.NotFoundHandler())
	deadAddr := strings.TrimPrefix(dead.URL, "http://")
	dead.Close() // the killed primary
	standby, saddr := startMaster(t, false, deadAddr)
	go func() {
		time.Sleep(800 * time.Millisecond) // the standby takes over
		standby.mu.Lock()
		standby.primary, standby.primaryAddr = true, ""
		standby.mu.Unlock()
	}()
	start := time.Now()
	r := ctlOK(t, "--addr", deadAddr+","+saddr, "mkdir", "/afterkill")
	require.GreaterOrEqual(t, time.Since(start), 700*time.Millisecond, "it waited for the takeover")
	require.Equal(t, json.Number("1"), r["index"])
	require.Equal(t, uint64(1), standby.st.AppliedIndex(), "applied once")

	// A takeover slower than 2 s is waited for out loud.
	standby2, saddr2 := startMaster(t, false, deadAddr)
	go func() {
		time.Sleep(3200 * time.Millisecond)
		standby2.mu.Lock()
		standby2.primary, standby2.primaryAddr = true, ""
		standby2.mu.Unlock()
	}()
	code, stdout, stderr := ctl(t, "--addr", saddr2, "create", "/f")
	require.Equal(t, exitOK, code, stderr)
	require.Contains(t, stdout, `"index": 1`)
	require.Regexp(t, `dfsmaster-demo ctl create: waiting [23]s \(--wait-primary 20s\) for a master to take it: .*`+deadAddr, stderr)

	// With --wait-primary 0 it is tried once, as before.
	_, saddr3 := startMaster(t, false, deadAddr)
	code, _, stderr = ctl(t, "--addr", saddr3, "--wait-primary", "0", "mkdir", "/x")
	require.Equal(t, exitError, code)
	require.NotContains(t, stderr, "waiting")
}

package main

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
	"github.com/roomlog/roomlog/store"
)

// wfault is what faultyMaster does with one mutation.
type wfault int

const (
	wPass       wfault = iota
	wDropAfter         // apply it, then close the connection without an answer
	wNoPrimary         // 503 no_primary, nothing applied
	wTimeoutPre        // 504 timeout, nothing applied
)

// faultyMaster is a testMaster behind the real API, with faults injected
// into the mutations (POSTs) in the order queued; reads pass.
type faultyMaster struct {
	m    *testMaster
	addr string

	mu     sync.Mutex // guards faults, keys
	faults []wfault
	keys   []string // Idempotency-Key of every mutation request
}

func startFaultyMaster(t *testing.T) *faultyMaster {
	t.Helper()
	st, err := store.Open(t.TempDir(), &store.Options{Applier: namespace.Applier{}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Close()) })
	fm := &faultyMaster{m: &testMaster{st: st, primary: true}}
	h, err := api.New(api.Config{Master: fm.m})
	require.NoError(t, err)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			h.ServeHTTP(w, r)
			return
		}
		fm.mu.Lock()
		f := wPass
		if len(fm.faults) > 0 {
			f, fm.faults = fm.faults[0], fm.faults[1:]
		}
		fm.keys = append(fm.keys, r.Header.Get(api.IdempotencyKeyHeader))
		fm.mu.Unlock()
		switch f {
		case wDropAfter:
			h.ServeHTTP(httptest.NewRecorder(), r) // applied; the answer goes nowhere
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
		case wNoPrimary:
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":"no_primary","message":"election (test)"}`))
		case wTimeoutPre:
			w.WriteHeader(http.StatusGatewayTimeout)
			w.Write([]byte(`{"error":"timeout","message":"slow (test)"}`))
		default:
			h.ServeHTTP(w, r)
		}
	}))
	t.Cleanup(srv.Close)
	fm.addr = strings.TrimPrefix(srv.URL, "http://")
	return fm
}

func (fm *faultyMaster) queue(fs ...wfault) {
	fm.mu.Lock()
	defer fm.mu.Unlock()
	fm.faults = append(fm.faults, fs...)
}

func (fm *faultyMaster) sentKeys() []string {
	fm.mu.Lock()
	defer fm.mu.Unlock()
	return append([]string(nil), fm.keys...)
}

// TestWriterRetriesUnknownOutcome: an operation whose answer is lost after
// it was applied is re-sent with the same Idempotency-Key (first by the
// client on the same master, then by the writer once the client gave up)
// and acknowledged with the original's answer: applied once, the model
// right, the ledger counting it as resolved by retry and replayed, nothing
// left unknown.
func TestWriterRetriesUnknownOutcome(t *testing.T) {
	fm := startFaultyMaster(t)
	eps := newEndpoints()
	defer eps.close()
	eps.set([]string{fm.addr}, fm.addr)
	led := newLedger()
	w := newWriter(1, eps, led, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := w.sync(ctx)
	require.NoError(t, err)
	w.dirs = []*dirState{{path: w.root, op: 0}}
	require.NoError(t, w.create(ctx))
	require.Len(t, w.files, 1)
	f := w.files[0]
	applied := fm.m.st.AppliedIndex()

	// addblock: applied, answer lost; the client's retry meets an election
	// (it gives up: outcome unknown); the writer re-sends with the same key.
	// (On a fresh connection: on a reused one net/http itself may re-send a
	// request with an Idempotency-Key whose connection closed unanswered.)
	eps.hc.CloseIdleConnections()
	fm.queue(wDropAfter, wNoPrimary)
	require.NoError(t, w.addBlock(ctx))
	op := w.ops[len(w.ops)-1]
	require.Equal(t, opAddBlock, op.kind)
	require.True(t, op.acked)
	require.True(t, op.unknown, "an attempt's outcome was unknown")
	require.True(t, op.replayed, "the retry was answered from the request table")
	require.Equal(t, 3, op.attempts, "two by the client, one more by the writer")
	require.Equal(t, applied+1, fm.m.st.AppliedIndex(), "applied once")
	require.Equal(t, applied+1, op.index)
	keys := fm.sentKeys()
	last3 := keys[len(keys)-3:]
	require.Equal(t, []string{op.key, op.key, op.key}, last3)
	require.Len(t, f.blocks, 1)
	require.Equal(t, op.blockID, f.blocks[0].id)
	c, err := client.New(fm.addr, nil)
	require.NoError(t, err)
	st, err := c.Stat(ctx, f.path, 0)
	require.NoError(t, err)
	require.Len(t, st.BlockList, 1)

	// 504 before anything was applied: the retry applies it (not a replay).
	fm.queue(wTimeoutPre)
	require.NoError(t, w.mkdir(ctx))
	op = w.ops[len(w.ops)-1]
	require.True(t, op.acked)
	require.True(t, op.unknown)
	require.False(t, op.replayed)
	require.Equal(t, applied+2, fm.m.st.AppliedIndex())

	require.Equal(t, int64(0), led.unknown.Load())
	require.Equal(t, int64(2), led.resolved.Load())
	require.Equal(t, int64(1), led.replayed.Load())
	require.Equal(t, int64(len(w.ops)), led.acked.Load())

	// Every operation had its own key.
	seen := map[string]bool{}
	for _, o := range w.ops {
		require.False(t, seen[o.key])
		seen[o.key] = true
	}
}

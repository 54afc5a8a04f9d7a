package client_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
)

// TestPoolReadsMoveOn: a read the pool sends to a master that cannot serve
// it (cut off, failed, unreachable) goes on to the next master at once; an
// answer that is the reader's own business (404) comes back as it is; when
// no master can serve, the error names each.
func TestPoolReadsMoveOn(t *testing.T) {
	answer := func(status int, code string, hits *atomic.Int32) *httptest.Server {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			w.Header().Set("Content-Type", "application/json")
			if status == http.StatusOK {
				_ = json.NewEncoder(w).Encode(api.LsResponse{Index: 7, Entries: []namespace.Entry{{Name: "f"}}})
				return
			}
			if status == http.StatusServiceUnavailable {
				w.Header().Set("Retry-After", "1")
			}
			w.WriteHeader(status)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: code, Message: code + " here"})
		}))
		t.Cleanup(srv.Close)
		return srv
	}
	var cutHits, failedHits, okHits, missingHits atomic.Int32
	cut := answer(http.StatusServiceUnavailable, api.CodeDisconnected, &cutHits)
	failed := answer(http.StatusServiceUnavailable, api.CodeFailed, &failedHits)
	good := answer(http.StatusOK, "", &okHits)
	missing := answer(http.StatusNotFound, "not_found", &missingHits)
	dead := httptest.NewServer(http.NotFoundHandler())
	dead.Close() // connection refused

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	p, err := client.NewPool([]string{cut.URL, dead.URL, failed.URL, good.URL}, nil)
	require.NoError(t, err)
	for i := 0; i < 8; i++ { // every starting point
		res, err := p.Ls(ctx, "/", 3)
		require.NoError(t, err)
		require.Equal(t, uint64(7), res.Index)
	}
	require.Equal(t, int32(8), okHits.Load())
	require.Positive(t, cutHits.Load())
	require.Positive(t, failedHits.Load())

	// A 404 is an answer, not a reason to ask another master.
	p, err = client.NewPool([]string{missing.URL, good.URL}, nil)
	require.NoError(t, err)
	seen404 := false
	for i := 0; i < 4; i++ {
		_, err := p.Ls(ctx, "/nope", 0)
		if err != nil {
			require.ErrorIs(t, err, namespace.ErrNotFound)
			seen404 = true
		}
	}
	require.True(t, seen404)

	// Nobody can serve: the error names every master.
	p, err = client.NewPool([]string{cut.URL, failed.URL}, nil)
	require.NoError(t, err)
	_, err = p.Ls(ctx, "/", 3)
	require.Error(t, err)
	require.Contains(t, err.Error(), cut.URL)
	require.Contains(t, err.Error(), failed.URL)
	require.Contains(t, err.Error(), "disconnected")

	_, err = client.NewPool(nil, nil)
	require.Error(t, err)
}

// TestPoolSilentMaster: a master that holds a read with min_index (cut off
// by a silent partition it has not noticed yet) keeps the reader for at
// most WaitAttempt; the next master answers. Without min_index nothing is
// cut short.
func TestPoolSilentMaster(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	var silentHits atomic.Int32
	silent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		silentHits.Add(1)
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	defer silent.Close()
	var okHits atomic.Int32
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		okHits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(api.LsResponse{Index: 5})
	}))
	defer good.Close()

	p, err := client.NewPool([]string{silent.URL, good.URL}, nil)
	require.NoError(t, err)
	p.WaitAttempt = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for i := 0; i < 4; i++ {
		start := time.Now()
		res, err := p.Ls(ctx, "/", 5)
		require.NoError(t, err)
		require.Equal(t, uint64(5), res.Index)
		require.Less(t, time.Since(start), 5*time.Second, "held by the silent master")
	}
	require.Positive(t, silentHits.Load(), "the silent master was tried")

	// Only silent masters: the read ends after MaxWait, naming what happened.
	before := silentHits.Load()
	p, err = client.NewPool([]string{silent.URL}, nil)
	require.NoError(t, err)
	p.WaitAttempt, p.MaxWait = 100*time.Millisecond, 500*time.Millisecond
	start := time.Now()
	_, err = p.Ls(context.Background(), "/", 5) // no deadline of the caller's: MaxWait bounds it
	require.Less(t, time.Since(start), 10*time.Second, "bounded by MaxWait")
	require.Error(t, err)
	require.Contains(t, err.Error(), silent.URL)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.GreaterOrEqual(t, silentHits.Load()-before, int32(2), "tried again in a later round")
}

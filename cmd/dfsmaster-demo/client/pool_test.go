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

package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
)

// TestCtlReadsMoveOn: with several --addr masters, a read that the first
// cannot serve (cut off from ZooKeeper) is answered by the next.
func TestCtlReadsMoveOn(t *testing.T) {
	cut := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Retry-After", "1")
		w.WriteHeader(http.StatusServiceUnavailable)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.CodeDisconnected, Message: "cut off"})
	}))
	defer cut.Close()
	good := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(api.LsResponse{Index: 9, Entries: []namespace.Entry{{Name: "f"}}})
	}))
	defer good.Close()
	for i := 0; i < 3; i++ { // whichever master the pool starts with
		code, out, errOut := ctl(t, "--addr", cut.URL+","+good.URL, "ls", "--min-index", "9", "/")
		require.Equal(t, exitOK, code, "stderr %s", errOut)
		require.True(t, strings.Contains(out, `"index": 9`), out)
	}
	// Only the cut-off master: the reason is reported.
	code, _, errOut := ctl(t, "--addr", cut.URL, "ls", "/")
	require.Equal(t, exitError, code)
	require.Contains(t, errOut, "disconnected")
}

package client_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
)

func TestNew(t *testing.T) {
	for addr, base := range map[string]string{
		"127.0.0.1:8080":         "http://127.0.0.1:8080",
		"http://127.0.0.1:8080/": "http://127.0.0.1:8080",
		"https://master:443":     "https://master:443",
	} {
		c, err := client.New(addr, nil)
		require.NoError(t, err, addr)
		require.Equal(t, base, c.Base())
	}
	for _, addr := range []string{"", "ftp://x:1", "http://", "http://h:1/prefix", "http://[::1"} {
		_, err := client.New(addr, nil)
		require.Error(t, err, addr)
	}
}

func TestErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/stat":
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"error":"not_found","message":"stat /x: no such file or directory"}`))
		case "/v1/mkdir":
			w.WriteHeader(http.StatusConflict)
			w.Write([]byte(`{"error":"already_exists","message":"mkdir /x: already exists","index":7}`))
		case "/v1/health", "/v1/create":
			w.WriteHeader(http.StatusServiceUnavailable)
			w.Write([]byte(`{"error":"failed","message":"master m2 failed: replica: diverged at index 9"}`))
		case "/v1/status":
			w.Write([]byte(`{"id":"m2","role":"failed","failure":"replica: diverged at index 9"}`))
		case "/v1/hash":
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte("<html>proxy error</html>"))
		default:
			w.Write([]byte(`{"index":`)) // truncated JSON
		}
	}))
	defer srv.Close()
	c, err := client.New(srv.URL, nil)
	require.NoError(t, err)
	ctx := context.Background()

	_, err = c.Stat(ctx, "/x", 0)
	require.ErrorIs(t, err, namespace.ErrNotFound)
	var e *client.Error
	require.True(t, errors.As(err, &e))
	require.Equal(t, client.Error{Status: 404, Code: "not_found", Message: "stat /x: no such file or directory"}, *e)

	_, err = c.Mkdir(ctx, "/x", false)
	require.ErrorIs(t, err, namespace.ErrAlreadyExists)
	require.True(t, errors.As(err, &e))
	require.Equal(t, uint64(7), e.Index)

	_, err = c.Hash(ctx, 0)
	require.True(t, errors.As(err, &e))
	require.Equal(t, "http_502", e.Code)
	require.Contains(t, e.Message, "proxy error")
	require.NotErrorIs(t, err, namespace.ErrBadRequest)

	// A failed master: a clear error carrying the reason, errors.Is api.ErrFailed.
	_, err = c.Health(ctx)
	require.ErrorIs(t, err, api.ErrFailed)
	require.EqualError(t, err, "failed: master m2 failed: replica: diverged at index 9 (HTTP 503)")
	_, err = c.Create(ctx, "/x", 0)
	require.ErrorIs(t, err, api.ErrFailed)
	require.NotErrorIs(t, err, namespace.ErrBadRequest)
	st, err := c.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, "replica: diverged at index 9", st.Error)
	require.NotErrorIs(t, e, api.ErrFailed) // the 502 above

	_, err = c.Delete(ctx, "/x", false)
	require.ErrorContains(t, err, "decode response")
}

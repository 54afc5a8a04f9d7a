package checkpoint

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRequireBearer: without the token, or with another, nothing of the
// checkpoint is served (401 with a challenge) and Fetch says
// ErrUnauthorized; with it, the checkpoint arrives.
func TestRequireBearer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s := newStore(t, 200, 100)
	root := t.TempDir()
	info, err := Create(ctx, s, root, Origin{Room: "r", RoomCzxid: 7})
	require.NoError(t, err)
	srv := httptest.NewServer(RequireBearer("s3cret token", Handler(root)))
	defer srv.Close()

	for _, auth := range []string{"", "Bearer", "Bearer ", "Bearer s3cret", "bearer s3cret token", "Basic czNjcmV0IHRva2Vu", "Bearer s3cret tokenX"} {
		for _, path := range []string{"/", "/manifest"} {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+path, nil)
			require.NoError(t, err)
			if auth != "" {
				req.Header.Set("Authorization", auth)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "auth %q path %s", auth, path)
			require.Contains(t, resp.Header.Get("WWW-Authenticate"), "Bearer")
			require.NotContains(t, string(body), info.Manifest.Checksum, "something of the checkpoint was served")
			require.Empty(t, resp.Header.Get(HeaderIndex))
		}
	}

	_, err = Fetch(ctx, srv.URL, filepath.Join(t.TempDir(), "none"), FetchOptions{})
	require.ErrorIs(t, err, ErrUnauthorized)
	_, err = FetchManifest(ctx, srv.URL, FetchOptions{BearerToken: "wrong"})
	require.ErrorIs(t, err, ErrUnauthorized)

	m, err := FetchManifest(ctx, srv.URL, FetchOptions{BearerToken: "s3cret token"})
	require.NoError(t, err)
	require.Equal(t, info.Manifest.Checksum, m.Checksum)
	got, err := Fetch(ctx, srv.URL, filepath.Join(t.TempDir(), "ok"), FetchOptions{BearerToken: "s3cret token"})
	require.NoError(t, err)
	require.Equal(t, info.Manifest.Checksum, got.Manifest.Checksum)

	require.Panics(t, func() { RequireBearer("", Handler(root)) })
}

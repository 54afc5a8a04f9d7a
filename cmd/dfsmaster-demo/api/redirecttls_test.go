package api_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
)

// TestStandbyOverTLSRedirectsToHTTPS: a standby that serves its API over
// TLS never points a client at plain http://: a scheme-less primary
// address gets https://, and an http:// one is upgraded to https:// (the
// client's TLS handshake then fails against a plain server; nothing is
// sent in clear). Before the fix the Location was http://host:port.
func TestStandbyOverTLSRedirectsToHTTPS(t *testing.T) {
	standby := newFakeMaster(t, "m2", api.RoleStandby)
	s, err := api.New(api.Config{Master: standby})
	require.NoError(t, err)
	srv := httptest.NewTLSServer(s)
	t.Cleanup(srv.Close)
	c := srv.Client()
	c.CheckRedirect = noRedirect.CheckRedirect
	saddr := strings.TrimPrefix(srv.URL, "https://")
	for addr, want := range map[string]string{
		"10.0.0.1:8443":          "https://10.0.0.1:8443/v1/mkdir",
		"http://10.0.0.1:8443":   "https://10.0.0.1:8443/v1/mkdir",
		"HTTP://10.0.0.1:8443/":  "https://10.0.0.1:8443/v1/mkdir",
		"https://10.0.0.1:8443/": "https://10.0.0.1:8443/v1/mkdir",
	} {
		standby.set(func(f *fakeMaster) { f.status.Addr, f.status.PrimaryID, f.status.PrimaryAddr = saddr, "m1", addr })
		r := do(t, c, http.MethodPost, srv.URL+"/v1/mkdir", `{"path":"/x"}`)
		require.Equal(t, http.StatusTemporaryRedirect, r.status, "body %s", r.raw)
		require.Equal(t, want, r.header.Get("Location"), "primary %s", addr)
	}
}

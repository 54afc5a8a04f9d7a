package client_test

import (
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/tlsfiles"
)

// TestHTTPSRefusesPlainRedirect: a master served with TLS that redirects
// to a plain http:// address (a misconfigured or forged primary address)
// gets no request in clear: the HTTPS client refuses the redirect by
// name, and its transport refuses to dial http:// at all.
func TestHTTPSRefusesPlainRedirect(t *testing.T) {
	dir := t.TempDir()
	ca, err := testpki.NewCA("ca")
	require.NoError(t, err)
	sf, err := ca.Issue(dir+"/s", "s", testpki.Options{})
	require.NoError(t, err)
	cf, err := ca.Issue(dir+"/c", "c", testpki.Options{})
	require.NoError(t, err)
	srv, err := tlsfiles.Load(sf)
	require.NoError(t, err)
	cli, err := tlsfiles.Load(cf)
	require.NoError(t, err)

	got := make(chan string, 4)
	plain := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r.Method + " " + r.URL.Path + " body=" + string(b)
	}), ReadHeaderTimeout: 5 * time.Second}
	pln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go plain.Serve(pln)
	defer plain.Close()

	tlsSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Location", "http://"+pln.Addr().String()+r.URL.RequestURI())
		w.WriteHeader(http.StatusTemporaryRedirect)
	}), ReadHeaderTimeout: 5 * time.Second}
	tln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go tlsSrv.Serve(tls.NewListener(tln, srv.ServerConfig(tls.RequireAndVerifyClientCert)))
	defer tlsSrv.Close()

	hc := client.HTTPS(cli, 5*time.Second)
	resp, err := hc.Post("https://"+tln.Addr().String()+"/v1/mkdir", "application/json",
		strings.NewReader(`{"path":"/secret/namespace/entry"}`))
	if err == nil {
		resp.Body.Close()
	}
	require.Error(t, err, "a redirect from https to http is refused")
	require.ErrorIs(t, err, client.ErrPlainHTTP)
	require.Contains(t, err.Error(), "http://"+pln.Addr().String())

	// The transport alone (a caller with its own CheckRedirect, or a
	// plain http:// URL) dials nothing in clear either.
	hc2 := &http.Client{Transport: client.HTTPSTransport(cli), Timeout: 5 * time.Second}
	resp, err = hc2.Post("http://"+pln.Addr().String()+"/v1/mkdir", "application/json",
		strings.NewReader(`{"path":"/secret/namespace/entry"}`))
	if err == nil {
		resp.Body.Close()
	}
	require.Error(t, err)
	require.ErrorIs(t, err, client.ErrPlainHTTP)

	select {
	case s := <-got:
		t.Fatalf("the plain server received a request: %s", s)
	case <-time.After(300 * time.Millisecond):
	}
}

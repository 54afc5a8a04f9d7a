package replica

import (
	"crypto/tls"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/tlsfiles"
)

// TestPeerIdentities: with Config.PeerIdentities, the checkpoint endpoint
// serves only peers whose certificate identity is on the list: a
// certificate the CA signed for another role (a chunk server's, a
// client's) is refused with 403, and a member fetching from a server
// whose certificate is not on the list refuses it (ErrPeerTLS-worthy
// handshake failure). Before the fix any certificate of the CA was a
// member.
func TestPeerIdentities(t *testing.T) {
	load := caLoader(t)
	m1, id1 := load("m1")
	m2, id2 := load("m2")
	chunk, _ := load("chunk")
	cfg := Config{PeerTLS: m1, PeerIdentities: []string{id1, id2}}

	ts := httptest.NewUnstartedServer(cfg.requirePeerIdentity(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "checkpoint")
	})))
	ts.TLS = peerServerTLS(m1)
	ts.StartTLS()
	defer ts.Close()
	get := func(src *tlsfiles.Source, tc *tls.Config) (int, error) {
		if tc == nil {
			tc = src.ClientConfig("127.0.0.1")
		}
		hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: tc}}
		defer hc.CloseIdleConnections()
		resp, err := hc.Get(ts.URL)
		if err != nil {
			return 0, err
		}
		resp.Body.Close()
		return resp.StatusCode, nil
	}
	code, err := get(m2, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code, "a member on the list")
	code, err = get(chunk, nil)
	require.NoError(t, err)
	require.Equal(t, http.StatusForbidden, code, "a certificate of the CA that is not a member")

	// The fetching side: m2 fetches from a server it trusts only if its
	// identity is on the list.
	m2cfg := Config{PeerTLS: m2, PeerIdentities: []string{id2}} // m1 not on m2's list
	_, err = get(m2, m2cfg.peerClientTLS("127.0.0.1"))
	require.ErrorContains(t, err, "not in Config.PeerIdentities")
	m2cfg.PeerIdentities = []string{id1, id2}
	code, err = get(m2, m2cfg.peerClientTLS("127.0.0.1"))
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, code)

	// Validate: PeerIdentities needs PeerTLS.
	var bad []string
	Config{PeerIdentities: []string{id1}}.validatePeerTLS(func(field, format string, args ...any) { bad = append(bad, field) })
	require.Contains(t, bad, "PeerIdentities")
}

// TestLivenessChecksPeerIdentities: the liveness stream and probe are
// the input to depositions; with Config.PeerIdentities they must refuse a
// server whose certificate (signed by the CA) is not a member's, as
// checkpoint fetches do. Before, their dialer verified the CA and the host
// only, so a chunk server's certificate answered them.
func TestLivenessChecksPeerIdentities(t *testing.T) {
	load := caLoader(t)
	m1, id1 := load("m1")
	m2, id2 := load("m2")
	chunk, _ := load("chunk")
	serve := func(src *tlsfiles.Source) *httptest.Server {
		ts := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.WriteString(w, "alive")
		}))
		ts.TLS = peerServerTLS(src)
		ts.StartTLS()
		t.Cleanup(ts.Close)
		return ts
	}
	member, stranger := serve(m1), serve(chunk)
	cfg := Config{PeerTLS: m2, PeerIdentities: []string{id1, id2}}
	l := newLiveness()
	l.usePeerTLS(m2, cfg.peerIdentityOK)
	for _, c := range []*http.Client{l.stream, l.probe} {
		resp, err := c.Get(member.URL)
		require.NoError(t, err, "a member's server")
		resp.Body.Close()
		_, err = c.Get(stranger.URL)
		require.ErrorContains(t, err, "not in Config.PeerIdentities", "a CA-signed certificate that is not a member's")
	}
}

// caLoader returns a loader of certificates of one test CA: the source of
// the named member's files and its identity.
func caLoader(t *testing.T) func(name string) (*tlsfiles.Source, string) {
	ca, err := testpki.NewCA("peers")
	require.NoError(t, err)
	dir := t.TempDir()
	return func(name string) (*tlsfiles.Source, string) {
		f, err := ca.Issue(filepath.Join(dir, name), name, testpki.Options{})
		require.NoError(t, err)
		src, err := tlsfiles.Load(f)
		require.NoError(t, err)
		id, err := src.Identity()
		require.NoError(t, err)
		return src, id
	}
}

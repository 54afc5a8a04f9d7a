package replica

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/checkpoint"
	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/tlsfiles"
)

// recordingProxy forwards TCP connections to target and records every
// byte in both directions.
type recordingProxy struct {
	ln     net.Listener
	target atomic.Pointer[string]
	mu     sync.Mutex
	seen   bytes.Buffer
	wg     sync.WaitGroup
}

func newRecordingProxy(t *testing.T) *recordingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &recordingProxy{ln: ln}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			p.wg.Add(1)
			go func() {
				defer p.wg.Done()
				p.forward(c)
			}()
		}
	}()
	t.Cleanup(func() { ln.Close(); p.wg.Wait() })
	return p
}

func (p *recordingProxy) Addr() string { return p.ln.Addr().String() }

func (p *recordingProxy) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.seen.Write(b)
}

func (p *recordingProxy) Bytes() []byte {
	p.mu.Lock()
	defer p.mu.Unlock()
	return bytes.Clone(p.seen.Bytes())
}

func (p *recordingProxy) forward(c net.Conn) {
	defer c.Close()
	target := p.target.Load()
	if target == nil {
		return
	}
	u, err := net.DialTimeout("tcp", *target, 2*time.Second)
	if err != nil {
		return
	}
	defer u.Close()
	done := make(chan struct{}, 2)
	go func() { io.Copy(io.MultiWriter(u, p), c); u.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	go func() { io.Copy(io.MultiWriter(c, p), u); c.(*net.TCPConn).CloseWrite(); done <- struct{}{} }()
	<-done
	<-done
}

// peerPKI is a CA and certificates for members, in a temp dir.
type peerPKI struct {
	t   *testing.T
	ca  *testpki.CA
	dir string
}

func newPeerPKI(t *testing.T, name string) *peerPKI {
	t.Helper()
	ca, err := testpki.NewCA(name)
	require.NoError(t, err)
	return &peerPKI{t: t, ca: ca, dir: filepath.Join(t.TempDir(), name)}
}

// files issues id's certificate (127.0.0.1, client and server).
func (p *peerPKI) files(id string, o testpki.Options) tlsfiles.Files {
	p.t.Helper()
	f, err := p.ca.Issue(p.dir, id, o)
	require.NoError(p.t, err)
	return f
}

// source issues id's certificate and loads it (files checked on every use).
func (p *peerPKI) source(id string, o testpki.Options) *tlsfiles.Source {
	p.t.Helper()
	src, err := tlsfiles.LoadWithOptions(p.files(id, o), tlsfiles.Options{CheckEvery: -1})
	require.NoError(p.t, err)
	return src
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// TestPeerTLSProxySeesNothing: a standby bootstraps from the primary's
// checkpoint through a recording TCP proxy (the primary advertises the
// proxy). Without PeerTLS the proxy sees a known entry's bytes and the
// bearer token (so it can see); with PeerTLS it sees neither, the
// addresses are https, and the liveness stream works over TLS. A member
// without PeerTLS and one of another CA then fail to bootstrap from the
// TLS room by name (ErrPeerTLS), without a stall.
func TestPeerTLSProxySeesNothing(t *testing.T) {
	for _, withTLS := range []bool{false, true} {
		t.Run(map[bool]string{false: "plain", true: "tls"}[withTLS], func(t *testing.T) {
			ens := sharedEnsemble(t)
			pki := newPeerPKI(t, "ca")
			proxy := newRecordingProxy(t)
			token := "tok-" + randomHex(16)
			marker := "MARK" + randomHex(12)
			c := newCluster(t, ens, func(cfg *Config) {
				smallCheckpoints(cfg)
				cfg.CheckpointToken = token
				switch {
				case cfg.ID == "plain":
				case cfg.ID == "foreign":
					cfg.PeerTLS = newPeerPKI(t, "other").source(cfg.ID, testpki.Options{})
				case withTLS:
					cfg.PeerTLS = pki.source(cfg.ID, testpki.Options{})
				}
				if cfg.ID == "p" {
					cfg.AdvertiseAddr = proxy.Addr()
				}
			})
			p := c.open("p")
			proxy.target.Store(ptr(p.ListenAddr()))
			require.Equal(t, p, c.waitPrimary(20*time.Second))
			wantAddr := proxy.Addr()
			if withTLS {
				wantAddr = "https://" + wantAddr
			}
			require.Equal(t, wantAddr, p.cfg.AdvertiseAddr, "the advertised address names its scheme")

			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			for i := 0; i < 1500; i++ {
				_, err := c.proposeRetry(ctx, setOp(fmt.Sprintf("fill%05d", i), fmt.Sprintf("%s-%05d-%s", marker, i, randomHex(400))))
				require.NoError(t, err)
			}
			require.Eventually(t, func() bool {
				chans, err := p.Room().Channels(ctx)
				return err == nil && chans[0].FirstIndex > 1
			}, 30*time.Second, 10*time.Millisecond, "channels deleted (the primary's manifest probe went through the proxy)")

			s := c.open("s")
			idx, err := p.Barrier(ctx)
			require.NoError(t, err)
			require.NoError(t, s.WaitApplied(ctx, idx))
			require.Equal(t, 1, s.Status().Bootstraps)

			seen := proxy.Bytes()
			require.Greater(t, len(seen), 500_000, "the checkpoint went through the proxy")
			t.Logf("the proxy saw %d bytes", len(seen))
			if !withTLS {
				require.True(t, bytes.Contains(seen, []byte(marker)), "the proxy sees an entry in clear")
				require.True(t, bytes.Contains(seen, []byte(token)), "the proxy sees the token in clear")
				return
			}
			require.False(t, bytes.Contains(seen, []byte(marker)), "the proxy sees an entry's bytes")
			require.False(t, bytes.Contains(seen, []byte(token)), "the proxy sees the bearer token")
			require.False(t, bytes.Contains(seen, []byte("GET /")), "the proxy sees a request line")

			// The liveness stream works over HTTPS, with the client the
			// standby uses to follow the primary.
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.AdvertiseAddr+CheckpointPath(c.room)+"liveness", nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+token)
			resp, err := s.live.stream.Do(req)
			require.NoError(t, err)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Equal(t, *p.live.guid.Load(), resp.Header.Get(livenessGUIDHeader))
			b := make([]byte, 1)
			_, err = io.ReadFull(resp.Body, b)
			require.NoError(t, err, "a beat within a second")
			resp.Body.Close()

			// Members that cannot talk TLS with the room fail by name.
			for _, id := range []string{"plain", "foreign"} {
				m := c.open(id)
				require.Eventually(t, func() bool {
					err := m.Status().TailErr
					return err != nil && errors.Is(err, ErrPeerTLS)
				}, 30*time.Second, 10*time.Millisecond, "%s reports ErrPeerTLS", id)
				require.Zero(t, m.Status().Bootstraps)
				t.Logf("%s: %v", id, m.Status().TailErr)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

// tlsServer serves h with the replica's peer server configuration of src.
func tlsServer(t *testing.T, src *tlsfiles.Source, h http.Handler) string {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // refused handshakes are the point
	srv.TLS = peerServerTLS(src)
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestPeerTLSRefusals: every TLS mismatch between a fetching member and a
// checkpoint endpoint is a named error (ErrPeerTLS, with the reason) well
// within the connect timeout: a client without a certificate, with
// another CA's, with an expired one; a server whose certificate expired
// or is another CA's; a plain client to the TLS endpoint; a TLS client to
// a plain one.
func TestPeerTLSRefusals(t *testing.T) {
	pki := newPeerPKI(t, "ca")
	other := newPeerPKI(t, "other")
	ok := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { http.Error(w, "none", http.StatusNotFound) })
	server := tlsServer(t, pki.source("srv", testpki.Options{}), ok)
	shortServer := pki.source("short", testpki.Options{NotAfter: time.Now().Add(2 * time.Second)})
	expiredServer := tlsServer(t, shortServer, ok)
	plain := httptest.NewServer(ok)
	t.Cleanup(plain.Close)
	shortClient := pki.source("shortcli", testpki.Options{NotAfter: time.Now().Add(2 * time.Second)})
	time.Sleep(2100 * time.Millisecond) // the short certificates expire

	good := pki.source("cli", testpki.Options{})
	otherCli := other.source("cli", testpki.Options{})
	// A client trusting our CA but presenting another CA's certificate
	// (tlsfiles refuses to load such a pair, so it is built by hand).
	mixed := good.ClientConfig("127.0.0.1")
	oc, err := tls.LoadX509KeyPair(otherCli.Files().Cert, otherCli.Files().Key)
	require.NoError(t, err)
	mixed.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &oc, nil }
	noCert := good.ClientConfig("127.0.0.1")
	noCert.GetClientCertificate = nil

	for _, tc := range []struct {
		name, url string
		cfg       *tls.Config
		why       string
	}{
		{"no client certificate", server, noCert, "refused our certificate"},
		{"another CA's client certificate", server, mixed, "refused our certificate"},
		{"expired client certificate", server, shortClient.ClientConfig("127.0.0.1"), "refused our certificate"},
		{"server of another CA", server, otherCli.ClientConfig("127.0.0.1"), "certificate is refused"},
		{"expired server certificate", expiredServer, good.ClientConfig("127.0.0.1"), "certificate is refused"},
		{"server certificate for another name", server, good.ClientConfig("127.0.0.2"), "certificate is refused"},
		{"plain client to the TLS endpoint", strings.Replace(server, "https://", "http://", 1), nil, "fetches over plain HTTP"},
		{"TLS client to a plain endpoint", strings.Replace(plain.URL, "http://", "https://", 1), good.ClientConfig("127.0.0.1"), "serves plain HTTP"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			_, err := checkpoint.FetchManifest(context.Background(), tc.url+"/", checkpoint.FetchOptions{TLS: tc.cfg, ConnectTimeout: 3 * time.Second})
			err = peerTLSError(err)
			require.ErrorIs(t, err, ErrPeerTLS)
			require.Contains(t, err.Error(), tc.why)
			require.Less(t, time.Since(start), 2*time.Second, "refused at once, not after a timeout")
			t.Log(err)
		})
	}

	// The good client gets an answer (404: nothing served here).
	_, err = checkpoint.FetchManifest(context.Background(), server+"/", checkpoint.FetchOptions{TLS: good.ClientConfig("127.0.0.1")})
	require.ErrorIs(t, err, checkpoint.ErrNoCheckpoint)
	require.NotErrorIs(t, peerTLSError(err), ErrPeerTLS)
}

// TestPeerTLSRotation: new certificate files on either side are used by
// the next fetch, without a restart: the server presents its new
// certificate, and the client's new certificate is what the server sees.
func TestPeerTLSRotation(t *testing.T) {
	pki := newPeerPKI(t, "ca")
	srvSrc, err := tlsfiles.Load(pki.files("srv", testpki.Options{})) // checked at most every second
	require.NoError(t, err)
	cliSrc := pki.source("cli", testpki.Options{})
	var clientSerial atomic.Pointer[string]
	url := tlsServer(t, srvSrc, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		clientSerial.Store(ptr(r.TLS.PeerCertificates[0].SerialNumber.String()))
		http.Error(w, "none", http.StatusNotFound)
	}))
	fetch := func() (server, client string) {
		t.Helper()
		cfg := cliSrc.ClientConfig("127.0.0.1")
		verify := cfg.VerifyConnection
		cfg.VerifyConnection = func(cs tls.ConnectionState) error {
			server = cs.PeerCertificates[0].SerialNumber.String()
			return verify(cs)
		}
		_, err := checkpoint.FetchManifest(context.Background(), url+"/", checkpoint.FetchOptions{TLS: cfg})
		require.ErrorIs(t, err, checkpoint.ErrNoCheckpoint)
		return server, *clientSerial.Load()
	}
	s1, c1 := fetch()
	require.Equal(t, srvSrc.Certificate().SerialNumber.String(), s1)
	require.Equal(t, cliSrc.Certificate().SerialNumber.String(), c1)

	pki.files("srv", testpki.Options{}) // new files, same paths
	pki.files("cli", testpki.Options{})
	require.Eventually(t, func() bool {
		s2, c2 := fetch()
		return s2 != s1 && c2 != c1
	}, 5*time.Second, 50*time.Millisecond, "the next fetches use the new certificates")
	s2, c2 := fetch()
	require.Equal(t, srvSrc.Certificate().SerialNumber.String(), s2)
	require.Equal(t, cliSrc.Certificate().SerialNumber.String(), c2)
}

// TestPeerTLSConfig: PeerTLS needs a certificate and refuses a plain http
// AdvertiseAddr; a scheme-less address is advertised as https; a member
// with PeerTLS refuses to talk to a peer that advertises plain http
// (ErrPeerTLS), and one without it still reaches host:port over http.
func TestPeerTLSConfig(t *testing.T) {
	pki := newPeerPKI(t, "ca")
	src := pki.source("m", testpki.Options{})
	caOnly, err := tlsfiles.Load(tlsfiles.Files{CA: src.Files().CA})
	require.NoError(t, err)
	base := Config{Servers: []string{"127.0.0.1:2181"}, Room: "r", ID: "m", DataDir: t.TempDir()}

	cfg := base
	cfg.PeerTLS, cfg.AdvertiseAddr = src, "10.0.0.5:8443"
	require.NoError(t, cfg.Validate())
	require.Equal(t, "https://10.0.0.5:8443", cfg.withDefaults().AdvertiseAddr)
	cfg.AdvertiseAddr = "https://h:1"
	require.Equal(t, "https://h:1", cfg.withDefaults().AdvertiseAddr)

	cfg.AdvertiseAddr = "http://10.0.0.5:8080"
	err = cfg.Validate()
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "AdvertiseAddr")
	cfg.PeerTLS, cfg.AdvertiseAddr = caOnly, ""
	require.ErrorContains(t, cfg.Validate(), "PeerTLS")

	plain := base
	plain.AdvertiseAddr = "10.0.0.5:8080"
	require.Equal(t, "10.0.0.5:8080", plain.withDefaults().AdvertiseAddr, "no PeerTLS: unchanged (http)")

	withTLS := &Replica{cfg: Config{PeerTLS: src}}
	_, err = withTLS.peerBaseURL("10.0.0.6:8080")
	require.ErrorIs(t, err, ErrPeerTLS)
	_, err = withTLS.peerBaseURL("http://10.0.0.6:8080")
	require.ErrorIs(t, err, ErrPeerTLS)
	u, err := withTLS.peerBaseURL("https://10.0.0.6:8443")
	require.NoError(t, err)
	require.Equal(t, "https://10.0.0.6:8443", u)
	u, err = (&Replica{}).peerBaseURL("10.0.0.6:8080")
	require.NoError(t, err)
	require.Equal(t, "http://10.0.0.6:8080", u)
}

// TestPeerTLSWithFetchClientRefused: CheckpointFetch.Client replaces the
// fetch's own client, and with it the transport PeerTLS configures
// (FetchOptions.TLS is ignored with Client): the fetch would present no
// certificate and check no peer against the CA. Validate refuses the
// pair by name. Before the fix it was accepted silently.
func TestPeerTLSWithFetchClientRefused(t *testing.T) {
	pki := newPeerPKI(t, "ca")
	cfg := Config{Servers: []string{"127.0.0.1:2181"}, Room: "r", ID: "m", DataDir: t.TempDir(),
		PeerTLS: pki.source("m", testpki.Options{}), AdvertiseAddr: "10.0.0.5:8443"}
	require.NoError(t, cfg.Validate())
	cfg.CheckpointFetch.Client = &http.Client{}
	err := cfg.Validate()
	require.ErrorIs(t, err, ErrInvalidConfig)
	require.ErrorContains(t, err, "CheckpointFetch.Client")
	require.ErrorContains(t, err, "PeerTLS")
	cfg.PeerTLS, cfg.AdvertiseAddr = nil, "10.0.0.5:8080"
	require.NoError(t, cfg.Validate(), "a Client without PeerTLS is fine")
}

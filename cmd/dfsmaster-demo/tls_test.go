package main

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/roomlog/roomlog/tlsfiles"
	"github.com/roomlog/roomlog/zkx"
)

// testPKI issues certificates of one CA into a temp dir.
func testPKI(t *testing.T, name string) (*testpki.CA, string) {
	t.Helper()
	ca, err := testpki.NewCA(name)
	require.NoError(t, err)
	return ca, filepath.Join(t.TempDir(), name)
}

func issue(t *testing.T, ca *testpki.CA, dir, name string, o testpki.Options) tlsfiles.Files {
	t.Helper()
	f, err := ca.Issue(dir, name, o)
	require.NoError(t, err)
	return f
}

func loadTLS(t *testing.T, f tlsfiles.Files) *tlsfiles.Source {
	t.Helper()
	src, err := tlsfiles.Load(f)
	require.NoError(t, err)
	return src
}

// TestServeTLS: a master served with TLS (serve --tls-*) answers the Go
// client over HTTPS with a client certificate (status, mutations, a
// standby's redirect to the primary's https address, ctl with the same
// flags); serves nothing in clear (a plain request gets 400); refuses an
// HTTPS client without a certificate and one of another CA; fetches its
// own manifest over HTTPS (the primary deletes the channels its checkpoint
// covers), and a new standby bootstraps from it over HTTPS. New
// certificate files reach the next connection without a restart.
func TestServeTLS(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	dir := t.TempDir()
	ca, pkiDir := testPKI(t, "demo-ca")
	other, otherDir := testPKI(t, "other-ca")
	const room, token = "tls-demo", "tls-checkpoint-token"
	withTLS := func(c *serveConfig) {
		c.TLS = loadTLS(t, issue(t, ca, pkiDir, c.ID, testpki.Options{}))
		c.CheckpointToken = token
		c.CheckpointEvery = 40
	}
	cliFiles := issue(t, ca, pkiDir, "client", testpki.Options{Client: true})
	hc := client.HTTPS(loadTLS(t, cliFiles), 30*time.Second)

	m1 := openTestMaster(t, ens, room, "m1", dir, withTLS)
	require.True(t, strings.HasPrefix(m1.Addr(), "https://127.0.0.1:"), m1.Addr())
	c1, err := client.New(m1.Addr(), hc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	require.Eventually(t, func() bool {
		s, err := c1.Status(ctx)
		return err == nil && s.Role == api.RolePrimary
	}, 30*time.Second, 20*time.Millisecond, "m1 primary, over HTTPS")
	for i := 0; i < 150; i++ {
		_, err := c1.Mkdir(ctx, fmt.Sprintf("/d%03d", i), false)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		chans, err := m1.rep.Room().Channels(ctx)
		return err == nil && len(chans) > 0 && chans[0].FirstIndex > 1
	}, 60*time.Second, 20*time.Millisecond, "the primary deleted the channels its checkpoint covers (its manifest fetched over HTTPS)")

	hostport := strings.TrimPrefix(m1.Addr(), "https://")
	// Nothing in clear: Go's server answers a plain request with 400.
	for _, path := range []string{"/v1/status", replica.CheckpointPath(room) + "manifest"} {
		r := rawRequest(t, http.MethodGet, "http://"+hostport+path, "")
		require.Equal(t, http.StatusBadRequest, r.status, r.body)
		require.NotContains(t, r.body, room)
	}
	// HTTPS without a client certificate, or with another CA's: refused.
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca.PEM)
	noCert := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	_, err = noCert.Get(m1.Addr() + "/v1/status")
	require.ErrorContains(t, err, "certificate required")
	cOther, err := client.New(m1.Addr(), client.HTTPS(loadTLS(t, issue(t, other, otherDir, "client", testpki.Options{})), 5*time.Second))
	require.NoError(t, err)
	_, err = cOther.Status(ctx)
	require.ErrorContains(t, err, "refused")
	var ve *tlsfiles.VerifyError
	require.ErrorAs(t, err, &ve, "the client refuses the master's certificate (not of its CA)")

	// A new standby bootstraps over HTTPS; a mutation sent to it follows
	// the redirect to the primary's https address.
	m2 := openTestMaster(t, ens, room, "m2", dir, withTLS)
	c2, err := client.New(m2.Addr(), hc)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		s, err := c2.Status(ctx)
		return err == nil && s.Role == api.RoleStandby && s.Bootstraps == 1
	}, 60*time.Second, 20*time.Millisecond, "m2 bootstrapped from m1 over HTTPS")
	st, err := c2.Status(ctx)
	require.NoError(t, err)
	require.Equal(t, m1.Addr(), st.PrimaryAddr)
	res, err := c2.Mkdir(ctx, "/via-standby", false)
	require.NoError(t, err)
	h, err := c2.Hash(ctx, res.Index)
	require.NoError(t, err)
	require.Equal(t, res.Index, h.AppliedIndex)

	// Rotation: new files for m1 reach the next connection, no restart.
	serial := func() string {
		c, err := tls.Dial("tcp", hostport, loadTLS(t, cliFiles).ClientConfig("127.0.0.1"))
		require.NoError(t, err)
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber.String()
	}
	before := serial()
	rotated := issue(t, ca, pkiDir, "m1", testpki.Options{})
	want := loadTLS(t, rotated).Certificate().SerialNumber.String()
	require.NotEqual(t, before, want)
	require.Eventually(t, func() bool { return serial() == want }, 10*time.Second, 50*time.Millisecond,
		"a new connection to m1 gets its new certificate")
	_, err = c1.Status(ctx)
	require.NoError(t, err, "the API still answers after the rotation")

	// ctl with the same flags (host:port means https).
	out := ctlOK(t, "--addr", hostport, "--tls-ca", cliFiles.CA, "--tls-cert", cliFiles.Cert, "--tls-key", cliFiles.Key, "stat", "/via-standby")
	require.Equal(t, "dir", out["type"], out)
	code, _, stderr := ctl(t, "--addr", hostport, "status")
	require.Equal(t, exitError, code, "ctl without the flags cannot talk to a TLS master")
	require.Contains(t, stderr, "400")
}

// TestServeTLSFlags: --tls-ca, --tls-cert and --tls-key go together, and a
// refused file is named with its flag and the reason.
func TestServeTLSFlags(t *testing.T) {
	ca, dir := testPKI(t, "demo-ca")
	good := issue(t, ca, dir, "m1", testpki.Options{})
	expired := issue(t, ca, dir, "old", testpki.Options{NotBefore: time.Now().Add(-2 * time.Hour), NotAfter: time.Now().Add(-time.Hour)})
	other, otherDir := testPKI(t, "other-ca")
	foreign := issue(t, other, otherDir, "m1", testpki.Options{})
	base := []string{"--id", "m1", "--data", t.TempDir()}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"CA only", []string{"--tls-ca", good.CA}, "--tls-ca, --tls-cert and --tls-key go together: [--tls-cert --tls-key] missing"},
		{"expired", []string{"--tls-ca", good.CA, "--tls-cert", expired.Cert, "--tls-key", expired.Key}, "--tls-cert: tlsfiles: Cert file " + expired.Cert + ": expired"},
		{"another CA's certificate", []string{"--tls-ca", good.CA, "--tls-cert", foreign.Cert, "--tls-key", foreign.Key}, "not signed by the CA"},
		{"key of another certificate", []string{"--tls-ca", good.CA, "--tls-cert", good.Cert, "--tls-key", foreign.Key}, "--tls-key: tlsfiles: Key file " + foreign.Key + ": key does not match cert"},
		{"ZooKeeper certificate without its CA", []string{"--zk-tls-cert", good.Cert, "--zk-tls-key", good.Key}, "need --zk-tls-ca"},
		{"ZooKeeper ACL self without a certificate", []string{"--zk-tls-ca", good.CA, "--zk-acl-x509", "self"}, "--zk-acl-x509 self: tlsfiles: no certificate configured"},
		{"expired ZooKeeper certificate", []string{"--zk-tls-ca", good.CA, "--zk-tls-cert", expired.Cert, "--zk-tls-key", expired.Key}, "--zk-tls-*: tlsfiles: Cert file " + expired.Cert + ": expired"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			_, code, ok := parseServeFlags(append(append([]string(nil), base...), tc.args...), &stderr)
			require.False(t, ok)
			require.Equal(t, exitUsage, code)
			require.Contains(t, stderr.String(), tc.want)
		})
	}
	var stderr bytes.Buffer
	opts, _, ok := parseServeFlags(append(base, "--tls-ca", good.CA, "--tls-cert", good.Cert, "--tls-key", good.Key), &stderr)
	require.True(t, ok, stderr.String())
	require.NotNil(t, opts.cfg.TLS)
	opts, _, ok = parseServeFlags(append(base, "--zk-tls-ca", good.CA, "--zk-tls-cert", good.Cert, "--zk-tls-key", good.Key,
		"--zk-acl-x509", "self", "--zk-acl-x509", "CN=m2,O=roomlog-test"), &stderr)
	require.True(t, ok, stderr.String())
	require.NotNil(t, opts.cfg.ZK.src)
	require.Equal(t, []string{"CN=m1,O=roomlog-test", "CN=m2,O=roomlog-test"}, opts.cfg.ZK.acl)
}

// TestPairDemoTLS runs "dfsmaster-demo pair --tls" end to end: the masters
// serve HTTPS with mutual TLS, the workload and checks go through the Go
// client with a certificate, ZooKeeper sessions are TLS with an x509 ACL,
// and the demo's own checks pass (plain HTTP answered 400, a client
// without a certificate refused; a ZooKeeper client of another identity,
// a plain one and cs1's certificate get NoAuth reading the room and on
// each write of a master: the room's epoch znode, by the name its meta
// records, a writer token under it, an election candidate and the next
// batch in the newest channel). Its 4 chunk servers each have a
// certificate of their own and per-worker ACLs (serve
// --zk-acl-x509-worker): cs1's certificate is refused (NoAuth) listing,
// creating and deleting in cs2's task directory, forging a result and
// writing or deleting under the room, while the killed chunk server's
// blocks are still re-replicated (reports go through each worker's own
// directory).
func TestPairDemoTLS(t *testing.T) {
	zkensemble.Require(t)
	bin := buildDemo(t)
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "pair", "--tls", "--zk-servers", "1", "--phase", "2s", "--workers", "3", "--chunkservers", "4")
	cmd.Cancel = func() error { return cmd.Process.Signal(os.Interrupt) }
	cmd.WaitDelay = 20 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	out := stdout.String()
	require.NoError(t, err, "stdout:\n%s\nstderr:\n%s", out, stderr.String())
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	last := lines[len(lines)-1]
	require.True(t, strings.HasPrefix(last, "RESULT "), "last line %q", last)
	var res pairResult
	require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(last, "RESULT ")), &res))
	require.True(t, res.OK, out)
	require.True(t, res.TLS)
	require.Zero(t, res.OpsLost)
	require.True(t, res.HashesEqual)
	require.Contains(t, out, "==> m2 serving https://127.0.0.1:")
	require.Contains(t, out, "TLS check: m1 answers a plain HTTP request with 400")
	require.True(t, res.ZKTLS, "a local ensemble is TLS too")
	require.Contains(t, out, "ZooKeeper TLS check: a client with another identity (CN=intruder), a plain client and chunk server cs1's certificate (CN=cs1,O=roomlog-test) are refused reading and writing")
	require.Regexp(t, `ZooKeeper TLS check: .* \(zk: not authenticated\): taking over \(/\S+/epoch(-[0-9a-f]{16})? and a writer token under it\), standing for election \(a candidate in /\S+/election\) and appending \(/\S+/channels/ch-\d+/b-\d+\)`, out)
	require.Contains(t, out, "each chunk server is granted its own task directory only (per-worker ACLs): cs1=CN=cs1,O=roomlog-test | cs2=CN=cs2,O=roomlog-test")
	require.Contains(t, out, "ZooKeeper worker ACL check: cs1's certificate lists its own task directory but is refused (zk: not authenticated) listing, creating and deleting in cs2's")
	require.True(t, res.ZKWorkerACLs)
	require.Equal(t, 4, res.ChunkServers)
	require.Positive(t, res.RereplicationTasks)
	require.Zero(t, res.TasksDoneTwice)
	require.Zero(t, res.BlocksUnderReplicated)
}

// TestServeZKWorkerFlag: --zk-acl-x509-worker maps each chunk server id
// to its certificate's identity (the assigner's per-worker ACLs); a value
// that is not ID=SUBJECT, a repeated id, a subject shared by two ids, or
// the flag without the masters' identities or beside
// --zk-acl-x509-workers is refused with an error naming it.
func TestServeZKWorkerFlag(t *testing.T) {
	ca, dir := testPKI(t, "demo-ca")
	good := issue(t, ca, dir, "m1", testpki.Options{})
	base := []string{"--id", "m1", "--data", t.TempDir(), "--chunkservers",
		"--zk-tls-ca", good.CA, "--zk-tls-cert", good.Cert, "--zk-tls-key", good.Key}
	masters := []string{"--zk-acl-x509", "self"}
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no id", []string{"--zk-acl-x509-worker", "CN=cs1,O=dfs"}, `--zk-acl-x509-worker "CN=cs1,O=dfs": subject "cs1,O=dfs": attribute "cs1" is not TYPE=VALUE`},
		{"no subject", []string{"--zk-acl-x509-worker", "cs1="}, `--zk-acl-x509-worker "cs1=": want ID=SUBJECT`},
		{"no equals", []string{"--zk-acl-x509-worker", "cs1"}, `--zk-acl-x509-worker "cs1": want ID=SUBJECT`},
		{"bad id", []string{"--zk-acl-x509-worker", "c/s=CN=cs1"}, `--zk-acl-x509-worker "c/s=CN=cs1": worker id "c/s"`},
		{"empty attribute", []string{"--zk-acl-x509-worker", "cs1=CN=cs1,,O=dfs"}, `attribute "" is not TYPE=VALUE`},
		{"id twice", []string{"--zk-acl-x509-worker", "cs1=CN=cs1", "--zk-acl-x509-worker", "cs1=CN=cs9"}, `--zk-acl-x509-worker "cs1=CN=cs9": worker cs1 given twice`},
		{"shared subject", []string{"--zk-acl-x509-worker", "cs1=CN=cs,O=dfs", "--zk-acl-x509-worker", "cs2=CN=cs,O=dfs"},
			`--zk-acl-x509-worker "cs2=CN=cs,O=dfs": subject "CN=cs,O=dfs" is worker cs1's too`},
		{"with --zk-acl-x509-workers", []string{"--zk-acl-x509-worker", "cs1=CN=cs1", "--zk-acl-x509-workers", "CN=chunk"}, "--zk-acl-x509-worker and --zk-acl-x509-workers exclude each other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr bytes.Buffer
			_, code, ok := parseServeFlags(slices.Concat(base, masters, tc.args), &stderr)
			require.False(t, ok)
			require.Equal(t, exitUsage, code)
			require.Contains(t, stderr.String(), tc.want)
		})
	}
	var stderr bytes.Buffer
	_, _, ok := parseServeFlags(slices.Concat(base, []string{"--zk-acl-x509-worker", "cs1=CN=cs1"}), &stderr)
	require.False(t, ok)
	require.Contains(t, stderr.String(), "--zk-acl-x509-worker needs --zk-acl-x509 (the masters' identities)")

	stderr.Reset()
	opts, _, ok := parseServeFlags(slices.Concat(base, masters, []string{
		"--zk-acl-x509-worker", `cs1=CN=cs1,O=roomlog-test`, "--zk-acl-x509-worker", `cs2=CN=cs\,2,O=roomlog-test`}), &stderr)
	require.True(t, ok, stderr.String())
	require.Equal(t, map[string]string{"cs1": "CN=cs1,O=roomlog-test", "cs2": `CN=cs\,2,O=roomlog-test`}, opts.cfg.ZKWorker)
	require.Empty(t, opts.cfg.ZKWorkers)
	acl, all := workerACL(opts.cfg.ZKWorker)
	require.Equal(t, zkx.X509ACL(zk.PermAll, "CN=cs1,O=roomlog-test"), acl("cs1"))
	require.Empty(t, acl("cs3"), "a chunk server not listed gets no ACL (no tasks)")
	require.Equal(t, zkx.X509ACL(zk.PermAll, "CN=cs1,O=roomlog-test", `CN=cs\,2,O=roomlog-test`), all)
}

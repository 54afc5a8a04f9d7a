package main

import (
	"context"
	"crypto/tls"
	"io"
	"log"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/testnode"
	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/tlsfiles"
)

// TestScheduleTLS: -tls draws both rotations and never upgrade or
// downgrade, and leaves the draws of a run without it as they were.
func TestScheduleTLS(t *testing.T) {
	plain, plain2, withTLS := NewSchedule(41, sessionForTest), NewSchedule(41, sessionForTest), NewSchedule(41, sessionForTest)
	plain.Lifecycle(1, 3)
	plain2.Lifecycle(1, 3)
	withTLS.Lifecycle(1, 3)
	withTLS.TLS()
	var n [numKinds]int
	for range 400 {
		a, b := plain.Next(), plain2.Next()
		require.Equal(t, a, b, "a seed draws one sequence")
		require.NotContains(t, []Kind{RotateCert, RotateCA}, a.Kind, "rotations only with -tls")
		n[withTLS.Next().Kind]++
	}
	require.Positive(t, n[RotateCert])
	require.Positive(t, n[RotateCA])
	require.Zero(t, n[Upgrade]+n[Downgrade], "the previous release has no TLS")
}

// TestChaosTLS is a bounded -lifecycle -tls run (rerun it with `go run
// ./chaos -lifecycle -tls -seed 20261215 -faults 4 -force
// rotate-cert,rotate-ca,replace-member,rotate-cert`): ZooKeeper over
// TLS with x509 ACLs, mutual TLS between members, a certificate and the
// members' CA rotated under load, and a member replaced (it bootstraps
// over mutual TLS with certificates of the new CA).
func TestChaosTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("chaos: not in -short")
	}
	bin := testnode.BuildT(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	force := []Kind{RotateCert, RotateCA, ReplaceMember, RotateCert}
	cfg := Config{
		Seed: 20261215, Faults: len(force), Force: force, Lifecycle: true, TLS: true,
		Session: sessionForTest, Dir: t.TempDir(), Out: t.Output(), Binary: bin,
	}
	res, err := Run(ctx, cfg)
	require.NoError(t, err)
	printResult(t.Output(), res)
	require.True(t, res.OK(), "%s", res.Line())
	for _, k := range force {
		require.Positive(t, res.Kinds[k], "kind %s ran", k)
	}
	require.True(t, res.TLS)
	require.Zero(t, res.TLSViolations)
	require.Positive(t, res.Report.Acked)
	// As in TestChaosLifecycle: graceful steps cost less than a session
	// (the 1 s of issue 41 is the long run's bound; make test shares
	// the two cores with every other package).
	require.Less(t, res.MaxLifecycleGap, sessionForTest, "%s", res.Line())
}

// TestProbeTLS: the probe rotate-cert and rotate-ca judge by sees what a
// server whose files rotate presents and whom it accepts (no ZooKeeper:
// a tlsfiles server like a member's checkpoint port).
func TestProbeTLS(t *testing.T) {
	dir := t.TempDir()
	ca1, err := testpki.NewCA("probe CA 1")
	require.NoError(t, err)
	ca2, err := testpki.NewCA("probe CA 2")
	require.NoError(t, err)
	f, err := ca1.Issue(dir, "member", testpki.Options{})
	require.NoError(t, err)
	src, err := tlsfiles.LoadWithOptions(f, tlsfiles.Options{CheckEvery: -1})
	require.NoError(t, err)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", src.ServerConfig(tls.RequireAndVerifyClientCert))
	require.NoError(t, err)
	srv := &http.Server{Handler: http.NotFoundHandler(), ReadHeaderTimeout: 5 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	addr := ln.Addr().String()
	ctx := context.Background()
	c1, err := clientCert(ca1)
	require.NoError(t, err)
	c2, err := clientCert(ca2)
	require.NoError(t, err)

	got, err := probeTLS(ctx, addr, c1, poolOf(ca1))
	require.NoError(t, err)
	first := got.SerialNumber
	_, err = probeTLS(ctx, addr, c2, poolOf(ca1, ca2))
	require.Error(t, err, "a client of a CA the server does not trust is refused")

	// rotate-cert: a new certificate of the same CA, in place.
	nc, err := ca1.Make("member", testpki.Options{})
	require.NoError(t, err)
	require.NoError(t, testpki.WriteFile(f.Cert, nc.CertPEM))
	require.NoError(t, testpki.WriteFile(f.Key, nc.KeyPEM))
	got, err = probeTLS(ctx, addr, c1, poolOf(ca1))
	require.NoError(t, err)
	require.NotEqual(t, first, got.SerialNumber)
	require.Equal(t, nc.Cert.SerialNumber, got.SerialNumber)

	// rotate-ca: bundle, then the new CA's certificate, then new only.
	require.NoError(t, testpki.WriteFile(f.CA, append(append([]byte(nil), ca1.PEM...), ca2.PEM...)))
	_, err = probeTLS(ctx, addr, c2, poolOf(ca1, ca2))
	require.NoError(t, err, "the bundle accepts a client of the new CA")
	n2, err := ca2.Make("member", testpki.Options{})
	require.NoError(t, err)
	require.NoError(t, testpki.WriteFile(f.Cert, n2.CertPEM))
	require.NoError(t, testpki.WriteFile(f.Key, n2.KeyPEM))
	_, err = probeTLS(ctx, addr, c2, poolOf(ca2))
	require.NoError(t, err, "presents the new CA's certificate")
	require.NoError(t, testpki.WriteFile(f.CA, ca2.PEM))
	_, err = probeTLS(ctx, addr, c1, poolOf(ca1, ca2))
	require.Error(t, err, "the old CA's client is refused once the CA file holds the new CA only")
	_, err = probeTLS(ctx, addr, c2, poolOf(ca2))
	require.NoError(t, err)
}

// Package recipetest is the test harness of the recipe packages: one real
// ZooKeeper server shared by a test binary, clients dialed directly or
// through a fault proxy, forced session expiry and disconnection, and a
// goroutine leak check. Only tests import it. It lives with the harness,
// not under recipe/, because it imports the ground floor of the harness
// (internal/infra/zkensemble and faultnet): a non-test file of it under
// recipe/ lifted the recipes above replica.
package recipetest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/faultnet"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/zkx"
)

// ProxiedSession is the session timeout of clients dialed through a proxy:
// short, so that forcing an expiry costs little.
const ProxiedSession = 1500 * time.Millisecond

var shared = zkensemble.NewShared(zkensemble.Options{Servers: 1})

// Main runs the tests and closes the shared ensemble.
func Main(m *testing.M) { os.Exit(shared.Run(m)) }

// ZK returns the binary's one-server ensemble, starting it on first use.
// It fails the test under CI=true when ZooKeeper is missing and skips it
// otherwise.
func ZK(t testing.TB) *zkensemble.Ensemble {
	t.Helper()
	return shared.Get(t)
}

// Dir returns a fresh top-level path for the test.
func Dir(t testing.TB) string {
	r := strings.NewReplacer("/", "_", " ", "_", "#", "_")
	return "/recipe_" + r.Replace(t.Name()) + "_" + hex.EncodeToString(randBytes(3))
}

func randBytes(n int) []byte {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return b
}

// Logger logs to t until the test ends.
func Logger(t testing.TB) *slog.Logger {
	h := &tHandler{t: t, done: new(atomic.Bool), attrs: ""}
	t.Cleanup(func() { h.done.Store(true) })
	return slog.New(h)
}

type tHandler struct {
	t     testing.TB
	done  *atomic.Bool
	attrs string
}

func (h *tHandler) Enabled(context.Context, slog.Level) bool { return !h.done.Load() }
func (h *tHandler) Handle(_ context.Context, r slog.Record) error {
	if h.done.Load() {
		return nil
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s %s%s", r.Time.Format("15:04:05.000"), r.Level, r.Message, h.attrs)
	r.Attrs(func(a slog.Attr) bool {
		fmt.Fprintf(&b, " %s=%v", a.Key, a.Value)
		return true
	})
	h.t.Log(b.String())
	return nil
}
func (h *tHandler) WithAttrs(as []slog.Attr) slog.Handler {
	n := *h
	for _, a := range as {
		n.attrs += fmt.Sprintf(" %s=%v", a.Key, a.Value)
	}
	return &n
}
func (h *tHandler) WithGroup(string) slog.Handler { return h }

// Dial connects a client to addrs (the shared ensemble's when nil) with the
// given session timeout and closes it when the test ends.
func Dial(t testing.TB, addrs []string, session time.Duration) *zkx.Client {
	t.Helper()
	if addrs == nil {
		addrs = ZK(t).Addrs()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := zkx.Dial(ctx, zkx.DialConfig{Servers: addrs, SessionTimeout: session})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

// Proxied is a client whose only link to ZooKeeper is a fault proxy.
type Proxied struct {
	*zkx.Client
	Proxy *faultnet.Proxy

	// probe is an ephemeral node of the current session, created by Cut:
	// its disappearance proves that the server expired the session.
	probe string
}

// DialProxied dials a client through a new proxy to the shared ensemble,
// with session timeout ProxiedSession.
func DialProxied(t testing.TB) *Proxied {
	t.Helper()
	return DialProxiedSession(t, ProxiedSession)
}

// DialProxiedSession is DialProxied with the given session timeout.
func DialProxiedSession(t testing.TB, session time.Duration) *Proxied {
	t.Helper()
	p, err := faultnet.New(faultnet.Config{Targets: ZK(t).Addrs()})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	c := Dial(t, []string{p.Addr()}, session)
	return &Proxied{Client: c, Proxy: p}
}

// Disconnect cuts the client off until it notices (its state leaves
// HasSession), then heals the link, and waits until the same session is
// back.
func (p *Proxied) Disconnect(t testing.TB) {
	t.Helper()
	sid := p.SessionID()
	p.Proxy.Cut()
	Eventually(t, 10*time.Second, "the client notices the cut", func() bool { return p.State() != zk.StateHasSession })
	p.Proxy.Heal()
	Eventually(t, 10*time.Second, "the same session is back", func() bool {
		return p.State() == zk.StateHasSession && p.SessionID() == sid
	})
}

// Expire forces the client's session to expire: Cut, WaitExpired, Heal.
func (p *Proxied) Expire(t testing.TB) {
	t.Helper()
	p.CutUntilExpired(t)
	p.Heal(t)
}

// CutUntilExpired is Cut then WaitExpired: the link stays cut.
func (p *Proxied) CutUntilExpired(t testing.TB) {
	t.Helper()
	p.Cut(t)
	p.WaitExpired(t)
}

// Cut creates a probe ephemeral node in the client's session (it must be
// connected), then cuts the link: the client is disconnected until Heal.
func (p *Proxied) Cut(t testing.TB) {
	t.Helper()
	p.probe = "/recipetest-expiry-" + hex.EncodeToString(randBytes(8))
	_, err := p.Conn().Create(p.probe, nil, zk.FlagEphemeral, p.ACL())
	require.NoError(t, err)
	p.Proxy.Cut()
}

// WaitExpired waits, after Cut, until an independent client sees the
// probe vanish: the server expired the session.
func (p *Proxied) WaitExpired(t testing.TB) {
	t.Helper()
	require.NotEmpty(t, p.probe, "WaitExpired without Cut")
	obs := Dial(t, nil, 4*time.Second)
	defer obs.Close()
	deadline := time.Now().Add(20 * time.Second)
	for {
		ok, _, ch, err := obs.Conn().ExistsW(p.probe)
		require.NoError(t, err)
		if !ok {
			return
		}
		select {
		case <-ch:
		case <-time.After(time.Until(deadline)):
			t.Fatalf("session 0x%x did not expire within 20s of the cut", p.SessionID())
		}
	}
}

// Heal restores the link and waits until the client has a new session.
func (p *Proxied) Heal(t testing.TB) {
	t.Helper()
	old := p.SessionID()
	p.Proxy.Heal()
	Eventually(t, 20*time.Second, "the client gets a new session", func() bool {
		id := p.SessionID()
		return p.State() == zk.StateHasSession && id != 0 && id != old
	})
}

// Eventually polls cond every 10ms until it holds, or fails the test after
// d. Unlike require.Eventually it calls cond on the test's goroutine, so
// cond may use t and the goroutine count is not disturbed.
func Eventually(t testing.TB, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Ctx returns a context that ends after d or with the test.
func Ctx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// NoLeaks fails the test if a goroutine running code of pkg (an import
// path such as "github.com/roomlog/roomlog/recipe/lock") is still alive
// after a short grace, other than the test's own goroutines.
func NoLeaks(t testing.TB, pkgs ...string) {
	t.Helper()
	var leaked []string
	for i := 0; i < 100; i++ {
		leaked = leaked[:0]
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		for _, g := range strings.Split(string(buf), "\n\n") {
			if strings.Contains(g, "_test.go") || strings.Contains(g, "recipetest.") {
				continue
			}
			for _, p := range pkgs {
				if strings.Contains(g, p+".") {
					leaked = append(leaked, g)
					break
				}
			}
		}
		if len(leaked) == 0 {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%d goroutines leaked:\n%s", len(leaked), strings.Join(leaked, "\n\n"))
}

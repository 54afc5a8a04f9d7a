package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/client"
	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/namespace"
	"github.com/roomlog/roomlog/internal/infra/faultnet"
	"github.com/roomlog/roomlog/internal/infra/promserver"
	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
	"github.com/roomlog/roomlog/tlsfiles"
)

// divergePath is the path whose mkdir a skewApplier applies differently.
const divergePath = "/diverge"

// skewApplier is the namespace applier, except that a mkdir of divergePath
// also writes a key the other members do not: a nondeterministic applier
// on one member, which the running state hash catches (ErrDiverged).
type skewApplier struct{ namespace.Applier }

func (a skewApplier) Apply(b store.Batch, e store.Entry) ([]byte, error) {
	resp, err := a.Applier.Apply(b, e)
	if c, derr := namespace.DecodeCommand(e.Data); err == nil && derr == nil && c.Op == namespace.OpMkdir && c.Path == divergePath {
		err = b.Set([]byte("skew"), []byte("only here"))
	}
	return resp, err
}

// liveRules writes the shipped rules with every `for:` shortened to 1s
// (the expressions, labels and annotations are the shipped ones, which
// ops' promtool tests cover) and returns the file's path.
func liveRules(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "ops", "prometheus", "roomlog-alerts.yml"))
	require.NoError(t, err)
	forLine := regexp.MustCompile(`(?m)^(\s+)for: \S+$`)
	require.NotEmpty(t, forLine.FindAll(b, -1))
	out := forLine.ReplaceAll(b, []byte("${1}for: 1s"))
	p := filepath.Join(t.TempDir(), "roomlog-alerts-live.yml")
	require.NoError(t, os.WriteFile(p, out, 0o644))
	return p
}

// freeAddr is a loopback address with a free port.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// liveMaster is a demo master whose ZooKeeper link and HTTP address (what
// Prometheus scrapes and peers dial) go through proxies the test cuts.
type liveMaster struct {
	*master
	zk, http *faultnet.Proxy
}

func newProxy(t *testing.T, targets ...string) *faultnet.Proxy {
	t.Helper()
	p, err := faultnet.New(faultnet.Config{Targets: targets})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// TestAlertsLive: Debian's Prometheus scrapes four demo masters of a
// room on a real ZooKeeper every second with the shipped alert rules
// loaded (for: shortened to 1s); one of them, an observer, over HTTPS
// with mutual TLS. Its certificate expires in 7 days
// (RoomlogCertificateExpiresSoon, resolved by writing new files over the
// old ones). The test then fills the room near its bound
// (RoomlogRoomNearFull, resolved by a checkpoint that deletes the
// channel), makes an observer's applier diverge (RoomlogMemberDiverged,
// resolved when that member is removed), partitions the standby from
// ZooKeeper (RoomlogMemberDisconnected) and kills the primary's network
// meanwhile (RoomlogNoPrimary), then heals the standby, which takes over:
// both resolve. Each alert is seen firing and then gone through
// Prometheus's API. Last, every dashboard panel's query is evaluated
// against that Prometheus: no error, and data for each.
func TestAlertsLive(t *testing.T) {
	promserver.Require(t)
	start := time.Now()
	ens := zkensemble.ForTest(t, zkensemble.Options{})
	dir := t.TempDir()
	const room = "alerts-live"
	const bound = 1 << 20
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	open := func(id string, mutate func(*serveConfig)) *liveMaster {
		t.Helper()
		zkp := newProxy(t, ens.Addrs()...)
		listen := freeAddr(t)
		hp := newProxy(t, listen)
		m := openTestMaster(t, ens, room, id, dir, func(c *serveConfig) {
			c.Servers = []string{zkp.Addr()}
			c.HTTPAddr, c.AdvertiseAddr = listen, hp.Addr()
			c.MaxRoomBytes = bound
			c.CheckpointEvery = 1 << 30 // only the test's checkpoint
			if mutate != nil {
				mutate(c)
			}
		})
		return &liveMaster{master: m, zk: zkp, http: hp}
	}
	m1 := open("m1", nil)
	require.Eventually(t, func() bool { return m1.rep.Status().Role == replica.RolePrimary }, 30*time.Second, 20*time.Millisecond, "m1 primary")
	m2 := open("m2", nil)
	m3 := open("m3", func(c *serveConfig) { c.Observer, c.Applier = true, skewApplier{} })
	// m4, an observer serving HTTPS with mutual TLS (its certificate is
	// also its PeerTLS), with a certificate that expires in 7 days.
	ca, err := testpki.NewCA("alerts-live")
	require.NoError(t, err)
	pkiDir := t.TempDir()
	m4Files, err := ca.Issue(pkiDir, "m4", testpki.Options{NotAfter: time.Now().Add(7 * 24 * time.Hour)})
	require.NoError(t, err)
	promFiles, err := ca.Issue(pkiDir, "prometheus", testpki.Options{Client: true})
	require.NoError(t, err)
	m4TLS, err := tlsfiles.Load(m4Files)
	require.NoError(t, err)
	m4 := open("m4", func(c *serveConfig) { c.Observer, c.TLS = true, m4TLS })
	for _, m := range []*liveMaster{m2, m3, m4} {
		require.Eventually(t, func() bool { return m.rep.Status().PrimaryID == "m1" }, 30*time.Second, 20*time.Millisecond, "%s follows m1", m.rep.ID())
	}

	prom := promserver.StartWith(ctx, t, []string{m1.http.Addr(), m2.http.Addr(), m3.http.Addr()},
		promserver.Options{Interval: time.Second, RuleFiles: []string{liveRules(t)},
			TLSTargets: []string{m4.http.Addr()}, TLS: promserver.TLSFiles{CA: promFiles.CA, Cert: promFiles.Cert, Key: promFiles.Key}})
	firing := func(alert string) map[string]string {
		s, err := prom.Query(ctx, fmt.Sprintf(`ALERTS{alertname=%q,alertstate="firing",room=%q}`, alert, room))
		require.NoError(t, err)
		if len(s) == 0 {
			return nil
		}
		return s[0].Labels
	}
	allFiring := func() string {
		s, err := prom.Query(ctx, `ALERTS{alertstate="firing"}`)
		require.NoError(t, err)
		var out []string
		for _, x := range s {
			out = append(out, x.Labels["alertname"]+"/"+x.Labels["member"])
		}
		sort.Strings(out)
		return strings.Join(out, " ")
	}
	fires := func(alert, member string) {
		t.Helper()
		t0 := time.Now()
		var got map[string]string
		require.Eventually(t, func() bool { got = firing(alert); return got != nil }, 60*time.Second, 100*time.Millisecond,
			"%s never fired (firing: %s)", alert, allFiring())
		if member != "" {
			require.Equal(t, member, got["member"], "%s names the member", alert)
		}
		require.Equal(t, room, got["room"])
		t.Logf("%s fired after %v: %v (firing now: %s)", alert, time.Since(t0).Round(10*time.Millisecond), got, allFiring())
	}
	resolves := func(alert string) {
		t.Helper()
		t0 := time.Now()
		require.Eventually(t, func() bool { return firing(alert) == nil }, 60*time.Second, 100*time.Millisecond,
			"%s never resolved (firing: %s)", alert, allFiring())
		t.Logf("%s resolved after %v", alert, time.Since(t0).Round(10*time.Millisecond))
	}
	// Every member scraped, m4 over HTTPS.
	require.Eventually(t, func() bool {
		s, err := prom.Query(ctx, fmt.Sprintf(`count(roomlog_replica_applied_index{room=%q})`, room))
		return err == nil && len(s) == 1 && s[0].Value == 4
	}, 30*time.Second, 100*time.Millisecond, "Prometheus scrapes the four masters")

	// 0. m4's certificate expires within 14 days:
	// RoomlogCertificateExpiresSoon. New files (a 90-day certificate)
	// written over the old ones resolve it, without a restart.
	fires("RoomlogCertificateExpiresSoon", "m4")
	require.Equal(t, "peer", firing("RoomlogCertificateExpiresSoon")["link"])
	_, err = ca.Issue(pkiDir, "m4", testpki.Options{NotAfter: time.Now().Add(90 * 24 * time.Hour)})
	require.NoError(t, err)
	resolves("RoomlogCertificateExpiresSoon")
	require.Empty(t, allFiring(), "a healthy room fires no alert")

	// 1. Fill the room near its bound: RoomlogRoomNearFull. A checkpoint
	// (the channel rotated, then deleted) resolves it. The paths are long
	// and random (little to compress), so a few hundred mkdirs fill it.
	// Members measure the room once a second, and the fill would overrun
	// the bound between two measurements: each round writes about half of
	// what is left to 90 % (by the bytes a mkdir cost so far), then
	// measures the room in ZooKeeper.
	c1, err := client.New(m1.Addr(), nil)
	require.NoError(t, err)
	var n atomic.Int64
	perMkdir := 4000.0 // charged bytes one mkdir adds: a guess on the high side until measured
	measure := func() int64 {
		u, err := m1.rep.Room().Usage(ctx)
		require.NoError(t, err)
		return u.Charged()
	}
	charged := measure()
	for round := 1; float64(charged) < 0.82*float64(bound); round++ {
		require.Less(t, round, 12, "the fill does not reach the bound")
		count := max(int((0.9*float64(bound)-float64(charged))/2/perMkdir), 1)
		jobs := make(chan int64, count)
		for range count {
			jobs <- n.Add(1)
		}
		close(jobs)
		var wg sync.WaitGroup
		var fillErr atomic.Pointer[error]
		for w := 0; w < 8; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range jobs {
					if _, err := c1.Mkdir(ctx, fillPath(i), true); err != nil {
						fillErr.Store(&err)
						return
					}
				}
			}()
		}
		wg.Wait()
		if p := fillErr.Load(); p != nil {
			require.NoError(t, *p)
		}
		before := charged
		charged = measure()
		perMkdir = max(float64(charged-before)/float64(count), 100)
	}
	st := m1.rep.Status()
	t.Logf("filled with %d mkdirs: %d of %d bytes charged in ZooKeeper", n.Load(), charged, st.MaxRoomBytes)
	fires("RoomlogRoomNearFull", "")
	// Every member applies the fill before the checkpoint, so the old
	// channel goes because everyone is past it, not because the room is
	// over its retention bound: a member behind a deleted channel must
	// bootstrap, and m4 (PeerTLS) cannot fetch from its plain-HTTP peers.
	for _, m := range []*liveMaster{m2, m3, m4} {
		require.NoError(t, m.rep.WaitApplied(ctx, st.Applied), "%s applies the fill", m.rep.ID())
	}
	require.NoError(t, m1.rep.Checkpoint(ctx))
	// Every member measures the room itself (once a second): wait until
	// each sees it freed; then each must match what ZooKeeper holds, and
	// none may have failed.
	freed := func() bool {
		for _, m := range []*liveMaster{m1, m2, m3, m4} {
			st := m.rep.Status()
			if float64(st.RoomCharged) >= 0.5*float64(st.MaxRoomBytes) {
				return false
			}
		}
		return true
	}
	for try := 1; !freed(); try++ {
		require.Less(t, try, 3, "the checkpoints did not free the room on every member (%s)", roomFigures(m1, m2, m3, m4))
		if !waitTrue(15*time.Second, freed) {
			require.NoError(t, m1.rep.Checkpoint(ctx))
		}
	}
	for _, m := range []*liveMaster{m1, m2, m3, m4} {
		require.NotEqual(t, replica.RoleFailed, m.rep.Status().Role, "%s: %v", m.rep.ID(), m.rep.Status().Err)
	}
	u, err := m1.rep.Room().Usage(ctx)
	require.NoError(t, err)
	require.True(t, waitTrue(10*time.Second, func() bool {
		for _, m := range []*liveMaster{m1, m2, m3, m4} {
			if st := m.rep.Status(); st.RoomBytes != u.Bytes || st.RoomCharged != u.Charged() {
				return false
			}
		}
		return true
	}), "every member measures what ZooKeeper holds (%d bytes, %d charged): %s", u.Bytes, u.Charged(), roomFigures(m1, m2, m3, m4))
	resolves("RoomlogRoomNearFull")

	// 2. A divergent applier on the observer m3: RoomlogMemberDiverged.
	// Removing the member resolves it.
	_, err = c1.Mkdir(ctx, divergePath, false)
	require.NoError(t, err)
	// The room goes on writing meanwhile, as rooms do (a trickle of
	// mkdirs until the alert fires).
	trickle, stopTrickle := context.WithCancel(ctx)
	trickled := make(chan struct{})
	go func() {
		defer close(trickled)
		for i := 0; trickle.Err() == nil; i++ {
			_, _ = c1.Mkdir(trickle, fmt.Sprintf("/after-diverge-%d", i), false)
			select {
			case <-trickle.Done():
			case <-time.After(200 * time.Millisecond): // a write rate, not a wait for a condition
			}
		}
	}()
	fires("RoomlogMemberDiverged", "m3")
	stopTrickle()
	<-trickled
	require.ErrorIs(t, m3.rep.Status().Err, replica.ErrDiverged)
	require.NoError(t, m3.Close())
	m3.http.Cut()
	resolves("RoomlogMemberDiverged")

	// 3. Partition the standby m2 from ZooKeeper:
	// RoomlogMemberDisconnected. Then kill the primary m1 (its ZooKeeper
	// link and its address cut: gone, as after kill -9): nobody can take
	// over, RoomlogNoPrimary. Healing m2 brings a new primary: both
	// resolve.
	m2.zk.Blackhole()
	fires("RoomlogMemberDisconnected", "m2")
	m1.zk.Cut()
	m1.http.Cut()
	fires("RoomlogNoPrimary", "")
	m2.zk.Heal()
	require.Eventually(t, func() bool { return m2.rep.Status().Role == replica.RolePrimary }, 60*time.Second, 20*time.Millisecond, "m2 takes over")
	resolves("RoomlogNoPrimary")
	resolves("RoomlogMemberDisconnected")

	// The old primary comes back as a standby (its writes fenced), so the
	// dashboard's panels about standbys have data.
	m1.zk.Heal()
	m1.http.Heal()
	require.Eventually(t, func() bool {
		s := m1.rep.Status()
		return s.Role == replica.RoleStandby && s.PrimaryID == "m2"
	}, 60*time.Second, 20*time.Millisecond, "m1 rejoins as a standby")
	c2, err := client.New(m2.Addr(), nil)
	require.NoError(t, err)
	_, err = c2.Mkdir(ctx, "/after", false)
	require.NoError(t, err)

	// 4. Every dashboard panel's query, for this room.
	panels := dashboardQueries(t)
	require.Eventually(t, func() bool {
		s, err := prom.Query(ctx, fmt.Sprintf(`roomlog_replica_member_applied_delta{room=%q,member="m2",peer="m1"}`, room))
		return err == nil && len(s) == 1
	}, 30*time.Second, 100*time.Millisecond, "the new primary reports its standby")
	empty := map[string]bool{}
	for _, p := range panels {
		expr := strings.ReplaceAll(p.Expr, "$room", room)
		s, err := prom.Query(ctx, expr)
		require.NoError(t, err, "panel %q: %s", p.Panel, expr)
		if len(s) == 0 {
			empty[p.Panel] = true
		}
	}
	require.Empty(t, empty, "panels without data")
	t.Logf("%d panel queries evaluated, each with data; whole test %v", len(panels), time.Since(start).Round(time.Second))
}

// panelQuery is one query of a dashboard panel.
type panelQuery struct{ Panel, Expr string }

// dashboardQueries reads ops/grafana/roomlog-dashboard.json's panel
// queries (rows have none).
func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "ops", "grafana", "roomlog-dashboard.json"))
	require.NoError(t, err)
	var d struct {
		Panels []struct {
			Type, Title string
			Targets     []struct{ Expr string }
		}
	}
	require.NoError(t, json.Unmarshal(b, &d))
	var out []panelQuery
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		require.NotEmpty(t, p.Targets, "panel %q", p.Title)
		for _, tg := range p.Targets {
			out = append(out, panelQuery{p.Title, tg.Expr})
		}
	}
	require.NotEmpty(t, out)
	return out
}

// fillPath is the i-th path of the fill: 12 components of 250 random hex
// characters under /fill (about 3 kB, half of it left by compression).
func fillPath(i int64) string {
	var b strings.Builder
	fmt.Fprintf(&b, "/fill-%06d", i)
	buf := make([]byte, 125)
	for range 12 {
		_, _ = rand.Read(buf)
		b.WriteString("/")
		b.WriteString(hex.EncodeToString(buf))
	}
	return b.String()
}

// roomFigures is each member's measurement of the room, for a failure
// message.
func roomFigures(ms ...*liveMaster) string {
	var out []string
	for _, m := range ms {
		st := m.rep.Status()
		out = append(out, fmt.Sprintf("%s: %d of %d charged, %d channels, %s %v", m.rep.ID(), st.RoomCharged, st.MaxRoomBytes, st.Channels, st.Role, st.Err))
	}
	return strings.Join(out, "; ")
}

// waitTrue polls cond every 50 ms until it holds (true) or d passes (false).
func waitTrue(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(50 * time.Millisecond) // polling members' status: no event to wait on
	}
	return true
}

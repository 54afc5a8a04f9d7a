package replica

import (
	"os"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
)

// TestAlertGauges: the gauges ops/alerts.yml reads that no other test
// covers: the peer certificate's expiry and the TLS files' error state,
// room lost and room-version blocked (0 on a healthy member). A cert file
// replaced by garbage turns roomlog_replica_tls_files_error to 1 while the
// old certificate keeps being served and reported.
func TestAlertGauges(t *testing.T) {
	ens := sharedEnsemble(t)
	reg := prometheus.NewPedanticRegistry()
	pki := newPeerPKI(t, "ca")
	var files = pki.files("m0", testpki.Options{})
	c := newCluster(t, ens, func(cfg *Config) {
		cfg.Registerer = reg
		src := pki.source(cfg.ID, testpki.Options{})
		cfg.PeerTLS = src
	})
	r := c.open("m0")
	c.waitPrimary(20 * time.Second)
	labels := func(extra ...string) map[string]string {
		l := map[string]string{"member": r.ID(), "room": c.room}
		for i := 0; i+1 < len(extra); i += 2 {
			l[extra[i]] = extra[i+1]
		}
		return l
	}
	val := func(name string, l map[string]string) float64 {
		t.Helper()
		v, ok := gather(t, reg, name, l)
		require.True(t, ok, "%s%v missing", name, l)
		return v
	}
	notAfter := r.cfg.PeerTLS.Certificate().NotAfter
	require.Equal(t, float64(notAfter.Unix()), val("roomlog_replica_tls_cert_not_after_seconds", labels("link", "peer")))
	require.Equal(t, 0.0, val("roomlog_replica_tls_files_error", labels("link", "peer")))
	_, ok := gather(t, reg, "roomlog_replica_tls_cert_not_after_seconds", labels("link", "zookeeper"))
	require.False(t, ok, "no ZooKeeper TLS, no series")
	require.Equal(t, 0.0, val("roomlog_replica_room_lost", labels()))
	require.Equal(t, 0.0, val("roomlog_replica_room_version_blocked", labels()))

	require.NoError(t, os.WriteFile(files.Cert, []byte("not a certificate"), 0o600))
	require.Error(t, r.cfg.PeerTLS.Reload())
	require.Equal(t, 1.0, val("roomlog_replica_tls_files_error", labels("link", "peer")))
	require.Equal(t, float64(notAfter.Unix()), val("roomlog_replica_tls_cert_not_after_seconds", labels("link", "peer")), "the old certificate is still in use")
}

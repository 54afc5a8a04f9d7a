package logroom

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/faultnet"
)

// newProxy is a faultnet proxy in front of one ZooKeeper server: tests
// reset, freeze (Blackhole then Reset), drop requests or drop replies on
// it, so connection loss and session expiry happen exactly when they want.
func newProxy(t testing.TB, target string) *faultnet.Proxy {
	t.Helper()
	p, err := faultnet.New(faultnet.Config{Targets: []string{target}})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	return p
}

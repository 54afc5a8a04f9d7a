package zkx

import (
	"context"
	"testing"
	"time"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/stretchr/testify/require"
)

// needZK fails under CI=true and skips otherwise when ZooKeeper is missing.
func needZK(t testing.TB) {
	t.Helper()
	zkensemble.Require(t)
}

func testCtx(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func dial(t testing.TB, servers []string) *Client {
	t.Helper()
	c, err := Dial(testCtx(t, 30*time.Second), DialConfig{Servers: servers, SessionTimeout: 4 * time.Second})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

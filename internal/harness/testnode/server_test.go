package testnode

import (
	"context"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
)

// TestGet drives GET /get on two node processes: barrier reads on the
// standby and the primary see every acknowledged write; a primary deposed
// while paused answers a barrier read, once resumed, with its successor's
// writes or an error, never with its own stale state.
func TestGet(t *testing.T) {
	ens := zkensemble.ForTest(t, zkensemble.Options{Servers: 1})
	c := ClusterForTest(t, ClusterOptions{Nodes: 2, ZK: ens.Addrs(), Node: NodeOptions{SessionTimeout: 2 * time.Second}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	p, err := c.WaitPrimary(ctx)
	require.NoError(t, err)
	var s *Node
	for _, n := range c.Nodes() {
		if n != p {
			s = n
		}
	}

	e, err := SetEntry("p/a", []byte("va"))
	require.NoError(t, err)
	res, err := p.Propose(ctx, e)
	require.NoError(t, err)
	for _, n := range []*Node{s, p} {
		g, err := n.Client().Get(ctx, "p/a", true)
		require.NoError(t, err)
		require.True(t, g.Found)
		require.Equal(t, "p/a", g.Key)
		require.Equal(t, []byte("va"), g.Value)
		require.GreaterOrEqual(t, g.Barrier, res.Index)
		require.GreaterOrEqual(t, g.Index, g.Barrier)
		if n == p {
			require.Equal(t, RolePrimary, g.Role)
			require.Positive(t, g.Epoch)
		} else {
			require.Equal(t, RoleStandby, g.Role)
		}
	}
	g, err := s.Client().Get(ctx, "p/none", true)
	require.NoError(t, err)
	require.False(t, g.Found)
	require.Nil(t, g.Value)
	require.GreaterOrEqual(t, g.Index, res.Index)
	// Without a barrier: a plain local read, no read point.
	g, err = p.Client().Get(ctx, "p/a", false)
	require.NoError(t, err)
	require.True(t, g.Found)
	require.Zero(t, g.Barrier)

	// Malformed requests.
	err = p.Client().do(ctx, http.MethodGet, "/get", nil, nil, nil)
	require.ErrorIs(t, err, ErrBadRequest)
	err = p.Client().do(ctx, http.MethodGet, "/get", url.Values{"key": {"p/a"}, "barrier": {"2"}}, nil, nil)
	require.ErrorIs(t, err, ErrBadRequest)

	// Pause the primary past its session: the standby takes over and
	// acknowledges a write the old primary has not seen.
	require.NoError(t, p.Pause())
	np, err := c.WaitPrimary(ctx)
	require.NoError(t, err)
	require.Equal(t, s, np)
	e, err = SetEntry("p/b", []byte("vb"))
	require.NoError(t, err)
	res, err = s.Propose(ctx, e)
	require.NoError(t, err)
	require.NoError(t, p.Resume())
	fresh, failed := 0, 0
	deadline := time.Now().Add(20 * time.Second)
	for fresh < 3 && time.Now().Before(deadline) {
		rctx, rcancel := context.WithTimeout(ctx, 2*time.Second)
		g, err := p.Client().Get(rctx, "p/b", true)
		rcancel()
		if err != nil {
			failed++
			continue
		}
		require.True(t, g.Found, "a barrier read on the deposed primary returned its stale state: %+v", g)
		require.Equal(t, []byte("vb"), g.Value)
		require.GreaterOrEqual(t, g.Index, res.Index)
		fresh++
	}
	t.Logf("barrier reads on the resumed old primary: %d fresh, %d errors", fresh, failed)
	require.Equal(t, 3, fresh, "the old primary never answered a barrier read")
}

package election_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/election"
)

// TestJoinGaveUpMidCreate: Join's ctx ends while its create is on the wire
// (the proxy delays every byte), so the create lands after Join returned
// its error. The late node is deleted: it does not stay in the shared
// client's session, lowest in the line, leaving nobody to lead.
func TestJoinGaveUpMidCreate(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 30*time.Second)
	admin := recipetest.Dial(t, nil, 4*time.Second)
	_, err := admin.Conn().Create(dir, nil, 0, admin.ACL())
	require.NoError(t, err)
	px := recipetest.DialProxiedSession(t, 6*time.Second)
	px.Proxy.Delay(300*time.Millisecond, 0)
	jctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	_, err = election.Join(jctx, election.Config{Client: px.Client, Dir: dir, ID: "late", Logger: recipetest.Logger(t)})
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// The create lands at the server about 300ms after it was sent (the
	// directory's child version counts it, deleted or not).
	recipetest.Eventually(t, 5*time.Second, "the late create lands", func() bool {
		_, st, err := admin.Conn().Exists(dir)
		require.NoError(t, err)
		return st.Cversion >= 1
	})
	b := join(t, recipetest.Dial(t, nil, 4*time.Second), dir, "b")
	bctx, bcancel := context.WithTimeout(ctx, 5*time.Second)
	defer bcancel()
	_, err = b.Await(bctx)
	require.NoError(t, err, "a candidate node left by the failed Join blocks the line")
	names, _, err := admin.Conn().Children(dir)
	require.NoError(t, err)
	require.Equal(t, []string{b.Node()}, names, "only b's node is left")
}

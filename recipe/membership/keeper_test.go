package membership_test

import (
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/membership"
)

// TestExpiryWhileKeeperBlocked: the member's session expires while its
// keeper is blocked writing an Update (waiting for the session). The
// keeper finds the node gone in the new session and re-creates it there;
// the session events that queued meanwhile (the old session's expiry)
// are then read, and must not make it drop the node it now holds: one
// expiry is one rebuild.
func TestExpiryWhileKeeperBlocked(t *testing.T) {
	dir := recipetest.Dir(t)
	ctx := recipetest.Ctx(t, 60*time.Second)
	b := recipetest.DialProxied(t)
	rb, err := membership.Join(ctx, b.Client, dir, "b", []byte("v1"), membership.JoinOptions{Logger: recipetest.Logger(t)})
	require.NoError(t, err)
	defer rb.Leave(ctx)
	// The keeper reports each session event it handled once it rebuilt
	// the node, with whether it still held the node then and how many
	// rebuilds it counted.
	type seen struct {
		ev         zk.Event
		registered bool
		rebuilds   int
	}
	events := make(chan seen, 256)
	membership.SetKeeperEventHook(rb, func(ev zk.Event) {
		s := seen{ev, rb.Registered(), rb.Rebuilds()}
		if s.rebuilds == 0 {
			return // before the rebuild: the client retrying during the cut
		}
		select {
		case events <- s:
		default:
		}
	})

	b.CutUntilExpired(t)
	done := make(chan error, 1)
	go func() { done <- rb.Update(ctx, []byte("v2")) }()
	b.Heal(t)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Update did not return after the rebuild")
	}
	newSid := b.SessionID()
	require.Equal(t, 1, rb.Rebuilds())
	// Every event queued while the keeper was blocked is handled after
	// the rebuild, up to the new session's: none of them loses the node.
	deadline := time.After(10 * time.Second)
	for {
		var s seen
		select {
		case s = <-events:
		case <-deadline:
			t.Fatal("the keeper did not handle the new session's event")
		}
		require.True(t, s.registered, "the node of the new session dropped on %v", s.ev)
		require.Equal(t, 1, s.rebuilds, "after %v", s.ev)
		if s.ev.Type == zk.EventSession && s.ev.State == zk.StateHasSession && b.SessionID() == newSid {
			break
		}
	}
	require.True(t, rb.Registered())
	require.Equal(t, 1, rb.Rebuilds())
	got, st, err := b.Conn().Get(rb.Path())
	require.NoError(t, err)
	require.Equal(t, []byte("v2"), got)
	require.Equal(t, newSid, st.EphemeralOwner)
}

package membership_test

import (
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/harness/recipetest"
	"github.com/roomlog/roomlog/recipe/membership"
)

// TestSuspendedPromptlyMidRefresh: the watcher's link is cut while a
// refresh's getData is in flight (its reply dropped, then the connection
// reset). Suspended is delivered and Stale() is true while the link is
// still cut, not once it heals; after the heal the watcher reports
// Reconnected (same session) or Lost (the session expired meanwhile) and
// converges on the directory.
func TestSuspendedPromptlyMidRefresh(t *testing.T) {
	for _, tc := range []struct {
		name    string
		session time.Duration
		expire  bool
		want    []membership.SessionEvent
	}{
		{"same session", 10 * time.Second, false, []membership.SessionEvent{membership.Suspended, membership.Reconnected}},
		{"expired", recipetest.ProxiedSession, true, []membership.SessionEvent{membership.Suspended, membership.Lost}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := recipetest.Dir(t)
			ctx := recipetest.Ctx(t, 60*time.Second)
			admin := recipetest.Dial(t, nil, 4*time.Second)
			_, err := admin.Conn().Create(dir, nil, 0, admin.ACL())
			require.NoError(t, err)
			var others []string
			for i := range 5 {
				id := fmt.Sprintf("m%02d", i)
				others = append(others, id)
				_, err := admin.Conn().Create(dir+"/"+id, nil, zk.FlagEphemeral, admin.ACL())
				require.NoError(t, err)
			}
			p := recipetest.DialProxiedSession(t, tc.session)
			// probe is a member held by the watcher's own session: it
			// vanishes when that session expires.
			probe := dir + "/probe"
			_, err = p.Conn().Create(probe, nil, zk.FlagEphemeral, p.ACL())
			require.NoError(t, err)
			rec := newRecorder()
			opts := rec.options()
			opts.Logger = recipetest.Logger(t)
			w, err := membership.Watch(ctx, p.Client, dir, opts)
			require.NoError(t, err)
			defer w.Close()
			require.Len(t, w.Members(), len(others)+1)
			sid := p.SessionID()

			paused, release := make(chan struct{}), make(chan struct{})
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()
			var once sync.Once
			membership.SetBeforeRead(w, func(string) {
				once.Do(func() {
					close(paused)
					select {
					case <-release:
					case <-time.After(30 * time.Second):
					}
				})
			})
			_, err = admin.Conn().Create(dir+"/new", nil, zk.FlagEphemeral, admin.ACL())
			require.NoError(t, err)
			select {
			case <-paused:
			case <-time.After(10 * time.Second):
				t.Fatal("no refresh after a member joined")
			}
			// The refresh's next getData goes up and its reply is dropped:
			// the read is in flight when the link is cut.
			p.Proxy.DropReplies()
			dropped := p.Proxy.Stats().DroppedDown
			close(release)
			recipetest.Eventually(t, 5*time.Second, "a reply is dropped", func() bool { return p.Proxy.Stats().DroppedDown > dropped })
			p.Proxy.Cut()
			recipetest.Eventually(t, 5*time.Second, "the client notices the cut", func() bool { return p.State() != zk.StateHasSession })
			recipetest.Eventually(t, 2*time.Second, "Suspended and Stale while the link is cut", func() bool {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				return w.Stale() && slices.Equal(rec.sessions, []membership.SessionEvent{membership.Suspended})
			})
			want := append(slices.Clone(others), "new")
			if tc.expire {
				waitGone(t, admin, probe, 20*time.Second)
			} else {
				want = append(want, "probe")
			}
			require.True(t, w.Stale(), "stale until the link heals")
			p.Proxy.Heal()
			recipetest.Eventually(t, 20*time.Second, "the watcher converges", func() bool {
				rec.mu.Lock()
				defer rec.mu.Unlock()
				return !w.Stale() && slices.Equal(ids(w.Members()), want) && slices.Equal(rec.sessions, tc.want)
			})
			if !tc.expire {
				require.Equal(t, sid, p.SessionID())
			}
			rec.check(t)
		})
	}
}

// waitGone waits until p does not exist, as c sees it, failing after d.
func waitGone(t *testing.T, c interface{ Conn() *zk.Conn }, p string, d time.Duration) {
	t.Helper()
	deadline := time.After(d)
	for {
		ok, _, ch, err := c.Conn().ExistsW(p)
		require.NoError(t, err)
		if !ok {
			return
		}
		select {
		case <-ch:
		case <-deadline:
			t.Fatalf("%s still exists after %v", p, d)
		}
	}
}

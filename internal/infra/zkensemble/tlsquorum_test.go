package zkensemble

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
	"github.com/roomlog/roomlog/tlsfiles"
)

// TestTLSQuorumNotInClear: in a 3-server TLS ensemble a znode written
// over TLS never crosses the quorum or election links in clear. Every
// peer link goes through a recording faultnet proxy (FaultNet); the
// marker is written over the secureClientPort of a follower, so it
// crosses the quorum links twice (the request forwarded to the leader,
// the proposal and commit back to every follower). With PlainQuorum (the
// control) the same proxies see the marker: the recording works.
func TestTLSQuorumNotInClear(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    TLSOptions
		inClear bool
	}{
		{"default", TLSOptions{}, false},
		{"PlainQuorum", TLSOptions{PlainQuorum: true}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			opts := tc.opts
			e := ForTest(t, Options{Servers: 3, FaultNet: true, TLS: &opts})
			var peerLinks []string // every quorum and election link, once
			for i := 0; i < 3; i++ {
				for _, name := range e.PeerLinks(i) {
					if !slices.Contains(peerLinks, name) {
						peerLinks = append(peerLinks, name)
					}
				}
			}
			for _, name := range peerLinks {
				e.Net().Link(name).Record()
			}
			leader, err := e.Leader(t.Context())
			require.NoError(t, err)
			follower := (leader + 1) % 3

			files, err := e.TLSCA().Issue(t.TempDir(), "client", testpki.Options{Client: true})
			require.NoError(t, err)
			src, err := tlsfiles.Load(files)
			require.NoError(t, err)
			dial := src.DialContext(&net.Dialer{Timeout: 5 * time.Second}, 5*time.Second)
			conn := connectDialer(t, []string{e.SecureAddrs()[follower]},
				func(network, addr string, timeout time.Duration) (net.Conn, error) {
					ctx, cancel := context.WithTimeout(context.Background(), timeout)
					defer cancel()
					return dial(ctx, network, addr)
				})
			marker := []byte(fmt.Sprintf("quorum-marker-%d", time.Now().UnixNano()))
			_, err = conn.Create("/marker", marker, 0, zk.WorldACL(zk.PermAll))
			require.NoError(t, err)
			// Every server has it: the proposal crossed every quorum link.
			for i := 0; i < 3; i++ {
				c := connect(t, []string{e.Addrs()[i]})
				require.EventuallyWithT(t, func(ct *assert.CollectT) {
					b, _, err := c.Get("/marker")
					require.NoError(ct, err)
					require.Equal(ct, marker, b)
				}, 10*time.Second, 20*time.Millisecond, "server %d", i)
			}
			var seenOn []string
			recorded := 0
			for _, name := range peerLinks {
				l := e.Net().Link(name)
				recorded += l.Recorded()
				if l.Contains(marker) {
					seenOn = append(seenOn, name)
				}
			}
			require.Positive(t, recorded, "the peer links carried traffic")
			if tc.inClear {
				require.NotEmpty(t, seenOn, "control: with a plaintext quorum the proxies see the marker")
			} else {
				require.Empty(t, seenOn, "the marker crossed these peer links in clear")
			}
		})
	}
}

// connectDialer is connect with a dialer (a TLS one).
func connectDialer(t *testing.T, addrs []string, dialer zk.Dialer) *zk.Conn {
	t.Helper()
	has := make(chan struct{}, 1)
	conn, _, err := zk.Connect(addrs, 10*time.Second,
		zk.WithLogger(zkLogger{slog.New(slog.DiscardHandler)}),
		zk.WithDialer(dialer),
		zk.WithEventCallback(func(ev zk.Event) {
			if ev.State == zk.StateHasSession {
				select {
				case has <- struct{}{}:
				default:
				}
			}
		}))
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	select {
	case <-has:
	case <-time.After(20 * time.Second):
		t.Fatalf("no session with %v", addrs)
	}
	return conn
}

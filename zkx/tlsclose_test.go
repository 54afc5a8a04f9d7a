package zkx

import (
	"crypto/tls"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/testpki"
)

// TestTLSCloseDoesNotWaitForPeer: a TLS connection to a server that has
// stopped reading closes at once after a write timed out (go-zookeeper
// closes it, then waits for its send loop before reconnecting).
// tls.Conn.Close would first send close_notify with a 5 s write deadline
// of its own: a server that stops reading added 5 s to every failover.
func TestTLSCloseDoesNotWaitForPeer(t *testing.T) {
	ca, err := testpki.NewCA("close-ca")
	require.NoError(t, err)
	hold := make(chan struct{})
	l := newTLSListener(t, ca, []string{"127.0.0.1"}, func(c net.Conn) {
		// Small buffers, fixed (no autotuning): the window stays shut.
		_ = c.(*tls.Conn).NetConn().(*net.TCPConn).SetReadBuffer(4096)
		<-hold // never reads again
		_ = c.Close()
	})
	t.Cleanup(func() { close(hold) }) // runs before the listener's cleanup
	cli := load(t, issue(t, ca, filepath.Join(t.TempDir(), "cli"), "cli", testpki.Options{Client: true}))
	c := &connector{tls: cli, names: &hostNames{}, bound: time.Second, log: discardLogger(nil)}
	conn, err := c.dial("tcp", "127.0.0.1:"+l.port(), 2*time.Second)
	require.NoError(t, err)
	require.NoError(t, conn.(*boundedConn).Conn.(*tls.Conn).NetConn().(*net.TCPConn).SetWriteBuffer(4096))
	buf := make([]byte, 1<<20)
	deadline := time.Now().Add(20 * time.Second)
	for {
		require.True(t, time.Now().Before(deadline), "writes never blocked")
		require.NoError(t, conn.SetWriteDeadline(time.Now().Add(100*time.Millisecond)))
		if _, err := conn.Write(buf); err != nil {
			var ne net.Error
			require.ErrorAs(t, err, &ne)
			require.True(t, ne.Timeout(), "%v", err)
			break
		}
	}
	// The large write left room for less than a record of its size; fill
	// the rest with small records until one times out too.
	for {
		require.True(t, time.Now().Before(deadline), "writes never blocked")
		require.NoError(t, conn.SetWriteDeadline(time.Now().Add(300*time.Millisecond)))
		if _, err := conn.Write(buf[:1]); err != nil {
			break
		}
	}
	start := time.Now()
	_ = conn.Close()
	took := time.Since(start)
	t.Logf("Close took %v", took)
	require.Less(t, took, time.Second, "Close waited %v for a peer that does not read", took)
	_, err = conn.Read(buf[:1])
	require.Error(t, err, "closed")
}

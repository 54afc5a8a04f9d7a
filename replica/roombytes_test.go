package replica

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/logroom"
)

// zkRoomBytes is what ZooKeeper itself reports for the room: the sum of
// the data lengths of every batch znode (children of the channel znodes),
// and the number of channel and batch znodes.
func zkRoomBytes(t *testing.T, f *forger) (bytes int64, znodes int) {
	t.Helper()
	chPath := f.room.Path("channels")
	chans, _, err := f.conn.Children(chPath)
	require.NoError(t, err)
	for _, ch := range chans {
		names, _, err := f.conn.Children(chPath + "/" + ch)
		require.NoError(t, err)
		znodes += 1 + len(names)
		for _, n := range names {
			ok, st, err := f.conn.Exists(chPath + "/" + ch + "/" + n)
			require.NoError(t, err)
			if ok {
				bytes += int64(st.DataLength)
			}
		}
	}
	return bytes, znodes
}

// TestRoomBytesMatchZooKeeper: Status().RoomBytes, roomlog_replica_room_bytes
// and roomlog_room_bytes equal the data bytes ZooKeeper holds for the room,
// on the primary and on a standby, while the open channel holds batches and
// after a rotation sealed one; RoomCharged is those bytes plus 480 per
// znode; the bound is exported. Before the fix the open channel counted 0
// (every figure read 0 until the first rotation) and roomlog_room_bytes
// was never set on a standby.
func TestRoomBytesMatchZooKeeper(t *testing.T) {
	ens := sharedEnsemble(t)
	reg := prometheus.NewPedanticRegistry()
	const bound = 8 << 20
	c := newCluster(t, ens, func(cfg *Config) {
		cfg.Registerer = reg
		cfg.Writer.MaxRoomBytes = bound
	})
	c.openN(2)
	p := c.waitPrimary(20 * time.Second)
	s := c.other(p)
	f := newForger(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	propose := func(n int) {
		for i := 0; i < n; i++ {
			_, err := p.Propose(ctx, setOp(fmt.Sprintf("k%d", i), strings.Repeat("v", 50+i)))
			require.NoError(t, err)
		}
		idx, err := p.Barrier(ctx)
		require.NoError(t, err)
		require.NoError(t, s.WaitApplied(ctx, idx))
	}
	check := func(stage string) {
		t.Helper()
		for _, r := range []*Replica{p, s} {
			labels := map[string]string{"member": r.ID(), "room": c.room}
			var last string
			var want int64
			var znodes int
			ok := pollUntil(20*time.Second, func() bool {
				// ZooKeeper's figures are read again each time: a
				// checkpoint may delete the sealed channel meanwhile.
				want, znodes = zkRoomBytes(t, f)
				require.Greater(t, want, int64(0))
				st := r.Status()
				rb, _ := gather(t, reg, "roomlog_replica_room_bytes", labels)
				lb, _ := gather(t, reg, "roomlog_room_bytes", labels)
				ch, _ := gather(t, reg, "roomlog_replica_room_charged_bytes", labels)
				last = fmt.Sprintf("status %d, replica gauge %v, room gauge %v, charged %v (status %d)", st.RoomBytes, rb, lb, ch, st.RoomCharged)
				return st.RoomBytes == want && rb == float64(want) && lb == float64(want) &&
					st.RoomCharged == want+int64(znodes)*logroom.ZnodeHeapBytes && ch == float64(st.RoomCharged)
			})
			require.True(t, ok, "%s: %s (%s) does not report ZooKeeper's %d bytes in %d znodes: %s", stage, r.ID(), r.Status().Role, want, znodes, last)
			t.Logf("%s: %s reports %d bytes (ZooKeeper: %d in %d znodes)", stage, r.ID(), r.Status().RoomBytes, want, znodes)
			max, ok := gather(t, reg, "roomlog_replica_room_max_bytes", labels)
			require.True(t, ok)
			require.Equal(t, float64(bound), max)
			require.Equal(t, int64(bound), r.Status().MaxRoomBytes)
		}
	}

	propose(40)
	check("open channel only")
	require.NoError(t, p.Checkpoint(ctx))
	propose(25)
	check("after a checkpoint")
}

// pollUntil polls cond until it holds or d passes.
func pollUntil(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

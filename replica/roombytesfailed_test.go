package replica

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// TestFailedMemberExportsNoRoomFigures: a failed member stops reading the
// channels, so its room figures are its last measurement for good. In a
// TestAlertsLive run three members failed right after the room was filled
// to 86 % of its bound; the live primary then measured the room freed,
// but the failed members kept exporting 86 % and RoomlogRoomNearFull
// never resolved. A failed member now exports no room bytes, charged
// bytes or channel count (the bound stays: it is configuration), while a
// live member's figures still match ZooKeeper's.
func TestFailedMemberExportsNoRoomFigures(t *testing.T) {
	ens := sharedEnsemble(t)
	reg := prometheus.NewPedanticRegistry()
	skews := map[string]*skewApplier{}
	c := newCluster(t, ens, func(cfg *Config) {
		cfg.Registerer = reg
		a := &skewApplier{}
		skews[cfg.ID] = a
		cfg.Applier = a
	})
	c.openN(2)
	p := c.waitPrimary(20 * time.Second)
	s := c.other(p)
	f := newForger(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	last := proposeN(t, ctx, p, 10)
	require.NoError(t, s.WaitApplied(ctx, last))
	figures := []string{"roomlog_replica_room_bytes", "roomlog_replica_room_charged_bytes", "roomlog_replica_room_channels"}
	labels := func(r *Replica) map[string]string { return map[string]string{"member": r.ID(), "room": c.room} }
	require.True(t, pollUntil(20*time.Second, func() bool {
		want, _ := zkRoomBytes(t, f)
		v, ok := gather(t, reg, "roomlog_replica_room_bytes", labels(s))
		return ok && v == float64(want)
	}), "the standby measures the room")

	// The standby of two that disagrees with the primary fails.
	poison := setOp("poison", "v")
	skews[s.ID()].bad.Store(&poison)
	_, err := p.Propose(ctx, poison)
	require.NoError(t, err)
	waitFailed(t, s, 15*time.Second, ErrDiverged)
	for _, name := range figures {
		_, ok := gather(t, reg, name, labels(s))
		require.False(t, ok, "a failed member exports no %s", name)
		_, ok = gather(t, reg, name, labels(p))
		require.True(t, ok, "the primary still exports %s", name)
	}
	_, ok := gather(t, reg, "roomlog_replica_room_max_bytes", labels(s))
	require.True(t, ok, "the bound is configuration: still exported")
}

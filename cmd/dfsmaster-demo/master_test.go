package main

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/cmd/dfsmaster-demo/api"
	"github.com/roomlog/roomlog/replica"
)

// TestAPIMembersLag: a member's lag is the primary's applied index minus
// its own, from the replica's member list; the reporting master's own row
// uses its local applied index.
func TestAPIMembersLag(t *testing.T) {
	members := []replica.MemberStatus{
		{ID: "m1", Addr: "h:1", Role: replica.RolePrimary, Applied: 100},
		{ID: "m2", Addr: "h:2", Role: replica.RoleStandby, Applied: 90},
		{ID: "m3", Addr: "h:3", Role: replica.RoleStandby, Applied: 103}, // published after the primary's last publish
	}
	lags := func(ms []api.Member) map[string][2]uint64 {
		out := map[string][2]uint64{}
		for _, m := range ms {
			out[m.ID] = [2]uint64{m.AppliedIndex, m.Lag}
		}
		return out
	}
	// Seen from a standby: against the primary's published index.
	got := apiMembers(replica.Status{ID: "m2", Role: replica.RoleStandby, Applied: 95, PrimaryID: "m1", Members: members})
	require.Equal(t, map[string][2]uint64{"m1": {100, 0}, "m2": {95, 5}, "m3": {103, 0}}, lags(got))
	require.Equal(t, api.Member{ID: "m1", Addr: "h:1", Role: api.RolePrimary, AppliedIndex: 100}, got[0])
	// Seen from the primary: against its own, fresher, applied index.
	got = apiMembers(replica.Status{ID: "m1", Role: replica.RolePrimary, Applied: 110, PrimaryID: "m1", Members: members})
	require.Equal(t, map[string][2]uint64{"m1": {110, 0}, "m2": {90, 20}, "m3": {103, 7}}, lags(got))
	// No primary known: against the highest applied index.
	got = apiMembers(replica.Status{ID: "m2", Role: replica.RoleTakingOver, Applied: 90, Members: members[1:]})
	require.Equal(t, map[string][2]uint64{"m2": {90, 13}, "m3": {103, 0}}, lags(got))
	require.Empty(t, apiMembers(replica.Status{ID: "m1"}))
}

// TestRoleHistory: the adapter keeps the last api.MaxRoleChanges role
// changes, newest first.
func TestRoleHistory(t *testing.T) {
	m := &replicaMaster{}
	require.Empty(t, m.roleHistory())
	t0 := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for i := 0; i < api.MaxRoleChanges+5; i++ {
		role := replica.RoleStandby
		if i%2 == 1 {
			role = replica.RolePrimary
		}
		m.recordRole(replica.RoleChange{Role: role, Epoch: uint64(i), Reason: fmt.Sprint("r", i), At: t0.Add(time.Duration(i) * time.Second)})
	}
	h := m.roleHistory()
	require.Len(t, h, api.MaxRoleChanges)
	require.Equal(t, api.RoleChange{At: t0.Add(14 * time.Second), Role: api.RoleStandby, Epoch: 14, Reason: "r14"}, h[0])
	require.Equal(t, api.RoleChange{At: t0.Add(5 * time.Second), Role: api.RolePrimary, Epoch: 5, Reason: "r5"}, h[len(h)-1])
	h[0].Reason = "changed"
	require.Equal(t, "r14", m.roleHistory()[0].Reason, "a copy")
}

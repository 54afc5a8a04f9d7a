package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/replica"
)

// TestMemberRowObserver: an observer's member data (observer: true, role
// standby) is a live member whose row says so; the table notes it.
func TestMemberRowObserver(t *testing.T) {
	m := replica.DescribeMemberZnode("ns1", "/roomlog/ns1/members/o1", mustMsgpack(map[string]any{
		"v": 1, "id": "o1", "addr": "10.0.0.6:8080", "role": "standby", "epoch": 3, "applied": 42, "ckpt": 40,
		"observer": true}), 0x99)
	require.Empty(t, m.Foreign)
	require.True(t, m.Observer)
	require.Equal(t, replica.RoleStandby, m.Role)
	rows, memberForeign, _ := memberRows(replica.RoomView{Room: "ns1", Members: []replica.MemberView{m}})
	require.Empty(t, memberForeign)
	require.Equal(t, memberRow{ID: "o1", Addr: "10.0.0.6:8080", Role: "standby", Epoch: 3, Applied: 42, Checkpoint: 40,
		Observer: true, Session: "0x99"}, rows[0])
}

package replica

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/logroom"
)

// TestOperatorRequestTrust: the operator request znode is input, not
// truth. A garbled one, or one in a state no tool writes, is an error
// naming it (never a request the tool waits on forever, never a panic); a
// request created in the future, abandoned long ago or for an epoch no
// primary reached is answered failed, not carried out; one left "running" by a primary that is not
// this term's is answered (outcome unknown) instead of stalling; one this
// primary claimed in this term without carrying it out (the claim's
// reply lost) is carried out once; and the claim is fenced: a primary
// whose epoch was taken claims nothing.
func TestOperatorRequestTrust(t *testing.T) {
	ens := sharedEnsemble(t)
	c := newCluster(t, ens, func(cfg *Config) { cfg.SessionTimeout = 2 * time.Second })
	c.open("a")
	a := c.waitPrimary(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i := range 5 {
		_, err := a.Propose(ctx, setOp("k", string(rune('a'+i))))
		require.NoError(t, err)
	}
	conn := a.conn
	path := a.room.Path(operatorZ)
	tm := a.currentTerm()
	require.NotNil(t, tm)
	epoch := tm.epoch
	put := func(data []byte) {
		t.Helper()
		if err := conn.Delete(path, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
			require.NoError(t, err)
		}
		_, err := conn.Create(path, data, 0, zk.WorldACL(zk.PermAll))
		require.NoError(t, err)
	}
	read := func() operatorRecord {
		t.Helper()
		b, _, err := conn.Get(path)
		require.NoError(t, err)
		var o operatorRecord
		require.NoError(t, decode(b, &o))
		return o
	}
	waitAnswer := func(id string) operatorRecord {
		t.Helper()
		var o operatorRecord
		deadline := time.Now().Add(20 * time.Second)
		for {
			o = read()
			if o.ID == id && (o.State == RequestDone || o.State == RequestFailed) {
				return o
			}
			require.True(t, time.Now().Before(deadline), "request %s was never answered: %+v", id, o)
			time.Sleep(20 * time.Millisecond)
		}
	}
	now := time.Now()
	rec := func(id string) operatorRecord {
		return operatorRecord{V: formatVersion1, ID: id, Kind: RequestCheckpoint, Epoch: epoch, Created: now.UnixMilli()}
	}

	// Garbled bytes: an error naming the znode, for the reader and for a
	// new request; the primary keeps serving.
	put([]byte{0xc1, 'g', 'a', 'r', 'b'})
	_, _, err := ReadRequest(ctx, a.client, "", c.room)
	require.ErrorContains(t, err, path)
	_, err = SubmitRequest(ctx, a.client, "", c.room, OperatorRequest{Kind: RequestCheckpoint})
	require.ErrorContains(t, err, path)
	require.ErrorContains(t, err, "delete it")

	// A state no tool or member writes: an error, not a request to wait on.
	bogus := rec("bogus")
	bogus.State = "bogus"
	put(encode(bogus))
	_, _, err = ReadRequest(ctx, a.client, "", c.room)
	require.ErrorContains(t, err, `state "bogus"`)

	ck0 := a.localCkpt.Load()
	// Created in the future (a clock no member shares, or a forgery that
	// would never count as abandoned): refused, not carried out.
	future := rec("future")
	future.Created = now.Add(time.Hour).UnixMilli()
	put(encode(future))
	o := waitAnswer("future")
	require.Equal(t, RequestFailed, o.State)
	require.Contains(t, o.Error, "in the future")
	// Abandoned long ago: expired, not carried out now.
	old := rec("old")
	old.Created = now.Add(-2 * requestStaleAfter).UnixMilli()
	put(encode(old))
	o = waitAnswer("old")
	require.Equal(t, RequestFailed, o.State)
	require.Contains(t, o.Error, "expired")
	require.Equal(t, ck0, a.localCkpt.Load(), "no checkpoint was made for a refused request")

	// For an epoch no primary has reached: answered by the primary in
	// office (its fenced answer lands, so the room's epoch is its own).
	ahead := rec("ahead")
	ahead.Epoch = epoch + 100
	put(encode(ahead))
	o = waitAnswer("ahead")
	require.Equal(t, RequestFailed, o.State)
	require.Contains(t, o.Error, "above the room's epoch")

	// Left "running" by a member that is not this term's primary: answered
	// (its outcome is unknown), not left to stall.
	ghost := rec("ghost")
	ghost.State, ghost.By, ghost.ClaimEpoch = RequestRunning, "ghost", epoch-1
	put(encode(ghost))
	o = waitAnswer("ghost")
	require.Equal(t, RequestFailed, o.State)
	require.Contains(t, o.Error, "outcome unknown")

	// Claimed by this primary in this term, never carried out (the claim's
	// reply was lost): carried out, once.
	mine := rec("mine")
	mine.State, mine.By, mine.ClaimEpoch = RequestRunning, "a", epoch
	put(encode(mine))
	o = waitAnswer("mine")
	require.Equal(t, RequestDone, o.State, o.Error)
	require.Greater(t, a.localCkpt.Load(), ck0)
	done := read()
	time.Sleep(300 * time.Millisecond)
	require.Equal(t, done, read(), "answered once")

	// Fencing: once another writer took the epoch (its znode changed), this
	// primary's claim does not land.
	epochPath := a.room.Path(logroom.EpochZnode)
	data, _, err := conn.Get(epochPath)
	require.NoError(t, err)
	_, err = conn.Set(epochPath, data, -1)
	require.NoError(t, err)
	put(encode(rec("fenced")))
	a.operatorStep(ctx, path, tm)
	o = read()
	require.NotEqual(t, RequestDone, o.State, "a fenced primary carried out a request: %+v", o)
	if o.State != RequestPending {
		require.Contains(t, o.Error, "stale", "only a primary of a later epoch answers it: %+v", o)
	}
}

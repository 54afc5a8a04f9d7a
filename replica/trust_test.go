package replica

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/store"
)

// Trust-boundary tests at the replica level: a second ZooKeeper client
// tampers with the room for real, and the replicas must end in a named,
// visible failed state — never in two states at one index, never in a
// quiet stall.

// forger is a foreign client of the room.
type forger struct {
	t    *testing.T
	conn *zk.Conn
	c    *logroom.Client
	room *logroom.Room
}

func newForger(t *testing.T, cl *cluster) *forger {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: cl.ens.Addrs(), SessionTimeout: 4 * time.Second})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	room, err := logroom.OpenRoom(ctx, c, cl.room, logroom.RoomOptions{})
	require.NoError(t, err)
	return &forger{t: t, conn: c.Conn(), c: c, room: room}
}

// openChannel returns the number and path of the room's open channel.
func (f *forger) openChannel() (uint64, string) {
	f.t.Helper()
	chans, err := f.room.Channels(context.Background())
	require.NoError(f.t, err)
	require.NotEmpty(f.t, chans)
	last := chans[len(chans)-1]
	require.False(f.t, last.Sealed)
	return last.Num, f.room.Path("channels", fmt.Sprintf("ch-%020d", last.Num))
}

// deleteTree deletes path and its children (no marks, no checks).
func (f *forger) deleteTree(path string) {
	f.t.Helper()
	names, _, err := f.conn.Children(path)
	require.NoError(f.t, err)
	for _, n := range names {
		require.NoError(f.t, f.conn.Delete(path+"/"+n, -1))
	}
	require.NoError(f.t, f.conn.Delete(path, -1))
}

type memberState struct {
	applied uint64
	hash    string
}

func snapshotStates(t *testing.T, reps []*Replica) map[string]memberState {
	t.Helper()
	out := map[string]memberState{}
	for _, r := range reps {
		h, i, err := r.StateHash()
		require.NoError(t, err)
		out[r.ID()] = memberState{i, h}
	}
	return out
}

// proposeN proposes n entries k0..k<n-1> on p and returns the last index.
func proposeN(t *testing.T, ctx context.Context, p *Replica, n int) uint64 {
	t.Helper()
	var last uint64
	for i := 0; i < n; i++ {
		res, err := p.Propose(ctx, setOp(fmt.Sprintf("k%d", i), "v"))
		require.NoError(t, err)
		last = res.Index
	}
	return last
}

// waitFailed waits until r reports a failure that wraps one of want.
func waitFailed(t *testing.T, r *Replica, d time.Duration, want ...error) error {
	t.Helper()
	var got error
	require.Eventually(t, func() bool {
		s := r.Status()
		got = s.Err
		return s.Role == RoleFailed && s.Err != nil
	}, d, 5*time.Millisecond, "%s fails", r.ID())
	for _, w := range want {
		if errors.Is(got, w) {
			return got
		}
	}
	t.Fatalf("%s failed with %v, want one of %v", r.ID(), got, want)
	return nil
}

// TestDeletedOpenChannelEveryReplicaRefuses: a foreign client deletes the
// open channel. Before the trust-boundary work the primary failed with a
// hint ("wrong data dir"), a fresh member then became primary and wrote new
// entries at indexes the others had applied. Now every member, including a
// fresh one, ends failed with a named corruption, and no index is applied
// twice with different state.
func TestDeletedOpenChannelEveryReplicaRefuses(t *testing.T) {
	ens := sharedEnsemble(t)
	cl := newCluster(t, ens, nil)
	reps := cl.openN(3)
	p := cl.waitPrimary(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	last := proposeN(t, ctx, p, 20)
	cl.waitConverged(last, 20*time.Second)
	before := snapshotStates(t, reps)

	f := newForger(t, cl)
	_, chPath := f.openChannel()
	f.deleteTree(chPath)

	// The primary learns it at its next write: not acknowledged.
	_, err := p.Propose(ctx, setOp("after", "delete"))
	require.Error(t, err)

	// A fresh member (the "fix" the old message invited) must not lead.
	fresh := cl.open("fresh")
	for _, r := range append(reps, fresh) {
		err := waitFailed(t, r, 40*time.Second, logroom.ErrCorrupt, logroom.ErrDiverged)
		require.Contains(t, err.Error(), cl.room)
		require.NotContains(t, err.Error(), "wrong data dir")
	}
	after := snapshotStates(t, reps)
	require.Equal(t, before, after, "no member applied anything past the deletion")
	fs := fresh.Status()
	require.NotEqual(t, RolePrimary, fs.Role)
	ok, _, err := f.conn.Exists(chPath)
	require.NoError(t, err)
	require.False(t, ok, "nobody re-created the deleted channel")
	for _, r := range append(reps, fresh) {
		_, err := r.Propose(ctx, setOp("x", "y"))
		require.ErrorIs(t, err, ErrFailed)
	}
}

// TestRestartAfterForgedHistory: while a member is down, a foreign client
// replaces the last batch it applied with another valid batch (same name,
// same indexes, other entries). The member, restarted with its own data,
// must report divergence naming the batch and both identities, not come
// up as a standby or a primary on either history.
func TestRestartAfterForgedHistory(t *testing.T) {
	ens := sharedEnsemble(t)
	cl := newCluster(t, ens, nil)
	m0 := cl.open("m0")
	cl.waitPrimary(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := 0; i < 10; i++ {
		_, err := m0.Propose(ctx, setOp(fmt.Sprintf("k%d", i), "mine"))
		require.NoError(t, err)
	}
	hash, applied, err := m0.StateHash()
	require.NoError(t, err)
	require.EqualValues(t, 10, applied)
	cl.close("m0")

	f := newForger(t, cl)
	_, chPath := f.openChannel()
	names, _, err := f.conn.Children(chPath)
	require.NoError(t, err)
	sort.Strings(names)
	lastPath := chPath + "/" + names[len(names)-1]
	data, _, err := f.conn.Get(lastPath)
	require.NoError(t, err)
	b, err := logroom.DecodeBatch(data)
	require.NoError(t, err)
	require.EqualValues(t, 10, b.Last())
	other := make([][]byte, b.Count)
	for i := range other {
		other[i] = setOp("k0", "theirs")
	}
	forged, err := logroom.EncodeBatch(b.Epoch, b.First, other)
	require.NoError(t, err)
	require.NoError(t, f.conn.Delete(lastPath, -1))
	_, err = f.conn.Create(lastPath, forged, 0, zk.WorldACL(zk.PermAll))
	require.NoError(t, err)

	// Open refuses before joining (it used to join and fail at once).
	_, err = Open(ctx, cl.config("m0"))
	require.ErrorIs(t, err, ErrDiverged)
	require.ErrorIs(t, err, ErrRoomLost)
	require.Contains(t, err.Error(), lastPath)
	require.Contains(t, err.Error(), "the log holds batch")
	st, err := store.Open(filepath.Join(cl.config("m0").DataDir, "store"), &store.Options{ReadOnly: true})
	require.NoError(t, err)
	defer st.Close()
	h2, _, err := st.StateHash()
	require.NoError(t, err)
	require.Equal(t, hash, h2)
	require.EqualValues(t, 10, st.AppliedIndex(), "nothing of the other history applied")
}

// TestEpochGarbageFailsVisibly: an epoch znode that does not decode. Before,
// no primary was ever elected and every member looked like a healthy
// standby. Now each member that tries to take over fails with the named
// corruption, resigns (so the next candidate gets its turn: a failed lowest
// candidate must not block the election), and Status shows it.
func TestEpochGarbageFailsVisibly(t *testing.T) {
	ens := sharedEnsemble(t)
	cl := newCluster(t, ens, nil)
	reps := cl.openN(2)
	p := cl.waitPrimary(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	_, err := p.Propose(ctx, setOp("a", "1"))
	require.NoError(t, err)

	f := newForger(t, cl)
	_, err = f.conn.Set(f.room.Path("epoch"), []byte("\xc1 garbage"), -1)
	require.NoError(t, err)
	require.NoError(t, p.StepDown(ctx))

	for _, r := range reps {
		err := waitFailed(t, r, 40*time.Second, logroom.ErrCorrupt)
		require.Contains(t, err.Error(), f.room.Path("epoch"))
	}
	// Both resigned: no candidate or member node of theirs is left.
	require.Eventually(t, func() bool {
		cands, _, err := f.conn.Children(f.room.Path("election"))
		if err != nil || len(cands) != 0 {
			return false
		}
		mems, _, err := f.conn.Children(f.room.Path("members"))
		return err == nil && len(mems) == 0
	}, 10*time.Second, 5*time.Millisecond, "failed members resign their znodes")
	for _, r := range reps {
		require.True(t, strings.Contains(r.Status().Err.Error(), "epoch"), r.Status().Err)
		// A failed member serves no checkpoint.
		resp, err := http.Get("http://" + r.ListenAddr() + CheckpointPath(cl.room) + "manifest")
		require.NoError(t, err)
		resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	}
}

// TestDeletedAcknowledgedBatchNoticed (issue 25): a foreign client deletes
// an acknowledged batch of the open channel while the room runs. Nothing
// reads that batch again, and before the running audit the primary
// acknowledged writes for as long as nobody took over. Now every member
// refuses the room by name within 10 s, and the primary stops
// acknowledging.
func TestDeletedAcknowledgedBatchNoticed(t *testing.T) {
	ens := sharedEnsemble(t)
	cl := newCluster(t, ens, nil)
	reps := cl.openN(2)
	p := cl.waitPrimary(30 * time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	last := proposeN(t, ctx, p, 10)
	cl.waitConverged(last, 20*time.Second)

	f := newForger(t, cl)
	_, chPath := f.openChannel()
	names, _, err := f.conn.Children(chPath)
	require.NoError(t, err)
	require.NotEmpty(t, names)
	slices.Sort(names)
	victim := chPath + "/" + names[len(names)/2]
	require.NoError(t, f.conn.Delete(victim, -1))
	deleted := time.Now()

	for _, r := range reps {
		err := waitFailed(t, r, 10*time.Second, logroom.ErrCorrupt)
		require.Contains(t, err.Error(), "deleted from the open channel")
		require.Contains(t, err.Error(), cl.room)
	}
	t.Logf("every member refused the room %v after the deletion", time.Since(deleted).Round(time.Millisecond))
	_, err = p.Propose(ctx, setOp("after", "delete"))
	require.ErrorIs(t, err, ErrFailed, "the primary stops acknowledging")
}

package testnode

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/replica"
	"github.com/roomlog/roomlog/store"
)

func TestRecordingApplierRecordsEveryIndex(t *testing.T) {
	s, err := store.Open(t.TempDir(), &store.Options{Applier: RecordingApplier{}})
	require.NoError(t, err)
	defer s.Close()

	e1, err := SetEntry("p/a", []byte("1"))
	require.NoError(t, err)
	e2, err := SetEntry("p/b", []byte("2"))
	require.NoError(t, err)
	bad := []byte("not an ops entry")
	resps, err := s.Apply([]store.Entry{{Index: 1, Epoch: 3, Data: e1}, {Index: 2, Epoch: 3, Data: bad}, {Index: 3, Epoch: 4, Data: e2}})
	require.NoError(t, err)
	require.NoError(t, store.OpsResult(resps[0]))
	require.ErrorIs(t, store.OpsResult(resps[1]), store.ErrRejected, "the inner applier's response passes through")

	v, err := s.Get([]byte("p/b"))
	require.NoError(t, err)
	require.Equal(t, "2", string(v))

	recs, err := ReadRecords(s, 1, ^uint64(0), 0)
	require.NoError(t, err)
	require.Equal(t, []Record{
		{Index: 1, Epoch: 3, Count: 1, Size: uint32(len(e1)), SHA256: EntrySHA(e1)},
		{Index: 2, Epoch: 3, Count: 1, Size: uint32(len(bad)), SHA256: EntrySHA(bad)},
		{Index: 3, Epoch: 4, Count: 1, Size: uint32(len(e2)), SHA256: EntrySHA(e2)},
	}, recs)

	recs, err = ReadRecords(s, 2, 3, 1)
	require.NoError(t, err)
	require.Len(t, recs, 1)
	require.Equal(t, uint64(2), recs[0].Index)
	recs, err = ReadRecords(s, 3, 2, 0)
	require.NoError(t, err)
	require.Empty(t, recs)
}

// An entry in a request envelope is recorded with its id and its
// payload's hash; a deduplicated copy reaches no applier and leaves no
// record; DecodeLogEntry describes log entries the way records do.
func TestRecordingApplierRecordsRequests(t *testing.T) {
	s, err := store.Open(t.TempDir(), &store.Options{Applier: RecordingApplier{}})
	require.NoError(t, err)
	defer s.Close()

	payload, err := SetEntry("p/r", []byte("1"))
	require.NoError(t, err)
	plain, err := SetEntry("p/q", []byte("2"))
	require.NoError(t, err)
	id := replica.NewRequestID()
	env, err := store.EncodeRequest(store.Request{ID: id, Stamp: 1000, TTL: time.Minute, Window: 100}, payload)
	require.NoError(t, err)
	outs, err := s.ApplyOutcomes([]store.Entry{
		{Index: 1, Epoch: 2, Data: env}, {Index: 2, Epoch: 2, Data: plain}, {Index: 3, Epoch: 2, Data: env},
	})
	require.NoError(t, err)
	require.False(t, outs[0].Duplicate)
	require.True(t, outs[2].Duplicate)
	require.Equal(t, uint64(1), outs[2].Index)

	recs, err := ReadRecords(s, 1, ^uint64(0), 0)
	require.NoError(t, err)
	require.Equal(t, []Record{
		{Index: 1, Epoch: 2, Count: 1, Size: uint32(len(payload)), SHA256: EntrySHA(payload), RequestID: id.String()},
		{Index: 2, Epoch: 2, Count: 1, Size: uint32(len(plain)), SHA256: EntrySHA(plain)},
	}, recs, "no record of the copy at 3")

	for i, data := range [][]byte{env, plain} {
		e := DecodeLogEntry(recs[i].Index, 2, data)
		require.Equal(t, LogEntry{Index: recs[i].Index, Epoch: 2, Size: recs[i].Size, SHA256: recs[i].SHA256, RequestID: recs[i].RequestID}, e)
	}
	require.Equal(t, id.String(), DecodeLogEntry(3, 2, env).RequestID)

	_, err = decodeRecord(1, make([]byte, recordLen-16))
	require.Error(t, err, "format 1 records are not read")
}

// A second application of an index (which the store forbids) would show
// as Count 2: the applier counts what the state already holds.
func TestRecordingApplierCountsDoubleApply(t *testing.T) {
	e, err := SetEntry("p/a", []byte("1"))
	require.NoError(t, err)
	a := RecordingApplier{Inner: reapply{}}
	s2, err := store.Open(t.TempDir(), &store.Options{Applier: a})
	require.NoError(t, err)
	defer s2.Close()
	_, err = s2.Apply([]store.Entry{{Index: 1, Epoch: 1, Data: e}, {Index: 2, Epoch: 1, Data: e}})
	require.NoError(t, err)
	recs, err := ReadRecords(s2, 1, 1, 0)
	require.NoError(t, err)
	require.Equal(t, uint32(2), recs[0].Count)
}

// reapply applies entry 2 as if it were entry 1 again (it writes the
// record of index 1 through the recording applier's own path).
type reapply struct{}

func (reapply) Apply(b store.Batch, e store.Entry) ([]byte, error) {
	if e.Index == 2 {
		return RecordingApplier{}.Apply(b, store.Entry{Index: 1, Epoch: e.Epoch, Data: e.Data})
	}
	return nil, nil
}

func TestRecordingApplierPropagatesErrors(t *testing.T) {
	s, err := store.Open(t.TempDir(), &store.Options{Applier: RecordingApplier{Inner: failing{}}})
	require.NoError(t, err)
	defer s.Close()
	_, err = s.Apply([]store.Entry{{Index: 1, Epoch: 1, Data: []byte("x")}})
	require.Error(t, err)
	require.Zero(t, s.AppliedIndex())
	recs, err := ReadRecords(s, 1, 10, 0)
	require.NoError(t, err)
	require.Empty(t, recs, "nothing recorded when the inner applier fails")
}

type failing struct{}

func (failing) Apply(store.Batch, store.Entry) ([]byte, error) { return nil, errors.New("boom") }

func TestRoleNamesMatchReplica(t *testing.T) {
	require.Equal(t, replica.RolePrimary.String(), RolePrimary)
	require.Equal(t, replica.RoleStandby.String(), RoleStandby)
	require.Equal(t, replica.RoleTakingOver.String(), RoleTakeover)
	require.Equal(t, replica.RoleFailed.String(), RoleFailed)
}

func TestTailLines(t *testing.T) {
	for _, tc := range []struct {
		in    string
		lines int
		want  string
	}{
		{"a\nb\nc\n", 2, "b\nc"},
		{"a\nb\nc", 5, "a\nb\nc"},
		{"", 3, ""},
		{"one", 1, "one"},
	} {
		require.Equal(t, tc.want, tailLines([]byte(tc.in), tc.lines), "%q/%d", tc.in, tc.lines)
	}
}

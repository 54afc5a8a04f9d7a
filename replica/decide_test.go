package replica

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/roomlog/roomlog/logroom"
	"github.com/stretchr/testify/require"
)

// The decisions are pure: these tables need no ZooKeeper.

func TestDecideElection(t *testing.T) {
	now := time.UnixMilli(1_000_000)
	ready := electionFacts{Self: "a", Leader: true, Role: RoleStandby, ApplierReady: true, Now: now}
	with := func(mod func(*electionFacts)) electionFacts {
		f := ready
		mod(&f)
		return f
	}
	fresh := &transferRecord{To: "b", Epoch: 7, Deadline: now.UnixMilli() + 1000}
	cases := []struct {
		name string
		f    electionFacts
		want electionAction
	}{
		{"lowest standby, nothing in the way", ready, elTakeOver},
		{"primary that lost the lowest position", with(func(f *electionFacts) { f.Leader, f.Role = false, RolePrimary }), elEndTerm},
		{"taking over, lost the lowest position", with(func(f *electionFacts) { f.Leader, f.Role = false, RoleTakingOver }), elAbortTakeover},
		{"standby, not lowest", with(func(f *electionFacts) { f.Leader = false }), elNone},
		{"primary, still lowest", with(func(f *electionFacts) { f.Role = RolePrimary }), elNone},
		{"already taking over", with(func(f *electionFacts) { f.Role = RoleTakingOver }), elNone},
		{"failed replica never takes over", with(func(f *electionFacts) { f.Failed = true }), elNone},
		{"failed replica, not ready either", with(func(f *electionFacts) { f.Failed, f.ApplierReady = true, false }), elNone},
		{"no standby tail yet", with(func(f *electionFacts) { f.ApplierReady = false }), elRetryLater},
		{"backing off after a failed takeover", with(func(f *electionFacts) { f.NotBefore = now.Add(time.Millisecond) }), elRetryLater},
		{"back-off just over", with(func(f *electionFacts) { f.NotBefore = now }), elTakeOver},
		{"transfer to another live candidate, same epoch", with(func(f *electionFacts) {
			f.Transfer, f.TransferToLive, f.RoomEpoch = fresh, true, 7
		}), elRequeueTransfer},
		{"transfer to us", with(func(f *electionFacts) {
			rec := *fresh
			rec.To = "a"
			f.Transfer, f.TransferToLive, f.RoomEpoch = &rec, true, 7
		}), elTakeOver},
		{"transfer past its deadline", with(func(f *electionFacts) {
			rec := *fresh
			rec.Deadline = now.UnixMilli()
			f.Transfer, f.TransferToLive, f.RoomEpoch = &rec, true, 7
		}), elTakeOver},
		{"transfer target not a live candidate", with(func(f *electionFacts) {
			f.Transfer, f.TransferToLive, f.RoomEpoch = fresh, false, 7
		}), elTakeOver},
		{"transfer written under an older epoch", with(func(f *electionFacts) {
			f.Transfer, f.TransferToLive, f.RoomEpoch = fresh, true, 8
		}), elTakeOver},
		{"behind compaction, another candidate is not", with(func(f *electionFacts) {
			f.OldestFirst, f.Applied, f.OthersApplied = 101, 50, []uint64{20, 100}
		}), elRequeueBehind},
		{"behind compaction, so is everyone", with(func(f *electionFacts) {
			f.OldestFirst, f.Applied, f.OthersApplied = 101, 50, []uint64{99}
		}), elTakeOver},
		{"exactly at the compaction point", with(func(f *electionFacts) {
			f.OldestFirst, f.Applied, f.OthersApplied = 101, 100, []uint64{500}
		}), elTakeOver},
		{"oldest channel unknown", with(func(f *electionFacts) {
			f.OldestFirst, f.Applied, f.OthersApplied = 0, 0, []uint64{500}
		}), elTakeOver},
		{"a transfer wins over compaction", with(func(f *electionFacts) {
			f.Transfer, f.TransferToLive, f.RoomEpoch = fresh, true, 7
			f.OldestFirst, f.Applied, f.OthersApplied = 101, 50, []uint64{100}
		}), elRequeueTransfer},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want.String(), decideElection(c.f).String())
			// The loop reads the transfer record and epoch exactly when the
			// takeover branch is reachable.
			reach := decideElection(electionFacts{Self: c.f.Self, Leader: c.f.Leader, Role: c.f.Role, Failed: c.f.Failed,
				ApplierReady: c.f.ApplierReady, Now: c.f.Now, NotBefore: c.f.NotBefore}) == elTakeOver
			require.Equal(t, reach, c.f.needsTakeoverFacts())
		})
	}
}

func TestDecideTakeover(t *testing.T) {
	corrupt := fmt.Errorf("wrapped: %w", logroom.ErrCorrupt)
	cases := []struct {
		name        string
		err         error
		before      int
		want        takeoverAction
		wantCorrupt int
	}{
		{"success", nil, 2, toLead, 0},
		{"diverged is fatal", fmt.Errorf("x: %w", logroom.ErrDiverged), 0, toFail, 0},
		{"store failure is fatal", fmt.Errorf("x: %w", fatal(errors.New("pebble: disk full"))), 1, toFail, 1},
		{"first corrupt: retry", corrupt, 0, toRetry, 1},
		{"second corrupt: retry", corrupt, 1, toRetry, 2},
		{"third corrupt in a row: fail", corrupt, confirmCorruptTakeovers - 1, toFail, confirmCorruptTakeovers},
		{"fenced: requeue, corrupt count reset", fmt.Errorf("x: %w", logroom.ErrFenced), 2, toRequeue, 0},
		{"cancelled: stop", context.Canceled, 2, toStop, 0},
		{"connection trouble: retry, count reset", errors.New("zk: connection closed"), 2, toRetry, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			act, n := decideTakeover(c.err, c.before)
			require.Equal(t, c.want, act)
			require.Equal(t, c.wantCorrupt, n)
		})
	}
}

func TestDecidePublish(t *testing.T) {
	now := time.Unix(1000, 0)
	pub := memberData{Role: roleStrStandby, Applied: 10, Checkpoint: 5}
	base := publishFacts{Published: true, Last: pub, Own: pub, Now: now, LastPublish: now.Add(-500 * time.Millisecond),
		SeenMoved: now.Add(-time.Second), Interval: time.Second}
	with := func(mod func(*publishFacts)) publishFacts {
		f := base
		mod(&f)
		return f
	}
	moved := func(f *publishFacts) { f.Own.Applied = 20 }
	cases := []struct {
		name         string
		f            publishFacts
		due, settled bool
	}{
		{"nothing changed", base, false, false},
		{"no node yet", with(func(f *publishFacts) { f.Published = false }), true, false},
		{"role changed", with(func(f *publishFacts) { f.Own.Role = roleStrPrimary }), true, false},
		{"checkpoint changed", with(func(f *publishFacts) { f.Own.Checkpoint = 6 }), true, false},
		{"our CatchUp changed", with(func(f *publishFacts) { f.Own.CatchUp = 30 }), true, false},
		{"who agrees with our hash changed (a quiet room too)", with(func(f *publishFacts) { f.Own.HashAgree = map[string]hashAgreement{"m2": {At: 5, Hash: "h"}} }), true, false},
		{"an agreement moved in a quiet room", with(func(f *publishFacts) {
			f.Last.HashAgree = map[string]hashAgreement{"m2": {At: 4, Hash: "g"}}
			f.Own.HashAgree = map[string]hashAgreement{"m2": {At: 5, Hash: "h"}}
		}), true, false},
		{"moved, settled, budget unspent", with(moved), true, true},
		{"moved, settled, budget spent", with(func(f *publishFacts) { moved(f); f.SettleSpent = true }), false, false},
		{"moved, still moving", with(func(f *publishFacts) { moved(f); f.SeenMoved = now.Add(-time.Millisecond) }), false, false},
		{"moved, published a moment ago", with(func(f *publishFacts) { moved(f); f.LastPublish = now.Add(-50 * time.Millisecond) }), false, false},
		{"moved, interval passed", with(func(f *publishFacts) {
			moved(f)
			f.SettleSpent, f.SeenMoved, f.LastPublish = true, now, now.Add(-time.Second)
		}), true, false},
		{"asked for an index we reached", with(func(f *publishFacts) {
			moved(f)
			f.Asked, f.SettleSpent, f.SeenMoved, f.LastPublish = 15, true, now, now
		}), true, false},
		{"asked for an index we have not reached", with(func(f *publishFacts) {
			moved(f)
			f.Asked, f.SettleSpent, f.SeenMoved, f.LastPublish = 25, true, now, now
		}), false, false},
		{"asked for an index already published", with(func(f *publishFacts) {
			moved(f)
			f.Asked, f.SettleSpent, f.SeenMoved, f.LastPublish = 8, true, now, now
		}), false, false},
		{"our bootstrap hold changed: at once", with(func(f *publishFacts) { f.Own.Hold = 11 }), true, false},
		{"a hold's progress moved, published a moment ago", with(func(f *publishFacts) {
			f.Last.Hold, f.Own.Hold, f.Own.HoldProgress = 11, 11, 500
			f.LastPublish = now.Add(-50 * time.Millisecond)
		}), false, false},
		{"a hold's progress moved, interval passed", with(func(f *publishFacts) {
			f.Last.Hold, f.Own.Hold, f.Own.HoldProgress = 11, 11, 500
			f.SettleSpent, f.LastPublish = true, now.Add(-time.Second)
		}), true, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			due, settled := decidePublish(c.f)
			require.Equal(t, c.due, due, "due")
			require.Equal(t, c.settled, settled, "settled")
		})
	}
}

func TestDecideHold(t *testing.T) {
	t0 := time.Unix(1000, 0)
	stall := 10 * time.Second
	members := map[string]memberData{
		"p":  {ID: "p", Applied: 500},
		"b1": {ID: "b1", Hold: 201, HoldProgress: 7, Applied: 0},
		"b2": {ID: "b2", Hold: 301, HoldProgress: 1, Applied: 0},
	}
	seen := map[string]bootHold{}
	hold, lapsed := decideHold(members, seen, t0, stall, 0, 0)
	require.Equal(t, uint64(201), hold, "first seen: every hold counts, the lowest wins")
	require.Empty(t, lapsed)

	// b1 makes no progress; b2 does.
	b2 := members["b2"]
	b2.HoldProgress = 2
	members["b2"] = b2
	hold, lapsed = decideHold(members, seen, t0.Add(stall-time.Millisecond), stall, 0, 0)
	require.Equal(t, uint64(201), hold, "b1 is not stalled for the whole stall yet")
	require.Empty(t, lapsed)
	hold, lapsed = decideHold(members, seen, t0.Add(stall), stall, 0, 0)
	require.Equal(t, uint64(301), hold, "b1 lapsed; b2 moved within the stall")
	require.Equal(t, []string{"b1"}, lapsed)

	// b1 moves again (its catch-up applies entries): it holds again.
	b1 := members["b1"]
	b1.Hold, b1.HoldProgress, b1.Applied = 205, 204, 204
	members["b1"] = b1
	hold, lapsed = decideHold(members, seen, t0.Add(stall+time.Second), stall, 0, 0)
	require.Equal(t, uint64(205), hold)
	require.Empty(t, lapsed)

	// A hold that is published again with nothing grown (a bootstrap whose
	// fetches keep failing) is no progress: it lapses (b2 keeps going).
	b2 = members["b2"]
	b2.HoldProgress = 3
	members["b2"] = b2
	hold, _ = decideHold(members, seen, t0.Add(stall+time.Second+stall), stall, 0, 0)
	require.Equal(t, uint64(301), hold, "b1's hold, unchanged for the stall, lapsed")
	// A member whose progress went down restarted its bootstrap: fresh.
	b1.HoldProgress = 3
	members["b1"] = b1
	hold, _ = decideHold(members, seen, t0.Add(stall+time.Second+stall+time.Millisecond), stall, 0, 0)
	require.Equal(t, uint64(205), hold, "a restarted bootstrap holds again")

	// A member that leaves, or drops its hold, is forgotten.
	delete(members, "b1")
	b2 = members["b2"]
	b2.Hold = 0
	members["b2"] = b2
	hold, lapsed = decideHold(members, seen, t0.Add(stall+2*time.Second), stall, 0, 0)
	require.Zero(t, hold)
	require.Empty(t, lapsed)
	require.Empty(t, seen)

	// stall 0: holds never lapse.
	members["b3"] = memberData{ID: "b3", Hold: 9}
	decideHold(members, seen, t0, 0, 0, 0)
	hold, lapsed = decideHold(members, seen, t0.Add(time.Hour), 0, 0, 0)
	require.Equal(t, uint64(9), hold)
	require.Empty(t, lapsed)

	// However it progresses, a bootstrap holds for maxHeld at most, from
	// when its hold was first seen; a new bootstrap (progress reset)
	// starts again.
	seen = map[string]bootHold{}
	members = map[string]memberData{"b": {ID: "b", Hold: 50, HoldProgress: 1}}
	decideHold(members, seen, t0, stall, time.Minute, 0)
	for i := 1; i < 6; i++ {
		members["b"] = memberData{ID: "b", Hold: 50, HoldProgress: uint64(1 + i)}
		hold, lapsed = decideHold(members, seen, t0.Add(time.Duration(i)*9*time.Second), stall, time.Minute, 0)
		require.Equal(t, uint64(50), hold, "progressing, within maxHeld")
	}
	members["b"] = memberData{ID: "b", Hold: 51, HoldProgress: 100}
	hold, lapsed = decideHold(members, seen, t0.Add(time.Minute), stall, time.Minute, 0)
	require.Zero(t, hold, "held for maxHeld: lapsed though it progresses")
	require.Equal(t, []string{"b"}, lapsed)
	members["b"] = memberData{ID: "b", Hold: 60, HoldProgress: 1}
	hold, _ = decideHold(members, seen, t0.Add(time.Minute+time.Second), stall, time.Minute, 0)
	require.Equal(t, uint64(60), hold, "a new bootstrap (its progress counter restarted) holds again")

	// A hold below the oldest index the log holds is outrun already: it
	// keeps nothing (else the room would fill for a bootstrap that cannot
	// succeed), even though it progresses.
	hold, lapsed = decideHold(members, seen, t0.Add(time.Minute+2*time.Second), stall, time.Minute, 61)
	require.Zero(t, hold)
	require.Equal(t, []string{"b"}, lapsed)
	hold, _ = decideHold(members, seen, t0.Add(time.Minute+2*time.Second), stall, time.Minute, 60)
	require.Equal(t, uint64(60), hold, "a hold at the oldest index counts")
}

func TestDecideDeletions(t *testing.T) {
	sealed := func(num, first, last uint64, bytes int64) logroom.ChannelInfo {
		return logroom.ChannelInfo{Num: num, FirstIndex: first, LastIndex: last, Sealed: true, Bytes: bytes, Batches: 1}
	}
	chans := []logroom.ChannelInfo{
		sealed(1, 1, 100, 1000), sealed(2, 101, 200, 1000), sealed(3, 201, 300, 1000),
		{Num: 4, FirstIndex: 301, LastIndex: 300},
	}
	per := chans[0].Charged()
	nums := func(ds []deletion) (out []string) {
		for _, d := range ds {
			out = append(out, fmt.Sprintf("%d%s", d.Num, map[bool]string{true: "!", false: ""}[d.Forced]))
		}
		return out
	}
	cases := []struct {
		name                           string
		ckpt, served, minApplied, hold uint64
		retain                         int64
		want                           []string
	}{
		{"all applied, checkpoints cover two", 200, 250, 300, 0, 0, []string{"1", "2"}},
		{"served checkpoint covers less", 300, 150, 300, 0, 0, []string{"1"}},
		{"our checkpoint covers less", 100, 300, 300, 0, 0, []string{"1"}},
		{"nothing covered", 99, 300, 300, 0, 0, nil},
		{"a lagging member holds them", 300, 300, 150, 0, 0, []string{"1"}},
		{"lagging member, room over retention: forced", 300, 300, 150, 0, 2 * per, []string{"1", "2!"}},
		{"over retention only until under it", 300, 300, 0, 0, 3*per + 1, []string{"1!"}},
		{"never the open channel", 400, 400, 400, 0, 0, []string{"1", "2", "3"}},
		{"retention never passes the checkpoints", 100, 100, 0, 0, 1, []string{"1!"}},
		{"a bootstrap's hold stops forced deletion at its channel", 300, 300, 0, 150, 1, []string{"1!"}},
		{"a hold at a channel's last index keeps it", 300, 300, 0, 200, 1, []string{"1!"}},
		{"a hold past a channel lets it go", 300, 300, 0, 201, 1, []string{"1!", "2!"}},
		{"a hold in the first channel keeps everything", 300, 300, 300, 1, 1, nil},
		{"a hold never lets more go than the rest allows", 100, 300, 300, 250, 0, []string{"1"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, nums(decideDeletions(chans, c.ckpt, c.served, c.minApplied, c.hold, c.retain)))
		})
	}
	require.Empty(t, decideDeletions(nil, 100, 100, 100, 0, 0))
	// A channel in the middle is never deleted before an older one.
	gap := []logroom.ChannelInfo{{Num: 1, FirstIndex: 1, LastIndex: 0}, sealed(2, 1, 100, 10)}
	require.Empty(t, decideDeletions(gap, 100, 100, 100, 0, 0))
}

func TestOfferCheckpoint(t *testing.T) {
	for _, tc := range []struct {
		name                               string
		primary, canServe                  bool
		oldestFirst, ckpt, applied, served uint64
		want                               bool
	}{
		{"restored seed: log starts at 91, no checkpoint", true, true, 91, 0, 90, 0, true},
		{"restored seed with an older checkpoint", true, true, 91, 40, 95, 40, true},
		{"covered by our checkpoint", true, true, 91, 90, 95, 90, false},
		{"nothing deleted", true, true, 1, 0, 95, 0, false},
		{"not known yet", true, true, 0, 0, 95, 0, false},
		{"the primary offers although another member serves the start", true, true, 91, 0, 95, 95, true},
		{"a standby does not while another member serves the start", false, true, 91, 0, 95, 90, false},
		// A re-seed's seed left a standby while a member behind it is
		// elected: nobody serves what the log no longer holds.
		{"a standby offers when no member serves the start", false, true, 91, 0, 95, 80, true},
		{"store behind the log's start", true, true, 91, 0, 80, 0, false},
		{"a standby's store behind the log's start", false, true, 91, 0, 80, 0, false},
		{"a standby with no address never offers", false, false, 91, 0, 95, 80, false},
		{"a primary with no address offers", true, false, 91, 0, 95, 80, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, offerCheckpoint(tc.primary, tc.canServe, tc.oldestFirst, tc.ckpt, tc.applied, tc.served))
		})
	}
}

func TestPrimaryOf(t *testing.T) {
	m := func(id, role string, epoch uint64) memberData { return memberData{ID: id, Role: role, Epoch: epoch} }
	for _, tc := range []struct {
		name    string
		members []memberData
		want    string // "" none
	}{
		{"none", []memberData{m("a", roleStrStandby, 3), m("b", roleStrStandby, 3)}, ""},
		{"one", []memberData{m("a", roleStrStandby, 3), m("b", roleStrPrimary, 3)}, "b"},
		{"a deposed primary's data lags: the newest epoch", []memberData{m("a", roleStrPrimary, 4), m("b", roleStrPrimary, 5)}, "b"},
		{"a tie (forged or corrupt data): the smaller id, whatever the map order", []memberData{m("c", roleStrPrimary, 5), m("b", roleStrPrimary, 5)}, "b"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for range 20 { // map order varies between runs
				ms := map[string]memberData{}
				for _, d := range tc.members {
					ms[d.ID] = d
				}
				p, ok := primaryOf(ms)
				require.Equal(t, tc.want != "", ok)
				require.Equal(t, tc.want, p.ID)
			}
		})
	}
}

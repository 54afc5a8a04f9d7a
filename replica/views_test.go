package replica

import (
	"bytes"
	"context"
	"runtime"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"
	"github.com/stretchr/testify/require"

	"github.com/roomlog/roomlog/internal/infra/zkensemble"
	"github.com/roomlog/roomlog/logroom"
)

func viewClient(t *testing.T, ens *zkensemble.Ensemble) *logroom.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := logroom.Dial(ctx, logroom.DialConfig{Servers: ens.Addrs()})
	require.NoError(t, err)
	t.Cleanup(c.Close)
	return c
}

func readView(t *testing.T, c *logroom.Client, base, room string) RoomView {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	v, err := ReadRoomView(ctx, c, base, room)
	require.NoError(t, err)
	return v
}

// TestReadRoomViewForged: without any replica, ReadRoomView of a room whose
// members/, election/, transfer and checkpoints znodes a client wrote
// reports the live members and the candidates in election order (by
// sequence, not by name), and every forged child as foreign with the very
// reason the replicas' acceptance functions give.
func TestReadRoomViewForged(t *testing.T) {
	ens := sharedEnsemble(t)
	c := viewClient(t, ens)
	forger := zkConn(t, ens)
	base, room := "/vf"+newGUID()[:8], "v"+newGUID()[:8]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Not there yet: ErrNoRoom, and nothing created.
	_, err := ReadRoomView(ctx, c, base, room)
	require.ErrorIs(t, err, logroom.ErrNoRoom)
	ok, _, err := forger.Exists(base)
	require.NoError(t, err)
	require.False(t, ok, "ReadRoomView created the base")

	r, err := logroom.OpenRoom(ctx, c, room, logroom.RoomOptions{Base: base})
	require.NoError(t, err)
	v := readView(t, c, base, room)
	require.Equal(t, RoomView{Room: room}, v, "a room no replica opened")

	world := zk.WorldACL(zk.PermAll)
	mk := func(p string, data []byte, ephemeral bool, acl []zk.ACL) {
		t.Helper()
		var flags int32
		if ephemeral {
			flags = zk.FlagEphemeral
		}
		_, err := forger.Create(p, data, flags, acl)
		require.NoError(t, err, p)
	}
	mk(r.Path(membersDir), nil, false, world)
	mk(r.Path(electionDir), nil, false, world)
	type child struct {
		name      string
		data      []byte
		ephemeral bool
		acl       []zk.ACL
	}
	m1 := memberData{V: 1, ID: "m1", Addr: "10.0.0.1:80", Role: roleStrPrimary, Epoch: 3, Applied: 10, Checkpoint: 5, CatchUp: 12}
	m2 := memberData{V: 1, ID: "m2", Role: roleStrTakeover, Epoch: 2, Applied: 9}
	members := []child{
		{"m1", encode(m1), true, world},
		{"m2", encode(m2), true, world},
		{"evil", mustPack(t, memberData{V: 1, ID: "evil", Addr: "10.255.0.1:9", Role: roleStrPrimary, Epoch: 1 << 40}), false, world},
		{"alias", encode(memberData{V: 1, ID: "m1", Addr: "10.255.0.1:9"}), true, world},
		{"bad", []byte("garbage"), true, world},
		{"future", mustPack(t, map[string]any{"v": 2, "id": "future"}), true, world},
		{"badaddr", encode(memberData{V: 1, ID: "badaddr", Addr: "not an address"}), true, world},
		{"deep", append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 64)...), true, world},
		{"locked", encode(memberData{V: 1, ID: "locked"}), true, zk.DigestACL(zk.PermAll, "mallory", "pw")},
	}
	for _, m := range members {
		mk(r.Path(membersDir, m.name), m.data, m.ephemeral, m.acl)
	}
	gA, gB, zero := strings.Repeat("f", 32), strings.Repeat("a", 32), strings.Repeat("0", 32)
	cands := []child{
		{"c-" + gA + "-0000000003", encode(candidateData{V: 1, ID: "m1", Addr: "10.0.0.1:80"}), true, world},
		{"c-" + gB + "-0000000005", encode(candidateData{V: 1, ID: "m2"}), true, world},
		{"c-" + gB + "-0000000010", encode(candidateData{V: 1, ID: "m1"}), true, world}, // a second node of m1
		{"c-" + zero + "-0000000001", encode(candidateData{V: 1, ID: "ghost"}), false, world},
		{"c-" + zero + "--000000001", encode(candidateData{V: 1, ID: "ghost"}), true, world},
		{"c-" + zero + "-0000000002", []byte("garbage"), true, world},
		{"junk", []byte("x"), true, world},
		{"c-" + zero + "-0000000000", encode(candidateData{V: 1, ID: "locked"}), true, zk.DigestACL(zk.PermAll, "mallory", "pw")},
	}
	for _, cd := range cands {
		mk(r.Path(electionDir, cd.name), cd.data, cd.ephemeral, cd.acl)
	}
	deadline := time.Now().Add(time.Hour).UnixMilli()
	mk(r.Path(transferZ), encode(transferRecord{V: 1, From: "m1", To: "m2", Epoch: 3, Deadline: deadline}), true, world)
	mk(r.Path(checkpointsZ), encode(checkpointRecord{V: 1, Index: 100, Epoch: 3, ID: "m1", Addr: "http://h:1/x", Created: 1700000000000}), false, world)

	v = readView(t, c, base, room)
	sid := forger.SessionID()

	// Members: every child by name, live and foreign; the foreign ones
	// carry the reason acceptMember gives.
	var names []string
	for _, m := range v.Members {
		names = append(names, m.Name)
	}
	require.Equal(t, []string{"alias", "bad", "badaddr", "deep", "evil", "future", "locked", "m1", "m2"}, names)
	wantForeign := map[string]string{}
	for _, m := range members {
		p := r.Path(membersDir, m.name)
		if m.name == "locked" {
			wantForeign[p] = viewUnreadable
			continue
		}
		var owner int64
		if m.ephemeral {
			owner = sid
		}
		_, err := acceptMember(m.name, m.data, owner)
		if err != nil {
			wantForeign[p] = err.Error()
		}
	}
	// Candidates: the election recipe classifies them (its reasons are
	// checked below); all but the first three are foreign.
	for _, cd := range cands[3:] {
		wantForeign[r.Path(electionDir, cd.name)] = ""
	}
	gotForeign := map[string]string{}
	for _, f := range v.Foreign {
		gotForeign[f.Path] = f.Reason
		if strings.HasPrefix(f.Path, r.Path(electionDir)+"/") {
			gotForeign[f.Path] = ""
		}
	}
	require.Equal(t, wantForeign, gotForeign)
	for _, f := range v.Foreign {
		gotForeign[f.Path] = f.Reason
	}
	require.Len(t, v.Foreign, 7+5)
	require.True(t, sort.SliceIsSorted(v.Foreign, func(i, j int) bool { return v.Foreign[i].Path < v.Foreign[j].Path }))
	for path, sub := range map[string]string{
		r.Path(membersDir, "evil"):                   "not ephemeral",
		r.Path(membersDir, "alias"):                  `node name "alias" but its data names member "m1"`,
		r.Path(membersDir, "bad"):                    "data does not decode",
		r.Path(membersDir, "future"):                 "unknown format version 2",
		r.Path(membersDir, "deep"):                   "data does not decode",
		r.Path(membersDir, "locked"):                 "unreadable",
		r.Path(electionDir, "junk"):                  "not a sequential node name",
		r.Path(electionDir, "c-"+zero+"--000000001"): "negative sequence",
		r.Path(electionDir, "c-"+zero+"-0000000001"): "not ephemeral",
		r.Path(electionDir, "c-"+zero+"-0000000002"): "data does not decode",
		r.Path(electionDir, "c-"+zero+"-0000000000"): "unreadable",
	} {
		require.Contains(t, gotForeign[path], sub, path)
	}

	byName := map[string]MemberView{}
	for _, m := range v.Members {
		byName[m.Name] = m
		require.Equal(t, r.Path(membersDir, m.Name), m.Path)
		require.Equal(t, gotForeign[m.Path], m.Foreign, m.Name)
	}
	require.Equal(t, MemberView{Name: "m1", Path: r.Path(membersDir, "m1"), Session: sid, Decoded: true,
		MemberStatus: MemberStatus{ID: "m1", Addr: "10.0.0.1:80", Role: RolePrimary, Epoch: 3, Applied: 10, Checkpoint: 5,
			RoomVersionMin: 1, RoomVersionMax: 1},
		CatchUp: 12, CheckpointURL: "http://10.0.0.1:80" + CheckpointPath(room)}, byName["m1"])
	require.Equal(t, MemberView{Name: "m2", Path: r.Path(membersDir, "m2"), Session: sid, Decoded: true,
		MemberStatus: MemberStatus{ID: "m2", Role: RoleTakingOver, Epoch: 2, Applied: 9, RoomVersionMin: 1, RoomVersionMax: 1}}, byName["m2"])
	// A persistent forgery: what it claims is shown, and it is foreign.
	evil := byName["evil"]
	require.True(t, evil.Decoded)
	require.Zero(t, evil.Session)
	require.Equal(t, RolePrimary, evil.Role)
	require.Equal(t, uint64(1<<40), evil.Epoch)
	require.Empty(t, evil.CheckpointURL, "never a bootstrap source")
	require.False(t, byName["bad"].Decoded)
	require.False(t, byName["future"].Decoded)
	require.Equal(t, MemberView{Name: "locked", Path: r.Path(membersDir, "locked"), Unreadable: true, Foreign: viewUnreadable}, byName["locked"])

	require.Equal(t, []MemberStatus{byName["m1"].MemberStatus, byName["m2"].MemberStatus}, v.Live())

	// Candidates: accepted only, by sequence.
	var order []string
	for _, cd := range v.Candidates {
		order = append(order, cd.ID+"@"+cd.Name[len(cd.Name)-10:])
		require.Equal(t, sid, cd.Session)
		require.Equal(t, r.Path(electionDir, cd.Name), cd.Path)
	}
	require.Equal(t, []string{"m1@0000000003", "m2@0000000005", "m1@0000000010"}, order)
	require.Equal(t, "10.0.0.1:80", v.Candidates[0].Addr)
	require.Equal(t, int64(3), v.Candidates[0].Seq)
	require.Equal(t, 1, v.ElectionPlace("m1"))
	require.Equal(t, 2, v.ElectionPlace("m2"))
	require.Equal(t, 0, v.ElectionPlace("ghost"))
	require.Equal(t, 0, v.ElectionPlace("evil"))

	require.Equal(t, &TransferRecord{From: "m1", To: "m2", Epoch: 3, Deadline: deadline, Session: sid}, v.Transfer)
	require.Empty(t, v.TransferErr)
	require.Equal(t, &CheckpointRecord{Index: 100, Epoch: 3, ID: "m1", Addr: "http://h:1/x", Created: 1700000000000,
		URL: "http://h:1/x" + CheckpointPath(room)}, v.Checkpoint)
	require.Empty(t, v.CheckpointErr)

	// Malformed records: not shown, and why.
	for _, tc := range []struct {
		data []byte
		want string
	}{
		{[]byte("garbage"), "does not decode"},
		{mustPack(t, map[string]any{"v": 2, "from": "m1", "to": "m2", "index": 7}), "unknown format version 2"},
		{append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 64)...), "does not decode"},
		{[]byte{0x81, 0xa2, 't', 'o', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'}, "does not decode"},
	} {
		for _, z := range []string{transferZ, checkpointsZ} {
			_, err := forger.Set(r.Path(z), tc.data, -1)
			require.NoError(t, err)
		}
		v = readView(t, c, base, room)
		require.Nil(t, v.Transfer)
		require.Contains(t, v.TransferErr, tc.want)
		require.Nil(t, v.Checkpoint)
		require.Contains(t, v.CheckpointErr, tc.want)
	}
	// Gone: neither record nor error.
	require.NoError(t, forger.Delete(r.Path(transferZ), -1))
	require.NoError(t, forger.Delete(r.Path(checkpointsZ), -1))
	v = readView(t, c, base, room)
	require.Nil(t, v.Transfer)
	require.Empty(t, v.TransferErr)
	require.Nil(t, v.Checkpoint)
	require.Empty(t, v.CheckpointErr)

	_, err = ReadRoomView(ctx, c, base, "a/b")
	require.ErrorIs(t, err, logroom.ErrBadName)
	_, err = ReadRoomView(ctx, c, "relative", room)
	require.ErrorIs(t, err, logroom.ErrBadName)
}

// TestReadRoomViewLive: against running replicas, the view shows what
// they show (members, the primary first in the election line, the
// checkpoint record the primary wrote), and a forged member znode is
// foreign in the view for the reason the replicas give in Status().Foreign.
func TestReadRoomViewLive(t *testing.T) {
	fs := newForeignSetup(t, 2)
	c := viewClient(t, fs.c.ens)
	p := fs.primary
	last := fs.proposeSome(t, 5)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, p.Checkpoint(ctx))

	var v RoomView
	require.Eventually(t, func() bool {
		v = readView(t, c, "", fs.c.room)
		live := v.Live()
		if len(live) != 2 {
			return false
		}
		for _, m := range live {
			if m.Applied < last {
				return false
			}
		}
		return v.Checkpoint != nil
	}, 20*time.Second, 5*time.Millisecond, "both members applied %d and a checkpoint record", last)
	require.Empty(t, v.Foreign)
	live := v.Live()
	status := p.Status().Members
	require.Len(t, status, 2)
	for i, m := range live {
		require.Equal(t, status[i].ID, m.ID)
		require.Equal(t, status[i].Addr, m.Addr)
		require.Equal(t, status[i].Role, m.Role)
		require.NotEmpty(t, m.Addr)
	}
	for _, m := range v.Members {
		require.True(t, m.Decoded)
		require.NotZero(t, m.Session)
		require.Equal(t, "http://"+m.Addr+CheckpointPath(fs.c.room), m.CheckpointURL)
		if m.ID == p.ID() {
			require.Equal(t, RolePrimary, m.Role)
			require.Equal(t, p.Status().Epoch, m.Epoch)
		}
	}
	require.Len(t, v.Candidates, 2)
	require.Equal(t, p.ID(), v.Candidates[0].ID, "the primary leads the election line")
	require.Equal(t, 1, v.ElectionPlace(p.ID()))
	require.Equal(t, p.ID(), v.Checkpoint.ID)
	require.GreaterOrEqual(t, v.Checkpoint.Index, last)
	for _, m := range live {
		if m.ID == p.ID() {
			require.Equal(t, m.Addr, v.Checkpoint.Addr, "the primary records its own address")
		}
	}
	require.Equal(t, "http://"+v.Checkpoint.Addr+CheckpointPath(fs.c.room), v.Checkpoint.URL)
	require.Nil(t, v.Transfer)

	// A forged member znode: the view reports it foreign, for the reason
	// the replicas report it.
	evil := fs.path(membersDir, "evil")
	fs.forge(t, evil, mustPack(t, memberData{V: 1, ID: "evil", Addr: "10.255.0.1:9", Role: roleStrPrimary, Epoch: forgedHuge, Applied: forgedHuge}), false)
	alias := fs.path(membersDir, "alias")
	fs.forge(t, alias, mustPack(t, memberData{V: 1, ID: p.ID(), Addr: "10.255.0.1:9", Role: roleStrPrimary}), true)
	fs.waitSeen(t, evil, []string{"m0", "m1"})
	fs.waitSeen(t, alias, []string{"m0", "m1"})
	v = readView(t, c, "", fs.c.room)
	require.Len(t, v.Live(), 2, "forgeries are not members")
	require.Equal(t, p.ID(), v.Candidates[0].ID)
	got := map[string]string{}
	for _, f := range v.Foreign {
		got[f.Path] = f.Reason
	}
	require.Len(t, got, 2)
	require.Contains(t, got[evil], "not ephemeral")
	require.Contains(t, got[alias], "but its data names member")
	for _, r := range fs.reps {
		for _, path := range []string{evil, alias} {
			var reason string
			for _, f := range r.Status().Foreign {
				if f.Path == path {
					reason = f.Reason
				}
			}
			require.Equal(t, reason, got[path], "%s: %s", r.ID(), path)
		}
	}
}

// TestMemberViewHostile: DescribeMemberZnode, and the transfer and
// checkpoint record views, refuse data whose headers promise far more than
// they carry, containers where scalars belong and deep nesting, allocating
// memory linear in the input only.
func TestMemberViewHostile(t *testing.T) {
	inputs := map[string][]byte{
		"hugeString":  {0x81, 0xa2, 'i', 'd', 0xdb, 0xff, 0xff, 0xff, 0xff, 'x'},
		"hugeBin":     {0x81, 0xa1, 'x', 0xc6, 0xff, 0xff, 0xff, 0xff, 'x'},
		"hugeExt":     {0x81, 0xa1, 'x', 0xc9, 0xff, 0xff, 0xff, 0xff, 0x01, 'x'},
		"hugeMap":     {0xdf, 0xff, 0xff, 0xff, 0xff, 0xa1, 'v', 0x01},
		"hugeArray":   {0xdd, 0xff, 0xff, 0xff, 0xff, 0x01},
		"nestedMap":   {0x81, 0xa1, 'x', 0x81, 0xa1, 'y', 0x01},
		"trailing":    append(encode(memberData{V: 1, ID: "m0"}), 0xc0),
		"deepNesting": append([]byte{0x81, 0xa1, 'x'}, bytes.Repeat([]byte{0x91}, 1<<20)...),
		"garbage":     []byte("garbage"),
		"empty":       {},
	}
	views := map[string]func([]byte) bool{ // true: refused
		"member": func(b []byte) bool {
			return DescribeMemberZnode("r", "/roomlog/r/members/m0", b, 0x1234).Foreign != ""
		},
		"transfer": func(b []byte) bool {
			rec, why := viewTransferRecord(b, 0x1234)
			return rec == nil && why != ""
		},
		"checkpoint": func(b []byte) bool {
			rec, why := viewCheckpointRecord("r", b)
			return rec == nil && why != ""
		},
	}
	for iname, input := range inputs {
		for vname, refused := range views {
			t.Run(vname+"/"+iname, func(t *testing.T) {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				ok := refused(input)
				runtime.ReadMemStats(&after)
				require.True(t, ok, "accepted")
				allocated := after.TotalAlloc - before.TotalAlloc
				require.Less(t, allocated, uint64(64<<10+16*len(input)), "%d input bytes allocated %d", len(input), allocated)
			})
		}
	}
	// What replicas write passes.
	m := DescribeMemberZnode("r", "/roomlog/r/members/m0", encode(memberData{V: 1, ID: "m0", Addr: "https://h:8443/base/",
		Role: roleStrStandby, Epoch: 1 << 40, Applied: 1 << 62, Checkpoint: 7}), 0x1234)
	require.Empty(t, m.Foreign)
	require.Equal(t, MemberStatus{ID: "m0", Addr: "https://h:8443/base/", Role: RoleStandby, Epoch: 1 << 40, Applied: 1 << 62, Checkpoint: 7,
		RoomVersionMin: 1, RoomVersionMax: 1}, m.MemberStatus, "a member that advertises no room versions supports 1..1")
	// Advertised room versions: shown as published; an empty range is foreign.
	rv := DescribeMemberZnode("r", "/roomlog/r/members/m0", encode(memberData{V: 1, ID: "m0", RVMin: 1, RVMax: 2}), 0x1234)
	require.Empty(t, rv.Foreign)
	require.Equal(t, [2]int{1, 2}, [2]int{rv.RoomVersionMin, rv.RoomVersionMax})
	// A later release's added field is ignored (fields are only ever added
	// where ignoring them is right; anything else raises v, below).
	rv = DescribeMemberZnode("r", "/roomlog/r/members/m0", encode(map[string]any{"v": 1, "id": "m0", "later_field": []int{1, 2}}), 0x1234)
	require.Empty(t, rv.Foreign)
	rv = DescribeMemberZnode("r", "/roomlog/r/members/m0", encode(map[string]any{"v": 2, "id": "m0"}), 0x1234)
	require.Contains(t, rv.Foreign, "unknown format version 2")
	for _, bad := range []memberData{{V: 1, ID: "m0", RVMin: 2, RVMax: 1}, {V: 1, ID: "m0", RVMax: 2}, {V: 1, ID: "m0", RVMin: -1, RVMax: 1}} {
		rv = DescribeMemberZnode("r", "/roomlog/r/members/m0", encode(bad), 0x1234)
		require.Contains(t, rv.Foreign, "bad room versions", "%+v", bad)
	}
	require.Equal(t, "https://h:8443/base"+CheckpointPath("r"), m.CheckpointURL)
	rec, why := viewCheckpointRecord("r", encode(checkpointRecord{V: 1, Index: 5, Created: -1, Addr: "bad addr"}))
	require.Empty(t, why)
	require.Equal(t, &CheckpointRecord{Index: 5, Created: -1, Addr: "bad addr"}, rec, "an address that does not parse has no URL")
}

// TestRoomViewPrimary: RoomView.Primary applies primaryOf to the live
// members: the newest epoch among those whose data says primary, ties to
// the smaller id; foreign nodes and other roles never count.
func TestRoomViewPrimary(t *testing.T) {
	mv := func(id string, role Role, epoch uint64, foreign string) MemberView {
		return MemberView{Name: id, Decoded: true, Foreign: foreign, MemberStatus: MemberStatus{ID: id, Role: role, Epoch: epoch}}
	}
	for _, tc := range []struct {
		name    string
		members []MemberView
		id      string
		epoch   uint64
		ok      bool
	}{
		{"none", nil, "", 0, false},
		{"standbys only", []MemberView{mv("a", RoleStandby, 3, ""), mv("b", RoleTakingOver, 4, "")}, "", 0, false},
		{"newest epoch", []MemberView{mv("a", RolePrimary, 3, ""), mv("b", RolePrimary, 4, ""), mv("c", RoleStandby, 9, "")}, "b", 4, true},
		{"tie to the smaller id", []MemberView{mv("b", RolePrimary, 4, ""), mv("a", RolePrimary, 4, "")}, "a", 4, true},
		{"foreign ignored", []MemberView{mv("a", RolePrimary, 3, ""), mv("evil", RolePrimary, 1<<40, "not ephemeral")}, "a", 3, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id, epoch, ok := RoomView{Members: tc.members}.Primary()
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.id, id)
			require.Equal(t, tc.epoch, epoch)
		})
	}
}

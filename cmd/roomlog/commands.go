package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/logroom"
	"github.com/roomlog/roomlog/replica"
)

// ---- rooms ----

type roomRow struct {
	Name     string `json:"name"`
	Created  string `json:"created,omitempty"`
	Epoch    uint64 `json:"epoch"`
	Owner    string `json:"owner,omitempty"`
	Channels int    `json:"channels"`
	// FirstIndex is the first index still in ZooKeeper (the oldest
	// channel's first; 0 without channels).
	FirstIndex uint64 `json:"first_index"`
	Members    int    `json:"members"`
	// Lost: a tombstone stands in the room's place (a member found the
	// room missing, replica package doc "Disaster recovery"); Error holds
	// its text.
	Lost  bool   `json:"lost,omitempty"`
	Error string `json:"error,omitempty"`
}

func cmdRooms(ctx context.Context, in *inspector, o options, _ []string, stdout, stderr io.Writer) error {
	names, _, err := in.c.Conn().Children(in.base)
	if errors.Is(err, zk.ErrNoNode) {
		// No room was ever created under the base: an empty table, not
		// an error (a note on stderr in case --base or --zk is wrong).
		fmt.Fprintf(stderr, "roomlog: no rooms: %s does not exist in ZooKeeper %s (check --base and --zk if you expected some)\n", in.base, o.zk)
		names, err = nil, nil
	}
	if err != nil {
		return zkErr("list "+in.base, err)
	}
	slices.Sort(names)
	rows := []roomRow{}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		row, ok, err := roomSummary(ctx, in, name)
		if err != nil {
			return err
		}
		if ok {
			rows = append(rows, row)
		}
	}
	if o.json {
		return writeJSON(stdout, rows)
	}
	t := newTable(stdout, "ROOM", "CREATED", "EPOCH", "OWNER", "CHANNELS", "FIRST", "MEMBERS")
	for _, r := range rows {
		if r.Lost {
			t.row(r.Name, "LOST: "+r.Error)
			continue
		}
		if r.Error != "" {
			t.row(r.Name, "("+r.Error+")")
			continue
		}
		t.row(r.Name, r.Created, u64(r.Epoch), r.Owner, fmt.Sprint(r.Channels), u64(r.FirstIndex), fmt.Sprint(r.Members))
	}
	return t.flush()
}

// roomSummary describes the child name of the base; ok is false when it is
// not a room. A room the client may not read is a row with Error set.
func roomSummary(ctx context.Context, in *inspector, name string) (roomRow, bool, error) {
	row := roomRow{Name: name}
	rctx, cancel := in.bounded(ctx)
	info, err := logroom.ReadRoomInfo(rctx, in.c, in.base, name)
	cancel()
	switch {
	case errors.Is(err, zk.ErrNoAuth):
		row.Error = "no access: the room's ACL; pass --zk-digest-file or a --zk-tls-cert it names"
		return row, true, nil
	case errors.Is(err, logroom.ErrNoRoom): // deleted since the listing
		return row, false, nil
	case errors.Is(err, logroom.ErrRoomLost) && info.Lost == "": // a tombstone: listed, marked
		row.Lost, row.Error = true, err.Error()
		return row, true, nil
	case errors.Is(err, logroom.ErrRoomLost): // marked lost: listed with its figures
		row.Lost, row.Error = true, err.Error()
	case errors.Is(err, logroom.ErrCorrupt), errors.Is(err, logroom.ErrBadName): // not a room
		return row, false, nil
	case err != nil:
		return row, false, zkErr("", err)
	}
	rv := &roomView{in: in, name: name, root: info.Path}
	row.Created = formatTime(info.Created)
	if em, err := rv.epoch(ctx); err != nil {
		row.Error = err.Error()
	} else {
		row.Epoch, row.Owner = em.Epoch, em.Owner
	}
	if nums, _, err := rv.channelNums(ctx); err != nil {
		row.Error = err.Error()
	} else {
		row.Channels = len(nums)
		if len(nums) > 0 {
			if cm, err := rv.channel(ctx, nums[0]); err == nil {
				row.FirstIndex = cm.FirstIndex
			}
		}
	}
	v, err := rv.replicaView(ctx)
	if err != nil {
		row.Error = err.Error()
	}
	row.Members = len(v.Live())
	return row, true, nil
}

// ---- channels ----

type channelRow struct {
	Num    uint64 `json:"num"`
	First  uint64 `json:"first"`
	Last   uint64 `json:"last"`
	Sealed bool   `json:"sealed"`
	Epoch  uint64 `json:"epoch"`
	// Batches and Bytes are the sealed channel's recorded values; for the
	// open channel, what its chain holds now.
	Batches int    `json:"batches"`
	Bytes   int64  `json:"bytes"`
	Entries uint64 `json:"entries"`
	Note    string `json:"note,omitempty"`
}

type channelsOut struct {
	Room     string       `json:"room"`
	Epoch    uint64       `json:"epoch"`
	Owner    string       `json:"owner"`
	Channels []channelRow `json:"channels"`
}

func cmdChannels(ctx context.Context, in *inspector, o options, args []string, stdout, stderr io.Writer) error {
	rv, _, err := in.room(ctx, args[0])
	if err != nil {
		return err
	}
	em, err := rv.epoch(ctx)
	if err != nil {
		return err
	}
	nums, _, err := rv.channelNums(ctx)
	if err != nil {
		return err
	}
	out := channelsOut{Room: rv.name, Epoch: em.Epoch, Owner: em.Owner, Channels: []channelRow{}}
	for _, num := range nums {
		m, err := rv.channel(ctx, num)
		if errors.Is(err, errChannelGone) {
			continue
		}
		if errors.Is(err, errMalformed) {
			out.Channels = append(out.Channels, channelRow{Num: num, Note: err.Error()})
			continue
		}
		if err != nil {
			return err
		}
		row := channelRow{Num: num, First: m.FirstIndex, Last: m.LastIndex, Sealed: m.Sealed, Epoch: m.Epoch, Batches: m.Batches, Bytes: m.Bytes}
		if !m.Sealed {
			res, err := rv.walkChannel(ctx, num, m, walkOpts{start: m.FirstIndex})
			if errors.Is(err, errChannelGone) {
				continue
			}
			if err != nil {
				return err
			}
			row.Last, row.Batches, row.Bytes = res.end, res.batches, res.bytes
			if len(res.faults) > 0 {
				row.Note = fmt.Sprintf("%d fault(s), run verify", len(res.faults))
			}
		}
		if m.Deleting {
			row.Note = "being deleted"
		}
		row.Entries = row.Last + 1 - row.First
		out.Channels = append(out.Channels, row)
	}
	if o.json {
		return writeJSON(stdout, out)
	}
	owner := out.Owner
	if owner == "" {
		owner = "-"
	}
	fmt.Fprintf(stdout, "room %s  epoch %d  owner %s\n", out.Room, out.Epoch, owner)
	t := newTable(stdout, "NUM", "FIRST", "LAST", "SEALED", "EPOCH", "BATCHES", "BYTES", "ENTRIES", "NOTE")
	for _, r := range out.Channels {
		sealed := "no (open)"
		if r.Sealed {
			sealed = "yes"
		}
		if r.First == 0 { // undecodable meta
			t.row(u64(r.Num), "?", "?", "?", "?", "?", "?", "?", r.Note)
			continue
		}
		t.row(u64(r.Num), u64(r.First), u64(r.Last), sealed, u64(r.Epoch), fmt.Sprint(r.Batches),
			fmt.Sprint(r.Bytes), u64(r.Entries), r.Note)
	}
	return t.flush()
}

// ---- members ----

type memberRow struct {
	ID         string `json:"id"`
	Addr       string `json:"addr"`
	Role       string `json:"role"`
	Epoch      uint64 `json:"epoch"`
	Applied    uint64 `json:"applied"`
	Checkpoint uint64 `json:"checkpoint"`
	// Election is the member's place in the election line (1 = the lowest
	// candidate, primary or about to be; 0 = no candidate node).
	Election int `json:"election"`
	// Observer: the member is an observer (replica.Config.Observer): it
	// holds no candidate node and never leads.
	Observer bool `json:"observer,omitempty"`
	// Deposed: its data says primary, but another live member leads a
	// newer epoch (replica.RoomView.Primary): it was replaced, and it has
	// not learnt so yet or its session has not expired.
	Deposed   bool   `json:"deposed,omitempty"`
	DeposedBy string `json:"deposed_by,omitempty"` // "ID at epoch N": the primary that replaced it
	// Session is the ZooKeeper session holding the ephemeral node (hex;
	// 0x0: a persistent node).
	Session string `json:"session"`
	// Foreign: replicas ignore this node (replica.ReadRoomView classifies
	// it as they do); Error says why.
	Foreign bool   `json:"foreign,omitempty"`
	Error   string `json:"error,omitempty"`
}

type transferOut struct {
	From     string `json:"from"`
	To       string `json:"to"`
	Epoch    uint64 `json:"epoch"`
	Deadline string `json:"deadline"`
}

type membersOut struct {
	Room    string      `json:"room"`
	Members []memberRow `json:"members"`
	// Foreign lists every znode under members/ and election/ that replicas
	// ignore, with the reason (members/ ones are also rows of Members).
	Foreign  []foreignZnode `json:"foreign"`
	Transfer *transferOut   `json:"transfer,omitempty"`
	// TransferError says why a transfer znode that exists is not shown
	// (replica.RoomView.TransferErr).
	TransferError string `json:"transfer_error,omitempty"`
}

// foreignZnode is a child of members/ or election/ that breaks replica's
// acceptance rules (replica/doc.go, "Znodes"): replicas ignore it for
// every decision, and an operator should delete it.
type foreignZnode struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// memberRows turns the replica view's members into rows, sorted by node
// name, and returns the foreign znodes of members/ and of election/ (each
// sorted by path).
func memberRows(v replica.RoomView) (rows []memberRow, memberForeign, electionForeign []foreignZnode) {
	rows = []memberRow{}
	pid, pepoch, hasPrimary := v.Primary()
	isMember := map[string]bool{}
	for _, m := range v.Members {
		isMember[m.Path] = true
		row := memberRow{ID: m.Name, Session: fmt.Sprintf("0x%x", m.Session)}
		if m.Unreadable {
			row.Session = "?"
		}
		if m.Decoded {
			row.Addr, row.Role, row.Epoch, row.Applied, row.Checkpoint = m.Addr, m.Role.String(), m.Epoch, m.Applied, m.Checkpoint
			row.Observer = m.Observer
		}
		if m.Foreign != "" {
			row.Foreign, row.Error = true, m.Foreign
		} else {
			row.Election = v.ElectionPlace(m.ID)
			row.Deposed = m.Decoded && m.Role == replica.RolePrimary && hasPrimary && m.ID != pid
			if row.Deposed {
				row.DeposedBy = fmt.Sprintf("%s at epoch %d", pid, pepoch)
			}
		}
		rows = append(rows, row)
	}
	for _, f := range v.Foreign {
		z := foreignZnode{Path: f.Path, Reason: f.Reason}
		if isMember[f.Path] {
			memberForeign = append(memberForeign, z)
		} else {
			electionForeign = append(electionForeign, z)
		}
	}
	return rows, memberForeign, electionForeign
}

func cmdMembers(ctx context.Context, in *inspector, o options, args []string, stdout, stderr io.Writer) error {
	rv, _, err := in.room(ctx, args[0])
	if err != nil {
		return err
	}
	v, err := rv.replicaView(ctx)
	if err != nil {
		return err
	}
	rows, memberForeign, electionForeign := memberRows(v)
	out := membersOut{Room: rv.name, Members: rows, Foreign: append(memberForeign, electionForeign...), TransferError: v.TransferErr}
	if out.Foreign == nil {
		out.Foreign = []foreignZnode{}
	}
	if tr := v.Transfer; tr != nil {
		out.Transfer = &transferOut{From: tr.From, To: tr.To, Epoch: tr.Epoch, Deadline: formatTime(tr.Deadline)}
	}
	if o.json {
		return writeJSON(stdout, out)
	}
	t := newTable(stdout, "ID", "ADDR", "ROLE", "EPOCH", "APPLIED", "CKPT", "ELECTION", "SESSION", "NOTE")
	for _, r := range rows {
		el := "-"
		if r.Election > 0 {
			el = fmt.Sprint(r.Election)
		}
		note := r.Error
		if r.Foreign {
			note = "FOREIGN (ignored by replicas): " + r.Error
		} else if r.Observer {
			note = "observer (never leads)"
		} else if r.Deposed {
			note = "DEPOSED: replaced by " + r.DeposedBy + " (its session has not expired yet)"
		}
		t.row(r.ID, r.Addr, r.Role, u64(r.Epoch), u64(r.Applied), u64(r.Checkpoint), el, r.Session, note)
	}
	if err := t.flush(); err != nil {
		return err
	}
	for _, f := range electionForeign {
		fmt.Fprintf(stdout, "FOREIGN election znode %s (ignored by replicas): %s\n", f.Path, f.Reason)
	}
	if tr := out.Transfer; tr != nil {
		fmt.Fprintf(stdout, "leadership transfer from %s to %s (epoch %d) binding until %s\n", tr.From, tr.To, tr.Epoch, tr.Deadline)
	}
	if out.TransferError != "" {
		fmt.Fprintf(stdout, "leadership transfer record malformed: %s\n", out.TransferError)
	}
	return nil
}

// ---- checkpoints ----

type checkpointRecordOut struct {
	Index   uint64 `json:"index"`
	Epoch   uint64 `json:"epoch"`
	ID      string `json:"id"`
	Addr    string `json:"addr"`
	Created string `json:"created"`
	URL     string `json:"url,omitempty"`
}

type memberCheckpoint struct {
	ID         string `json:"id"`
	Role       string `json:"role"`
	Applied    uint64 `json:"applied"`
	Checkpoint uint64 `json:"checkpoint"`
	URL        string `json:"url,omitempty"`
}

type checkpointsOut struct {
	Room string `json:"room"`
	// Record is the newest checkpoint the primary recorded (null: none).
	Record *checkpointRecordOut `json:"record"`
	// RecordError explains an unreadable record.
	RecordError string `json:"record_error,omitempty"`
	// OldestIndex is the first index still in ZooKeeper; a member whose
	// applied index is below OldestIndex-1 must bootstrap from a checkpoint.
	OldestIndex uint64 `json:"oldest_index"`
	// Covered lists the sealed channels the record covers (last index <=
	// its index): those the primary may delete once every live member
	// applied them.
	Covered []uint64           `json:"covered_channels"`
	Members []memberCheckpoint `json:"members"`
}

func cmdCheckpoints(ctx context.Context, in *inspector, o options, args []string, stdout, stderr io.Writer) error {
	rv, _, err := in.room(ctx, args[0])
	if err != nil {
		return err
	}
	out := checkpointsOut{Room: rv.name, Covered: []uint64{}, Members: []memberCheckpoint{}}
	v, err := rv.replicaView(ctx)
	if err != nil {
		return err
	}
	if rec := v.Checkpoint; rec != nil {
		out.Record = &checkpointRecordOut{Index: rec.Index, Epoch: rec.Epoch, ID: rec.ID, Addr: rec.Addr,
			Created: formatTime(rec.Created), URL: rec.URL}
	}
	out.RecordError = v.CheckpointErr
	nums, _, err := rv.channelNums(ctx)
	if err != nil {
		return err
	}
	for i, num := range nums {
		m, err := rv.channel(ctx, num)
		if errors.Is(err, errChannelGone) || errors.Is(err, errMalformed) {
			continue
		}
		if err != nil {
			return err
		}
		if i == 0 || out.OldestIndex == 0 {
			out.OldestIndex = m.FirstIndex
		}
		if out.Record != nil && m.Sealed && m.LastIndex <= out.Record.Index {
			out.Covered = append(out.Covered, num)
		}
	}
	for _, m := range v.Members {
		if m.Foreign != "" {
			continue // ignored by replicas: never a bootstrap source (see members)
		}
		out.Members = append(out.Members, memberCheckpoint{ID: m.ID, Role: m.Role.String(), Applied: m.Applied,
			Checkpoint: m.Checkpoint, URL: m.CheckpointURL})
	}
	if o.json {
		return writeJSON(stdout, out)
	}
	switch {
	case out.Record != nil:
		r := out.Record
		fmt.Fprintf(stdout, "room %s: newest recorded checkpoint: index %d epoch %d by %s at %s (created %s)\n",
			rv.name, r.Index, r.Epoch, r.ID, r.Addr, r.Created)
	case out.RecordError != "":
		fmt.Fprintf(stdout, "room %s: checkpoint record unreadable: %s\n", rv.name, out.RecordError)
	default:
		fmt.Fprintf(stdout, "room %s: no checkpoint recorded\n", rv.name)
	}
	covered := "none"
	if len(out.Covered) > 0 {
		var s []string
		for _, n := range out.Covered {
			s = append(s, u64(n))
		}
		covered = strings.Join(s, ", ")
	}
	fmt.Fprintf(stdout, "oldest index in ZooKeeper: %d; sealed channels the record covers: %s\n", out.OldestIndex, covered)
	t := newTable(stdout, "MEMBER", "ROLE", "APPLIED", "CKPT", "URL")
	for _, m := range out.Members {
		t.row(m.ID, m.Role, u64(m.Applied), u64(m.Checkpoint), m.URL)
	}
	return t.flush()
}

package replica

import (
	"fmt"

	"github.com/roomlog/roomlog/logroom"
)

// Channel deletion in the simulation, as logroom's fenced deletion does it
// (Writer.DeleteChannel, logroom/doc.go "Deleting channels"). The primary
// decides (decideDeletions) and hands the channels to its checkpointer,
// which deletes them one write at a time across the simulation's steps:
// for each channel it reads the channels znode's version and refuses
// unless channel N-1 is gone (only the oldest is deleted), then marks the
// channel deleting, deletes its entries a few at a time and deletes the
// channel znode, each write one Multi of the writer's fence (its epoch
// znode's version and its token), a set of the channels znode at the
// version the previous write left, and the write. A lost reply ends the
// deletion (never retried: the next sweep decides again on a fresh
// listing), so does any refusal. The deletion outlives the term that
// decided it, as the checkpointer's goroutine does: only the fence stops
// a deposed primary's. Entries stay where the model keeps them (simLog);
// a channel's znode lives under simChannels.

// simDeletion is one decided deletion in progress.
type simDeletion struct {
	// The writer's fence: its epoch, epoch znode, version and token.
	epoch     uint64
	epochPath string
	epochVer  int32
	token     string
	plan      []uint64 // channels still to delete, oldest first
	// begun: plan[0]'s deletion read the channels znode (fv), the
	// channel's version (cver) and whether it is marked (marked).
	begun  bool
	fv     int32
	cver   int32
	marked bool
	// retry (delRetry bug): a write's reply was lost; the next advance
	// reads the channels znode and the channel again and goes on.
	retry bool
}

// simDelWrite is what one deletion write does.
type simDelWrite int

const (
	delMark simDelWrite = iota
	delEntries
	delZnode
)

func (k simDelWrite) String() string {
	return [...]string{"the mark", "entries", "the channel znode"}[k]
}

// chanPath names channel num's znode.
func chanPath(num uint64) string { return fmt.Sprintf("%s/ch-%010d", simChannels, num) }

// openChannel appends c to the model and creates its znode (the rotation
// that opens it).
func (s *sim) openChannel(c simChannel) {
	s.chans = append(s.chans, c)
	if _, err := s.zk.do(s.admin, simOp{kind: "create", path: chanPath(uint64(len(s.chans) - 1))}); err != nil {
		s.fatalf("open channel %d: %v", len(s.chans)-1, err)
	}
}

// deleteStep advances a deletion by up to three writes: m's when m does
// not lead (a deposed primary's), else the primary's, which decides
// again once its deletion is over (its next sweep).
func (s *sim) deleteStep(m *simMember) {
	if m.del != nil && m.term == nil {
		s.advanceDeletion3(m)
		return
	}
	m = s.primary(m)
	s.advanceDeletion3(m)
	if m.del == nil {
		s.deleteChannels(m)
	}
}

func (s *sim) advanceDeletion3(m *simMember) {
	for k := 0; k < 3 && m.del != nil; k++ {
		s.advanceDeletion(m)
	}
}

// deleteChannels: the primary decides what to delete (decideDeletions,
// with the served checkpoint of live serving members), the simulation
// checks the decision was safe, and the checkpointer begins.
func (s *sim) deleteChannels(m *simMember) {
	if m.term == nil || !s.usable(m) || m.del != nil {
		return
	}
	var infos []logroom.ChannelInfo
	for i, c := range s.chans {
		if c.deleted {
			continue
		}
		infos = append(infos, logroom.ChannelInfo{Num: uint64(i), FirstIndex: c.first, LastIndex: c.last, Sealed: c.last != 0})
	}
	var served, minApplied uint64
	minApplied = ^uint64(0)
	for _, o := range s.ms {
		if !s.live(o) {
			continue
		}
		if o.serves {
			served = max(served, o.ckpt)
		}
		minApplied = min(minApplied, uint64(len(o.applied)))
	}
	if s.bugs.ignoreServed {
		served = m.ckpt
	}
	retain := int64(0)
	if s.rnd.IntN(3) == 0 {
		retain = 1 // over the byte bound: deletion may be forced
	}
	// The holds: decideHold on the live members' data, with what m saw
	// before. A hold that progressed within the stall bound (by the
	// simulation's truth), is not outrun already and has not held for the
	// maximum must hold the log.
	oldest := s.oldestFirst()
	holds := func(o *simMember) bool {
		return o != m && s.live(o) && o.hold != 0 && (oldest == 0 || o.hold >= oldest) &&
			s.now.Sub(o.holdChanged) < simHoldStall && s.now.Sub(o.holdSince) < simHoldMax
	}
	members := map[string]memberData{}
	for _, o := range s.ms {
		if o != m && s.live(o) {
			members[o.id] = memberData{ID: o.id, Hold: o.hold, HoldProgress: o.holdProgress, Applied: uint64(len(o.applied))}
		}
	}
	if m.holdsSeen == nil {
		m.holdsSeen = map[string]bootHold{}
	}
	stall := simHoldStall
	if s.bugs.holdStallShort {
		stall /= 10
	}
	hold, lapsed := decideHold(members, m.holdsSeen, s.now, stall, simHoldMax, oldest)
	s.holdLapses += len(lapsed)
	if s.bugs.ignoreHold {
		hold = 0
	}
	var plan []uint64
	for _, d := range decideDeletions(infos, m.ckpt, served, minApplied, hold, retain) {
		c := &s.chans[d.Num]
		for _, o := range s.ms {
			if holds(o) && c.last >= o.hold {
				s.fatalf("never outrun: channel %d (%d-%d) deleted while %s's live bootstrap hold needs %d", d.Num, c.first, c.last, o.id, o.hold)
			}
		}
		covered := false
		for _, o := range s.ms {
			if o.serves && s.live(o) && o.ckpt >= c.last {
				covered = true
			}
		}
		if !covered {
			s.fatalf("safe deletion: channel %d (%d-%d) deleted, but no live member serves a checkpoint covering it", d.Num, c.first, c.last)
		}
		plan = append(plan, d.Num)
		s.logf("%s decides to delete channel %d (%d-%d) forced=%v", m.id, d.Num, c.first, c.last, d.Forced)
	}
	if len(plan) == 0 {
		return
	}
	t := m.term
	m.del = &simDeletion{epoch: t.epoch, epochPath: t.epochPath, epochVer: t.epochVersion, token: t.token, plan: plan}
	s.advanceDeletion3(m)
}

// advanceDeletion carries out m's deletion's next write (with the reads
// before it).
func (s *sim) advanceDeletion(m *simMember) {
	d := m.del
	if m.silent {
		return // the request waits on a link that holds bytes
	}
	if !m.connected || !s.zk.sessions[m.sid] {
		s.deletionLost(m, "the connection is lost")
		return
	}
	num := d.plan[0]
	path := chanPath(num)
	if d.retry {
		// delRetry: the write is sent again on what the tree holds now.
		d.retry = false
		_, d.fv, _ = s.zk.get(m.sid, simChannels)
		if d.begun {
			data, v, err := s.zk.get(m.sid, path)
			if err != nil {
				s.nextChannel(m)
				return
			}
			d.cver, d.marked = v, string(data) == "deleting"
		}
	}
	if !d.begun {
		// DeleteChannel begins: the fence, only the oldest, the channel
		// (gone: done), sealed (the next channel exists).
		var err error
		if _, d.fv, err = s.zk.get(m.sid, simChannels); err != nil {
			s.fatalf("%s: read %s: %v", m.id, simChannels, err)
		}
		if num > 0 && !s.bugs.delAnyChannel {
			if _, _, err := s.zk.get(m.sid, chanPath(num-1)); err == nil {
				s.delNotOldest++
				s.endDeletion(m, fmt.Sprintf("refused: channel %d still exists; only the oldest channel is deleted", num-1))
				return
			}
		}
		data, v, err := s.zk.get(m.sid, path)
		if err != nil {
			s.nextChannel(m)
			return
		}
		if _, _, err := s.zk.get(m.sid, chanPath(num+1)); err != nil {
			s.endDeletion(m, fmt.Sprintf("refused: channel %d is open", num))
			return
		}
		d.begun, d.cver, d.marked = true, v, string(data) == "deleting"
	}
	if int(num) >= len(s.chans) {
		s.fatalf("%s: channel %d has a znode but the model holds %d channels", m.id, num, len(s.chans))
	}
	c := s.chans[num]
	var ops []simOp
	kind := delMark
	if !d.marked {
		ops = []simOp{{kind: "set", path: path, data: []byte("deleting"), version: d.cver}}
	} else {
		for i := c.first; i <= c.last && len(ops) < 8; i++ {
			if _, _, err := s.zk.get(m.sid, entryPath(i)); err == nil {
				ops = append(ops, simOp{kind: "delete", path: entryPath(i), version: -1})
			}
		}
		kind = delEntries
		if len(ops) == 0 {
			ops, kind = []simOp{{kind: "delete", path: path, version: d.cver}}, delZnode
		}
	}
	var all []simOp
	if !s.bugs.delUnfenced {
		all = append(all, simOp{kind: "check", path: d.epochPath, version: d.epochVer}, simOp{kind: "check", path: d.token, version: 0})
	}
	all = append(all, simOp{kind: "set", path: simChannels, data: []byte("channels"), version: d.fv})
	all = append(all, ops...)
	if !s.calm && s.rnd.IntN(20) == 0 {
		// The reply is lost, after or before the write landed.
		if s.rnd.IntN(2) == 0 && s.zk.multi(m.sid, all...) == nil {
			s.deletionLanded(m, num, kind, len(ops))
		}
		s.deletionLost(m, "a reply is lost")
		return
	}
	if err := s.zk.multi(m.sid, all...); err != nil {
		if s.delFenceGone(d) != "" {
			s.delEpochFenced++
		} else {
			s.delVersionFenced++
		}
		s.endDeletion(m, fmt.Sprintf("fenced: %v", err))
		return
	}
	s.deletionLanded(m, num, kind, len(ops))
	d.fv++
	switch kind {
	case delMark:
		d.marked, d.cver = true, d.cver+1
	case delZnode:
		s.nextChannel(m)
	}
}

// deletionLanded: a write of m's deletion landed. It checks it was behind
// a fence that held, and updates the model.
func (s *sim) deletionLanded(m *simMember, num uint64, kind simDelWrite, n int) {
	d := m.del
	if why := s.delFenceGone(d); why != "" {
		s.fatalf("deletion after its epoch was superseded: %s's deletion of channel %d (a write of %s) landed behind the fence of epoch %d (%s at version %d), but %s",
			m.id, num, kind, d.epoch, d.epochPath, d.epochVer, why)
	}
	s.delWrites++
	c := &s.chans[num]
	switch kind {
	case delMark:
		c.deleting = true
		s.logf("%s marked channel %d (%d-%d) deleting", m.id, num, c.first, c.last)
	case delEntries:
		s.logf("%s deleted %d entries of channel %d", m.id, n, num)
	case delZnode:
		c.deleted = true
		s.logf("%s deleted channel %d (%d-%d)", m.id, num, c.first, c.last)
	}
}

// delFenceGone says why d's writer's fence no longer holds ("": it holds):
// the room re-seeded, its epoch znode moved on, or its token gone (the
// tree restored from a copy older than its term).
func (s *sim) delFenceGone(d *simDeletion) string {
	if d.epochPath != s.epochPath {
		return fmt.Sprintf("the room was re-seeded (epoch znode %s)", s.epochPath)
	}
	if _, v, err := s.zk.get(s.admin, d.epochPath); err != nil || v != d.epochVer {
		return fmt.Sprintf("the epoch znode is at version %d (%v): a newer epoch or the lost marker", v, err)
	}
	if _, _, err := s.zk.get(s.admin, d.token); err != nil {
		return fmt.Sprintf("its writer token %s is gone", d.token)
	}
	return ""
}

// deletionLost: a request of m's deletion got no reply. The deletion ends
// (delRetry: it is retried; delAnyChannel: it goes on with the next
// channel).
func (s *sim) deletionLost(m *simMember, why string) {
	s.delLost++
	switch {
	case s.bugs.delRetry:
		m.del.retry = true
		s.logf("%s: deletion of channel %d: %s; retried", m.id, m.del.plan[0], why)
	case s.bugs.delAnyChannel:
		s.logf("%s: deletion of channel %d: %s; on to the next", m.id, m.del.plan[0], why)
		s.nextChannel(m)
	default:
		s.endDeletion(m, why+"; not retried")
	}
}

// nextChannel: plan[0] is done; the deletion goes on with the next.
func (s *sim) nextChannel(m *simMember) {
	d := m.del
	d.plan, d.begun = d.plan[1:], false
	if len(d.plan) == 0 {
		m.del = nil
	}
}

func (s *sim) endDeletion(m *simMember, why string) {
	s.logf("%s: deletion of channel %d ends: %s", m.id, m.del.plan[0], why)
	m.del = nil
}

// rollbackOdds: a rollback comes once in so many steps of a storm, more
// often while a deletion is under way (the interleaving that left a hole
// in a chaos run: a deletion that goes on in the restored tree).
func (s *sim) rollbackOdds() int {
	for _, m := range s.ms {
		if m.del != nil {
			return 10
		}
	}
	return 150
}

// restartDeletions: ZooKeeper restarts restored from an older copy. A
// deletion with a request in flight loses its reply with the connection
// (three in four inside a channel's deletion, whose writes follow one
// another; one in two between channels); the others send their next
// request to the restored tree (in the new session their client opens).
func (s *sim) restartDeletions() {
	for _, m := range s.ms {
		lost := 2
		if m.del != nil && m.del.begun {
			lost = 3
		}
		if m.del != nil && s.frnd.IntN(4) < lost {
			s.deletionLost(m, "the ensemble restarts")
		}
	}
}

// checkChain: the channel chain has no hole. Deleted channels are a prefix
// of the chain, at most one channel marked deleting follows them, and
// every other channel is whole (deletion takes only the oldest).
func (s *sim) checkChain() {
	state := func(c simChannel) int {
		switch {
		case c.deleted:
			return 2
		case c.deleting:
			return 1
		}
		return 0
	}
	names := [...]string{"whole", "being deleted", "deleted"}
	for i := 1; i < len(s.chans); i++ {
		a, b := s.chans[i-1], s.chans[i]
		if state(b) > state(a) || state(b) == 1 && state(a) == 1 {
			s.fatalf("the channel chain has a hole: channel %d (%d-%d) is %s while channel %d (%d-%d) before it is %s",
				i, b.first, b.last, names[state(b)], i-1, a.first, a.last, names[state(a)])
		}
	}
}

package election

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/roomlog/roomlog/third_party/zk"

	"github.com/roomlog/roomlog/recipe/internal/zkr"
	"github.com/roomlog/roomlog/zkx"
)

// Role is a participant's position in the election.
type Role int

const (
	// Idle: no candidate node right now (being created, or re-created
	// after a session expiry or a deletion).
	Idle Role = iota
	// Follower: a candidate, not the lowest (or lowest but not leading:
	// its term ended while disconnected and it has not re-evaluated).
	Follower
	// Leader: the lowest candidate, with a term (see Term.Active for
	// whether it may act right now).
	Leader
	// Resigned: out of the election for good.
	Resigned
)

func (r Role) String() string {
	switch r {
	case Idle:
		return "idle"
	case Follower:
		return "follower"
	case Leader:
		return "leader"
	case Resigned:
		return "resigned"
	}
	return fmt.Sprintf("Role(%d)", int(r))
}

// Participant is one process's candidacy: it holds one candidate node and
// leads while that node is the lowest. One goroutine (the loop) owns the
// candidacy; StepDown and Designate are requests it carries out.
type Participant struct {
	cfg  Config
	sess *zkr.Session
	log  *slog.Logger
	// line is the candidacy (protected create, listing, predecessor
	// watch); Participant adds the policy.
	line *Line

	reqs   chan request
	cancel context.CancelFunc
	done   chan struct{} // closed when the loop returned

	// Owned by the loop (by Join before it starts, by Resign after it
	// returned).
	seen map[int64]time.Time // designation records by czxid: first seen

	mu sync.Mutex // guards the fields below
	// term is the current term (nil: none, or it ended).
	term     *Term
	role     Role
	node     string
	changed  chan struct{} // closed and replaced on every change of the above
	resigned bool
	// stopped is why the loop stopped on its own (the client closed).
	stopped error
}

type requestKind int

const (
	reqStepDown requestKind = iota
	reqDesignate
)

type request struct {
	kind  requestKind
	to    string // reqDesignate: the candidate id
	reply chan error
}

// Join validates cfg, enters the election (a candidate node at the back
// of the line; the directory is created if missing) and starts the
// participant's goroutine. Resign leaves. When Join fails, it leaves no
// candidate node behind: a create still in flight when ctx ended is
// deleted once its answer comes (Join waits for it, within go-zookeeper's
// request bounds), and one whose answer was lost is looked for and
// deleted within one session timeout more (beyond it, the node goes with
// the session).
func Join(ctx context.Context, cfg Config) (*Participant, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.DesignationTTL == 0 {
		cfg.DesignationTTL = DefaultDesignationTTL
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	log = log.With("recipe", "election", "dir", cfg.Dir, "id", cfg.ID)
	p := &Participant{
		cfg: cfg, sess: zkr.NewSession(cfg.Client), log: log,
		reqs: make(chan request), done: make(chan struct{}),
		seen: map[int64]time.Time{}, changed: make(chan struct{}),
	}
	p.line = newLine(p.sess, LineConfig{Dir: cfg.Dir, ID: cfg.ID, Data: cfg.Data, GUID: cfg.GUID}, log)
	if err := p.line.Enter(ctx); err != nil {
		p.abandon(ctx)
		return nil, fmt.Errorf("election: join %s: %w", cfg.Dir, err)
	}
	name := p.line.Node()
	p.setState(func() { p.node = name; p.role = Follower })
	lctx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	go p.loop(lctx)
	return p, nil
}

// abandon cleans up after a Join that failed: a create still in flight
// deletes its node when its answer comes (Settle waits for that); a node
// whose create's answer was lost is swept, within one session timeout
// even though ctx ended (beyond it, the session's end removes it).
func (p *Participant) abandon(ctx context.Context) {
	p.sess.Settle()
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), p.cfg.Client.SessionTimeout())
	defer cancel()
	if err := p.line.Leave(cctx); err != nil {
		p.log.Warn("election: a failed Join could not sweep its candidate nodes; the session's end will", "err", err)
	}
	p.sess.Close()
}

// ID returns the participant's id.
func (p *Participant) ID() string { return p.cfg.ID }

// GUID returns the guid in every node name of this participant.
func (p *Participant) GUID() string { return p.line.guid }

// Role returns the participant's role now.
func (p *Participant) Role() Role {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.role
}

// Node returns the name of the current candidate node ("" when none).
func (p *Participant) Node() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.node
}

// Term returns the current term, or nil when the participant does not
// lead.
func (p *Participant) Term() *Term {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.term != nil && p.term.hold.Err() == nil {
		return p.term
	}
	return nil
}

// Foreign returns the children of the directory the last listing refused.
func (p *Participant) Foreign() []Foreign { return p.line.Foreign() }

// Await waits until the participant leads and returns its term; ctx bounds
// the wait. After Resign it returns ErrResigned; after the client closed,
// an error wrapping zkx.ErrClosed.
func (p *Participant) Await(ctx context.Context) (*Term, error) {
	for {
		p.mu.Lock()
		t, resigned, stopped, ch := p.term, p.resigned, p.stopped, p.changed
		p.mu.Unlock()
		if resigned {
			return nil, ErrResigned
		}
		if stopped != nil {
			return nil, fmt.Errorf("election: %w", stopped)
		}
		if t != nil && t.hold.Err() == nil {
			return t, nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// StepDown ends the current term (its Done closes first), deletes the
// candidate node and enters again at the back of the line. ErrNotLeader
// without an active term. When ctx ends first the step-down still
// completes in the background.
func (p *Participant) StepDown(ctx context.Context) error {
	return p.do(ctx, request{kind: reqStepDown})
}

// Designate hands leadership to the live candidate whose id is id: the
// leader writes the designation record naming that candidate's guid,
// then steps down. Every candidate that becomes the lowest while the
// record names another live candidate steps behind it (for at most
// Config.DesignationTTL after it first saw the record), so the designated
// one leads next and deletes the record. ErrNotLeader without an active
// term; ErrNoCandidate when no live candidate has that id; nil at once
// when id is the leader's own. It returns once the leader has stepped
// down; observe the directory to see the designated candidate take over.
func (p *Participant) Designate(ctx context.Context, id string) error {
	return p.do(ctx, request{kind: reqDesignate, to: id})
}

func (p *Participant) do(ctx context.Context, r request) error {
	r.reply = make(chan error, 1)
	select {
	case p.reqs <- r:
	case <-p.done:
		p.mu.Lock()
		stopped := p.stopped
		p.mu.Unlock()
		if stopped != nil {
			return fmt.Errorf("election: %w", stopped)
		}
		return ErrResigned
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-r.reply:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Resign leaves the election: it stops the participant's goroutine, ends
// the term (Done closes before the node goes), deletes the candidate node
// and any stray node of ours, bounded by ctx (what remains goes with the
// session). Idempotent.
func (p *Participant) Resign(ctx context.Context) error {
	p.mu.Lock()
	if p.resigned {
		p.mu.Unlock()
		return nil
	}
	p.resigned = true
	p.mu.Unlock()
	p.cancel()
	<-p.done
	p.endTerm(zkr.ErrHoldReleased)
	err := p.line.Leave(ctx)
	p.setState(func() { p.role, p.node = Resigned, "" })
	p.sess.Close()
	if err != nil {
		return fmt.Errorf("election: resign: %w", err)
	}
	return nil
}

// setState changes the guarded state and wakes Await.
func (p *Participant) setState(f func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	f()
	close(p.changed)
	p.changed = make(chan struct{})
}

func (p *Participant) setRole(r Role) {
	p.mu.Lock()
	same := p.role == r
	p.mu.Unlock()
	if !same {
		p.setState(func() { p.role = r })
	}
}

// endTerm ends the current term, if any, with why (the first reason wins)
// and waits for its goroutine.
func (p *Participant) endTerm(why error) {
	p.mu.Lock()
	t := p.term
	p.mu.Unlock()
	if t == nil {
		return
	}
	t.hold.End(why)
	p.setState(func() {
		if p.term == t {
			p.term = nil
		}
		if p.role == Leader {
			p.role = Follower
		}
	})
}

// loop evaluates the election until ctx ends (Resign).
func (p *Participant) loop(ctx context.Context) {
	defer close(p.done)
	var bo zkx.Backoff
	for ctx.Err() == nil {
		if err := p.step(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, zkr.ErrClientClosed) {
				p.log.Warn("election: client closed; participant stopped")
				p.endTerm(zkr.ErrClientClosed)
				p.setState(func() { p.stopped, p.role, p.node = err, Idle, "" })
				return
			}
			p.log.Warn("election: evaluation failed; retrying", "err", err)
			if bo.Wait(ctx) != nil {
				return
			}
			continue
		}
		bo.Reset()
	}
}

// step makes sure we hold a candidate node, reads the line and either
// leads (lowest) or watches its predecessor, then waits for something to
// change.
func (p *Participant) step(ctx context.Context) error {
	if p.line.Node() == "" {
		p.setState(func() { p.node = ""; p.role = Idle })
		if err := p.line.Enter(ctx); err != nil {
			return err
		}
		name := p.line.Node()
		p.setState(func() { p.node = name; p.role = Follower })
	}
	// Read Syncs first after a change of session, before concluding that
	// our node is gone.
	pos, err := p.line.Read(ctx)
	if err != nil {
		return err
	}
	if pos.Mine < 0 {
		p.log.Info("election: entering again")
		p.endTerm(zkr.ErrHoldNodeGone)
		return nil
	}
	cands, idx := pos.Candidates, pos.Mine
	if idx == 0 {
		return p.lead(ctx, cands)
	}
	if p.Term() != nil {
		// Someone sorts before us (a forged but acceptable node).
		p.endTerm(fmt.Errorf("%w: no longer the lowest candidate", zkr.ErrHoldNodeGone))
	}
	p.setRole(Follower)
	// Watch only the predecessor (no herd effect), and our own node.
	predCh, ok, err := p.line.WatchPredecessor(ctx, pos)
	if err != nil || !ok {
		return err
	}
	ok, _, ownCh, err := zkx.ExistsW(ctx, p.sess, p.cfg.Dir+"/"+p.line.Node())
	if err != nil || !ok {
		return err
	}
	sid := p.sess.ID()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-predCh:
			return nil
		case <-ownCh:
			return nil
		case r := <-p.reqs:
			r.reply <- fmt.Errorf("election: %s: %w", kindName(r.kind), ErrNotLeader)
		case _, ok := <-p.sess.Events():
			if !ok {
				return zkr.ErrClientClosed
			}
			if id := p.sess.ID(); id != 0 && id != sid {
				return nil
			}
		}
	}
}

func kindName(k requestKind) string {
	if k == reqDesignate {
		return "designate"
	}
	return "step down"
}

// lead is step for the lowest candidate: honour a designation, or start a
// term (if none runs), then wait until the term ends or a request comes.
func (p *Participant) lead(ctx context.Context, cands []Candidate) error {
	t := p.Term()
	if t == nil {
		rec, err := readDesignation(ctx, p.sess, p.cfg.Dir, p.line.foreign)
		if err != nil {
			return err
		}
		var age time.Duration
		if rec != nil {
			first, ok := p.seen[rec.czxid]
			if !ok {
				first = time.Now()
				clear(p.seen) // one record at a time matters
				p.seen[rec.czxid] = first
			}
			age = time.Since(first)
		}
		live := make(map[string]bool, len(cands))
		for _, c := range cands {
			live[c.GUID] = true
		}
		d := decide(rec, age, p.cfg.DesignationTTL, p.line.guid, live)
		if d.requeue {
			p.log.Info("election: lowest, but leadership is designated to another candidate; stepping behind", "to", rec.To, "to_guid", rec.ToGUID)
			return p.requeue(ctx)
		}
		c := cands[0]
		hold := zkr.StartHold(p.sess, p.cfg.Dir+"/"+c.Node, c.Czxid, c.Session, p.cfg.SuspendGrace, p.log)
		t = &Term{p: p, hold: hold, cand: c}
		p.setState(func() { p.term = t; p.role = Leader })
		p.log.Info("election: leading", "node", c.Node, "token", c.Czxid)
		if d.drop && rec != nil {
			err := zkr.Retry0(ctx, p.sess, func() error {
				return p.sess.Conn().Delete(p.cfg.Dir+"/"+designationName, rec.version)
			})
			if err != nil && !errors.Is(err, zk.ErrNoNode) && !errors.Is(err, zk.ErrBadVersion) {
				p.log.Warn("election: cannot delete the spent designation record", "err", err)
			}
		}
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.Done():
			why := t.hold.Err()
			p.endTerm(why) // record it
			if errors.Is(why, zkr.ErrHoldNodeChanged) {
				// Our node was written by someone else: no guarded write
				// can land on it. Go to the back with a new one.
				p.log.Warn("election: our candidate node was changed by someone else; entering again", "why", why)
				return p.requeue(ctx)
			}
			return nil
		case r := <-p.reqs:
			err := p.serve(ctx, r, t)
			r.reply <- err
			if p.Term() != t {
				return nil
			}
		case _, ok := <-p.sess.Events():
			if !ok {
				return zkr.ErrClientClosed
			}
			// The term's own goroutine follows the session.
		}
	}
}

// serve carries out a request while leading with term t.
func (p *Participant) serve(ctx context.Context, r request, t *Term) error {
	if t.hold.Err() != nil {
		return fmt.Errorf("election: %s: %w", kindName(r.kind), ErrNotLeader)
	}
	if r.kind == reqDesignate {
		if r.to == p.cfg.ID {
			return nil
		}
		names, err := zkx.Children(ctx, p.sess, p.cfg.Dir)
		if err != nil {
			return fmt.Errorf("election: designate: %w", err)
		}
		cands, err := p.line.lister.read(ctx, names)
		if err != nil {
			return fmt.Errorf("election: designate: %w", err)
		}
		var to *Candidate
		for i := range cands {
			if cands[i].ID == r.to && cands[i].GUID != p.line.guid {
				to = &cands[i]
				break
			}
		}
		if to == nil {
			return fmt.Errorf("election: designate %q: %w", r.to, ErrNoCandidate)
		}
		if err := p.writeDesignation(ctx, t, *to); err != nil {
			return fmt.Errorf("election: designate %q: %w", r.to, err)
		}
		p.log.Info("election: designated a successor; stepping down", "to", to.ID, "to_guid", to.GUID)
	}
	if err := p.requeue(ctx); err != nil {
		return fmt.Errorf("election: %s: %w", kindName(r.kind), err)
	}
	return nil
}

// writeDesignation creates the record (EPHEMERAL, ours), replacing any.
func (p *Participant) writeDesignation(ctx context.Context, t *Term, to Candidate) error {
	rp := p.cfg.Dir + "/" + designationName
	data := zkr.Encode(designationData{V: formatV1, From: p.cfg.ID, FromGUID: p.line.guid, To: to.ID, ToGUID: to.GUID})
	for attempt := 0; attempt < 5; attempt++ {
		ok, st, err := zkx.Exists(ctx, p.sess, rp)
		if err != nil {
			return err
		}
		var ops []any
		if ok {
			ops = append(ops, &zk.DeleteRequest{Path: rp, Version: st.Version})
		}
		ops = append(ops, &zk.CreateRequest{Path: rp, Data: data, Acl: p.sess.ACL(), Flags: zk.FlagEphemeral})
		// Guarded by our term: only a leader writes the record.
		_, err = t.hold.Multi(ctx, ops...)
		switch {
		case err == nil:
			return nil
		case errors.Is(err, zkr.ErrGuardFailed), errors.Is(err, zkr.ErrHoldEnded):
			return fmt.Errorf("%w: %w", ErrLeadershipLost, err)
		case zkx.IsConnLoss(err):
			// Look again: the Multi may have landed (then Exists finds our
			// record, and replacing it with the same content is harmless).
		case errors.Is(err, zk.ErrNodeExists), errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
			// Raced with another writer of the record: look again.
		default:
			return err
		}
	}
	return errors.New("the designation record kept changing")
}

// requeue ends any term (its Done closes before the node goes), deletes
// our node and lets the next step create a new one at the back.
func (p *Participant) requeue(ctx context.Context) error {
	p.endTerm(zkr.ErrHoldReleased)
	if name := p.line.Node(); name != "" {
		if err := p.line.deleteNode(ctx, name); err != nil {
			return err
		}
		p.line.mine = ""
	}
	p.setState(func() { p.node = ""; p.role = Idle })
	return nil
}

package replica

import (
	"errors"
	"fmt"
	"log/slog"
	"path"

	"github.com/go-zookeeper/zk"
)

// election is this replica's side of the leader election under
// /<room>/election. It is owned by the run loop (Open uses it before the
// loop starts); nothing in it is safe for concurrent use.
//
// Every candidate node this replica creates carries the same guid (one per
// Replica), so a create whose answer was lost to a connection drop — or that
// was still queued when the session expired and then ran in the new session
// — is recognised by listing the children: nodes with our guid are ours; we
// keep one and delete the others (Curator's protection mode, generalised).
//
// Only children acceptCandidate accepts count (for the order, the
// predecessor watch, the primary's identity, isLiveCandidate, ...); a node
// carrying our guid counts as ours only if our session holds it. Everything
// else is reported as foreign and otherwise ignored: never watched, adopted
// or deleted.
type election struct {
	conn *zk.Conn
	acl  []zk.ACL
	dir  string // /<base>/<room>/election
	guid string
	data []byte // encoded candidateData
	log  *slog.Logger

	// mine is the name of our candidate node as far as we know ("" = none).
	mine string
	// maybe: a create's outcome is unknown (connection lost mid-create); the
	// next ensure lists the children before creating again.
	maybe bool
	// drop: names of our own nodes we tried to delete without knowing if it
	// happened (re-queue or resign hit a connection loss).
	drop map[string]bool
	// datas caches accepted candidates' data by node name, as of the last
	// listing (candidate data never changes; a name that leaves a listing
	// is dropped, so a forged re-creation is checked afresh).
	datas map[string]candidateData
	// foreign: the children the last listing did not accept.
	foreign *foreignSet
}

func newElection(conn *zk.Conn, acl []zk.ACL, dir, guid string, d candidateData, log *slog.Logger) *election {
	d.V = formatVersion1
	return &election{
		conn: conn, acl: acl, dir: dir, guid: guid, data: encode(d), log: log,
		drop: map[string]bool{}, datas: map[string]candidateData{},
		foreign: newForeignSet(log, "election candidate"),
	}
}

// electionView is the result of one evaluation.
type electionView struct {
	cands  []candidate // ascending sequence
	mine   int         // index of our node in cands
	leader bool        // we are the lowest candidate
	// watch fires when our predecessor changes (nil when leader).
	watch <-chan zk.Event
}

func (v electionView) lowest() (candidate, bool) {
	if len(v.cands) == 0 {
		return candidate{}, false
	}
	return v.cands[0], true
}

// sessionReset forgets everything tied to the old session: its ephemeral
// nodes are gone.
func (e *election) sessionReset() {
	e.mine = ""
	e.maybe = false
	clear(e.drop)
}

// ensure makes sure we hold a candidate node (protected create).
func (e *election) ensure() error {
	if e.mine != "" {
		return nil
	}
	if e.maybe || len(e.drop) > 0 {
		if _, err := e.list(); err != nil {
			return err
		}
		if e.mine != "" {
			return nil
		}
	}
	p, err := e.conn.Create(e.dir+"/"+candidatePfx+e.guid+"-", e.data, zk.FlagEphemeral|zk.FlagSequence, e.acl)
	if err != nil {
		if isConnErr(err) {
			e.maybe = true
		}
		return fmt.Errorf("create candidate: %w", err)
	}
	e.mine = path.Base(p)
	e.maybe = false
	e.log.Debug("election: candidate created", "node", e.mine)
	return nil
}

// list reads the candidates — every child's data and Stat, keeping only
// those acceptCandidate accepts — and reconciles our own nodes: keeps mine
// (or adopts one when a create's outcome was unknown) and deletes the
// others.
func (e *election) list() ([]candidate, error) {
	names, _, err := e.conn.Children(e.dir)
	if err != nil {
		return nil, fmt.Errorf("list candidates: %w", err)
	}
	all := make([]candidate, 0, len(names))
	datas := make(map[string]candidateData, len(names))
	foreign := map[string]string{}
	for _, n := range names {
		p := e.dir + "/" + n
		b, st, err := e.conn.Get(p)
		switch {
		case errors.Is(err, zk.ErrNoNode):
			continue
		case errors.Is(err, zk.ErrNoAuth):
			foreign[p] = "unreadable: its ACL denies this replica READ"
			continue
		case err != nil:
			return nil, fmt.Errorf("read candidate %s: %w", n, err)
		}
		c, d, err := e.accept(n, b, st)
		if err != nil {
			foreign[p] = err.Error()
			continue
		}
		all = append(all, c)
		datas[n] = d
	}
	sortBySeq(all)
	e.foreign.Replace(foreign)
	e.datas = datas
	var ours []candidate
	mineSeen := false
	for _, c := range all {
		if c.GUID == e.guid {
			ours = append(ours, c)
			if c.Name == e.mine {
				mineSeen = true
			}
		}
	}
	if e.mine != "" && !mineSeen {
		e.log.Info("election: our candidate node is gone", "node", e.mine)
		e.mine = ""
	}
	if e.mine == "" && e.maybe {
		// Adopt the newest of ours that we did not mean to delete.
		for i := len(ours) - 1; i >= 0; i-- {
			if !e.drop[ours[i].Name] {
				e.mine = ours[i].Name
				e.log.Debug("election: adopted candidate after connection loss", "node", e.mine)
				break
			}
		}
		e.maybe = false
	}
	out := all[:0:0]
	for _, c := range all {
		if c.GUID == e.guid && c.Name != e.mine {
			// A duplicate of ours (lost create, ghost from a queued request,
			// or a re-queue whose delete we could not confirm).
			if err := e.conn.Delete(e.dir+"/"+c.Name, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
				return nil, fmt.Errorf("delete duplicate candidate %s: %w", c.Name, err)
			}
			delete(e.drop, c.Name)
			delete(e.datas, c.Name)
			continue
		}
		out = append(out, c)
	}
	clear(e.drop)
	return out, nil
}

// evaluate ensures our candidacy and reports our position. When we are not
// the lowest it watches only our predecessor (no herd effect).
func (e *election) evaluate() (electionView, error) {
	for attempt := 0; attempt < 5; attempt++ {
		if err := e.ensure(); err != nil {
			return electionView{}, err
		}
		cands, err := e.list()
		if err != nil {
			return electionView{}, err
		}
		idx := -1
		for i, c := range cands {
			if c.Name == e.mine {
				idx = i
				break
			}
		}
		if idx < 0 {
			continue // ours vanished (deleted under us): create again
		}
		v := electionView{cands: cands, mine: idx, leader: idx == 0}
		if v.leader {
			return v, nil
		}
		pred := cands[idx-1]
		ok, _, ch, err := e.conn.ExistsW(e.dir + "/" + pred.Name)
		if err != nil {
			return electionView{}, fmt.Errorf("watch predecessor %s: %w", pred.Name, err)
		}
		if !ok {
			continue // predecessor left between list and watch: re-list
		}
		v.watch = ch
		return v, nil
	}
	return electionView{}, errors.New("election: candidates kept changing; retrying")
}

// accept is acceptCandidate plus: a node carrying our guid is ours only if
// our current session holds it.
func (e *election) accept(name string, data []byte, st *zk.Stat) (candidate, candidateData, error) {
	c, d, err := acceptCandidate(name, data, st.EphemeralOwner)
	if err != nil {
		return c, d, err
	}
	if sid := e.conn.SessionID(); c.GUID == e.guid && st.EphemeralOwner != sid {
		return candidate{}, candidateData{}, fmt.Errorf("carries this replica's guid but is held by session 0x%x, not ours (0x%x)", st.EphemeralOwner, sid)
	}
	return c, d, nil
}

// dataOf returns an accepted candidate's data (cached by the last
// listing). ok is false when the node is gone, unreadable or foreign.
func (e *election) dataOf(name string) (candidateData, bool, error) {
	if d, ok := e.datas[name]; ok {
		return d, true, nil
	}
	p := e.dir + "/" + name
	b, st, err := e.conn.Get(p)
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrNoAuth) {
		return candidateData{}, false, nil
	}
	if err != nil {
		return candidateData{}, false, err
	}
	_, d, err := e.accept(name, b, st)
	if err != nil {
		e.foreign.Report(p, err.Error())
		return candidateData{}, false, nil
	}
	e.datas[name] = d
	return d, true, nil
}

// prune drops cached data of candidates no longer listed.
func (e *election) prune(cands []candidate) {
	if len(e.datas) <= 2*len(cands)+8 {
		return
	}
	live := make(map[string]bool, len(cands))
	for _, c := range cands {
		live[c.Name] = true
	}
	for n := range e.datas {
		if !live[n] {
			delete(e.datas, n)
		}
	}
}

// requeue moves us to the back of the line: delete our node, create anew.
func (e *election) requeue() error {
	if err := e.resign(); err != nil {
		return err
	}
	return e.ensure()
}

// resign deletes our candidate node (best effort across connection loss:
// an unconfirmed delete is remembered and finished by the next list).
func (e *election) resign() error {
	if e.mine == "" {
		return nil
	}
	name := e.mine
	e.mine = ""
	err := e.conn.Delete(e.dir+"/"+name, -1)
	if err == nil || errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	e.drop[name] = true
	e.maybe = false
	return fmt.Errorf("delete candidate %s: %w", name, err)
}

package replica

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"time"

	"github.com/go-zookeeper/zk"
)

// membership is this replica's side of /<room>/members: its own ephemeral
// node and a cache of every member's data, kept fresh by watches (a children
// watch on the directory, a data watch per member) and by diffing each
// listing against the previous one, so no join or leave is missed even
// though go-zookeeper's watches fire once. Only children acceptMember
// accepts are members; the others are reported as foreign and ignored.
// Owned by the run loop (foreign has its own lock, for Status).
type membership struct {
	conn *zk.Conn
	acl  []zk.ACL
	dir  string // /<base>/<room>/members
	id   string
	log  *slog.Logger

	// own: our node exists in the current session (as far as we know).
	own bool
	// published is the data last written to our node, and last the
	// member data it encodes (the loop compares against it every tick).
	published []byte
	last      memberData
	// known caches member data by member id (= node name).
	known map[string]memberData
	// dataWatched: a data watch is armed for the member.
	dataWatched map[string]bool
	// listed: the names seen by the last children listing.
	listed map[string]bool
	// childWatched: a children watch is armed.
	childWatched bool
	// foreign: listed children that break the acceptance rules
	// (acceptMember); never in known.
	foreign *foreignSet
}

func newMembership(conn *zk.Conn, acl []zk.ACL, dir, id string, log *slog.Logger) *membership {
	return &membership{
		conn: conn, acl: acl, dir: dir, id: id, log: log,
		known: map[string]memberData{}, dataWatched: map[string]bool{}, listed: map[string]bool{},
		foreign: newForeignSet(log, "member"),
	}
}

// sessionReset forgets what the expired session held: our node is gone and
// every watch was invalidated.
func (m *membership) sessionReset() {
	m.own = false
	m.published, m.last = nil, memberData{}
	m.childWatched = false
	clear(m.dataWatched)
}

func (m *membership) path() string { return m.dir + "/" + m.id }

// errStaleOwner: our id's node exists and belongs to another session.
type errStaleOwner struct{ owner int64 }

func (e errStaleOwner) Error() string {
	if e.owner == 0 {
		return "member node exists as a persistent znode (foreign: not a live member's; an operator must delete it)"
	}
	return fmt.Sprintf("member node held by session 0x%x", e.owner)
}

// publish creates our node or updates its data to d.
func (m *membership) publish(d memberData) error {
	d.V = formatVersion1
	data := encode(d)
	if m.own {
		if bytes.Equal(data, m.published) {
			return nil
		}
		_, err := m.conn.Set(m.path(), data, -1)
		if err == nil {
			m.published, m.last = data, d
			return nil
		}
		if !errors.Is(err, zk.ErrNoNode) {
			return fmt.Errorf("update member node: %w", err)
		}
		m.own = false
	}
	_, err := m.conn.Create(m.path(), data, zk.FlagEphemeral, m.acl)
	if err == nil {
		m.own, m.published, m.last = true, data, d
		return nil
	}
	if !errors.Is(err, zk.ErrNodeExists) {
		return fmt.Errorf("create member node: %w", err)
	}
	// Ours (a create that landed although its answer was lost, or one that
	// ran in this session after the previous one expired) or someone else's.
	// Sync first: after a session expiry the new session may read from a
	// server that has not yet seen our old session's node deleted.
	if _, err := m.conn.Sync(m.path()); err != nil {
		return fmt.Errorf("sync member node: %w", err)
	}
	_, st, err := m.conn.Get(m.path())
	if errors.Is(err, zk.ErrNoNode) {
		return fmt.Errorf("create member node: raced with a delete; retrying")
	}
	if err != nil {
		return fmt.Errorf("read member node: %w", err)
	}
	if st.EphemeralOwner != m.conn.SessionID() {
		return errStaleOwner{owner: st.EphemeralOwner}
	}
	m.own = true
	if _, err := m.conn.Set(m.path(), data, -1); err != nil {
		return fmt.Errorf("update member node: %w", err)
	}
	m.published, m.last = data, d
	return nil
}

// join publishes d, waiting up to wait for a node of our id held by another
// session to disappear (our own previous incarnation, killed less than a
// session timeout ago). A node still held after that belongs to a live
// process: ErrDuplicateID; so is, at once, a persistent node of our id.
func (m *membership) join(ctx context.Context, d memberData, wait time.Duration) error {
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	for {
		err := m.publish(d)
		var stale errStaleOwner
		if !errors.As(err, &stale) {
			return err
		}
		if stale.owner == 0 {
			// A persistent node (foreign): no session expiry removes it.
			return fmt.Errorf("%w: %q (node %s: %v)", ErrDuplicateID, m.id, m.path(), stale)
		}
		ok, _, ch, werr := m.conn.ExistsW(m.path())
		if werr != nil {
			return fmt.Errorf("watch member node: %w", werr)
		}
		if !ok {
			continue
		}
		m.log.Info("membership: waiting for a member node of our id held by another session", "id", m.id, "owner", fmt.Sprintf("0x%x", stale.owner))
		select {
		case <-ch:
		case <-deadline.C:
			return fmt.Errorf("%w: %q (node %s held by session 0x%x for longer than the session timeout)", ErrDuplicateID, m.id, m.path(), stale.owner)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// resign deletes our node (on Close).
func (m *membership) resign() error {
	if !m.own {
		return nil
	}
	m.own = false
	err := m.conn.Delete(m.path(), -1)
	if err == nil || errors.Is(err, zk.ErrNoNode) {
		return nil
	}
	return err
}

// refreshChildren lists the members with a watch and diffs against the last
// listing: it returns the watch and the names whose data must be (re)read.
func (m *membership) refreshChildren() (<-chan zk.Event, []string, error) {
	names, _, ch, err := m.conn.ChildrenW(m.dir)
	if err != nil {
		return nil, nil, fmt.Errorf("list members: %w", err)
	}
	m.childWatched = true
	now := make(map[string]bool, len(names))
	var need []string
	for _, n := range names {
		now[n] = true
		if !m.listed[n] || !m.dataWatched[n] {
			need = append(need, n)
		}
	}
	for n := range m.listed {
		if !now[n] {
			m.log.Debug("membership: member left", "id", n)
			delete(m.known, n)
			m.foreign.Drop(m.dir + "/" + n)
		}
	}
	for n := range now {
		if !m.listed[n] {
			m.log.Debug("membership: member joined", "id", n)
		}
	}
	m.listed = now
	sort.Strings(need)
	return ch, need, nil
}

// refreshMember reads one member's data with a watch. The watch is nil when
// the node is gone (the children watch reports that).
func (m *membership) refreshMember(name string) (<-chan zk.Event, error) {
	p := m.dir + "/" + name
	b, st, ch, err := m.conn.GetW(p)
	if errors.Is(err, zk.ErrNoNode) {
		delete(m.known, name)
		delete(m.dataWatched, name)
		m.foreign.Drop(p)
		return nil, nil
	}
	if errors.Is(err, zk.ErrNoAuth) {
		// No watch was armed: re-read at the next listing.
		delete(m.known, name)
		m.foreign.Report(p, "unreadable: its ACL denies this replica READ")
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read member %s: %w", name, err)
	}
	m.dataWatched[name] = true
	d, err := acceptMember(name, b, st.EphemeralOwner)
	if err != nil {
		delete(m.known, name)
		m.foreign.Report(p, err.Error())
		return ch, nil
	}
	m.foreign.Drop(p)
	m.known[name] = d
	return ch, nil
}

// snapshot returns the cached members sorted by id.
func (m *membership) snapshot() []MemberStatus {
	out := make([]MemberStatus, 0, len(m.known))
	for _, d := range m.known {
		out = append(out, MemberStatus{ID: d.ID, Addr: d.Addr, Role: parseRole(d.Role), Epoch: d.Epoch, Applied: d.Applied, Checkpoint: d.Checkpoint})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out
}

// readMembers reads every member's data afresh (no watches): used where a
// stale cache would be unsafe or slow (deletion, bootstrap source choice).
// Only accepted members are returned (by id); foreign children are skipped
// (the run loop's membership view reports them).
func readMembers(conn *zk.Conn, dir string) (map[string]memberData, error) {
	names, _, err := conn.Children(dir)
	if err != nil {
		return nil, fmt.Errorf("list members: %w", err)
	}
	out := make(map[string]memberData, len(names))
	for _, n := range names {
		b, st, err := conn.Get(dir + "/" + n)
		if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrNoAuth) {
			continue // gone, or foreign (unreadable)
		}
		if err != nil {
			return nil, fmt.Errorf("read member %s: %w", n, err)
		}
		d, err := acceptMember(n, b, st.EphemeralOwner)
		if err != nil {
			continue
		}
		out[n] = d
	}
	return out, nil
}
